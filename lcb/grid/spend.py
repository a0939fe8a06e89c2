"""What a grid job has spent so far: model calls and tokens, read from its own folder.

Contract of `job_spend(job) -> Spend`:
- An optimize job (done file `result.json`) is read by `lcb.optimize.phasecost.phase_cost`:
  its `total` (every charged rollout, uncharged reflect / judge / probe calls, the answered
  calls of attempts lost to infrastructure, validate and test evaluations). The learning
  curve's extra runs (`--curve`) are analysis, not the method's compute, and are left out, as
  the aggregate leaves them out.
- A run job (done file `summary.json`) is its records: `predictions.jsonl`, plus the records a
  resume moved aside (`predictions.errors.jsonl`, `predictions.duplicates.jsonl`): their calls
  were made too. Summed by `lcb.agents.usage.sum_usage`. A record cut short by a kill (the
  last line) is left out, as `read_records` leaves it out.
- Works on a job still running (the files are appended to, never rewritten half-way) and on
  one that never started (no folder: `Spend(calls=0, tokens=0)`). It never raises: a file that
  cannot be read or has the wrong shape gives calls 0, tokens None and the reason in `error`
  (the spend is unknown, not 0).
- `tokens` is prompt + completion by `lcb.agents.usage`'s rule: None when every answered call
  reported no usage, else the known sum (a lower bound when `without_usage` > 0); 0 over no
  answered call. `a + b` adds two spends by the same rule (a cell, a grid).
Nothing here reads a prompt or a program; the cost is a few file reads per job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lcb.agents.usage import TOKEN_KEYS, WITHOUT_USAGE, sum_usage, token_total
from lcb.grid.plan import DONE_FILES, GridJob
from lcb.optimize.phasecost import phase_cost
from lcb.runs.records import read_records
from lcb.runs.rundir import DUPLICATES_SUFFIX, PREDICTIONS, SET_ASIDE_SUFFIX

# What a damaged or odd file raises on the way: ArtifactError, RecordsError and JSON errors
# are ValueErrors; a JSON value of the wrong shape (a list for an object) a TypeError or an
# AttributeError deep in the readers.
_UNREADABLE = (OSError, ValueError, TypeError, AttributeError, RecursionError)


@dataclass(frozen=True)
class Spend:
    """Calls and tokens spent (module docstring). `errors`: why a part could not be read."""

    calls: int
    tokens: int | None
    without_usage: int = 0
    errors: tuple[str, ...] = ()

    def __add__(self, other: Spend) -> Spend:
        calls = self.calls + other.calls
        without = self.without_usage + other.without_usage
        known = (self.tokens or 0) + (other.tokens or 0)
        return Spend(calls=calls, tokens=token_total(known, calls=calls, without_usage=without),
                     without_usage=without, errors=self.errors + other.errors)

    @property
    def error(self) -> str | None:
        """The first reason a part could not be read, or None."""
        return self.errors[0] if self.errors else None


NOTHING = Spend(calls=0, tokens=0)


def total_spend(spends: Iterable[Spend]) -> Spend:
    """The spends added up (`NOTHING` over none)."""
    total = NOTHING
    for spend in spends:
        total = total + spend
    return total


def job_spend(job: GridJob) -> Spend:
    """What `job` has spent so far (module docstring); never raises."""
    try:
        if job.done_file == DONE_FILES["run"]:
            return _run_spend(job.out)
        return _optimize_spend(job.out)
    except _UNREADABLE as exc:
        return Spend(calls=0, tokens=None, errors=(f"{job.key}: {type(exc).__name__}: {exc}",))


def _optimize_spend(folder: Path) -> Spend:
    if not folder.is_dir():
        return NOTHING
    total = phase_cost(folder, wall=False)["total"]
    return Spend(calls=int(total["calls"]), tokens=total["tokens"],
                 without_usage=int(total[WITHOUT_USAGE]))


def _run_spend(folder: Path) -> Spend:
    names = [PREDICTIONS, *(PREDICTIONS.removesuffix(".jsonl") + suffix
                            for suffix in (SET_ASIDE_SUFFIX, DUPLICATES_SUFFIX))]
    records = [r for name in names for r in read_records(folder / name)]
    summed = sum_usage(records)
    known = [summed[key] for key in TOKEN_KEYS]
    tokens = None if None in known else sum(k for k in known if k is not None)
    return Spend(calls=int(summed["n_llm_calls"] or 0), tokens=tokens,
                 without_usage=int(summed[WITHOUT_USAGE] or 0))
