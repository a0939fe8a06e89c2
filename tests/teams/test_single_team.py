"""The `single` team end to end through the real client: prompts, program, usage, failures."""

from __future__ import annotations

import asyncio

import pytest

from lcb.agents.prompts import load_role_prompt, question_prompt, with_contract
from lcb.agents.tools import TOOL_NAME
from lcb.data.problems import Mode, Problem
from lcb.data.problems import Test as Case
from lcb.teams.common import TeamResult
from lcb.teams.solving import TEAMS, solve
from tests.helpers_agents import fenced, make_problem, make_runtime, solve_all
from tests.scripted_server import Reply, ToolCall, failures, keyed, scripted_server

PROGRAM = "print(2 * int(input()))"


def solve_on(server, problem: Problem, **kw) -> TeamResult:
    return solve_all(server.base_url, [problem], **kw)[0][0]


def test_prompts_are_role_prompt_with_contract_and_question():
    problem = make_problem()
    with scripted_server([fenced(PROGRAM)]) as server:
        result = solve_on(server, problem)
        [body] = server.chat_requests()
    system, user = body["messages"]
    expected = with_contract(load_role_prompt("single", "solver"), mode=problem.mode)
    assert system == {"role": "system", "content": expected}
    assert user == {"role": "user", "content": question_prompt(problem)}
    assert [t["function"]["name"] for t in body["tools"]] == [TOOL_NAME]
    assert result.code == PROGRAM and result.error is None


def test_functional_problem_gets_the_method_contract():
    problem = Problem("F_1", "t", "[F_1] Add.", "class Solution:\n    def add(self, a, b):\n",
                      Mode.FUNCTIONAL, "add", (), (Case("1\n2", "3", Mode.FUNCTIONAL),),
                      "easy", "leetcode", "w1", "2024-01-01")
    answer = fenced("class Solution:\n    def add(self, a, b):\n        return a + b")
    with scripted_server([answer]) as server:
        result = solve_on(server, problem)
        system = server.chat_requests()[0]["messages"][0]["content"]
    assert "`add`" in system
    assert result.code.startswith("class Solution")


def test_bundle_overrides_the_role_prompt():
    with scripted_server([fenced(PROGRAM)]) as server:
        solve_on(server, make_problem(), bundle={"solver": "CUSTOM SOLVER PROMPT"})
        system = server.chat_requests()[0]["messages"][0]["content"]
    assert system.startswith("CUSTOM SOLVER PROMPT")
    assert "Output contract" in system


def test_usage_per_role_adds_up_to_what_the_server_reported():
    script = [Reply.calls(ToolCall(TOOL_NAME, {"code": "print(1)"}),
                          prompt_tokens=100, completion_tokens=10),
              Reply(fenced(PROGRAM), prompt_tokens=150, completion_tokens=20)]
    with scripted_server(script) as server:
        result = solve_on(server, make_problem())
    assert (result.prompt_tokens, result.completion_tokens) == (250, 30)
    assert (result.n_llm_calls, result.n_tool_calls) == (2, 1)
    solver = result.usage_by_role["solver"]
    assert (solver["prompt_tokens"], solver["completion_tokens"]) == (250, 30)
    replies = [m for m in result.transcript if m["type"] == "assistant"]
    per_message = [m["usage"]["input_tokens"] for m in replies]
    assert per_message == [100, 150]


def test_transcript_is_source_tagged_and_answer_has_no_think():
    with scripted_server(["<think>private</think>" + fenced(PROGRAM, "Final answer.")]) as server:
        result = solve_on(server, make_problem())
    assert {(m["source"], m["role"]) for m in result.transcript} == {("solver", "solver")}
    assert result.final_text.startswith("Final answer.") and "private" not in result.final_text
    assert result.fields["outputs"] == {"solver": result.final_text}


def test_no_program_is_no_code_but_not_an_error():
    with scripted_server(["I cannot solve this."]) as server:
        result = solve_on(server, make_problem())
    assert result.code is None and result.error is None
    assert result.final_text == "I cannot solve this."


def test_a_program_written_before_a_later_call_failed_is_submitted():
    # The solver writes a program while calling the tool; its next call fails for good.
    draft = Reply.calls(ToolCall(TOOL_NAME, {"code": "print(1)"}), content=fenced(PROGRAM))
    with scripted_server([draft, *failures(20)]) as server:
        result = solve_on(server, make_problem())
    assert result.code == PROGRAM and result.error is None
    assert "model call failed" in result.fields["agent_errors"]["solver"]
    assert result.n_llm_calls == 1


def test_a_failed_call_without_any_program_is_the_error():
    with scripted_server(failures(20)) as server:
        result = solve_on(server, make_problem())
    assert result.code is None and "model call failed" in result.error
    assert result.fields["agent_errors"]["solver"] == result.error


def test_concurrent_problems_get_their_own_replies():
    script = keyed({"[A_1]": [fenced("print('A')")], "[B_2]": [fenced("print('B')")]})
    with scripted_server(script) as server:
        pair = [make_problem("A_1"), make_problem("B_2")]
        (first, second), runtime = solve_all(server.base_url, pair)
    assert (first.code, second.code) == ("print('A')", "print('B')")
    assert first.n_llm_calls == second.n_llm_calls == 1
    assert runtime.usage.total().n_llm_calls == 2


def test_team_crash_becomes_result_error(monkeypatch):
    async def crashing(ctx, *, bundle=None, options=None):
        raise KeyError("boom")

    monkeypatch.setitem(TEAMS, "single", crashing)
    with scripted_server(["unused"]) as server:
        result = solve_on(server, make_problem())
    assert result.error and "KeyError" in result.error and result.code is None


def test_unknown_topology_raises_at_once():
    with scripted_server(["unused"]) as server, pytest.raises(ValueError, match="hexagonal"):
        asyncio.run(solve("hexagonal", make_problem(), make_runtime(server.base_url)))
    assert "single" in TEAMS
