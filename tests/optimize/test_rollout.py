"""The optimize phase's context: charged rollouts, infrastructure refunds, leak guards, seeds,
reflection usage, history; against the scripted server with the real client and grader."""

import asyncio
import json
import socket

import pytest

from lcb.grading import Feedback, Grade, TestOutcome, Verdict
from lcb.optimize.artifacts import read_history
from lcb.optimize.budget import BudgetLedger, InfraFailure
from lcb.optimize.bundle import BundleError
from lcb.optimize.calls import CALLS_LOG, _read_calls, reflection_config
from lcb.optimize.journal import ROLLOUT_LOG
from lcb.optimize.method import OptimizeContext
from lcb.optimize.seeds import SEED_MODULUS, optimize_scope
from lcb.optimize.splits import SplitLeak
from lcb.optimize.teamrun import TeamCell, feedback_text
from lcb.teams.common import TeamResult
from tests.helpers_agents import model_config
from tests.helpers_optimize import (
    TeamModel,
    job_context,
    marker,
    sample_problems,
    sample_splits,
)
from tests.helpers_teamrun import bundle_of, team_runner
from tests.scripted_server import (  # noqa: F401
    Reply,
    ToolCall,
    failures,
    keyed,
    message_text,
    scripted_fixture,
)

SPLITS = sample_splits()
BY_ID = {p.id: p for p in sample_problems()}
TRAIN = [BY_ID[i] for i in SPLITS.train]
TEST = [BY_ID[i] for i in SPLITS.test]


def requests_about(server, problem):
    return [r for r in server.chat_requests() if marker(problem) in message_text(r)]


def rollout_log(job_dir):
    path = job_dir / ROLLOUT_LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_right_and_wrong_answers_are_both_charged(scripted, tmp_path):
    right, wrong = TRAIN[0], TRAIN[1]
    server = scripted(TeamModel(sample_problems(), wrong=frozenset({wrong.id})))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            assert isinstance(ctx, OptimizeContext)
            results = await ctx.rollouts(ctx.seed_bundle, [right, wrong], iteration=1)
            return results, ctx.ledger.charged

    (good, bad), charged = asyncio.run(main())
    assert (good.score, good.feedback, good.passed) == (1.0, "", True)
    assert bad.score == 0.0 and "wrong_answer" in bad.feedback
    assert "expected output:" in bad.feedback and "not the answer" in bad.feedback
    assert bad.grade is not None and bad.grade.em == 0
    assert bad.team.transcript and bad.team.n_llm_calls >= 1
    assert charged == 2
    assert [line["id"] for line in rollout_log(tmp_path)].count(wrong.id) == 1
    assert len(rollout_log(tmp_path)) == 2


def test_an_answer_without_a_program_is_charged_with_the_reason(scripted, tmp_path):
    server = scripted(["I am not sure how to solve this one."])

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            return await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1), ctx.ledger

    rollout, ledger = asyncio.run(main())
    assert rollout.score == 0.0 and rollout.grade is None
    assert "no program" in rollout.feedback
    assert ledger.charged == 1 and ledger.infra_failures == 0


def test_a_program_written_before_a_later_call_failed_is_usable_and_charged(scripted, tmp_path):
    draft = Reply.calls(ToolCall("python_exec", {"code": "print(1)"}),
                        content="```python\nprint(0)\n```")
    server = scripted([draft, *failures(20)])

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            return await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1), ctx.ledger

    rollout, ledger = asyncio.run(main())
    assert rollout is not None and rollout.grade is not None
    assert rollout.team.fields["agent_errors"]["solver"]
    assert (ledger.charged, ledger.infra_failures) == (1, 0)


def test_server_errors_beyond_retries_are_refunded_and_retried_with_the_same_seed(
        scripted, tmp_path):
    down = TRAIN[2]
    server = scripted(TeamModel(sample_problems(), down=frozenset({down.id})))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            return await ctx.rollout(ctx.seed_bundle, down, iteration=1), ctx.ledger

    rollout, ledger = asyncio.run(main())
    assert rollout is None
    assert (ledger.charged, ledger.available, ledger.infra_failures, ledger.abandoned) == (
        0, 4, 3, 1)
    sent = requests_about(server, down)
    client_tries = 1 + model_config(server.base_url).max_retries
    assert len(sent) == 3 * client_tries  # three rollout attempts, each retried by the client
    assert len({r["seed"] for r in sent}) == 1
    assert rollout_log(tmp_path) == []


def test_a_refused_connection_is_not_charged(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on once the socket closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def main():
        async with job_context(f"http://127.0.0.1:{port}/v1", tmp_path) as ctx:
            return await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1), ctx.ledger

    rollout, ledger = asyncio.run(main())
    assert rollout is None
    assert (ledger.charged, ledger.infra_failures) == (0, 3)


