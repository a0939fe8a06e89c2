"""The optimize phase's journal: every usable rollout, kept whole, so a job resumes by replay.

Contract:
- `RolloutJournal(job_dir)` reads `DIR/rollouts.jsonl` (one line per usable rollout, charged
  or `free` (`Rollout.free`: a masked run that sent no request), in the order they ended; a
  line cut short by a kill is dropped from the file; any other damaged line refuses the
  resume with an `ArtifactError` naming it) and the rollouts' full results in
  `DIR/transcripts/NNNNN.json.gz` (the team result: transcript, usage, fields; the grade; the
  feedback). `append(rollout, charged=...)` writes the transcript file first, then the line
  (both fsync-ed), so a line always names a complete transcript. A rollout refunded after every
  try failed is journaled in `DIR/abandoned.jsonl`, so a retrace gets None for it again instead
  of a run that might now succeed (and take the method down another path).
- A rollout is identified by `rollout_key(bundle hash, row, iteration, mask)`: its request seeds
  depend on nothing else, so the same key sends the same requests. `lookup(key)` gives the
  journaled line, `load(line)` the `Rollout` rebuilt from it (`replay` unset; the grade's
  per-test times are not kept, so they come back as 0).
- `HistoryLog(job_dir)` appends `HistoryEntry`s to `DIR/history.jsonl`. On a resumed job it
  holds the entries already there: an entry equal to the next one on disk (its time aside) is
  not written again, so a retraced path leaves the file as an uninterrupted run would. The first
  entry that differs truncates the file there (the run took another path) and is appended.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lcb.grading import Grade
from lcb.grading.grades import Feedback, TestOutcome
from lcb.grading.verdicts import Verdict
from lcb.io import BadJson, json_text, loads, write_text
from lcb.optimize.artifacts import (
    Artifact,
    ArtifactError,
    HistoryEntry,
    history_line,
    read_history,
)
from lcb.optimize.method import Rollout
from lcb.runs.rundir import read_transcript, write_transcript
from lcb.teams.common import TeamResult

ROLLOUT_LOG = "rollouts.jsonl"
ABANDONED_LOG = "abandoned.jsonl"  # rollouts refunded after every try: None on a retrace
TRANSCRIPTS = "transcripts"
COALITIONS = "coalitions"  # the answers masked rollouts share (`lcb.optimize.evaluator`)
log = logging.getLogger("lcb.optimize")
FEEDBACK_CHARS = 600  # of the feedback on the rollout line (the transcript file keeps it all)


def rollout_key(bundle_hash: str, row: str, iteration: int,
                active: Iterable[str] | None) -> str:
    """What makes two rollouts send the same requests (see the module docstring)."""
    mask = "*" if active is None else ",".join(sorted(active))
    return f"{bundle_hash}|{row}|{iteration}|{mask}"


def program_hash(code: str | None) -> str | None:
    # surrogatepass: a model's program may hold a lone surrogate, which strict UTF-8 refuses
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()[:16] if code else None


def _verdict(rollout: Rollout) -> str:
    grade = rollout.grade
    if rollout.team.error_kind == "bad_request":
        return "bad_request"
    if grade is None:
        return "abstained" if rollout.active is not None and not rollout.team.n_llm_calls \
            else "no_program"
    failed = next((o.verdict for o in grade.outcomes if o.verdict is not Verdict.PASSED), None)
    return failed.value if failed is not None else "passed"


def rollout_line(rollout: Rollout, *, charged: int, transcript: str) -> dict[str, Any]:
    """The audit line of one usable rollout (see `docs/protocol.md` for every field)."""
    team, grade = rollout.team, rollout.grade
    return {"id": rollout.problem_id, "iteration": rollout.iteration,
            "bundle_hash": rollout.bundle_hash, "seed": rollout.seed,
            "active": sorted(rollout.active) if rollout.active is not None else None,
            "key": rollout_key(rollout.bundle_hash, rollout.problem_id, rollout.iteration,
                               rollout.active),
            "score": rollout.score, "verdict": _verdict(rollout),
            "tests_run": len(grade.outcomes) if grade else 0,
            "tests_total": grade.total if grade else 0,
            "feedback": rollout.feedback[:FEEDBACK_CHARS],
            "program_hash": program_hash(team.code), "latency_s": round(rollout.latency_s, 3),
            "n_llm_calls": team.n_llm_calls, "n_tool_calls": team.n_tool_calls,
            "prompt_tokens": team.prompt_tokens, "completion_tokens": team.completion_tokens,
            "n_calls_without_usage": team.n_calls_without_usage, "error": team.error,
            "charged": charged, "free": rollout.free,
            "reused": dict(rollout.reused) if rollout.reused is not None else None,
            "transcript": transcript}


def _grade_record(grade: Grade | None) -> dict[str, Any] | None:
    if grade is None:
        return None
    return {**grade.to_record(), "em": grade.em}


def _grade_from(record: dict[str, Any] | None) -> Grade | None:
    if record is None:
        return None
    outcomes = tuple(TestOutcome(index, Verdict(v), 0.0, 0.0)
                     for index, v in enumerate(record["verdicts"]))
    fb = record.get("feedback")
    feedback = (Feedback(**{**fb, "verdict": Verdict(fb["verdict"])}) if fb else None)
    return Grade(outcomes=outcomes, total=int(record["total"]), passed=int(record["pass"]),
                 em=int(record["em"]), wall_s=float(record.get("wall_s", 0.0)),
                 cpu_s=float(record.get("cpu_s", 0.0)), feedback=feedback,
                 grader=str(record.get("grader", "")))


def _team_from(data: dict[str, Any]) -> TeamResult:
    known = {f.name for f in dataclasses.fields(TeamResult)}
    return TeamResult(**{key: value for key, value in data.items() if key in known})


class RolloutJournal:
    """See the module docstring. Appends come from one event loop thread."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = Path(job_dir)
        self.path = self.dir / ROLLOUT_LOG
        self.lines: list[dict[str, Any]] = _read_lines(self.path)
        self._by_key: dict[str, dict[str, Any]] = {}
        for line in self.lines:
            self._by_key.setdefault(str(line.get("key") or ""), line)
        self.abandoned_path = self.dir / ABANDONED_LOG
        self._abandoned = {line["key"]: line for line in _read_lines(self.abandoned_path)}
        numbers = [int(Path(line["transcript"]).name.split(".")[0]) for line in self.lines
                   if line.get("transcript")]
        self._next_number = max(numbers, default=0) + 1

    def __len__(self) -> int:
        return len(self.lines)

    def lookup(self, key: str) -> dict[str, Any] | None:
        return self._by_key.get(key)

    def abandonment(self, key: str) -> dict[str, Any] | None:
        """The journaled abandonment of `key` (every try failed for infrastructure), or None."""
        return self._abandoned.get(key)

    def append_abandoned(self, key: str, *, row: str, iteration: int, tries: int) -> None:
        """Journal a rollout refunded after every try failed: a retrace gets None again."""
        line = {"key": key, "id": row, "iteration": iteration, "tries": tries}
        _append_line(self.abandoned_path, line)
        self._abandoned[key] = line

    def load(self, line: dict[str, Any]) -> Rollout:
        """The journaled rollout of `line`, whole."""
        data = read_transcript(self.dir / line["transcript"])
        active = line.get("active")
        return Rollout(problem_id=line["id"], score=float(line["score"]),
                       feedback=data["feedback"], team=_team_from(data["team"]),
                       seed=int(line["seed"]), iteration=int(line["iteration"]),
                       bundle_hash=line["bundle_hash"],
                       active=frozenset(active) if active is not None else None,
                       grade=_grade_from(data["grade"]), latency_s=float(line["latency_s"]),
                       free=bool(line.get("free")), reused=line.get("reused"))

    def append(self, rollout: Rollout, *, charged: int) -> dict[str, Any]:
        """Journal one usable rollout: its transcript file, then its line."""
        name = f"{TRANSCRIPTS}/{self._next_number:05d}.json.gz"
        self._next_number += 1  # never a number a kept line names, even after a `drop`
        write_transcript(self.dir / name, {"team": dataclasses.asdict(rollout.team),
                                           "grade": _grade_record(rollout.grade),
                                           "feedback": rollout.feedback})
        line = rollout_line(rollout, charged=charged, transcript=name)
        _append_line(self.path, line)
        self.lines.append(line)
        self._by_key.setdefault(line["key"], line)
        return line


    def drop(self, keys: Iterable[str]) -> int:
        """Remove the lines of `keys` (rollouts refunded after the fact: a misconfigured
        endpoint) so that a rerun runs them again instead of replaying them; returns how many."""
        gone = set(keys)
        kept = [line for line in self.lines if line.get("key") not in gone]
        dropped = len(self.lines) - len(kept)
        if dropped:
            write_text(self.path, "".join(json_text(line) + "\n" for line in kept))
            self.lines = kept
            self._by_key = {}
            for line in kept:
                self._by_key.setdefault(str(line.get("key") or ""), line)
        return dropped


