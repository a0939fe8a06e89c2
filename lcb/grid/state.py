"""What the grid keeps beside its jobs: one state file and one log per job, under `<out>/.grid/`.

Contract:
- `<out>/.grid/state/<slug>.json` holds the job's last known state: `running` (with the pid,
  the pid's start time (`process_start`) and host of its process, and when it started),
  `failed` (exit code and reason), `interrupted` (stopped by the grid: Ctrl-C, SIGTERM, a
  cancelled task), `requeued` (a preempted Slurm task) or `done`, plus `attempts` (how often
  the grid launched it) and the job's spend so far (`tokens`, `calls`: `lcb.grid.limits`),
  both carried from one state to the next. Written whole through `lcb.io.write_text`
  (atomic), so a kill never leaves half a file; a file that does not parse reads as no
  state.
- `<out>/.grid/logs/<slug>.log` gets each attempt's stdout and stderr, appended, after a
  header line naming the attempt and the command.
- `job_lock(job)` holds `<out>/.grid/locks/<slug>.lock` (a non-blocking `flock`) while one
  process runs the job: a second grid on the same grid folder is told the job is taken.
- `is_done(job)`: the job's own done file parses as a JSON object, and for a run grid's
  `summary.json` says `"complete": true` (`lcb run` writes its summary on every exit, an
  interrupted one included, so existing is not enough).
- `job_status(job)` is what status and the executors go by: `done` by `is_done` (whatever
  the state file says), `running` when the state says so and its process is alive (the same
  pid, started at the recorded time where it was recorded; on another
  host, where no pid can be checked: while its heartbeat, the state file's mtime, is under
  `STALE_S` old), `failed` when the state says so, else `pending` (never run, or interrupted:
  `interrupted(job)` tells).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from lcb.grid.plan import DONE_FILES, GridJob
from lcb.io import write_text

Status = Literal["done", "running", "failed", "pending"]
STATUSES: tuple[Status, ...] = ("done", "running", "failed", "pending")
GRID_DIR = ".grid"
HEARTBEAT_S = 30.0  # how often a running job's state file is touched
STALE_S = 4 * HEARTBEAT_S  # untouched this long, a job running on another host is gone


def state_path(job: GridJob) -> Path:
    return job.root / GRID_DIR / "state" / f"{job.slug}.json"


def log_path(job: GridJob) -> Path:
    return job.root / GRID_DIR / "logs" / f"{job.slug}.log"


def lock_path(job: GridJob) -> Path:
    return job.root / GRID_DIR / "locks" / f"{job.slug}.lock"


@contextlib.contextmanager
def job_lock(job: GridJob) -> Iterator[bool]:
    """Hold the job's lock for the block: True, or False when another process holds it.

    A `flock` goes with the process that holds it, so a killed grid never leaves it taken;
    the job's own process does not inherit it (`subprocess` closes other descriptors)."""
    path = lock_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_state(job: GridJob) -> dict[str, Any]:
    try:
        data = json.loads(state_path(job).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


CARRIED = ("tokens", "calls")  # a job's spend so far outlives each attempt's state


def write_state(job: GridJob, **fields: Any) -> dict[str, Any]:
    """Replace the job's state with `fields` (`attempts` and the spend, `CARRIED`, carried over
    unless given)."""
    old = read_state(job)
    state = {"attempts": old.get("attempts", 0),
             **{name: old[name] for name in CARRIED if name in old}, **fields}
    write_text(state_path(job), json.dumps(state, sort_keys=True) + "\n")
    return state


def touch_state(job: GridJob) -> None:
    """Mark the job's state as fresh (the heartbeat of a running job)."""
    try:
        os.utime(state_path(job))
    except OSError:
        pass


def _fresh(job: GridJob) -> bool:
    try:
        return time.time() - state_path(job).stat().st_mtime < STALE_S
    except OSError:
        return False


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat field 22): with
    its pid, it names one process, so a pid used again by another process is not taken for
    it. None where /proc cannot tell."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: Any, started: Any = None) -> bool:
    """The process `pid` runs, is no zombie, and (when `started` is known) is the one that
    started then."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    fields = _stat(pid)
    if fields is None:
        return True
    if isinstance(started, int) and process_start(pid) not in (None, started):
        return False  # the pid was used again
    return fields[0] != "Z"


def is_done(job: GridJob) -> bool:
    """The job's done file is whole and, for a run batch, complete (module docstring)."""
    try:
        data = json.loads((job.out / job.done_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict):
        return False
    return job.done_file != DONE_FILES["run"] or data.get("complete") is True


def job_status(job: GridJob) -> Status:
    """The job's status (module docstring)."""
    if is_done(job):
        return "done"
    state = read_state(job)
    if state.get("state") == "running":
        here = state.get("host") == socket.gethostname()
        alive = _alive(state.get("pid"), state.get("pid_start")) if here else _fresh(job)
        return "running" if alive else "pending"
    return "failed" if state.get("state") == "failed" else "pending"


def interrupted(job: GridJob) -> bool:
    """True for a pending job that has started before: the grid stopped it, or its folder
    holds something."""
    if read_state(job).get("state") in ("interrupted", "requeued"):
        return True
    return job.out.is_dir() and any(job.out.iterdir())


def last_lines(job: GridJob, count: int) -> list[str]:
    """The last `count` lines of the job's log (none when it has no log)."""
    try:
        with log_path(job).open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            tail = log.read().decode("utf-8", "replace")
    except OSError:
        return []
    return tail.splitlines()[-count:] if count > 0 else []


def statuses(jobs: Iterable[GridJob]) -> dict[str, Status]:
    return {job.key: job_status(job) for job in jobs}
