"""The agents' `python_exec`: `run_python` runs a snippet in a fresh contained process.

`run_python` (called by `lcb.agents.tools`) runs a snippet with the confinement graded
programs get (the threat model, tier by tier, is `lcb.sandbox`'s docstring) in a fresh helper
(`serve_one`, one per run, started by `launch` with its own uid and cgroups), after the import
prelude graded programs get, so a snippet behaves as it will when graded. It returns a
`RunResult`; only the machinery's failures raise (`SandboxError`, and
`launch.SandboxUnavailable` for a tier that cannot run here).

Example:
    >>> from lcb.sandbox.python_exec import run_python
    >>> run_python("print(input()[::-1])", "abc").stdout
    'cba\\n'
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, fields

from lcb.sandbox import claims
from lcb.sandbox.cgroups import Jail
from lcb.sandbox.contain import (
    MEMORY_HEADROOM,
    Limits,
    become_subreaper,
    die_with_parent,
    own_rlimits,
)
from lcb.sandbox.launch import check_sandbox, python_argv, start
from lcb.sandbox.privilege import can_switch_uid, make_undumpable, set_dumpable

__all__ = ["RunResult", "SandboxError", "run_python"]

CLIP_BYTES = 64 * 1024
_SLACK_S = 20.0


class SandboxError(RuntimeError):
    """The sandbox machinery failed (not the program): its helper crashed or hung."""


@dataclass(frozen=True)
class RunResult:
    """What a run produced. `exit_code` is None when the process was killed (by us or a signal)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    output_truncated: bool
    wall_s: float
    cpu_s: float


_TYPES = {"stdout": (str,), "stderr": (str,), "exit_code": (int, type(None)),
          "timed_out": (bool,), "output_truncated": (bool,), "wall_s": (int, float),
          "cpu_s": (int, float)}


def run_python(code: str, stdin: str = "", *, timeout_s: float = 10.0,
               sandbox: str = "process", prelude: bool = True) -> RunResult:
    """Run `code` as a script in a fresh contained process; stdout/stderr clipped to 64 KiB.

    With `prelude` (the default) the program runs after LiveCodeBench's import prelude, as
    grading runs it: `deque` or `List` work without imports, and a `from __future__` import is
    a SyntaxError, so a snippet behaves here as it will when graded.

    Never raises for what the program does; raises ValueError/TypeError for bad arguments,
    `SandboxUnavailable` for a missing tier and `SandboxError` if the machinery fails.
    """
    if not isinstance(code, str) or not isinstance(stdin, str):
        raise TypeError("code and stdin must be str")
    if not 0 < timeout_s <= 600:
        raise ValueError(f"timeout_s must be in (0, 600], got {timeout_s}")
    check_sandbox(sandbox)
    make_undumpable()
    limits = Limits.for_stdin()
    request = json.dumps({"code": code, "stdin": stdin, "timeout_s": timeout_s,
                          "prelude": bool(prelude), "limits": limits._asdict()}).encode()
    claim = claims.claim_uid() if can_switch_uid() else None
    jail = Jail.create(max_tasks=limits.max_tasks + 16, prefix="lcb-exec",
                       memory_bytes=limits.memory_bytes + MEMORY_HEADROOM
                       if limits.memory_bytes else 0)
    try:
        bounded = jail is not None and "memory" in jail.paths  # this run's own memory group
        argv = python_argv("lcb.sandbox.python_exec:serve_one", sandbox=sandbox, role="exec",
                           args=(claim.uid if claim else None, bounded))
        proc = start(argv, jail=jail, stderr=subprocess.PIPE, oom_score_adj=-1000)
        try:
            out, err = proc.communicate(request, timeout=timeout_s + _SLACK_S)
        except subprocess.TimeoutExpired:
            raise SandboxError(f"the python_exec helper overran {timeout_s + _SLACK_S:.0f}s"
                               ) from None
        finally:
            _stop(proc, jail)
    finally:
        if claim is not None:
            claim.release()
    return _result(out, err, proc.returncode)


