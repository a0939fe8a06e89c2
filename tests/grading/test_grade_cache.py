"""The grade cache: an identical program on the same tests is graded once per runner; concurrent
identical requests share one pool call; a failed call is not cached; the key holds the tests,
the program and the grader settings."""

import asyncio

import pytest

from lcb.grading import GradingError
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.gradecache import GradeCache, GradeSettings
from lcb.optimize.teamrun import TeamCell, TeamRunner
from tests.helpers_optimize import sample_problems
from tests.helpers_teamrun import CountingPool, RefusingModel, bundle_of, team_runner
from tests.scripted_server import scripted_fixture  # noqa: F401

PROBLEMS = sample_problems()
A, B = PROBLEMS[0], PROBLEMS[1]


def test_the_same_program_twice_is_one_pool_call():
    pool = CountingPool()
    cache = GradeCache(pool)

    async def main():
        first = await cache.grade(A, "print(1)")
        second = await cache.grade(A, "print(1)")
        return first, second

    first, second = asyncio.run(main())
    assert first is second
    assert pool.calls == [(A.id, "print(1)", None, 6.0)]
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)


def test_concurrent_identical_requests_share_one_call():
    pool = CountingPool(delay_s=0.1)
    cache = GradeCache(pool)

    async def main():
        return await asyncio.gather(*(cache.grade(A, "print(1)") for _ in range(5)))

    grades = asyncio.run(main())
    assert len(pool.calls) == 1 and all(g is grades[0] for g in grades)


def test_another_program_problem_or_test_prefix_is_graded_again():
    pool = CountingPool()
    cache = GradeCache(pool)

    async def main():
        await cache.grade(A, "print(1)")
        await cache.grade(A, "print(2)")
        await cache.grade(B, "print(1)")
        await cache.grade(A, "print(1)", tests=A.hidden_tests[:3])
        await cache.grade(A, "print(1)", tests=A.hidden_tests[:3])

    asyncio.run(main())
    assert [(pid, code, n) for pid, code, n, _ in pool.calls] == [
        (A.id, "print(1)", None), (A.id, "print(2)", None), (B.id, "print(1)", None),
        (A.id, "print(1)", 3)]


def test_grader_settings_are_part_of_the_key():
    pool = CountingPool()
    fast, slow = GradeCache(pool), GradeCache(pool, GradeSettings(timeout_s=12.0))
    assert fast.key(A, "x", None) != slow.key(A, "x", None)
    assert fast.key(A, "x", None) != GradeCache(pool, GradeSettings(all_tests=True)).key(
        A, "x", None)

    async def main():
        await slow.grade(A, "x")

    asyncio.run(main())
    assert pool.calls[-1][3] == 12.0


def test_a_failed_grading_is_not_cached():
    pool = CountingPool(fail_first=1, delay_s=0.05)
    cache = GradeCache(pool)

    async def main():
        results = await asyncio.gather(cache.grade(A, "x"), cache.grade(A, "x"),
                                       return_exceptions=True)
        again = await cache.grade(A, "x")
        return results, again

    results, again = asyncio.run(main())
    assert all(isinstance(r, GradingError) for r in results)  # both waiters see the failure
    assert again.em == 1 and len(pool.calls) == 2


def test_a_runner_grades_a_repeated_answer_once(scripted):
    server = scripted(RefusingModel())
    pool = CountingPool()

    async def main():
        async with team_runner(server.base_url, pool=pool) as runner:
            bundle = bundle_of("single")
            runs = [await runner.attempt(bundle, A, seed=seed) for seed in (1, 2)]
            return runs

    runs = asyncio.run(main())
    assert [r.score for r in runs] == [1.0, 1.0] and len(server.chat_requests()) == 2
    assert len(pool.calls) == 1


def test_optimization_grades_the_first_k_tests_and_evaluation_all(scripted):
    server = scripted(RefusingModel())
    pool = CountingPool()

    async def main():
        async with team_runner(server.base_url, pool=pool, opt_tests=3) as runner:
            bundle = bundle_of("single")
            opt = await runner.attempt(bundle, A, seed=1)
            full = await runner.uncharged(bundle, A, seed=1)
            return opt, full

    opt, full = asyncio.run(main())
    assert [n for _, _, n, _ in pool.calls] == [3, None]
    assert (opt.grade.total, full.grade.total) == (3, len(A.hidden_tests))


@pytest.mark.parametrize("bad", [0, -1, True])
def test_opt_tests_must_be_positive(bad):
    with pytest.raises(ValueError, match="opt_tests"):
        TeamRunner(TeamCell("single"), None, CountingPool(), opt_tests=bad)


def test_a_retry_after_a_grading_failure_grades_again_without_running_the_team(scripted):
    server = scripted(RefusingModel())
    pool = CountingPool(fail_first=1)

    async def main():
        async with team_runner(server.base_url, pool=pool) as runner:
            ledger = BudgetLedger(3)
            bundle = bundle_of("single")
            rollout = await ledger.arun_rollout(lambda: runner.attempt(bundle, A, seed=5))
            return rollout, ledger

    rollout, ledger = asyncio.run(main())
    assert rollout.score == 1.0
    assert len(server.chat_requests()) == 1  # the team ran once
    assert len(pool.calls) == 2  # graded twice
    assert (ledger.charged, ledger.infra_failures) == (1, 1)
    assert ledger.failed_attempt_tokens == {"calls": 0, "prompt_tokens": 0,
                                            "completion_tokens": 0, "n_calls_without_usage": 0}


def test_an_infra_grade_is_not_cached():
    pool = CountingPool(infra_first=1)
    cache = GradeCache(pool)

    async def main():
        return await cache.grade(A, "x"), await cache.grade(A, "x"), await cache.grade(A, "x")

    lost, again, cached = asyncio.run(main())
    assert lost.infra and not again.infra and again.em == 1 and cached is again
    assert len(pool.calls) == 2


def test_an_infra_grade_is_refunded_and_graded_again_without_running_the_team(scripted):
    server = scripted(RefusingModel())
    pool = CountingPool(infra_first=1)

    async def main():
        async with team_runner(server.base_url, pool=pool) as runner:
            ledger = BudgetLedger(3)
            bundle = bundle_of("single")
            rollout = await ledger.arun_rollout(lambda: runner.attempt(bundle, A, seed=5))
            return rollout, ledger

    rollout, ledger = asyncio.run(main())
    assert rollout.score == 1.0 and not rollout.grade.infra
    assert len(server.chat_requests()) == 1 and len(pool.calls) == 2
    assert (ledger.charged, ledger.infra_failures) == (1, 1)
