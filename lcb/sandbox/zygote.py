"""The zygote: the clean process every program host is forked from, one per grading slot.

Started by its slot (`lcb.sandbox.slot`: `python -s -S -c '…main(fd, uid, cpu, limit,
tasks)'`, in the slot's pids, memory and cpu cgroups, under bubblewrap for `sandbox="bwrap"`;
its hosts pin themselves to the slot's CPU once loaded, so spares are prepared on any core), it
imports what programs and hosts need (the prelude's modules, lcb's sandbox code, never
`lcb.grading`; templates of the program modules), decides how programs are confined
(`Identity`), and then only ever forks hosts. It never receives a test or a program's text:
a request carries the program as a memfd that only the new host reads. So whatever a program
finds in its own memory is the prelude, lcb's code and its own source.

Confinement, decided here once (each part is probed in a throw-away child first, or applied
here where failing changes nothing):
- as root with CAP_SETUID: programs run as the slot's own uid; when the interpreter lives
  under a directory others cannot search (`/root`), the zygote enters a mount namespace in
  which exactly the interpreter's directories are visible (`mounts.readable_view`);
- as root with CAP_SYS_ADMIN: a private tmpfs `/tmp` and `/dev/shm` per program;
- as root with CAP_SYS_ADMIN: a network namespace of the slot's own (`mounts.private_network`,
  made here, once: about 0.5 ms), with a loopback that is down, so no socket of a program
  reaches another program; its programs run one after another and nothing of one outlives it;
- where the slot has a program memory group (`cgroups.PROGRAM_GROUP`: descriptors on its
  `memory.limit_in_bytes` and `tasks`, opened by the slot, proved usable here): each
  host sets the limit to its own program's cap when it is loaded and closes it
  (`lcb.sandbox.host.confine`), and each program process joins the group right after its
  fork, so memfd, tmpfs and shared-memory pages count against that program's own cap, and
  the OOM killer chooses among the program's processes only;
- Landlock when the kernel has it (`read_roots()` readable, nothing of lcb or its data:
  `lcb.sandbox.visible`);
- a seccomp filter (`lcb.sandbox.seccomp`: no keyrings, no user namespaces, no io_uring, ...;
  and no `socket()` without the network namespace, no memfd without a memory cgroup, no
  System V or POSIX message IPC without a private IPC namespace).

Protocol on its seqpacket socket (with the judge): it says `{"ready", "pid", "isolation"}` (or
`{"error"}`) once; `{"op": "host", "mode"}` kills whatever earlier programs left, answers
`{"forked": pid}` with the control socket of its spare host (forked ahead and prepared, see
`lcb.sandbox.host`) and forks the next spare; `{"op": "abort"}` kills every descendant but the
spare and answers `{"aborted": true}`. EOF ends it. It dies with its parent.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any, NoReturn

from lcb.sandbox import child, landlock, mounts, official_child, privilege, seccomp, wire
from lcb.sandbox import host as program_host
from lcb.sandbox.cgroups import (
    PROGRAM_GROUP,
    join,
    own_group,
    read_memory_limit,
    read_oom_kills,
    set_memory_limit,
)
from lcb.sandbox.contain import (
    become_subreaper,
    children_of,
    descendants_of,
    die_with_parent,
    kill_descendants,
    kill_until_gone,
    reap_all,
)
from lcb.sandbox.hosting import Identity
from lcb.sandbox.prelude import import_prelude_modules
from lcb.sandbox.visible import read_roots
from lcb.sandbox.workdirs import sweep_stale_workdirs, temp_root


def _warm_up() -> None:
    """Do once here what every host would otherwise redo: imports, templates."""
    import json  # noqa: F401
    import traceback  # noqa: F401

    import_prelude_modules()
    for name in ("__main__", child.FUNCTIONAL_MODULE):
        child.prelude_module(name)


def _probe(step: Any) -> str | None:
    """Run `step()` in a throw-away child; None if it worked, else the reason."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            step()
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write, f"{type(exc).__name__}: {exc}".encode()[:500])
            os._exit(1)
    os.close(write)
    reason = os.read(read, 600).decode("utf-8", "replace")
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return None if status == 0 else reason or f"wait status {status}"


