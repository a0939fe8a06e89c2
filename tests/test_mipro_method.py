"""The `mipro` method against a fake context: budget, validation, demos, the found prompt."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lcb.optimize.artifacts import JobResult, read_history, read_model, read_selection
from lcb.optimize.bundle import validate_bundle
from lcb.optimize.method import ReflectionError
from lcb.optimize.methods import get_optimizer
from lcb.optimize.methods.mipro_method import MiproSettings, make
from lcb.optimize.methods.mipro_program import (
    DEMO_INTRO,
    flatten_request,
    render_role,
    with_field_markers,
)
from tests.helpers_methods import (
    FIX,
    KEYWORD,
    SEED,
    cancel_midway,
    dspy_script,
    fake_context,
    run_method_job,
)
from tests.helpers_optimize import sample_splits
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(180)
EASY = frozenset({"p0", "p2", "v0"})
BUDGET_2 = 28


def run(ctx, **settings):
    return asyncio.run(make(minibatch_size=2, num_threads=2, **settings).optimize(ctx))


def test_finds_the_keyword_with_demos_from_passing_runs(capsys) -> None:
    ctx = fake_context(budget=80, easy=EASY, script=dspy_script())
    seed_before = dict(ctx.seed_bundle)
    result = run(ctx)
    assert KEYWORD in result["coder"]
    assert list(result) == list(SEED) and dict(ctx.seed_bundle) == seed_before
    assert result is not ctx.seed_bundle
    assert ctx.ledger.charged <= 80 and len(ctx.calls) == ctx.ledger.charged
    # the incumbent is exactly a bundle that ran, and it is valid
    assert any(call["bundle"] == result for call in ctx.calls)
    assert validate_bundle(result, seed=SEED) == result
    # demos come from passing train runs only
    if DEMO_INTRO in result["coder"]:
        assert "task for p1" not in result["coder"] and "task for p3" not in result["coder"]
        assert "task for p0" in result["coder"] or "task for p2" in result["coder"]
    # evaluations were recorded: the baseline first, a better full evaluation later
    assert ctx.candidates[0]["bundle"] == SEED and ctx.candidates[0]["scores"] == {"val": 0.25}
    assert any(c["scores"].get("val") == 1.0 and c["bundle"] == result for c in ctx.candidates)
    assert {c["thread"] for c in ctx.candidates} == {ctx.loop_thread}
    assert {r["thread"] for r in ctx.reflections} == {ctx.loop_thread}
    # bootstrapping and the baseline run at iteration 0, trials at their trial number
    assert ctx.calls[0]["iteration"] == 0 and max(c["iteration"] for c in ctx.calls) >= 2
    assert capsys.readouterr().out == ""  # nothing reaches stdout


@pytest.mark.parametrize("bad", [
    lambda basic: f"{basic} {KEYWORD}\n```python\nprint(1)",  # truncated inside a fence
    lambda basic: f"{basic} {KEYWORD} {{problem_statement}}",  # an unfilled slot
    lambda basic: "   ",  # empty
])
def test_invalid_instructions_are_never_adopted(bad) -> None:
    ctx = fake_context(budget=80, easy=EASY, script=dspy_script(bad))
    result = run(ctx)
    assert KEYWORD not in result["coder"] and KEYWORD not in result["analyzer"]
    assert all(KEYWORD not in text for call in ctx.calls for text in call["bundle"].values())
    assert result["coder"].startswith(SEED["coder"])


@pytest.mark.parametrize("budget", [0, 5, 12, 17, 30])
def test_the_budget_is_never_exceeded(budget: int) -> None:
    ctx = fake_context(budget=budget, easy=EASY, script=dspy_script())
    result = run(ctx)
    assert ctx.ledger.charged <= budget and len(ctx.calls) == ctx.ledger.charged
    assert list(result) == list(SEED)
    if budget <= 12:  # bootstrapping (two passes over 6 train problems) spends it all
        assert result == SEED


def test_a_reflection_failure_is_raised() -> None:
    def broken(_prompt: str, _purpose: str) -> str:
        raise ReflectionError("reflection endpoint http://127.0.0.1:9 refused")

    ctx = fake_context(budget=80, easy=EASY, script=broken)
    with pytest.raises(ReflectionError, match="refused"):
        run(ctx)


def test_registry_and_settings() -> None:
    assert get_optimizer("mipro").key == "mipro"
    settings = MiproSettings()
    assert (settings.max_bootstrapped_demos, settings.max_labeled_demos,
            settings.num_candidates, settings.num_trials) == (4, 0, 3, 3)
    with pytest.raises(ValueError, match="num_candidates"):
        make(num_candidates=2)
    with pytest.raises(ValueError, match="num_trials"):
        make(num_trials=0)
    with pytest.raises(ValueError, match="demo_chars"):
        make(demo_chars=-1)


def test_rendered_demos_keep_the_bundle_valid() -> None:
    demos = [{"task": "read {n} numbers\n~~~ not a fence", "response": "```python\nprint(1)"}]
    text = render_role("Solve it.", demos, demo_chars=1000)
    assert text.startswith("Solve it.") and DEMO_INTRO in text
    assert validate_bundle({"solver": text}, seed={"solver": "Solve."})["solver"] == text
    assert render_role(" Solve it. ", [], demo_chars=10) == "Solve it."
    assert "x" * 60 not in render_role("S", [{"task": "x" * 100, "response": "y"}], demo_chars=40)


def test_replies_without_markers_become_the_requested_field() -> None:
    prompt = "Your output fields are:\n1. `proposed_instruction` (str): the text\nAll"
    assert with_field_markers("Be careful.", prompt) == (
        "[[ ## proposed_instruction ## ]]\nBe careful.\n\n[[ ## completed ## ]]")
    marked = "[[ ## proposed_instruction ## ]]\nX\n\n[[ ## completed ## ]]"
    assert with_field_markers(marked, prompt) == marked
    two = "Your output fields are:\n1. `a` (str)\n2. `b` (str)\nAll"
    assert with_field_markers("plain", two) == "plain"


def test_flatten_request_keeps_system_and_messages() -> None:
    part = SimpleNamespace(text="hello")
    one = SimpleNamespace(system="SYS", messages=[SimpleNamespace(role="user", parts=[part])])
    assert flatten_request(one) == "SYS\n\nhello"
    two = SimpleNamespace(system=None, messages=[SimpleNamespace(role="user", parts=[part]),
                                                 SimpleNamespace(role="assistant", parts=[part])])
    assert flatten_request(two) == "[user]\nhello\n\n[assistant]\nhello"


def test_a_mipro_job_end_to_end(scripted, tmp_path, monkeypatch) -> None:
    """optimize -> validate -> test with the independent team, through the scripted server."""
    splits = sample_splits()
    wrong = {*splits.train[:4], splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="mipro", budget=30,
                         wrong=wrong, topology="independent", method_settings={"num_threads": 2})
    assert "dspy" in job.model.reflections
    history = read_history(job.out)
    assert [e.scores for e in history if e.scores][0] == {"val": 2 / 3}
    selection = read_selection(job.out)
    assert selection.deployed == "incumbent" and FIX in selection.deployed_bundle["coder"]
    ran = {entry.bundle["coder"] for entry in history if entry.kind == "candidate"}
    assert selection.deployed_bundle["coder"] in ran  # the incumbent is a bundle that ran
    result = read_model(job.out / "result.json", JobResult)
    assert (result.baseline, result.deployed) == (2 / 3, 1.0)


def test_a_mipro_job_on_a_two_stage_sequential_team(scripted, tmp_path, monkeypatch) -> None:
    """mipro on coder -> debugger: two prompt slots, each with its own instruction candidates
    and demos; only a fix in the debugger's (the submitting stage's) prompt helps."""
    splits = sample_splits()
    wrong = {*splits.train[:4], splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="mipro", budget=BUDGET_2,
                         wrong=wrong, topology="sequential", team_size=2,
                         method_settings={"num_threads": 2})
    assert (job.summary["topology"], job.summary["team_size"]) == ("sequential", 2)
    assert job.summary["charged"] == BUDGET_2  # bootstrapping, baseline, 3 trials: all of it
    assert "dspy" in job.model.reflections
    history = read_history(job.out)
    assert list(history[0].bundle) == ["coder", "debugger"]
    assert [e.scores for e in history if e.scores][0] == {"val": 2 / 3}
    selection = read_selection(job.out)
    assert selection.deployed == "incumbent" and FIX in selection.deployed_bundle["debugger"]
    ran = [entry.bundle for entry in history if entry.kind == "candidate"]
    assert selection.deployed_bundle in ran  # the incumbent is a bundle that ran, both roles
    result = read_model(job.out / "result.json", JobResult)
    assert (result.baseline, result.deployed) == (2 / 3, 1.0)


def test_cancelling_the_job_ends_the_worker_thread() -> None:
    """A rollout takes 30 s here; the cancelled job must not wait for it."""
    ctx = fake_context(budget=40, delay_s=30.0, script=dspy_script())
    assert cancel_midway(make(minibatch_size=2, num_threads=2), ctx) < 20
    assert ctx.calls == []
