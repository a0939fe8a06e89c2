"""DAG-Shapley's reuse of intermediate outputs (`lcb.agents.shared`, `lcb.teams.reuse`): a
coalition whose every call the whole team's run already made sends nothing and is not charged.

The model here answers each request with a program stamped with a digest of the whole request,
so an answer reused for a request that differs in any way would show in the transcripts."""

import asyncio
import hashlib
import itertools
import json

import pytest

from lcb.agents.seeds import request_seed
from lcb.data.samples import reference_solution
from lcb.optimize.cell import TeamCell
from lcb.optimize.methods.hivemind import HivemindSettings
from lcb.optimize.methods.hivemind_game import Game
from lcb.optimize.methods.shapley import power_set
from lcb.optimize.seeds import optimize_scope
from tests.helpers_agents import fenced
from tests.helpers_optimize import job_context, marker, sample_problems
from tests.scripted_server import Reply, message_text, scripted_fixture  # noqa: F401

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


# --- what must never happen: found by a review of the first version ------------------------
def one_row(server, tmp_path, topology, size, steps, *, budget=16, **model):
    """`steps(ctx, row, whole)` in a fresh job on the first train row."""
    async def main():
        async with job_context(server.base_url, tmp_path / "job", topology=topology,
                               team_size=size, budget=budget, **model) as ctx:
            try:
                return await steps(ctx, ctx.data.train[0], frozenset(ctx.agents))
            finally:
                ctx.close()
    return asyncio.run(main())


def test_a_coalition_whose_request_failed_is_charged(scripted, tmp_path):
    # {analyzer, coder, debugger} reuses two answers and sends the debugger's request, which
    # fails (HTTP 500): the other stages' program is usable, and a request went out: charged
    down = []
    server = scripted(lambda request: Reply.error(500) if down else stamped(request))

    async def steps(ctx, row, whole):
        await ctx.rollout(ctx.seed_bundle, row, iteration=1, active=whole, reuse=True)
        down.append(True)
        sent = len(server.chat_requests())
        got = await ctx.rollout(ctx.seed_bundle, row, iteration=1, reuse=True,
                                active=frozenset({"analyzer", "coder", "debugger"}))
        return got, len(server.chat_requests()) - sent, ctx.ledger

    got, sent, ledger = one_row(server, tmp_path, "sequential", 4, steps)
    assert sent > 0 and got.score == 1.0 and "debugger" in got.team.fields["agent_errors"]
    assert not got.free and (ledger.charged, ledger.free) == (2, 0)


@pytest.mark.slow
@pytest.mark.parametrize("miss", [True, False])
def test_a_free_try_whose_grading_failed_is_never_graded_as_the_rollout(scripted, tmp_path,
                                                                         miss):
    # independent of 4: in the whole team's run coder_1's request fails when `miss`, so
    # {coder_0, coder_1}'s free try misses it; the grader then fails once. The coalition
    # runs again for real: coder_1 asks the (healthy) server and the rollout is charged;
    # without the miss it is free, and counts the two calls it reused
    bad = []
    server = scripted(lambda r: Reply.error(500) if r.get("seed") in bad else stamped(r))

    async def steps(ctx, row, whole):
        run_seed = optimize_scope(optimizer_seed=0, iteration=1, row=row.id).rollout
        if miss:
            bad.append(request_seed(run_seed, 0, row.id, "coder_1", 1))
        await ctx.rollout(ctx.seed_bundle, row, iteration=1, active=whole, reuse=True)
        bad.clear()
        grades, real = ctx._evaluator.runner.grades, ctx._evaluator.runner.grades.grade
        failures = [RuntimeError("a grading worker died")]

        async def flaky(*args, **kwargs):
            if failures:
                raise failures.pop()
            return await real(*args, **kwargs)

        grades.grade = flaky
        sent = len(server.chat_requests())
        got = await ctx.rollout(ctx.seed_bundle, row, iteration=1, reuse=True,
                                active=frozenset({"coder_0", "coder_1"}))
        return got, len(server.chat_requests()) - sent

    got, sent = one_row(server, tmp_path, "independent", 4, steps)
    assert "coder_1" not in got.team.fields.get("agent_errors", {})
    if miss:
        assert (got.free, sent) == (False, 1)
    else:
        assert (got.free, sent, got.reused["calls"]) == (True, 0, got.team.n_llm_calls)


