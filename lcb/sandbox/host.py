"""The program host: one per program, forked by the zygote, parent of the program's processes.

It is the program's side of the boundary. It holds the program's source and nothing it is
judged against: the judge sends each test's input as a memfd (stdin mode) or a line on the
program's channel (functional mode) and keeps the expected outputs to itself.

A host is forked ahead, as a spare, before its program is known (`serve`): as root it enters
new mount and IPC namespaces with a private tmpfs `/tmp` and `/dev/shm` (`mounts.private_tmp`),
makes its working directory and its Landlock ruleset. Then, on `{"op": "load", mode, fn_name,
limits}` with the program as a memfd, it compiles the program once (a syntax error is the whole
answer), imports numpy when the program mentions it (as LiveCodeBench's grader has it imported
before its guard), sets the rlimits, and confines itself for good (`confine`): the program
memory group's limit set to this program's own cap (where the slot has one; that descriptor
is closed then; the host itself stays outside the group, each program process joins it right
after its fork, so the OOM killer never picks the host), the program's own uid (lcb as root:
no capabilities), scrubbed environment,
Landlock (read-only system and interpreter, writable `/tmp` or its directory only, no TCP, no
signal or ptrace outside), the seccomp filter (`lcb.sandbox.seccomp`, with the variant its
zygote's layers call for). From then on the host runs as the program would; it can harm only
its own program.

Operations on its control socket (see `lcb.sandbox.judge`):
- `stdin` (fds: input and stdout memfds, in pairs): queued tests, run by `host_stdin`;
- `functional` (fd: the program's channel): one process runs the tests the judge feeds it; the
  reply is its exit report, sent when it ends or when the judge sends `kill`;
- `official` (fds: tests memfd, channel): LiveCodeBench's `run_test` in one process;
- `stop` (answered `{"stopped"}`), `kill` (ignored when nothing runs), `end` (or EOF): kill
  whatever is left and exit.
What a host holds (`Identity`, `ProgramHost`) and how it runs a process to its end
(`run_to_end`) live in `lcb.sandbox.hosting`, which `host_stdin` shares.
"""

from __future__ import annotations

import functools
import gc
import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from lcb.sandbox import child, landlock, mounts, official_child, privilege, seccomp, wire
from lcb.sandbox.cgroups import open_oom_counter, read_oom_counter, set_memory_limit
from lcb.sandbox.contain import (
    Limits,
    apply_shared_limits,
    become_subreaper,
    die_with_parent,
    kill_descendants,
    prepare_sandbox,
)
from lcb.sandbox.host_stdin import StdinRun
from lcb.sandbox.hosting import MAX_ERROR, Identity, ProgramHost, rlimits, run_to_end
from lcb.sandbox.prelude import compile_after_prelude
from lcb.sandbox.process import StderrTail, program_entry, spawn
from lcb.sandbox.workdirs import make_workdir, reset_workdir, temp_root

_LIMIT_SETTLE_S = 5.0  # for the last program's tmpfs and IPC pages to be freed (the kernel
                       # frees them after its processes are reaped)


def serve(ctl_fd: int, identity: Identity) -> NoReturn:
    """A spare host's whole life (in a fresh fork of the zygote): prepare, load, serve."""
    workdir = None
    try:
        ctl = socket.socket(fileno=ctl_fd)
        try:
            workdir, ruleset = _prepare(identity)
            failure = None
        except Exception as exc:  # the judge reports it as an infrastructure failure
            failure = f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
        message, fds = wire.recv(ctl, max_fds=1)
        if failure or message.get("op") != "load" or len(fds) != 1:
            wire.send(ctl, {"setup_error": failure or "expected a load request"})
            return
        host, hello = _load(message, fds[0], workdir, ruleset, identity)
        wire.send(ctl, hello)
        if "compile_error" not in hello:
            _serve_ops(host, ctl)
    except wire.ChannelError:
        pass  # the judge went away (or gave up on this program)
    except BaseException:  # a bug of lcb's: leave its traceback in the slot's log
        traceback.print_exc()
    finally:
        kill_descendants(settle_s=2.0)
        if workdir is not None and not identity.private_tmp:
            reset_workdir(workdir)  # its files; the zygote removes the directory itself
        os._exit(0)


def _prepare(identity: Identity) -> tuple[str, int | None]:
    """What needs no program: namespaces, the working directory, the Landlock ruleset."""
    die_with_parent()
    become_subreaper()
    if identity.private_tmp:
        limits = Limits()
        mounts.private_tmp(temp_root(), tmp_bytes=limits.tmp_bytes, shm_bytes=limits.shm_bytes,
                           keep=identity.read_roots + identity.list_roots,
                           hidden=identity.hidden)
    workdir = make_workdir()
    if identity.uid is not None:
        os.chown(workdir, identity.uid, identity.uid)
    return workdir, _ruleset(workdir, identity)


def _ruleset(workdir: str, identity: Identity) -> int | None:
    if not identity.landlock:
        return None
    writable = [temp_root(), "/dev/shm"] if identity.private_tmp else [workdir]
    return landlock.build(read=identity.read_roots, listed=identity.list_roots,
                          write=[*writable, "/dev/null"])