def _memory_group(program: bool) -> str | None:
    """The memory group whose OOM kills are the program's: the program group if it is used."""
    try:
        group = own_group("memory")
    except (OSError, StopIteration, IndexError):
        return None
    if program:
        group = os.path.join(group, PROGRAM_GROUP)
    return group if read_oom_kills(group) is not None else None


def _hidden_proc(tmp: str) -> None:
    if not mounts.private_tmp(tmp, tmp_bytes=1 << 20, shm_bytes=1 << 20):
        raise OSError("/proc could not be remounted with hidepid")


def decide(uid: int | None, cpu: int | None = None, *, memory_limit: int | None = None,
           memory_tasks: int | None = None, memory_bounded: bool = False
           ) -> tuple[Identity, dict]:
    """The programs' confinement, and its description for the pool (see module docstring).
    `memory_limit`, `memory_tasks`: the program group's limit (set per program) and
    `tasks` (joined by each program process); `memory_bounded`: a memory cgroup
    already bounds the (single) program at its cap (a python_exec run's own group)."""
    visible = read_roots()
    info: dict[str, Any] = {"uid": uid, "landlock_abi": landlock.abi(), "view": []}
    if uid is not None:
        info["view"] = mounts.readable_view(visible.read + visible.listed, uid,
                                            hidden=visible.hidden)
    info["netns"] = mounts.private_network()
    tmp = temp_root()
    problem = _probe(lambda: _hidden_proc(tmp)) if uid is not None else "lcb does not run as root"
    if problem and "hidepid" in problem:  # the namespaces work, only /proc stays as it is
        info["hidden_proc"] = False
        problem = None
    info["private_tmp"] = problem is None
    info.setdefault("hidden_proc", info["private_tmp"])
    if problem:
        info["private_tmp_unavailable"] = problem
    if uid is not None:
        failed = _probe(lambda: privilege.drop_to(uid))
        if failed:
            raise OSError(f"cannot run programs as uid {uid}: {failed}")
    if info["landlock_abi"] > 0:
        failed = _probe(lambda: landlock.restrict(landlock.build(
            read=visible.read, listed=visible.listed, write=[tmp])))
        if failed:
            raise OSError(f"Landlock is available but does not apply: {failed}")
    memory_limit, memory_tasks = _usable_group(memory_limit, memory_tasks)
    info["memory_per_program"] = memory_bounded or memory_limit is not None
    info["seccomp"] = _seccomp_applies(info)
    memory = _memory_group(program=memory_limit is not None)
    info["memory_cgroup"] = memory is not None
    info["oom_score_adj"] = _oom_score_adj()
    info["cpu"] = cpu
    return Identity(
        uid=uid, private_tmp=info["private_tmp"], landlock=info["landlock_abi"] > 0,
        read_roots=visible.read, memory_group=memory, seccomp=info["seccomp"], cpu=cpu,
        list_roots=visible.listed, hidden=visible.hidden, netns=info["netns"],
        memory_limit=memory_limit, memory_tasks=memory_tasks,
        memory_bounded=info["memory_per_program"]), info


def _usable_group(limit: int | None, tasks: int | None) -> tuple[int | None, int | None]:
    """The program group's descriptors if both work here (probed: the limit written back
    unchanged, the group joined by a throw-away child), else (None, None): they are closed,
    and programs get no memfd instead."""
    if limit is None or tasks is None:
        fds = ()
    else:
        try:
            set_memory_limit(limit, read_memory_limit(limit), settle_s=0.0)
            if _probe(lambda: join(tasks)) is None:
                return limit, tasks
        except (OSError, ValueError):
            pass
        fds = (limit, tasks)
    for fd in fds:
        os.close(fd)
    return None, None


def _oom_score_adj() -> int | None:
    """This process's OOM score adjustment (launch.start asks for -1000, which takes
    CAP_SYS_RESOURCE: a container without it leaves the inherited value)."""
    try:
        with open("/proc/self/oom_score_adj") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return None


def _seccomp_applies(info: dict) -> bool:
    """Whether the filter installs here (probed); its variants are then built ahead."""
    flags = {"sockets": info["netns"], "ipc": info["private_tmp"]}
    if not seccomp.available() or _probe(lambda: seccomp.install(
            memory=info["memory_per_program"], **flags)) is not None:
        return False
    for bounded in {info["memory_per_program"], True}:  # True: a program without a cap
        seccomp.prepare(memory=bounded, **flags)
    return True


