"""One attempt of a grid job as a process: start it, watch it, stop it.

Contract:
- `launch(job, env, stop, watch, where=None) -> Ended` writes the attempt's header to the
  job's log, starts the job's command in its `cwd` with `env` (stdout and stderr appended to
  the log), marks its state `running` (pid, host, `where` as `node` when given, attempts + 1)
  and waits for it. Every `TICK_S` it touches the state file (the heartbeat status on another
  host goes by) and calls `watch(seconds_running)`: a reason it returns stops the process
  (SIGTERM, SIGKILL `STOP_GRACE_S` later) and comes back as `Ended.limit`.
- `stop` (an executor's event) is checked right before the process starts, under the lock
  `terminate_running` takes: once it is set, `Stopped` is raised and nothing starts, so a
  stopping grid never leaves a job started after its last SIGTERM.
- `Ended.by_grid` is True for a process that `terminate_running` / `stop_running` stopped.
  When this call is interrupted while its job runs (a cancelled Ray task, a worker's exit) the
  job is stopped, its state says `interrupted` (unless a Slurm checkpoint marked it
  `requeued`), and the exception goes on.
- On Linux the job's process gets SIGTERM when the thread that started it dies (a killed grid
  or worker leaves no orphan job behind) and ignores SIGUSR2 (Slurm's time-limit warning,
  which reaches every process of a task: the task stops the job with SIGTERM itself).
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lcb.grid.plan import GridJob
from lcb.grid.state import log_path, process_start, read_state, touch_state, write_state

TICK_S = 5.0  # how often a running job's state is touched and its limits checked
STOP_GRACE_S = 30.0  # a stopped job's time to close its journal before SIGKILL

_RUNNING: set[subprocess.Popen] = set()
_STOPPED: set[subprocess.Popen] = set()  # the jobs terminate_running stopped
_LOCK = threading.RLock()  # reentrant: a checkpoint in a signal handler may take it again


class Stopped(Exception):
    """The grid was stopped before the job's process started."""


@dataclass(frozen=True)
class Ended:
    """How an attempt's process ended: its exit code, and who stopped it, if anyone."""

    rc: int
    by_grid: bool = False
    limit: str | None = None


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def log_line(job: GridJob, text: str) -> None:
    """Append one line to the job's log."""
    path = log_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(text + "\n")


def command_argv(argv: tuple[str, ...]) -> list[str]:
    """`argv` with `lcb` resolved to this environment's `lcb` (beside the interpreter first)."""
    if argv[0] != "lcb":
        return list(argv)
    beside = Path(sys.executable).parent / "lcb"
    found = str(beside) if beside.exists() else shutil.which("lcb")
    if found:
        return [found, *argv[1:]]
    return [sys.executable, "-c", "import sys; from lcb.cli import main; sys.argv[0] = 'lcb'; "
            "main()", *argv[1:]]


def launch(job: GridJob, env: dict[str, str], stop: threading.Event | None,
           watch: Callable[[float], str | None], where: str | None = None) -> Ended:
    """Run one attempt of the job to its end (module docstring)."""
    attempts = read_state(job).get("attempts", 0) + 1
    log_line(job, f"== {now()} attempt {attempts}{f' on {where}' if where else ''}: "
                  f"(cd {job.cwd} && {job.shell()})")
    with log_path(job).open("ab") as log:
        with _LOCK:  # terminate_running takes it too: no job starts after a stop's SIGTERM
            if stop is not None and stop.is_set():
                raise Stopped
            process = subprocess.Popen(command_argv(job.argv), cwd=job.cwd, env=env,
                                       stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            _RUNNING.add(process)
        try:
            extra = {"node": where} if where else {}
            write_state(job, state="running", pid=process.pid, host=socket.gethostname(),
                        pid_start=process_start(process.pid), started=now(),
                        attempts=attempts, **extra)
            rc, limit = _wait(job, process, watch)
        except BaseException:  # a cancelled task or worker: the job stops with it
            _stop(process)
            with contextlib.suppress(OSError):
                if read_state(job).get("state") != "requeued":  # a checkpoint said more
                    write_state(job, state="interrupted", rc=process.returncode, ended=now(),
                                reason="stopped with its task: the next run resumes it")
            raise
        finally:
            with _LOCK:
                _RUNNING.discard(process)
                by_grid = process in _STOPPED
                _STOPPED.discard(process)
    return Ended(rc, by_grid=by_grid, limit=limit)


def _wait(job: GridJob, process: subprocess.Popen,
          watch: Callable[[float], str | None]) -> tuple[int, str | None]:
    """Wait for the process, with a heartbeat and a limits check every `TICK_S`."""
    started = time.monotonic()
    while True:
        try:
            return process.wait(timeout=TICK_S), None
        except subprocess.TimeoutExpired:
            touch_state(job)
        limit = watch(time.monotonic() - started)
        if limit is not None:
            _stop(process)
            return process.returncode, limit


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the job's child: SIGTERM when the thread that started it goes away, and SIGUSR2
    ignored (Slurm sends its time-limit warning to every process of a task; the task stops
    its job with SIGTERM, where the job closes its journal, instead of dying at the warning)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _signal_running(kill: bool) -> int:
    with _LOCK:
        running = [p for p in _RUNNING if p.poll() is None]
        _STOPPED.update(running)
    for process in running:
        if kill:
            process.kill()
        else:
            process.terminate()
    return len(running)


def terminate_running() -> int:
    """SIGTERM to every job this process started that still runs; how many were sent."""
    return _signal_running(kill=False)


def stop_running(grace_s: float) -> int:
    """SIGTERM to every running job, SIGKILL to those still running `grace_s` later; how
    many got SIGTERM."""
    sent = terminate_running()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        with _LOCK:
            if all(p.poll() is not None for p in _RUNNING):
                return sent
        time.sleep(0.05)
    _signal_running(kill=True)
    return sent
