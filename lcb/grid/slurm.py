"""`--executor slurm`: the grid's pending jobs as one Slurm job array, through submitit.

Contract of `run_array(jobs, spec, options)`:
- One array of `GridTask` calls (one per job) is submitted with the spec's `slurm` settings:
  `array_parallelism` (how many run at once), `time_limit_min`, `partition`, `cpus_per_task`,
  `mem_gb`; submitit's files and each task's own log go to `log_folder` (relative to the grid
  folder). `slurm.cluster: local` runs the same array as processes on this machine
  (submitit's local executor, no Slurm), as some tests do. Which task runs which job is
  recorded (`lcb.grid.slurm_view.record_tasks`) for `lcb grid status`.
- A task is `lcb.grid.jobrun.run_job`, so a job already done when its task starts is skipped.
  `GridTask` is submitit `Checkpointable`: on Slurm's warning signal before the time limit (or
  a preemption that sends it), submitit asks it to checkpoint; it stops the running job
  (SIGTERM: the job's journal stays whole), marks it `requeued` (pending again) and resubmits
  itself with the same job, which resumes from its journal or records.
- A task that Slurm itself stops (SIGTERM: `scontrol requeue`, `scancel`, a preemption, the
  hard time limit) stops its job the same way, records it `interrupted` and returns nothing:
  Slurm ends the task, and a requeued task runs the job again and resumes it. Returning would
  leave a result behind for a job that is not finished.
- With `options.wait` the call waits for every task and returns their outcomes (in completion
  order). It needs no Slurm accounting: a task's result file says it ended, and squeue's view
  (`task_states`) says when a task ended without one (a `failed` outcome naming Slurm's state:
  `CANCELLED`, `NODE_FAIL`, `TIMEOUT`, ...); a requeued task is waited for. Ctrl-C stops the
  waiting only: the array keeps running (follow it with `lcb grid status`). Without
  `options.wait` it returns at once (an empty list) after printing the array's id.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcb.grid.jobrun import Outcome, run_job, stop_running
from lcb.grid.limits import NO_LIMITS, JobPolicy
from lcb.grid.plan import GridJob
from lcb.grid.slurm_view import FINAL, SchedulerUnavailable, record_tasks, task_states
from lcb.grid.spec import GridSpec
from lcb.grid.state import read_state, write_state

if TYPE_CHECKING:
    from lcb.grid.executors import RunOptions

try:
    from submitit.helpers import Checkpointable, DelayedSubmission
except ImportError:  # the `grid` extra is not installed: `run_array` says so
    Checkpointable, DelayedSubmission = object, None  # type: ignore[assignment,misc]

STOP_GRACE_S = 20.0  # a stopped job's time to close its journal (Slurm's KillWait is 30 s)
POLL_S = 2.0  # how often the waiting driver looks at result files and squeue
RESULT_GRACE_S = 90.0  # a COMPLETED task's result file may take this long to show (NFS)
ENDED_WAIT_S = 600.0  # a task stopped by Slurm waits this long to be killed or requeued


class GridTask(Checkpointable):  # type: ignore[misc,valid-type]
    """One array task: run one job; on preemption, stop it and requeue with the same job."""

    def __init__(self, policy: JobPolicy = NO_LIMITS) -> None:
        self.policy = policy

    def __call__(self, job: GridJob) -> Outcome:
        stopped = threading.Event()
        previous = _on_sigterm(stopped)
        try:
            outcome = run_job(job, stopped, self.policy)
        finally:
            _restore_sigterm(previous)
        if stopped.is_set() and outcome.status in ("failed", "interrupted"):  # it launched
            if read_state(job).get("state") != "requeued":  # else a checkpoint said more
                write_state(job, state="interrupted", rc=outcome.rc,
                            reason="stopped by Slurm (requeue, preemption, cancel or time "
                                   "limit): the next run resumes it")
            time.sleep(ENDED_WAIT_S)  # no result: Slurm kills or requeues this task now
        return outcome

    def checkpoint(self, job: GridJob) -> Any:
        stop_running(STOP_GRACE_S)
        # not `running` any more, so the requeued task (on any node) runs it at once
        write_state(job, state="requeued", reason="preempted or out of time: requeued")
        return DelayedSubmission(self, job)


def _on_sigterm(stopped: threading.Event) -> Any:
    """SIGTERM from Slurm: stop the running job (it closes its journal) and remember it."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        del signum, frame
        stopped.set()
        threading.Thread(target=stop_running, args=(STOP_GRACE_S,), daemon=True).start()

    return signal.signal(signal.SIGTERM, handler)


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _executor(spec: GridSpec) -> Any:
    try:
        import submitit
    except ImportError:
        from lcb.grid.executors import ExecutorUnavailable

        raise ExecutorUnavailable("--executor slurm needs submitit: pip install -e '.[grid]'"
                                  ) from None
    s = spec.slurm
    folder = spec.root / s.log_folder / "%j"  # per task: ARRAY_INDEX on Slurm
    executor = submitit.AutoExecutor(folder=folder, cluster=s.cluster)
    params: dict[str, Any] = {"timeout_min": s.time_limit_min, "cpus_per_task": s.cpus_per_task,
                              "name": f"lcb-grid-{spec.root.name}",
                              "slurm_array_parallelism": s.array_parallelism}
    if s.mem_gb is not None:
        params["mem_gb"] = s.mem_gb
    if s.partition is not None:
        params["slurm_partition"] = s.partition
    executor.update_parameters(**params)
    return executor


