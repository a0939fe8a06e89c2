"""The budget ledger: reserve before dispatch, charge usable rollouts, refund infra failures."""

import asyncio
import json
import threading
from types import SimpleNamespace

import pytest

from lcb.optimize.budget import (
    BudgetError,
    BudgetExhausted,
    BudgetLedger,
    InfraFailure,
    Misconfigured,
    Refused,
    infra_reason,
)


def test_reserve_grants_what_is_left_and_exact_is_all_or_nothing():
    ledger = BudgetLedger(5)
    first = ledger.reserve(3)
    assert (first.granted, ledger.available, ledger.in_flight) == (3, 2, 3)
    with pytest.raises(BudgetExhausted, match="3 in flight"):
        ledger.reserve(3, exact=True)
    second = ledger.reserve(10)
    assert second.granted == 2 and ledger.available == 0
    with pytest.raises(BudgetExhausted):
        ledger.reserve(1)


def test_commit_charges_refund_returns_and_close_releases_the_rest():
    ledger = BudgetLedger(4)
    res = ledger.reserve(4)
    ledger.commit(res)
    ledger.refund(res)
    assert (ledger.charged, ledger.in_flight, ledger.available) == (1, 2, 1)
    assert ledger.close(res) == 2
    assert (ledger.charged, ledger.available) == (1, 3)
    with pytest.raises(BudgetError, match="no open unit"):
        ledger.commit(res)


def test_a_unit_cannot_be_settled_twice():
    ledger = BudgetLedger(3)
    res = ledger.reserve(1)
    ledger.commit(res)
    with pytest.raises(BudgetError):
        ledger.refund(res)
    assert ledger.charged == 1


def test_infra_failures_are_retried_twice_with_the_same_attempt_and_not_charged():
    ledger = BudgetLedger(10)
    calls = []

    def flaky():
        calls.append("seed-42")  # the closure carries its seeds: every retry reuses them
        if len(calls) < 3:
            raise InfraFailure("HTTP 503")
        return "answer"

    assert ledger.run_rollout(flaky) == "answer"
    assert calls == ["seed-42"] * 3
    assert (ledger.charged, ledger.infra_failures, ledger.available) == (1, 2, 9)


def test_three_infra_failures_refund_the_unit_and_return_none():
    ledger = BudgetLedger(1)

    def down():
        raise InfraFailure("connection refused")

    assert ledger.run_rollout(down) is None
    assert (ledger.charged, ledger.infra_failures, ledger.abandoned) == (0, 3, 1)
    assert ledger.available == 1


def test_a_wrong_answer_is_charged_and_other_errors_refund_and_propagate():
    ledger = BudgetLedger(2)
    assert ledger.run_rollout(lambda: {"score": 0, "feedback": "wrong answer"})["score"] == 0
    assert ledger.charged == 1

    def bug():
        raise KeyError("bug in the optimizer")

    with pytest.raises(KeyError):
        ledger.run_rollout(bug)
    assert (ledger.charged, ledger.available) == (1, 1)


def test_async_rollouts_never_overshoot_under_concurrency():
    ledger = BudgetLedger(7)
    peak = {"now": 0, "max": 0}

    async def attempt():
        peak["now"] += 1
        peak["max"] = max(peak["max"], peak["now"])
        await asyncio.sleep(0.01)
        peak["now"] -= 1
        return 1

    async def worker():
        while True:
            try:
                await ledger.arun_rollout(attempt)
            except BudgetExhausted:
                return

    async def main():
        await asyncio.gather(*(worker() for _ in range(20)))

    asyncio.run(main())
    assert ledger.charged == 7
    assert peak["max"] <= 7


def test_async_infra_failure_is_refunded():
    ledger = BudgetLedger(1)
    tries = []

    async def timeout():
        tries.append(1)
        raise InfraFailure("timeout")

    assert asyncio.run(ledger.arun_rollout(timeout)) is None
    assert len(tries) == 3 and ledger.charged == 0 and ledger.available == 1


def test_threads_reserving_in_parallel_never_exceed_the_total():
    ledger = BudgetLedger(100)
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        while True:
            try:
                res = ledger.reserve(3)
            except BudgetExhausted:
                return
            for _ in range(res.granted):
                ledger.commit(res)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledger.charged == 100 and ledger.in_flight == 0


