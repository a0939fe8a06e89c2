"""Stdin mode, on the judge's side: tests go to the program's host ahead, verdicts are made here.

The judge keeps up to `AHEAD_TESTS` tests (and `AHEAD_BYTES` of input) queued at the host
(`lcb.sandbox.host_stdin`): for each, an input memfd and an empty stdout memfd. The host runs
them back to back and reports in batches, each report at most `host_stdin.BATCH_S` after its
test ended (even while the next test runs), so between two messages there is at most one test's
time: the judge's wait for a message expires only when the host is lost, never because a
program used its time. For each report the judge reads what the process
wrote and decides: the test passes iff the process exited with code 0 before its deadline and
its stdout matches by the official comparison, which runs here: the program's process never
holds an expected output. At the first failure (fail-fast) the judge sends `stop` and drops the
reports of tests that ran past it.

Times come from the host's own clock (a stopped host still sees the deadline pass); a report
whose time is over the limit is a time limit whatever it says. A host that sends nothing for
the time limit plus `HOST_SLACK_S` (a program that stopped or killed it) fails the test it was
running and ends the program.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lcb.grading.compare import stdout_matches
from lcb.grading.verdicts import Verdict, describe_exit, failure_verdict
from lcb.sandbox.judge import HOST_SLACK_S, HostHandle, HostLost, check_report
from lcb.sandbox.process import Exit, memfd, read_fd
from lcb.text import FEEDBACK_CHARS, clip_feedback

if TYPE_CHECKING:
    from lcb.grading.default import GradingJob

AHEAD_TESTS = 64
AHEAD_BYTES = 64 << 20
_PER_REQUEST = 120       # test pairs per request (two descriptors each)
_LATE_S = 0.5


def run_stdin(host: HostHandle, job: GradingJob) -> Iterator[dict]:
    yield from _Stream(host, job).results()


class _Stream:
    def __init__(self, host: HostHandle, job: GradingJob):
        self.host, self.job = host, job
        self.next_index = 0
        self.ahead: deque[tuple[int, int, int]] = deque()  # (index, stdout fd, input bytes)
        self.ahead_bytes = 0

    def _top_up(self) -> None:
        job, batch = self.job, []
        while self.next_index < len(job.tests) and len(self.ahead) < AHEAD_TESTS and (
                not self.ahead or self.ahead_bytes < AHEAD_BYTES):
            data = job.tests[self.next_index].input.encode("utf-8", "surrogatepass")
            batch.append((self.next_index, memfd("stdin", data), memfd("stdout")))
            self.ahead.append((self.next_index, batch[-1][2], len(data)))
            self.ahead_bytes += len(data)
            self.next_index += 1
            if len(batch) == _PER_REQUEST:
                self._send(batch)
                batch = []
        if batch:
            self._send(batch)

    def _send(self, batch: list[tuple[int, int, int]]) -> None:
        fds = [fd for _, in_fd, out_fd in batch for fd in (in_fd, out_fd)]
        try:
            self.host.send({"op": "stdin", "first": batch[0][0], "timeout": self.job.timeout_s,
                            "fail_fast": not self.job.all_tests}, fds)
        finally:
            for _, in_fd, _ in batch:
                os.close(in_fd)

    def results(self) -> Iterator[dict]:
        try:
            self._top_up()
            while self.ahead:
                started = time.monotonic()
                message = self.host.reply(deadline=started + self.job.timeout_s + HOST_SLACK_S)
                for raw in _reports(message):
                    result = self._judge(raw)
                    yield result
                    if result["v"] is not Verdict.PASSED and not self.job.all_tests:
                        try:
                            self._stop(stopped=message.get("stopped") is True)
                        except HostLost:
                            pass  # the zygote cleans up (the host is marked lost)
                        return
                if message.get("stopped") is True:
                    return
                self._top_up()
        except HostLost as exc:
            if self.ahead:
                yield lost_result(self.ahead[0][0], self.job, exc)
        finally:
            self._close_ahead()

    def _judge(self, raw: dict) -> dict:
        if not self.ahead or raw.get("i") != self.ahead[0][0]:
            self.host.lost = True
            raise HostLost("the program's host reported tests out of order")
        index, out_fd, size = self.ahead.popleft()
        self.ahead_bytes -= size
        try:
            return _verdict(self.job, index, check_report(raw), out_fd)
        finally:
            os.close(out_fd)

    def _stop(self, *, stopped: bool) -> None:
        """Stop the host's run and drop the reports of the tests after the failure."""
        if stopped or self.host.lost:
            return
        self.host.send({"op": "stop"})
        deadline = time.monotonic() + self.job.timeout_s + HOST_SLACK_S
        while self.host.reply(deadline=deadline).get("stopped") is not True:
            pass

    def _close_ahead(self) -> None:
        while self.ahead:
            os.close(self.ahead.popleft()[1])


def _reports(message: dict) -> list[dict]:
    reports = message.get("reports")
    if not isinstance(reports, list) or not all(isinstance(r, dict) for r in reports):
        raise HostLost("the program's host sent a malformed message")
    return reports


def lost_result(index: int, job: GradingJob, exc: HostLost) -> dict:
    """The result of a test whose host went away or went silent: `Verdict.INFRA`, never a time
    limit (only the program's own time, which the host measures, decides one). Whoever killed
    or stopped the host (its program may have: the host is the program's side), the judge
    cannot tell, so the pool grades the program again on a fresh slot (lost at the same test
    again, that test is the program's `runtime_error`: `lcb.grading.pool`)."""
    how = "did not answer in time" if exc.timed_out else "went away"
    return {"i": index, "v": Verdict.INFRA, "wall": 0.0, "cpu": 0.0, "actual": "",
            "error": f"the program's host {how} while test {index} ran: {exc}"}


def _verdict(job: GradingJob, index: int, report: dict, out_fd: int) -> dict:
    test = job.tests[index]
    out_size = os.fstat(out_fd).st_size
    actual = read_fd(out_fd, job.limits.output_bytes).decode("utf-8", "replace")
    late = report["wall"] > job.timeout_s + _LATE_S
    ended = Exit(report["status"], report["timed_out"] or late, report["wall"], report["cpu"])
    error = report["stderr"][-FEEDBACK_CHARS:]
    if ended.timed_out or ended.exit_code != 0 or out_size >= job.limits.output_bytes:
        verdict = failure_verdict(ended, stdout_size=out_size, stderr_tail=error,
                                  limits=job.limits, oom=report["oom"])
    else:
        verdict = Verdict.PASSED if stdout_matches(actual, test.output) else Verdict.WRONG_ANSWER
    result = {"i": index, "v": verdict, "wall": ended.wall_s, "cpu": ended.cpu_s}
    if verdict is Verdict.WRONG_ANSWER:
        result.update(actual=clip_feedback(actual), error=error)
    elif verdict is not Verdict.PASSED:
        result.update(actual=clip_feedback(actual),
                      error=error or describe_exit(ended, oom=report["oom"]))
    return result
