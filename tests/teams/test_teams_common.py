"""Properties every multi-agent team shares: tokens add up, compliance is measured, masks hold."""

from __future__ import annotations

import asyncio

import pytest

from lcb.agents.prompts import load_role_prompt
from lcb.teams import centralized
from lcb.teams.centralized import TOOL
from lcb.teams.common import TeamContext
from lcb.teams.formats import CommFormat, format_contract
from lcb.teams.layouts import team_layout
from lcb.teams.multi import Team
from lcb.teams.options import TeamOptions
from tests.helpers_agents import make_problem, make_runtime
from tests.helpers_teams import (
    MODULES,
    TOPOLOGIES,
    fenced,
    report,
    role_of,
    seed_agents,
    solve_one,
    system_text,
)
from tests.scripted_server import Reply, ToolCall, assistant_turns, scripted_server

PROGRAM = "print(2 * int(input()))"


def agent_of(request, topology: str, size: int) -> str:
    """The agent id behind a request: by seed for replica teams, by role otherwise."""
    layout = team_layout(topology, size)
    if topology in ("independent", "decentralized"):
        return seed_agents(make_problem().id, layout.ids)[request["seed"]]
    return role_of(request, topology, layout.ids)


def answer(topology: str, size: int, text_for=lambda agent: fenced(PROGRAM), **reply_kw):
    """A script: centralized managers delegate to every worker once, then answer."""
    workers = team_layout(topology, size).ids[1:]

    def script(request):
        agent = agent_of(request, topology, size)
        turn = assistant_turns(request)
        if topology == "centralized" and agent == "manager" and turn == 0:
            calls = [ToolCall(TOOL, {"worker": w, "instruction": "help"}) for w in workers]
            return Reply.calls(*calls, **reply_kw)
        return Reply(text_for(agent), **reply_kw)

    return script


def run(topology: str, script, **options):
    with scripted_server(script) as server:
        result = solve_one(server.base_url, topology, make_problem(),
                           options=TeamOptions(**options))
        assert not server.script_errors
        return result, server.chat_requests()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_per_role_and_per_agent_tokens_add_up_to_the_team_total(topology):
    result, requests = run(topology, answer(topology, 4, prompt_tokens=11, completion_tokens=3),
                           team_size=4)
    calls = len(requests)
    assert (result.prompt_tokens, result.completion_tokens) == (11 * calls, 3 * calls)
    assert result.n_llm_calls == calls
    for usage in (result.usage_by_role, result.fields["usage_by_agent"]):
        assert sum(u["prompt_tokens"] for u in usage.values()) == result.prompt_tokens
        assert sum(u["completion_tokens"] for u in usage.values()) == result.completion_tokens
        assert sum(u["n_llm_calls"] for u in usage.values()) == result.n_llm_calls
    assert set(result.fields["usage_by_agent"]) == set(result.fields["agents_ran"])


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_an_empty_team_abstains_without_calls(topology):
    result, requests = run(topology, answer(topology, 4), team_size=4, active=set())
    assert requests == []
    assert result.code is None and result.error is None and result.n_llm_calls == 0
    assert result.fields["agents_ran"] == [] and result.fields["abstained"]


@pytest.mark.parametrize(("topology", "active"), [
    ("independent", {"coder_0", "coder_2"}),
    ("decentralized", {"debater_1", "debater_3"}),
    ("sequential", {"analyzer", "debugger"}),
    ("centralized", {"manager", "tester"}),
])
def test_masked_runs_make_no_calls_for_inactive_agents(topology, active):
    result, requests = run(topology, answer(topology, 4), team_size=4, active=active)
    called = {agent_of(r, topology, 4) for r in requests}
    assert called == active
    assert set(result.fields["agents_ran"]) == active
    assert result.code == PROGRAM


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("fmt", [CommFormat.SEMI_STRUCTURED, CommFormat.STRUCTURED_SOFT])
def test_compliance_is_measured_on_what_agents_wrote(topology, fmt):
    complying = set(team_layout(topology, 4).ids[::2])  # every other agent follows the format

    def text_for(agent):
        return (report(fmt) if agent in complying else "Plain words. ") + fenced(PROGRAM)

    result, requests = run(topology, answer(topology, 4, text_for), team_size=4,
                           communication=fmt)
    outputs = result.fields["outputs"]
    expected = sum(text.startswith(report(fmt)) for text in outputs.values())
    measured = result.fields["compliance"]
    rounds = 2 if topology == "decentralized" else 1
    assert measured["messages"] == 4 * rounds
    assert measured["compliant"] == expected * rounds == 2 * rounds
    assert measured["share"] == 0.5
    assert all(format_contract(fmt) in system_text(r) for r in requests)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_freeform_adds_no_contract_and_counts_everything_compliant(topology):
    result, requests = run(topology, answer(topology, 2), team_size=2)
    assert result.fields["compliance"]["share"] == 1.0
    for request in requests:
        system = system_text(request)
        assert "Communication format" not in system
        role = role_of(request, topology, team_layout(topology, 2).roles)
        assert system.startswith(load_role_prompt(topology, role).split("{")[0])


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_transcript_is_source_tagged_with_what_each_agent_saw(topology):
    result, _ = run(topology, answer(topology, 4), team_size=4)
    sources = {m["source"] for m in result.transcript}
    assert sources == set(result.fields["agents_ran"])
    for agent in sources:
        kinds = [m["type"] for m in result.transcript if m["source"] == agent]
        assert kinds[:2] == ["system", "user"] and "assistant" in kinds



