"""The `official` grading mode: LiveCodeBench's own `run_test`, inside lcb's containment.

Contract:
- `grade(problem, code, grader="official")` (or `grade_official`) grades with
  `livecodebench.evaluation.testing_util.run_test` from the PyPI package `nvidia-livecodebench`
  (installed with `--no-deps`; see `INSTALL_HINT`). Tests: the public tests, then the private
  ones, in stored order, as LiveCodeBench grades (`tests=` overrides them). It raises
  `OfficialGraderMissing` when the package is absent.
- The official code runs as LiveCodeBench runs it, in one process per program
  (`lcb.sandbox.official_child`): `run_test` applies `reliability_guard`, runs stdin programs as
  a wrapped function with patched stdin, stops at the first failure. Its result codes map onto
  `Verdict`: True -> passed, False/-2 -> wrong answer, -3 -> time limit, -4 -> runtime error
  (a `MemoryError` -> memory limit; a program that does not compile -> compile error), and a
  process that returns nothing (LiveCodeBench's -1 for every test) -> a whole-program failure
  at test 0; a host lost before it reported on that process -> `Verdict.INFRA` (grading
  failed, not the program; lost again on the pool's second try, it is the program's runtime
  error at test 0, see `lcb.grading.pool`).
- `all_tests=True` restarts `run_test` after each failure on the remaining tests (a fresh
  `Solution()` per restart), so every test gets a verdict.
- Importing LiveCodeBench's code (`require_official`) leaves the importing process's
  int-to-str digit limit as it was; the official process grades with the one the import set
  (50000), as LiveCodeBench's own grading processes do.

What lcb adds around it (the official call has none of these): the program's process is forked
from a clean zygote by its program host, with the same uid, Landlock, namespaces, rlimits and
cgroups as the default grader (`lcb.sandbox`); the judge (`judge_official`, which holds
nothing of lcb's but the tests) kills it when an alarm LiveCodeBench armed has run for
`timeout_s + 1` seconds without being cancelled (a program that ignores or blocks SIGALRM), or
at LiveCodeBench's global limit `(timeout_s + 1) * n_tests + 5`. While no alarm is armed,
LiveCodeBench's own work runs (loading the tests, comparing an output), which only that global
limit bounds, as in LiveCodeBench: a test within its time is never cut short by the time the
official code takes around it.
Its answer travels as size-capped JSON and is checked before it is believed.

Official mode is for trusted comparisons (reproducing leaderboard numbers): by LiveCodeBench's
design the program shares its process with the expected outputs and can forge its own result.
Use the default grader for untrusted programs.
"""

from __future__ import annotations

import math
import os
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lcb.grading.default import number
from lcb.grading.verdicts import Verdict
from lcb.sandbox import wire
from lcb.sandbox.judge import HOST_SLACK_S
from lcb.sandbox.official_child import (
    DISARMED,
    HEARTBEAT,
    INSTALL_HINT,
    RESULT,
    OfficialGraderMissing,
    input_output,
    require_official,
)
from lcb.sandbox.process import memfd
from lcb.text import clip_feedback

if TYPE_CHECKING:
    from lcb.data.problems import Problem, Test
    from lcb.grading.grades import Feedback, Grade
    from lcb.sandbox.judge import HostHandle

__all__ = ["INSTALL_HINT", "ChildRun", "OfficialGraderMissing", "Segment", "check_official_run",
           "grade_official", "judge_official", "official_tests", "require_official", "to_grade"]

TIMEOUT_S = 6
_MAX_RESULT = 16 << 20


def grade_official(problem: Problem, code: str, *, all_tests: bool = False,
                   tests: Sequence[Test] | None = None, sandbox: str = "process",
                   timeout_s: float = TIMEOUT_S) -> Grade:
    """`lcb.grading.grade(..., grader="official")`, for callers that think in modes."""
    from lcb.grading import grade

    return grade(problem, code, all_tests=all_tests, grader="official", sandbox=sandbox,
                 tests=tests, timeout_s=timeout_s)


def official_tests(problem: Problem) -> tuple[Test, ...]:
    """LiveCodeBench's test order: public tests, then private tests, as stored."""
    return problem.public_tests + problem.private_tests


