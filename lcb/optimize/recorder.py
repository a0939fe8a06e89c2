"""The optimize phase's `Recorder` (`lcb.optimize.method`): the history and the checkpoints.

Contract:
- `record_candidate` / `record_proposal` append to `history.jsonl` through a `HistoryLog`,
  which leaves the entries of a retraced path as they are on disk. Each entry carries the
  rollouts charged so far, the uncharged usage so far, and the iteration (default: the
  latest one the evaluator ran).
- `checkpoint(state)` writes `DIR/checkpoint.json` atomically: the method's state, the
  evaluator's position (iteration, ledger, journal lines, claimed keys), how many history
  entries and uncharged calls it covers, and the time. `restore()` returns the last state
  (None on a fresh job). `restore(fast_forward=True)` also moves the evaluator, the history
  and the uncharged calls to that point, for a method that skips the iterations before it
  instead of retracing them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lcb.io import write_json
from lcb.optimize.artifacts import HistoryEntry
from lcb.optimize.calls import ModelCalls
from lcb.optimize.evaluator import JobEvaluator
from lcb.optimize.journal import HistoryLog
from lcb.runs.rundir import now_iso

CHECKPOINT_FILE = "checkpoint.json"


class JobRecorder:
    """The `Recorder` of one job's optimize phase (see the module docstring)."""

    def __init__(self, job_dir: Path, *, evaluator: JobEvaluator, calls: ModelCalls) -> None:
        self.job_dir, self.evaluator, self.calls = Path(job_dir), evaluator, calls
        self.history = HistoryLog(self.job_dir)

    def _entry(self, bundle: Mapping[str, str], iteration: int | None,
               **fields: Any) -> HistoryEntry:
        ledger = self.evaluator.ledger
        return HistoryEntry(bundle=dict(bundle), charged=ledger.charged,
                            iteration=self.evaluator.last_iteration if iteration is None
                            else iteration,
                            uncharged=ledger.state()["uncharged"], **fields)

    def record_candidate(self, bundle: Mapping[str, str], *, scores: Mapping[str, float],
                         note: str = "", iteration: int | None = None,
                         parent: str | None = None) -> None:
        self.history.append(self._entry(bundle, iteration, kind="candidate", parent=parent,
                                        scores={k: float(v) for k, v in scores.items()},
                                        note=note))

    def record_proposal(self, bundle: Mapping[str, str], *, parent: str | None,
                        roles: Sequence[str], accepted: bool,
                        scores: Mapping[str, float] | None = None, scored_on: str | None = None,
                        rejected_by: str | None = None, reason: str = "",
                        iteration: int | None = None) -> None:
        if accepted and rejected_by is not None:
            raise ValueError("an accepted proposal has no rejected_by")
        self.history.append(self._entry(
            bundle, iteration, kind="proposal", parent=parent, roles=list(roles),
            accepted=accepted, scores={k: float(v) for k, v in (scores or {}).items()},
            scored_on=scored_on, rejected_by=rejected_by, reason=reason))

    def checkpoint(self, state: Mapping[str, object]) -> None:
        payload = {"state": json.loads(json.dumps(dict(state))), **self.evaluator.position(),
                   "history_entries": self.history.position, "calls": self.calls.position(),
                   "time": now_iso()}
        write_json(self.job_dir / CHECKPOINT_FILE, payload)

    def restore(self, *, fast_forward: bool = False) -> dict | None:
        path = self.job_dir / CHECKPOINT_FILE
        if not path.exists():
            return None
        saved = json.loads(path.read_text(encoding="utf-8"))
        if fast_forward:  # everything the skipped iterations did, as it stood at the checkpoint
            self.evaluator.fast_forward(saved)
            self.history.skip(saved["history_entries"])
            self.calls.skip_to(saved["calls"])
        return dict(saved["state"])
