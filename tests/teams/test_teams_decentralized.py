"""The decentralized debate through the real client: who sees what, rounds, the final vote."""

from __future__ import annotations

from lcb.teams.options import TeamOptions
from tests.helpers_agents import make_problem
from tests.helpers_teams import by_agent, fenced, seed_agents, solve_one, user_text
from tests.scripted_server import scripted_server

PEERS = [f"debater_{i}" for i in range(3)]


def round_of(request) -> int:
    text = user_text(request)
    marker = "## Debate round "
    return int(text.split(marker)[1].split()[0]) - 1 if marker in text else 0


def debate(reply, n_peers: int = 3, **options):
    """Run a debate where `reply(agent, round, request)` answers; returns result and requests."""
    problem = make_problem()
    peers = [f"debater_{i}" for i in range(n_peers)]
    script = by_agent(problem.id, peers, lambda agent, req: reply(agent, round_of(req), req))
    with scripted_server(script) as server:
        result = solve_one(server.base_url, "decentralized", problem,
                           options=TeamOptions(team_size=n_peers, **options))
        assert not server.script_errors
        return result, server.chat_requests()


def test_peers_receive_the_other_peers_previous_answers():
    def reply(agent, round_, _):
        return fenced(f"print('{agent}')", f"ANSWER-{agent}-R{round_}")

    result, requests = debate(reply, rounds=3)
    assert result.fields["n_rounds"] == 3 and result.n_llm_calls == 9
    seeds = seed_agents(make_problem().id, PEERS)
    for request in requests:
        agent, round_, text = seeds[request["seed"]], round_of(request), user_text(request)
        if round_ == 0:
            assert "ANSWER-" not in text
            continue
        own, others = text.split("### The other programmers' answers in the previous round")
        assert f"ANSWER-{agent}-R{round_ - 1}" in own
        for peer in PEERS:
            if peer != agent:
                assert f"ANSWER-{peer}-R{round_ - 1}" in others
        assert f"ANSWER-{agent}" not in others
        assert f"-R{round_}" not in text  # nobody sees answers of the round being played


def test_the_vote_is_over_final_round_programs():
    def reply(agent, round_, _):
        if round_ == 0:
            return fenced(f"print('{agent}')")
        return fenced("print('agreed')" if agent != "debater_0" else "print('stubborn')")

    result, _ = debate(reply)
    assert result.code == "print('agreed')"
    assert result.fields["rounds"][0]["debater_2"] == "print('debater_2')"
    assert result.fields["programs"] == {"debater_0": "print('stubborn')",
                                         "debater_1": "print('agreed')",
                                         "debater_2": "print('agreed')"}
    assert result.fields["vote"]["counts"] == [1, 2]


def test_rounds_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("DECENTRALIZED_N_ROUNDS", "3")
    monkeypatch.setenv("DECENTRALIZED_N_AGENTS", "2")
    problem = make_problem()
    with scripted_server([fenced("print(1)")]) as server:
        result = solve_one(server.base_url, "decentralized", problem)
    assert result.fields["n_rounds"] == 3 and result.n_llm_calls == 6
    assert result.fields["agents"] == ["debater_0", "debater_1"]


def test_a_lone_peer_does_not_debate_itself():
    result, requests = debate(lambda agent, round_, _: fenced("print(1)"),
                              active={"debater_1"})
    assert len(requests) == 1 and result.fields["n_rounds"] == 1
    assert result.fields["agents_ran"] == ["debater_1"] and result.code == "print(1)"


def test_masked_peers_are_neither_called_nor_shown():
    def reply(agent, round_, _):
        return fenced(f"print('{agent}')", f"ANSWER-{agent}-R{round_}")

    result, requests = debate(reply, n_peers=4, active={"debater_0", "debater_3"})
    assert len(requests) == 4
    assert result.fields["agents_ran"] == ["debater_0", "debater_3"]
    assert not any("debater_1" in user_text(r) or "debater_2" in user_text(r) for r in requests)
