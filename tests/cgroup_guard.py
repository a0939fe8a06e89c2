"""An outer pids-cgroup guard for hostile-program tests (fork bombs, memory bombs, escapes).

Tests run as root here, where RLIMIT_NPROC is ignored: a containment bug in the code under test
could fork-bomb the machine. This helper puts the code under test in a fresh cgroup-v1 pids group
`/sys/fs/cgroup/pids/lcb-test-<uuid>` with `pids.max` set, so the kernel refuses forks beyond the
cap whatever the code does. The group's `tasks` file lists every thread still alive in it, which is
how a test proves that no process of a graded program survived.

Contract:
- `PidsGuard.create(max_pids=…)` makes the group (raises `GuardUnavailable` with a clear message
  when cgroup v1 pids is not mounted or not writable); `close()` SIGKILLs everything left in it,
  waits for the group to empty, and removes the directory. `pids_guard()` wraps both in a `with`.
- `guard.call(fn, *args, timeout_s=…)` forks a child, moves it into the group, runs `fn(*args)`
  there and returns its (pickled) result; an exception in `fn` is re-raised here as `GuardedError`
  carrying the child's traceback. The pytest process itself never joins the group.
- `guard.popen(argv, **kw)` starts a subprocess already inside the group.
- `guard.survivors(settle_s=…)` waits up to `settle_s` for the group to empty and returns the pids
  still in it (empty list = nothing survived).
- Groups nest: code under test that makes its own pids groups under its current group (as
  `lcb.sandbox` does) stays bounded by this guard's `pids.max`.

Example:
    with pids_guard(max_pids=200) as guard:
        grade = guard.call(grade_program, source, timeout_s=60)
        assert guard.survivors(settle_s=2.0) == []
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PIDS_ROOT = Path("/sys/fs/cgroup/pids")


class GuardUnavailable(RuntimeError):
    """The pids cgroup cannot be created (not cgroup v1, not mounted, or not root)."""


class GuardedError(RuntimeError):
    """The guarded callable raised, crashed, or overran its timeout; the message says which."""


def _read_pids(path: Path) -> list[int]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [int(line) for line in text.split()]


@dataclass(frozen=True)
class PidsGuard:
    """One pids cgroup; `path` is its directory under /sys/fs/cgroup/pids."""

    path: Path

    @classmethod
    def create(cls, *, max_pids: int = 256, prefix: str = "lcb-test") -> PidsGuard:
        if max_pids < 1:
            raise ValueError(f"max_pids must be >= 1, got {max_pids}")
        if not (PIDS_ROOT / "cgroup.procs").exists():
            raise GuardUnavailable(
                f"{PIDS_ROOT} is not a cgroup-v1 pids hierarchy: hostile-program tests need it "
                "(run as root on a host that mounts the pids controller)"
            )
        path = PIDS_ROOT / f"{prefix}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_pids))
        except OSError as exc:
            raise GuardUnavailable(f"cannot set up pids cgroup {path}: {exc}") from exc
        return cls(path)

    def add(self, pid: int) -> None:
        """Move process `pid` (all its threads) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """Every task (thread id) now in the group, including nested groups."""
        found = _read_pids(self.path / "tasks")
        for child in self.path.iterdir():
            if child.is_dir():
                found += PidsGuard(child).pids()
        return found

    def survivors(self, *, settle_s: float = 0.0) -> list[int]:
        """Wait up to `settle_s` seconds for the group to empty; return what is still there."""
        deadline = time.monotonic() + settle_s
        while True:
            left = self.pids()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.05)

    def peak(self) -> int | None:
        """The most tasks seen at once, when the kernel reports it (`pids.peak`)."""
        try:
            return int((self.path / "pids.peak").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start `argv` with the child already inside the group (it joins before exec)."""
        procs = str(self.path / "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))

        return subprocess.Popen(list(argv), preexec_fn=join, **kwargs)  # noqa: PLW1509

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 120.0) -> Any:
        """Run `fn(*args)` in a forked child inside the group; return its result."""
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            os.close(read_fd)
            _child_main(self, fn, args, write_fd)
        os.close(write_fd)
        try:
            payload = _read_result(read_fd, pid, timeout_s)
        finally:
            os.close(read_fd)
            _reap(pid)
        if payload is None:
            raise GuardedError(f"guarded call {fn.__name__} overran {timeout_s}s and was killed")
        if not payload:
            raise GuardedError(f"guarded call {fn.__name__} died without a result")
        ok, value = pickle.loads(payload)
        if not ok:
            raise GuardedError(f"guarded call {fn.__name__} raised:\n{value}")
        return value

    def kill_all(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self, *, settle_s: float = 10.0) -> None:
        """Kill what is left, wait for the group to empty, remove it (children first)."""
        deadline = time.monotonic() + settle_s
        while self.pids() and time.monotonic() < deadline:
            self.kill_all()
            time.sleep(0.05)
        for child in sorted(self.path.rglob("*"), key=lambda p: -len(p.parts)):
            if child.is_dir():
                _rmdir_quietly(child)
        _rmdir_quietly(self.path)


def _rmdir_quietly(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # still busy or already gone: the test's own assertions report survivors


def _child_main(guard: PidsGuard, fn: Callable[..., Any], args: tuple, write_fd: int) -> None:
    code = 0
    try:
        guard.add(os.getpid())
        result: tuple[bool, Any] = (True, fn(*args))
    except BaseException:  # report anything, including SystemExit, to the parent
        result, code = (False, traceback.format_exc()), 1
    try:
        data = pickle.dumps(result)
    except Exception:
        data, code = pickle.dumps((False, traceback.format_exc())), 1
    try:
        with os.fdopen(write_fd, "wb") as out:
            out.write(len(data).to_bytes(8, "big") + data)
    finally:
        os._exit(code)


def _read_result(fd: int, pid: int, timeout_s: float) -> bytes | None:
    """The child's length-prefixed result; b"" if it died first; None if `timeout_s` passed.

    Not "read to EOF": processes the child forked may inherit the pipe and keep it open.
    """
    buf, finished = b"", False
    deadline = time.monotonic() + timeout_s
    while True:
        if len(buf) >= 8 and len(buf) >= 8 + int.from_bytes(buf[:8], "big"):
            return buf[8 : 8 + int.from_bytes(buf[:8], "big")]
        if finished:
            return b""
        if time.monotonic() >= deadline:
            return None
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 1 << 16)
            buf += chunk
            finished = not chunk  # EOF: no writer is left
        elif os.waitpid(pid, os.WNOHANG)[0]:
            buf += _drain(fd)
            finished = True


def _drain(fd: int) -> bytes:
    chunks = []
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _reap(pid: int) -> None:
    """Kill the forked child if it still runs, then reap it (it may already be reaped)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


@contextmanager
def pids_guard(*, max_pids: int = 256) -> Iterator[PidsGuard]:
    """A fresh guard for the `with` block; always cleaned up (see `PidsGuard.close`)."""
    guard = PidsGuard.create(max_pids=max_pids)
    try:
        yield guard
    finally:
        guard.close()
