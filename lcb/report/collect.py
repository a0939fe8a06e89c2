"""Find and load what a report shows: `lcb run` directories, `lcb score` results, optimizer jobs.

Contract of `collect(paths)`:
- Each path may be a run directory (it holds `predictions.jsonl`), a results file of `lcb score`
  (`RESULTS.jsonl` with `RESULTS.summary.json` beside it; either file may be named), an
  optimizer job directory (`job.json`) or any folder holding these at any depth. A path that
  holds none of them raises `ReportError` naming it; so does a malformed file (the message of
  `RecordsError` / `ArtifactError`, which names the file and line), except for the lines of a
  results file: a line that is not a readable record is left out and named in its
  condition's `skipped` (the rest of the file is shown).
- Every run and results file becomes a `Condition` (runs first, single-agent ones first, in
  the order teams are introduced, then results files), with a label unique within the report (the
  folder or file name, prefixed with parent folders until no two labels clash), its records,
  its summary as written, and for runs the manifest and the transcripts folder. A source met
  twice (two paths naming it) is loaded once.
- Optimizer jobs are read by `lcb.optimize.aggregate.find_jobs` (complete jobs, and the
  incomplete ones with their reason), deduplicated by folder.
- `Sources.status_pages`: for each folder given that is a grid folder with a status page
  (`<folder>/.grid/status_page.json`, written by `lcb grid status --html`, naming a page that
  exists), (that folder, the page). A pointer that is missing, unreadable or names no file is
  no page: it never stops a report.
- `Sources.root` is the folder holding every input (the common parent of the paths given);
  `Sources.shown(path)` is a path as a report may show it: relative to that root, else its
  name, never absolute, so a mailed report does not carry the machine's folders.
Transcripts are not loaded here: `Condition.transcript` reads one problem's when asked, so a page
holds only the transcripts it shows; a transcript that cannot be read (cut short, not gzip, not
JSON) raises `ReportError` naming the file.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lcb.optimize.aggregate import FinishedJob, find_jobs
from lcb.optimize.artifacts import Artifact, ArtifactError
from lcb.registry import TOPOLOGIES  # runs in the order teams are introduced
from lcb.runs.records import RecordsError, read_readable, read_records
from lcb.runs.rundir import PREDICTIONS, RunPaths, read_transcript
from lcb.runs.scoring import summary_path

SUMMARY_SUFFIX = ".summary.json"
# Where a grid folder names its status page (lcb.grid.status_html writes it; not imported:
# the report sits beside the grid layer, not above it).
STATUS_POINTER = Path(".grid") / "status_page.json"


class ReportError(ValueError):
    """A path that cannot be reported on; the message names it and says why."""


@dataclass(frozen=True)
class Condition:
    """One set of graded programs: a run directory or an `lcb score` results file."""

    label: str
    kind: Literal["run", "score"]
    path: Path
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # results lines left out, and why

    @property
    def graded(self) -> list[dict[str, Any]]:
        """The records that count: all of a run's, a results file's valid lines only."""
        if self.kind == "run":
            return self.records
        return [r for r in self.records if r.get("difficulty") is not None]

    def transcript(self, problem_id: str, sample: int = 0) -> dict[str, Any] | None:
        """One program's transcript, or None (a results file, or no file written)."""
        if self.kind != "run":
            return None
        paths = RunPaths(predictions=self.path / PREDICTIONS, out_dir=self.path)
        where = paths.transcript(problem_id, sample)
        if where is None or not where.exists():
            return None
        try:
            found = read_transcript(where)
        except (OSError, EOFError, zlib.error, ValueError, RecursionError) as exc:
            raise ReportError(f"{where}: not a readable transcript (gzip of JSON): "
                              f"{type(exc).__name__}: {exc}") from None
        if not isinstance(found, dict):
            raise ReportError(f"{where}: not a transcript (a JSON object)")
        return found


@dataclass(frozen=True)
class Sources:
    conditions: list[Condition]
    jobs: list[FinishedJob]
    incomplete: list[dict[str, str]]
    root: Path | None = None
    status_pages: list[tuple[Path, Path]] = field(default_factory=list)

    def shown(self, path: str | Path | None) -> str | None:
        """`path` relative to `root` when under it, else its name (see the module contract).

        >>> Sources([], [], [], Path("/a")).shown("/a/b/c"), Sources([], [], []).shown("/x/y")
        ('b/c', 'y')
        """
        if path is None:
            return None
        resolved = Path(path)
        if self.root is not None and resolved.is_absolute():
            try:
                return resolved.relative_to(self.root).as_posix() or "."
            except ValueError:
                pass
        return resolved.as_posix() if not resolved.is_absolute() else resolved.name


