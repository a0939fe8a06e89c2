"""The agent loop through lcb's model client (`lcb.agents.llm`) against the scripted server."""

from __future__ import annotations

import asyncio
import time

from langchain_core.tools import StructuredTool

from lcb.agents.tools import TOOL_NAME
from lcb.teams.agent import AgentRun, agent_loop, run_agent
from lcb.teams.common import AgentSpec, TeamContext
from tests.helpers_agents import EchoRunner, fenced, make_problem, make_runtime, solve_all
from tests.scripted_server import (
    Reply,
    ToolCall,
    failures,
    keyed,
    scripted_server,
    tool_results,
)

PROGRAM = "print(2 * int(input()))"


def exec_call(code: str = "print(1)", stdin: str = "") -> Reply:
    return Reply.calls(ToolCall(TOOL_NAME, {"code": code, "stdin": stdin}))


def explode(code: str) -> str:
    raise RuntimeError("tool exploded")


EXPLODING = StructuredTool.from_function(explode, name="explode", description="always fails")


def run_one(server, *, max_turns: int = 8, extra_tools=(), **config) -> AgentRun:
    """Run one agent (python_exec + `extra_tools`) on problem P_1 against `server`."""

    async def main() -> AgentRun:
        runtime = make_runtime(server.base_url, **config)
        ctx = TeamContext(problem=make_problem(), team="single", runtime=runtime)
        spec = AgentSpec("solver", "solver", "You solve problems.",
                         tools=(runtime.python_exec, *extra_tools), max_turns=max_turns)
        try:
            return await run_agent(spec, ctx, user="[P_1] double n")
        finally:
            await runtime.aclose()

    return asyncio.run(main())


def test_tool_call_result_reaches_the_model_then_final_answer():
    script = [exec_call("print(21 * 2)", "x"), fenced(PROGRAM)]
    with scripted_server(script) as server:
        agent = run_one(server)
        bodies = server.chat_requests()
    assert len(bodies) == 2
    assert tool_results(bodies[0]) == []
    [result] = tool_results(bodies[1])
    assert "ran 'print(21 * 2)' with 'x'" in result and "exit code 0" in result
    assert bodies[1]["messages"][2]["tool_calls"][0]["function"]["name"] == TOOL_NAME
    assert agent.code == PROGRAM and agent.error is None and not agent.hit_turn_cap
    assert [m["type"] for m in agent.transcript()] == [
        "system", "user", "assistant", "tool", "assistant"]


def test_invalid_tool_json_becomes_an_error_message_and_the_agent_recovers():
    script = [Reply.calls(ToolCall(TOOL_NAME, '{"code": "print(1)"')), fenced(PROGRAM)]
    with scripted_server(script) as server:
        agent = run_one(server)
        bodies = server.chat_requests()
    [result] = tool_results(bodies[1])
    assert result.startswith("error:") and "not valid JSON" in result
    assert agent.code == PROGRAM and agent.error is None
    tool_entry = agent.transcript()[3]
    assert tool_entry["status"] == "error"
    assert agent.transcript()[2]["tool_calls"][0]["invalid"] is True


def test_unknown_tool_and_raising_tool_become_error_messages():
    calls = Reply.calls(ToolCall("web_search", {"q": "x"}, id="a"),
                        ToolCall("explode", {"code": "1"}, id="b"))
    with scripted_server([calls, fenced(PROGRAM)]) as server:
        agent = run_one(server, extra_tools=(EXPLODING,))
        results = tool_results(server.chat_requests()[1])
    assert "no tool named 'web_search'" in results[0] and TOOL_NAME in results[0]
    assert "explode failed" in results[1] and "tool exploded" in results[1]
    assert agent.code == PROGRAM


def test_turn_cap_keeps_the_last_program_seen():
    early = Reply.calls(ToolCall(TOOL_NAME, {"code": "print(0)"}), content=fenced("print(0)"))
    later = Reply.calls(ToolCall(TOOL_NAME, {"code": "print(1)"}), content=fenced(PROGRAM))
    with scripted_server([early, later, exec_call()]) as server:
        agent = run_one(server, max_turns=3)
        n_requests = len(server.chat_requests())
    assert n_requests == 3
    assert agent.hit_turn_cap and agent.error is None and agent.turns == 3
    assert agent.code == PROGRAM


def test_retries_on_5xx_then_success():
    with scripted_server([*failures(2, 500), fenced(PROGRAM)]) as server:
        agent = run_one(server, max_retries=3)
        statuses = [r.status for r in server.requests]
    assert statuses == [500, 500, 200]
    assert agent.code == PROGRAM and agent.error is None


def test_retries_exhausted_give_team_error_in_bounded_time():
    started = time.monotonic()
    with scripted_server(failures(50, 503)) as server:
        [result], _ = solve_all(server.base_url, [make_problem()], max_retries=2)
        n_requests = len(server.requests)
    assert time.monotonic() - started < 15
    assert n_requests == 3
    assert result.error and "3 attempt" in result.error and "503" in result.error
    assert result.code is None and result.n_llm_calls == 0
    assert result.usage_by_role["solver"]["n_retries"] == 2


