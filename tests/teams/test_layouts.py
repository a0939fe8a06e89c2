"""Team layouts: who is on each team at each size, their tools, masks, and team options."""

from __future__ import annotations

import pytest

from lcb.agents.prompts import load_role_prompt
from lcb.agents.tools import TOOL_NAME
from lcb.teams.formats import CommFormat
from lcb.teams.layouts import TEAM_SIZES, team_layout
from lcb.teams.options import TeamOptions

TOPOLOGIES = ("independent", "sequential", "centralized", "decentralized")


def test_sequential_stages_at_each_size():
    assert team_layout("sequential", 2).ids == ("coder", "debugger")
    assert team_layout("sequential", 4).ids == ("analyzer", "coder", "tester", "debugger")
    eight = ("requirements_parser", "analyzer", "algorithm_designer", "coder",
             "edge_case_thinker", "tester", "debugger", "code_reviewer")
    assert team_layout("sequential", 8).ids == eight
    ten = list(eight)
    ten.insert(ten.index("coder") + 1, "complexity_analyzer")
    ten.insert(ten.index("debugger") + 1, "optimizer")
    assert team_layout("sequential", 10).ids == tuple(ten)


@pytest.mark.parametrize("size", TEAM_SIZES)
def test_sequential_last_stage_writes_the_program(size):
    layout = team_layout("sequential", size)
    assert len(layout.agents) == size
    assert layout.agents[-1].role.writes_program


def test_centralized_manager_and_workers_at_each_size():
    assert team_layout("centralized", 2).ids == ("manager", "coder")
    assert team_layout("centralized", 4).ids == ("manager", "analyzer", "coder", "tester")
    eight = team_layout("centralized", 8).ids
    assert eight[4:] == ("design", "edge_case", "debug", "review")
    assert team_layout("centralized", 10).ids == (*eight, "complexity_analyzer", "optimizer")
    for size in TEAM_SIZES:
        assert len(team_layout("centralized", size).agents) == size


@pytest.mark.parametrize(("topology", "role"), [("independent", "coder"),
                                                ("decentralized", "debater")])
def test_replica_teams_have_distinct_ids_sharing_one_role(topology, role):
    layout = team_layout(topology, 5)
    assert layout.ids == tuple(f"{role}_{i}" for i in range(5))
    assert layout.roles == (role,)


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("size", TEAM_SIZES)
def test_python_exec_exactly_for_roles_whose_prompt_runs_code(topology, size):
    for agent in team_layout(topology, size).agents:
        prompt = load_role_prompt(topology, agent.role.name)  # every role has a seed prompt
        assert agent.role.runs_code == (TOOL_NAME in prompt), (topology, agent.role.name)


def test_mask_keeps_layout_order_and_rejects_unknown_ids():
    layout = team_layout("sequential", 4)
    assert [a.id for a in layout.active({"debugger", "analyzer"})] == ["analyzer", "debugger"]
    assert layout.active(None) == layout.agents
    assert layout.active(set()) == ()
    with pytest.raises(ValueError, match="'reviewer'.*analyzer, coder, tester, debugger"):
        layout.active({"reviewer"})
    with pytest.raises(TypeError):
        layout.active("coder")


def test_bad_topology_or_size_is_named():
    with pytest.raises(ValueError, match="'ring'"):
        team_layout("ring", 4)
    with pytest.raises(ValueError, match="2, 4, 8, 10; got 3"):
        team_layout("sequential", 3)
    with pytest.raises(ValueError, match="positive"):
        team_layout("independent", 0)
    assert len(team_layout("independent", 3).agents) == 3


def test_option_defaults_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("INDEPENDENT_N_AGENTS", "6")
    monkeypatch.setenv("DECENTRALIZED_N_AGENTS", "3")
    monkeypatch.setenv("DECENTRALIZED_N_ROUNDS", "5")
    options = TeamOptions()
    assert options.size_for("independent") == 6
    assert options.size_for("decentralized") == 3
    assert options.size_for("sequential") == 4
    assert options.rounds_for() == 5
    explicit = TeamOptions(team_size=2, rounds=1)
    assert (explicit.size_for("independent"), explicit.rounds_for()) == (2, 1)


def test_option_defaults_without_environment(monkeypatch):
    for name in ("INDEPENDENT_N_AGENTS", "DECENTRALIZED_N_AGENTS", "DECENTRALIZED_N_ROUNDS"):
        monkeypatch.delenv(name, raising=False)
    assert TeamOptions().size_for("decentralized") == 4
    assert TeamOptions().rounds_for() == 2


def test_bad_options_are_named(monkeypatch):
    monkeypatch.setenv("DECENTRALIZED_N_ROUNDS", "two")
    with pytest.raises(ValueError, match="DECENTRALIZED_N_ROUNDS"):
        TeamOptions().rounds_for()
    with pytest.raises(ValueError, match="team_size"):
        TeamOptions(team_size=0)
    with pytest.raises(ValueError, match="communication format 'xml'"):
        TeamOptions(communication="xml")
    with pytest.raises(TypeError):
        TeamOptions(active="coder_0")


def test_options_normalise_and_record():
    options = TeamOptions(communication="structured_soft", active=["coder_1", "coder_0"])
    assert options.communication is CommFormat.STRUCTURED_SOFT
    assert options.active == frozenset({"coder_0", "coder_1"})
    assert options.to_record() == {"team_size": None, "communication": "structured_soft",
                                   "active": ["coder_0", "coder_1"], "rounds": None}
