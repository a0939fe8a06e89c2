"""Grading: `grade(problem, program) -> Grade`, as LiveCodeBench grades, contained and fast.

Default grader ("default"): the hidden (private) tests in stored order; stdin programs run as real
processes (exit code 0 and the official stdout comparison), functional programs as LiveCodeBench
calls them (`Solution()` once per program, or the top-level function; tuple -> list; `==`),
under `reliability_guard` and `LCB_FUNCTIONAL_MEMORY_BYTES`. Both modes prepend LiveCodeBench's
import prelude. 6 s per test; stops at the first failing test unless `all_tests=True`.
The "official" grader runs LiveCodeBench's own code (public then private tests); see
`lcb.grading.official`. This package says what a verdict means; how a program runs, contained,
is `lcb.sandbox` (its docstring is the threat model). `SandboxUnavailable` and `check_sandbox`
(`lcb.sandbox.launch`) are part of this API: `grade` raises the one, callers check with the
other.

Example (any `Problem`; here one of the bundled samples):
    >>> from lcb.data.datasets import load_problems
    >>> from lcb.grading import grade
    >>> problem = load_problems("sample").problems[0]
    >>> g = grade(problem, "print(input())")
    >>> g.em, g.passed, g.total, g.to_record()["verdicts"]   # e.g. (0, 0, 6, ['wrong_answer'])
"""

from __future__ import annotations

import _thread
import atexit
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lcb.grading.verdicts import Verdict

if TYPE_CHECKING:
    from lcb.data.problems import Problem, Test
    from lcb.grading.grades import Feedback, Grade, TestOutcome
    from lcb.grading.pool import GradingError, GradingPool
    from lcb.sandbox.launch import SandboxUnavailable, check_sandbox

__all__ = [
    "Feedback", "Grade", "GradingError", "GradingPool", "SandboxUnavailable", "TestOutcome",
    "Verdict", "check_sandbox", "default_pool", "grade",
]


_LAZY = {"GradingPool": "lcb.grading.pool", "GradingError": "lcb.grading.pool",
         "TIMEOUT_S": "lcb.grading.pool", "SandboxUnavailable": "lcb.sandbox.launch",
         "check_sandbox": "lcb.sandbox.launch", "Feedback": "lcb.grading.grades",
         "Grade": "lcb.grading.grades", "TestOutcome": "lcb.grading.grades"}


def __getattr__(name: str):
    # The pool and launcher (asyncio, subprocess, threads) and the grade dataclasses load on
    # first use: a judge imports this package (its entry point is `lcb.grading.judging`) and
    # needs none of them.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lcb.grading' has no attribute {name!r}")


_pools: dict[tuple[int, str], GradingPool] = {}
_pools_lock = _thread.allocate_lock()  # not `threading`: judges do without it


def default_pool(sandbox: str = "process") -> GradingPool:
    """The process-wide pool for `sandbox`, made on first use (a fresh one after fork)."""
    key = (os.getpid(), sandbox)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            from lcb.grading.pool import GradingPool

            pool = _pools[key] = GradingPool(sandbox=sandbox)
        return pool


@atexit.register
def _close_pools() -> None:
    with _pools_lock:
        mine = [p for (pid, _), p in _pools.items() if pid == os.getpid()]
        _pools.clear()
    for pool in mine:
        pool.close()


def grade(problem: Problem, code: str, *, all_tests: bool = False, grader: str = "default",
          sandbox: str = "process", tests: Sequence[Test] | None = None,
          timeout_s: float = 6.0) -> Grade:
    """Grade `code` on `problem`; per-program failures are verdicts, never exceptions.

    `tests=None` grades the default set: the hidden tests for "default", public then private
    for "official". Raises ValueError/TypeError for bad arguments, `SandboxUnavailable` when the
    sandbox tier is missing or cannot run here. When the grading machinery fails (a lost host,
    judge or zygote), the program is graded again on a fresh slot; failing again, its grade has
    the verdict `infra` (`Grade.infra`, em 0): grading failed, not the program.
    """
    return default_pool(sandbox).grade_sync(problem, code, all_tests=all_tests, grader=grader,
                                            tests=tests, timeout_s=timeout_s)
