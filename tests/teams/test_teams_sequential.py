"""The sequential pipeline through the real client: stage order, handoffs, the graded stage."""

from __future__ import annotations

import pytest

from lcb.agents.prompts import OUTPUT_CONTRACT
from lcb.data.datasets import load_problems
from lcb.data.samples import reference_solution
from lcb.grading import grade
from lcb.teams.formats import format_contract
from lcb.teams.layouts import SEQUENTIAL_STAGES
from lcb.teams.options import TeamOptions
from tests.helpers_agents import make_problem
from tests.helpers_teams import fenced, role_of, solve_one, system_text, user_text
from tests.scripted_server import scripted_server

ROLES = SEQUENTIAL_STAGES[10]


def pipeline(reply, problem=None, **options):
    """Run the pipeline; `reply(role, request)` answers. Returns the result and the requests."""
    problem = problem or make_problem()
    with scripted_server(lambda req: reply(role_of(req, "sequential", ROLES), req)) as server:
        result = solve_one(server.base_url, "sequential", problem,
                           options=TeamOptions(**options))
        assert not server.script_errors
        return result, server.chat_requests()


@pytest.mark.parametrize("size", [8, 10])
def test_the_final_stage_is_the_one_graded(size):
    problem = next(p for p in load_problems("sample").problems if p.id == "lcbs_abc901_a")
    last = SEQUENTIAL_STAGES[size][-1]

    def reply(role, _):  # every stage writes a program; only the last stage's is right
        return fenced(reference_solution(problem.id) if role == last else f"print('{role}')")

    result, requests = pipeline(reply, problem, team_size=size)
    assert [role_of(r, "sequential", ROLES) for r in requests] == list(SEQUENTIAL_STAGES[size])
    assert result.fields["submitted_by"] == last == "code_reviewer"
    assert grade(problem, result.code).em == 1
    earlier = result.fields["stages"][-2]
    assert grade(problem, earlier["code"]).em == 0  # the stage before would have failed


def test_without_a_last_program_the_latest_earlier_one_is_submitted():
    def reply(role, _):
        if role in ("code_reviewer", "edge_case_thinker"):
            return "Looks fine to me."
        return fenced(f"print('{role}')")

    result, _ = pipeline(reply, team_size=10)
    assert result.code == "print('optimizer')" and result.fields["submitted_by"] == "optimizer"


def test_each_stage_sees_every_earlier_stage_as_written():
    long_text = "analysis " + "x" * 6000 + " <end of analysis>"

    def reply(role, _):
        return long_text if role == "analyzer" else fenced("print(1)", f"{role} says hi  ")

    _, requests = pipeline(reply, team_size=4)
    debugger = user_text(requests[-1])
    assert long_text in debugger
    assert "coder says hi  \n```python\nprint(1)\n```" in debugger
    assert debugger.index("Stage 1: analyzer") < debugger.index("Stage 3: tester")
    assert "Work of the earlier stages" not in user_text(requests[0])


def test_contracts_format_for_every_stage_output_for_program_writers():
    _, requests = pipeline(lambda role, _: fenced("print(1)"), team_size=4,
                           communication="semi_structured")
    contract = format_contract("semi_structured")
    has_output = {role_of(r, "sequential", ROLES): OUTPUT_CONTRACT in system_text(r)
                  for r in requests}
    assert all(contract in system_text(r) for r in requests)
    assert has_output == {"analyzer": False, "coder": True, "tester": True, "debugger": True}


def test_masked_stages_are_skipped_and_the_last_active_one_answers():
    result, requests = pipeline(lambda role, _: fenced(f"print('{role}')"), team_size=4,
                                active={"coder", "tester"})
    assert [role_of(r, "sequential", ROLES) for r in requests] == ["coder", "tester"]
    assert result.code == "print('tester')"
    assert result.fields["agents_ran"] == ["coder", "tester"]


def test_a_lone_analysis_stage_gets_the_output_contract():
    result, requests = pipeline(lambda role, _: fenced("print(7)"), team_size=4,
                                active={"analyzer"})
    assert len(requests) == 1 and OUTPUT_CONTRACT in system_text(requests[0])
    assert result.code == "print(7)"


def test_bundle_replaces_a_stage_prompt():
    problem = make_problem()
    bundle = {"tester": "CUSTOM TESTER PROMPT"}
    with scripted_server([fenced("print(1)")]) as server:
        solve_one(server.base_url, "sequential", problem, bundle=bundle,
                  options=TeamOptions(team_size=4))
        systems = [system_text(r) for r in server.chat_requests()]
    assert systems[2].startswith("CUSTOM TESTER PROMPT")
    assert sum(s.startswith("CUSTOM") for s in systems) == 1
