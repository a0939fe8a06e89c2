"""The `sequential` team: a pipeline of stages, each building on what the earlier ones wrote.

Graph: START -> stage 1 -> stage 2 -> ... -> END, one node per active stage, in the order of
`lcb.teams.layouts.SEQUENTIAL_STAGES`:
- r=2: coder -> debugger
- r=4: analyzer -> coder -> tester -> debugger
- r=8: requirements_parser -> analyzer -> algorithm_designer -> coder -> edge_case_thinker
  -> tester -> debugger -> code_reviewer
- r=10: as r=8, with complexity_analyzer after coder and optimizer after debugger.

- Each stage's user message is the question prompt followed by every earlier stage's final
  message exactly as written (not summarised, not cut). Stages that write programs, and the
  last stage in any case, carry the output contract.
- The submitted program is the last stage's program, else the latest earlier stage's. Every
  layout ends with a stage that writes a program, so every stage can change the result.
- Masks skip stages; the last active stage answers. No active stage: the team abstains.
- Record fields: `stages` (agent, role, stage index, text as written, program, error) and
  `submitted_by` (the stage whose program was submitted), plus the common ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.graph import END, START, StateGraph

from lcb.agents.prompts import question_prompt
from lcb.teams import multi
from lcb.teams.common import TeamContext
from lcb.teams.multi import Outcome, Step, Team, TeamState

TOPOLOGY = "sequential"
STEP_KEY = "stage"


def stage_prompt(ctx: TeamContext, earlier: Sequence[Step]) -> str:
    """The user message of a stage: the question, then each earlier stage's text as written."""
    parts = [question_prompt(ctx.problem).rstrip()]
    if earlier:
        parts.append("## Work of the earlier stages")
    for step in earlier:
        text = step.run.final_text if step.run.error is None else "(this stage failed)"
        parts.append(f"### Stage {step.index + 1}: {step.run.agent}\n\n{text}")
    return "\n\n".join(parts) + "\n"


def build(ctx: TeamContext, team: Team, *, bundle: Mapping[str, str] | None = None) -> StateGraph:
    """The uncompiled pipeline of the active stages. Needs an active stage."""
    if not team.active:
        raise ValueError("the sequential team needs at least one active stage")
    graph = StateGraph(TeamState)
    previous = START
    for agent in team.active:
        last = agent is team.active[-1]
        text = multi.role_text(ctx, agent.role.name, bundle)
        spec = multi.member_spec(ctx, agent, team, text=text,
                                 answering=agent.role.writes_program or last)
        index = team.layout.ids.index(agent.id)
        node = multi.step_node(ctx, spec, lambda state: stage_prompt(ctx, state["steps"]),
                               index=index)
        graph.add_node(agent.id, node)
        graph.add_edge(previous, agent.id)
        previous = agent.id
    graph.add_edge(previous, END)
    return graph


def conclude(steps: list[Step], state: dict[str, Any]) -> Outcome:
    """Submit the last program written; record every stage's text as written."""
    submitted = next((s.run for s in reversed(steps) if s.run.code is not None), None)
    stages = [{"agent": s.run.agent, "role": s.run.role, "stage": s.index,
               "text": s.run.final_text, "code": s.run.code, "error": s.run.error}
              for s in steps]
    return Outcome(submitted.code if submitted else None, steps[-1].run.final_text,
                   {"stages": stages, "submitted_by": submitted.agent if submitted else None})


run = multi.graph_team(TOPOLOGY, build=build, conclude=conclude, step_key=STEP_KEY)
