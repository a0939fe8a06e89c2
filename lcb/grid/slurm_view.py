"""What Slurm says of a grid's tasks: which task runs which job, and each task's state.

Contract:
- `record_tasks(root, array, tasks)` adds a submitted array to `<root>/.grid/slurm_tasks.json`
  (job key -> its latest task id, `ARRAY_INDEX`, and when it was submitted), written whole
  (atomic). `recorded_tasks(root)` reads it back ({} when nothing was submitted).
- `task_states(task_ids)` asks `squeue -h -r -t all` for those tasks (finished ones too, while
  Slurm keeps them: `MinJobAge`, 300 s by default) and returns task id -> `TaskState` (Slurm's
  state word, e.g. `PENDING`, `RUNNING`, `REQUEUED`, `COMPLETED`, `FAILED`, `CANCELLED`,
  `TIMEOUT`, `NODE_FAIL`, and its reason, e.g. `JobArrayTaskLimit`, `BeginTime`). A pending
  array's tasks that squeue folds into one line (`123_[2-7%2]`) are unfolded (`-r`). A task
  Slurm no longer lists is absent. `SchedulerUnavailable` when squeue cannot run or answers an
  error (not on a cluster, the controller down), naming why.
- `FINAL` are the states a task does not leave (it will not run again by itself).
- Nothing here needs Slurm accounting (`sacct`): squeue works on a cluster without slurmdbd.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from lcb.io import write_text

TASKS_FILE = "slurm_tasks.json"
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})
SQUEUE_TIMEOUT_S = 60


class SchedulerUnavailable(RuntimeError):
    """squeue cannot be asked (not on a cluster, or its controller does not answer)."""


class TaskState(NamedTuple):
    state: str
    reason: str


def _path(root: Path) -> Path:
    return root / ".grid" / TASKS_FILE


def recorded_tasks(root: Path) -> dict[str, dict[str, Any]]:
    """Job key -> {"task", "submitted"} for every job the grid submitted to Slurm."""
    try:
        data = json.loads(_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_tasks(root: Path, array: str, tasks: Mapping[str, str]) -> None:
    """Add one submitted array's tasks (job key -> task id) to the grid's record (under a
    lock: two shards submitting at once both keep theirs)."""
    when = datetime.now(UTC).isoformat(timespec="seconds")
    _path(root).parent.mkdir(parents=True, exist_ok=True)
    with (_path(root).parent / f"{TASKS_FILE}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = recorded_tasks(root)
        known.update({key: {"task": task, "array": array, "submitted": when}
                      for key, task in tasks.items()})
        write_text(_path(root), json.dumps(known, indent=1, sort_keys=True) + "\n")


def _arrays(task_ids: Iterable[str]) -> list[str]:
    return sorted({task.split("_")[0] for task in task_ids})


def task_states(task_ids: Iterable[str]) -> dict[str, TaskState]:
    """Slurm's state of each task it still lists (module docstring)."""
    arrays = _arrays(task_ids)
    if not arrays:
        return {}
    argv = ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(arrays), "-o", "%i|%T|%r"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SchedulerUnavailable(f"cannot ask Slurm (squeue): {exc}") from None
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        # an array Slurm has forgotten (older than MinJobAge) is an error, not unavailability
        if lines and all("Invalid job id" in line for line in lines):
            return {}
        raise SchedulerUnavailable(f"squeue exited {done.returncode}: "
                                   f"{lines[-1] if lines else 'no message'}")
    states = {}
    for line in done.stdout.splitlines():
        task, state, reason = (line.split("|", 2) + ["", ""])[:3]
        if task:
            states[task.strip()] = TaskState(state.strip(), reason.strip())
    return states


def scheduler_report(root: Path, keys: Iterable[str]) -> dict[str, Any] | None:
    """Slurm's view of the jobs `keys` the grid submitted (None: it submitted none of them):
    `states` (Slurm state -> task count), `jobs` (key -> task, state, reason) and `error`
    when squeue cannot be asked. A task Slurm no longer lists has state `gone`."""
    recorded = recorded_tasks(root)
    tasks = {key: str(recorded[key].get("task")) for key in keys if key in recorded}
    if not tasks:
        return None
    try:
        states = task_states(tasks.values())
    except SchedulerUnavailable as exc:
        return {"executor": "slurm", "states": {}, "jobs": {}, "error": str(exc)}
    jobs = {}
    for key, task in tasks.items():
        state = states.get(task, TaskState("gone", ""))
        jobs[key] = {"task": task, "state": state.state, "reason": state.reason}
    counts: dict[str, int] = {}
    for entry in jobs.values():
        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
    return {"executor": "slurm", "states": counts, "jobs": jobs, "error": None}
