"""The one job function every executor runs: check the endpoints, run the job's command.

Contract of `run_job(job, stop=None) -> Outcome`:
- The whole call holds the job's lock (`lcb.grid.state.job_lock`); a job whose lock another
  process holds (a second grid, an overlapping shard) is `skipped` as running elsewhere, and
  nothing is launched or written.
- A job that is done (`lcb.grid.state.is_done`: a whole `result.json`, a complete
  `summary.json`) is `skipped` without a process; so is one whose state says it runs now in a
  live process (another grid launched it).
- Before launching, each of the model's endpoints gets lcb's endpoint check
  (`lcb.grid.checks`: a verdict is shared for a minute by the jobs starting together); one
  that fails is dropped from this job's `VLLM_BASE_URL` (named in its log, credentials taken
  out), and a job with none left is not started: it is `failed` with the reason. A model whose
  `api_key_env` variable is unset fails the same way.
- Otherwise the job's command runs in its `cwd`, with the environment of this process plus
  the job's, the API key copied into `OPENAI_API_KEY`; stdout and stderr are appended to its
  log (`lcb.grid.state`). The state file says `running` (pid, host) while it runs, then
  `done` or `failed` (exit code, the log's last line); the state file is touched every
  `HEARTBEAT_S` meanwhile. A job that exits 0 without its done file is `failed` too.
- `stop` (an executor's event) is checked right before the process starts, under the lock
  `terminate_running` takes: once it is set, no job starts (the outcome is `skipped`), so a
  stopping grid never leaves a job started after its last SIGTERM.
- A job stopped by the grid (`terminate_running`, or this call interrupted while its job
  runs, as a cancelled Ray task is) is `interrupted`, not failed: its state says so and the
  next run resumes it.
- Any other error of this call (an `OSError` from starting the process, a full disk) is the
  job's: `failed` with the error as the reason, never raised into the executor.
- On Linux the job's process gets SIGTERM when the thread that started it dies (a killed
  grid or worker leaves no orphan job behind); `terminate_running()` sends SIGTERM to every
  job started by this process, `stop_running(grace_s)` then SIGKILL to those still running
  after `grace_s` (an executor's Ctrl-C / SIGTERM path).
- Rerunning a failed or interrupted job is the same call: the job's own command resumes from
  its journal or records.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from lcb.agents.endpoints import redact_url
from lcb.grid.checks import usable_endpoints
from lcb.grid.plan import GridJob
from lcb.grid.state import (
    HEARTBEAT_S,
    is_done,
    job_lock,
    job_status,
    last_lines,
    log_path,
    read_state,
    touch_state,
    write_state,
)

_RUNNING: set[subprocess.Popen] = set()
_STOPPED: set[subprocess.Popen] = set()  # the jobs terminate_running stopped
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Outcome:
    """How one `run_job` call ended."""

    key: str
    status: Literal["done", "skipped", "failed", "interrupted"]
    rc: int | None = None
    reason: str = ""
    seconds: float = 0.0


class _Stopped(Exception):
    """The grid was stopped before the job's process started."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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


def _api_key(job: GridJob) -> str:
    if job.key_env is None:
        return os.environ.get("OPENAI_API_KEY") or "EMPTY"
    key = os.environ.get(job.key_env)
    if not key:
        raise LookupError(f"the variable {job.key_env} (api_key_env of model "
                          f"{job.axes['model']!r}) is not set")
    return key


def _log(job: GridJob, text: str) -> None:
    path = log_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(text + "\n")


def _end(job: GridJob, status: Literal["failed", "interrupted"], reason: str, started: float,
         rc: int | None = None) -> Outcome:
    """Record the job's end as `status` (a state that cannot be written is left as it was:
    the outcome still says what happened)."""
    with contextlib.suppress(OSError):
        write_state(job, state=status, rc=rc, reason=reason, ended=_now())
    return Outcome(job.key, status, rc=rc, reason=reason, seconds=time.monotonic() - started)


