"""Where a batch writes: the predictions file and, with an output directory, the run's files.

Layout of `--out-dir DIR`:
    DIR/predictions.jsonl          one record per finished problem (append-only, see records.py)
    DIR/summary.json               the summary contract, rewritten at the end of each session
    DIR/manifest.json              config (api key redacted), the results-changing `settings`
                                   (lcb.runs.identity), data source (with checksums), and per
                                   session: command, versions, git state, containment, rows left
                                   out
    DIR/transcripts/<id>.json.gz   one gzip-compressed JSON transcript per problem (see
                                   `transcript_name` for ids that are not file-name safe)
    DIR/.lock                      held while a batch runs (see lcb.runs.lock)

With `--out FILE.jsonl` only the predictions file is written. Whole-file writes go through
`lcb.io.atomic_writer` (a synced temporary file, a rename, a synced folder), so a kill never
leaves a half-written JSON file behind, and a failed write (a full disk) leaves the old file
whole and no temporary file; `output_failure` words such an `OSError` for the console.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from lcb.io import atomic_writer, json_text, write_json, write_text
from lcb.runs.records import read_records, record_key

PREDICTIONS = "predictions.jsonl"
SET_ASIDE_SUFFIX = ".errors.jsonl"
DUPLICATES_SUFFIX = ".duplicates.jsonl"
_SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
_HASHED = re.compile(r".*-[0-9a-f]{12}")  # ends like a hashed name: such an id is hashed too
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")
_PREFIX_CHARS = 80
_PACKAGES = ("langgraph", "httpx", "aiohttp", "langchain-core", "pydantic")


class OutputError(ValueError):
    """The requested output location cannot be used as asked. The message says what to do."""


@dataclass(frozen=True)
class RunPaths:
    """The files of one batch. `out_dir` is None when only a predictions file was asked for."""

    predictions: Path
    out_dir: Path | None = None

    @classmethod
    def choose(cls, *, out: Path | None, out_dir: Path | None, default_dir: Path) -> RunPaths:
        """`--out FILE` or `--out-dir DIR` (not both); neither means `default_dir`."""
        if out is not None and out_dir is not None:
            raise OutputError("pass either --out FILE.jsonl or --out-dir DIR, not both")
        if out is not None:
            if out.exists() and out.is_dir():
                raise OutputError(f"--out {out} is a directory; use --out-dir for a directory")
            return cls(predictions=out)
        directory = out_dir if out_dir is not None else default_dir
        if directory.exists() and not directory.is_dir():
            raise OutputError(f"--out-dir {directory} exists and is not a directory")
        return cls(predictions=directory / PREDICTIONS, out_dir=directory)

    @property
    def summary(self) -> Path | None:
        return self.out_dir / "summary.json" if self.out_dir else None

    @property
    def manifest(self) -> Path | None:
        return self.out_dir / "manifest.json" if self.out_dir else None

    @property
    def transcripts(self) -> Path | None:
        return self.out_dir / "transcripts" if self.out_dir else None

    def transcript(self, problem_id: str, sample: int = 0) -> Path | None:
        """The transcript file of one problem's sample (see `transcript_name`): sample 0's
        where a one-sample batch always put it, sample k's in `sample_<k>/` beside it."""
        if self.transcripts is None:
            return None
        folder = self.transcripts if sample == 0 else self.transcripts / f"sample_{sample}"
        return folder / transcript_name(problem_id)


