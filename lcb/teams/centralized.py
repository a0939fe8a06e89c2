"""The `centralized` team: a manager delegates to workers through a tool, then answers.

Graph: the manager's agent loop (model -> tools -> model ...), whose one tool is
`delegate(worker, instruction)`. Workers per size (`lcb.teams.layouts.CENTRALIZED_WORKERS`):
r=2 coder; r=4 analyzer, coder, tester; r=8 adds design, edge_case, debug, review; r=10 adds
complexity_analyzer and optimizer.

- The manager's prompt fills `{workers}` with exactly its active workers ("- name: duty"),
  then adds how to delegate, the format contract and the output contract.
- A delegation runs the worker once, fresh: its system prompt is its role text plus the format
  contract; its user message is the question prompt and the manager's instruction. Its final
  message, as written, is the tool result the manager reads.
- An unknown or inactive worker, an empty instruction, or arguments that are not valid JSON are
  answered with an `error:` tool message; the manager can retry. A worker whose model call
  fails answers with an error message too.
- Turn cap: `3 + 2 * workers` manager turns. Delegations made in one turn run concurrently.
- The submitted program is the manager's; when it gave none, the latest worker program.
- Masks: inactive workers cannot be reached; a manager with no worker answers alone (no tool);
  without the manager nobody can answer, so the team abstains.
- Record fields: `delegations` (worker, instruction, reply, program, error; in call order),
  `submitted_by`, plus the common ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import StateGraph
from pydantic import BaseModel, Field

from lcb.agents.prompts import fill_placeholders, question_prompt
from lcb.registry import CENTRALIZED_MANAGER
from lcb.teams.agent import build_agent_graph, run_agent
from lcb.teams.common import AgentSpec, TeamContext, TeamResult
from lcb.teams.layouts import DELEGATE_TOOL, DELEGATION_STEP
from lcb.teams.multi import Step, Team, abstain, finish, member_spec, role_text
from lcb.teams.options import TeamOptions

TOPOLOGY = "centralized"
MANAGER = CENTRALIZED_MANAGER
STEP_KEY = DELEGATION_STEP
TOOL = DELEGATE_TOOL
ROUTING = (f"To give a worker a task, call the `{TOOL}` tool with `worker` (one of the names "
           "above) and `instruction` (the task and the context it needs); the worker's reply "
           "comes back as the tool result. When you are done, answer without calling a tool.")
NO_WORKERS = "(none: you work alone and answer yourself)"


class DelegateArgs(BaseModel):
    worker: str = Field(description="The name of the worker to ask.")
    instruction: str = Field(description="The task, with the context the worker needs.")


def turn_cap(n_workers: int) -> int:
    """Manager turns: room for about two delegations per worker, plus the final answer."""
    return 3 + 2 * n_workers


def delegate_tool(ctx: TeamContext, workers: dict[str, AgentSpec], steps: list[Step],
                  log: list[dict[str, Any]]) -> BaseTool:
    """The `delegate` tool: runs a worker, appends its run to `steps` and a row to `log`."""
    names = ", ".join(workers)

    async def delegate(worker: str, instruction: str) -> str:
        row: dict[str, Any] = {"worker": worker, "instruction": instruction, "reply": None,
                               "code": None, "error": None}
        log.append(row)
        number = len(log)
        spec = workers.get(worker)
        if spec is None or not instruction.strip():
            why = f"there is no worker {worker!r}" if spec is None else "the instruction is empty"
            row["error"] = f"error: {why}; your workers are: {names}."
            return row["error"]
        user = f"{question_prompt(ctx.problem).rstrip()}\n\n## Task from the manager\n\n" \
               f"{instruction}\n"
        run = await run_agent(spec, ctx, user=user)
        steps.append(Step(run, number))
        row.update(reply=run.final_text, code=run.code, error=run.error)
        if run.error:
            return f"error: the {worker} worker could not answer: {run.error}"
        if run.hit_turn_cap:
            return f"{run.final_text}\n(the {worker} worker stopped at its turn limit)"
        return run.final_text

    return StructuredTool.from_function(
        coroutine=delegate, name=TOOL, args_schema=DelegateArgs,
        description=f"Ask one of your workers ({names}) to do a task; returns its reply.")


def manager_spec(ctx: TeamContext, team: Team, tools: tuple[BaseTool, ...],
                 bundle: Mapping[str, str] | None) -> AgentSpec:
    """The manager: its prompt names exactly the active workers."""
    workers = [a for a in team.active if a.id != MANAGER]
    listing = "\n".join(f"- {a.id}: {a.role.duty}" for a in workers) or NO_WORKERS
    text = fill_placeholders(role_text(ctx, MANAGER, bundle), workers=listing)
    if tools:
        text = f"{text.rstrip()}\n\n{ROUTING}"
    manager = next(a for a in team.layout.agents if a.id == MANAGER)
    return member_spec(ctx, manager, team, text=text, answering=True, tools=tools,
                       max_turns=turn_cap(len(workers)))


def build() -> StateGraph:
    """The uncompiled team graph: the agent loop, run by the manager (`manager_agent`, whose
    `delegate` tool runs the workers, comes with each run)."""
    return build_agent_graph()


def manager_agent(ctx: TeamContext, team: Team, steps: list[Step], log: list[dict[str, Any]],
                  bundle: Mapping[str, str] | None) -> AgentSpec:
    """The manager's spec with its `delegate` tool wired to the active workers (none: no tool)."""
    workers: dict[str, AgentSpec] = {
        a.id: member_spec(ctx, a, team, text=role_text(ctx, a.role.name, bundle),
                          answering=False)
        for a in team.active if a.id != MANAGER}
    tools = (delegate_tool(ctx, workers, steps, log),) if workers else ()
    return manager_spec(ctx, team, tools, bundle)


async def run(
    ctx: TeamContext, *, bundle: Mapping[str, str] | None = None,
    options: TeamOptions | None = None,
) -> TeamResult:
    """Solve `ctx.problem` with the manager and its workers; failures come back as data."""
    team = Team.resolve(TOPOLOGY, options, bundle)
    if MANAGER not in {agent.id for agent in team.active}:
        return abstain(ctx, team, step_key=STEP_KEY)
    worker_steps: list[Step] = []
    log: list[dict[str, Any]] = []
    manager = await run_agent(manager_agent(ctx, team, worker_steps, log, bundle), ctx,
                              user=question_prompt(ctx.problem))
    code, submitted_by = manager.code, MANAGER if manager.code is not None else None
    if code is None:
        fallback = next((s.run for s in reversed(worker_steps) if s.run.code), None)
        code, submitted_by = (fallback.code, fallback.agent) if fallback else (None, None)
    steps = [Step(manager, 0), *sorted(worker_steps, key=lambda step: step.index)]
    fields = {"delegations": log, "submitted_by": submitted_by,
              "manager_turns": manager.turns, "hit_turn_cap": manager.hit_turn_cap}
    return finish(ctx, team, steps, code=code, final_text=manager.final_text,
                  step_key=STEP_KEY, fields=fields)
