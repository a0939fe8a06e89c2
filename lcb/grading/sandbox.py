"""Running untrusted Python: containment for graded programs and the agents' `python_exec`.

Threat model. We guard against programs written by a model that are buggy, greedy or naive
(not a determined attacker), and against grading that hangs or lets processes linger.

What every program gets, in both tiers (python_exec runs after the same import prelude as
graded programs, so a snippet behaves as it will when graded):
- a fresh forked process in its own session, whose parent is a disposable supervisor (killing
  its parent harms nothing); the supervisor and the grading worker are child subreapers, so any
  descendant, even a grandchild that called `setsid()`, stays findable;
- a fresh private working directory, emptied before each stdin test and removed afterwards;
- a scrubbed environment (PATH, HOME/TMPDIR = its directory, UTF-8 locale, PYTHONHASHSEED=0:
  no API keys, no PYTHON* variables from the host);
- rlimits: address space (`LCB_FUNCTIONAL_MEMORY_BYTES` for functional programs,
  `LCB_SANDBOX_MEMORY_BYTES` otherwise; 4 GiB by default, 0 disables), CPU seconds, file size
  (16 MiB, which also caps captured stdout/stderr), 256 open files, no core dumps;
- stdin as a file (EOF at its end: reading "forever" ends), stdout/stderr captured in memory;
- a hard wall-clock deadline after which its process group is killed; after every run, every
  process it started is killed and reaped (no process survives a grading or python_exec call);
- as root with cgroup-v1 pids available, a pids cgroup (`pids.max` bounds a program to 128
  tasks, so a fork bomb stays small; its member list finds every survivor): a graded program
  runs in its grading worker's group, which holds one program at a time and is emptied after
  each (joining a fresh group per program would cost ~10 ms); each python_exec run gets its own;
  elsewhere the subreaper sweep alone.
- functional programs also run under LiveCodeBench's `reliability_guard` (`os.system`,
  `os.kill`, `subprocess.Popen`, … disabled) as LiveCodeBench runs them.

What `sandbox="process"` does NOT protect against: the program runs as lcb's user (often root),
with the real file system and network. It can read whatever that user can, write files outside
its directory (each capped at 16 MiB, but not their number), open network connections, and, as
root, deliberately leave its cgroup, signal or ptrace other processes, or forge its own result
(functional programs share a process with the test harness, as in LiveCodeBench). Threads count
against the 128-task cap. Use `sandbox="bwrap"` (bubblewrap: no network, read-only root, private
/tmp, own PID namespace, killed with lcb) to take away the network, writes outside /tmp and the
view of other processes; run lcb in a container or VM for anything stronger.

Example:
    >>> from lcb.grading.sandbox import run_python
    >>> run_python("print(input()[::-1])", "abc").stdout
    'cba\\n'
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass

from lcb.grading import child
from lcb.grading.contain import (
    Limits,
    PidsJail,
    become_subreaper,
    die_with_parent,
    own_rlimits,
)
from lcb.grading.launch import SANDBOXES, SandboxUnavailable, check_sandbox, python_argv, start
from lcb.grading.process import enter_supervisor, make_workdir, memfd, read_fd, spawn, wait_exit

__all__ = ["SANDBOXES", "RunResult", "SandboxError", "SandboxUnavailable", "check_sandbox",
           "run_python"]

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
    limits = Limits.for_stdin()
    request = json.dumps({"code": code, "stdin": stdin, "timeout_s": timeout_s,
                          "prelude": bool(prelude), "limits": limits._asdict()}).encode()
    jail = PidsJail.create(max_tasks=limits.max_tasks + 16, prefix="lcb-exec")
    proc = start(python_argv("lcb.grading.sandbox:serve_one", sandbox=sandbox), jail=jail,
                 stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(request, timeout=timeout_s + _SLACK_S)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"the python_exec helper overran {timeout_s + _SLACK_S:.0f}s") from None
    finally:
        _stop(proc, jail)
    try:
        return RunResult(**json.loads(out))
    except (ValueError, TypeError):
        tail = err.decode("utf-8", "replace")[-2000:]
        raise SandboxError(f"the python_exec helper failed (exit {proc.returncode}): {tail}"
                           ) from None


def _stop(proc: subprocess.Popen, jail: PidsJail | None) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if jail is not None:
        jail.kill_all()
        jail.remove()


def _clipped(fd: int) -> tuple[str, bool]:
    size = os.fstat(fd).st_size
    text = read_fd(fd, CLIP_BYTES).decode("utf-8", "replace")
    if size <= CLIP_BYTES:
        return text, False
    return f"{text}\n…[output clipped: {size} bytes in all, first {CLIP_BYTES} shown]", True


def serve_one() -> None:
    """Entry of the fresh helper process: run one request from stdin, answer JSON on stdout."""
    request = json.loads(_read_all(0))  # raw fds: sys.stdin/stdout stay pristine for the child
    limits, timeout_s = Limits(**request["limits"]), float(request["timeout_s"])
    die_with_parent()
    become_subreaper()
    workdir = make_workdir("lcb-exec-")
    enter_supervisor(workdir, limits)
    fds = (memfd("stdin", request["stdin"].encode()), memfd("stdout"), memfd("stderr"))
    started = time.monotonic()
    prelude = bool(request["prelude"])
    main = child.script_module("<python_exec>", prelude=prelude)
    pid = spawn(lambda: child.run_as_script(request["code"], main=main, after_prelude=prelude),
                fds=fds, rlimits=own_rlimits(limits, cpu_s=timeout_s + 1))
    ended = wait_exit(pid, started=started, deadline=started + timeout_s)
    (stdout, cut_out), (stderr, cut_err) = _clipped(fds[1]), _clipped(fds[2])
    shutil.rmtree(workdir, ignore_errors=True)
    answer = RunResult(stdout=stdout, stderr=stderr, exit_code=ended.exit_code,
                       timed_out=ended.timed_out, output_truncated=cut_out or cut_err,
                       wall_s=round(ended.wall_s, 4), cpu_s=round(ended.cpu_s, 4))
    data = memoryview(json.dumps(asdict(answer)).encode())
    while data:
        data = data[os.write(1, data):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