def _read_source(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogatepass")


def compile_program(source: str) -> Any:
    """The code object, or the error text when the program (after the prelude) cannot compile
    (see `prelude.compile_after_prelude`: a `from __future__` import is a syntax error)."""
    try:
        return compile_after_prelude(source, child.SCRIPT_FILE)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _load(request: dict, source_fd: int, workdir: str, ruleset: int | None,
          identity: Identity) -> tuple[ProgramHost, dict]:
    mode, fn_name = request["mode"], request.get("fn_name")
    limits = Limits(**request["limits"])
    source = _read_source(source_fd)
    code = None if mode == "official" else compile_program(source)
    if isinstance(code, str):
        return _host(mode, source, fn_name, None, limits, workdir, identity, []), {
            "compile_error": code[:MAX_ERROR]}
    if code is not None and "numpy" in source:
        _import_quietly("numpy")
    oom = _oom_counter(identity)  # opened now: Landlock keeps the cgroup files out of reach
    if identity.cpu is not None:  # the spare was prepared anywhere; the program runs here
        os.sched_setaffinity(0, {identity.cpu})
    confine(limits, workdir, identity, ruleset=ruleset)
    scope = program_entry(memory_tasks=identity.memory_tasks,
                          scope=landlock.scope_only() if identity.landlock else None)
    host = _host(mode, source, fn_name, code, limits, workdir, identity, oom)._replace(
        scope=scope)
    gc.freeze()  # forked programs then never touch these objects when they collect garbage
    return host, {"ready": True, "pid": os.getpid()}


def _oom_counter(identity: Identity) -> list[int]:
    """[oom kills so far, the counter's fd], or [] without a memory cgroup."""
    fd = open_oom_counter(identity.memory_group) if identity.memory_group else None
    count = read_oom_counter(fd) if fd is not None else None
    return [count, fd] if count is not None else []


def _host(mode: str, source: str, fn_name: str | None, code: Any, limits: Limits,
          workdir: str, identity: Identity, oom: list[int]) -> ProgramHost:
    script = None
    if mode == "stdin" and code is not None:
        main = child.prelude_module("__main__")
        child.prepare_script(main)  # once here, not in every test's process
        script = functools.partial(child.run_as_script, code, main=main, prepared=True,
                                   find_files=child.may_leave_files(code),
                                   teardown=child.may_tear_down(code))
    return ProgramHost(mode, source, fn_name, code, limits, workdir, identity, script, oom)


def _import_quietly(name: str) -> None:
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - the program's own import will report it
        pass


def confine(limits: Limits, workdir: str, identity: Identity, *,
            ruleset: int | None = None) -> None:
    """Become the program's side for good (see module docstring). Where the program memory
    group's limit is at hand, it becomes this program's cap first, exactly (and the descriptor
    is closed: the program must not reach it)."""
    if identity.memory_limit is not None:
        limit = limits.memory_bytes or -1
        try:
            set_memory_limit(identity.memory_limit, limit, settle_s=_LIMIT_SETTLE_S)
        finally:
            os.close(identity.memory_limit)
    if ruleset is None:
        ruleset = _ruleset(workdir, identity)
    apply_shared_limits(limits, own_uid=identity.uid is not None)
    privilege.set_oom_score_adj(1000)  # the program's side first in an OOM outside its group
    if identity.uid is not None:
        privilege.drop_to(identity.uid)
    prepare_sandbox(workdir)  # as the program's uid: the directory is its own
    if ruleset is not None:
        landlock.restrict(ruleset)
        os.close(ruleset)
    if identity.seccomp:
        seccomp.install(sockets=identity.netns, ipc=identity.private_tmp,
                        memory=identity.memory_bounded or not limits.memory_bytes)
    privilege.make_undumpable()


def _serve_ops(host: ProgramHost, ctl: socket.socket) -> None:
    stdin = StdinRun(host, ctl)
    handlers = {"functional": _functional, "official": _official}
    while True:
        message, fds = wire.recv(ctl, max_fds=wire.MAX_FDS)
        op = message.get("op")
        if op == "end":
            wire.close_all(fds)
            return
        if op == "stdin":
            stdin.add(message, fds)
            stdin.run()
        elif op == "stop":  # nothing runs: say so
            wire.close_all(fds)
            wire.send(ctl, {"reports": [], "stopped": True})
        elif op == "kill":  # meant for a process that has ended meanwhile
            wire.close_all(fds)
        elif op in handlers:
            wire.send(ctl, handlers[op](host, message, fds, ctl))
        else:
            wire.close_all(fds)
            raise wire.ChannelError(f"unknown operation {op!r}")


def _functional(host: ProgramHost, message: dict, fds: list[int], ctl: socket.socket) -> dict:
    [chan] = fds
    body = functools.partial(child.run_functional, host.code, source=host.source,
                             fn_name=host.fn_name, chan=chan)
    return _run_child(host, message, body, keep=(chan,), close=(chan,), ctl=ctl)


def _official(host: ProgramHost, message: dict, fds: list[int], ctl: socket.socket) -> dict:
    tests_fd, chan = fds
    body = functools.partial(official_child.child_main, host.source, tests_fd=tests_fd, chan=chan,
                             timeout_s=int(message["timeout"]),
                             all_tests=bool(message["all_tests"]))
    return _run_child(host, message, body, keep=(tests_fd, chan), close=(tests_fd, chan),
                      ctl=ctl)


def _run_child(host: ProgramHost, message: dict, body: Callable[[], NoReturn], *,
               keep: tuple[int, ...], close: tuple[int, ...], ctl: socket.socket) -> dict:
    """One long-lived program process the judge talks to directly; ends on its own or on
    the judge's `kill` (and at `wall_s` at the latest)."""
    reset_workdir(host.workdir)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    started = time.monotonic()
    pid = spawn(body, fds=(devnull, devnull, err_w), keep=keep, scope=host.scope,
                rlimits=rlimits(host, float(message["cpu_s"])))
    for fd in (err_w, devnull, *close):
        os.close(fd)
    kill = lambda request, fds: (wire.close_all(fds), True)[1]  # noqa: E731
    return run_to_end(host, pid, started, deadline=started + float(message["wall_s"]),
                      stderr=StderrTail(err_r), ctl=ctl, on_control=kill)