def test_uncharged_usage_is_recorded_per_kind_and_state_round_trips():
    ledger = BudgetLedger(600)
    res = ledger.reserve(2)
    ledger.commit(res)
    ledger.record_uncharged("reflection", prompt_tokens=900, completion_tokens=120)
    ledger.record_uncharged("reflection", calls=2, prompt_tokens=100, completion_tokens=30)
    ledger.record_uncharged("judge", completion_tokens=5)
    state = json.loads(json.dumps(ledger.state()))
    assert state["uncharged"]["reflection"] == {"calls": 3, "prompt_tokens": 1000,
                                                "completion_tokens": 150,
                                                "n_calls_without_usage": 0}
    assert state["charged"] == 1  # the unit still in flight is not part of the state
    again = BudgetLedger.from_state(state)
    assert again.state() == ledger.state()
    assert again.available == 599 and ledger.charged == 1


@pytest.mark.parametrize("state, field", [
    ({"charged": 1}, "total"), ({"total": 5, "charged": 9}, "charged"),
    ({"total": -1, "charged": 0}, "total"),
])
def test_malformed_state_raises_naming_the_field(state, field):
    with pytest.raises(BudgetError, match=field):
        BudgetLedger.from_state(state)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_reserve_rejects_non_positive_counts(bad):
    with pytest.raises(ValueError, match="positive integer"):
        BudgetLedger(3).reserve(bad)


def test_infra_reason_classifies_team_outcomes():
    assert infra_reason(error=None, n_llm_calls=0) == "no model call"
    assert infra_reason(error="HTTP 500 after 3 retries", n_llm_calls=1) == (
        "HTTP 500 after 3 retries")
    assert infra_reason(error=None, n_llm_calls=4) is None  # a wrong answer is usable


def refusal(row):
    def attempt():
        raise Refused("context length exceeded", result=f"failed {row}", row=row)

    return attempt


def test_a_refused_rollout_is_charged_once_the_endpoint_has_answered():
    ledger = BudgetLedger(5)
    assert ledger.run_rollout(lambda: "answered") == "answered"
    assert ledger.run_rollout(refusal("r1")) == "failed r1"
    assert (ledger.charged, ledger.refused, ledger.infra_failures) == (2, 1, 0)


def test_ten_distinct_refused_rows_in_a_row_refund_them_all_and_stop_the_ledger():
    ledger = BudgetLedger(30)
    ledger.run_rollout(lambda: "answered")
    for i in range(9):
        ledger.run_rollout(refusal(f"r{i}"))
    ledger.run_rollout(refusal("r0"))  # the same row again: charged, not a new row

    def down():
        raise InfraFailure("HTTP 503")

    assert ledger.run_rollout(down) is None  # infrastructure neither extends nor breaks a streak
    assert (ledger.charged, ledger.refused) == (11, 10)
    with pytest.raises(Misconfigured, match="10 rows in a row") as caught:
        ledger.run_rollout(refusal("r9"))
    assert caught.value.rows == tuple(f"r{i}" for i in range(10))
    assert len(caught.value.refunded) == 11
    assert (ledger.charged, ledger.refused, ledger.available) == (1, 0, 29)
    with pytest.raises(Misconfigured):
        ledger.reserve(1)
    with pytest.raises(Misconfigured):
        ledger.run_rollout(lambda: "answered")
    assert ledger.charged == 1


def test_a_usable_rollout_between_refusals_breaks_the_streak():
    ledger = BudgetLedger(30)
    ledger.run_rollout(lambda: "answered")
    for i in range(12):
        ledger.run_rollout(refusal(f"r{i}") if i != 6 else (lambda: "answered"))
    assert (ledger.charged, ledger.refused, ledger.watch.tripped) == (13, 11, None)


def test_the_first_rollouts_all_refused_or_failed_is_a_misconfiguration():
    ledger = BudgetLedger(5)
    gate = asyncio.Event()

    async def refused_first():
        raise Refused("tools unsupported", result="r", row="a")

    async def down_later():
        await gate.wait()
        raise InfraFailure("HTTP 503")

    async def main():
        later = asyncio.ensure_future(ledger.arun_rollout(down_later))
        await asyncio.sleep(0)
        assert await ledger.arun_rollout(refused_first) == "r"  # another one still runs
        assert (ledger.charged, ledger.running) == (1, 1)
        gate.set()
        with pytest.raises(Misconfigured, match="first rollout"):
            await later

    asyncio.run(main())
    assert (ledger.charged, ledger.refused, ledger.available) == (0, 0, 5)


