"""Helpers for the multi-agent team tests: run a team on the scripted server, read requests.

Requests are told apart by what the harness puts in them: the role by the start of the system
prompt (each role's seed prompt text), the replica or peer by the request seed (derived from
the agent id, see `lcb.agents.llm.request_seed`), the problem by its statement.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lcb.agents.llm import request_seed
from lcb.agents.prompts import load_role_prompt
from lcb.data.problems import Problem
from lcb.teams import centralized, decentralized, independent, sequential
from lcb.teams.common import TeamContext, TeamResult, TeamRuntime
from lcb.teams.formats import JSON_CLOSE, JSON_OPEN, CommFormat
from lcb.teams.options import TeamOptions
from tests.helpers_agents import EchoRunner, make_runtime

MODULES = {"independent": independent, "sequential": sequential, "centralized": centralized,
           "decentralized": decentralized}
TOPOLOGIES = tuple(MODULES)


def fenced(code: str, text: str = "My program:") -> str:
    return f"{text}\n```python\n{code}\n```"


def report(fmt: CommFormat | str, summary: str = "done") -> str:
    """A message opening that complies with `fmt` (empty for freeform)."""
    fmt = CommFormat(fmt)
    if fmt is CommFormat.SEMI_STRUCTURED:
        return (f"[STATUS] done\n[SUMMARY] {summary}\n[EVIDENCE_OR_TESTS] ran the examples\n"
                "[CONFIDENCE] high\n[NEXT] submit\n\n")
    if fmt is CommFormat.STRUCTURED_SOFT:
        body = {"status": "done", "summary": summary, "confidence": "high", "next": "submit",
                "payload": {"approach": "direct", "tests": ["examples"]}}
        return f"{JSON_OPEN}\n{json.dumps(body)}\n{JSON_CLOSE}\n\n"
    return ""


def system_text(request: Mapping[str, Any]) -> str:
    return request["messages"][0]["content"]


def user_text(request: Mapping[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def role_of(request: Mapping[str, Any], topology: str, roles: Iterable[str]) -> str:
    """The role whose seed prompt opens the request's system prompt (text before any `{`)."""
    system = system_text(request)
    for role in roles:
        if system.startswith(load_role_prompt(topology, role).split("{")[0]):
            return role
    raise LookupError(f"no role of {topology} matches system prompt {system[:80]!r}")


def seed_agents(problem_id: str, agents: Iterable[str], *, run_seed: int = 0,
                base: int = 0, turns: int = 8) -> dict[int, str]:
    """Request seed -> agent id, for every turn an agent can make."""
    return {request_seed(run_seed, base, problem_id, agent, turn): agent
            for agent in agents for turn in range(1, turns + 1)}


def by_agent(problem_id: str, agents: Sequence[str],
             reply: Callable[[str, dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A script that calls `reply(agent_id, request)`, the agent found from the request seed;
    requests of no agent (an endpoint check) get "OK"."""
    seeds = seed_agents(problem_id, agents)

    def script(request: dict[str, Any]) -> Any:
        agent = seeds.get(request.get("seed"))
        return "OK" if agent is None else reply(agent, request)

    return script


async def run_team(runtime: TeamRuntime, topology: str, problem: Problem, *,
                   options: TeamOptions | None = None, bundle: Mapping[str, str] | None = None,
                   seed: int = 0) -> TeamResult:
    """One team run, as `lcb.teams.solve` makes it, with explicit team options."""
    ctx = TeamContext(problem=problem, team=topology, runtime=runtime, seed=seed)
    return await MODULES[topology].run(ctx, bundle=bundle, options=options)


def solve_one(base_url: str, topology: str, problem: Problem, *,
              runner: EchoRunner | None = None, **kw: Any) -> TeamResult:
    """Run one team on `problem` against the server at `base_url` (runtime closed after)."""
    runtime = make_runtime(base_url, runner=runner)

    async def main() -> TeamResult:
        try:
            return await run_team(runtime, topology, problem, **kw)
        finally:
            await runtime.aclose()

    return asyncio.run(main())


def requests_of(server: Any, predicate: Callable[[dict[str, Any]], bool]) -> list[dict]:
    return [body for body in server.chat_requests() if predicate(body)]
