"""Helpers for the team-runner tests: a live `TeamRunner` on the scripted server, a scripted model
that refuses some problems with HTTP 400, and stand-in grading pools that count their calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lcb.agents.prompts import seed_bundle
from lcb.data.problems import Problem
from lcb.data.samples import reference_solution
from lcb.grading import Grade, GradingError, GradingPool, TestOutcome, Verdict
from lcb.optimize.teamrun import TeamCell, TeamRunner
from lcb.teams.common import TeamRuntime
from tests.helpers_agents import fenced, model_config
from tests.helpers_optimize import marker, sample_problems
from tests.scripted_server import Reply, message_text

CONTEXT_400 = ("This model's maximum context length is 4096 tokens. However, your request has "
               "5000 input tokens. Please reduce the length of the input messages.")
TOOLS_400 = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


@contextlib.asynccontextmanager
async def team_runner(base_url: str, *, topology: str = "single", pool: Any = None,
                      concurrency: int = 2, opt_tests: int | None = None,
                      **model_overrides: Any) -> AsyncIterator[TeamRunner]:
    """A `TeamRunner` on the scripted server at `base_url` (a real 2-slot pool unless given)."""
    runtime = TeamRuntime(model_config(base_url, **model_overrides))
    try:
        async with contextlib.AsyncExitStack() as stack:
            if pool is None:
                pool = stack.enter_context(GradingPool(2))
            yield TeamRunner(TeamCell(topology), runtime, pool, concurrency=concurrency,
                             run_timeout_s=60, opt_tests=opt_tests)
    finally:
        await runtime.aclose()


def bundle_of(topology: str) -> dict[str, str]:
    return seed_bundle(topology, TeamCell(topology).roles)


@dataclass
class RefusingModel:
    """Answers every problem with its reference solution, except `refused` ids (or every
    problem when `refuse_all`), which get HTTP 400 with `message`. `slow_s` delays answers."""

    refused: frozenset[str] = frozenset()
    message: str = CONTEXT_400
    refuse_all: bool = False
    slow_s: float = 0.0
    problems: list[Problem] = field(default_factory=sample_problems)

    def __call__(self, request: dict[str, Any]) -> Reply | str:
        text = message_text(request)
        problem = next((p for p in self.problems if marker(p) in text), None)
        if problem is None:
            return "ok"
        if self.refuse_all or problem.id in self.refused:
            return Reply.error(400, message=self.message)
        return Reply(fenced(reference_solution(problem.id)), latency_s=self.slow_s)


def requests_about(server: Any, problem: Problem) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if marker(problem) in message_text(r)]


def passing_grade(total: int = 3) -> Grade:
    outcomes = tuple(TestOutcome(i, Verdict.PASSED, 0.01, 0.01) for i in range(total))
    return Grade.from_outcomes(outcomes, total=total, feedback=None, grader="default",
                               wall_s=0.03)


@dataclass
class CountingPool:
    """A stand-in pool: records each call's (problem id, code, tests, timeout), waits `delay_s`,
    raises `GradingError` on the first `fail_first` calls, answers an `infra` grade (grading
    failed twice, as a real pool does) on the next `infra_first`, else a passing grade on the
    tests it was given."""

    delay_s: float = 0.0
    fail_first: int = 0
    infra_first: int = 0
    sandbox: str = "process"
    calls: list[tuple[str, str, int | None, float]] = field(default_factory=list)

    async def grade(self, problem: Problem, code: str, *, all_tests: bool = False,
                    grader: str = "default", tests: Any = None, timeout_s: float = 6.0) -> Grade:
        self.calls.append((problem.id, code, None if tests is None else len(tests), timeout_s))
        await asyncio.sleep(self.delay_s)
        if len(self.calls) <= self.fail_first:
            raise GradingError("the grading worker raised: scripted failure")
        total = len(problem.hidden_tests) if tests is None else len(tests)
        if len(self.calls) <= self.fail_first + self.infra_first:
            return Grade.infra_failure("scripted: the program's host went away", total=total,
                                       grader=grader)
        return passing_grade(total)


def by_id() -> Mapping[str, Problem]:
    return {p.id: p for p in sample_problems()}
