"""The disposable supervisor: the parent of a program's processes, and their killer.

A worker forks one supervisor per program. The supervisor makes itself a child subreaper (so
whatever the program forks, even after `setsid()`, stays its descendant), then runs the tests:
- stdin mode: one forked process per test (fd 0 = the input in a memfd, fd 1/2 = memfds capped
  by RLIMIT_FSIZE), a wall-clock deadline watched through a pidfd, then every descendant killed.
- functional mode: one forked process runs the tests in order (see `child.run_functional`); the
  supervisor times each test from the child's reports and kills the child on overrun.
It reports one JSON line per test on `out_fd` (passed tests in small batches: at most 64, held
at most 50 ms; a failure at once) and exits. If the program kills it, the worker
(also a subreaper, and owner of the program's pids cgroup) cleans up instead.
"""

from __future__ import annotations

import json
import os
import time
from typing import NoReturn

from lcb.grading.contain import become_subreaper, die_with_parent, kill_descendants
from lcb.grading.functional_mode import run_functional
from lcb.grading.process import Job, enter_supervisor
from lcb.grading.stdin_mode import run_stdin
from lcb.grading.verdicts import Verdict

__all__ = ["Job", "supervise"]


def _keep_only(out_fd: int) -> None:
    """Drop the worker's descriptors (its RPC pipes among them); fds 0/1 become /dev/null."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.closerange(3, out_fd)
    os.closerange(out_fd + 1, 1 << 16)


_BATCH = 64        # passed results held back at most (a failure is sent at once) …
_BATCH_S = 0.05    # … and for at most this long


def _write_lines(fd: int, lines: list[str]) -> None:
    if lines:
        view = memoryview(("\n".join(lines) + "\n").encode())
        while view:
            view = view[os.write(fd, view):]
        lines.clear()


def supervise(job: Job, out_fd: int, workdir: str) -> NoReturn:
    """The supervisor's whole life: run the job in `workdir` (made and removed by the caller),
    report each test on `out_fd`, kill leftovers, exit."""
    try:
        become_subreaper()
        die_with_parent()
        _keep_only(out_fd)
        enter_supervisor(workdir, job.limits)
        run = run_stdin if job.mode == "stdin" else run_functional
        pending: list[str] = []
        flushed = time.monotonic()
        for result in run(job, workdir):
            pending.append(json.dumps(result))
            # Batched: a write per test would wake the worker once per test.
            if (result["v"] is not Verdict.PASSED or len(pending) >= _BATCH
                    or time.monotonic() - flushed > _BATCH_S):
                _write_lines(out_fd, pending)
                flushed = time.monotonic()
        _write_lines(out_fd, pending)
        kill_descendants()
    finally:
        os._exit(0)
