"""The independent team through the real client: the vote decides the submitted program."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

from lcb.data.datasets import Selection
from lcb.data.problems import Problem
from lcb.data.samples import reference_solution
from lcb.runs.runner import run_batch
from lcb.teams import independent
from lcb.teams.options import TeamOptions
from lcb.teams.solving import TEAMS
from tests.helpers_agents import make_problem
from tests.helpers_runner import read_lines, run_config
from tests.helpers_teams import by_agent, fenced, requests_of, solve_one
from tests.scripted_server import Reply, scripted_server

PROGRAM = "n = int(input())\nfor i in range(n):\n    print(i * 2)"
SPACED = "n=int( input() )\n\nfor i in range(n) :\n    print(i*2)"
TWO_SPACES = "n = int(input())\nfor i in range(n):\n  print(i * 2)\n\n"
OTHER = "n = int(input())\nprint(n * 2)"


def agents(n: int) -> list[str]:
    return [f"coder_{i}" for i in range(n)]


def run_with(answers: dict[str, str | Reply], problem: Problem | None = None, **options):
    problem = problem or make_problem()
    script = by_agent(problem.id, list(answers), lambda agent, _: answers[agent])
    with scripted_server(script) as server:
        result = solve_one(server.base_url, "independent", problem,
                           options=TeamOptions(team_size=len(answers), **options))
        return result, server


def test_three_whitespace_variants_beat_one_different_program():
    answers = {"coder_0": fenced(OTHER), "coder_1": fenced(SPACED), "coder_2": fenced(PROGRAM),
               "coder_3": fenced(TWO_SPACES)}
    result, _ = run_with(answers)
    assert result.code == SPACED  # the winner as its first producer wrote it
    assert result.fields["vote"]["counts"] == [1, 3]
    assert result.fields["vote"]["votes"] == {"coder_0": 0, "coder_1": 1, "coder_2": 1,
                                              "coder_3": 1}
    assert result.fields["programs"]["coder_0"] == OTHER
    assert result.final_text == answers["coder_1"]


def test_tie_goes_to_the_lowest_index_producer():
    answers = {"coder_0": "No program from me.", "coder_1": fenced(OTHER),
               "coder_2": fenced(PROGRAM), "coder_3": fenced(TWO_SPACES),
               "coder_4": fenced(OTHER)}
    result, _ = run_with(answers)
    assert result.fields["vote"]["counts"] == [2, 2]
    assert result.code == OTHER and result.fields["vote"]["winner_agent"] == "coder_1"


def test_replicas_without_a_program_do_not_vote():
    answers = {"coder_0": "I give up.", "coder_1": "Still thinking.",
               "coder_2": Reply.error(400), "coder_3": fenced(OTHER)}
    result, _ = run_with(answers)
    assert result.code == OTHER and result.error is None
    assert result.fields["vote"]["abstained"] == ["coder_0", "coder_1", "coder_2"]
    assert list(result.fields["agent_errors"]) == ["coder_2"]


def test_no_program_anywhere_is_no_code_and_a_failed_replica_is_the_error():
    result, _ = run_with({"coder_0": "nothing", "coder_1": Reply.error(400)})
    assert result.code is None
    assert result.error and result.error.startswith("coder_1:")


def test_replicas_share_one_prompt_and_send_distinct_seeds():
    answers = {agent: fenced(OTHER) for agent in agents(4)}
    _, server = run_with(answers)
    bodies = server.chat_requests()
    assert len({body["seed"] for body in bodies}) == 4
    assert len({body["messages"][0]["content"] for body in bodies}) == 1


def test_masked_replicas_make_no_calls():
    answers = {agent: fenced(f"print({agent[-1]})") for agent in agents(4)}
    result, server = run_with(answers, active={"coder_1", "coder_3"})
    assert result.fields["agents_ran"] == ["coder_1", "coder_3"]
    assert len(server.chat_requests()) == 2
    assert result.code == "print(1)"


def test_the_graded_program_is_the_voted_one(tmp_path, monkeypatch):
    """One right program outvoted by three wrong ones scores 0; the reverse scores 1."""
    outvoted, majority = "lcbs_abc901_a", "lcbs_abc901_b"
    wrong = "print(0)"
    plans = {outvoted: [reference_solution(outvoted), wrong, wrong + "  ", "print( 0 )"],
             majority: [wrong, *[reference_solution(majority)] * 3]}
    scripts = {pid: by_agent(pid, agents(4), lambda agent, _, pid=pid:
                             fenced(plans[pid][int(agent[-1])])) for pid in plans}

    def script(request):
        replies = [s(request) for s in scripts.values()]
        return next((r for r in replies if r != "OK"), "OK")

    monkeypatch.setitem(TEAMS, "independent",
                        partial(independent.run, options=TeamOptions(team_size=4)))
    with scripted_server(script) as server:
        config = run_config(server.base_url, Path("sample"), tmp_path / "out",
                            topology="independent", selection=Selection(only=(outvoted, majority)))
        asyncio.run(run_batch(config, plain=True))
        assert not server.script_errors
        assert len(requests_of(server, lambda body: "seed" in body)) >= 8
    records = {r["id"]: r for r in read_lines(tmp_path / "out" / "predictions.jsonl")}
    assert records[outvoted]["em"] == 0 and records[majority]["em"] == 1
    assert records[outvoted]["predicted_code"] == wrong
    assert records[outvoted]["vote"]["counts"] == [1, 3]
    assert records[majority]["predicted_code"] == reference_solution(majority).strip()
