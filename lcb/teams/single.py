"""The `single` team: one solver agent with `python_exec`.

The solver's system prompt is its role prompt (`configs/prompts/single/lcb/solver.txt`, or the
bundle's `solver` text) followed by the output contract; the user message is LiveCodeBench's
question prompt. The submitted program is the one extracted from the solver's final answer (or,
when the turn cap or a failed model call cut it short, the last program it wrote).
"""

from __future__ import annotations

from collections.abc import Mapping

from langgraph.graph import StateGraph

from lcb.agents.prompts import question_prompt
from lcb.teams.agent import build_agent_graph, run_agent
from lcb.teams.common import AgentSpec, TeamContext, TeamResult
from lcb.teams.options import TeamOptions

TOPOLOGY = "single"
ROLES = ("solver",)


def solver(ctx: TeamContext, bundle: Mapping[str, str] | None = None) -> AgentSpec:
    """The team's one agent."""
    prompt = ctx.system_prompt("solver", bundle)
    return AgentSpec(agent="solver", role="solver", system_prompt=prompt,
                     tools=(ctx.runtime.python_exec,))


def build() -> StateGraph:
    """The team as an uncompiled graph: the agent loop (the solver comes with each run)."""
    return build_agent_graph()


async def run(ctx: TeamContext, *, bundle: Mapping[str, str] | None = None,
              options: TeamOptions | None = None) -> TeamResult:
    """Solve `ctx.problem`; per-problem failures come back in `TeamResult.error`.

    `error` is set only when the solver failed without writing a program; a program it wrote
    before a later model call failed is submitted, the failure kept in `agent_errors`.

    The single team has one agent: `options` may only leave the size unset or set it to 1, and
    a mask that deactivates the solver makes the team abstain with no model call.
    """
    if options is not None and options.team_size not in (None, 1):
        raise ValueError(f"the single team has one agent; got --team-size {options.team_size}")
    if options is not None and options.active is not None and "solver" not in options.active:
        return ctx.result(code=None, final_text="", transcript=[],
                          fields={"agents_ran": []})
    agent = await run_agent(solver(ctx, bundle), ctx, user=question_prompt(ctx.problem))
    errors = {agent.agent: agent.error} if agent.error else {}
    fields = {"turns": agent.turns, "hit_turn_cap": agent.hit_turn_cap,
              "outputs": {agent.agent: agent.final_text}, "agent_errors": errors}
    # As in the multi-agent teams (`lcb.teams.multi.finish`): a program written before a later
    # call failed is submitted; the failure stays in `agent_errors`.
    error = agent.error if agent.code is None else None
    return ctx.result(code=agent.code, final_text=agent.final_text,
                      transcript=agent.transcript(), fields=fields, error=error)
