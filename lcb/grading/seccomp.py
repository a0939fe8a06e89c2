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
- any other ABI (32-bit calls on x86-64, x32): EPERM, so the filter cannot be bypassed.
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

from lcb.grading.privilege import no_new_privs

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_LD_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_CLONE_NEWUSER, _AF_VSOCK, _X32_BIT = 0x10000000, 40, 0x40000000
_NR, _ARCH, _ARG0 = 0, 4, 16

# (audit arch, syscall numbers) per machine.
_ARCHES = {
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
                            "clone": 56, "clone3": 435, "socket": 41, "userfaultfd": 323,
                            "perf_event_open": 298, "bpf": 321, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427,
                            "memfd_create": 319, "memfd_secret": 447, "shmget": 29,
                            "semget": 64, "msgget": 68, "mq_open": 240}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97,
                             "clone": 220, "clone3": 435, "socket": 198, "userfaultfd": 282,
                             "perf_event_open": 241, "bpf": 280, "io_uring_setup": 425,
                             "io_uring_enter": 426, "io_uring_register": 427,
                             "memfd_create": 279, "memfd_secret": 447, "shmget": 194,
                             "semget": 190, "msgget": 186, "mq_open": 180}),
}
_REFUSED = ("add_key", "request_key", "keyctl", "userfaultfd", "perf_event_open", "bpf",
            "io_uring_setup", "io_uring_enter", "io_uring_register")
_MEMORY = ("memfd_create", "memfd_secret")
_IPC = ("shmget", "semget", "msgget", "mq_open")


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
    code += [(_JEQ, "enosys", 0, nr["clone3"]), (_JEQ, "flags", 0, nr["unshare"]),
             (_JEQ, "flags", 0, nr["clone"]), (_JEQ, "family", 0, nr["socket"]),
             (_RET, 0, 0, _ALLOW),
             "flags", (_LD_ABS, 0, 0, _ARG0), (_JSET, "eperm", 0, _CLONE_NEWUSER),
             (_RET, 0, 0, _ALLOW),
             "family", (_LD_ABS, 0, 0, _ARG0), (_JEQ, "eafnosupport", 0, _AF_VSOCK),
             (_RET, 0, 0, _ALLOW),
             "eperm", (_RET, 0, 0, eperm), "enosys", (_RET, 0, 0, enosys),
             "eafnosupport", (_RET, 0, 0, _ERRNO | errno.EAFNOSUPPORT)]
    return code


def _assemble(code: list) -> list[tuple[int, int, int, int]]:
    labels, insns = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(at: int, target: str | int) -> int:
        return 0 if target == 0 else labels[target] - at - 1

    return [(c, offset(i, t), offset(i, f), k) for i, (c, t, f, k) in enumerate(insns)]


@functools.cache  # built once per variant in the zygote, before it forks hosts
def _filter(sockets: bool = True, memory: bool = True, ipc: bool = True) -> _Prog | None:
    spec = _ARCHES.get(os.uname().machine)
    if spec is None:
        return None
    insns = _assemble(_program(*spec, sockets=sockets, memory=memory, ipc=ipc))
    array = (_Insn * len(insns))(*[_Insn(*insn) for insn in insns])
    return _Prog(len(insns), array)  # ctypes keeps `array` alive with the struct


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


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
    if _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")
    return True
