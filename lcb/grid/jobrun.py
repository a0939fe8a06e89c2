"""The one job function every executor runs: check the endpoints, run the job's command,
retry it when infrastructure failed it, within the grid's limits.

Contract of `run_job(job, stop=None, policy=JobPolicy(), where=None) -> Outcome`:
- The whole call holds the job's lock (`lcb.grid.state.job_lock`); a job whose lock another
  process holds (a second grid, an overlapping shard) is `skipped` as running elsewhere, and
  nothing is launched or written.
- A job that is done (`lcb.grid.state.is_done`: a whole `result.json`, a complete
  `summary.json`) is `skipped` without a process. A state still saying `running` although the
  lock was free is a runner that died (a lost node or worker) whose job is stopping (it got
  SIGTERM with its runner): the call waits for that process to go (`ORPHAN_WAIT_S` at most;
  on another host, until its heartbeat is stale) before starting the job again, and skips the
  job if it does not go.
- The grid's budgets (`lcb.grid.limits.spent_reason`: its deadline, its token budget) are
  checked before each attempt: a spent one `skips` the job, naming it (`Outcome.limit`).
- Before launching, each of the model's endpoints gets lcb's endpoint check
  (`lcb.grid.checks`: a verdict is shared for a minute by the jobs starting together); one
  that fails is dropped from this job's `VLLM_BASE_URL` (named in its log, credentials taken
  out), and a job with none left is not started: it is `failed` with the reason. A model whose
  `api_key_env` variable is unset fails the same way.
- Otherwise the job's command runs (`lcb.grid.launch`), with the environment of this process
  plus the job's, the API key copied into `OPENAI_API_KEY`. Its state ends `done` or `failed`
  (exit code, the log's last line). A job that exits 0 without its done file is `failed`.
- While it runs, a job past `policy.time_limit_s` is stopped and `failed` ("time limit": not
  retried; rerunning with a longer limit resumes it), and one running when a grid budget runs
  out is stopped and `interrupted` (`Outcome.limit` says which budget).
- A job stopped by the grid (`terminate_running`, or this call interrupted while its job
  runs, as a cancelled Ray task is) is `interrupted`, not failed: its state says so and the
  next run resumes it. `stop` set before the process starts makes the outcome `skipped`.
- A failure infrastructure may have caused (`lcb.grid.limits.infrastructure`, or no endpoint
  passing its check) is retried up to `policy.retries` times, after `retry_wait` (exponential;
  `stop` cuts the wait short), each retry a new attempt that resumes the job's journal.
  `Outcome.retries` counts them; the log names each retry and why.
- Any other error of this call (an `OSError` from starting the process, a full disk) is the
  job's: `failed` with the error as the reason, never raised into the executor.
- Rerunning a failed or interrupted job is the same call: the job's own command resumes from
  its journal or records.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from lcb.agents.endpoints import redact_url
from lcb.grid.checks import usable_endpoints
from lcb.grid.launch import (
    Stopped,
    command_argv,
    launch,
    log_line,
    now,
    stop_running,
    terminate_running,
)
from lcb.grid.limits import (
    BUDGET_CHECK_S,
    NO_LIMITS,
    JobPolicy,
    infrastructure,
    record_tokens,
    retry_wait,
    spent_reason,
)
from lcb.grid.plan import GridJob
from lcb.grid.state import (
    STALE_S,
    is_done,
    job_lock,
    job_status,
    last_lines,
    read_state,
    write_state,
)

__all__ = ["Outcome", "command_argv", "run_job", "stop_running", "terminate_running"]
ORPHAN_WAIT_S = 60.0  # a dead runner's job gets this long to stop (it closes its journal)


@dataclass(frozen=True)
class Outcome:
    """How one `run_job` call ended."""

    key: str
    status: Literal["done", "skipped", "failed", "interrupted"]
    rc: int | None = None
    reason: str = ""
    seconds: float = 0.0
    retries: int = 0
    limit: str | None = None  # the grid budget that skipped or stopped the job
    infra: bool = False  # a failure a retry may cure


def _api_key(job: GridJob) -> str:
    if job.key_env is None:
        return os.environ.get("OPENAI_API_KEY") or "EMPTY"
    key = os.environ.get(job.key_env)
    if not key:
        raise LookupError(f"the variable {job.key_env} (api_key_env of model "
                          f"{job.axes['model']!r}) is not set")
    return key


def _end(job: GridJob, status: Literal["failed", "interrupted"], reason: str, started: float,
         *, rc: int | None = None, infra: bool = False, limit: str | None = None) -> Outcome:
    """Record the job's end as `status` (a state that cannot be written is left as it was:
    the outcome still says what happened)."""
    with contextlib.suppress(OSError):
        write_state(job, **{**_kept_fields(job), "state": status, "rc": rc, "reason": reason,
                            "ended": now()})
    return Outcome(job.key, status, rc=rc, reason=reason, seconds=time.monotonic() - started,
                   infra=infra, limit=limit)


def _kept_fields(job: GridJob) -> dict[str, Any]:
    """What an ended attempt's state keeps of the running one beyond what `write_state`
    carries: where it ran."""
    state = read_state(job)
    return {name: state[name] for name in ("host", "node") if name in state}


def run_job(job: GridJob, stop: threading.Event | None = None,
            policy: JobPolicy = NO_LIMITS, where: str | None = None) -> Outcome:
    """Run one job of a grid to its end (module docstring)."""
    started = time.monotonic()
    try:
        with job_lock(job) as mine:
            if not mine:
                return Outcome(job.key, "skipped", reason="running elsewhere (its lock is "
                                                          "taken)")
            return _with_retries(job, stop, policy, where, started)
    except Exception as exc:  # noqa: BLE001 - one job's error is its own, recorded
        return _end(job, "failed", f"{type(exc).__name__}: {exc}", started)


def _with_retries(job: GridJob, stop: threading.Event | None, policy: JobPolicy,
                  where: str | None, started: float) -> Outcome:
    retry = 0
    while True:
        outcome = _attempt(job, stop, policy, where, started,
                           recheck_since=time.time() if retry else None)
        if stop is not None and stop.is_set() and outcome.status == "failed" and outcome.infra:
            # the stop reached the job before the grid marked it (Ctrl-C, Slurm's SIGTERM)
            return replace(_end(job, "interrupted", f"stopped with the grid ({outcome.reason})"
                                ": the next run resumes it", started, rc=outcome.rc),
                           retries=retry)
        if outcome.status != "failed" or not outcome.infra or retry >= policy.retries \
                or (stop is not None and stop.is_set()):
            return replace(outcome, retries=retry)
        retry += 1
        wait = retry_wait(policy, retry)
        log_line(job, f"== {now()} retry {retry} of {policy.retries} in {wait:.0f} s "
                      f"(failed on infrastructure: {outcome.reason[:200]})")
        if (stop.wait(wait) if stop is not None else time.sleep(wait)):
            return Outcome(job.key, "skipped", reason="the grid was stopped before a retry",
                           retries=retry - 1, seconds=time.monotonic() - started)


def _orphan_gone(job: GridJob, stop: threading.Event | None) -> bool:
    """Wait for the process of a runner that died to stop (module docstring); False when it
    does not, or when the grid stops meanwhile."""
    deadline = time.monotonic() + (ORPHAN_WAIT_S if read_state(job).get("host") ==
                                   socket.gethostname() else STALE_S + 5)
    while job_status(job) == "running":
        if time.monotonic() > deadline or (stop is not None and stop.wait(0.2)):
            return False
        if stop is None:
            time.sleep(0.2)
    return True


def _attempt(job: GridJob, stop: threading.Event | None, policy: JobPolicy,
             where: str | None, started: float, *, recheck_since: float | None) -> Outcome:
    if is_done(job):
        return Outcome(job.key, "skipped", reason="done")
    if read_state(job).get("state") == "running":
        if not _orphan_gone(job, stop):
            return Outcome(job.key, "skipped", reason="running in another process")
        if is_done(job):  # it finished while it stopped
            return Outcome(job.key, "skipped", reason="done")
    spent = spent_reason(policy, job.root)
    if spent is not None:
        return Outcome(job.key, "skipped", reason=spent, limit=spent)
    try:
        key = _api_key(job)
        live, dropped = usable_endpoints(job, key, recheck_failed_since=recheck_since)
    except (LookupError, ValueError) as exc:
        log_line(job, f"== {now()} not started: {exc}")
        return _end(job, "failed", f"not started: {exc}", started)
    for url, why in dropped.items():
        log_line(job, f"== {now()} endpoint {redact_url(url)} failed its check ({why}): "
                      "left out")
    if not live:
        why = "; ".join(f"{redact_url(url)}: {reason}" for url, reason in dropped.items())
        return _end(job, "failed", f"not started: no endpoint passed its check ({why})",
                    started, infra=True)
    env = {**os.environ, **job.env, "VLLM_BASE_URL": ",".join(live), "OPENAI_API_KEY": key}
    try:
        ended = launch(job, env, stop, _watch(job, policy), where)
    except Stopped:
        log_line(job, f"== {now()} not started: the grid was stopped")
        return Outcome(job.key, "skipped", reason="the grid was stopped")
    if policy.token_budget is not None:
        record_tokens(job)
    return _ended(job, ended.rc, ended.by_grid, ended.limit, started)


def _ended(job: GridJob, rc: int, by_grid: bool, limit: str | None,
           started: float) -> Outcome:
    if by_grid:
        return _end(job, "interrupted", f"stopped by the grid (exit {rc}): the next run "
                                        "resumes it", started, rc=rc)
    if limit is not None and limit.startswith("time limit"):
        return _end(job, "failed", f"{limit}: stopped (exit {rc}); a rerun with a longer "
                                   "limit resumes it", started, rc=rc)
    if limit is not None:
        return _end(job, "interrupted", f"{limit}: stopped (exit {rc}); the next run resumes "
                                        "it", started, rc=rc, limit=limit)
    if rc == 0 and is_done(job):
        write_state(job, **{**_kept_fields(job), "state": "done", "rc": 0, "ended": now()})
        return Outcome(job.key, "done", rc=0, seconds=time.monotonic() - started)
    last = next((line for line in reversed(last_lines(job, 20)) if line.strip()), "")
    reason = f"exit {rc}" + (f": {last.strip()[:300]}" if last else "")
    if rc == 0:
        reason = f"exit 0 without a whole {job.done_file}"
    return _end(job, "failed", reason, started, rc=rc, infra=infrastructure(rc))


def _watch(job: GridJob, policy: JobPolicy):  # noqa: ANN202 - a closure for launch
    """The running job's limits check: a reason to stop it, or None."""
    checked = [time.monotonic()]

    def watch(running_s: float) -> str | None:
        if policy.time_limit_s is not None and running_s > policy.time_limit_s:
            return f"time limit of {policy.time_limit_s:.0f} s reached"
        if policy.deadline is not None and time.time() >= policy.deadline:
            return "the grid's time budget ran out"
        if policy.token_budget is not None and \
                time.monotonic() - checked[0] >= BUDGET_CHECK_S:
            checked[0] = time.monotonic()
            record_tokens(job)
            return spent_reason(policy, job.root)
        return None

    return watch
