"""Pieces the four multi-agent teams share: member prompts, concurrent runs, the result.

Contract:
- A member's system prompt is its role text (the bundle's, else the seed file), then the
  communication format contract, then, for members whose answer may be submitted, the output
  contract. Members get `python_exec` when their role runs code (`lcb.teams.layouts`).
- `Step` is one agent run inside a team, with its index (sequential stage, debate round or
  delegation number). Team graphs collect steps in `TeamState.steps`.
- `finish` builds the `TeamResult`: the transcript (every step's messages, source-tagged, with
  the step index), the common record fields (`team_size`, `communication`, `agents`,
  `agents_ran`, `outputs`, `compliance`, `usage_by_agent`, `agent_errors`) plus the team's own.
  `error` is set only when the team has no program and some agent failed; a program found
  despite a failed agent is submitted (the failure stays in `agent_errors`).
- Compliance is measured on each step's final message as the agent wrote it; steps that ended
  in an error or at the turn cap sent no message and are not counted.
- `abstain` is the result of a team with no active agent: no model call, no program, no error.
- `graph_team(...)` makes a topology's run function from its graph builder and conclusion.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.tools import BaseTool
from langgraph.graph import StateGraph

from lcb.agents.prompts import with_contract
from lcb.agents.usage import WITHOUT_USAGE, Usage
from lcb.teams.agent import AgentRun, run_agent
from lcb.teams.common import DEFAULT_MAX_TURNS, AgentSpec, TeamContext, TeamResult
from lcb.teams.formats import compliance, with_format
from lcb.teams.layouts import Agent
from lcb.teams.options import TeamOptions
from lcb.teams.setup import Team
from lcb.teams.vote import VoteResult


@dataclass(frozen=True)
class Step:
    """One agent run of a team; `index` is its stage, debate round or delegation number."""

    run: AgentRun
    index: int = 0


class TeamState(TypedDict):
    steps: Annotated[list[Step], operator.add]


def role_text(ctx: TeamContext, role: str, bundle: Mapping[str, str] | None) -> str:
    """The editable prompt of `role`: the bundle's text, else the seed file of this team."""
    return (bundle or {}).get(role) or ctx.runtime.seed_prompt(ctx.team, role)


def member_spec(
    ctx: TeamContext, agent: Agent, team: Team, *, text: str, answering: bool,
    tools: Sequence[BaseTool] | None = None, max_turns: int = DEFAULT_MAX_TURNS,
) -> AgentSpec:
    """`agent`'s spec: `text` + format contract (+ output contract when `answering`)."""
    prompt = with_format(text, team.options.communication)
    if answering:
        prompt = with_contract(prompt, mode=ctx.problem.mode, fn_name=ctx.problem.fn_name)
    if tools is None:
        tools = (ctx.runtime.python_exec,) if agent.role.runs_code else ()
    return AgentSpec(agent=agent.id, role=agent.role.name, system_prompt=prompt,
                     tools=tuple(tools), max_turns=max_turns)


async def run_steps(
    ctx: TeamContext, members: Sequence[tuple[AgentSpec, str]], *, index: int = 0
) -> list[Step]:
    """Run each `(spec, user prompt)` concurrently; steps in the order given."""
    runs = await asyncio.gather(*(run_agent(spec, ctx, user=user) for spec, user in members))
    return [Step(run, index) for run in runs]


def step_node(
    ctx: TeamContext, spec: AgentSpec, user: str | Callable[[Any], str], *, index: int = 0
) -> Callable[[Any], Awaitable[dict[str, list[Step]]]]:
    """A graph node that runs `spec` once on `user` (a prompt, or a function of the state)."""

    async def node(state: Any) -> dict[str, list[Step]]:
        prompt = user(state) if callable(user) else user
        return {"steps": [Step(await run_agent(spec, ctx, user=prompt), index)]}

    node.__name__ = spec.agent
    return node


async def invoke(graph: StateGraph, *, limit: int = 64) -> dict[str, Any]:
    """Compile and run a team graph from an empty `TeamState`; its final state."""
    return await graph.compile().ainvoke({"steps": []}, config={"recursion_limit": limit})


def ordered(steps: Sequence[Step], team: Team) -> list[Step]:
    """`steps` by index, then by the agents' layout order (parallel nodes finish in any order)."""
    position = {agent_id: i for i, agent_id in enumerate(team.layout.ids)}
    return sorted(steps, key=lambda s: (s.index, position.get(s.run.agent, len(position))))


