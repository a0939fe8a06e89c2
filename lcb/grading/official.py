"""The `official` grading mode: LiveCodeBench's own `run_test`, inside our watchdog.

Contract:
- `grade_official(problem, code)` grades with `livecodebench.evaluation.testing_util.run_test`
  from the PyPI package `nvidia-livecodebench` (installed with `--no-deps`; see `INSTALL_HINT`).
  Tests: the public tests, then the private ones, in stored order, as LiveCodeBench grades
  (`tests=` overrides them). It raises `OfficialGraderMissing` when the package is absent.
- The official code runs exactly as LiveCodeBench runs it: in one disposable forked child per
  program, which calls `run_test` (it applies `reliability_guard`, runs stdin programs as a
  wrapped function with patched stdin, stops at the first failure). Its result codes map onto
  `Verdict`: True -> passed, False/-2 -> wrong answer, -3 -> time limit, -4 -> runtime error
  (a `MemoryError` -> memory limit; a program that does not compile -> compile error), and a child
  that returns nothing (LiveCodeBench's -1 for every test) -> a whole-program failure at test 0.
- `all_tests=True` restarts `run_test` after each failure on the remaining tests (a fresh
  `Solution()` per restart), so every test gets a verdict.

What we add around it (the official call has none of these): the child gets its own session,
a fresh temporary working directory, stdout/stderr sent to /dev/null, no core dumps, a file
size cap and an address-space cap (`LCB_FUNCTIONAL_MEMORY_BYTES`, 4 GiB by default, 0 disables).
The watchdog kills the child's process group when no test has started for `timeout_s + 1`
seconds (a program that ignores SIGALRM), or at LiveCodeBench's global limit
`(timeout_s + 1) * n_tests + 5`. This is NOT a security boundary: the program runs inside the
grader's own process image (LiveCodeBench's design), can forge its own results, and is not
isolated from the network or the file system. Use the default grader for untrusted programs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from lcb.data.problems import Problem, Test
from lcb.grading.contain import Limits, PidsJail, apply_limits, enter_child
from lcb.grading.verdicts import Feedback, Grade, TestOutcome, Verdict, clip

INSTALL_HINT = (
    "the official grader needs LiveCodeBench's grading code: "
    "pip install --no-deps nvidia-livecodebench==26.3 && pip install numpy"
)
TIMEOUT_S = 6
_HEARTBEAT, _RESULT = b".", b"!"
_EXIT_CRASH = 3


class OfficialGraderMissing(RuntimeError):
    """LiveCodeBench's grading package (or numpy, which it imports) is not installed."""


def require_official() -> ModuleType:
    """Import LiveCodeBench's `testing_util`, or raise `OfficialGraderMissing` saying how to."""
    try:
        from livecodebench.evaluation import testing_util
    except ImportError as exc:
        raise OfficialGraderMissing(f"{INSTALL_HINT} ({exc})") from None
    return testing_util


def grade_official(problem: Problem, code: str, *, all_tests: bool = False,
                   tests: Sequence[Test] | None = None, sandbox: str = "process",
                   timeout_s: float = TIMEOUT_S) -> Grade:
    """Grade `code` with LiveCodeBench's `run_test` (tests default: public then private).

    Runs one forked child per program from the calling process: call it from a slim,
    single-threaded process (a grading-pool worker, a CLI), not from one with threads running.

    Example (a stdin problem whose answer is the sum of the numbers after the count):
        grade_official(problem, "print(sum(map(int, open(0).read().split()[1:])))")
        # -> em 0: LiveCodeBench mocks `open`, see docs/grading.md ("open_zero")
    """
    if sandbox != "process":
        raise ValueError(f"--grader official runs LiveCodeBench's in-process grader; sandbox "
                         f"{sandbox!r} is not available with it (use --sandbox process)")
    chosen = tuple(official_tests(problem) if tests is None else tests)
    if not chosen:
        raise ValueError(f"problem {problem.id!r}: no tests to grade against")
    whole_seconds = max(1, round(timeout_s))  # run_test arms signal.alarm, which takes ints
    run = run_official_child(code, chosen, problem.fn_name, timeout_s=whole_seconds,
                             all_tests=all_tests)
    return to_grade(run, chosen, code)