def _result(out: bytes, err: bytes, returncode: int | None) -> RunResult:
    """The helper's answer, checked field by field."""
    try:
        answer = json.loads(out)
        if not isinstance(answer, dict) or set(answer) != set(_TYPES):
            raise ValueError("unexpected fields")
        for name, types in _TYPES.items():
            value = answer[name]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise ValueError(f"{name} has the wrong type")
        return RunResult(**{f.name: answer[f.name] for f in fields(RunResult)})
    except (ValueError, TypeError, RecursionError):
        tail = err.decode("utf-8", "replace")[-2000:]
        raise SandboxError(f"the python_exec helper failed (exit {returncode}): {tail}"
                           ) from None


def _stop(proc: subprocess.Popen, jail: Jail | None) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if jail is not None:
        jail.kill_all()
        jail.remove()


def serve_one(uid: int | None = None, memory_bounded: bool = False) -> None:
    """Entry of the fresh helper process: run one request from stdin, answer JSON on stdout
    (`memory_bounded`: the helper's own memory cgroup holds the snippet to its cap)."""
    from lcb.sandbox import child, host, mounts, zygote
    from lcb.sandbox.process import StderrTail, finish, memfd, read_fd, spawn, watch
    from lcb.sandbox.workdirs import make_workdir, remove_tree, temp_root

    request = json.loads(_read_all(0))  # raw fds: sys.stdin/stdout stay pristine for the child
    limits, timeout_s = Limits(**request["limits"]), float(request["timeout_s"])
    make_undumpable()
    die_with_parent()
    become_subreaper()
    identity, _ = zygote.decide(uid, memory_bounded=memory_bounded)
    if identity.private_tmp:
        mounts.private_tmp(temp_root(), tmp_bytes=limits.tmp_bytes, shm_bytes=limits.shm_bytes,
                           keep=identity.read_roots + identity.list_roots,
                           hidden=identity.hidden)
    workdir = make_workdir("lcb-exec-")
    if uid is not None:
        os.chown(workdir, uid, uid)
    prelude = bool(request["prelude"])
    main = child.script_module("<python_exec>", prelude=prelude)

    def body() -> None:
        host.confine(limits, workdir, identity)
        set_dumpable(True)  # the snippet's own process (confine made it non-dumpable)
        child.run_as_script(request["code"], main=main, after_prelude=prelude)

    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    fds = (memfd("stdin", request["stdin"].encode("utf-8", "surrogatepass")), memfd("stdout"),
           err_w)
    started = time.monotonic()
    pid = spawn(body, fds=fds, rlimits=own_rlimits(limits, cpu_s=timeout_s + 1))
    os.close(err_w)
    stderr, pidfd = StderrTail(err_r, keep=CLIP_BYTES), os.pidfd_open(pid)
    how = watch(pidfd, deadline=started + timeout_s, stderr=stderr)
    ended = finish(pid, pidfd, kill=how != "exited", started=started,
                   timed_out=how == "deadline")
    size = os.fstat(fds[1]).st_size
    stdout = read_fd(fds[1], CLIP_BYTES).decode("utf-8", "replace")
    if size > CLIP_BYTES:
        stdout += f"\n…[output clipped: {size} bytes in all, first {CLIP_BYTES} shown]"
    stderr_text = stderr.close()
    if stderr.total > CLIP_BYTES:
        stderr_text = (f"…[stderr clipped: {stderr.total} bytes in all, last {CLIP_BYTES} "
                       f"shown]\n{stderr_text}")
    if not identity.private_tmp:
        remove_tree(workdir)
    answer = RunResult(stdout=stdout, stderr=stderr_text, exit_code=ended.exit_code,
                       timed_out=ended.timed_out,
                       output_truncated=size > CLIP_BYTES or stderr.total > CLIP_BYTES,
                       wall_s=round(ended.wall_s, 4), cpu_s=round(ended.cpu_s, 4))
    data = memoryview(json.dumps(asdict(answer)).encode())
    while data:
        data = data[os.write(1, data):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