def _answered(run: AgentRun) -> bool:
    return run.error is None and not run.hit_turn_cap


def compliance_record(steps: Sequence[Step], team: Team) -> dict[str, Any]:
    """Measured share of final messages that follow the team's communication format."""
    checks = [compliance(s.run.final_text, team.options.communication)
              for s in steps if _answered(s.run)]
    share = sum(checks) / len(checks) if checks else None
    return {"messages": len(checks), "compliant": sum(checks), "share": share}


def usage_by_agent(ctx: TeamContext) -> dict[str, dict[str, int | None]]:
    """Model calls and tokens per agent id (from this run's call records; tokens by
    `lcb.agents.usage`'s rule, with `n_calls_without_usage`)."""
    usage: dict[str, Usage] = {}
    for call in ctx.ledger.calls:
        usage[call.tag.agent] = usage.get(call.tag.agent, Usage()) + Usage.of_call(call)
    keys = ("prompt_tokens", "completion_tokens", "n_llm_calls", WITHOUT_USAGE)
    return {agent: {key: total.to_record()[key] for key in keys}
            for agent, total in usage.items()}


def transcript(steps: Sequence[Step], *, step_key: str) -> list[dict[str, Any]]:
    """Every step's messages, source-tagged, each entry carrying `step_key: index`."""
    return [{**entry, step_key: step.index} for step in steps for entry in step.run.transcript()]


def finish(
    ctx: TeamContext, team: Team, steps: Sequence[Step], *, code: str | None, final_text: str,
    step_key: str, fields: Mapping[str, Any],
) -> TeamResult:
    """The team's result (see the module docstring)."""
    errors = {s.run.agent: s.run.error for s in steps if s.run.error}
    common = {
        "team_size": team.layout.size,
        "communication": team.options.communication.value,
        "agents": list(team.layout.ids),
        "agents_ran": list(dict.fromkeys(s.run.agent for s in steps)),
        "outputs": {s.run.agent: s.run.final_text for s in steps},
        "compliance": compliance_record(steps, team),
        "usage_by_agent": usage_by_agent(ctx),
        "agent_errors": errors,
    }
    error = None
    if code is None and errors:
        error = "; ".join(f"{agent}: {text}" for agent, text in errors.items())
    return ctx.result(code=code, final_text=final_text,
                      transcript=transcript(steps, step_key=step_key),
                      fields={**common, **fields}, error=error)


@dataclass(frozen=True)
class Outcome:
    """What a team concludes from its steps: the program, the answering text, its own fields."""

    code: str | None
    final_text: str
    fields: dict[str, Any]


Builder = Callable[..., StateGraph]  # (ctx, team, *, bundle) -> uncompiled graph
Conclude = Callable[[list[Step], dict[str, Any]], Outcome]  # (ordered steps, final state)


def graph_team(
    topology: str, *, build: Builder, conclude: Conclude, step_key: str
) -> Callable[..., Awaitable[TeamResult]]:
    """A team's run function `(ctx, *, bundle=None, options=None) -> TeamResult`: resolve the
    team, abstain when nobody is active, else run the graph `build` makes and `conclude`."""

    async def run(ctx: TeamContext, *, bundle: Mapping[str, str] | None = None,
                  options: TeamOptions | None = None) -> TeamResult:
        team = Team.resolve(topology, options, bundle)
        if not team.active:
            return abstain(ctx, team, step_key=step_key)
        state = await invoke(build(ctx, team, bundle=bundle))
        steps = ordered(state["steps"], team)
        outcome = conclude(steps, state)
        return finish(ctx, team, steps, code=outcome.code, final_text=outcome.final_text,
                      step_key=step_key, fields=outcome.fields)

    run.__doc__ = f"Solve `ctx.problem` with the {topology} team; failures come back as data."
    return run


def voted(steps: Sequence[Step], vote: VoteResult, **fields: Any) -> Outcome:
    """The outcome of a vote: the winner's program and its producer's text, plus `vote`."""
    winner = next((s.run for s in reversed(steps) if s.run.agent == vote.winner_agent), None)
    return Outcome(vote.program, winner.final_text if winner else "",
                   {**fields, "vote": vote.to_record()})


def abstain(ctx: TeamContext, team: Team, *, step_key: str) -> TeamResult:
    """The result of a team with no active agent: nothing ran, nothing is submitted."""
    return finish(ctx, team, [], code=None, final_text="", step_key=step_key,
                  fields={"abstained": True})
