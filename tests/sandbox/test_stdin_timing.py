"""Only a program's own time decides a stdin time limit: the host's batching of reports never
makes a test that ran within its limit look like a lost host (issue #21, item 1).

The fast test drives a program host's stdin queue (`host_stdin.StdinRun`) directly, in a
guarded child, over the same seqpacket protocol the judge speaks: it proves that the report of
a finished test reaches the judge while the next test is still running. The slow one grades a
program whose every test takes almost the whole limit, end to end.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from helpers_grading import stdin_problem

from lcb.grading import GradingPool
from lcb.sandbox import wire
from lcb.sandbox.contain import Limits
from tests.cgroup_guard import pids_guard

_WAIT_S = 10.0  # far beyond BATCH_S: only a report held until the next test ends misses it


def _test_process() -> None:
    """A program process: its stdin names a FIFO to wait on ("" = exit at once)."""
    fifo = os.read(0, 4096).decode()
    if fifo:
        with open(fifo, "rb") as released:
            released.read()
    os._exit(0)


def _host_side(ctl: socket.socket, workdir: str) -> None:
    """A program host's stdin loop over `ctl`, with `_test_process` as the program."""
    from lcb.sandbox.host_stdin import StdinRun
    from lcb.sandbox.hosting import Identity, ProgramHost

    identity = Identity(uid=None, private_tmp=False, landlock=False, read_roots=(),
                        memory_group=None)
    host = ProgramHost(mode="stdin", source="", fn_name=None, code=None, limits=Limits(),
                workdir=workdir, identity=identity, script=_test_process, oom_seen=[])
    message, fds = wire.recv(ctl, max_fds=wire.MAX_FDS)
    run = StdinRun(host, ctl)
    run.add(message, fds)
    run.run()


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("t")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _reports_while_next_test_runs(tmp: str) -> tuple[list, list]:
    """Judge's side: send a quick test then one that blocks until released. Returns (the
    report indices heard while the second test was still blocked, those heard after)."""
    fifo = os.path.join(tmp, "release")
    os.mkfifo(fifo)
    workdir = os.path.join(tmp, "work")
    os.mkdir(workdir)
    judge, host_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        judge.close()
        try:
            _host_side(host_end, workdir)
        finally:
            os._exit(0)
    host_end.close()
    fds = [_memfd(b""), _memfd(b""), _memfd(fifo.encode()), _memfd(b"")]
    wire.send(judge, {"op": "stdin", "first": 0, "timeout": 60.0, "fail_fast": True}, fds)
    wire.close_all(fds)
    before = _indices(judge, time.monotonic() + _WAIT_S)
    with open(fifo, "wb"):  # release the second test (it holds the FIFO open for reading)
        pass
    after: list[int] = []
    while len(before) + len(after) < 2:
        after += _indices(judge, time.monotonic() + _WAIT_S)
    judge.close()
    os.waitpid(pid, 0)
    return before, after


def _indices(judge: socket.socket, deadline: float) -> list[int]:
    try:
        message, _ = wire.recv(judge, deadline=deadline)
    except wire.ChannelTimeout:
        return []
    return [report["i"] for report in message["reports"]]


def test_a_finished_tests_report_does_not_wait_for_the_next_test_to_end(tmp_path: Path):
    with pids_guard(max_pids=50) as guard:
        before, after = guard.call(_reports_while_next_test_runs, str(tmp_path), timeout_s=60)
        assert guard.survivors(settle_s=5.0) == []
    assert (before, after) == ([0], [1])


@pytest.mark.slow
def test_tests_each_near_the_time_limit_pass():
    # Each test takes 5.75 s of the 6 s: two together outlast the judge's wait for one message
    # (the limit plus judge.HOST_SLACK_S), which a held report used to turn into a lost host.
    problem = stdin_problem(("1 2\n", "3\n"), ("3 4\n", "7\n"))
    program = ("import time\ntime.sleep(5.75)\n"
               "a, b = map(int, input().split())\nprint(a + b)\n")
    with GradingPool(1) as pool:
        grade = pool.grade_sync(problem, program)
    assert [o.verdict.value for o in grade.outcomes] == ["passed", "passed"]
    assert grade.em == 1 and all(o.wall_s < 6.0 for o in grade.outcomes)
