"""What a grid may spend: retries of jobs that failed on infrastructure, a time limit per job,
and a token and a wall-time budget for the whole grid.

Contract:
- `JobPolicy` travels with every job to whichever executor runs it (pickled to a Slurm task
  or a Ray worker): `retries` and `retry_wait_s`, `time_limit_s` (one attempt's wall time),
  `token_budget` (tokens of the whole grid) and `deadline` (epoch seconds: the grid's wall-time
  budget, counted from the `lcb grid run` that set it). Nothing set: no limit.
- `infrastructure(rc)`: an exit that a retry can cure. `lcb optimize` and `lcb run` exit 1 when
  the endpoint does not answer (or refuses the job's first requests) and `lcb optimize` exits 3
  when an evaluation left items failed for infrastructure reasons; 130 and 143, or death by a
  signal (a negative code: SIGKILL from the OOM killer or an operator), are a process stopped
  from outside. Bad input (2), a crashed method (4) and a clean exit without a result are not:
  a retry would do the same again. A job that was not started because no endpoint passed its
  check is retried too (its runner says so).
- `retry_wait(policy, n)`: the wait before the n-th retry, `retry_wait_s * 2**(n-1)` capped at
  `MAX_RETRY_WAIT_S`. A retry resumes the job from its journal, so no rollout is charged twice.
- Tokens: each job's state file carries `tokens`, its spend so far (`lcb.grid.spend`), written
  when an attempt ends and every `BUDGET_CHECK_S` while it runs under a token budget;
  `grid_tokens(root)` adds them up over the grid's state files. `spent_reason(policy, root)`
  says why the grid may start nothing more (the deadline passed, the tokens reached the
  budget), None while it may.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lcb.grid.plan import GridJob
from lcb.grid.state import GRID_DIR, job_lock, read_state, write_state

MAX_RETRY_WAIT_S = 1800.0
BUDGET_CHECK_S = 30.0  # how often a running job adds up the grid's tokens
RETRYABLE_EXITS = frozenset({1, 3, 128 + signal.SIGINT, 128 + signal.SIGTERM})


@dataclass(frozen=True)
class JobPolicy:
    """How a grid's jobs are retried and limited (module docstring)."""

    retries: int = 0
    retry_wait_s: float = 30.0
    time_limit_s: float | None = None
    token_budget: int | None = None
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.retries < 0 or not 0 <= self.retry_wait_s < math.inf:
            raise ValueError("retries and their wait must be finite and not negative")
        for name in ("time_limit_s", "token_budget", "deadline"):
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                raise ValueError(f"{name} must be positive and finite, got {value}")


NO_LIMITS = JobPolicy()


def infrastructure(rc: int | None) -> bool:
    """True for an exit a retry can cure (module docstring)."""
    return rc is not None and (rc in RETRYABLE_EXITS or rc < 0)


def retry_wait(policy: JobPolicy, retry: int) -> float:
    """Seconds to wait before retry number `retry` (1-based)."""
    return min(MAX_RETRY_WAIT_S, policy.retry_wait_s * 2 ** min(retry - 1, 30))


def record_tokens(job: GridJob) -> int:
    """Write the job's spend so far into its state (`tokens`, `calls`); its tokens. Only the
    job's runner (it holds the job's lock) writes its state."""
    from lcb.grid.spend import job_spend

    spend = job_spend(job)
    tokens = spend.tokens or 0
    state = read_state(job)
    if state.get("tokens") != tokens or state.get("calls") != spend.calls:
        write_state(job, **{**state, "tokens": tokens, "calls": spend.calls})
    return tokens


def count_earlier_tokens(jobs: Iterable[GridJob]) -> None:
    """Record the spend of every started job that no runner holds now (a grid run before this
    one, a job run without a token budget), so that the grid's sum counts them."""
    for job in jobs:
        if not job.out.is_dir():
            continue
        with job_lock(job) as mine:
            if mine:
                record_tokens(job)


def grid_tokens(root: Path) -> int:
    """The tokens the grid's jobs have spent, from their state files."""
    total = 0
    for path in (root / GRID_DIR / "state").glob("*.json"):
        try:
            tokens = json.loads(path.read_text(encoding="utf-8")).get("tokens")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(tokens, int) and tokens > 0:
            total += tokens
    return total


def spent_reason(policy: JobPolicy, root: Path) -> str | None:
    """Why the grid may start no more work (module docstring); None while it may."""
    if policy.deadline is not None and time.time() >= policy.deadline:
        return "the grid's time budget ran out"
    if policy.token_budget is not None:
        spent = grid_tokens(root)
        if spent >= policy.token_budget:
            return f"the grid's token budget is spent ({spent:,} of {policy.token_budget:,})"
    return None
