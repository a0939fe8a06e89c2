"""The `independent` team: r coders solve the problem apart; the most common program is submitted.

Graph: START fans out to one node per active replica (`coder_0 .. coder_{r-1}`, all using the
`coder` prompt, with `python_exec`), which run concurrently; all of them feed the `vote` node.

- Every replica gets the same system prompt (coder text + format + output contract) and the
  question prompt; replicas differ by their request seeds, which derive from their agent ids.
- The vote (`lcb.teams.vote.majority_vote`): programs compared with whitespace normalised;
  replicas without a program do not vote; a tie goes to the program first produced by the
  lowest-index replica. Only the winner is submitted, so the hidden tests never choose it.
- Record fields: `programs` (agent -> program or None), `vote` (counts, each agent's choice,
  winner), plus the common ones of `lcb.teams.multi.finish`.
- Masks drop replicas; with none active the team abstains without a model call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.graph import END, START, StateGraph

from lcb.agents.prompts import question_prompt
from lcb.teams import multi
from lcb.teams.common import TeamContext
from lcb.teams.multi import Outcome, Step, Team, TeamState
from lcb.teams.vote import VoteResult, majority_vote

TOPOLOGY = "independent"
ROLE = "coder"
STEP_KEY = "round"


class IndependentState(TeamState):
    vote: VoteResult


def build(ctx: TeamContext, team: Team, *, bundle: Mapping[str, str] | None = None) -> StateGraph:
    """The uncompiled team graph: replicas in parallel, then the vote. Needs an active agent."""
    if not team.active:
        raise ValueError("the independent team needs at least one active replica")
    text, user = multi.role_text(ctx, ROLE, bundle), question_prompt(ctx.problem)
    graph = StateGraph(IndependentState)
    for agent in team.active:
        spec = multi.member_spec(ctx, agent, team, text=text, answering=True)
        graph.add_node(agent.id, multi.step_node(ctx, spec, user))
        graph.add_edge(START, agent.id)

    def vote(state: IndependentState) -> dict[str, Any]:
        replicas = multi.ordered(state["steps"], team)
        return {"vote": majority_vote((s.run.agent, s.run.code) for s in replicas)}

    graph.add_node("vote", vote)
    graph.add_edge([agent.id for agent in team.active], "vote")
    graph.add_edge("vote", END)
    return graph


def conclude(steps: list[Step], state: dict[str, Any]) -> Outcome:
    """Submit the voted program; record every replica's program."""
    return multi.voted(steps, state["vote"], programs={s.run.agent: s.run.code for s in steps})


run = multi.graph_team(TOPOLOGY, build=build, conclude=conclude, step_key=STEP_KEY)