def run_job(job: GridJob, stop: threading.Event | None = None) -> Outcome:
    """Run one job of a grid to its end (module docstring)."""
    started = time.monotonic()
    try:
        with job_lock(job) as mine:
            if not mine:
                return Outcome(job.key, "skipped", reason="running elsewhere (its lock is "
                                                          "taken)")
            return _run_locked(job, stop, started)
    except Exception as exc:  # noqa: BLE001 - one job's error is its own, recorded
        return _end(job, "failed", f"{type(exc).__name__}: {exc}", started)


def _run_locked(job: GridJob, stop: threading.Event | None, started: float) -> Outcome:
    if is_done(job):
        return Outcome(job.key, "skipped", reason="done")
    if read_state(job).get("state") == "running" and job_status(job) == "running":
        return Outcome(job.key, "skipped", reason="running in another process")
    try:
        key = _api_key(job)
        live, dropped = usable_endpoints(job, key)
    except (LookupError, ValueError) as exc:
        _log(job, f"== {_now()} not started: {exc}")
        return _end(job, "failed", f"not started: {exc}", started)
    for url, why in dropped.items():
        _log(job, f"== {_now()} endpoint {redact_url(url)} failed its check ({why}): left out")
    if not live:
        why = "; ".join(f"{redact_url(url)}: {reason}" for url, reason in dropped.items())
        return _end(job, "failed", f"not started: no endpoint passed its check ({why})",
                    started)
    env = {**os.environ, **job.env, "VLLM_BASE_URL": ",".join(live), "OPENAI_API_KEY": key}
    try:
        rc, stopped = _launch(job, env, stop)
    except _Stopped:
        _log(job, f"== {_now()} not started: the grid was stopped")
        return Outcome(job.key, "skipped", reason="the grid was stopped")
    if stopped:
        return _end(job, "interrupted", f"stopped by the grid (exit {rc}): the next run "
                                        "resumes it", started, rc=rc)
    if rc == 0 and is_done(job):
        write_state(job, state="done", rc=0, ended=_now())
        return Outcome(job.key, "done", rc=0, seconds=time.monotonic() - started)
    last = next((line for line in reversed(last_lines(job, 20)) if line.strip()), "")
    reason = f"exit {rc}" + (f": {last.strip()[:300]}" if last else "")
    if rc == 0:
        reason = f"exit 0 without a whole {job.done_file}"
    return _end(job, "failed", reason, started, rc=rc)


def _launch(job: GridJob, env: dict[str, str], stop: threading.Event | None) -> tuple[int, bool]:
    """Run the job's process to its end: (exit code, whether the grid stopped it)."""
    attempts = read_state(job).get("attempts", 0) + 1
    _log(job, f"== {_now()} attempt {attempts}: (cd {job.cwd} && {job.shell()})")
    with log_path(job).open("ab") as log:
        with _LOCK:  # terminate_running takes it too: no job starts after a stop's SIGTERM
            if stop is not None and stop.is_set():
                raise _Stopped
            process = subprocess.Popen(command_argv(job.argv), cwd=job.cwd, env=env,
                                       stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            _RUNNING.add(process)
        try:
            write_state(job, state="running", pid=process.pid, host=socket.gethostname(),
                        started=_now(), attempts=attempts)
            rc = _wait(job, process)
        except BaseException:  # a cancelled task or worker: the job stops with it
            _stop(process)
            with contextlib.suppress(OSError):
                write_state(job, state="interrupted", rc=process.returncode, ended=_now(),
                            reason="stopped with its task: the next run resumes it")
            raise
        finally:
            with _LOCK:
                _RUNNING.discard(process)
                stopped = process in _STOPPED
                _STOPPED.discard(process)
    return rc, stopped


def _wait(job: GridJob, process: subprocess.Popen) -> int:
    """Wait for the job's process, touching its state file every `HEARTBEAT_S` (status on
    another host takes a job whose state has not been touched for a while as gone)."""
    while True:
        try:
            return process.wait(timeout=HEARTBEAT_S)
        except subprocess.TimeoutExpired:
            touch_state(job)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the job's child: SIGTERM when the thread that started it goes away."""
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
