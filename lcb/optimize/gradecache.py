"""Grade each distinct program once per runner: a cache in front of the `GradingPool`.

Contract:
- `GradeCache(pool, settings=...).grade(problem, code, tests=...)` returns the pool's `Grade` of
  `code` on `tests` (None: every hidden test), fail-fast unless `settings.all_tests`.
- The key is (problem id, sha256 of the tests graded, sha256 of the program, the grader
  settings: grader, per-test timeout, fail-fast or all tests, sandbox tier). An identical
  request is answered from the cache without a pool call, so a program the team writes again
  (another seed, another bundle with the same answer) is graded once.
- Async-safe: concurrent identical requests share one pool call (the first starts it, the
  others await it). A call that raises, or whose grade is `infra` (grading failed twice, see
  `lcb.grading.pool`), is not cached: every waiter gets that outcome and the next request
  grades again. In memory, per event loop; `hits` and `misses` count requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lcb.data.problems import Problem, Test
from lcb.grading import Grade
from lcb.grading.pool import TIMEOUT_S


class Grader(Protocol):
    """What the cache needs of a pool (`lcb.grading.GradingPool.grade`)."""

    sandbox: str

    async def grade(self, problem: Problem, code: str, *, all_tests: bool = False,
                    grader: str = "default", tests: Sequence[Test] | None = None,
                    timeout_s: float = TIMEOUT_S) -> Grade: ...


@dataclass(frozen=True)
class GradeSettings:
    """How a runner grades: which grader, the per-test timeout, fail-fast or every test."""

    grader: str = "default"
    timeout_s: float = TIMEOUT_S
    all_tests: bool = False


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # any program


def tests_digest(tests: Sequence[Test]) -> str:
    """sha256 of the tests' inputs and outputs, in order."""
    return sha256(json.dumps([[t.input, t.output] for t in tests]))


class GradeCache:
    """See the module docstring."""

    def __init__(self, pool: Grader, settings: GradeSettings | None = None) -> None:
        self.pool = pool
        self.settings = settings or GradeSettings()
        self._entries: dict[tuple[Any, ...], asyncio.Future[Grade]] = {}
        self.hits = 0
        self.misses = 0

    def key(self, problem: Problem, code: str, tests: Sequence[Test] | None) -> tuple[Any, ...]:
        s = self.settings
        graded = problem.hidden_tests if tests is None else tests
        return (problem.id, tests is None, tests_digest(graded), sha256(code), s.grader,
                float(s.timeout_s), s.all_tests, getattr(self.pool, "sandbox", None))

    async def grade(self, problem: Problem, code: str, *,
                    tests: Sequence[Test] | None = None) -> Grade:
        key = self.key(problem, code, tests)
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            s = self.settings
            entry = asyncio.ensure_future(self.pool.grade(
                problem, code, all_tests=s.all_tests, grader=s.grader,
                tests=None if tests is None else tuple(tests), timeout_s=s.timeout_s))
            self._entries[key] = entry
            entry.add_done_callback(lambda done: self._forget_failure(key, done))
        else:
            self.hits += 1
        # shield: a waiter that is cancelled must not cancel the grading others wait for
        return await asyncio.shield(entry)

    def _forget_failure(self, key: tuple[Any, ...], done: asyncio.Future[Grade]) -> None:
        if done.cancelled() or done.exception() is not None or done.result().infra:
            if self._entries.get(key) is done:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