def test_concurrent_rollouts_never_exceed_the_budget(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()), latency_s=0.05)

    async def main():
        async with job_context(server.base_url, tmp_path, budget=3, concurrency=4) as ctx:
            first = await ctx.rollouts(ctx.seed_bundle, TRAIN, iteration=1)
            again = await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=2)
            return first, again, ctx.ledger

    first, again, ledger = asyncio.run(main())
    assert [r is not None for r in first] == [True] * 3 + [False] * (len(TRAIN) - 3)
    assert again is None and ledger.charged == 3 and ledger.exhausted
    reached = {p.id for p in TRAIN if requests_about(server, p)}
    assert reached == {p.id for p in TRAIN[:3]}
    assert [line["charged"] for line in rollout_log(tmp_path)] == [1, 2, 3]


def test_test_rows_and_foreign_bundles_are_refused(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            assert not any(p.id in ctx.data for p in TEST)
            with pytest.raises(SplitLeak):
                await ctx.rollout(ctx.seed_bundle, TEST[0], iteration=1)
            with pytest.raises(BundleError, match="unknown role"):
                await ctx.rollout({**ctx.seed_bundle, "judge": "x"}, TRAIN[0], iteration=1)
            with pytest.raises(BundleError, match="empty"):
                ctx.validate({"solver": "  "})
            assert ctx.validate({"solver": " Be brief. "}) == {"solver": "Be brief."}
            return ctx.ledger.charged

    assert asyncio.run(main()) == 0
    assert server.chat_requests() == []


def test_seeds_follow_iteration_and_optimizer_seed_never_the_bundle(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))
    problem = TRAIN[0]

    async def seeds(optimizer_seed, sub):
        async with job_context(server.base_url, tmp_path / sub, budget=3,
                               optimizer_seed=optimizer_seed) as ctx:
            other = {"solver": ctx.seed_bundle["solver"] + "\nCheck the limits."}
            runs = [await ctx.rollout(ctx.seed_bundle, problem, iteration=1),
                    await ctx.rollout(other, problem, iteration=1),
                    await ctx.rollout(ctx.seed_bundle, problem, iteration=2)]
            return [r.seed for r in runs]

    zero = asyncio.run(seeds(0, "s0"))
    one = asyncio.run(seeds(1, "s1"))
    assert zero[0] == zero[1] != zero[2]
    assert zero[0] == optimize_scope(optimizer_seed=0, iteration=1, row=problem.id).rollout
    assert [(b - a) % SEED_MODULUS for a, b in zip(zero, one, strict=True)] == [1000] * 3


def test_reflection_is_uncharged_but_recorded_in_the_history(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            answer = await ctx.reflect("Suggest a better solver prompt.", purpose="reflection")
            await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)
            ctx.record_candidate(ctx.seed_bundle, scores={"train": 1.0}, note="after one")
            return answer, ctx.ledger

    answer, ledger = asyncio.run(main())
    assert answer == "ok"
    usage = ledger.uncharged["reflect"]
    assert usage["calls"] == 1 and usage["prompt_tokens"] > 0
    assert ledger.charged == 1
    (entry,) = read_history(tmp_path)
    assert (entry.charged, entry.iteration, entry.scores) == (1, 1, {"train": 1.0})
    assert entry.uncharged["reflect"]["calls"] == 1


def test_overlapping_reflection_calls_each_record_their_own_tokens(scripted, tmp_path):
    slow = Reply("slow", prompt_tokens=100, completion_tokens=9, latency_s=0.5)
    fast = Reply("fast", prompt_tokens=10, completion_tokens=1)
    server = scripted(keyed({"SLOW": [slow], "FAST": [fast]}, default=["ok"]))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:

            async def fast_after_slow_started():
                await asyncio.sleep(0.1)  # the slow call is in flight: the two overlap
                return await ctx.reflect("FAST", purpose="fast")

            answers = await asyncio.gather(ctx.reflect("SLOW", purpose="slow"),
                                           fast_after_slow_started())
            return answers, ctx.ledger

    answers, ledger = asyncio.run(main())
    assert answers == ["slow", "fast"]
    assert ledger.uncharged["reflect"] == {"calls": 2, "prompt_tokens": 110,
                                           "completion_tokens": 10, "n_calls_without_usage": 0}
    calls = {line["purpose"]: line for line in _read_calls(tmp_path / CALLS_LOG)}
    assert [(calls[p]["prompt_tokens"], calls[p]["completion_tokens"]) for p in ("slow", "fast")
            ] == [(100, 9), (10, 1)]


