"""Process primitives of a program host: forking a contained program, watching it, its files.

- `spawn(body, …)` forks a program process: its entry first (`program_entry`: the program's
  memory group, its Landlock domain), own session, fds 0/1/2 as given, no other descriptors
  (but `keep`), its own CPU and file-size limits, then runs `body` (which ends the process).
- `watch(pid, …)` waits on a pidfd until the process exits, a deadline passes, a control
  descriptor becomes readable or the caller's wake-up time comes, meanwhile draining the
  program's stderr pipe (`StderrTail` keeps its last bytes and counts the rest: stderr is
  never judged, so it has no cap).
- `finish(pid, …)` kills the process group when asked, reaps, then kills every other
  descendant (the host is a child subreaper) and drains what is left of stderr.
- `Exit` is how a process ended, as its host saw it (the judge makes verdicts of it:
  `lcb.grading.verdicts.failure_verdict`); `memfd` and `read_fd` carry a test's input and
  output. Working directories live in `lcb.sandbox.workdirs`.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from resource import setrlimit
from typing import NamedTuple, NoReturn

from lcb.sandbox.contain import enter_child, kill_descendants
from lcb.sandbox.privilege import set_dumpable

STDERR_TAIL_BYTES = 8192


class Exit(NamedTuple):
    """How a program process ended, as its host saw it."""

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
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def read_fd(fd: int, limit: int, *, tail: bool = False) -> bytes:
    """Up to `limit` bytes from the start (or the end) of a memfd."""
    size = os.fstat(fd).st_size
    offset = max(0, size - limit) if tail else 0
    return os.pread(fd, min(limit, size), offset)


class StderrTail:
    """The read end of a program's stderr pipe: keeps the last bytes, counts all of them."""

    def __init__(self, fd: int, *, keep: int = STDERR_TAIL_BYTES):
        os.set_blocking(fd, False)
        self.fd, self.keep, self.total, self.open = fd, keep, 0, True
        self.tail = bytearray()

    def pump(self, *, rounds: int = 64) -> None:
        """Read what is there now (at most `rounds` chunks); notice EOF."""
        for _ in range(rounds):
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self.open = False
                return
            self.total += len(chunk)
            self.tail += chunk
            if len(self.tail) > 2 * self.keep:
                del self.tail[:-self.keep]

    def close(self) -> str:
        """The kept tail as text; closes the pipe."""
        self.pump(rounds=1024)
        os.close(self.fd)
        return bytes(self.tail[-self.keep:]).decode("utf-8", "replace")


def program_entry(*, memory_tasks: int | None, scope: Callable[[], int] | None
                  ) -> Callable[[], int] | None:
    """What a program process does first, right after its fork (`spawn`'s `scope`): join the
    program's memory group (`memory_tasks`, a descriptor on its `tasks` file that the host
    keeps; `enter_child` then closes it) and enter its Landlock domain (`scope`, see
    `landlock.scope_only`). The call returns a negative number on failure; None: nothing to
    do."""
    if memory_tasks is None:
        return scope
    write = functools.partial(os.write, memory_tasks, b"0")  # cgroups.join, bound here: in
    # the forked process every lookup and Python frame costs copy-on-write faults

    def enter() -> int:
        try:
            write()
        except OSError:
            return -1
        return 0 if scope is None else scope()

    return enter


def spawn(body: Callable[[], NoReturn], *, fds: tuple[int, int, int],
          rlimits: tuple[tuple[int, tuple[int, int]], ...], keep: tuple[int, ...] = (),
          scope: Callable[[], int] | None = None) -> int:
    """Fork a program process running `body` under `rlimits` (from `contain.own_rlimits`,
    computed once by the caller), after `scope` (see `program_entry`).

    The child reuses this process's `sys.std*` objects on its new fds 0/1/2, so they are
    flushed here first: nothing buffered may leak into a program's output. What the child does
    before `body` is kept short: every page it writes is a copy-on-write fault.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            # Its memory group (the OOM killer's choice stays among the program's processes),
            # a Landlock domain nested in the host's (no signal to it): see program_entry.
            if scope is not None and scope() < 0:
                os.write(fds[2], b"lcb: the program's process could not enter its memory "
                                 b"group or Landlock domain\n")
                os._exit(71)
            enter_child(fds=fds, keep=keep)
            for which, pair in rlimits:
                setrlimit(which, pair)
            set_dumpable(True)  # the program's own process, as under `python prog.py`
            body()
        finally:
            os._exit(70)
    return pid


def watch(pidfd: int, *, deadline: float | None, stderr: StderrTail | None,
          control: int | None = None, control_from: float = 0.0,
          wake_at: float | None = None) -> str:
    """Wait for "exited" (the pidfd), "deadline", "control" (readable, but only once the
    monotonic clock passes `control_from`: a short test is not interrupted by the next
    request arriving) or "wake" (the clock passed `wake_at`: the caller has work of its own
    to do meanwhile, then watches again), draining stderr."""
    while True:
        now = time.monotonic()
        left = None if deadline is None else deadline - now
        if left is not None and left <= 0:
            return "deadline"
        if wake_at is not None:
            if now >= wake_at:
                return "wake"
            left = wake_at - now if left is None else min(left, wake_at - now)
        fds = [pidfd] + ([stderr.fd] if stderr and stderr.open else [])
        if control is not None and now >= control_from:
            fds.append(control)
        elif control is not None:
            left = control_from - now if left is None else min(left, control_from - now)
        ready = select.select(fds, [], [], left)[0]
        if stderr is not None and stderr.fd in ready:
            stderr.pump()
        if pidfd in ready:
            return "exited"
        if control is not None and control in ready:
            return "control"


def finish(pid: int, pidfd: int, *, kill: bool, started: float, timed_out: bool) -> Exit:
    """Kill the program's group if asked, reap it and every other descendant."""
    if kill:
        kill_group(pid)
    os.close(pidfd)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    kill_descendants()
    return Exit(status, timed_out, wall, usage.ru_utime + usage.ru_stime)


def kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
