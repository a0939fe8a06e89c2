"""The one way to run a team: `solve(topology, problem, runtime)`.
(`solve_in(ctx)` is the same run in a `TeamContext` the caller made and keeps.)

`TEAMS` maps a topology name to its run function `(ctx, *, bundle, options) -> TeamResult`. `solve`
never raises for a per-problem failure (the model endpoint failing after retries, a crashing
team): those come back as `TeamResult.error`. An unknown topology is a configuration error and
raises `ValueError` at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from lcb.data.problems import Problem
from lcb.teams import centralized, decentralized, independent, sequential, single
from lcb.teams.common import TeamContext, TeamResult, TeamRuntime
from lcb.teams.options import TeamOptions

TeamFn = Callable[..., Awaitable[TeamResult]]

TEAMS: dict[str, TeamFn] = {
    team.TOPOLOGY: team.run
    for team in (single, independent, sequential, centralized, decentralized)
}

async def solve(
    topology: str,
    problem: Problem,
    runtime: TeamRuntime,
    *,
    bundle: Mapping[str, str] | None = None,
    seed: int = 0,
    options: TeamOptions | None = None,
) -> TeamResult:
    """Run the `topology` team on `problem` with prompt `bundle` (role -> text; missing roles
    use the seed prompts), run seed `seed` and team `options` (size, communication format,
    active agents; None: the topology's defaults)."""
    _team(topology)
    ctx = TeamContext(problem=problem, team=topology, runtime=runtime, seed=seed)
    return await solve_in(ctx, bundle=bundle, options=options)


async def solve_in(
    ctx: TeamContext,
    *,
    bundle: Mapping[str, str] | None = None,
    options: TeamOptions | None = None,
) -> TeamResult:
    """`solve` in a context the caller made: when the caller abandons the run (a timeout),
    `ctx.ledger` still holds the usage spent so far (`ctx.result(...)` reports it)."""
    team = _team(ctx.team)
    try:
        return await team(ctx, bundle=bundle, options=options)
    except Exception as err:  # noqa: BLE001 - a per-problem failure is a result, not a crash
        return ctx.result(code=None, final_text="", transcript=[],
                          error=f"team {ctx.team!r} crashed: {type(err).__name__}: {err}")


def _team(topology: str) -> TeamFn:
    team = TEAMS.get(topology)
    if team is None:
        raise ValueError(f"unknown topology {topology!r}; known: {', '.join(sorted(TEAMS))}")
    return team