def test_a_masked_sequential_rollout_runs_only_the_active_stages(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def main():
        async with job_context(server.base_url, tmp_path, topology="sequential") as ctx:
            assert ctx.agents == ("analyzer", "coder", "tester", "debugger")
            full = await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)
            masked = await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=2,
                                       active=frozenset({"coder", "debugger"}))
            return full, masked

    full, masked = asyncio.run(main())
    assert (full.team.n_llm_calls, masked.team.n_llm_calls) == (4, 2)
    assert masked.active == frozenset({"coder", "debugger"}) and masked.score == 1.0


def test_reflection_model_comes_from_its_own_variables():
    task = model_config("http://task:1/v1")
    same = reflection_config(task, environ={})
    assert (same.base_url, same.model_id, same.temperature) == (task.base_url, task.model_id, 0.7)
    other = reflection_config(task, environ={"REFLECTION_MODEL_BASE_URL": "http://big:2/v1/",
                                             "REFLECTION_MODEL_ID": "llama"})
    assert (other.base_url, other.model_id) == ("http://big:2/v1",
                                                "meta-llama/Llama-3.1-8B-Instruct")
    assert same.vllm_extras == other.vllm_extras == task.vllm_extras


def test_a_hosted_reflection_model_can_switch_vllm_extras_off():
    task = model_config("http://task:1/v1")
    hosted = reflection_config(task, environ={"REFLECTION_MODEL_VLLM_EXTRAS": "0"})
    assert task.vllm_extras and not hosted.vllm_extras
    with pytest.raises(ValueError, match="REFLECTION_MODEL_VLLM_EXTRAS"):
        reflection_config(task, environ={"REFLECTION_MODEL_VLLM_EXTRAS": "maybe"})


def test_team_cells_resolve_roles_and_refuse_bad_settings():
    assert TeamCell("single").roles == ("solver",)
    assert TeamCell("sequential", 2).agents == ("coder", "debugger")
    assert TeamCell("independent", 3).roles == ("coder",)
    with pytest.raises(ValueError, match="unknown topology 'star'"):
        TeamCell("star")
    with pytest.raises(ValueError, match="sizes"):
        TeamCell("sequential", 3)
    with pytest.raises(ValueError, match="one agent"):
        TeamCell("single", 2)


def test_feedback_text_names_the_failing_test():
    result = TeamResult("print(1)", "", [], 0, 0, 1, 0, {}, {})
    failing = Grade.from_outcomes(
        (TestOutcome(0, Verdict.PASSED, 0.1, 0.1), TestOutcome(1, Verdict.RUNTIME_ERROR, 0, 0)),
        total=5, grader="default", wall_s=0.2,
        feedback=Feedback(1, Verdict.RUNTIME_ERROR, "3\n", "6\n", "", "ZeroDivisionError"))
    text = feedback_text(result, failing)
    assert text.startswith("hidden test 2 of 5 failed: runtime_error (1 passed before it)")
    assert "input:\n3\n" in text and "ZeroDivisionError" in text and "program output" not in text
    assert "no program" in feedback_text(result, None)
    subset = feedback_text(result, failing, tests_of=(5, 9)).splitlines()
    assert subset[:2] == ["hidden test 2 of 5 failed: runtime_error (1 passed before it)",
                          "(optimization grades the first 5 of 9 hidden tests)"]


def test_tokens_of_failed_attempts_are_recorded_in_the_ledger(scripted):
    probe = Reply.calls(ToolCall("python_exec", {"code": "print(1)"}), prompt_tokens=100,
                        completion_tokens=7)
    server = scripted([probe, *failures(1)])  # then HTTP 500 on every request

    async def main():
        async with team_runner(server.base_url) as runner:
            ledger = BudgetLedger(2)
            bundle = bundle_of("single")
            rollout = await ledger.arun_rollout(lambda: runner.attempt(bundle, TRAIN[0], seed=1))
            return rollout, ledger

    rollout, ledger = asyncio.run(main())
    assert rollout is None and (ledger.charged, ledger.abandoned) == (0, 1)
    spent = {"calls": 1, "prompt_tokens": 100, "completion_tokens": 7,
             "n_calls_without_usage": 0}
    assert ledger.failed_attempt_tokens == spent
    assert ledger.state()["failed_attempt_tokens"] == spent


def test_a_timed_out_run_reports_the_tokens_it_spent(scripted):
    probe = Reply.calls(ToolCall("python_exec", {"code": "print(1)"}), prompt_tokens=50,
                        completion_tokens=5)
    server = scripted([probe, Reply.stall(5)])

    async def main():
        async with team_runner(server.base_url) as runner:
            runner.run_timeout_s = 1.0
            with pytest.raises(InfraFailure, match="timed out after 1s") as caught:
                await runner.attempt(bundle_of("single"), TRAIN[0], seed=1)
            return caught.value

    failure = asyncio.run(main())
    assert failure.usage == {"prompt_tokens": 50, "completion_tokens": 5, "n_llm_calls": 1,
                             "n_calls_without_usage": 0}
    assert not failure.kept
