"""Stdin mode in a supervisor: each test is a fresh process forked from a prepared `__main__`.

The prelude ran once, in the worker (`child.prelude_module`); each test's process gets the input as
its fd 0 (a memfd: EOF at the end), writes fd 1/2 into capped memfds, starts in an emptied
working directory, and passes iff it exits with code 0 and its stdout matches by the official
comparison.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

from lcb.grading import child
from lcb.grading.compare import stdout_matches
from lcb.grading.contain import own_rlimits
from lcb.grading.process import (
    Job,
    describe_exit,
    failure_verdict,
    memfd,
    read_fd,
    reset_workdir,
    spawn,
    wait_exit,
)
from lcb.grading.verdicts import FEEDBACK_CHARS, Verdict, clip


def run_stdin_test(job: Job, index: int, *, body: Callable[[], NoReturn],
                   rlimits: tuple[tuple[int, tuple[int, int]], ...], workdir: str) -> dict:
    """Run test `index` in a fresh process forked to run `body` (the program, prepared)."""
    test = job.tests[index]
    reset_workdir(workdir)
    fds = (memfd("stdin", test.input.encode()), memfd("stdout"), memfd("stderr"))
    try:
        started = time.monotonic()
        pid = spawn(body, fds=fds, rlimits=rlimits)
        ended = wait_exit(pid, started=started, deadline=started + job.timeout_s)
        out_size = os.fstat(fds[1]).st_size
        actual = read_fd(fds[1], job.limits.output_bytes).decode("utf-8", "replace")
        error = read_fd(fds[2], FEEDBACK_CHARS, tail=True).decode("utf-8", "replace")
    finally:
        for fd in fds:
            os.close(fd)
    if ended.timed_out or ended.exit_code != 0 or out_size >= job.limits.output_bytes:
        verdict = failure_verdict(ended, stdout_size=out_size, stderr_tail=error,
                                  limits=job.limits)
    else:
        verdict = Verdict.PASSED if stdout_matches(actual, test.output) else Verdict.WRONG_ANSWER
    result = {"i": index, "v": verdict, "wall": ended.wall_s, "cpu": ended.cpu_s}
    if verdict is Verdict.WRONG_ANSWER:
        result.update(actual=clip(actual), error=error)
    elif verdict is not Verdict.PASSED:
        result.update(actual=clip(actual), error=error or describe_exit(ended))
    return result


def run_stdin(job: Job, workdir: str) -> Iterator[dict]:
    main = child.prelude_module("__main__")
    child.prepare_script(main)  # once here, not in every test's process
    body = functools.partial(child.run_as_script, job.code, main=main, prepared=True)
    rlimits = own_rlimits(job.limits, cpu_s=job.timeout_s + 1)
    for index in range(len(job.tests)):
        result = run_stdin_test(job, index, body=body, rlimits=rlimits, workdir=workdir)
        yield result
        if result["v"] is not Verdict.PASSED and not job.all_tests:
            return