def hard_limit_s(timeout_s: int, n_tests: int) -> float:
    """LiveCodeBench's global limit for one program: (timeout + 1) per test, plus 5 s."""
    return (timeout_s + 1) * max(n_tests, 1) + 5


# --- the judge's side -------------------------------------------------------------------------


def judge_official(host: HostHandle, tests: Sequence[Any], fn_name: str | None, *, timeout_s: int,
                   all_tests: bool) -> dict:
    """Run the official program process on `host`, watch it, return the raw run as data."""
    started = time.monotonic()
    tests_fd = memfd("tests", input_output(tests, fn_name).encode("utf-8", "surrogatepass"))
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    limit = hard_limit_s(timeout_s, len(tests))
    try:
        host.send({"op": "official", "timeout": timeout_s, "all_tests": all_tests,
                   "cpu_s": limit, "wall_s": limit + 2}, [tests_fd, theirs.fileno()])
    finally:
        os.close(tests_fd)
        theirs.close()
    with mine:
        payload, killed = _watch(mine.fileno(), timeout_s=timeout_s, n_tests=len(tests))
    if killed:
        host.kill()
    report = host.exit_report(grace_s=HOST_SLACK_S)
    exited = report is not None and os.WIFEXITED(report["status"])
    segments = _decode(payload) if exited and not killed else None
    return {"segments": segments, "killed": killed, "lost": report is None,
            "wall_s": time.monotonic() - started, "cpu_s": report["cpu"] if report else 0.0}


def _watch(fd: int, *, timeout_s: int, n_tests: int) -> tuple[bytes, bool]:
    """Read the program's channel until EOF; return (payload, killed by the watchdog)."""
    started = time.monotonic()
    hard_deadline = started + hard_limit_s(timeout_s, n_tests)
    quiet_deadline = math.inf  # no alarm armed (see the module docstring)
    chunks: list[bytes] = []
    size, got_result = 0, False
    while True:
        now = time.monotonic()
        deadline = min(hard_deadline, quiet_deadline)
        if now >= deadline or size > _MAX_RESULT:
            return b"".join(chunks), True
        if not select.select([fd], [], [], deadline - now)[0]:
            continue
        data = os.read(fd, 1 << 16)
        if not data:
            return b"".join(chunks), False
        if not got_result:
            beats = data.partition(RESULT)[0]
            armed, cancelled = beats.rfind(HEARTBEAT), beats.rfind(DISARMED)
            if armed != cancelled:  # the later of the two says what holds now
                quiet_deadline = (time.monotonic() + timeout_s + 1 if armed > cancelled
                                  else math.inf)
        got_result = got_result or RESULT in data
        chunks.append(data)
        size += len(data)


def _decode(payload: bytes) -> list[list] | None:
    """The segments as checked plain data, or None for anything malformed."""
    _, marker, body = payload.partition(RESULT)
    if not marker:
        return None
    try:
        raw = wire.loads(body)
        return [[int(start), [int(c) for c in codes], _plain_meta(meta)]
                for start, codes, meta in raw]
    except (wire.ChannelError, ValueError, TypeError):
        return None


def _plain_meta(meta: object) -> dict:
    if not isinstance(meta, dict):
        raise TypeError("metadata is not an object")
    return {str(k): v if isinstance(v, int | float | str) and not isinstance(v, bool) else str(v)
            for k, v in meta.items()}


# --- the pool's side --------------------------------------------------------------------------


def check_official_run(run: Any) -> dict:
    """An official-grader answer: segments as plain data, or None."""
    segments = run["segments"]
    if segments is not None:
        segments = [[int(start), [int(c) for c in codes], dict(meta)]
                    for start, codes, meta in segments]
    return {"segments": segments, "killed": bool(run["killed"]), "lost": bool(run["lost"]),
            "wall_s": number(run["wall_s"]), "cpu_s": number(run["cpu_s"])}


@dataclass(frozen=True)
class Segment:
    """One `run_test` call on `tests[start:]`: its result codes (1 = passed) and metadata."""

    start: int
    codes: tuple[int, ...]
    metadata: dict


