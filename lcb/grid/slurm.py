"""`--executor slurm`: the grid's pending jobs as one Slurm job array, through submitit.

Contract of `run_array(jobs, spec, options)`:
- One array of `GridTask` calls (one per job) is submitted with the spec's `slurm` settings:
  `array_parallelism` (how many run at once), `time_limit_min`, `partition`, `cpus_per_task`,
  `mem_gb`; submitit's files and each task's own log go to `log_folder` (relative to the grid
  folder). `slurm.cluster: local` runs the same array as processes on this machine
  (submitit's local executor, no Slurm), as the tests do.
- A task is `lcb.grid.jobrun.run_job`, so a job already done when its task starts is skipped.
  `GridTask` is submitit `Checkpointable`: on preemption or the time limit, submitit asks it
  to checkpoint, it stops the running job (SIGTERM: the job's journal stays whole), marks
  it `requeued` (pending again) and resubmits itself with the same job, which resumes from
  its journal or records.
- With `options.wait` the call waits for every task and returns their outcomes (a task that
  died is a `failed` outcome naming submitit's error); without, it returns at once (an empty
  list) after printing the array's id: `lcb grid status` follows it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcb.grid.jobrun import Outcome, run_job, terminate_running
from lcb.grid.plan import GridJob
from lcb.grid.spec import GridSpec
from lcb.grid.state import write_state

if TYPE_CHECKING:
    from lcb.grid.executors import RunOptions

try:
    from submitit.helpers import Checkpointable, DelayedSubmission
except ImportError:  # the `grid` extra is not installed: `run_array` says so
    Checkpointable, DelayedSubmission = object, None  # type: ignore[assignment,misc]


class GridTask(Checkpointable):  # type: ignore[misc,valid-type]
    """One array task: run one job; on preemption, stop it and requeue with the same job."""

    def __call__(self, job: GridJob) -> Outcome:
        return run_job(job)

    def checkpoint(self, job: GridJob) -> Any:
        terminate_running()
        # not `running` any more, so the requeued task (on any node) runs it at once
        write_state(job, state="requeued", reason="preempted or out of time: requeued")
        return DelayedSubmission(self, job)


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
    from lcb.grid.executors import ExecutorUnavailable

    try:
        executor = _executor(spec)
        tasks = executor.map_array(GridTask(), list(jobs))
    except ExecutorUnavailable:
        raise
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        raise ExecutorUnavailable(f"cannot submit the array to Slurm: {exc}") from None
    first = str(tasks[0].job_id).split("_")[0]
    print(f"submitted {len(tasks)} task(s) as array {first}; logs in "
          f"{Path(spec.root / spec.slurm.log_folder)}", file=sys.stderr)
    if not options.wait:
        return []
    outcomes = []
    for job, task in zip(jobs, tasks, strict=True):
        outcomes.append(_outcome(job, task))
        options.on_outcome(outcomes[-1])
    return outcomes
