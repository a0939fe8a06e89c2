"""The `decentralized` team: r peers debate over R rounds; the most common final program wins.

Graph: START -> round_0 -> round_1 -> ... -> round_{R-1} -> vote -> END. In each round node the
active peers (`debater_0 .. debater_{r-1}`, one shared `debater` prompt, `python_exec`, each
with its own request seeds) run concurrently.

- Round 0: every peer answers the question on its own.
- Round k > 0: every peer sees the question, its own previous answer and the other peers'
  previous answers (as they wrote them), then gives its revised answer and program.
- The vote over final-round programs is `majority_vote`, as in the independent team.
- With one active peer there is no one to debate: only round 0 runs. No active peer: abstain.
- Record fields: `rounds` (per round, agent -> program), `programs` (final round), `vote`,
  `n_rounds` (rounds that ran), plus the common ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langgraph.graph import END, START, StateGraph

from lcb.agents.prompts import question_prompt
from lcb.teams import multi
from lcb.teams.common import TeamContext
from lcb.teams.multi import Outcome, Step, Team, TeamState
from lcb.teams.vote import VoteResult, majority_vote

TOPOLOGY = "decentralized"
ROLE = "debater"
STEP_KEY = "round"


class DebateState(TeamState):
    vote: VoteResult


def _answer(step: Step | None) -> str:
    if step is None or step.run.error is not None:
        return "(no answer)"
    return step.run.final_text


def debate_prompt(ctx: TeamContext, peer: str, previous: Sequence[Step], *, round_: int,
                  rounds: int) -> str:
    """What `peer` reads in round `round_` > 0: its own and the others' previous answers."""
    own = next((s for s in previous if s.run.agent == peer), None)
    others = [s for s in previous if s.run.agent != peer]
    parts = [question_prompt(ctx.problem).rstrip(),
             f"## Debate round {round_ + 1} of {rounds}",
             f"### Your answer in the previous round\n\n{_answer(own)}",
             "### The other programmers' answers in the previous round"]
    parts += [f"#### {s.run.agent}\n\n{_answer(s)}" for s in others]
    parts.append("Check each answer for wrong reasoning, missed cases and slowness, then give "
                 "your updated answer with your complete program.")
    return "\n\n".join(parts) + "\n"


def build(ctx: TeamContext, team: Team, *, bundle: Mapping[str, str] | None = None) -> StateGraph:
    """The uncompiled debate: one node per round, then the vote. Needs an active peer."""
    if not team.active:
        raise ValueError("the decentralized team needs at least one active peer")
    text = multi.role_text(ctx, ROLE, bundle)
    specs = [multi.member_spec(ctx, agent, team, text=text, answering=True)
             for agent in team.active]
    rounds = team.options.rounds_for() if len(specs) > 1 else 1

    def round_node(round_: int) -> Callable[[DebateState], Awaitable[dict[str, Any]]]:
        async def node(state: DebateState) -> dict[str, Any]:
            previous = [s for s in multi.ordered(state["steps"], team) if s.index == round_ - 1]
            users = [question_prompt(ctx.problem) if round_ == 0 else
                     debate_prompt(ctx, spec.agent, previous, round_=round_, rounds=rounds)
                     for spec in specs]
            members = list(zip(specs, users, strict=True))
            return {"steps": await multi.run_steps(ctx, members, index=round_)}
        return node

    def vote(state: DebateState) -> dict[str, Any]:
        final = [s for s in multi.ordered(state["steps"], team) if s.index == rounds - 1]
        return {"vote": majority_vote((s.run.agent, s.run.code) for s in final)}

    graph = StateGraph(DebateState)
    previous = START
    for round_ in range(rounds):
        graph.add_node(f"round_{round_}", round_node(round_))
        graph.add_edge(previous, f"round_{round_}")
        previous = f"round_{round_}"
    graph.add_node("vote", vote)
    graph.add_edge(previous, "vote")
    graph.add_edge("vote", END)
    return graph


def conclude(steps: list[Step], state: dict[str, Any]) -> Outcome:
    """Submit the program voted in the last round; record every round's programs."""
    n_rounds = steps[-1].index + 1
    rounds = [{s.run.agent: s.run.code for s in steps if s.index == k} for k in range(n_rounds)]
    return multi.voted(steps, state["vote"], rounds=rounds, programs=rounds[-1], n_rounds=n_rounds)


run = multi.graph_team(TOPOLOGY, build=build, conclude=conclude, step_key=STEP_KEY)
