"""The `gepa` method against a fake context: budget, validation, records, the found prompt."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from lcb.optimize.artifacts import JobResult, read_history, read_model, read_selection
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.method import ReflectionError
from lcb.optimize.methods import get_optimizer
from lcb.optimize.methods.gepa_method import GepaSettings, make
from lcb.optimize.methods.reflection import (
    BEGIN_MARK,
    END_MARK,
    LoopBridge,
    SliceLimits,
    clip,
    parse_proposal,
    role_slice,
)
from lcb.optimize.rollout import ROLLOUT_LOG
from tests.helpers_methods import FIX, KEYWORD, SEED, cancel_midway, fake_context, run_method_job
from tests.helpers_optimize import sample_splits
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


def test_evaluations_are_never_cut_in_half() -> None:
    ctx = fake_context(budget=11)  # seed eval 4, then a parent and a child minibatch of 3
    run(ctx)
    by_iteration: dict[int, int] = {}
    for call in ctx.calls:
        by_iteration[call["iteration"]] = by_iteration.get(call["iteration"], 0) + 1
    assert by_iteration[0] == 4
    assert all(count % 3 == 0 for it, count in by_iteration.items() if it > 0)


def test_a_truncated_proposal_is_never_adopted() -> None:
    def truncated(prompt: str, _purpose: str) -> str:
        return f"{BEGIN_MARK}\nWrite code. {KEYWORD}\nand then"  # the end marker never came

    ctx = fake_context(budget=40, script=truncated)
    result = run(ctx)
    assert result == SEED and KEYWORD not in result["coder"]
    assert all(call["bundle"] == SEED for call in ctx.calls)
    assert len(ctx.reflections) >= 2


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
    def broken(_prompt: str, _purpose: str) -> str:
        raise ReflectionError("reflection endpoint http://127.0.0.1:9 refused")

    ctx = fake_context(budget=40, script=broken)
    with pytest.raises(ReflectionError, match="refused"):
        run(ctx)
    assert ctx.ledger.charged <= 10  # it stopped right after the first failed reflection


def test_parse_proposal_needs_both_markers() -> None:
    assert parse_proposal(f"x\n{BEGIN_MARK}\n  New text.\n{END_MARK}\ntrailing") == "New text."
    assert parse_proposal(f"{BEGIN_MARK}\nNew text.") is None
    assert parse_proposal("New text.") is None
    assert parse_proposal(f"{BEGIN_MARK}\n\n{END_MARK}") is None


def test_role_slice_clips_messages_and_caps_their_number() -> None:
    transcript = [{"source": "coder_0", "role": "coder", "type": "system", "content": "SYS"}]
    transcript += [{"source": "coder_0", "role": "coder", "type": "assistant",
                    "content": f"message {i} " + "x" * 500} for i in range(10)]
    transcript.append({"source": "tester_0", "role": "tester", "type": "user", "content": "T"})
    kept = role_slice(transcript, "coder", limits=SliceLimits(clip_chars=100, max_messages=4))
    assert len(kept) == 5 and kept[2]["type"] == "note"
    assert kept[0]["content"].startswith("message 0") and kept[-1]["content"].startswith(
        "message 9")
    assert all(len(m["content"]) <= 100 + 20 for m in kept)
    assert all("SYS" not in m["content"] and m["content"] != "T" for m in kept)
    assert clip("abcdef", 0) == "abcdef" and len(clip("a" * 50, 10)) < 50


def test_the_bridge_refuses_the_loop_thread() -> None:
    async def main() -> None:
        bridge = LoopBridge.current()
        with pytest.raises(RuntimeError, match="deadlock"):
            bridge.call(lambda: 1)
        assert await asyncio.to_thread(bridge.call, threading.get_ident) != bridge.call.__self__
        assert await asyncio.to_thread(bridge.call, threading.get_ident) == bridge._loop_thread

    asyncio.run(main())


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


def test_a_gepa_job_on_a_two_stage_sequential_team(scripted, tmp_path, monkeypatch) -> None:
    """The same job on coder -> debugger: the debugger's program is submitted, so only a fix
    in its prompt helps; the first reflection (on the coder) cannot, so gepa needs a second
    round; it then spends the budget until a minibatch (3) no longer fits."""
    splits = sample_splits()
    wrong = {*splits.train, splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="gepa", budget=BUDGET_2,
                         wrong=wrong, topology="sequential", team_size=2)
    assert (job.summary["topology"], job.summary["team_size"]) == ("sequential", 2)
    assert BUDGET_2 - 3 < job.summary["charged"] <= BUDGET_2
    ledger = json.loads((job.out / "ledger.json").read_text())
    assert {"gepa:reflect:coder", "gepa:reflect:debugger"} <= set(ledger["uncharged"])
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
