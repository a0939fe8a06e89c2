"""The `gepa` method against a fake context: budget, validation, records, the found prompt."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import threading

import pytest

from lcb.optimize.artifacts import JobResult, read_history, read_model, read_selection
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.job import run_job
from lcb.optimize.journal import ROLLOUT_LOG
from lcb.optimize.method import ReflectionError
from lcb.optimize.methods import get_optimizer
from lcb.optimize.methods.gepa_method import GepaSettings, make
from lcb.optimize.methods.reflection import (
    BEGIN_MARK,
    END_MARK,
    LoopBridge,
)
from tests.helpers_methods import (
    FIX,
    KEYWORD,
    REFLECTION_ENV,
    SEED,
    ReflectingModel,
    cancel_midway,
    fake_context,
    run_method_job,
)
from tests.helpers_optimize import TeamModel, job_config, sample_problems, sample_splits
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(120)
BUDGET_2 = 20


def run(ctx, **settings):
    return asyncio.run(make(**settings).optimize(ctx))


def test_finds_the_keyword_and_returns_a_new_bundle(capsys) -> None:
    ctx = fake_context(budget=60, easy=frozenset({"v0"}))
    seed_before = dict(ctx.seed_bundle)
    result = run(ctx)
    assert KEYWORD in result["coder"]
    assert list(result) == list(SEED)
    assert result is not ctx.seed_bundle and dict(ctx.seed_bundle) == seed_before
    assert ctx.ledger.charged <= 60
    # the seed and the improved candidate were recorded with full validation scores
    assert ctx.candidates[0]["bundle"] == SEED and ctx.candidates[0]["scores"] == {"val": 0.25}
    best = ctx.candidates[-1]
    assert best["bundle"] == result and best["scores"] == {"val": 1.0}
    assert best["parent"] in {bundle_hash(c["bundle"]) for c in ctx.candidates[:-1]}
    # what ran is what was returned: the improved bundle was rolled out as-is
    assert any(call["bundle"] == result for call in ctx.calls)
    assert capsys.readouterr().out == ""  # gepa's log goes to `logging`, not stdout


def test_registry_builds_gepa_and_rejects_bad_settings() -> None:
    assert get_optimizer("gepa").key == "gepa"
    with pytest.raises(ValueError, match="minibatch"):
        make(minibatch=0)
    with pytest.raises(TypeError):
        make(unknown_knob=1)
    assert GepaSettings().max_full_evals == 5 and GepaSettings().minibatch == 3


@pytest.mark.parametrize("budget", [0, 3, 4, 7, 10, 23])
def test_the_budget_is_never_exceeded(budget: int) -> None:
    ctx = fake_context(budget=budget)
    result = run(ctx)
    assert ctx.ledger.charged <= budget
    assert len(ctx.calls) == ctx.ledger.charged
    assert list(result) == list(SEED)
    if budget < 4:  # the seed's validation evaluation (4 problems) does not fit: nothing runs
        assert ctx.calls == [] and result == SEED


@pytest.mark.parametrize(("budget", "per_iteration"), [
    # seed eval 4 leaves 7: two minibatches of 3 would fit, but an iteration may also need
    # the child's validation (4), so none starts (the old rule started one here)
    (11, {0: 4}),
    # 14 left: iteration 1 (analyzer, rejected) runs both minibatches; 8 left < 10: stop
    (18, {0: 4, 1: 6}),
])
def test_evaluations_are_never_cut_in_half(budget: int, per_iteration: dict[int, int]) -> None:
    ctx = fake_context(budget=budget)
    run(ctx)
    by_iteration: dict[int, int] = {}
    for call in ctx.calls:
        by_iteration[call["iteration"]] = by_iteration.get(call["iteration"], 0) + 1
    assert by_iteration == per_iteration


def test_a_truncated_proposal_is_never_adopted() -> None:
    def truncated(prompt: str, _purpose: str) -> str:
        return f"{BEGIN_MARK}\nWrite code. {KEYWORD}\nand then"  # the end marker never came

    ctx = fake_context(budget=40, script=truncated)
    result = run(ctx)
    assert result == SEED and KEYWORD not in result["coder"]
    assert all(call["bundle"] == SEED for call in ctx.calls)
    # seed eval 4, then iterations of one parent minibatch (3) while 10 are left: 9 of them
    assert len(ctx.reflections) == len(ctx.proposals) == 9
    first = ctx.proposals[0]
    assert first["bundle"] == {**SEED, "analyzer": f"Write code. {KEYWORD}\nand then"}
    assert (first["parent"], first["roles"], first["accepted"], first["rejected_by"]) == (
        bundle_hash(SEED), ["analyzer"], False, "validator")
    assert first["reason"] == "the reply has no complete marked prompt (truncated?)"
    assert {p["rejected_by"] for p in ctx.proposals} == {"validator"}


@pytest.mark.parametrize(("reply_text", "reason"), [
    ("(the complete new prompt)", "echoes the answer template's placeholder"),
    ("Go.", "under 30% of the current prompt's"),
    (f"Write code. {KEYWORD} " + "again " * 600, "over the cap of 4 x the seed prompt's"),
])
def test_a_template_echo_or_an_odd_length_is_never_tried(reply_text: str, reason: str) -> None:
    def echo(_prompt: str, _purpose: str) -> str:
        return f"{BEGIN_MARK}\n{reply_text}\n{END_MARK}"

    ctx = fake_context(budget=40, script=echo)
    assert run(ctx) == SEED
    assert all(call["bundle"] == SEED for call in ctx.calls)
    assert ctx.proposals and all(p["rejected_by"] == "validator" and reason in p["reason"]
                                 for p in ctx.proposals)


@pytest.mark.parametrize("bad_text", [
    f"{KEYWORD}\n```python\nprint(1)\n",  # an unclosed fence
    f"{KEYWORD} <new instruction>",  # an unfilled slot
    f"{KEYWORD} {{problem_statement}}",  # an unknown placeholder
])
def test_an_invalid_proposal_is_rejected(bad_text: str) -> None:
    def bad(_prompt: str, _purpose: str) -> str:
        return f"{BEGIN_MARK}\n{bad_text}\n{END_MARK}"

    ctx = fake_context(budget=40, script=bad)
    result = run(ctx)
    assert result == SEED
    assert all(call["bundle"] == SEED for call in ctx.calls)
    assert [c["bundle"] for c in ctx.candidates] == [SEED]
    assert ctx.proposals and all(p["rejected_by"] == "validator" and p["reason"]
                                 and p["bundle"][p["roles"][0]] == bad_text.strip()
                                 for p in ctx.proposals)


def test_reflection_sees_the_role_slice_and_the_feedback() -> None:
    ctx = fake_context(budget=20, easy=frozenset({"p1"}))
    run(ctx)
    first = ctx.reflections[0]
    assert first["purpose"].startswith("gepa:reflect:")
    role = first["purpose"].rsplit(":", 1)[1]
    other = next(r for r in SEED if r != role)
    prompt = first["prompt"]
    assert f"[{role}] answer for" in prompt and f"[{other}]" not in prompt
    assert "wrong answer on test 0" in prompt
    assert SEED[other] not in prompt  # the other role's prompt is not shown
    assert prompt.count("### Problem") <= 3
    assert BEGIN_MARK in prompt and END_MARK in prompt


def test_round_robin_reaches_both_roles_and_iterations_advance() -> None:
    ctx = fake_context(budget=60)  # the coder's prompt matters; the analyzer's comes first
    result = run(ctx)
    assert KEYWORD in result["coder"] and KEYWORD not in result["analyzer"]
    purposes = [r["purpose"] for r in ctx.reflections]
    assert purposes[:2] == ["gepa:reflect:analyzer", "gepa:reflect:coder"]
    iterations = [c["iteration"] for c in ctx.calls]
    assert iterations[:4] == [0, 0, 0, 0] and max(iterations) >= 2


def test_model_calls_and_records_run_on_the_event_loop_thread() -> None:
    ctx = fake_context(budget=30)
    run(ctx)
    assert {r["thread"] for r in ctx.reflections} == {ctx.loop_thread}
    assert {c["thread"] for c in ctx.candidates} == {ctx.loop_thread}


def test_infrastructure_failures_are_not_charged() -> None:
    ctx = fake_context(budget=30, infra_fail=frozenset({"p0", "p1"}))
    run(ctx)
    assert ctx.ledger.infra_failures > 0
    assert ctx.ledger.charged == len(ctx.calls) <= 30


def test_a_reflection_failure_is_raised() -> None:
    asked: list[str] = []

    def broken(_prompt: str, purpose: str) -> str:
        asked.append(purpose)
        raise ReflectionError("reflection endpoint http://127.0.0.1:9 refused")

    ctx = fake_context(budget=40, script=broken)
    with pytest.raises(ReflectionError, match="refused"):
        run(ctx)
    # it stopped right after the first failed reflection: the seed's validation (4) and the
    # parent's minibatch (3); gepa retries a failed reflection, but the adapter does not ask
    # the endpoint again
    assert ctx.ledger.charged == 7 and asked == ["gepa:reflect:analyzer"]


def test_the_bridge_refuses_the_loop_thread() -> None:
    async def main() -> None:
        bridge = LoopBridge.current()
        with pytest.raises(RuntimeError, match="deadlock"):
            bridge.call(lambda: 1)
        assert await asyncio.to_thread(bridge.call, threading.get_ident) != bridge.call.__self__
        assert await asyncio.to_thread(bridge.call, threading.get_ident) == bridge._loop_thread

    asyncio.run(main())


@pytest.mark.slow
def test_a_gepa_job_end_to_end(scripted, tmp_path, monkeypatch) -> None:
    """optimize -> validate -> test through the scripted server, the real team and grader."""
    splits = sample_splits()
    wrong = {*splits.train, splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="gepa", budget=12,
                         wrong=wrong)
    assert "gepa" in job.model.reflections
    history = read_history(job.out)
    assert [e.scores["val"] for e in history if "val" in e.scores][:2] == [2 / 3, 1.0]
    selection = read_selection(job.out)
    assert selection.deployed == "incumbent"
    assert FIX in selection.deployed_bundle["solver"]
    result = read_model(job.out / "result.json", JobResult)
    assert (result.baseline, result.deployed) == (2 / 3, 1.0)


@pytest.mark.slow
def test_a_gepa_job_on_a_two_stage_sequential_team(scripted, tmp_path, monkeypatch) -> None:
    """The same job on coder -> debugger: the debugger's program is submitted, so only a fix
    in its prompt helps; the first reflection (on the coder) cannot, so gepa needs a second
    round; it then spends the budget until an iteration's worst case no longer fits."""
    splits = sample_splits()
    wrong = {*splits.train, splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="gepa", budget=BUDGET_2,
                         wrong=wrong, topology="sequential", team_size=2)
    assert (job.summary["topology"], job.summary["team_size"]) == ("sequential", 2)
    # seed 3 + two iterations of 6 (coder rejected, debugger accepted) + its validation 3 = 18:
    # the next iteration's worst case (2 x 3 + 3 = 9) does not fit in the 2 left, so gepa
    # stops there (it used to start it and stop when a minibatch no longer fitted)
    assert job.summary["charged"] == 18
    # the ledger now keeps uncharged usage per kind; the purposes are in the calls log
    ledger = json.loads((job.out / "ledger.json").read_text())
    assert set(ledger["uncharged"]) == {"reflect"}
    with gzip.open(job.out / "calls.jsonl.gz", "rt", encoding="utf-8") as handle:
        purposes = [json.loads(line)["purpose"] for line in handle if line.strip()]
    assert purposes == ["gepa:reflect:coder", "gepa:reflect:debugger"]
    proposals = [e for e in read_history(job.out) if e.kind == "proposal"]
    assert [(p.roles, p.accepted, p.rejected_by) for p in proposals] == [
        (["coder"], False, "minibatch"), (["debugger"], True, None)]
    history = read_history(job.out)
    assert list(history[0].bundle) == ["coder", "debugger"]
    selection = read_selection(job.out)
    assert selection.deployed == "incumbent"
    assert FIX in selection.deployed_bundle["debugger"]
    result = read_model(job.out / "result.json", JobResult)
    assert (result.baseline, result.deployed) == (2 / 3, 1.0)
    # each charged run of the two-stage team made both model calls
    logged = [json.loads(line) for line in (job.out / ROLLOUT_LOG).read_text().splitlines()]
    assert {line["n_llm_calls"] for line in logged} == {2}