def _outcome(job: GridJob, task: Any) -> Outcome:
    try:
        return task.result()
    except Exception as exc:  # noqa: BLE001 - a dead task is a failed job, reported, not raised
        reason = str(exc).strip().splitlines()
        return Outcome(job.key, "failed", reason=f"task {task.job_id}: "
                       f"{reason[-1] if reason else type(exc).__name__}")


def run_array(jobs: Sequence[GridJob], spec: GridSpec, options: RunOptions) -> list[Outcome]:
    """Submit `jobs` as one array (module docstring)."""
    if not jobs:
        return []
    from lcb.grid.executors import ExecutorUnavailable, GridInterrupted

    try:
        executor = _executor(spec)
        tasks = executor.map_array(GridTask(options.policy), list(jobs))
    except ExecutorUnavailable:
        raise
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        raise ExecutorUnavailable(f"cannot submit the array to Slurm: {exc}") from None
    array = str(tasks[0].job_id).split("_")[0]
    if spec.slurm.cluster == "slurm":
        record_tasks(spec.root, array, {job.key: str(task.job_id)
                                        for job, task in zip(jobs, tasks, strict=True)})
    print(f"submitted {len(tasks)} task(s) as array {array}; logs in "
          f"{Path(spec.root / spec.slurm.log_folder)}", file=sys.stderr)
    if not options.wait:
        return []
    try:
        return _wait_all(list(zip(jobs, tasks, strict=True)), spec, options)
    except KeyboardInterrupt:
        print(f"stopped waiting: array {array} keeps running (follow it with lcb grid status; "
              f"cancel it with scancel {array})", file=sys.stderr)
        raise GridInterrupted(signal.SIGINT) from None


def _wait_all(pairs: list[tuple[GridJob, Any]], spec: GridSpec,
              options: RunOptions) -> list[Outcome]:
    """Each task's outcome as it ends (module docstring)."""
    on_slurm = spec.slurm.cluster == "slurm"
    outcomes: list[Outcome] = []
    ended_at: dict[str, float] = {}  # when a task was first seen ended without a result
    warned = False
    while pairs:
        left = []
        for job, task in pairs:
            finished = task.paths.result_pickle.exists() if on_slurm else task.done()
            if finished:
                outcomes.append(_outcome(job, task))
                options.on_outcome(outcomes[-1])
            else:
                left.append((job, task))
        pairs = left
        if pairs and on_slurm:
            try:
                pairs = _drop_dead(pairs, ended_at, outcomes, options)
            except SchedulerUnavailable as exc:
                if not warned:
                    print(f"{exc}: waiting on the tasks' result files only", file=sys.stderr)
                    warned = True
        if pairs:
            time.sleep(POLL_S)
    return outcomes


def _drop_dead(pairs: list[tuple[GridJob, Any]], ended_at: dict[str, float],
               outcomes: list[Outcome], options: RunOptions) -> list[tuple[GridJob, Any]]:
    """The tasks still to wait for; the ones Slurm ended without a result become `failed`:
    at the second look, or `RESULT_GRACE_S` after a `COMPLETED` one was first seen (its
    result file may not be visible yet on a network filesystem)."""
    states = task_states(str(task.job_id) for _, task in pairs)
    left = []
    for job, task in pairs:
        task_id = str(task.job_id)
        state = states.get(task_id)
        ended = state is None or state.state in FINAL
        if not ended or task.paths.result_pickle.exists():
            ended_at.pop(task_id, None)
            left.append((job, task))
            continue
        first = ended_at.setdefault(task_id, time.monotonic())
        grace = RESULT_GRACE_S if state is not None and state.state == "COMPLETED" else POLL_S
        if time.monotonic() - first < grace:
            left.append((job, task))
            continue
        what = f"ended {state.state}" if state else "is no longer listed by Slurm"
        outcomes.append(Outcome(job.key, "failed",
                                reason=f"Slurm task {task_id} {what} without a result "
                                       f"(its log: {task.paths.stderr})"))
        options.on_outcome(outcomes[-1])
    return left
