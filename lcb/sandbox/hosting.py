"""What a program host holds, and how it runs one program process to its end.

Shared by the host's handlers (`lcb.sandbox.host`) and its stdin queue (`lcb.sandbox.host_stdin`):
- `Identity`: how the zygote's programs are confined, decided once when the zygote starts
  (`lcb.sandbox.zygote.decide`);
- `ProgramHost`: what a host process holds for its one program once loaded;
- `rlimits(host, cpu_s)`: a program process's own limits, computed once per (limits, cpu_s);
- `run_to_end(host, pid, …)`: wait for a program process until it exits, its deadline passes
  or the judge asks for its end, reap it and every descendant, and return its exit report
  `{status, timed_out, wall, cpu, stderr, oom}` (what `lcb.sandbox.judge.check_report` checks).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from lcb.sandbox import wire
from lcb.sandbox.cgroups import read_oom_counter
from lcb.sandbox.contain import Limits, own_rlimits
from lcb.sandbox.process import StderrTail, finish, watch

MAX_ERROR = 2000  # characters of a compile error or a process's stderr in a reply


class Identity(NamedTuple):
    """How the zygote's programs are confined (decided once, when the zygote starts)."""

    uid: int | None             # the programs' own uid (lcb as root); None: lcb's uid
    private_tmp: bool           # per-program tmpfs /tmp and /dev/shm (mount namespaces)
    landlock: bool
    read_roots: tuple[str, ...]  # what programs may read (visible.read_roots)
    memory_group: str | None    # the programs' cgroup-v1 memory group, to tell OOM kills apart
    seccomp: bool = False       # lcb.sandbox.seccomp's filter
    cpu: int | None = None      # the slot's CPU: a loaded host and its programs run there
    list_roots: tuple[str, ...] = ()  # directories programs may list, not read (lcb's in them)
    hidden: tuple[str, ...] = ()      # lcb's own paths inside those (covered in mount views)
    netns: bool = False         # the slot's own network namespace: sockets reach no one
    memory_limit: int | None = None   # the program group's memory.limit_in_bytes (per program)
    memory_tasks: int | None = None   # and its tasks file (each program process joins)
    memory_bounded: bool = False      # a memory cgroup enforces each program's own cap


class ProgramHost(NamedTuple):
    """What a host process holds for its one program (the judge's end is
    `lcb.sandbox.judge.HostHandle`)."""

    mode: str
    source: str
    fn_name: str | None
    code: Any                   # the compiled program (None in official mode)
    limits: Limits
    workdir: str
    identity: Identity
    script: Callable[[], NoReturn] | None
    oom_seen: list[int]         # [oom kills counted so far, the counter's fd] (or empty)
    scope: Callable[[], int] | None = None  # process.program_entry(): each program process's


@functools.cache
def _cached_rlimits(limits: Limits, cpu_s: float) -> tuple:
    return own_rlimits(limits, cpu_s=cpu_s)


def rlimits(host: ProgramHost, cpu_s: float) -> tuple:
    return _cached_rlimits(host.limits, cpu_s)


def run_to_end(host: ProgramHost, pid: int, started: float, *, deadline: float, stderr: StderrTail,
               ctl: socket.socket | None = None, control_from: float = 0.0,
               on_control: Callable[[dict, list[int]], bool] | None = None,
               wake: tuple[float, Callable[[], None]] | None = None) -> dict:
    """Wait for the program's process until it exits, the deadline passes, or a control
    message for which `on_control` says "kill"; reap everything; report.

    `wake` = (monotonic time, callback): the callback runs once at that time while the
    process runs (the host's own work that must not wait for the process's end, such as
    reports of earlier tests).
    """
    pidfd = os.pidfd_open(pid)
    wake_at, on_wake = wake if wake is not None else (None, None)
    while True:
        how = watch(pidfd, deadline=deadline, stderr=stderr,
                    control=None if ctl is None else ctl.fileno(), control_from=control_from,
                    wake_at=wake_at)
        if how == "wake":
            wake_at = None
            on_wake()
            continue
        if how != "control":
            break
        request, fds = wire.recv(ctl, max_fds=wire.MAX_FDS)
        if on_control is not None and on_control(request, fds):
            break
    ended = finish(pid, pidfd, kill=how != "exited", started=started,
                   timed_out=how == "deadline")
    return {"status": ended.status, "timed_out": ended.timed_out, "wall": ended.wall_s,
            "cpu": ended.cpu_s, "stderr": stderr.close()[-MAX_ERROR:],
            "oom": _oom_killed(host, ended.status)}


def _oom_killed(host: ProgramHost, status: int) -> bool:
    """True when the memory cgroup killed the program since the last check."""
    if not host.oom_seen or not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        return False
    now = read_oom_counter(host.oom_seen[1])
    now = host.oom_seen[0] if now is None else now
    killed, host.oom_seen[0] = now > host.oom_seen[0], now
    return killed
