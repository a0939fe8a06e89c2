"""Functional mode in a supervisor: one contained child runs the program's tests in order.

The child (see `child.run_functional`) reports JSON lines; it is untrusted, so each line is
size-capped and validated. A test's clock starts when the child reports it loaded the program
or finished the previous test; past `timeout_s` the child is killed (TIME_LIMIT). A child that
dies mid-test gives that test a runtime error (or memory limit, from its stderr). With
`all_tests`, a fresh child (a fresh `Solution()`) goes on after a crash.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator

from lcb.grading import child
from lcb.grading.contain import own_rlimits
from lcb.grading.process import (
    Exit,
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

_MAX_MESSAGE = 1 << 20


def run_functional(job: Job, workdir: str) -> Iterator[dict]:
    """One child for the tests; after a crash with `all_tests`, a fresh child goes on."""
    start = 0
    while start < len(job.tests):
        reset_workdir(workdir)
        results = list(_functional_child(job, start))
        yield from results
        if not results:
            return
        failed = [r for r in results if r["v"] is not Verdict.PASSED]
        if not failed or not job.all_tests:
            return
        start = results[-1]["i"] + 1


class _Lines:
    """JSON lines from an untrusted pipe, each awaited until a deadline."""

    TIMEOUT = object()

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def next(self, deadline: float) -> dict | object | None:
        """The next message; None at EOF; TIMEOUT at the deadline; {} for garbage."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return self.TIMEOUT
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > _MAX_MESSAGE:
                return {}
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return {}
        return message if isinstance(message, dict) else {}


def _checked(message: dict, current: int) -> dict | None:
    """A well-formed result for test `current`, normalized; None if malformed."""
    try:
        if message["i"] != current:
            return None
        result = {"i": current, "v": Verdict(message["v"]),
                  "wall": float(message.get("wall", 0.0)), "cpu": float(message.get("cpu", 0.0))}
        if result["v"] is not Verdict.PASSED:
            result["actual"] = clip(str(message.get("actual", "")))
            result["error"] = clip(str(message.get("error", "")))
    except (KeyError, ValueError, TypeError):
        return None
    return result


def _functional_child(job: Job, start: int) -> Iterator[dict]:
    """Run tests from `start` in one contained child; yield a result per test it reached."""
    err, devnull = memfd("stderr"), os.open(os.devnull, os.O_RDWR)
    read_end, write_end = os.pipe()
    started = time.monotonic()
    assert job.fn_name is not None
    body = lambda: child.run_functional(  # noqa: E731
        job.code, source=job.source, fn_name=job.fn_name, tests=job.tests, start=start,
        all_tests=job.all_tests, chan=write_end)
    cpu_s = job.timeout_s * (len(job.tests) - start + 1) + 1
    pid = spawn(body, fds=(devnull, devnull, err), keep=(write_end,),
                rlimits=own_rlimits(job.limits, cpu_s=cpu_s))
    os.close(write_end)
    os.close(devnull)
    try:
        yield from _watch_functional(job, pid, _Lines(read_end), start, started, err)
    finally:
        os.close(read_end)
        os.close(err)


def _watch_functional(job: Job, pid: int, lines: _Lines, current: int, started: float,
                      err: int) -> Iterator[dict]:
    test_started, deadline, pending, cpu_used = started, started + job.timeout_s, True, 0.0
    while True:
        message = lines.next(deadline)
        result = _checked(message, current) if isinstance(message, dict) else None
        if result is None and not (isinstance(message, dict) and "start" in message):
            end = time.monotonic() + (2.0 if message is None else 0.0)  # EOF: let it exit
            ended = wait_exit(pid, started=started, deadline=end)
            if pending:
                yield _crashed(job, current, ended, test_started, err, cpu_used,
                               timed_out=message is _Lines.TIMEOUT)
            return
        assert isinstance(message, dict)
        now = time.monotonic()
        if result is None:
            current, test_started, pending = int(message["start"]), now, True
            deadline = now + job.timeout_s
            continue
        cpu_used += result["cpu"]
        yield result
        current, test_started, deadline = current + 1, now, now + job.timeout_s
        pending = current < len(job.tests)  # the child starts the next test right away
        stop = message.get("load") or (result["v"] is not Verdict.PASSED and not job.all_tests)
        if stop or not pending:
            wait_exit(pid, started=started, deadline=now + 2.0)
            return


def _crashed(job: Job, index: int, ended: Exit, test_started: float, err: int, cpu_used: float,
             *, timed_out: bool) -> dict:
    error = read_fd(err, FEEDBACK_CHARS, tail=True).decode("utf-8", "replace")
    ended = Exit(ended.status, ended.timed_out or timed_out, ended.wall_s, ended.cpu_s)
    verdict = failure_verdict(ended, stdout_size=0, stderr_tail=error, limits=job.limits)
    return {"i": index, "v": verdict, "wall": time.monotonic() - test_started,
            "cpu": max(0.0, ended.cpu_s - cpu_used), "actual": "",
            "error": error or describe_exit(ended)}
