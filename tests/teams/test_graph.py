"""The team graph (edges per topology, helpers) and role I/O (hand-made and real transcripts)."""

from __future__ import annotations

import dataclasses
import json
from itertools import pairwise

import pytest

from lcb.agents.prompts import question_prompt
from lcb.optimize.graph import RoleTurn, TeamGraph, invocations, role_io, team_graph
from lcb.optimize.teamrun import TeamCell
from lcb.teams.centralized import TOOL
from lcb.teams.layouts import CENTRALIZED_WORKERS, SEQUENTIAL_STAGES, TEAM_SIZES
from lcb.teams.options import TeamOptions
from tests.helpers_agents import make_problem, solve_all
from tests.helpers_teams import by_agent, fenced, role_of, solve_one, user_text
from tests.scripted_server import (
    Reply,
    ToolCall,
    assistant_turns,
    failures,
    scripted_server,
    tool_results,
)

# ---------------------------------------------------------------- the graph


def test_sequential_is_the_chain_of_its_stages():
    graph = team_graph(TeamCell("sequential", 4))
    assert graph.kind == "chain"
    assert graph.roles == ("analyzer", "coder", "tester", "debugger")
    assert graph.edges == (("analyzer", "coder"), ("coder", "tester"), ("tester", "debugger"))
    assert graph.agents == {r: r for r in graph.roles}
    assert graph.parents("tester") == ("coder",) and graph.children("tester") == ("debugger",)
    assert graph.parents("analyzer") == () and graph.children("debugger") == ()
    assert graph.topological_order() == graph.roles


@pytest.mark.parametrize("size", TEAM_SIZES)
def test_every_sequential_size_chains_its_layout(size):
    graph = team_graph(TeamCell("sequential", size))
    assert graph.roles == SEQUENTIAL_STAGES[size] == TeamCell("sequential", size).roles
    assert graph.edges == tuple(pairwise(SEQUENTIAL_STAGES[size]))
    assert len(graph.edges) == size - 1


@pytest.mark.parametrize("size", TEAM_SIZES)
def test_centralized_is_a_star_from_the_manager(size):
    graph = team_graph(TeamCell("centralized", size))
    workers = CENTRALIZED_WORKERS[size]
    assert graph.kind == "star" and graph.roles == ("manager", *workers)
    assert graph.edges == tuple(("manager", w) for w in workers)
    assert graph.children("manager") == workers
    assert all(graph.parents(w) == ("manager",) and graph.children(w) == () for w in workers)
    assert graph.topological_order() == ("manager", *workers)


def test_centralized_two_has_one_edge():
    graph = team_graph(TeamCell("centralized", 2))
    assert graph.edges == (("manager", "coder"),)
    assert graph.agents == {"manager": "manager", "coder": "coder"}


@pytest.mark.parametrize(("topology", "role"), [("independent", "coder"),
                                                ("decentralized", "debater")])
def test_replica_teams_share_one_role_without_edges(topology, role):
    graph = team_graph(TeamCell(topology, 3))
    ids = tuple(f"{role}_{i}" for i in range(3))
    assert graph.kind == "shared" and graph.roles == (role,) and graph.edges == ()
    assert graph.agents == dict.fromkeys(ids, role)
    assert graph.agents_of(role) == ids
    assert graph.parents(role) == () == graph.children(role)
    assert graph.topological_order() == (role,)


def test_single_has_the_solver_alone():
    graph = team_graph(TeamCell("single"))
    assert (graph.kind, graph.roles, dict(graph.agents), graph.edges) == \
        ("single", ("solver",), {"solver": "solver"}, ())


def test_unknown_role_is_named():
    graph = team_graph(TeamCell("sequential", 2))
    with pytest.raises(ValueError, match=r"no role 'manager'.*coder, debugger"):
        graph.parents("manager")
    with pytest.raises(ValueError, match="no role 'x'"):
        graph.agents_of("x")


def test_cycles_and_stray_roles_are_refused():
    with pytest.raises(ValueError, match="cycle"):
        TeamGraph("t", ("a", "b"), {"a": "a", "b": "b"}, (("a", "b"), ("b", "a")), "chain")
    with pytest.raises(ValueError, match=r"\['c'\]"):
        TeamGraph("t", ("a", "b"), {"a": "a"}, (("a", "c"),), "chain")
    with pytest.raises(ValueError, match=r"\['z'\]"):
        TeamGraph("t", ("a",), {"a": "z"}, (), "single")


def test_topological_ties_keep_team_order():
    graph = TeamGraph("t", ("a", "b", "c", "d"), {}, (("c", "a"), ("b", "d")), "chain")
    assert graph.topological_order() == ("b", "c", "a", "d")


