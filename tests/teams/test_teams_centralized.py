"""The centralized team through the real client: workers named, delegation, errors, masks."""

from __future__ import annotations

import pytest

from lcb.teams.centralized import TOOL, turn_cap
from lcb.teams.layouts import CENTRALIZED_WORKERS
from lcb.teams.options import TeamOptions
from tests.helpers_agents import make_problem
from tests.helpers_teams import fenced, role_of, solve_one, system_text, user_text
from tests.scripted_server import Reply, ToolCall, assistant_turns, scripted_server, tool_results

ALL_ROLES = ("manager", *CENTRALIZED_WORKERS[10])
FINAL = "print(2 * int(input()))"


def listed_workers(system: str) -> list[str]:
    block = system.split("Your workers:\n", 1)[1].split("\n\n", 1)[0]
    return [line[2:].split(":")[0] for line in block.splitlines()]


def team(manager_turns, worker_reply=lambda role, req: fenced(f"print('{role}')"), **options):
    """Run the team: the manager's n-th turn answers `manager_turns[n]` (the last repeats)."""
    def script(request):
        role = role_of(request, "centralized", ALL_ROLES)
        if role != "manager":
            return worker_reply(role, request)
        return manager_turns[min(assistant_turns(request), len(manager_turns) - 1)]

    with scripted_server(script) as server:
        result = solve_one(server.base_url, "centralized", make_problem(),
                           options=TeamOptions(**options))
        assert not server.script_errors
        return result, server.chat_requests()


def delegate(worker: str, instruction: str = "do your part") -> Reply:
    return Reply.calls(ToolCall(TOOL, {"worker": worker, "instruction": instruction}))


def roles_called(requests) -> list[str]:
    return [role_of(r, "centralized", ALL_ROLES) for r in requests]


@pytest.mark.parametrize("size", [2, 10])
def test_the_manager_sees_exactly_its_workers(size):
    _, requests = team([fenced(FINAL)], team_size=size)
    [manager] = requests
    assert listed_workers(system_text(manager)) == list(CENTRALIZED_WORKERS[size])
    [tool] = manager["tools"]
    assert tool["function"]["name"] == TOOL
    assert set(tool["function"]["parameters"]["properties"]) == {"worker", "instruction"}


def test_a_worker_gets_the_instruction_and_its_reply_returns_to_the_manager():
    turns = [delegate("tester", "TEST-THIS-PROGRAM please"), fenced(FINAL)]
    result, requests = team(turns, worker_reply=lambda role, req: "TESTER-REPORT all good")
    worker = next(r for r in requests if roles_called([r]) == ["tester"])
    assert "TEST-THIS-PROGRAM please" in user_text(worker)
    assert make_problem().statement in user_text(worker)
    assert tool_results(requests[-1]) == ["TESTER-REPORT all good"]
    assert result.code == FINAL and result.fields["submitted_by"] == "manager"
    assert result.fields["delegations"][0]["reply"] == "TESTER-REPORT all good"
    sources = {(m["source"], m["delegation"]) for m in result.transcript}
    assert sources == {("manager", 0), ("tester", 1)}


def test_unknown_worker_and_malformed_call_are_error_messages():
    turns = [delegate("optimizer"), Reply.calls(ToolCall(TOOL, "{not json")), fenced(FINAL)]
    result, requests = team(turns)
    first, second = tool_results(requests[-1])
    assert first.startswith("error:") and "'optimizer'" in first
    assert "analyzer, coder, tester" in first
    assert second.startswith("error:") and "not valid JSON" in second
    assert result.code == FINAL and result.error is None
    assert roles_called(requests) == ["manager"] * 3


def test_an_inactive_worker_cannot_be_reached():
    turns = [delegate("analyzer"), fenced(FINAL)]
    _, requests = team(turns, active={"manager", "coder"})
    assert listed_workers(system_text(requests[0])) == ["coder"]
    assert roles_called(requests) == ["manager", "manager"]
    assert "there is no worker 'analyzer'" in tool_results(requests[-1])[0]


def test_a_manager_only_team_answers_alone():
    result, requests = team([fenced(FINAL)], active={"manager"})
    assert len(requests) == 1 and "tools" not in requests[0]
    assert result.code == FINAL and result.fields["agents_ran"] == ["manager"]


def test_without_the_manager_the_team_abstains():
    result, requests = team([fenced(FINAL)], active={"coder", "tester"})
    assert requests == [] and result.code is None and result.error is None
    assert result.n_llm_calls == 0 and result.fields["abstained"]


@pytest.mark.parametrize("size", [2, 4])
def test_turn_cap_scales_with_workers_and_a_worker_program_is_the_fallback(size):
    result, requests = team([delegate("coder")], team_size=size)
    manager_calls = roles_called(requests).count("manager")
    assert manager_calls == turn_cap(size - 1) and result.fields["hit_turn_cap"]
    assert result.code == "print('coder')" and result.fields["submitted_by"] == "coder"