def main(peer_fd: int, uid: int | None = None, cpu: int | None = None,
         memory_limit: int | None = None, memory_tasks: int | None = None) -> NoReturn:
    """Serve the judge until it closes the socket (programs run as `uid`, pinned to `cpu`;
    `memory_limit`, `memory_tasks`: descriptors on the program group's
    `memory.limit_in_bytes` and `tasks`)."""
    privilege.make_undumpable()
    die_with_parent()
    become_subreaper()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when we stop
    sock = socket.socket(fileno=peer_fd)
    try:
        _warm_up()
        if uid is None:
            sweep_stale_workdirs()
        identity, info = decide(uid, cpu, memory_limit=memory_limit, memory_tasks=memory_tasks)
    except Exception as exc:  # noqa: BLE001 - told to the judge, then to the pool
        wire.send(sock, {"error": f"{type(exc).__name__}: {exc}"[:2000]})
        os._exit(1)
    wire.send(sock, {"ready": True, "pid": os.getpid(), "isolation": info})
    _serve(sock, identity)
    kill_descendants(settle_s=2.0)
    if not identity.private_tmp:
        sweep_stale_workdirs()
    os._exit(0)


class _Spares:
    """The one spare host the zygote keeps forked ahead (see `lcb.sandbox.host.serve`), and
    the hosts it handed out."""

    def __init__(self, judge: socket.socket, identity: Identity):
        self.judge, self.identity = judge, identity
        self.handed: list[int] = []
        self.pid, self.end = self._fork()

    def _fork(self) -> tuple[int, socket.socket]:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            for inherited in (mine, self.judge, getattr(self, "end", None)):
                if inherited is not None:
                    inherited.close()
            program_host.serve(theirs.detach(), self.identity)
        theirs.close()
        return pid, mine

    def clear(self, *, keep_spare: bool = True) -> bool:
        """Kill every host handed out and whatever it left (not the spare, if asked); False
        if something survived the kill loop."""
        for pid in self.handed:  # usually exiting already: end it and reap it, no polling
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.handed.clear()
        spare = self.pid if keep_spare else None
        gone = True
        if reap_all() and not _only_child(spare):
            me = os.getpid()
            gone = kill_until_gone(lambda: [p for p in descendants_of(me) if p != spare],
                                   settle_s=5.0)
        if not self.identity.private_tmp:  # a confined host cannot remove its own directory
            sweep_stale_workdirs()
        return gone

    def hand_out(self) -> None:
        """Kill what earlier programs left, give the judge the spare, fork the next one. A
        program whose processes outlive the kill loop ends this zygote instead: the pool
        replaces the whole slot (and kills its cgroups)."""
        if not self.clear():
            wire.send(self.judge, {"error": "processes of an earlier program survived"})
            raise wire.ChannelError("leftovers survived")
        wire.send(self.judge, {"forked": self.pid}, [self.end.fileno()])
        self.handed.append(self.pid)
        self.end.close()
        self.pid, self.end = self._fork()

    def refresh(self) -> None:
        """Replace the spare (forked before something the zygote has imported since)."""
        self.end.close()
        self.handed.append(self.pid)
        self.clear(keep_spare=False)
        self.pid, self.end = self._fork()


def _only_child(pid: int | None) -> bool:
    """Whether `pid` is this process's one child and has no children itself."""
    return pid is not None and children_of(os.getpid()) == [pid] and not children_of(pid)


def _serve(sock: socket.socket, identity: Identity) -> None:
    spares = _Spares(sock, identity)
    while True:
        try:
            message, fds = wire.recv(sock, max_fds=0)
        except wire.ChannelError:
            return
        op = message.get("op")
        if op == "host":
            if message.get("mode") == "official" and "livecodebench" not in sys.modules:
                official_child.require_official()  # imported here once, not in every host
                spares.refresh()
            spares.hand_out()
        elif op == "abort":
            spares.clear()
            wire.send(sock, {"aborted": True})
        else:
            wire.send(sock, {"error": f"unknown request {op!r}"})
