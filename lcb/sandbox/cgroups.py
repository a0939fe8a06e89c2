"""Cgroup-v1 jails: one group per controller (pids, memory, cpu) around a tree of processes.

Contract:
- `Jail.create(max_tasks=…, memory_bytes=…)` makes a group named `<prefix>-<pid>-<hex>` in each
  available controller, nested under this process's own group there (so an outer guard's caps
  still apply), or returns None where cgroups are unavailable (not root, cgroup v2, a read-only
  /sys). The pids group is required (it is how members are listed and killed); memory and cpu
  groups are added where those controllers are mounted and writable.
  - pids: `pids.max = max_tasks` (processes and threads);
  - memory: `memory.limit_in_bytes = memory_bytes` when > 0. It counts what an address-space
    rlimit does not: memfd, tmpfs and shared-memory pages. With `program_bytes` (not None), a
    group nested in it, `program` (`PROGRAM_GROUP`), limited to `program_bytes` (0: none),
    for the program's own processes: the memory controller's OOM killer then picks its victim
    among them only, never among lcb's processes in the outer group (see `lcb.sandbox.host`);
  - cpu: a group of its own, so every jail gets the default, equal `cpu.shares` (a program that
    forks many spinners shares one jail's slice of the CPU, not the machine's).
- `procs_files()` are the `cgroup.procs` files a process writes its pid into to join (see
  `launch.start`); `members()` lists every process in the pids group and nested groups;
  `kill_all()` SIGKILLs them until none is left; `remove()` removes the emptied groups.
- `oom_kills()` counts the memory controller's OOM kills in the group (None without one).
- `open_program_files()`: descriptors on the program group's `memory.limit_in_bytes`
  (read-write) and `tasks` (write-only), or None without that group, for processes that set
  the limit and join the group later, where they may no longer open the files (a zygote under
  bubblewrap, whose /sys is read-only; a host under Landlock). `read_memory_limit(fd)`,
  `set_memory_limit(fd, value, settle_s=…)` use the first; a process fresh from `fork` (one
  thread) joins with `join(fd)` (cgroup v1 checks the opener's credentials, so any uid may).
- Creating a jail first removes stale ones (named after a process that no longer exists). Call
  it only from lcb's own processes in the host's PID namespace, never inside a sandbox: there
  other processes' pids are not visible and every jail would look stale.

Stdlib only.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable

CGROUP_ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("pids", "memory", "cpu")
PROGRAM_GROUP = "program"
_JAIL_NAME = re.compile(r"lcb(?:-[a-z]+)?-(\d+)-[0-9a-f]{8}")


class Jail:
    """A set of cgroups (controller -> directory) holding one tree of processes."""

    __slots__ = ("paths", "program")

    def __init__(self, paths: dict[str, str], program: str | None = None):
        self.paths = dict(paths)
        self.program = program  # the nested memory group of the program's processes

    def __repr__(self) -> str:
        return f"Jail({self.paths!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Jail) and other.paths == self.paths

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.paths.items())))

    @property
    def path(self) -> str:
        """The pids group's directory."""
        return self.paths["pids"]

    @classmethod
    def create(cls, *, max_tasks: int, memory_bytes: int = 0, prefix: str = "lcb",
               controllers: tuple[str, ...] = CONTROLLERS, program_bytes: int | None = None
               ) -> Jail | None:
        """Fresh groups under this process's own ones, or None where pids is unavailable;
        with `program_bytes`, the program group too where it can be made."""
        name = f"{prefix}-{os.getpid()}-{os.urandom(4).hex()}"
        settings = {"pids": {"pids.max": str(max_tasks)},
                    "memory": {"memory.limit_in_bytes": str(memory_bytes)} if memory_bytes
                    else {},
                    "cpu": {}}
        paths: dict[str, str] = {}
        for controller in ("pids", *[c for c in controllers if c != "pids"]):
            path = _make_group(controller, name, settings.get(controller, {}))
            if path is None and controller == "pids":
                return None
            if path is not None:
                paths[controller] = path
        program = None
        if program_bytes is not None and "memory" in paths:
            limit = {"memory.limit_in_bytes": str(program_bytes)} if program_bytes else {}
            program = _new_group(os.path.join(paths["memory"], PROGRAM_GROUP), limit)
        return cls(paths, program)

    def procs_files(self) -> list[str]:
        return [os.path.join(path, "cgroup.procs") for path in self.paths.values()]

    def add(self, pid: int) -> None:
        for procs in self.procs_files():
            _write(procs, str(pid))

    def members(self) -> list[int]:
        """Every process in the pids group and in groups nested under it."""
        return _members(self.path)

    def kill_all(self, *, settle_s: float = 5.0, spare: int | None = None) -> bool:
        """SIGKILL every member (but `spare`) until none is left; True on success."""
        from lcb.sandbox.contain import kill_until_gone

        alive: Callable[[], list[int]] = self.members
        if spare is not None:
            alive = lambda: [p for p in self.members() if p != spare]  # noqa: E731
        return kill_until_gone(alive, settle_s=settle_s)

    def open_program_files(self) -> tuple[int, int] | None:
        """(limit, tasks): descriptors (close-on-exec) on the program group's
        `memory.limit_in_bytes` and `tasks`, or None."""
        if self.program is None:
            return None
        try:
            limit = os.open(os.path.join(self.program, "memory.limit_in_bytes"),
                            os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return limit, os.open(os.path.join(self.program, "tasks"),
                                  os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            os.close(limit)
            return None

    def oom_kills(self) -> int | None:
        """How many processes the memory controller has killed in this group."""
        path = self.paths.get("memory")
        return None if path is None else read_oom_kills(path)

    def remove(self) -> None:
        """Remove the (emptied) groups and any nested groups; leave a group that is busy."""
        for path in self.paths.values():
            _remove_tree(path)


def read_oom_kills(memory_group: str) -> int | None:
    """The `oom_kill` counter of a cgroup-v1 memory group (None if unreadable)."""
    fd = open_oom_counter(memory_group)
    if fd is None:
        return None
    try:
        return read_oom_counter(fd)
    finally:
        os.close(fd)


def join(tasks_fd: int) -> None:
    """Move the calling thread into the group whose `tasks` file the descriptor is open on
    (OSError if it cannot): the whole process when it has one thread, as right after `fork`.
    (Moving one thread spares cgroup v1 the machine-wide lock that moving a thread group
    takes: 2-7 us against 25-30 us per fork here.)"""
    os.write(tasks_fd, b"0")


def read_memory_limit(fd: int) -> int:
    """The limit a `memory.limit_in_bytes` descriptor holds (OSError/ValueError if it cannot
    be read)."""
    return int(os.pread(fd, 64, 0).decode())


def set_memory_limit(fd: int, value: int, *, settle_s: float) -> None:
    """Set the limit (-1: none). Lowering it below what the group holds fails with EBUSY
    until the kernel has freed enough (a program just killed leaves tmpfs and shared memory
    that are freed a moment after its processes are reaped): retried for `settle_s` seconds,
    then OSError."""
    deadline = time.monotonic() + settle_s
    data = str(value).encode()
    while True:
        try:
            os.pwrite(fd, data, 0)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


def open_oom_counter(memory_group: str) -> int | None:
    """A descriptor on the group's `memory.oom_control`, to read later (from a process that
    may no longer open it: a program's host under Landlock)."""
    try:
        return os.open(os.path.join(memory_group, "memory.oom_control"), os.O_RDONLY)
    except OSError:
        return None


def read_oom_counter(fd: int) -> int | None:
    try:
        text = os.pread(fd, 4096, 0).decode()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def own_group(controller: str) -> str:
    """This process's group directory in a cgroup-v1 controller (OSError, StopIteration or
    IndexError where there is none)."""
    with open("/proc/self/cgroup") as fh:
        line = next(ln for ln in fh.read().splitlines()
                    if controller in ln.split(":")[1].split(","))
    mount = os.path.join(CGROUP_ROOT, controller)
    return os.path.join(mount, line.split(":", 2)[2].lstrip("/"))


def _make_group(controller: str, name: str, settings: dict[str, str]) -> str | None:
    try:
        parent = own_group(controller)
        _sweep_stale(parent)
    except (OSError, StopIteration, IndexError):
        return None
    return _new_group(os.path.join(parent, name), settings)


def _new_group(path: str, settings: dict[str, str]) -> str | None:
    """Make the group and write its settings; None (and no group) if either fails."""
    try:
        os.mkdir(path)
    except OSError:
        return None
    try:
        for file, value in settings.items():
            _write(os.path.join(path, file), value)
    except OSError:
        _remove_tree(path)
        return None
    return path


def _members(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            found = [int(p) for p in fh.read().split()]
        nested = _subdirs(path)
    except OSError:
        return []
    return found + [pid for sub in nested for pid in _members(sub)]


def _remove_tree(path: str) -> None:
    try:
        for nested in _subdirs(path):
            _remove_tree(nested)
        os.rmdir(path)
    except OSError:
        pass


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _subdirs(path: str) -> list[str]:
    with os.scandir(path) as entries:
        return [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]


def _sweep_stale(parent: str) -> None:
    """Empty and remove jails whose creator died without cleaning up (e.g. it was killed)."""
    for path in _subdirs(parent):
        match = _JAIL_NAME.fullmatch(os.path.basename(path))
        if match and not os.path.exists(f"/proc/{match[1]}"):
            from lcb.sandbox.contain import kill_until_gone

            kill_until_gone(lambda p=path: _members(p), settle_s=1.0)
            _remove_tree(path)