def _append_line(path: Path, line: dict[str, Any]) -> None:
    """One JSON line, on disk before this returns (a lost node keeps it)."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json_text(line) + "\n")  # any string: see lcb.io.json_text
        handle.flush()
        os.fsync(handle.fileno())


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSONL file; a cut-off tail (a kill mid-write) is cut away.

    A damaged complete line raises `ArtifactError` naming it: skipping it would replay a
    different job (the rollout run again and charged twice), so the resume is refused."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    end = raw.rfind(b"\n") + 1
    if end < len(raw):
        with path.open("r+b") as handle:
            handle.truncate(end)
    lines = []
    for number, line in enumerate(raw[:end].split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            value = loads(line)
        except BadJson as exc:
            raise ArtifactError(f"{path}:{number}: {exc}; the journal is damaged, so the job "
                                "cannot resume from it") from None
        if not isinstance(value, dict):
            raise ArtifactError(f"{path}:{number}: expected a JSON object; the journal is "
                                "damaged, so the job cannot resume from it")
        lines.append(value)
    return lines


class HistoryLog:
    """`history.jsonl`, append-only, retracing a resumed run (see the module docstring)."""

    def __init__(self, job_dir: Path) -> None:
        self.path = Path(job_dir) / Artifact.HISTORY
        _read_lines(self.path)  # drops a line cut short by a kill, so appends start clean
        self._old = read_history(job_dir)
        self._cursor = 0
        self.position = 0  # entries of this run so far (matched on disk or written)

    def append(self, entry: HistoryEntry) -> None:
        self.position += 1
        if self._cursor < len(self._old):
            if _same(self._old[self._cursor], entry):
                self._cursor += 1
                return
            log.warning("history: the resumed run left the interrupted run's path at entry %d "
                        "(%d later entries dropped)", self._cursor + 1,
                        len(self._old) - self._cursor)
            self._truncate(self._cursor)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(history_line(entry))
            handle.flush()
            os.fsync(handle.fileno())

    def skip(self, entries: int) -> None:
        """Take the first `entries` entries on disk as this run's (a fast-forward)."""
        self._cursor = self.position = min(entries, len(self._old))

    @property
    def retracing(self) -> bool:
        """True while earlier entries of an interrupted run are still being matched."""
        return self._cursor < len(self._old)

    def _truncate(self, keep: int) -> None:
        lines = self.path.read_text(encoding="utf-8").split("\n")
        kept = [line for line in lines if line.strip()][:keep]
        write_text(self.path, "".join(line + "\n" for line in kept))
        self._old = self._old[:keep]


def _same(a: HistoryEntry, b: HistoryEntry) -> bool:
    return a.model_dump(exclude={"time"}) == b.model_dump(exclude={"time"})
