"""Helpers for the optimizer-protocol tests: the sample set as tiny splits, a scripted team
model that answers by problem, a job config for the scripted server, and a probe method that
spends rollouts (identity spends none)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcb.agents.prompts import seed_bundle
from lcb.data.datasets import load_problems
from lcb.data.problems import Problem
from lcb.data.samples import reference_solution
from lcb.grading import GradingPool
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.calls import CallJournal, ModelCalls, reflection_config
from lcb.optimize.context import JobContext
from lcb.optimize.job import JobConfig
from lcb.optimize.method import OptimizeContext, Rollout
from lcb.optimize.splits import OptimizerData, Splits, load_optimizer_rows, splits_from_loaded
from lcb.optimize.teamrun import TeamCell, TeamRunner
from lcb.teams.common import TeamRuntime
from tests.helpers_agents import fenced, model_config
from tests.scripted_server import Reply, message_text

WRONG_PROGRAM = "print('not the answer')"
PROBE_EDIT = "Check every limit twice."  # what the probe method appends to each role prompt


def sample_problems() -> list[Problem]:
    return load_problems("sample").problems


def sample_splits() -> Splits:
    """The documented rule on the sample set: 8 train, 3 validation, 3 test rows."""
    return splits_from_loaded(load_problems("sample"))


def marker(problem: Problem) -> str:
    """Text of the problem's statement that every team request about it carries."""
    return problem.statement[:60]


@dataclass
class TeamModel:
    """A scripted task model: finds the problem in a request and answers per its behaviour.

    `wrong` ids get a wrong program, unless the request holds the text `fixed_by` (so a prompt
    holding it "solves" them); `down` ids get HTTP 500 on every request. Every other problem
    gets its reference solution. `seen` logs (problem id, selection sealed?) per
    request when `job_dir` is set, so tests can check when test rows were first sent.
    """

    problems: list[Problem]
    wrong: frozenset[str] = frozenset()
    down: frozenset[str] = frozenset()
    fixed_by: str | None = None
    job_dir: Path | None = None
    seen: list[tuple[str, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def problem_of(self, request: Mapping[str, Any]) -> Problem | None:
        text = message_text(request)
        return next((p for p in self.problems if marker(p) in text), None)

    def __call__(self, request: dict[str, Any]) -> Reply | str:
        problem = self.problem_of(request)
        if problem is None:  # the endpoint check's probe, or a reflection call
            return "ok"
        sealed = self.job_dir is not None and (self.job_dir / "selection.json").exists()
        with self.lock:
            self.seen.append((problem.id, sealed))
        if problem.id in self.down:
            return Reply.error(500)
        fixed = self.fixed_by is not None and self.fixed_by in message_text(request)
        wrong = problem.id in self.wrong and not fixed
        return fenced(WRONG_PROGRAM if wrong else reference_solution(problem.id))


def job_config(base_url: str, out: Path, **overrides: Any) -> JobConfig:
    """A job on the sample set against the scripted server: tiny budget, fast retries."""
    values: dict[str, Any] = dict(method="identity", topology="single",
                                  model=model_config(base_url), out=out, data="sample",
                                  budget=4, concurrency=2, grade_workers=2, run_timeout_s=60.0)
    values.update(overrides)
    return JobConfig(**values)


@dataclass
class Probe:
    """A test method: rollouts of the seed bundle over train rows until the budget says no,
    one iteration per pass; records each pass as a candidate. Keeps what it saw."""

    key: str = "probe"
    passes: int = 3
    seen_ids: list[str] = field(default_factory=list)
    results: list[Rollout | None] = field(default_factory=list)

    async def optimize(self, ctx: OptimizeContext) -> dict[str, str]:
        bundle = dict(ctx.seed_bundle)
        for iteration in range(1, self.passes + 1):
            if ctx.ledger.available <= 0:
                break
            batch = list(ctx.data.train) + list(ctx.data.validation)
            self.seen_ids.extend(p.id for p in batch)
            results = await ctx.rollouts(bundle, batch, iteration=iteration)
            self.results.extend(results)
            done = [r.score for r in results if r is not None]
            ctx.record_candidate(bundle, scores={"train": sum(done) / max(len(done), 1)},
                                 note=f"pass {iteration}")
        return {role: text + "\n" + PROBE_EDIT for role, text in bundle.items()}


def ids_of(problems: Iterable[Problem]) -> list[str]:
    return [p.id for p in problems]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def job_context(base_url: str, job_dir: Path, *, topology: str = "single",
                      budget: int = 4, concurrency: int = 2, optimizer_seed: int = 0,
                      team_size: int | None = None,
                      **model_overrides: Any) -> AsyncIterator[JobContext]:
    """A live `JobContext` on the sample splits against the scripted server at `base_url`."""
    cell = TeamCell(topology, team_size)
    runtime = TeamRuntime(model_config(base_url, **model_overrides))
    ledger = BudgetLedger(budget)
    job_dir.mkdir(parents=True, exist_ok=True)
    try:
        with GradingPool(2) as pool:
            runner = TeamRunner(cell, runtime, pool, concurrency=concurrency, run_timeout_s=60)
            calls = ModelCalls(reflection=reflection_config(runtime.config, environ={}),
                               task=runtime.config, ledger=ledger,
                               optimizer_seed=optimizer_seed, journal=CallJournal(job_dir))
            rows = load_optimizer_rows(sample_splits(), data="sample")
            yield JobContext(cell=cell, seed_bundle=seed_bundle(topology, cell.roles),
                             data=OptimizerData(sample_splits(), rows), labelled=rows,
                             ledger=ledger, optimizer_seed=optimizer_seed, runner=runner,
                             calls=calls, job_dir=job_dir)
            await calls.aclose()
    finally:
        await runtime.aclose()