def to_grade(run: ChildRun, tests: Sequence[Test], code: str) -> Grade:
    """Map the child's raw official results onto a `Grade` (grader "official")."""
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


def _outcomes(segments: list[Segment], tests: Sequence[Test],
              code: str) -> tuple[tuple[TestOutcome, ...], Feedback | None]:
    outcomes: list[TestOutcome] = []
    feedback: Feedback | None = None
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
    return Feedback(test_index=index, verdict=verdict, input=clip(test.input),
                    expected=clip(test.output), actual=clip(actual), error=clip(error))


def official_tests(problem: Problem) -> tuple[Test, ...]:
    """LiveCodeBench's test order: public tests, then private tests, as stored."""
    return problem.public_tests + problem.private_tests


def official_sample(tests: Sequence[Test], fn_name: str | None) -> dict:
    """The `sample` dict `run_test` takes (as LiveCodeBench's `get_evaluation_sample` builds)."""
    return {"input_output": json.dumps({"inputs": [t.input for t in tests],
                                        "outputs": [t.output for t in tests],
                                        "fn_name": fn_name})}


@dataclass(frozen=True)
class Segment:
    """One `run_test` call on `tests[start:]`: its result codes (1 = passed) and metadata."""

    start: int
    codes: tuple[int, ...]
    metadata: dict


def _code(value: object) -> int:
    """Normalize one official result: True -> 1, False -> -2, error codes kept."""
    if hasattr(value, "item"):  # numpy scalars and arrays, as LiveCodeBench unwraps them
        value = value.item(0)
    if value is True:
        return 1
    if isinstance(value, int) and not isinstance(value, bool) and value in (-1, -2, -3, -4):
        return value
    try:
        return 1 if bool(value > 0) else -2
    except Exception:
        return -2


def run_segments(code: str, tests: Sequence[Test], fn_name: str | None, *,
                 timeout_s: int = TIMEOUT_S, all_tests: bool = False) -> list[Segment]:
    """Call `run_test` in THIS process (a disposable child: it disables os functions).

    With `all_tests`, run again on the tests after each failure until all have a verdict.
    """
    testing_util = require_official()
    saved = _snapshot_guarded()
    segments: list[Segment] = []
    start = 0
    while start < len(tests):
        _restore(saved)  # run_test's guard cannot be applied twice (it needs os.putenv)
        sample = official_sample(tests[start:], fn_name)
        results, metadata = testing_util.run_test(sample, test=code, timeout=timeout_s)
        codes = tuple(_code(value) for value in results)
        segments.append(Segment(start, codes, _jsonable(metadata)))
        start += len(codes)
        if not all_tests or not codes or all(c == 1 for c in codes):
            break
    return segments


def _snapshot_guarded() -> list[tuple[dict, dict]]:
    import builtins
    import subprocess

    return [(vars(module), dict(vars(module))) for module in (os, shutil, subprocess, builtins)]


def _restore(saved: list[tuple[dict, dict]]) -> None:
    for namespace, copy in saved:
        namespace.update(copy)


def _jsonable(metadata: object) -> dict:
    if not isinstance(metadata, dict):
        return {}
    return {str(k): v if isinstance(v, int | float | str) else str(v)
            for k, v in metadata.items()}


@dataclass(frozen=True)
class ChildRun:
    """What the watchdog saw: the child's segments (None if it returned none) and its cost."""

    segments: list[Segment] | None
    killed: bool
    wall_s: float
    cpu_s: float