@dataclass(frozen=True)
class ChildRun:
    """What the judge saw: the segments (None if the program returned none), whether the host
    was lost (no exit report: grading failed, not the program) and the cost."""

    segments: list[Segment] | None
    killed: bool
    wall_s: float
    cpu_s: float
    lost: bool = False

    @classmethod
    def from_answer(cls, run: dict, n_tests: int) -> ChildRun:
        """From a judge's answer (already plain data). Segments must tile the tests from 0
        (each starts where the one before ended, none runs past the last test); anything else
        is a result LiveCodeBench's code cannot have written, so it counts as none at all."""
        segments = [Segment(start, tuple(codes), meta)
                    for start, codes, meta in run.get("segments") or []]
        end = 0
        for segment in segments:
            if segment.start != end or not segment.codes:
                segments = []
                break
            end += len(segment.codes)
        if end > n_tests or not segments:
            segments = None
        return cls(segments, bool(run.get("killed")), float(run.get("wall_s", 0.0)),
                   float(run.get("cpu_s", 0.0)), lost=bool(run.get("lost")))


def to_grade(run: ChildRun, tests: Sequence[Test], code: str) -> Grade:
    """Map the raw official results onto a `Grade` (grader "official")."""
    from lcb.grading.grades import Grade, TestOutcome

    if run.segments is None and run.lost and not run.killed:
        return Grade.infra_failure("the program's host went away before it reported how the "
                                   "grading process ended", total=len(tests), grader="official",
                                   wall_s=run.wall_s)
    if run.segments is None:  # LiveCodeBench's -1: every test failed, none is singled out
        verdict = Verdict.TIME_LIMIT if run.killed else Verdict.RUNTIME_ERROR
        why = ("killed by the watchdog (no test finished in time)" if run.killed
               else "the grading process exited without a result (exit, crash or signal)")
        outcomes = (TestOutcome(0, verdict, run.wall_s, run.cpu_s),)
        feedback = _feedback(tests[0], 0, verdict, actual="", error=why)
    else:
        outcomes, feedback = _outcomes(run.segments, tests, code)
    passed = sum(o.verdict is Verdict.PASSED for o in outcomes)
    return Grade(outcomes=outcomes, total=len(tests), passed=passed,
                 em=int(passed == len(tests)), wall_s=run.wall_s, cpu_s=run.cpu_s,
                 feedback=feedback, grader="official")


def _outcomes(segments: list[Segment], tests: Sequence[Test], code: str) -> tuple[tuple, Any]:
    from lcb.grading.grades import TestOutcome

    outcomes: list[TestOutcome] = []
    feedback = None
    for segment in segments:
        for offset, result in enumerate(segment.codes):
            index = segment.start + offset
            verdict = _verdict(result, segment.metadata, code)
            outcomes.append(TestOutcome(index, verdict, 0.0, 0.0))
            if verdict is not Verdict.PASSED and feedback is None:
                meta = segment.metadata
                error = " ".join(str(meta.get(k, "")) for k in ("error_message", "error")).strip()
                feedback = _feedback(tests[index], index, verdict,
                                     actual=str(meta.get("output", "")), error=error)
    return tuple(outcomes), feedback


def _verdict(result: int, metadata: dict, code: str) -> Verdict:
    if result == 1:
        return Verdict.PASSED
    if result == -3:
        return Verdict.TIME_LIMIT
    if result == -1:
        return Verdict.RUNTIME_ERROR
    if result == -4:
        if "MemoryError" in str(metadata.get("error", "")):
            return Verdict.MEMORY_LIMIT
        if str(metadata.get("error_message", "")).startswith("Error during testing"):
            return Verdict.COMPILE_ERROR if not _compiles(code) else Verdict.RUNTIME_ERROR
        return Verdict.RUNTIME_ERROR
    return Verdict.WRONG_ANSWER


def _compiles(code: str) -> bool:
    try:
        compile(code, "<program>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _feedback(test: Test, index: int, verdict: Verdict, *, actual: str, error: str) -> Feedback:
    from lcb.grading.grades import Feedback

    return Feedback(test_index=index, verdict=verdict, input=clip_feedback(test.input),
                    expected=clip_feedback(test.output), actual=clip_feedback(actual),
                    error=clip_feedback(error))
