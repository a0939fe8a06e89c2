"""DAG-Shapley's reuse of intermediate outputs (`lcb.agents.shared`, `lcb.teams.reuse`): a
coalition whose every call the whole team's run already made sends nothing and is not charged.

The model here answers each request with a program stamped with a digest of the whole request,
so an answer reused for a request that differs in any way would show in the transcripts."""

import asyncio
import hashlib
import json

import pytest

from lcb.data.samples import reference_solution
from lcb.optimize.cell import TeamCell
from lcb.optimize.methods.shapley import power_set
from tests.helpers_agents import fenced
from tests.helpers_optimize import job_context, marker, sample_problems
from tests.scripted_server import message_text, scripted_fixture  # noqa: F401

TEAMS = [(topology, size) for topology in ("independent", "sequential", "centralized",
                                           "decentralized") for size in (2, 4)]


def stamped(request: dict) -> str:
    """The reference program of the request's problem, stamped with the request's digest."""
    text = message_text(request)
    problem = next((p for p in sample_problems() if marker(p) in text), None)
    if problem is None:
        return "ok"
    digest = hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode())
    return fenced(f"{reference_solution(problem.id)}\n# request {digest.hexdigest()[:12]}")


def play_every_coalition(server, tmp_path, topology, size):
    """The whole team's masked run, then every other coalition, on one train row: per
    coalition (free?, requests it sent, calls it reused, its calls) and the ledger's ends."""
    async def main():
        async with job_context(server.base_url, tmp_path / "job", topology=topology,
                               team_size=size, budget=64) as ctx:
            row = ctx.data.train[0]
            whole, before = frozenset(ctx.agents), len(server.chat_requests())
            first = await ctx.rollout(ctx.seed_bundle, row, iteration=1, active=whole,
                                      reuse=True)
            assert first is not None and not first.free
            calls = first.team.n_llm_calls
            seen = {whole: (False, len(server.chat_requests()) - before, 0, calls)}
            for coalition in power_set(ctx.agents):
                if coalition == whole:
                    continue
                before = len(server.chat_requests())
                rollout = await ctx.rollout(ctx.seed_bundle, row, iteration=1,
                                            active=coalition, reuse=True)
                assert rollout is not None
                seen[coalition] = (rollout.free, len(server.chat_requests()) - before,
                                   (rollout.reused or {}).get("calls"), rollout.team.n_llm_calls)
            ctx.close()
            ledger = ctx.ledger
            return seen, ledger.charged, ledger.free, ctx.agents, ledger.infra_failures
    return asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize(("topology", "size"), TEAMS)
def test_the_rule_says_exactly_which_coalitions_the_whole_team_answers(
        scripted, tmp_path, topology, size):
    server = scripted(stamped)
    seen, charged, free, agents, _ = play_every_coalition(server, tmp_path, topology, size)
    cell = TeamCell(topology, size)
    for coalition, (is_free, sent, reused, calls) in seen.items():
        expected = cell.whole_team_answers(coalition) and len(coalition) < len(agents)
        assert is_free == expected, (topology, size, sorted(coalition))
        if is_free:  # nothing sent; every call it made is one the whole team's run made
            assert (sent, reused) == (0, calls), (topology, sorted(coalition))
        else:  # charged: it sent what the whole team's run did not already ask
            assert sent > 0 and sent + reused == calls, (topology, sorted(coalition))
    assert free == sum(is_free for is_free, *_ in seen.values())
    assert charged == len(seen) - free
    if (topology, size) == ("sequential", 4):
        # analyzer -> coder -> tester -> debugger: the prefixes ending in a stage that writes
        # a program are free; {analyzer} is not (alone it answers, so its prompt carries the
        # output contract), nor is any coalition that skips a stage
        free_ones = sorted(sorted(c) for c, (is_free, *_) in seen.items() if is_free)
        assert free_ones == [[], ["analyzer", "coder"], ["analyzer", "coder", "tester"]]
        # model calls a cycle makes per row (one call per agent here): every coalition run
        # (full Shapley), the viable ones alone (DAG-Shapley's pruning), and those with the
        # whole team's answers reused (docs/optimizers/hivemind.md)
        prefixes = [frozenset(agents[:k]) for k in range(len(agents) + 1)]
        full = sum(calls for *_, calls in seen.values())
        pruned = sum(seen[c][3] for c in prefixes)
        reused = sum(seen[c][1] for c in prefixes)
        assert (full, pruned, reused) == (32, 10, 5)


def test_a_wrong_expectation_costs_a_charged_run_and_nothing_more(scripted, tmp_path,
                                                                  monkeypatch):
    # told that every coalition is free, the evaluator tries each on the stored answers
    # first: a call they lack fails at once (nothing sent), and the coalition then runs and
    # is charged as usual; never an infrastructure failure, never over the budget
    server = scripted(stamped)
    honest = play_every_coalition(server, tmp_path / "honest", "centralized", 2)
    monkeypatch.setattr(TeamCell, "whole_team_answers", lambda _cell, _active: True)
    fooled = play_every_coalition(server, tmp_path / "fooled", "centralized", 2)
    assert fooled == honest  # the same runs, requests and charges as with the true rule
    assert honest[1:3] == (2, 2)  # charged: whole team, {manager}; free: {}, {coder}
    assert honest[4] == 0  # the failed try on the stored answers is no infrastructure failure


def test_a_free_coalition_submits_what_its_own_run_would(scripted, tmp_path):
    # sequential of 2: {coder} alone reads the question only, as the coder does in the whole
    # team; taking the whole team's answer gives the program a run of its own gives (this
    # model answers a request by its messages alone, so iteration 2 asks the same)
    server = scripted(stamped)

    async def main():
        async with job_context(server.base_url, tmp_path / "job", topology="sequential",
                               team_size=2, budget=8) as ctx:
            row, bundle = ctx.data.train[0], ctx.seed_bundle
            await ctx.rollout(bundle, row, iteration=1, active=frozenset(ctx.agents),
                              reuse=True)
            free = await ctx.rollout(bundle, row, iteration=1, active=frozenset({"coder"}),
                                     reuse=True)
            sent = len(server.chat_requests())
            own = await ctx.rollout(bundle, row, iteration=2, active=frozenset({"coder"}))
            ctx.close()
            return free, own, len(server.chat_requests()) - sent, ctx.ledger

    free, own, sent, ledger = asyncio.run(main())
    assert free.free and not own.free and sent == 1
    assert "# request " in free.team.code and free.team.code == own.team.code
    assert (free.score, free.feedback) == (own.score, own.feedback)
    assert (ledger.charged, ledger.free) == (2, 1)