def test_cancelling_the_job_ends_the_worker_thread() -> None:
    """A rollout takes 30 s here; the cancelled job must not wait for it."""
    ctx = fake_context(budget=40, delay_s=30.0)
    assert cancel_midway(make(), ctx) < 20
    assert ctx.calls == []


@pytest.mark.slow
def test_an_interrupted_gepa_job_resumes_to_the_same_result(scripted, tmp_path,
                                                              monkeypatch) -> None:
    """Cancelled in iteration 2 (after 10 charged rollouts) and rerun with the same command:
    the rerun retraces the journal, charges nothing twice and ends as an uninterrupted run."""
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    splits = sample_splits()
    wrong = frozenset({*splits.train, splits.validation[0], splits.test[1]})

    def job(out):
        team = TeamModel(sample_problems(), wrong=wrong, fixed_by=FIX)
        server = scripted(ReflectingModel(team))
        return job_config(server.base_url, out, method="gepa", budget=BUDGET_2,
                          topology="sequential", team_size=2)

    async def interrupted(config) -> None:
        task = asyncio.create_task(run_job(config))
        log = config.out / ROLLOUT_LOG
        while not task.done():
            if log.exists() and len(log.read_text().splitlines()) >= 10:
                task.cancel()
            await asyncio.sleep(0.005)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    whole = asyncio.run(run_job(job(tmp_path / "whole")))
    asyncio.run(interrupted(job(tmp_path / "cut")))
    assert not (tmp_path / "cut" / "result.json").exists()
    cut = len((tmp_path / "cut" / ROLLOUT_LOG).read_text().splitlines())
    assert 10 <= cut < whole["charged"]  # it stopped inside the optimization
    resumed = asyncio.run(run_job(job(tmp_path / "cut")))
    assert resumed["result"] == whole["result"] and resumed["charged"] == whole["charged"]

    def trail(out):
        lines = [json.loads(x) for x in (out / ROLLOUT_LOG).read_text().splitlines()]
        history = [e.model_dump(exclude={"time"}) for e in read_history(out)]
        return sorted(line["key"] for line in lines), history  # concurrent: any order

    keys, history = trail(tmp_path / "cut")
    assert len(set(keys)) == len(keys)  # no rollout charged twice
    assert (keys, history) == trail(tmp_path / "whole")
