"""`GradingPool`: a few grading slots shared by every task and thread of a run.

Contract:
- At most `os.cpu_count()` slots (a request for more is capped): more programs running than
  cores would turn slow programs into false time limits. All start at once, in the background,
  when the pool is made; a dead one is replaced on the next call. A slot is a judge and a
  zygote (`lcb.sandbox.slot`), the judge started with grading's entry point
  (`lcb.grading.judging.main`); programs never run in this process or in the judge.
- `grade_sync` blocks the calling thread; `await grade(...)` runs the same call on the pool's
  own threads, so any number of asyncio tasks and threads may share one pool.
- Requests and answers are size-capped JSON (`lcb.sandbox.wire`), matched by id; an answer is
  checked against its schema (`default.check_default_run`, `official.check_official_run`)
  before a `Grade` is built from it here.
- Infrastructure failures are not verdicts. A program whose grading failed (its slot died,
  raised, answered late, out of step or malformed; a replacement slot would not start; or its
  grade came back with `Verdict.INFRA`: the program's host was lost) is graded once more on
  a fresh slot (the failed one is discarded). If that fails too, the result is
  `Grade.infra_failure(...)` (verdict `infra`, em 0, the feedback naming both failures),
  never an exception, so a batch goes on; except when both tries lost the program's host at
  the same test: a fresh slot cannot fail there by chance, the program did it (its host runs
  as its uid, is its side of the boundary), so that test is the program's `runtime_error`.
  (A program cannot signal its own host where Landlock scopes signals, nor change its limits
  or scheduling, nor make the OOM killer pick it: `lcb.sandbox.landlock.scope_only`,
  `lcb.sandbox.seccomp`, `lcb.sandbox.host`.)
- Bad arguments raise `ValueError`/`TypeError` at once; a tier that cannot run here raises
  `SandboxUnavailable` (no slot of the pool has ever started: nothing was graded); a closed
  pool raises `GradingError`. A call interrupted mid-way (e.g. by KeyboardInterrupt) discards
  its slot, whose reply is never read by a later call, and re-raises.
- Making a pool makes this process non-dumpable (`privilege.make_undumpable`): a program of the
  same uid cannot read its memory, environment or descriptors.
- `close()` stops the slots and kills anything left in their cgroups.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from lcb.data.problems import Mode, Problem, Test
from lcb.grading import judging
from lcb.grading.default import check_default_run, grade_from_run
from lcb.grading.grades import Feedback, Grade
from lcb.grading.verdicts import Verdict
from lcb.registry import GRADERS
from lcb.sandbox import launch
from lcb.sandbox.contain import Limits
from lcb.sandbox.privilege import make_undumpable
from lcb.sandbox.slot import JudgeRaised, Slot, SlotFailed, SlotGone
from lcb.text import clip_feedback

TIMEOUT_S = 6.0


class GradingError(RuntimeError):
    """Grading itself failed (not the program): a slot died, raised or misbehaved."""


def build_request(problem: Problem, code: str, *, all_tests: bool, grader: str,
                  tests: Sequence[Test] | None, timeout_s: float
                  ) -> tuple[dict, float, Callable[[Any], Grade]]:
    """(the judge's request, its time budget, answer -> Grade) for one call; checks arguments.
    The request's `tests` are the tests a grade counts (`total`)."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}: choose one of {', '.join(GRADERS)}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if grader == "official":
        return _official_request(problem, code, all_tests=all_tests, tests=tests,
                                 timeout_s=timeout_s)
    if problem.mode is Mode.FUNCTIONAL and not problem.fn_name:
        raise ValueError(f"problem {problem.id!r} is functional but has no fn_name")
    chosen = tuple(problem.hidden_tests if tests is None else tests)
    limits = Limits.for_functional() if problem.mode is Mode.FUNCTIONAL else Limits.for_stdin()
    request = {"kind": "default", "source": code, "mode": str(problem.mode),
               "fn_name": problem.fn_name, "tests": [[t.input, t.output] for t in chosen],
               "all_tests": all_tests, "timeout_s": float(timeout_s),
               "limits": limits._asdict()}
    budget = (timeout_s + 7.0) * max(1, len(chosen)) + 60.0

    def finish(run: Any) -> Grade:
        checked = check_default_run(run, len(chosen))
        return grade_from_run(checked, tests=chosen, all_tests=all_tests)

    return request, budget, finish


def _official_request(problem: Problem, code: str, *, all_tests: bool,
                      tests: Sequence[Test] | None, timeout_s: float
                      ) -> tuple[dict, float, Callable[[Any], Grade]]:
    from lcb.grading.official import (
        ChildRun,
        check_official_run,
        official_tests,
        require_official,
        to_grade,
    )

    require_official()  # missing: say how to install it here, before any slot is asked
    chosen = tuple(official_tests(problem) if tests is None else tests)
    if not chosen:
        raise ValueError(f"problem {problem.id!r}: no tests to grade against")
    request = {"kind": "official", "source": code, "mode": "official",
               "fn_name": problem.fn_name, "tests": [[t.input, t.output] for t in chosen],
               "all_tests": all_tests, "timeout_s": float(timeout_s),
               "limits": Limits.for_functional()._asdict()}
    budget = (timeout_s + 2.0) * len(chosen) + 60.0

    def finish(run: Any) -> Grade:
        return to_grade(ChildRun.from_answer(check_official_run(run), len(chosen)), chosen, code)

    return request, budget, finish


def _why(failure: Grade | str) -> str:
    """What failed, in words: the reason given, or the infra outcome's feedback."""
    if isinstance(failure, str):
        return failure
    feedback = failure.feedback
    if feedback is not None and feedback.verdict is Verdict.INFRA:
        return feedback.error
    return "the program's host was lost mid-run"


def _lost_at(failure: Grade | str) -> int | None:
    """The test at which a try lost the program's host (an `INFRA` outcome: the judge, its
    zygote and the slot fail as text), or None."""
    if isinstance(failure, str):
        return None
    return next((o.index for o in failure.outcomes if o.verdict is Verdict.INFRA), None)


def _lost_twice(grade: Grade, tests: list, *, why: tuple[str, str]) -> Grade:
    """`grade` (the second try's) with its lost test made the program's `runtime_error`."""
    index = _lost_at(grade)
    outcomes = tuple(replace(o, verdict=Verdict.RUNTIME_ERROR) if o.index == index else o
                     for o in grade.outcomes)
    feedback = grade.feedback
    if feedback is None or feedback.verdict is Verdict.INFRA:
        test_input, expected = tests[index] if index < len(tests) else ("", "")
        feedback = Feedback(
            test_index=index, verdict=Verdict.RUNTIME_ERROR, input=clip_feedback(test_input),
            expected=clip_feedback(expected), actual="",
            error=clip_feedback(f"the program's host was lost at test {index} on two slots "
                                f"(so the program did it): first: {why[0]}; then: {why[1]}"))
    return Grade.from_outcomes(outcomes, total=grade.total, feedback=feedback,
                               grader=grade.grader, wall_s=grade.wall_s)


class GradingPool:
    """Pre-started grading slots (<= cores). Use as a context manager or call `close()`."""

    def __init__(self, workers: int | None = None, *, sandbox: str = "process"):
        launch.check_sandbox(sandbox)
        make_undumpable()
        cores = os.cpu_count() or 1
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        self.size = min(workers or cores, cores)
        self.sandbox = sandbox
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="lcb-grade")
        # Slots are started from these long-lived threads: the kernel's "parent died" signal
        # (bubblewrap's --die-with-parent) fires when the *thread* that forked exits.
        self._launcher = ThreadPoolExecutor(self.size, thread_name_prefix="lcb-grade-launch")
        self._live: set[Slot] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._proven = False
        self.isolation: dict = {}
        # A queue entry holds a slot, a slot still starting (Future), or None (start on demand).
        self._slots: queue.SimpleQueue[Slot | Future | None] = queue.SimpleQueue()
        for _ in range(self.size):  # start them all now, in parallel, while the caller works
            self._slots.put(self._launcher.submit(self._start))

    def grade_sync(self, problem: Problem, code: str, *, all_tests: bool = False,
                   grader: str = "default", tests: Sequence[Test] | None = None,
                   timeout_s: float = TIMEOUT_S) -> Grade:
        """Grade `code` on `problem` (see `lcb.grading.grade`), blocking this thread; a
        program whose grading fails twice gets `Grade.infra_failure` (module docstring)."""
        request, budget, finish = build_request(
            problem, code, all_tests=all_tests, grader=grader, tests=tests, timeout_s=timeout_s)
        failures: list[Grade | str] = []
        for _ in range(2):  # the first try, then one more on a fresh slot
            outcome = self._attempt(request, budget, finish)
            if isinstance(outcome, Grade) and not outcome.infra:
                return outcome
            failures.append(outcome)
        first, then = failures
        if _lost_at(first) is not None and _lost_at(first) == _lost_at(then):
            return _lost_twice(then, request["tests"], why=(_why(first), _why(then)))
        return Grade.infra_failure(
            f"grading {problem.id!r} failed twice, the second time on a fresh slot: "
            f"first: {_why(first)}; then: {_why(then)}",
            total=len(request["tests"]), grader=grader)

    def _attempt(self, request: dict, budget: float, finish: Callable[[Any], Grade]
                 ) -> Grade | str:
        """One try on one slot: the grade, or why grading failed. A slot that failed, or whose
        grade is `infra` (its host or zygote was lost), is discarded, not reused."""
        try:
            slot = self._checkout()
        except launch.SandboxUnavailable as exc:
            if not self._proven:  # the tier has never run here: a configuration error
                raise
            return f"a fresh grading slot would not start: {exc}"
        try:
            grade = finish(slot.call(request, budget_s=budget))
        except JudgeRaised as exc:
            failure: Grade | str = f"the grading worker raised: {exc}"
        except (SlotGone, ValueError, TypeError, KeyError) as exc:
            failure = f"the grading worker died or misbehaved: {type(exc).__name__}: {exc}"
        except BaseException:
            # Interrupted mid-call (KeyboardInterrupt, a signal handler's exception, …): the reply
            # is still unread, so the next call would read it. This slot cannot be reused.
            self._retire(slot)
            raise
        else:
            if not grade.infra:
                self._slots.put(slot)
                return grade
            failure = grade
        self._retire(slot)
        return failure

    def _retire(self, slot: Slot) -> None:
        """Kill `slot` and leave its place to a fresh one (started on the next checkout)."""
        try:
            self._discard(slot, kill=True)
        finally:
            self._slots.put(None)

    async def grade(self, problem: Problem, code: str, *, all_tests: bool = False,
                    grader: str = "default", tests: Sequence[Test] | None = None,
                    timeout_s: float = TIMEOUT_S) -> Grade:
        call = functools.partial(self.grade_sync, problem, code, all_tests=all_tests,
                                 grader=grader, tests=tests, timeout_s=timeout_s)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _start(self) -> Slot:
        slot = Slot.start(self.sandbox, judge=judging.main)
        with self._lock:
            self._live.add(slot)
            self._proven = True  # the tier runs here: a slot failing later is infrastructure
            self.isolation = self.isolation or slot.isolation
        return slot

    def _checkout(self) -> Slot:
        if self._closed:
            raise GradingError("the grading pool is closed")
        entry = self._slots.get()
        try:
            if isinstance(entry, Future):
                entry = entry.result()
            if entry is None or not entry.alive():
                if entry is not None:
                    self._discard(entry)
                entry = self._launcher.submit(self._start).result()
        except SlotFailed as exc:
            self._slots.put(None)
            raise launch.SandboxUnavailable(str(exc)) from None
        except BaseException:
            self._slots.put(None)
            raise
        return entry

    def _discard(self, slot: Slot, *, kill: bool = False) -> None:
        with self._lock:
            self._live.discard(slot)
        slot.stop(kill=kill)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        while True:  # slots still starting finish first (their futures run on the launcher)
            try:
                entry = self._slots.get_nowait()
            except queue.Empty:
                break
            if isinstance(entry, Future):
                entry.exception()
        with self._lock:
            slots, self._live = list(self._live), set()
        for slot in slots:  # before the launcher threads end: a slot dies with its thread
            slot.stop()
        self._launcher.shutdown(wait=True)

    def worker_pids(self) -> list[int]:
        """Process ids of the running judges (for diagnostics and tests)."""
        with self._lock:
            return sorted(s.pid for s in self._live if s.alive())

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> GradingPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)