def run_official_child(code: str, tests: Sequence[Test], fn_name: str | None, *,
                       timeout_s: int = TIMEOUT_S, all_tests: bool = False) -> ChildRun:
    """Fork one contained child that runs `run_segments`, watch it, kill and reap its group."""
    require_official()
    workdir = tempfile.mkdtemp(prefix="lcb-official-")
    jail = PidsJail.create(max_tasks=Limits().max_tasks, prefix="lcb-official")
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        os.close(read_fd)
        _child(write_fd, jail, workdir, code, tests, fn_name, timeout_s, all_tests)
    os.close(write_fd)
    try:
        payload, killed = _watch(read_fd, timeout_s=timeout_s, n_tests=len(tests))
    finally:
        os.close(read_fd)
        _kill_group(pid)
        _, status, usage = os.wait4(pid, 0)
        _empty_jail(jail)
        shutil.rmtree(workdir, ignore_errors=True)
    wall = time.monotonic() - started
    segments = _decode(payload) if os.WIFEXITED(status) and not killed else None
    return ChildRun(segments, killed, wall, usage.ru_utime + usage.ru_stime)


def _child(write_fd: int, jail: PidsJail | None, workdir: str, code: str,
           tests: Sequence[Test], fn_name: str | None, timeout_s: int, all_tests: bool) -> None:
    """Body of the forked child: contain, run, send the result, exit without cleanup."""
    status = _EXIT_CRASH
    try:
        if jail is not None:
            jail.add(os.getpid())
        devnull = os.open(os.devnull, os.O_RDWR)
        enter_child(workdir=workdir, fds=(devnull, devnull, devnull), keep=(write_fd,))
        apply_limits(Limits.for_functional(), cpu_s=_hard_limit_s(timeout_s, len(tests)))
        _install_heartbeat(write_fd)
        segments = run_segments(code, tests, fn_name, timeout_s=timeout_s, all_tests=all_tests)
        data = json.dumps([[s.start, list(s.codes), s.metadata] for s in segments])
        _write_all(write_fd, _RESULT + data.encode())
        status = 0
    except BaseException:  # a SystemExit or crash escaping run_test: LiveCodeBench's -1
        status = _EXIT_CRASH
    finally:
        os._exit(status)


def _hard_limit_s(timeout_s: int, n_tests: int) -> float:
    """LiveCodeBench's global limit for one program: (timeout + 1) per test, plus 5 s."""
    return (timeout_s + 1) * max(n_tests, 1) + 5


def _install_heartbeat(write_fd: int) -> None:
    """Make every `signal.alarm(n > 0)` (run_test arms one per test) also tell the watchdog."""
    real_alarm = signal.alarm

    def alarm(seconds: int) -> int:
        if seconds > 0:
            os.write(write_fd, _HEARTBEAT)
        return real_alarm(seconds)

    signal.alarm = alarm


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _watch(read_fd: int, *, timeout_s: int, n_tests: int) -> tuple[bytes, bool]:
    """Read the child's pipe until EOF; return (payload, killed by the watchdog)."""
    import select

    started = time.monotonic()
    hard_deadline = started + _hard_limit_s(timeout_s, n_tests)
    quiet_deadline = started + timeout_s + 1
    chunks: list[bytes] = []
    got_result = False
    while True:
        now = time.monotonic()
        deadline = min(hard_deadline, quiet_deadline)
        if now >= deadline:
            return b"".join(chunks), True
        ready, _, _ = select.select([read_fd], [], [], deadline - now)
        if not ready:
            continue
        data = os.read(read_fd, 1 << 16)
        if not data:
            return b"".join(chunks), False
        if not got_result and _HEARTBEAT in data.partition(_RESULT)[0]:
            quiet_deadline = time.monotonic() + timeout_s + 1
        got_result = got_result or _RESULT in data
        chunks.append(data)


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _empty_jail(jail: PidsJail | None) -> None:
    """Kill what escaped the session (setsid grandchildren). Call after reaping our child:
    `kill_all` also reaps any other exited child of this process."""
    if jail is not None:
        jail.kill_all()
        jail.remove()


def _decode(payload: bytes) -> list[Segment] | None:
    head, marker, body = payload.partition(_RESULT)
    if not marker:
        return None
    try:
        raw = json.loads(body)
        return [Segment(int(start), tuple(int(c) for c in codes), dict(meta))
                for start, codes, meta in raw]
    except (ValueError, TypeError):
        return None