def test_the_graph_is_frozen_hashable_and_json_able():
    graph = team_graph(TeamCell("centralized", 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.kind = "chain"  # type: ignore[misc]
    with pytest.raises(TypeError):
        graph.agents["manager"] = "coder"  # type: ignore[index]
    assert graph == team_graph(TeamCell("centralized", 4))
    assert hash(graph) == hash(team_graph(TeamCell("centralized", 4)))
    record = json.loads(json.dumps(graph.to_record()))
    assert record["edges"][0] == ["manager", "analyzer"] and record["kind"] == "star"
    rebuilt = TeamGraph(record["topology"], tuple(record["roles"]), record["agents"],
                        tuple(map(tuple, record["edges"])), record["kind"])
    assert rebuilt == graph


# ---------------------------------------------------------------- role I/O, hand-made


def entry(source, kind, content, *, role=None, calls=(), **step):
    record = {"source": source, "role": role or source.rsplit("_", 1)[0], "type": kind,
              "content": content, **step}
    if kind == "assistant":
        record["tool_calls"] = [{"id": f"c{i}", "name": n, "args": a}
                                for i, (n, a) in enumerate(calls)]
    return record


def run_of(source, user, answer, *, role=None, **step):
    return [entry(source, "system", "SYS", role=role, **step),
            entry(source, "user", user, role=role, **step),
            entry(source, "assistant", answer, role=role, **step)]


def test_a_centralized_transcript_splits_per_delegation():
    delegations = [("delegate", {"worker": "coder", "instruction": "write"}),
                   ("delegate", {"worker": "coder", "instruction": "fix"})]
    manager = [entry("manager", "system", "SYS", delegation=0),
               entry("manager", "user", "Q", delegation=0),
               entry("manager", "assistant", "", calls=delegations[:1], delegation=0),
               entry("manager", "tool", "v1", delegation=0),
               entry("manager", "assistant", "thinking", calls=delegations[1:], delegation=0),
               entry("manager", "tool", "v2", delegation=0),
               entry("manager", "assistant", "FINAL", delegation=0)]
    transcript = [*manager, *run_of("coder", "Q+write", "v1", delegation=1),
                  *run_of("coder", "Q+fix", "v2", delegation=2)]
    io = role_io(transcript, team_graph(TeamCell("centralized", 4)))
    assert io == {
        "manager": [RoleTurn("manager", "Q", "FINAL", tuple(delegations), ("v1", "v2"), 0)],
        "analyzer": [],
        "coder": [RoleTurn("coder", "Q+write", "v1", step=1),
                  RoleTurn("coder", "Q+fix", "v2", step=2)],
        "tester": [],
    }


def test_a_debate_gives_each_peer_one_turn_per_round():
    transcript = [*run_of("debater_0", "Q", "A0", round=0),
                  *run_of("debater_1", "Q", "B0", round=0),
                  *run_of("debater_0", "Q+B0", "A1", round=1),
                  *run_of("debater_1", "Q+A0", "B1", round=1)]
    io = role_io(transcript, team_graph(TeamCell("decentralized", 2)))
    assert io == {"debater": [RoleTurn("debater_0", "Q", "A0", step=0),
                              RoleTurn("debater_1", "Q", "B0", step=0),
                              RoleTurn("debater_0", "Q+B0", "A1", step=1),
                              RoleTurn("debater_1", "Q+A0", "B1", step=1)]}


def test_boundaries_without_system_entries():
    # A step change, and a user message after an answer, each start a new invocation.
    transcript = [entry("coder", "user", "first", stage=0), entry("coder", "assistant", "one",
                                                                 stage=0),
                  entry("coder", "user", "second", stage=0), entry("coder", "assistant", "two",
                                                                  stage=0),
                  entry("coder", "user", "third", stage=3), entry("coder", "assistant", "3",
                                                                 stage=3)]
    assert [len(run) for run in invocations(transcript)] == [2, 2, 2]
    turns = role_io(transcript)["coder"]
    assert [(t.input, t.output, t.step) for t in turns] == \
        [("first", "one", 0), ("second", "two", 0), ("third", "3", 3)]


def test_a_run_that_failed_before_answering_ends_at_the_next_boundary():
    # No answer in between: the next run is told apart by its step, or by its system entry.
    by_step = [entry("debater_0", "user", "r0", round=0), entry("debater_0", "user", "r1", round=1),
               entry("debater_0", "assistant", "A1", round=1)]
    assert [(t.input, t.output, t.step) for t in role_io(by_step)["debater"]] == \
        [("r0", "", 0), ("r1", "A1", 1)]
    by_system = [entry("solver", "system", "S"), entry("solver", "user", "one"),
                 entry("solver", "system", "S"), entry("solver", "user", "two"),
                 entry("solver", "assistant", "A")]
    assert role_io(by_system)["solver"] == [RoleTurn("solver", "one", ""),
                                            RoleTurn("solver", "two", "A")]


def test_a_run_without_an_answer_has_empty_output():
    # The agent's model call failed (no assistant message), or it stopped on a tool call.
    failed = [entry("solver", "system", "SYS"), entry("solver", "user", "Q")]
    assert role_io(failed)["solver"] == [RoleTurn("solver", "Q", "")]
    capped = [*failed, entry("solver", "assistant", "trying",
                             calls=[("python_exec", {"code": "1"})]),
              entry("solver", "tool", "out")]
    assert role_io(capped)["solver"] == \
        [RoleTurn("solver", "Q", "", (("python_exec", {"code": "1"}),), ("out",))]


def test_without_a_graph_roles_come_in_order_of_first_use():
    transcript = [*run_of("tester", "t", "T", stage=1), *run_of("coder", "c", "C", stage=0)]
    assert list(role_io(transcript)) == ["tester", "coder"]
    assert role_io([]) == {}


def test_a_transcript_of_another_team_is_refused():
    graph = team_graph(TeamCell("sequential", 2))
    with pytest.raises(ValueError, match=r"'manager' is not on the sequential team.*coder"):
        role_io(run_of("manager", "Q", "A"), graph)
    with pytest.raises(ValueError, match="role 'tester'.*gives it 'coder'"):
        role_io(run_of("coder", "Q", "A", role="tester"), graph)


# ---------------------------------------------------------------- role I/O, real transcripts

EXEC = {"code": "print(int(input()) * 2)", "stdin": "2\n"}


def served(topology, script, **options):
    with scripted_server(script) as server:
        result = solve_one(server.base_url, topology, make_problem(),
                           options=TeamOptions(**options) if options else None)
        assert not server.script_errors
        return result, server.chat_requests()


def first_request(requests, predicate):
    return next(r for r in requests if predicate(r) and assistant_turns(r) == 0)


def test_real_sequential_run():
    stages = SEQUENTIAL_STAGES[4]

    def script(request):
        role = role_of(request, "sequential", stages)
        if role == "coder" and assistant_turns(request) == 0:
            return Reply.calls(ToolCall("python_exec", EXEC), content="let me run it")
        return fenced("print(2 * int(input()))", f"{role.upper()}-SAYS")

    result, requests = served("sequential", script, team_size=4)
    io = role_io(result.transcript, team_graph(TeamCell("sequential", 4)))
    assert list(io) == list(stages) and all(len(turns) == 1 for turns in io.values())
    for index, stage in enumerate(stages):
        [turn] = io[stage]
        sent = first_request(requests, lambda r, s=stage: role_of(r, "sequential", stages) == s)
        assert (turn.agent, turn.step, turn.input) == (stage, index, user_text(sent))
        assert turn.output == result.fields["outputs"][stage]
        assert turn.output.startswith(f"{stage.upper()}-SAYS")
    assert "Work of the earlier stages" not in io["analyzer"][0].input
    assert all(f"{s.upper()}-SAYS" in io["debugger"][0].input for s in stages[:3])
    coder = io["coder"][0]
    assert coder.tool_calls == (("python_exec", EXEC),)
    last_coder = [r for r in requests if role_of(r, "sequential", stages) == "coder"][-1]
    assert coder.tool_results == tuple(tool_results(last_coder)) and len(coder.tool_results) == 1
    assert io["tester"][0].tool_calls == ()


def test_real_centralized_run_one_turn_per_delegation():
    roles = ("manager", *CENTRALIZED_WORKERS[4])
    calls = [{"worker": "coder", "instruction": "WRITE-IT"},
             {"worker": "tester", "instruction": "TEST-IT"},
             {"worker": "coder", "instruction": "FIX-IT"}]
    manager_turns = [Reply.calls(ToolCall(TOOL, calls[0]), ToolCall(TOOL, calls[1])),
                     Reply.calls(ToolCall(TOOL, calls[2])), fenced("print(2 * int(input()))")]

    def script(request):
        role = role_of(request, "centralized", roles)
        if role == "manager":
            return manager_turns[min(assistant_turns(request), 2)]
        task = user_text(request).split("## Task from the manager")[1].strip()
        return f"{role} did {task}"

    result, requests = served("centralized", script, team_size=4)
    io = role_io(result.transcript, team_graph(TeamCell("centralized", 4)))
    [manager] = io["manager"]
    manager_requests = [r for r in requests if role_of(r, "centralized", roles) == "manager"]
    assert manager.input == user_text(manager_requests[0]) == question_prompt(make_problem())
    assert manager.tool_calls == tuple((TOOL, c) for c in calls)
    assert manager.tool_results == tuple(tool_results(manager_requests[-1]))
    assert manager.tool_results == ("coder did WRITE-IT", "tester did TEST-IT", "coder did FIX-IT")
    assert manager.output == result.final_text and manager.step == 0
    assert [(t.agent, t.step, t.output) for t in io["coder"]] == \
        [("coder", 1, "coder did WRITE-IT"), ("coder", 3, "coder did FIX-IT")]
    assert [(t.step, t.output) for t in io["tester"]] == [(2, "tester did TEST-IT")]
    assert io["analyzer"] == []
    worker_inputs = {user_text(r) for r in requests
                     if role_of(r, "centralized", roles) != "manager"}
    assert {t.input for t in io["coder"] + io["tester"]} == worker_inputs
    assert io["coder"][1].input.endswith("## Task from the manager\n\nFIX-IT\n")
    logged = [row["reply"] for row in result.fields["delegations"] if row["worker"] == "coder"]
    assert [t.output for t in io["coder"]] == logged


def test_real_masked_centralized_run_leaves_inactive_roles_empty():
    roles = ("manager", *CENTRALIZED_WORKERS[4])
    turns = [Reply.calls(ToolCall(TOOL, {"worker": "coder", "instruction": "GO"})),
             fenced("print(1)")]

    def script(request):
        if role_of(request, "centralized", roles) == "manager":
            return turns[min(assistant_turns(request), 1)]
        return "coder reply"

    result, _ = served("centralized", script, team_size=4, active={"manager", "coder"})
    io = role_io(result.transcript, team_graph(TeamCell("centralized", 4)))
    assert {role: len(t) for role, t in io.items()} == \
        {"manager": 1, "analyzer": 0, "coder": 1, "tester": 0}


def test_real_debate_one_turn_per_peer_and_round():
    problem, peers = make_problem(), [f"debater_{i}" for i in range(3)]

    def reply(agent, request):
        round_ = 1 if "## Debate round" in user_text(request) else 0
        return fenced(f"print('{agent}')", f"ANSWER-{agent}-R{round_}")

    result, requests = served("decentralized", by_agent(problem.id, peers, reply),
                              team_size=3, rounds=2)
    [turns] = role_io(result.transcript, team_graph(TeamCell("decentralized", 3))).values()
    assert [(t.agent, t.step) for t in turns] == [(p, r) for r in (0, 1) for p in peers]
    assert [t.output.splitlines()[0] for t in turns] == \
        [f"ANSWER-{p}-R{r}" for r in (0, 1) for p in peers]
    assert {t.input for t in turns} == {user_text(r) for r in requests}
    for turn in turns[3:]:
        others = turn.input.split("### The other programmers' answers")[1]
        assert all(f"ANSWER-{p}-R0" in others for p in peers if p != turn.agent)
    assert {t.agent: t.output for t in turns[3:]} == result.fields["outputs"]


def test_real_independent_run():
    problem, coders = make_problem(), [f"coder_{i}" for i in range(3)]
    script = by_agent(problem.id, coders, lambda agent, _: fenced("print(1)", f"BY-{agent}"))
    result, _ = served("independent", script, team_size=3)
    io = role_io(result.transcript, team_graph(TeamCell("independent", 3)))
    assert [(t.agent, t.step, t.input, t.output.splitlines()[0]) for t in io["coder"]] == \
        [(c, 0, question_prompt(problem), f"BY-{c}") for c in coders]


def test_real_single_run():
    problem = make_problem()
    solver_turns = [Reply.calls(ToolCall("python_exec", EXEC)), fenced("print(1)", "SOLVED")]
    with scripted_server(lambda request: solver_turns[min(assistant_turns(request), 1)]) as server:
        [result], _ = solve_all(server.base_url, [problem], topology="single")
        requests = server.chat_requests()
    [turn] = role_io(result.transcript, team_graph(TeamCell("single")))["solver"]
    assert (turn.agent, turn.step, turn.input) == ("solver", None, question_prompt(problem))
    assert turn.tool_calls == (("python_exec", EXEC),)
    assert turn.tool_results == tuple(tool_results(requests[-1]))
    assert turn.output == result.final_text and turn.output.startswith("SOLVED")


def test_real_failed_stage_has_input_and_no_output():
    stages = SEQUENTIAL_STAGES[2]
    fails = iter(failures(50))

    def script(request):
        if role_of(request, "sequential", stages) == "coder":
            return next(fails)
        return fenced("print(1)", "DEBUGGED")

    result, requests = served("sequential", script, team_size=2)
    io = role_io(result.transcript, team_graph(TeamCell("sequential", 2)))
    assert io["coder"] == [RoleTurn("coder", user_text(requests[0]), "", step=0)]
    assert result.fields["agent_errors"].keys() == {"coder"}
    assert "(this stage failed)" in io["debugger"][0].input
    assert io["debugger"][0].output.startswith("DEBUGGED")
