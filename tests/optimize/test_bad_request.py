"""Requests the server refuses (HTTP 400): a charged failed rollout, an em-0 evaluation record, or,
on the job's first calls or 10 rows in a row, a misconfigured job that charges nothing."""

import asyncio
import json

import pytest

from lcb.optimize.budget import BudgetLedger
from lcb.optimize.evaluation import Evaluation, EvaluationIncomplete, evaluate
from lcb.optimize.outcomes import (
    MISCONFIGURED_STREAK,
    Misconfigured,
    RefusalWatch,
    context_overflow,
    refusal_feedback,
)
from lcb.teams.solving import solve
from tests.helpers_agents import make_problem, make_runtime
from tests.helpers_optimize import sample_problems
from tests.helpers_teamrun import (
    CONTEXT_400,
    TOOLS_400,
    RefusingModel,
    bundle_of,
    requests_about,
    team_runner,
)
from tests.scripted_server import Reply, scripted_fixture  # noqa: F401

PROBLEMS = sample_problems()
GOOD, LONG = PROBLEMS[0], PROBLEMS[1]
CONTEXT_FEEDBACK = ("the model server refused the request (HTTP 400): prompt exceeded the "
                    "model's context: 5000 tokens (the model's limit is 4096)\n"
                    f"server: {CONTEXT_400}")


# --- the watch --------------------------------------------------------------------------------
def test_the_streak_trips_on_the_tenth_distinct_row_and_names_the_server_words():
    watch = RefusalWatch(first_calls=False)
    assert MISCONFIGURED_STREAK == 10
    for i in range(9):
        assert watch.refused(f"row{i}", "tools unsupported", result=i) is None
    assert watch.refused("row0", "tools unsupported") is None  # a repeated row is not new
    tripped = watch.refused("row9", "other words", result=9)
    assert isinstance(tripped, Misconfigured)
    assert tripped.rows == tuple(f"row{i}" for i in range(10))
    assert tripped.refunded == (0, 1, 2, 3, 4, 5, 6, 7, 8, None, 9)
    assert "refused the requests of 10 rows in a row" in str(tripped)
    assert "the server said: tools unsupported;" in str(tripped)
    assert watch.refused("row10", "x") is tripped and watch.check() is tripped


def test_a_usable_outcome_breaks_the_streak():
    watch = RefusalWatch(limit=3, first_calls=False)
    watch.refused("a", "m")
    watch.refused("b", "m")
    watch.usable()
    assert (watch.rows, watch.refusals, watch.message) == ({}, [], None)
    assert watch.refused("c", "m") is None and watch.refused("d", "m") is None
    assert watch.refused("e", "m") is not None


def test_the_first_calls_rule_needs_an_unconfirmed_endpoint_and_nothing_else_running():
    watch = RefusalWatch()
    assert watch.refused("a", "m", others_running=2) is None  # others may still confirm it
    assert watch.check(others_running=1) is None
    tripped = watch.check(others_running=0)
    assert tripped is not None and "first rollout(s) (1 row(s))" in str(tripped)
    confirmed = RefusalWatch()
    confirmed.usable()
    assert confirmed.refused("a", "m", others_running=0) is None
    assert RefusalWatch(first_calls=False).refused("a", "m", others_running=0) is None
    assert RefusalWatch().check(others_running=0) is None  # nothing refused yet


def test_the_watch_state_round_trips():
    watch = RefusalWatch()
    watch.usable()
    watch.refused("a", "too long", result="r")
    again = RefusalWatch()
    again.restore(json.loads(json.dumps(watch.state())))
    assert (again.confirmed, list(again.rows), again.refusals, again.message) == (
        True, ["a"], [None], "too long")
    with pytest.raises(ValueError, match="limit"):
        RefusalWatch(limit=0)


@pytest.mark.parametrize("message, expected", [
    (CONTEXT_400, (5000, 4096)),
    ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
     "(8000 in the messages, 1000 in the completion).", (9000, 8192)),
    ("The input (40,000 tokens) is longer than the model's context length (32768 tokens).",
     (40000, 32768)),
    ("prompt is too long: 210000 tokens > 200000 maximum", (210000, None)),
    ("Invalid value for 'tool_choice'", None),
])
def test_context_overflow_reads_the_token_counts(message, expected):
    assert context_overflow(message) == expected