def test_a_request_queued_past_the_queue_timeout_is_retried():
    with scripted_server([Reply.stall(), fenced(PROGRAM)]) as server:
        started = time.monotonic()
        agent = run_one(server, timeout_s=0.5, queue_timeout_s=0.5, max_retries=1)
        elapsed = time.monotonic() - started
        n_requests = len(server.chat_requests())
    assert n_requests == 2 and agent.code == PROGRAM and agent.error is None
    assert elapsed < 10


def test_a_request_queued_longer_than_the_idle_timeout_is_waited_for():
    """No byte yet is a queue at a busy server, not a silent stream: one request, no retry."""
    with scripted_server([Reply(content=fenced(PROGRAM), latency_s=1.2)]) as server:
        agent = run_one(server, timeout_s=0.3, max_retries=2)
        n_requests = len(server.chat_requests())
    assert n_requests == 1 and agent.code == PROGRAM and agent.error is None


def test_a_request_never_answered_ends_as_a_queue_timeout():
    with scripted_server([Reply.stall()]) as server:
        agent = run_one(server, timeout_s=0.3, queue_timeout_s=0.3, max_retries=1)
    assert agent.error and "QueueTimeout: no answer began within 0.3 s" in agent.error


def test_think_is_stripped_from_history_and_answer():
    first = Reply.calls(ToolCall(TOOL_NAME, {"code": "print(1)"}),
                        content="<think>secret plan</think>Let me test.")
    final = "<think>more secret</think>" + fenced(PROGRAM)
    with scripted_server([first, final]) as server:
        agent = run_one(server)
        bodies = server.chat_requests()
    assert "secret" not in str(bodies[1]["messages"])
    assert "secret" not in agent.final_text and "secret" not in str(agent.transcript())
    assert agent.code == PROGRAM


def test_request_seeds_differ_per_turn_and_repeat_across_runs():
    def seeds() -> list[int]:
        with scripted_server([exec_call(), fenced(PROGRAM)]) as server:
            run_one(server)
            return [b["seed"] for b in server.chat_requests()]

    first, second = seeds(), seeds()
    assert first == second and len(set(first)) == 2


def test_request_semaphore_caps_requests_in_flight():
    script = keyed({f"[Q{i}]": [fenced(PROGRAM)] for i in range(6)})
    with scripted_server(script, latency_s=0.2) as server:
        problems = [make_problem(f"Q{i}") for i in range(6)]
        results, _ = solve_all(server.base_url, problems, max_concurrent_requests=2)
    assert server.peak_in_flight == 2
    assert all(r.code == PROGRAM for r in results)


def test_python_exec_calls_are_counted_per_role():
    runner = EchoRunner()
    with scripted_server([exec_call("a"), exec_call("b"), fenced(PROGRAM)]) as server:
        [result], _ = solve_all(server.base_url, [make_problem()], runner=runner)
    assert [c[0] for c in runner.calls] == ["a", "b"]
    assert result.n_tool_calls == 2 and result.usage_by_role["solver"]["n_tool_calls"] == 2


def test_a_crash_inside_the_loop_is_the_agents_error_not_an_exception(monkeypatch):
    async def broken_ask(self, spec, messages, *, turn):
        raise ZeroDivisionError("bug in a node")

    monkeypatch.setattr(TeamContext, "ask", broken_ask)
    with scripted_server(["unused"]) as server:
        agent = run_one(server)
        n_requests = len(server.requests)
    assert agent.error and "crashed" in agent.error and "ZeroDivisionError" in agent.error
    assert agent.code is None and n_requests == 0


def test_concurrent_agents_share_one_compiled_loop_but_keep_their_own_caps_and_tools():
    """The loop graph is compiled once per process; each run brings its agent as context."""
    script = keyed({"[A]": [exec_call("print(1)")], "[B]": [fenced(PROGRAM)]})
    with scripted_server(script) as server:

        async def main() -> tuple[AgentRun, AgentRun]:
            runtime = make_runtime(server.base_url)
            ctx = TeamContext(problem=make_problem(), team="single", runtime=runtime)
            looping = AgentSpec("a", "solver", "sys", tools=(runtime.python_exec,), max_turns=2)
            answering = AgentSpec("b", "solver", "sys", max_turns=5)
            try:
                return await asyncio.gather(run_agent(looping, ctx, user="[A] go"),
                                            run_agent(answering, ctx, user="[B] go"))
            finally:
                await runtime.aclose()

        first, second = asyncio.run(main())
        tools_sent = {next(m["content"] for m in b["messages"] if m["role"] == "user"):
                      [t["function"]["name"] for t in b.get("tools", [])]
                      for b in server.chat_requests()}
    assert agent_loop() is agent_loop()
    assert (first.agent, first.turns, first.hit_turn_cap) == ("a", 2, True)
    assert (second.agent, second.turns, second.code) == ("b", 1, PROGRAM)
    assert tools_sent == {"[A] go": [TOOL_NAME], "[B] go": []}
