"""Landlock (Linux >= 5.13): what a program's process may touch, enforced by the kernel.

A program process calls `restrict(ruleset)` right before the program runs. From then on, for it
and everything it starts (the domain cannot be left or widened):
- files: read and execute only beneath the `read` paths (the interpreter, its libraries, /usr,
  /etc, /proc, /dev, ...; a path may be a single file), list the directories beneath the
  `listed` paths (names only: where lcb is installed, `site-packages` holds lcb's own entries,
  so it is listed and each other entry read), and write only beneath the `write` paths (its
  own directories). The lcb checkout or package, the data files, the run's outputs and every
  home directory are out of reach;
- TCP (ABI >= 4): no `bind` and no `connect` at all;
- scoping (ABI >= 6): no signal to, and no abstract-unix-socket connection with, any process
  outside the domain (lcb's processes, other programs), whatever their uid;
- ptrace and `/proc/<pid>/{fd,mem,environ}` of processes outside the domain: denied (ABI 1).

A program's own process also enters `scope_only()`'s nested domain, so it cannot signal or stop
its host, which sits in the outer domain.

`build(read=…, write=…, listed=…)` makes the ruleset once (in the process that forks programs)
and returns its descriptor, or None where Landlock is unavailable; the forked program then
needs only `restrict(fd)` (two system calls). Missing paths are skipped. Stdlib only (ctypes).
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from collections.abc import Callable, Iterable

from lcb.sandbox.libc import check, libc
from lcb.sandbox.privilege import no_new_privs

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_V1 = (1 << 13) - 1
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
WRITE_RIGHTS = (READ_RIGHTS | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG
                | MAKE_SOCK | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE)
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number: int, *args: object) -> int:
    return check(libc().syscall(number, *args), f"landlock syscall {number}")


@functools.cache
def abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is unavailable or disabled."""
    try:
        return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0


def handled_fs(version: int) -> int:
    rights = _FS_V1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def build(*, read: Iterable[str], write: Iterable[str], listed: Iterable[str] = ()
          ) -> int | None:
    """A ruleset descriptor (see module docstring), or None without Landlock."""
    version = abi()
    if version <= 0:
        return None
    fs = handled_fs(version)
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0)
    size = 8 if version < 4 else 16 if version < 6 else 24
    fd = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for path in read:
            _allow(fd, path, READ_RIGHTS & fs)
        for path in listed:
            _allow(fd, path, READ_DIR)
        for path in write:
            _allow(fd, path, WRITE_RIGHTS & fs)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine does not have
    try:
        if not stat.S_ISDIR(os.fstat(target).st_mode):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, target)
        _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(target)


def scope_only() -> Callable[[], int] | None:
    """How a program process enters a domain of its own right after its fork (None below ABI
    6): a call, prepared here once, that restricts the caller to a ruleset handling no access
    right but scoping signals and abstract unix sockets, and returns the system call's result
    (negative on failure). The process's domain is then nested in its host's, so it cannot
    signal or stop the host (or reach its abstract sockets), while the host still signals it.
    The caller must already have no_new_privs (a confined host has), and the ruleset's
    descriptor stays open in the caller for its children to use."""
    if abi() < 6:
        return None
    attr = _RulesetAttr(0, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    fd = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(24), 0)
    # Bound here: in the forked process each lookup and conversion is a copy-on-write fault.
    return functools.partial(libc().syscall, _RESTRICT_SELF, fd, 0)


def restrict(ruleset: int) -> None:
    """Enter the ruleset's domain for good (this process and its future children)."""
    no_new_privs()
    _syscall(_RESTRICT_SELF, ruleset, 0)
