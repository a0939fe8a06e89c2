"""One graded team run on one problem: the unit every phase of an optimizer job is made of.

Contract:
- `TeamCell` names the team of a job (topology, team size, communication format) and knows its
  prompt slots (`roles`) and agent ids (`agents`). Unknown topologies, sizes or formats raise
  `ValueError` naming the bad value, at construction.
- `TeamRunner.attempt(bundle, problem, seed=..., active=...)` runs the team once with `bundle`
  and run seed `seed`, then grades the submitted program on the hidden tests, fail-fast, in a
  `GradingPool`. It returns a `Rollout`, or raises `InfraFailure` when infrastructure (not the
  answer) failed: the team's error (model endpoint failing after the client's retries, a team
  crash), a run with no model call, the whole-run timeout, or an exception in the grader. A
  missing, wrong or malformed program is a `Rollout` with score 0 and the reason in `feedback`.
- At most `concurrency` attempts run at once (team and grading together).
- `TeamRunner.uncharged(...)` is the evaluation path: the same attempt, retried with the same
  seed `INFRA_RETRIES` more times; after that it returns `Failed` instead of raising.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from lcb.data.problems import Problem
from lcb.grading import Grade, GradingPool
from lcb.optimize.budget import INFRA_RETRIES, InfraFailure, infra_reason
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.method import Rollout
from lcb.teams import TEAMS, TeamResult, TeamRuntime, solve
from lcb.teams import single as single_team
from lcb.teams.formats import parse_format
from lcb.teams.layouts import team_layout
from lcb.teams.options import TeamOptions

TOPOLOGIES = tuple(TEAMS)
DEFAULT_RUN_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class TeamCell:
    """The team of a job. `team_size` None means the team's default size."""

    topology: str
    team_size: int | None = None
    communication: str = "freeform"

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r}; known: {', '.join(TOPOLOGIES)}")
        object.__setattr__(self, "communication", parse_format(self.communication).value)
        if self.is_single and self.team_size not in (None, 1):
            raise ValueError(f"the single team has one agent; got team size {self.team_size}")
        _ = self.agents  # resolves the layout: a bad size fails here

    @property
    def is_single(self) -> bool:
        return self.topology == single_team.TOPOLOGY

    def options(self, active: frozenset[str] | None = None) -> TeamOptions:
        return TeamOptions(team_size=self.team_size, communication=self.communication,
                           active=active)

    @cached_property
    def size(self) -> int:
        """The resolved team size (1 for `single`)."""
        return 1 if self.is_single else self.options().size_for(self.topology)

    @cached_property
    def agents(self) -> tuple[str, ...]:
        if self.is_single:
            return ("solver",)
        return team_layout(self.topology, self.size).ids

    @cached_property
    def roles(self) -> tuple[str, ...]:
        if self.is_single:
            return single_team.ROLES
        return team_layout(self.topology, self.size).roles


@dataclass(frozen=True)
class Failed:
    """An uncharged run that failed for infrastructure reasons on every try."""

    problem_id: str
    seed: int
    error: str
    tries: int


def feedback_text(result: TeamResult, grade: Grade | None) -> str:
    """What a reflective method reads about one graded run ("" when it passed)."""
    if grade is None:
        return ("no program: the team's final answer held no complete ```python code block, "
                "so nothing was graded")
    if grade.em:
        return ""
    fb = grade.feedback
    if fb is None:
        return f"failed: {grade.passed} of {grade.total} hidden tests passed"
    lines = [f"hidden test {fb.test_index + 1} of {grade.total} failed: {fb.verdict.value} "
             f"({grade.passed} passed before it)",
             f"input:\n{fb.input}", f"expected output:\n{fb.expected}"]
    if fb.actual:
        lines.append(f"program output:\n{fb.actual}")
    if fb.error:
        lines.append(f"error:\n{fb.error}")
    return "\n".join(lines)


async def run_team(cell: TeamCell, problem: Problem, runtime: TeamRuntime, *,
                   bundle: Mapping[str, str], seed: int,
                   active: frozenset[str] | None = None) -> TeamResult:
    """One run of `cell`'s team; per-problem failures come back in `TeamResult.error`."""
    if cell.is_single and active is not None and set(active) != {"solver"}:
        raise ValueError(f"the single team cannot be masked to {sorted(active)}")
    options = None if cell.is_single else cell.options(active)
    return await solve(cell.topology, problem, runtime, bundle=bundle, seed=seed,
                       options=options)


class TeamRunner:
    """Runs and grades teams of one cell on one runtime (see the module docstring)."""

    def __init__(self, cell: TeamCell, runtime: TeamRuntime, pool: GradingPool, *,
                 concurrency: int = 4, run_timeout_s: float = DEFAULT_RUN_TIMEOUT_S) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.cell, self.runtime, self.pool = cell, runtime, pool
        self.run_timeout_s = run_timeout_s
        self._slots = asyncio.Semaphore(concurrency)

    async def attempt(self, bundle: Mapping[str, str], problem: Problem, *, seed: int,
                      iteration: int = 0, active: frozenset[str] | None = None) -> Rollout:
        """One graded run; raises `InfraFailure` when it is not usable (module docstring)."""
        async with self._slots:
            try:
                result = await asyncio.wait_for(
                    run_team(self.cell, problem, self.runtime, bundle=bundle, seed=seed,
                             active=active), timeout=self.run_timeout_s)
            except TimeoutError:
                raise InfraFailure(f"team run timed out after {self.run_timeout_s:g}s") from None
            reason = infra_reason(error=result.error, n_llm_calls=result.n_llm_calls)
            if reason:
                raise InfraFailure(reason)
            grade = await self._grade(problem, result)
        return Rollout(problem_id=problem.id, score=float(grade.em) if grade else 0.0,
                       feedback=feedback_text(result, grade), team=result, seed=seed,
                       iteration=iteration, bundle_hash=bundle_hash(bundle), active=active,
                       grade=grade)

    async def _grade(self, problem: Problem, result: TeamResult) -> Grade | None:
        if not result.code:
            return None
        try:
            return await self.pool.grade(problem, result.code)
        except Exception as exc:  # noqa: BLE001 - the grader's failure is infrastructure
            raise InfraFailure(f"grading failed: {type(exc).__name__}: {exc}") from exc

    async def uncharged(self, bundle: Mapping[str, str], problem: Problem, *,
                        seed: int) -> Rollout | Failed:
        """An evaluation run: retried with the same seed on `InfraFailure`, never raising it."""
        error = ""
        for _ in range(1 + INFRA_RETRIES):
            try:
                return await self.attempt(bundle, problem, seed=seed)
            except InfraFailure as exc:
                error = str(exc)
        return Failed(problem.id, seed, error, 1 + INFRA_RETRIES)
