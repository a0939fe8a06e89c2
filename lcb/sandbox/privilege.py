"""Who a process is and what it may do: non-dumpable lcb processes, unprivileged programs.

- `make_undumpable()`: `prctl(PR_SET_DUMPABLE, 0)`. Every lcb process that holds something a
  program must not reach (the CLI and its API key, the pool, judges, zygotes, hosts) calls it:
  another process of the same uid can then no longer open its `/proc/<pid>/{fd,environ,mem}`
  or ptrace it. (The kernel resets it on exec, so each interpreter calls it itself.)
- `set_dumpable(True)`: a program's own process, forked from a non-dumpable host, is dumpable
  again (it reads its own `/proc/self` as under `python prog.py`).
- `drop_to(uid)`: in a program's process, as root: no supplementary groups, real/effective/
  saved uid and gid `uid`. With every uid non-zero the kernel clears all capabilities.
- `no_new_privs()`: setuid binaries and file capabilities grant nothing after it (and Landlock
  requires it).
- `set_oom_score_adj(n)`: a program's host marks itself and the processes it forks as the ones
  to kill first in an OOM outside the program's own memory group (1000). (lcb's processes ask
  for -1000 when they start, `launch.start`; that takes CAP_SYS_RESOURCE.)
- `can_switch_uid()`: root with CAP_SETUID and CAP_SETGID (so programs can run as another uid).

Stdlib only (ctypes for prctl).
"""

from __future__ import annotations

import os

from lcb.sandbox.libc import check, libc

_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_CAP_SETGID, _CAP_SETUID = 6, 7


def _prctl(option: int, arg: int = 0) -> int:
    return check(libc().prctl(option, arg, 0, 0, 0), f"prctl({option})")


def make_undumpable() -> None:
    """Keep same-uid processes out of this one's /proc entries and ptrace (Linux)."""
    set_dumpable(False)


def set_dumpable(flag: bool) -> None:
    """A program's own process is dumpable again, as under `python prog.py`: it may read its
    own `/proc/self/{fd,maps,mem}`. (The process it was forked from stays non-dumpable.)"""
    try:
        _prctl(_PR_SET_DUMPABLE, int(flag))
    except (OSError, AttributeError):
        pass


def no_new_privs() -> None:
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def drop_to(uid: int) -> None:
    """Become `uid` (and gid `uid`) for good, with no supplementary groups and no capabilities."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def set_oom_score_adj(value: int) -> None:
    """Best effort: lowering the score needs CAP_SYS_RESOURCE."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, str(value).encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def effective_caps() -> int:
    """This process's effective capability set, as a bit mask (0 if unknown)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def can_switch_uid() -> bool:
    caps = effective_caps()
    return os.geteuid() == 0 and bool(caps >> _CAP_SETUID & 1) and bool(caps >> _CAP_SETGID & 1)
