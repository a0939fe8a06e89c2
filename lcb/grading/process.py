"""Process primitives of a supervisor: the job, forking a contained program, waiting for it.

- `enter_supervisor(workdir, limits)` sets up, once per program, what each program process
  inherits: working directory, scrubbed environment, default signals, shared rlimits.
- `spawn(body, …)` forks a program process: own session, fds 0/1/2 as given (memfds), no other
  descriptors, its own CPU and file-size limits, then runs `body` (which ends the process).
- `wait_exit(pid, …)` waits through a pidfd until a deadline, kills the process group on
  overrun, reaps, then kills every other descendant (we are a child subreaper).
- `failure_verdict(…)` classifies an unclean end: time, output, memory limit or runtime error.
"""

from __future__ import annotations

import gc
import os
import re
import select
import signal
import sys
import time
import types
from collections.abc import Callable
from resource import setrlimit
from typing import NamedTuple, NoReturn

from lcb.grading.contain import (
    Limits,
    apply_shared_limits,
    enter_child,
    kill_descendants,
    prepare_sandbox,
)
from lcb.grading.verdicts import Verdict


class Case(NamedTuple):
    """One test as a worker receives it (an `lcb.data.problems.Test` has the same two fields)."""

    input: str
    output: str


class Job(NamedTuple):
    """One program to run on `tests` (inherited through fork, never serialized).

    `mode` is "stdin" or "functional" (a `Mode` compares equal); `tests` hold `.input` and
    `.output` (`Case` or `Test`)."""

    mode: str
    code: types.CodeType
    source: str
    tests: tuple[Case, ...]
    fn_name: str | None
    timeout_s: float
    all_tests: bool
    limits: Limits


class Exit(NamedTuple):
    """How a program process ended, as its supervisor saw it."""

    status: int        # raw wait status
    timed_out: bool
    wall_s: float
    cpu_s: float

    @property
    def signal(self) -> int | None:
        return os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None

    @property
    def exit_code(self) -> int | None:
        return os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else None


def memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name)
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def read_fd(fd: int, limit: int, *, tail: bool = False) -> bytes:
    """Up to `limit` bytes from the start (or the end) of a memfd."""
    size = os.fstat(fd).st_size
    offset = max(0, size - limit) if tail else 0
    return os.pread(fd, min(limit, size), offset)


def temp_root() -> str:
    """The temp directory, as `tempfile.gettempdir()` picks it (without importing tempfile)."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        path = os.environ.get(name)
        if path and os.path.isdir(path):
            return path
    return "/tmp"


def make_workdir(prefix: str = "lcb-prog-") -> str:
    """A new private directory under the temp dir (cheaper than `tempfile.mkdtemp` in a fork)."""
    path = os.path.join(temp_root(), f"{prefix}{os.getpid()}-{os.urandom(6).hex()}")
    os.mkdir(path, 0o700)
    return path


def remove_tree(path: str) -> None:
    """Remove `path` and whatever is in it; ignore errors. (`shutil`, which pulls in bz2 and
    lzma, is imported only when the directory is not already empty.)"""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


_WORKDIR_NAME = re.compile(r"lcb-(?:prog|exec)-(\d+)-[0-9a-f]{12}")


def sweep_stale_workdirs() -> None:
    """Remove working directories whose creator died before cleaning up (it was killed)."""
    root = temp_root()
    for name in os.listdir(root):
        match = _WORKDIR_NAME.fullmatch(name)
        if match and not os.path.exists(f"/proc/{match[1]}"):
            remove_tree(os.path.join(root, name))


def reset_workdir(workdir: str) -> None:
    """Make `workdir` (our cwd) an empty directory again: a program may fill or remove it."""
    try:
        if not os.listdir(workdir):
            return
        remove_tree(workdir)
    except FileNotFoundError:
        pass
    os.makedirs(workdir, 0o700, exist_ok=True)
    os.chdir(workdir)


def enter_supervisor(workdir: str, limits: Limits) -> None:
    """Once per program, in the supervisor: what every program process inherits from it."""
    prepare_sandbox(workdir)
    apply_shared_limits(limits)
    gc.freeze()  # forked children then never touch these objects when they collect garbage


def spawn(body: Callable[[], NoReturn], *, fds: tuple[int, int, int],
          rlimits: tuple[tuple[int, tuple[int, int]], ...], keep: tuple[int, ...] = ()) -> int:
    """Fork a program process (from a supervisor set up by `enter_supervisor`) running `body`,
    under `rlimits` (from `contain.own_rlimits`, computed once by the caller).

    The child reuses this process's `sys.std*` objects on its new fds 0/1/2, so they are
    flushed here first: nothing buffered may leak into a program's output. What the child does
    before `body` is kept short: every page it writes is a copy-on-write fault.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            enter_child(fds=fds, keep=keep)
            for which, pair in rlimits:
                setrlimit(which, pair)
            body()
        finally:
            os._exit(70)
    return pid


def wait_exit(pid: int, *, started: float, deadline: float) -> Exit:
    """Wait for `pid` until `deadline` (monotonic); on overrun kill its whole tree."""
    pidfd = os.pidfd_open(pid)
    try:
        ready = select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0]
    finally:
        os.close(pidfd)
    if not ready:
        _kill_group(pid)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    kill_descendants()
    return Exit(status, not ready, wall, usage.ru_utime + usage.ru_stime)


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def failure_verdict(ended: Exit, *, stdout_size: int, stderr_tail: str, limits: Limits) -> Verdict:
    """The verdict of a program process that timed out, failed, or wrote too much."""
    if ended.timed_out or ended.signal == signal.SIGXCPU:
        return Verdict.TIME_LIMIT
    if stdout_size >= limits.output_bytes or ended.signal == signal.SIGXFSZ:
        return Verdict.OUTPUT_LIMIT
    last = stderr_tail.strip().rsplit("\n", 1)[-1]
    if last.startswith("MemoryError"):
        return Verdict.MEMORY_LIMIT
    return Verdict.RUNTIME_ERROR


def describe_exit(ended: Exit) -> str:
    if ended.timed_out:
        return "killed at the time limit"
    if ended.signal is not None:
        return f"killed by signal {signal.Signals(ended.signal).name}"
    return f"exit code {ended.exit_code}"