def offline_context(topology: str) -> TeamContext:
    """A context whose runtime points nowhere: for building graphs and failing before a call."""
    runtime = make_runtime("http://127.0.0.1:9/v1")
    return TeamContext(problem=make_problem(), team=topology, runtime=runtime)


def graph_nodes(topology: str, **options) -> set[str]:
    ctx = offline_context(topology)
    team = Team.resolve(topology, TeamOptions(**options))
    if topology == "centralized":
        graph = centralized.build()
    else:
        graph = MODULES[topology].build(ctx, team)
    graph.compile()  # an uncompiled, valid graph
    return set(graph.nodes)


def test_builders_return_graphs_whose_nodes_are_the_team():
    assert graph_nodes("independent", team_size=3) == {"coder_0", "coder_1", "coder_2", "vote"}
    assert graph_nodes("sequential", team_size=4) == {"analyzer", "coder", "tester", "debugger"}
    assert graph_nodes("decentralized", team_size=2, rounds=3) == {
        "round_0", "round_1", "round_2", "vote"}
    assert graph_nodes("centralized", team_size=4) == {"model", "tools"}


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_bundle_role_the_team_lacks_is_named(topology):
    ctx = offline_context(topology)
    with pytest.raises(ValueError, match="'debuger'"):
        asyncio.run(MODULES[topology].run(ctx, bundle={"debuger": "text"}))


@pytest.mark.parametrize(("topology", "role"), [("independent", "coder"),
                                                ("decentralized", "debater"),
                                                ("centralized", "manager")])
def test_a_bundle_prompt_reaches_every_agent_of_its_role(topology, role):
    bundle = {role: "CUSTOM PROMPT. Team:\n{workers}" if role == "manager" else "CUSTOM PROMPT."}
    with scripted_server([fenced(PROGRAM)]) as server:
        solve_one(server.base_url, topology, make_problem(), bundle=bundle,
                  options=TeamOptions(team_size=2))
        systems = [system_text(r) for r in server.chat_requests()]
    assert systems and all(s.startswith("CUSTOM PROMPT.") for s in systems)
    if role == "manager":
        assert systems[0].startswith("CUSTOM PROMPT. Team:\n- coder: ")


def test_seed_prompts_are_read_once_per_batch_and_a_bundle_needs_no_file(monkeypatch):
    from lcb.teams import common

    reads: list[tuple[str, str]] = []

    def counting(team: str, role: str) -> str:
        reads.append((team, role))
        return f"seed text of {role}"

    monkeypatch.setattr(common, "load_role_prompt", counting)
    runtime = make_runtime("http://127.0.0.1:9/v1")
    prompts = [TeamContext(problem=make_problem(qid), team="single", runtime=runtime)
               .system_prompt("solver") for qid in ("P_1", "P_2", "P_3")]
    bundled = TeamContext(problem=make_problem(), team="single",
                          runtime=runtime).system_prompt("solver", {"solver": "tuned"})
    assert reads == [("single", "solver")]
    assert all(p.startswith("seed text of solver") for p in prompts)
    assert bundled.startswith("tuned")
    fresh = make_runtime("http://127.0.0.1:9/v1")  # a new batch reads the file again
    TeamContext(problem=make_problem(), team="single", runtime=fresh).system_prompt("solver")
    assert len(reads) == 2