def collect(paths: list[Path]) -> Sources:
    """Every condition and optimizer job under `paths` (see the module contract)."""
    runs: dict[Path, None] = {}
    scores: dict[Path, None] = {}
    jobs: dict[Path, FinishedJob] = {}
    incomplete: dict[str, dict[str, str]] = {}
    for path in paths:
        found = _find(Path(path))
        runs.update(dict.fromkeys(found[0]))
        scores.update(dict.fromkeys(found[1]))
        complete, waiting = _jobs(found[2]) if found[2] else ([], [])
        jobs.update({job.path.resolve(): job for job in complete})
        incomplete.update({entry["path"]: entry for entry in waiting})
        if not (found[0] or found[1] or complete or waiting):
            raise ReportError(f"{path} holds no lcb run directory, lcb score results or "
                              "optimizer job")
    labels = unique_labels([*runs, *scores])
    conditions = sorted([_load_run(p, labels[p]) for p in runs], key=_team_order)
    conditions += [_load_score(p, labels[p]) for p in scores]
    parents = [str(Path(p).resolve().parent) for p in paths]
    return Sources(conditions, sorted(jobs.values(), key=lambda job: str(job.path)),
                   list(incomplete.values()),
                   Path(os.path.commonpath(parents)) if parents else None,
                   status_pages(paths))


def status_pages(paths: list[Path]) -> list[tuple[Path, Path]]:
    """(grid folder, its status page) for each folder in `paths` that points to one (module
    contract); each page once."""
    found: dict[Path, Path] = {}
    for path in paths:
        folder = Path(path).resolve()
        try:
            pointer = json.loads((folder / STATUS_POINTER).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        page = pointer.get("page") if isinstance(pointer, dict) else None
        if isinstance(page, str) and Path(page).is_absolute() and \
                Path(page).name == "index.html" and Path(page).is_file():
            found.setdefault(Path(page), folder)
    return [(folder, page) for page, folder in found.items()]


def _team_order(cond: Condition) -> tuple[int, str]:
    """Runs in the order teams are introduced (single first), then by label."""
    topology = cond.summary.get("topology") or (cond.records[0].get("topology")
                                                if cond.records else None)
    order = TOPOLOGIES.index(topology) if topology in TOPOLOGIES else len(TOPOLOGIES)
    return order, cond.label


def _find(path: Path) -> tuple[list[Path], list[Path], Path | None]:
    """(run dirs, results files, a root for job search or None) under one path."""
    if not path.exists():
        raise ReportError(f"{path} does not exist")
    if path.is_file():
        if path.name == PREDICTIONS:
            return [path.parent.resolve()], [], None
        if path.name == Artifact.JOB.value:
            return [], [], path.parent.resolve()
        results = _results_of(path)
        if results is None:
            raise ReportError(f"{path} is neither a run's predictions.jsonl, an lcb score "
                              "results file (with its .summary.json) nor a job.json")
        return [], [results], None
    runs = sorted(p.parent.resolve() for p in path.rglob(PREDICTIONS))
    scores = sorted(r for p in path.rglob(f"*{SUMMARY_SUFFIX}") if (r := _results_of(p)))
    has_jobs = next(path.rglob(Artifact.JOB.value), None) is not None
    return runs, scores, path.resolve() if has_jobs else None


def _jobs(root: Path) -> tuple[list[FinishedJob], list[dict[str, str]]]:
    try:
        return find_jobs(root)
    except ArtifactError as exc:
        raise ReportError(str(exc)) from None


def _results_of(path: Path) -> Path | None:
    """The results file `path` names (it, or the one beside its summary), when it is one."""
    if path.name.endswith(SUMMARY_SUFFIX):
        results = path.with_name(path.name.removesuffix(SUMMARY_SUFFIX) + ".jsonl")
    else:
        results = path
    if results.suffix != ".jsonl" or not results.is_file():
        return None
    if not summary_path(results).is_file():
        return None
    return results.resolve()


def unique_labels(paths: list[Path]) -> dict[Path, str]:
    """A short label per path: its name (a results file's stem), with parent folder names
    prepended while two labels clash.

    >>> sorted(unique_labels([Path("/a/x/run"), Path("/b/y/run"), Path("/c/z")]).values())
    ['x/run', 'y/run', 'z']
    """
    def label(path: Path, depth: int) -> str:
        name = path.stem if path.suffix == ".jsonl" else path.name
        parents = [p.name for p in path.parents][:depth][::-1]
        return "/".join([*parents, name])

    depth = dict.fromkeys(paths, 0)
    for _ in range(32):
        labels = {p: label(p, depth[p]) for p in paths}
        clashing = [p for p in paths if list(labels.values()).count(labels[p]) > 1]
        if not clashing:
            return labels
        for p in clashing:
            depth[p] += 1
    return {p: str(p) for p in paths}


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ReportError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        return read_records(path)
    except RecordsError as exc:
        raise ReportError(str(exc)) from None


def _load_run(folder: Path, label: str) -> Condition:
    return Condition(label=label, kind="run", path=folder,
                     records=_records(folder / PREDICTIONS),
                     summary=_json(folder / "summary.json"),
                     manifest=_json(folder / "manifest.json"))


def _load_score(results: Path, label: str) -> Condition:
    try:
        records, skipped = read_readable(results)
    except OSError as exc:
        raise ReportError(f"{results}: not readable ({exc})") from None
    return Condition(label=label, kind="score", path=results, records=records,
                     summary=_json(summary_path(results)), skipped=skipped)
