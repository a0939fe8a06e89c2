"""The budget ledger: reserve before dispatch, charge usable rollouts, refund infra failures."""

import asyncio
import json
import threading

import pytest

from lcb.optimize.budget import (
    BudgetError,
    BudgetExhausted,
    BudgetLedger,
    InfraFailure,
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
                                                "completion_tokens": 150}
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
