"""Functional mode, on the judge's side: feed one program process its tests, judge its values.

The host starts one process for the program (`child.run_functional`) with a stream socket as
its channel (`wire.frame`s both ways). The judge waits for `ready` (the program loaded:
`Solution()` made), then for each test sends the input and starts that test's clock; the
process answers with the return value as data (`lcb.sandbox.values`). The judge decodes it
into plain values, turns a top-level tuple into a list (as LiveCodeBench does) and compares
with the expected value with `==` here.

Because the judge sends test `i + 1` only after it has judged test `i`, and its clock runs from
its own send, nothing the program writes can start, stop or stretch a clock, and no answer can
be taken for another test's. A late answer is a time limit (the host kills the process), an
answer that is not one (a wrong index, a malformed frame, too long) a runtime
error, a closed channel a
crash classified from the host's exit report. A host that is gone when the judge needs it (to
start the process, or for the exit report that classifies a crash) gives `Verdict.INFRA`.
With `all_tests`, a fresh process (a fresh `Solution()`) goes on after a crash.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from lcb.grading.verdicts import Verdict, describe_exit, failure_verdict
from lcb.sandbox import values, wire
from lcb.sandbox.judge import HOST_SLACK_S, HostHandle, HostLost
from lcb.sandbox.process import Exit
from lcb.text import FEEDBACK_CHARS, clip_feedback

if TYPE_CHECKING:
    from lcb.grading.default import GradingJob


def run_functional(host: HostHandle, job: GradingJob) -> Iterator[dict]:
    """One process for the tests; after a crash with `all_tests`, a fresh one goes on."""
    start = 0
    while start < len(job.tests):
        results = list(_Session(host, job).run(start))
        yield from results
        if not results or host.lost:
            return
        if all(r["v"] is Verdict.PASSED for r in results) or not job.all_tests:
            return
        start = results[-1]["i"] + 1


def _safe_repr(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(value)
        except (RecursionError, ValueError):
            return f"<a {type(value).__name__} too deep to show>"


class _Session:
    """The judge's side of one program process."""

    def __init__(self, host: HostHandle, job: GradingJob):
        self.host, self.job = host, job
        self.sock: socket.socket | None = None
        self.ended = False  # the host's exit report has been taken

    def run(self, start: int) -> Iterator[dict]:
        job = self.job
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        budget = job.timeout_s * (len(job.tests) - start + 1) + 1
        t0 = time.monotonic()
        try:
            self.host.send({"op": "functional", "cpu_s": budget, "wall_s": budget + 5},
                           [theirs.fileno()])
        except HostLost as exc:
            mine.close()
            yield _lost(start, t0, exc)
            return
        finally:
            theirs.close()
        mine.setblocking(False)
        self.sock = mine
        self.frames = wire.FrameReader(mine.fileno(), limit=2 * job.limits.output_bytes)
        try:
            yield from self._tests(start, t0)
        finally:
            if not self.ended:
                self._end(grace_s=1.0)
            mine.close()

    def _tests(self, start: int, t0: float) -> Iterator[dict]:
        job = self.job
        hello = self._next(t0 + job.timeout_s)
        if not (isinstance(hello, _Answer) and hello.kind == "ready"):
            yield self._not_loaded(start, t0, hello)
            return
        for index in range(start, len(job.tests)):
            data = job.tests[index].input.encode("utf-8", "surrogatepass")
            t0 = time.monotonic()
            try:
                wire.send_all(self.sock.fileno(), wire.frame(index, payload=data),
                              t0 + job.timeout_s)
                answer = self._next(t0 + job.timeout_s)
            except wire.ChannelTimeout:
                answer = "timeout"
            except wire.ChannelError:
                answer = "eof"
            result = self._judge(index, answer, t0)
            yield result
            if self.ended or (result["v"] is not Verdict.PASSED and not job.all_tests):
                return

    def _next(self, deadline: float) -> _Answer | str:
        """The program's next answer, or "timeout", "eof" or "garbage"."""
        try:
            got = self.frames.next(deadline)
        except wire.ChannelTimeout:
            return "timeout"
        except wire.ChannelError:
            return "garbage"
        if got is None:
            return "eof"
        return _Answer.parse(*got) or "garbage"

    def _end(self, *, grace_s: float, kill: bool = False) -> dict | None:
        """End the process (EOF on its channel; `kill` at once) and take the host's report."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if kill:
            self.host.kill()
        self.ended = True
        return self.host.exit_report(grace_s=grace_s)

    def _not_loaded(self, index: int, t0: float, hello: _Answer | str) -> dict:
        if isinstance(hello, _Answer) and hello.kind in ("error", "memory"):
            self._end(grace_s=HOST_SLACK_S)
            verdict = Verdict.MEMORY_LIMIT if hello.kind == "memory" else Verdict.RUNTIME_ERROR
            return {"i": index, "v": verdict, "wall": time.monotonic() - t0, "cpu": 0.0,
                    "actual": "", "error": clip_feedback(hello.text()), "load": True}
        how = hello if isinstance(hello, str) else "garbage"
        return self._failed(index, how, t0)

    def _failed(self, index: int, how: str, t0: float) -> dict:
        """The verdict of a test whose process timed out, died or broke the protocol."""
        wall = time.monotonic() - t0
        # A process that closed its channel is usually exiting: give it a second, then kill it
        # (it may have closed the channel and gone on running).
        report = self._end(grace_s=1.0 if how == "eof" else HOST_SLACK_S, kill=how != "eof")
        if report is None:
            return _lost(index, t0, HostLost("no exit report"))
        timed_out = how == "timeout" or report["timed_out"]
        ended = Exit(report["status"], timed_out, wall, report["cpu"])
        tail = report["stderr"][-FEEDBACK_CHARS:]
        if how == "garbage":
            verdict = Verdict.RUNTIME_ERROR
            error = "the program wrote to its result channel something that is not an answer"
        else:
            verdict = failure_verdict(ended, stdout_size=0, stderr_tail=tail,
                                      limits=self.job.limits, oom=report["oom"])
            error = tail or describe_exit(ended, oom=report["oom"])
        return {"i": index, "v": verdict, "wall": wall, "cpu": report["cpu"], "actual": "",
                "error": clip_feedback(error), "exit": True}

    def _judge(self, index: int, answer: _Answer | str, t0: float) -> dict:
        if isinstance(answer, str) or answer.index != index or answer.kind == "ready":
            return self._failed(index, answer if isinstance(answer, str) else "garbage", t0)
        wall = time.monotonic() - t0
        result = {"i": index, "wall": wall, "cpu": min(answer.cpu, 64 * wall)}
        if answer.kind == "value":
            result.update(self._compare(index, answer.payload))
        elif answer.kind == "nondata":
            result.update(v=Verdict.WRONG_ANSWER, actual="", error=clip_feedback(answer.text()))
        else:
            verdict = Verdict.MEMORY_LIMIT if answer.kind == "memory" else Verdict.RUNTIME_ERROR
            result.update(v=verdict, actual="", error=clip_feedback(answer.text()))
        return result

    def _compare(self, index: int, text: bytes) -> dict:
        try:
            value = values.decode(text)
        except values.NotData as exc:
            return {"v": Verdict.WRONG_ANSWER, "actual": "", "error": str(exc)}
        if type(value) is tuple:  # only the top level, as LiveCodeBench
            value = list(value)
        try:
            expected = json.loads(self.job.tests[index].output)
        except (ValueError, RecursionError):
            return {"v": Verdict.RUNTIME_ERROR, "actual": clip_feedback(_safe_repr(value)),
                    "error": "the expected output of this test is not JSON"}
        try:
            same = value == expected
        except RecursionError:
            same = False
        if same:
            return {"v": Verdict.PASSED}
        return {"v": Verdict.WRONG_ANSWER, "actual": clip_feedback(_safe_repr(value)), "error": ""}


class _Answer(NamedTuple):
    """One frame from the program's process, its header checked."""

    kind: str
    index: int
    cpu: float
    payload: bytes

    KINDS = frozenset({"ready", "value", "nondata", "error", "memory"})

    @classmethod
    def parse(cls, fields: list[bytes], payload: bytes) -> _Answer | None:
        if len(fields) != 3:
            return None
        try:
            kind, index, cpu = fields[0].decode("ascii"), int(fields[1]), float(fields[2])
        except (UnicodeDecodeError, ValueError):
            return None
        if kind not in cls.KINDS or not 0.0 <= cpu < float("inf"):
            return None
        return cls(kind, index, cpu, payload)

    def text(self) -> str:
        return self.payload.decode("utf-8", "replace")


def _lost(index: int, t0: float, exc: Exception) -> dict:
    """A test whose process the host could not start or report on (the host is gone): not the
    program's verdict but `Verdict.INFRA` (the pool grades the program again; lost at the same
    test again, that test is the program's `runtime_error`)."""
    return {"i": index, "v": Verdict.INFRA, "wall": time.monotonic() - t0, "cpu": 0.0,
            "actual": "", "error": f"the program's host stopped answering: {exc}", "exit": True}
