"""Where a batch writes: the predictions file and, with an output directory, the run's files.

Layout of `--out-dir DIR`:
    DIR/predictions.jsonl          one record per finished problem (append-only, see records.py)
    DIR/summary.json               the summary contract, rewritten at the end of each session
    DIR/manifest.json              config (api key redacted), versions, data source, sessions
    DIR/transcripts/<id>.json.gz   one gzip-compressed JSON transcript per problem

With `--out FILE.jsonl` only the predictions file is written. Whole-file writes go through a
temporary file and a rename, so a kill never leaves a half-written JSON file behind.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from lcb.runs.records import read_records

PREDICTIONS = "predictions.jsonl"
SET_ASIDE_SUFFIX = ".errors.jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_PACKAGES = ("langgraph", "langchain-openai", "langchain-core", "pydantic")


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

    def transcript(self, problem_id: str) -> Path | None:
        """The transcript file of one problem (ids are made filename-safe)."""
        if self.transcripts is None:
            return None
        return self.transcripts / f"{_UNSAFE.sub('_', problem_id)}.json.gz"


def _replace_text(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically: a synced temporary file, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json(path: Path, payload: Any) -> None:
    """Write pretty JSON atomically."""
    _replace_text(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def write_transcript(path: Path, payload: dict[str, Any]) -> None:
    """Write one gzip-compressed JSON transcript atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as handle:
        json.dump(payload, handle, ensure_ascii=False)
    os.replace(tmp, path)


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


def update_manifest(path: Path, *, config: dict, source: dict, command: list[str]) -> dict:
    """Write the manifest; a resumed run keeps the first session's fields and adds a session."""
    session = {"started_at": now_iso(), "command": command, "versions": versions()}
    manifest: dict[str, Any] = {}
    if path.exists():
        manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.setdefault("config", config)
    manifest.setdefault("data_source", source)
    manifest.setdefault("started_at", session["started_at"])
    manifest.setdefault("sessions", []).append(session)
    write_json(path, manifest)
    return manifest


def check_output(paths: RunPaths, *, resume: bool, expect: dict[str, str]) -> list[dict]:
    """The records already in the predictions file, checked against `resume` and `expect`.

    Without `resume` a non-empty file raises `OutputError` (never overwrite a run silently).
    With `resume`, a last line cut short by a kill is removed, and a record whose `expect` keys
    (topology, model) differ raises `OutputError`: one file holds one configuration's run.
    """
    path = paths.predictions
    if not resume:
        if path.exists() and path.stat().st_size > 0:
            raise OutputError(
                f"{path} already holds records of an earlier run. Pass --resume to continue "
                "it (finished problems are skipped), or choose another --out / --out-dir.")
        return []
    records = read_records(path, repair=True)
    for record in records:
        for key, wanted in expect.items():
            if record.get(key) not in (None, wanted):
                raise OutputError(
                    f"{path} holds records of {key} {record.get(key)!r}, but this run uses "
                    f"{wanted!r}; resume with the same {key} or choose another output.")
    return records


def set_aside(paths: RunPaths, ids: set[str]) -> Path:
    """Move the records of `ids` from the predictions file to `<name>.errors.jsonl`.

    The set-aside records are appended to that file first; the predictions file is then
    rewritten without them through a temporary file and a rename, so a kill at any point
    loses no record (at worst one is in both files, and the next set-aside repeats).
    """
    source = paths.predictions
    target = source.with_name(source.name.removesuffix(".jsonl") + SET_ASIDE_SUFFIX)
    keep: list[str] = []
    moving: list[str] = []
    for line in source.read_text(encoding="utf-8").splitlines(keepends=True):
        (moving if line.strip() and json.loads(line)["id"] in ids else keep).append(line)
    with target.open("a", encoding="utf-8") as handle:
        handle.writelines(moving)
        handle.flush()
        os.fsync(handle.fileno())
    _replace_text(source, "".join(keep))
    return target
