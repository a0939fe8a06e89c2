"""A seccomp filter for programs: the few system calls that would get around the other layers.

`install(...)` (in a program's host, after Landlock, inherited by every program process) makes
these fail, and allows everything else:
- the kernel keyrings (`add_key`, `request_key`, `keyctl`: EPERM): a key outlives its program
  and, given "other" permissions, can be read by any later program of any uid. Landlock does
  not cover keys;
- new user namespaces (`unshare` or `clone` with CLONE_NEWUSER: EPERM; `clone3`, whose flags a
  filter cannot read: ENOSYS, so the C library falls back to `clone`): full capabilities in a
  namespace of their own are a large kernel surface, and nothing a program needs;
- io_uring, `userfaultfd`, `perf_event_open` and `bpf` (EPERM): kernel surfaces with a history
  of privilege escalations, unused by programs (io_uring could also open sockets);
- vsock sockets (EAFNOSUPPORT): a way out of a virtual machine to its host's services;
- any other ABI (32-bit calls on x86-64, x32): EPERM, so the filter cannot be bypassed;
- changing another process's limits or scheduling (EPERM): `prlimit64` on a pid other than 0
  unless it only reads, `sched_setscheduler`, `sched_setparam`, `sched_setattr` on a pid other
  than 0, `setpriority` and `ioprio_set` unless for the caller itself or its process group
  (`who` 0, not the caller's whole uid), and `sched_setaffinity` at all. A program's host runs
  as the program's uid, and the kernel lets a process of the same uid change these for
  another: a program could otherwise take its host's descriptors (RLIMIT_NOFILE) or CPU
  (SCHED_IDLE, a nice of 19) and turn its own failure into `infra`, or leave the CPU its slot
  is pinned to and take one from the program beside it. (glibc's `setrlimit`, `getrlimit`,
  `nice` use pid 0; a host never calls these on another pid once confined);
- probing the page cache, a channel between programs graded together or one after another
  (EPERM): `mincore`, `cachestat`, `fadvise64` (`posix_fadvise`: DONTNEED evicts a shared
  file's pages), `madvise` MADV_COLD and MADV_PAGEOUT, `process_madvise` and Linux AIO
  (`io_setup`); `preadv2` and `pwritev2` with RWF_NOWAIT (EOPNOTSUPP, as on a file system
  without it), which say without waiting whether a page is cached. Timing a read still tells
  it, about as well (see `lcb.sandbox`): this closes the exact probes and eviction,
  not the channel;
And, where another layer is missing (the caller says which):
- `sockets=False` (no network namespace of the slot's own, e.g. lcb not root): `socket()` of
  every family (EPERM), so no datagram, stream or abstract unix socket reaches another program
  (or lcb); `socketpair()` stays, it connects nothing outside the process tree;
- `memory=False` (a memory cap that no memory cgroup enforces): `memfd_create` and
  `memfd_secret` (EPERM), whose pages the address-space limit does not count;
- `ipc=False` (no IPC namespace of the program's own): System V shared memory, semaphores and
  message queues and POSIX message queues (EPERM), shared by every process of the machine.
No program needs them: Python's multiprocessing uses pipes, socketpairs and POSIX semaphores.
Supported on x86-64 and aarch64; elsewhere `install()` does nothing and returns False.
Stdlib only (ctypes).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os

from lcb.sandbox.libc import check, libc
from lcb.sandbox.privilege import no_new_privs

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_LD_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_CLONE_NEWUSER, _AF_VSOCK, _X32_BIT = 0x10000000, 40, 0x40000000
_PRIO_USER, _IOPRIO_WHO_USER, _RWF_NOWAIT = 2, 3, 0x8
_MADV_COLD, _MADV_PAGEOUT = 20, 21
_NR, _ARCH = 0, 4

# (audit arch, syscall numbers) per machine (x86-64: arch/x86/entry/syscalls/syscall_64.tbl;
# aarch64: the generic table, include/uapi/asm-generic/unistd.h).
_ARCHES = {
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
                            "clone": 56, "clone3": 435, "socket": 41, "userfaultfd": 323,
                            "perf_event_open": 298, "bpf": 321, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427,
                            "memfd_create": 319, "memfd_secret": 447, "shmget": 29,
                            "semget": 64, "msgget": 68, "mq_open": 240,
                            "prlimit64": 302, "setpriority": 141, "sched_setparam": 142,
                            "sched_setscheduler": 144, "sched_setaffinity": 203,
                            "sched_setattr": 314, "ioprio_set": 251, "mincore": 27,
                            "cachestat": 451, "fadvise64": 221, "madvise": 28,
                            "process_madvise": 440, "io_setup": 206, "preadv2": 327,
                            "pwritev2": 328}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97,
                             "clone": 220, "clone3": 435, "socket": 198, "userfaultfd": 282,
                             "perf_event_open": 241, "bpf": 280, "io_uring_setup": 425,
                             "io_uring_enter": 426, "io_uring_register": 427,
                             "memfd_create": 279, "memfd_secret": 447, "shmget": 194,
                             "semget": 190, "msgget": 186, "mq_open": 180,
                             "prlimit64": 261, "setpriority": 140, "sched_setparam": 118,
                             "sched_setscheduler": 119, "sched_setaffinity": 122,
                             "sched_setattr": 274, "ioprio_set": 30, "mincore": 232,
                             "cachestat": 451, "fadvise64": 223, "madvise": 233,
                             "process_madvise": 440, "io_setup": 0, "preadv2": 286,
                             "pwritev2": 287}),
}
_REFUSED = ("add_key", "request_key", "keyctl", "userfaultfd", "perf_event_open", "bpf",
            "io_uring_setup", "io_uring_enter", "io_uring_register", "sched_setaffinity",
            "mincore", "cachestat", "fadvise64", "process_madvise", "io_setup")
_SELF_ONLY = ("sched_setscheduler", "sched_setparam", "sched_setattr")  # pid: argument 0
_MEMORY = ("memfd_create", "memfd_secret")
_IPC = ("shmget", "semget", "msgget", "mq_open")


def _arg(index: int, *, high: bool = False) -> int:
    """Where a 64-bit argument's low (or high) 32 bits lie in `struct seccomp_data` (both
    machines are little-endian). The kernel reads a pid or an int flag from the low half."""
    return 16 + 8 * index + (4 if high else 0)


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def _program(arch: int, nr: dict[str, int], *, sockets: bool, memory: bool, ipc: bool
             ) -> list[tuple[int, str | int, str | int, int]]:
    """The filter as (code, jump-if-true, jump-if-false, k); jumps name labels or are 0."""
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    refused = [*_REFUSED, *(() if memory else _MEMORY), *(() if ipc else _IPC),
               *(() if sockets else ("socket",))]
    code: list = [(_LD_ABS, 0, 0, _ARCH), (_JEQ, 0, "eperm", arch), (_LD_ABS, 0, 0, _NR),
                  (_JGE, "eperm", 0, _X32_BIT)]
    code += [(_JEQ, "eperm", 0, nr[name]) for name in refused]
    code += [(_JEQ, "self", 0, nr[name]) for name in _SELF_ONLY]
    code += [(_JEQ, "enosys", 0, nr["clone3"]), (_JEQ, "flags", 0, nr["unshare"]),
             (_JEQ, "flags", 0, nr["clone"]), (_JEQ, "family", 0, nr["socket"]),
             (_JEQ, "prlimit", 0, nr["prlimit64"]), (_JEQ, "priority", 0, nr["setpriority"]),
             (_JEQ, "ioprio", 0, nr["ioprio_set"]), (_JEQ, "nowait", 0, nr["preadv2"]),
             (_JEQ, "nowait", 0, nr["pwritev2"]), (_JEQ, "madvise", 0, nr["madvise"]),
             (_RET, 0, 0, _ALLOW),
             "flags", (_LD_ABS, 0, 0, _arg(0)), (_JSET, "eperm", "allow", _CLONE_NEWUSER),
             "family", (_LD_ABS, 0, 0, _arg(0)), (_JEQ, "eafnosupport", "allow", _AF_VSOCK),
             "self", (_LD_ABS, 0, 0, _arg(0)), (_JEQ, "allow", "eperm", 0),
             # the caller itself (pid 0), or a read only (no new limit)
             "prlimit", (_LD_ABS, 0, 0, _arg(0)), (_JEQ, "allow", 0, 0),
             (_LD_ABS, 0, 0, _arg(2)), (_JEQ, 0, "eperm", 0),
             (_LD_ABS, 0, 0, _arg(2, high=True)), (_JEQ, "allow", "eperm", 0),
             "priority", (_LD_ABS, 0, 0, _arg(1)), (_JEQ, 0, "eperm", 0),
             (_LD_ABS, 0, 0, _arg(0)), (_JEQ, "eperm", "allow", _PRIO_USER),
             "ioprio", (_LD_ABS, 0, 0, _arg(1)), (_JEQ, 0, "eperm", 0),
             (_LD_ABS, 0, 0, _arg(0)), (_JEQ, "eperm", "allow", _IOPRIO_WHO_USER),
             "nowait", (_LD_ABS, 0, 0, _arg(5)), (_JSET, "eopnotsupp", "allow", _RWF_NOWAIT),
             "madvise", (_LD_ABS, 0, 0, _arg(2)), (_JEQ, "eperm", 0, _MADV_COLD),
             (_JEQ, "eperm", "allow", _MADV_PAGEOUT),
             "allow", (_RET, 0, 0, _ALLOW), "eperm", (_RET, 0, 0, eperm),
             "enosys", (_RET, 0, 0, enosys),
             "eafnosupport", (_RET, 0, 0, _ERRNO | errno.EAFNOSUPPORT),
             "eopnotsupp", (_RET, 0, 0, _ERRNO | errno.EOPNOTSUPP)]
    return code


def _assemble(code: list) -> list[tuple[int, int, int, int]]:
    labels, insns = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(at: int, target: str | int) -> int:
        jump = 0 if target == 0 else labels[target] - at - 1
        assert 0 <= jump <= 255, f"a jump to {target!r} the filter cannot encode"  # forward only
        return jump

    return [(c, offset(i, t), offset(i, f), k) for i, (c, t, f, k) in enumerate(insns)]


@functools.cache  # built once per variant in the zygote, before it forks hosts
def _filter(sockets: bool = True, memory: bool = True, ipc: bool = True) -> _Prog | None:
    spec = _ARCHES.get(os.uname().machine)
    if spec is None:
        return None
    insns = _assemble(_program(*spec, sockets=sockets, memory=memory, ipc=ipc))
    array = (_Insn * len(insns))(*[_Insn(*insn) for insn in insns])
    return _Prog(len(insns), array)  # ctypes keeps `array` alive with the struct


def available() -> bool:
    return _filter() is not None


def prepare(*, sockets: bool = True, memory: bool = True, ipc: bool = True) -> None:
    """Build a variant ahead, in a process that forks many hosts (each then only installs)."""
    _filter(sockets, memory, ipc)


def install(*, sockets: bool = True, memory: bool = True, ipc: bool = True) -> bool:
    """Install the filter on this process (and all it will start); False where unsupported.
    `sockets`, `memory`, `ipc` False also refuse those calls (see module docstring)."""
    prog = _filter(sockets, memory, ipc)
    if prog is None:
        return False
    no_new_privs()
    check(libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
          "seccomp")
    return True