def transcript_name(problem_id: str) -> str:
    """A file name for `problem_id`'s transcript: `<id>.json.gz` when the id is already a safe
    name (`[A-Za-z0-9._-]`, at most 100 characters, no leading dot), else a sanitized prefix and
    12 hex digits of the id's SHA-256, so distinct ids get distinct names of at most 101 bytes.

    Safe ids that end like a hashed name (`-` and 12 hex digits) are hashed too, so a kept name
    never equals another id's hashed one.

    >>> transcript_name("abc301_a"), transcript_name("a/b")
    ('abc301_a.json.gz', 'a_b-c14cddc033f6.json.gz')
    """
    if (_SAFE_ID.fullmatch(problem_id) and not problem_id.startswith(".")
            and not _HASHED.fullmatch(problem_id)):
        return f"{problem_id}.json.gz"
    digest = hashlib.sha256(problem_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    prefix = _UNSAFE_RUN.sub("_", problem_id)[:_PREFIX_CHARS].lstrip(".") or "id"
    return f"{prefix}-{digest}.json.gz"


def write_transcript(path: Path, payload: dict[str, Any]) -> None:
    """Write one gzip-compressed JSON transcript atomically (`lcb.io.atomic_writer`; any
    string: a model's reply may hold a lone surrogate, see `lcb.io.json_text`)."""
    with atomic_writer(path) as handle, gzip.GzipFile(filename="", mode="wb",
                                                     fileobj=handle) as stream:
        stream.write(json_text(payload).encode("utf-8"))


def read_transcript(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def versions() -> dict[str, str]:
    """Versions of lcb, the libraries that shape results, and Python."""
    from lcb import __version__

    found = {"lcb": __version__, "python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def update_manifest(path: Path, *, config: dict, source: dict, command: list[str],
                    containment: dict | None = None, settings: dict | None = None,
                    session: dict | None = None) -> dict:
    """Write the manifest; a resumed run keeps the first session's fields and adds a session
    (with `containment`: how that session's programs were confined, and the `session` facts).
    `settings` (lcb.runs.identity) are written when the manifest is made, never later: they
    describe the run the first records came from."""
    facts = {"started_at": now_iso(), "command": command, "versions": versions()}
    if containment is not None:
        facts["containment"] = containment
    facts |= session or {}
    manifest: dict[str, Any] = {}
    if path.exists():
        manifest = json.loads(path.read_text(encoding="utf-8"))
    elif settings is not None:
        manifest["settings"] = settings
    manifest.setdefault("config", config)
    manifest.setdefault("data_source", source)
    manifest.setdefault("started_at", facts["started_at"])
    manifest.setdefault("sessions", []).append(facts)
    write_json(path, manifest)
    return manifest


def check_output(paths: RunPaths, *, resume: bool, expect: dict[str, str],
                 report: TextIO | None = None) -> list[dict]:
    """The records already in the predictions file, checked against `resume` and `expect`.

    Without `resume` a non-empty file raises `OutputError` (never overwrite a run silently).
    With `resume`, a last line cut short by a kill is removed, a record whose `expect` keys
    (topology, model) differ raises `OutputError` (one file holds one configuration's run), and
    records of an (id, sample) seen before are moved to `<name>.duplicates.jsonl` (the first
    record of each stays), said on `report`. Call it with the output locked (see lcb.runs.lock).
    """
    path = paths.predictions
    if not resume:
        refuse_overwrite(paths)
        return []
    for record in read_records(path):  # checked before the repair: a refusal changes nothing
        for key, wanted in expect.items():
            if record.get(key) not in (None, wanted):
                raise OutputError(
                    f"{path} holds records of {key} {record.get(key)!r}, but this run uses "
                    f"{wanted!r}; resume with the same {key} or choose another output.")
    records = read_records(path, repair=True)
    first: dict[tuple[str, int], dict] = {}
    for record in records:
        first.setdefault(record_key(record), record)
    if len(first) < len(records):
        target, moved = set_aside_duplicates(paths)
        if report is not None:
            print(f"{path}: {moved} repeated record(s) of an id recorded earlier moved to "
                  f"{target}; the first record of each id is kept.", file=report)
    return list(first.values())


def refuse_overwrite(paths: RunPaths) -> None:
    """Raise `OutputError` when the predictions file already holds records."""
    path = paths.predictions
    if path.exists() and path.stat().st_size > 0:
        raise OutputError(
            f"{path} already holds records of an earlier run. Pass --resume to continue "
            "it (finished problems are skipped), or choose another --out / --out-dir.")


def output_failure(exc: OSError, paths: RunPaths) -> str:
    """One line for an `OSError` met while writing the run's files: the file (or the output
    location), the system's reason, and what is kept."""
    where = exc.filename or paths.out_dir or paths.predictions
    line = f"cannot write {where}: {exc.strerror or exc}"
    if paths.predictions.exists() and paths.predictions.stat().st_size > 0:
        line += (f". Every record written before is kept in {paths.predictions}; once the "
                 "output is usable again, rerun with --resume to continue")
    return line


def set_aside(paths: RunPaths, keys: set[tuple[str, int]]) -> Path:
    """Move the records of `keys` ((id, sample), see `record_key`) from the predictions file to
    `<name>.errors.jsonl`."""
    return _move_records(paths, SET_ASIDE_SUFFIX, lambda key: key in keys)[0]


def set_aside_duplicates(paths: RunPaths) -> tuple[Path, int]:
    """Move every record of an (id, sample) already recorded above it to
    `<name>.duplicates.jsonl`.

    Returns that file and how many records moved there."""
    seen: set[tuple[str, int]] = set()

    def repeated(key: tuple[str, int]) -> bool:
        if key in seen:
            return True
        seen.add(key)
        return False

    return _move_records(paths, DUPLICATES_SUFFIX, repeated)


def _move_records(paths: RunPaths, suffix: str, moves: Callable[[tuple[str, int]], bool]
                  ) -> tuple[Path, int]:
    """Move the records for whose (id, sample) `moves` is true (asked in file order) to
    `<name><suffix>`.

    The moved records are appended to that file first; the predictions file is then rewritten
    without them through a temporary file and a rename, so a kill at any point loses no record
    (at worst one is in both files, and the next move repeats).
    """
    source = paths.predictions
    target = source.with_name(source.name.removesuffix(".jsonl") + suffix)
    keep: list[str] = []
    moving: list[str] = []
    for line in source.read_text(encoding="utf-8").splitlines(keepends=True):
        (moving if line.strip() and moves(record_key(json.loads(line))) else keep).append(line)
    with target.open("a", encoding="utf-8") as handle:
        handle.writelines(moving)
        handle.flush()
        os.fsync(handle.fileno())
    write_text(source, "".join(keep))
    return target, len(moving)