def test_the_store_holds_the_answers_of_the_try_that_became_the_rollout(scripted, tmp_path):
    # the whole team's first try is lost (the debugger's request fails every retry) after its
    # coder answered without a program; the second try's coder writes one. {coder} must take
    # the journaled run's answer, not the lost try's
    first = "Let me think first. NO PROGRAM YET"
    coder_asks = []

    def model(request):
        text = message_text(request)
        if "Work of the earlier stages" not in text:  # the coder, stage 1
            coder_asks.append(1)
            return first if len(coder_asks) == 1 else stamped(request)
        return Reply.error(500) if first in text else stamped(request)

    server = scripted(model)

    async def steps(ctx, row, whole):
        team = await ctx.rollout(ctx.seed_bundle, row, iteration=1, active=whole, reuse=True)
        coder = await ctx.rollout(ctx.seed_bundle, row, iteration=1, reuse=True,
                                  active=frozenset({"coder"}))
        return team, coder, ctx.ledger

    team, coder, ledger = one_row(server, tmp_path, "sequential", 2, steps, budget=8)
    assert ledger.infra_failures == 1 and team.score == 1.0
    assert coder.free and coder.team.final_text == team.team.fields["outputs"]["coder"]
    assert coder.score == 1.0


def test_without_request_seeds_an_iteration_reuses_only_its_own_answers(scripted, tmp_path):
    # request seeds off: every answer a new sample; the store is scoped by the run seed, so
    # iteration 2's {coder} takes iteration 2's whole team's answer, never iteration 1's
    samples = itertools.count(1)
    server = scripted(lambda request: stamped(request) + f"\n(sample {next(samples)})")

    async def steps(ctx, row, whole):
        team = [await ctx.rollout(ctx.seed_bundle, row, iteration=i, active=whole, reuse=True)
                for i in (1, 2)]
        coder = await ctx.rollout(ctx.seed_bundle, row, iteration=2, reuse=True,
                                  active=frozenset({"coder"}))
        return team, coder

    (one, two), coder = one_row(server, tmp_path, "sequential", 2, steps, seed=None)
    assert one.team.fields["outputs"]["coder"] != two.team.fields["outputs"]["coder"]
    assert coder.free and coder.team.final_text == two.team.fields["outputs"]["coder"]


@pytest.mark.slow
def test_a_row_the_whole_team_lost_runs_no_coalition(scripted, tmp_path):
    # sequential 4, 2 rows, a budget that pays exactly for the planned cycle's coalitions: the
    # endpoint fails one row's requests while the whole team runs, then recovers. That row
    # is dropped, its coalitions never run, and the other row's game is played within budget
    lost = []
    server = scripted(lambda r: Reply.error(500) if lost and lost[0] in message_text(r)
                      else stamped(r))

    async def steps(ctx, row, whole):
        game = Game(ctx, HivemindSettings(batch_size=2))
        plan, batch = game.plan(1), game.batch(1)
        lost.append(marker(batch[0]))
        first_wave = game._wave

        async def transient(*args, **kwargs):
            done = await first_wave(*args, **kwargs)
            lost.clear()  # the outage ends with the whole team's wave
            return done

        game._wave = transient
        played = await game.play(plan, ctx.seed_bundle, batch, 1)
        return played, len(game.charged(plan)) * len(batch), batch[0].id, ctx.ledger

    played, planned, lost_row, ledger = one_row(server, tmp_path, "sequential", 4, steps,
                                                budget=4)
    assert planned == 4 and played is not None and played.values is not None
    assert played.rows == [r for r in played.rows if r != lost_row] and len(played.rows) == 1
    assert ledger.charged == 2  # the other row's whole team and {analyzer}
