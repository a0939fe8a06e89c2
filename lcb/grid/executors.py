"""Where a grid's jobs run: a process pool here, a Slurm array (submitit) or Ray tasks.

Contract:
- `EXECUTORS[name](jobs, spec, options)` runs `lcb.grid.jobrun.run_job` on each job and
  returns the outcomes of the jobs it waited for (in completion order), calling
  `options.on_outcome` as each one ends. Every executor runs that same function, so a job is
  the same command whichever runs it, and a done job is skipped wherever it lands.
- `local`: a pool of `options.workers` job processes on this machine. Ctrl-C or SIGTERM
  stops the grid: no new job starts (a worker about to start one sees the stop first), running
  ones get SIGTERM (they stop cleanly, are recorded `interrupted` and resume on the next run)
  and SIGKILL if still running `STOP_GRACE_S` later, then `GridInterrupted` is raised.
- `slurm` and `ray` live in `lcb.grid.slurm` and `lcb.grid.ray_tasks` (imported on use: their
  libraries are optional extras).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from lcb.grid.jobrun import Outcome, run_job, stop_running
from lcb.grid.limits import NO_LIMITS, JobPolicy
from lcb.grid.plan import GridJob
from lcb.grid.spec import GridSpec

STOP_GRACE_S = 30.0  # a stopped job's time to close its journal before SIGKILL


class GridInterrupted(Exception):
    """The grid was stopped by a signal (`signal` is its number)."""

    def __init__(self, sig: int):
        super().__init__(f"interrupted by {signal.Signals(sig).name}")
        self.signal = sig


class ExecutorUnavailable(RuntimeError):
    """The executor's library is not installed, or its cluster cannot be reached."""


@dataclass(frozen=True)
class RunOptions:
    """How to run: local pool size, whether to wait for a cluster's jobs, Ray's address, the
    jobs' retries and limits (`lcb.grid.limits.JobPolicy`)."""

    workers: int = 2
    wait: bool = True
    address: str | None = None
    on_outcome: Callable[[Outcome], Any] = lambda outcome: None
    policy: JobPolicy = NO_LIMITS


def run_local(jobs: Sequence[GridJob], spec: GridSpec, options: RunOptions) -> list[Outcome]:
    """The jobs in a pool of `options.workers` processes (module docstring)."""
    del spec  # the local pool needs nothing from the spec
    stop = threading.Event()
    hit: list[int] = []
    previous = _on_signals(lambda sig: (hit.append(sig), stop.set()))
    outcomes: list[Outcome] = []
    pool = ThreadPoolExecutor(max_workers=max(1, options.workers),
                              thread_name_prefix="lcb-grid")
    try:
        pending: set[Future[Outcome]] = {pool.submit(_unless, stop, job, options.policy)
                                         for job in jobs}
        while pending and not stop.is_set():
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                outcomes.append(future.result())
                options.on_outcome(outcomes[-1])
    except KeyboardInterrupt:
        hit.append(signal.SIGINT)
        stop.set()
    except BaseException:  # the grid itself broke (a callback): its jobs stop with it
        stop.set()
        raise
    finally:
        if stop.is_set():
            pool.shutdown(wait=False, cancel_futures=True)
            stop_running(STOP_GRACE_S)
        pool.shutdown(wait=True, cancel_futures=True)
        _restore(previous)
    if hit:
        raise GridInterrupted(hit[0])
    return outcomes


def _unless(stop: threading.Event, job: GridJob, policy: JobPolicy) -> Outcome:
    if stop.is_set():
        return Outcome(job.key, "skipped", reason="the grid was stopped")
    return run_job(job, stop, policy)


def _on_signals(handler: Callable[[int], Any]) -> dict[int, Any]:
    """Route SIGTERM to `handler` (main thread only); the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signal.SIGTERM: signal.signal(signal.SIGTERM, lambda sig, _: handler(sig))}


def _restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def run_slurm(jobs: Sequence[GridJob], spec: GridSpec, options: RunOptions) -> list[Outcome]:
    from lcb.grid.slurm import run_array

    return run_array(jobs, spec, options)


def run_ray(jobs: Sequence[GridJob], spec: GridSpec, options: RunOptions) -> list[Outcome]:
    from lcb.grid.ray_tasks import run_tasks

    return run_tasks(jobs, spec, options)


EXECUTORS: dict[str, Callable[[Sequence[GridJob], GridSpec, RunOptions], list[Outcome]]] = {
    "local": run_local,
    "slurm": run_slurm,
    "ray": run_ray,
}