def test_refusal_feedback_names_the_cause_or_quotes_the_server():
    assert refusal_feedback(CONTEXT_400) == CONTEXT_FEEDBACK
    assert refusal_feedback("bad  tool\nschema") == (
        "the model server refused the request (HTTP 400): bad tool schema")
    assert refusal_feedback("x" * 400).endswith("x" * 300 + "...")


# --- the gateway and the team ---------------------------------------------------------------
def test_a_400_reaches_the_team_result_as_its_kind_and_a_500_does_not(scripted):
    refusing = scripted([Reply.error(400, message=CONTEXT_400)])
    failing = scripted([Reply.error(503)])

    async def main(url):
        runtime = make_runtime(url)
        try:
            return await solve("single", make_problem(), runtime)
        finally:
            await runtime.aclose()

    refused = asyncio.run(main(refusing.base_url))
    assert (refused.error_kind, refused.server_message) == ("bad_request", CONTEXT_400)
    assert "HTTP 400" in refused.error and len(refusing.chat_requests()) == 1  # never retried
    down = asyncio.run(main(failing.base_url))
    assert (down.error_kind, down.server_message) == (None, None) and down.error


# --- the optimize phase ---------------------------------------------------------------------
def test_a_refused_rollout_is_charged_with_feedback_and_not_retried(scripted):
    server = scripted(RefusingModel(refused=frozenset({LONG.id})))

    async def main():
        async with team_runner(server.base_url) as runner:
            ledger = BudgetLedger(5)
            bundle = bundle_of("single")
            good = await ledger.arun_rollout(lambda: runner.attempt(bundle, GOOD, seed=1))
            long = await ledger.arun_rollout(lambda: runner.attempt(bundle, LONG, seed=1))
            return good, long, ledger

    good, long, ledger = asyncio.run(main())
    assert good.score == 1.0
    assert (long.score, long.grade, long.feedback) == (0.0, None, CONTEXT_FEEDBACK)
    assert long.team.error_kind == "bad_request"
    assert (ledger.charged, ledger.refused, ledger.infra_failures) == (2, 1, 0)
    assert len(requests_about(server, LONG)) == 1


def test_a_refusal_on_the_first_rollout_is_a_misconfiguration_that_charges_nothing(scripted):
    server = scripted(RefusingModel(refuse_all=True, message=TOOLS_400))

    async def main():
        async with team_runner(server.base_url) as runner:
            ledger = BudgetLedger(5)
            bundle = bundle_of("single")
            with pytest.raises(Misconfigured, match="enable-auto-tool-choice") as caught:
                await ledger.arun_rollout(lambda: runner.attempt(bundle, GOOD, seed=1))
            with pytest.raises(Misconfigured):  # a tripped ledger grants nothing more
                await ledger.arun_rollout(lambda: runner.attempt(bundle, LONG, seed=1))
            return caught.value, ledger

    error, ledger = asyncio.run(main())
    assert error.rows == (GOOD.id,) and len(error.refunded) == 1
    assert (ledger.charged, ledger.refused, ledger.available) == (0, 0, 5)
    assert len(server.chat_requests()) == 1


def test_a_refusal_while_other_first_rollouts_run_waits_for_them_and_is_charged(scripted):
    server = scripted(RefusingModel(refused=frozenset({LONG.id}), slow_s=0.4))

    async def main():
        async with team_runner(server.base_url, concurrency=3) as runner:
            ledger = BudgetLedger(5)
            bundle = bundle_of("single")
            runs = await asyncio.gather(*(
                ledger.arun_rollout(lambda p=p: runner.attempt(bundle, p, seed=1))
                for p in (LONG, GOOD, PROBLEMS[2])))
            return runs, ledger

    runs, ledger = asyncio.run(main())
    assert [r.score for r in runs] == [0.0, 1.0, 1.0]
    assert (ledger.charged, ledger.refused, ledger.watch.confirmed) == (3, 1, True)


# --- evaluations ----------------------------------------------------------------------------
def spec(tmp_path, phase="validate"):
    return Evaluation(tmp_path, phase, "seed", bundle_of("single"), 0)


