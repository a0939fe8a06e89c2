"""Containment primitives shared by the grading worker and `lcb.sandbox.run_python`.

Stdlib only (workers import it before forking). See `lcb.sandbox` for the threat model.

- `Limits`: the resource limits a program runs under, read from the environment by the caller.
- `PidsJail`: a cgroup-v1 pids group (made under the caller's own pids group, so an outer
  guard's cap still applies) that bounds how many tasks a program tree may have and lets us kill
  every member, including those that escaped with `setsid()`. `PidsJail.create()` returns None
  where cgroups are unavailable (not root, cgroup v2, read-only /sys in bubblewrap).
- `become_subreaper()` + `kill_descendants()`: the fallback that works everywhere: orphans of a
  program reparent to us, so walking our children finds every live descendant.
- `prepare_sandbox(workdir)` (cwd, scrubbed environment, default signals) and
  `apply_shared_limits` / `apply_own_limits` (= `apply_limits`): set once in a supervisor or per
  program process; `enter_child(...)`: what a program process does to itself right after fork.
- `kill_until_gone(alive)`: the SIGKILL-and-reap loop behind both sweeps.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PIDS_ROOT = Path("/sys/fs/cgroup/pids")
GIB = 1 << 30
MIB = 1 << 20
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


@dataclass(frozen=True)
class Limits:
    """Per-program resource limits. `memory_bytes` 0 means no address-space cap."""

    memory_bytes: int = 4 * GIB
    output_bytes: int = 16 * MIB      # largest file (and captured stdout/stderr) a program writes
    open_files: int = 256
    max_tasks: int = 128              # pids.max of the jail (processes and threads)
    stack_bytes: int = 256 * MIB

    @classmethod
    def for_functional(cls) -> Limits:
        """LCB_FUNCTIONAL_MEMORY_BYTES (4 GiB by default; 0 disables the cap)."""
        return cls(memory_bytes=_env_bytes("LCB_FUNCTIONAL_MEMORY_BYTES", 4 * GIB))

    @classmethod
    def for_stdin(cls) -> Limits:
        """LCB_SANDBOX_MEMORY_BYTES caps stdin programs and python_exec (4 GiB; 0 disables)."""
        return cls(memory_bytes=_env_bytes("LCB_SANDBOX_MEMORY_BYTES", 4 * GIB))


@functools.cache  # dlopen once per process (workers call it before forking)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process (Linux); False if unsupported."""
    try:
        return _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent exits."""
    try:
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
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


@dataclass(frozen=True)
class PidsJail:
    """A pids cgroup; `path` is its directory. Members can be listed and killed."""

    path: Path

    @classmethod
    def create(cls, *, max_tasks: int, prefix: str = "lcb") -> PidsJail | None:
        """A fresh group nested under this process's own pids group, or None if unavailable."""
        try:
            line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines()
                        if ln.split(":")[1].split(",").count("pids"))
            parent = PIDS_ROOT / line.split(":", 2)[2].lstrip("/")
            _sweep_stale(parent)
            path = parent / f"{prefix}-{os.getpid()}-{os.urandom(4).hex()}"
            path.mkdir()
        except (OSError, StopIteration, IndexError):
            return None
        jail = cls(path)
        try:
            (path / "pids.max").write_text(str(max_tasks))
        except OSError:
            jail.remove()
            return None
        return jail

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def members(self) -> list[int]:
        """Every process in the group and in groups nested under it."""
        try:
            found = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            nested = [PidsJail(d) for d in self.path.iterdir() if d.is_dir()]
        except OSError:
            return []
        return found + [pid for jail in nested for pid in jail.members()]

    def kill_all(self, *, settle_s: float = 5.0) -> bool:
        """SIGKILL every member until none is left; True on success."""
        return kill_until_gone(self.members, settle_s=settle_s)

    def remove(self) -> None:
        """Remove the (emptied) group and any nested groups; leave it if still busy."""
        try:
            for nested in [d for d in self.path.iterdir() if d.is_dir()]:
                PidsJail(nested).remove()
            self.path.rmdir()
        except OSError:
            pass


_JAIL_NAME = re.compile(r"lcb(?:-[a-z]+)?-(\d+)-[0-9a-f]{8}")


def _sweep_stale(parent: Path) -> None:
    """Empty and remove jails whose creator died without cleaning up (e.g. it was killed)."""
    for path in parent.iterdir():
        match = _JAIL_NAME.fullmatch(path.name)
        if match and path.is_dir() and not Path(f"/proc/{match[1]}").exists():
            stale = PidsJail(path)
            stale.kill_all(settle_s=1.0)
            stale.remove()


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment a program sees: no secrets, no PYTHON* variables from the host."""
    return {"PATH": SAFE_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def _cap(which: int, value: int, *, hard_extra: int = 0) -> None:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value + hard_extra if hard_extra else value))


def apply_shared_limits(limits: Limits) -> None:
    """The rlimits a supervisor may share with its programs: address space, files, no cores."""
    _cap(resource.RLIMIT_CORE, 0)
    _cap(resource.RLIMIT_NOFILE, limits.open_files)
    if limits.memory_bytes:
        _cap(resource.RLIMIT_AS, limits.memory_bytes)
    _, stack_hard = resource.getrlimit(resource.RLIMIT_STACK)
    if stack_hard == resource.RLIM_INFINITY or stack_hard >= limits.stack_bytes:
        resource.setrlimit(resource.RLIMIT_STACK, (limits.stack_bytes, stack_hard))


def apply_own_limits(limits: Limits, *, cpu_s: float) -> None:
    """The per-program rlimits: CPU seconds (SIGXCPU, then SIGKILL a second later), file size."""
    _cap(resource.RLIMIT_CPU, max(1, int(cpu_s + 0.999)), hard_extra=1)
    _cap(resource.RLIMIT_FSIZE, limits.output_bytes)


def apply_limits(limits: Limits, *, cpu_s: float) -> None:
    """Set all of this process's rlimits (inherited by anything it starts)."""
    apply_shared_limits(limits)
    apply_own_limits(limits, cpu_s=cpu_s)


def prepare_sandbox(workdir: str) -> None:
    """Working directory, scrubbed environment and default signals, for this process and what
    it forks. Supervisors call it once per program, so each forked test has less to do."""
    os.chdir(workdir)
    wanted = scrubbed_env(workdir)
    if not set(os.environ) <= set(wanted):  # workers start scrubbed: usually nothing to drop
        os.environ.clear()
    for key, value in wanted.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)


def enter_child(*, fds: tuple[int, int, int], keep: tuple[int, ...] = (),
                workdir: str | None = None) -> None:
    """In a freshly forked program process: own session, std fds, nothing else inherited;
    with `workdir`, also `prepare_sandbox(workdir)` (when the parent did not)."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    if workdir is not None:
        prepare_sandbox(workdir)