def test_a_rollout_in_flight_when_the_ledger_trips_is_refunded():
    ledger = BudgetLedger(5)
    gate = asyncio.Event()

    async def slow_answer():
        await gate.wait()
        return "answered"

    async def refused():
        raise Refused("no", result="r", row="a")

    async def main():
        slow = asyncio.ensure_future(ledger.arun_rollout(slow_answer))
        await asyncio.sleep(0)
        ledger.watch.limit = 1  # the next refusal trips the streak rule
        with pytest.raises(Misconfigured):
            await ledger.arun_rollout(refused)
        gate.set()
        with pytest.raises(Misconfigured):
            await slow

    asyncio.run(main())
    assert (ledger.charged, ledger.in_flight, ledger.available) == (0, 0, 5)


def test_kept_team_runs_count_their_tokens_only_when_given_up():
    ledger = BudgetLedger(3)
    spent = {"prompt_tokens": 40, "completion_tokens": 4, "n_llm_calls": 2}

    def grading_down():
        raise InfraFailure("grading failed", usage=spent, kept=True)

    assert ledger.run_rollout(grading_down) is None
    assert ledger.failed_attempt_tokens == {"calls": 2, "prompt_tokens": 40,
                                            "completion_tokens": 4, "n_calls_without_usage": 0}
    tries = iter([InfraFailure("grading failed", usage=spent, kept=True), None])

    def regraded():
        failure = next(tries)
        if failure:
            raise failure
        return "graded"

    assert ledger.run_rollout(regraded) == "graded"
    assert ledger.failed_attempt_tokens["prompt_tokens"] == 40  # the re-graded run is charged


def test_the_new_counters_round_trip_through_the_state():
    ledger = BudgetLedger(20)
    ledger.run_rollout(lambda: "answered")
    ledger.run_rollout(refusal("a"))

    def down():
        raise InfraFailure("HTTP 503", usage={"prompt_tokens": 9, "n_llm_calls": 1})

    ledger.run_rollout(down)
    state = json.loads(json.dumps(ledger.state()))
    assert state["refused"] == 1
    assert state["failed_attempt_tokens"] == {"calls": 3, "prompt_tokens": 27,
                                              "completion_tokens": 0,
                                              "n_calls_without_usage": 0}
    assert state["refusal_watch"]["rows"] == ["a"]
    again = BudgetLedger.from_state(state)
    assert again.state() == ledger.state() and again.watch.confirmed


def test_a_replayed_rollout_is_charged_and_shown_to_the_watch():
    ledger = BudgetLedger(12)
    ledger.commit_replayed("a", refusal="too long")  # no first-calls rule for a replay
    assert (ledger.charged, ledger.refused, ledger.watch.confirmed) == (1, 1, False)
    ledger.commit_replayed("b")
    assert ledger.watch.confirmed and ledger.watch.rows == {}
    ledger.watch.limit = 2
    ledger.commit_replayed("c", refusal="x")
    with pytest.raises(Misconfigured, match="2 rows in a row"):
        ledger.commit_replayed("d", refusal="x")
    assert (ledger.charged, ledger.refused, ledger.in_flight) == (2, 1, 0)


def test_an_abstaining_team_neither_confirms_the_endpoint_nor_breaks_a_streak():
    abstention = SimpleNamespace(team=SimpleNamespace(n_llm_calls=0))
    ledger = BudgetLedger(5)
    assert ledger.run_rollout(lambda: abstention) is abstention
    assert (ledger.charged, ledger.watch.confirmed) == (1, False)
    with pytest.raises(Misconfigured, match="first rollout"):
        ledger.run_rollout(refusal("a"))
    assert ledger.charged == 1  # the abstention stays charged, the refusal is refunded


def test_uncharged_calls_take_budget_units_at_the_uncharged_rate():
    ledger = BudgetLedger(5, uncharged_rate=0.5)
    for _ in range(3):  # 1.5 units: a part of a unit takes a whole one
        ledger.record_uncharged("judge", prompt_tokens=10, completion_tokens=2)
    assert (ledger.call_units, ledger.units, ledger.available) == (2, 2, 3)
    held = ledger.reserve(5)
    assert held.granted == 3  # all that is left
    for _ in range(3):
        ledger.commit(held)
    with pytest.raises(BudgetExhausted, match="2 taken by uncharged calls"):
        ledger.reserve()
    ledger.record_uncharged("reflect")  # counted once no unit is left, never refused
    assert (ledger.charged, ledger.units, ledger.available, ledger.exhausted) == (3, 5, 0, True)
    again = BudgetLedger.from_state(ledger.state())
    assert (again.uncharged_rate, again.units) == (0.5, 5)
    standard = BudgetLedger(5)
    standard.record_uncharged("judge", calls=40)
    assert (standard.units, standard.available) == (0, 5)  # the standard protocol: free
    with pytest.raises(ValueError, match="uncharged_rate"):
        BudgetLedger(5, uncharged_rate=-1)