def test_a_refused_row_in_an_evaluation_is_an_em_0_record(scripted, tmp_path):
    server = scripted(RefusingModel(refused=frozenset({LONG.id})))

    async def main():
        async with team_runner(server.base_url) as runner:
            return await evaluate(runner, [GOOD, LONG], spec(tmp_path))

    records = asyncio.run(main())
    long = records[LONG.id]
    assert (long["em"], long["infra_failure"], long["bad_request"]) == (0, False, CONTEXT_400)
    assert "HTTP 400" in long["error"] and records[GOOD.id]["em"] == 1
    assert len(requests_about(server, LONG)) == 1


def test_ten_refused_rows_in_a_row_stop_an_evaluation_and_a_rerun_tries_them_again(
        scripted, tmp_path):
    refusing = scripted(RefusingModel(refuse_all=True, message=TOOLS_400))
    rows = PROBLEMS[:12]

    async def main(url):
        async with team_runner(url, concurrency=1) as runner:
            return await evaluate(runner, rows, spec(tmp_path))

    with pytest.raises(Misconfigured, match="10 rows in a row") as caught:
        asyncio.run(main(refusing.base_url))
    assert caught.value.rows == tuple(p.id for p in rows[:10])
    assert len(refusing.chat_requests()) == 10  # the rows after the trip never ran
    lines = [json.loads(x) for x in spec(tmp_path).path.read_text().splitlines()]
    last = {line["id"]: line for line in lines}
    assert sorted(last) == sorted(p.id for p in rows[:10])
    assert all(line["infra_failure"] and "misconfigured" in line["error"]
               for line in last.values())
    healthy = scripted(RefusingModel())
    records = asyncio.run(main(healthy.base_url))
    assert [records[p.id]["em"] for p in rows] == [1] * 12
    assert len(healthy.chat_requests()) == 12


def test_a_streak_split_by_a_kill_still_trips_and_gives_back_the_earlier_refusals(
        scripted, tmp_path):
    refusing = scripted(RefusingModel(refuse_all=True, message=TOOLS_400))
    rows = PROBLEMS[:12]

    async def main(url, items):
        async with team_runner(url, concurrency=1) as runner:
            return await evaluate(runner, items, spec(tmp_path))

    asyncio.run(main(refusing.base_url, rows[:6]))  # six refused rows, then the job was killed
    with pytest.raises(Misconfigured, match="10 rows in a row") as caught:
        asyncio.run(main(refusing.base_url, rows))
    assert caught.value.rows == tuple(p.id for p in rows[:10])
    lines = [json.loads(x) for x in spec(tmp_path).path.read_text().splitlines()]
    last = {line["id"]: line for line in lines}
    assert all(last[p.id]["infra_failure"] for p in rows[:6])  # superseded: retried later


def test_an_evaluation_whose_rows_all_fail_for_infrastructure_is_still_incomplete(
        scripted, tmp_path):
    server = scripted([Reply.error(503)])

    async def main():
        async with team_runner(server.base_url) as runner:
            return await evaluate(runner, [GOOD], spec(tmp_path))

    with pytest.raises(EvaluationIncomplete, match="infrastructure"):
        asyncio.run(main())


@pytest.mark.parametrize("method", ["gepa", "mipro"])
def test_a_server_refusing_every_request_stops_the_job_charging_nothing(scripted, tmp_path,
                                                                        monkeypatch, method):
    """Through a whole job: the library-driven methods must not swallow the misconfiguration
    (DSPy counts errors per example); the job stops, nothing charged, the journal is empty."""
    from lcb.optimize.job import run_job
    from tests.helpers_methods import REFLECTION_ENV
    from tests.helpers_optimize import job_config

    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    refusal = Reply.error(400, message='"auto" tool choice requires --enable-auto-tool-choice')
    server = scripted(lambda request: "ok" if "max_tokens" in request and request.get(
        "max_tokens") == 1 else refusal)
    out = tmp_path / "job"
    with pytest.raises(Misconfigured, match="enable-auto-tool-choice"):
        asyncio.run(run_job(job_config(server.base_url, out, method=method, budget=30,
                                       check_endpoints=False)))
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["charged"] == 0
    rollouts = out / "rollouts.jsonl"
    assert not rollouts.exists() or rollouts.read_text() == ""
