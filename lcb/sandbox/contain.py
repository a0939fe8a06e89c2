"""Containment primitives shared by the zygote, program hosts and `lcb.sandbox.python_exec`.

Stdlib only (zygotes import it before forking). See `lcb.sandbox` for the threat model.

- `Limits`: the resource limits a program runs under, read from the environment by the caller.
- `become_subreaper()` + `kill_descendants()`: orphans of a program reparent to us, so walking
  our children finds every live descendant, even one that called `setsid()`.
- `prepare_sandbox(workdir)` (cwd, scrubbed environment, default signals),
  `apply_shared_limits` (set once in a program host) and `own_rlimits` (precomputed there, set
  in each forked program process);
  `enter_child(...)`: what a program process does to itself right after fork.
- `kill_until_gone(alive)`: the SIGKILL-and-reap loop behind every sweep.
- Cgroups live in `lcb.sandbox.cgroups`, uids and capabilities in `lcb.sandbox.privilege`.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable
from typing import NamedTuple

from lcb.sandbox.libc import libc

GIB = 1 << 30
MIB = 1 << 20
# Above the larger program cap, in a slot's memory group: room for the zygote's and its hosts'
# own pages (the program's processes have a group of their own, limited to its cap exactly);
# a python_exec run's helper shares its group with the snippet.
MEMORY_HEADROOM = 96 * MIB
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def _env_bytes(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number of bytes, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (0 disables the cap), got {value}")
    return value


class Limits(NamedTuple):
    """Per-program resource limits. `memory_bytes` 0 means no address-space cap."""

    memory_bytes: int = 4 * GIB
    output_bytes: int = 16 * MIB      # largest file (and captured stdout/stderr) a program writes
    open_files: int = 256
    max_tasks: int = 128              # pids.max of the jail (processes and threads)
    stack_bytes: int = 256 * MIB
    tmp_bytes: int = 256 * MIB        # its private /tmp, a tmpfs (lcb as root)
    shm_bytes: int = 64 * MIB         # its private /dev/shm and System V shared memory

    @classmethod
    def for_functional(cls) -> Limits:
        """LCB_FUNCTIONAL_MEMORY_BYTES (4 GiB by default; 0 disables the cap)."""
        return cls(memory_bytes=_env_bytes("LCB_FUNCTIONAL_MEMORY_BYTES", 4 * GIB))

    @classmethod
    def for_stdin(cls) -> Limits:
        """LCB_SANDBOX_MEMORY_BYTES caps stdin programs and python_exec (4 GiB; 0 disables)."""
        return cls(memory_bytes=_env_bytes("LCB_SANDBOX_MEMORY_BYTES", 4 * GIB))


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process (Linux); False if unsupported."""
    try:
        return libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent exits."""
    try:
        libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def children_of(pid: int) -> list[int]:
    """Direct children of `pid` (all its threads), from /proc; [] if it is gone."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids += [int(k) for k in fh.read().split()]
        except OSError:
            continue
    return kids


def descendants_of(pid: int) -> list[int]:
    found, frontier = [], children_of(pid)
    while frontier:
        found += frontier
        frontier = [kid for parent in frontier for kid in children_of(parent)]
    return found


def reap_all() -> bool:
    """Collect every exited child of this process without blocking; True if children remain."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def kill_until_gone(alive: Callable[[], list[int]], *, settle_s: float) -> bool:
    """SIGKILL whatever `alive()` lists (reaping our own children) until it lists nothing.

    Returns True once nothing is left, False if `settle_s` seconds pass first.
    """
    deadline = time.monotonic() + settle_s
    while True:
        reap_all()
        pids = alive()
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.001)


def kill_descendants(*, settle_s: float = 5.0) -> bool:
    """SIGKILL and reap every descendant of this process; True if none is left."""
    if not reap_all():
        # No child left means no descendant left: as a subreaper we adopt every orphan below
        # us. This spares the /proc walk after each test of a well-behaved program.
        return True
    me = os.getpid()
    return kill_until_gone(lambda: descendants_of(me), settle_s=settle_s)


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment a program sees: no secrets, no PYTHON* variables from the host."""
    return {"PATH": SAFE_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def _cap(which: int, value: int) -> None:
    resource.setrlimit(*_capped(which, value))


def apply_shared_limits(limits: Limits, *, own_uid: bool = False) -> None:
    """The rlimits a program host shares with its programs: address space, files, no cores,
    no real-time or raised priority (a program at a higher priority than its host, on the
    CPU they share, would starve it); with `own_uid` (programs run as a uid of their own)
    also RLIMIT_NPROC, which then counts exactly the program's tasks (the host's among
    them)."""
    _cap(resource.RLIMIT_CORE, 0)
    _cap(resource.RLIMIT_RTPRIO, 0)
    _cap(resource.RLIMIT_NICE, 0)
    if own_uid:
        _cap(resource.RLIMIT_NPROC, limits.max_tasks + 8)
    _cap(resource.RLIMIT_NOFILE, limits.open_files)
    if limits.memory_bytes:
        _cap(resource.RLIMIT_AS, limits.memory_bytes)
    _, stack_hard = resource.getrlimit(resource.RLIMIT_STACK)
    if stack_hard == resource.RLIM_INFINITY or stack_hard >= limits.stack_bytes:
        resource.setrlimit(resource.RLIMIT_STACK, (limits.stack_bytes, stack_hard))


def _capped(which: int, value: int, *, hard_extra: int = 0) -> tuple[int, tuple[int, int]]:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    return which, (value, value + hard_extra if hard_extra else value)


def own_rlimits(limits: Limits, *, cpu_s: float) -> tuple[tuple[int, tuple[int, int]], ...]:
    """The per-program rlimits as `setrlimit` arguments: CPU seconds (SIGXCPU, then SIGKILL a
    second later) and file size. Computed in the parent, so a forked program only sets them."""
    return (_capped(resource.RLIMIT_CPU, max(1, int(cpu_s + 0.999)), hard_extra=1),
            _capped(resource.RLIMIT_FSIZE, limits.output_bytes))


def prepare_sandbox(workdir: str) -> None:
    """Working directory, scrubbed environment and default signals, for this process and what
    it forks. Program hosts call it once per program, so each forked test has less to do."""
    os.chdir(workdir)
    wanted = scrubbed_env(workdir)
    if not set(os.environ) <= set(wanted):  # zygotes start scrubbed: usually nothing to drop
        os.environ.clear()
    for key, value in wanted.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)


def enter_child(*, fds: tuple[int, int, int], keep: tuple[int, ...] = ()) -> None:
    """In a freshly forked program process: own session, std fds, nothing else inherited
    but `keep`."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
