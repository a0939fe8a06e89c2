"""The `mipro` method against a fake context: budget, validation, demos, the found prompt."""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from lcb.optimize.artifacts import JobResult, read_history, read_model, read_selection
from lcb.optimize.bundle import BundleError, bundle_hash, validate_bundle
from lcb.optimize.method import ReflectionError
from lcb.optimize.methods import get_optimizer
from lcb.optimize.methods.mipro_method import MiproSettings, SearchPlan, make
from lcb.optimize.methods.mipro_program import (
    DEMO_INTRO,
    flatten_request,
    render_role,
    with_field_markers,
)
from lcb.optimize.methods.mipro_search import MiproDiverged
from tests.helpers_methods import (
    FIX,
    KEYWORD,
    SEED,
    FakeContext,
    FakeData,
    cancel_midway,
    dspy_script,
    fake_context,
    make_problem,
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


@pytest.mark.parametrize("budget", [0, 5, 7, 8, 12, 17, 30])
def test_the_budget_is_never_exceeded(budget: int) -> None:
    ctx = fake_context(budget=budget, easy=EASY, script=dspy_script())
    result = run(ctx)
    assert ctx.ledger.charged <= budget and len(ctx.calls) == ctx.ledger.charged
    assert list(result) == list(SEED)
    if budget < 8:  # below the baseline (4) plus one trial (2) and its full evaluation (2)
        assert result == SEED and ctx.calls == [] and ctx.checkpoints == []
    else:  # V=4, m=2: bootstrap cap min(budget/4, budget-8); T trials cost 2T + 2*ceil(T/5)
        # 8: cap 0, 4 + 4 | 12: 3 + 4 + 4 (1 left) | 17: 4 + 4 + 8 | 30: 6 (all train) + 4 + 20
        assert ctx.ledger.charged == {8: 8, 12: 11, 17: 16, 30: 30}[budget]


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
            settings.num_candidates, settings.num_trials,
            settings.max_bootstrap_rollouts) == (4, 0, 3, None, None)
    assert make(num_trials=7, max_bootstrap_rollouts=0).settings.num_trials == 7
    with pytest.raises(ValueError, match="num_candidates"):
        make(num_candidates=2)
    with pytest.raises(ValueError, match="num_trials"):
        make(num_trials=0)
    with pytest.raises(ValueError, match="minibatch_full_eval_steps"):
        make(minibatch_full_eval_steps=0)
    with pytest.raises(ValueError, match="demo_chars"):
        make(demo_chars=-1)
    with pytest.raises(ValueError, match="max_bootstrap_rollouts .* or null"):
        make(max_bootstrap_rollouts=-1)


def test_num_trials_overrides_the_plan() -> None:
    ctx = fake_context(budget=80, easy=EASY, script=dspy_script())
    run(ctx, num_trials=2)
    trial_iterations = {c["iteration"] for c in ctx.calls} - {0}
    assert ctx.checkpoints[-1]["state"]["trials"] == 2 and len(trial_iterations) == 2
    assert len([p for p in ctx.proposals if p["iteration"]]) == 2
    assert [c["state"]["trial"] for c in ctx.checkpoints] == [0, 1, 2]


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_mipro_job_on_a_two_stage_sequential_team(scripted, tmp_path, monkeypatch) -> None:
    """mipro on coder -> debugger: two prompt slots, each with its own instruction candidates
    and demos; only a fix in the debugger's (the submitting stage's) prompt helps."""
    splits = sample_splits()
    wrong = {*splits.train[:4], splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="mipro", budget=BUDGET_2,
                         wrong=wrong, topology="sequential", team_size=2,
                         method_settings={"num_threads": 2})
    assert (job.summary["topology"], job.summary["team_size"]) == ("sequential", 2)
    # 3 validation rows, no minibatches: bootstrapping (at most 7), the baseline and trials of
    # 3 rollouts each, as many as the rest pays for: all of it here
    assert job.summary["charged"] == BUDGET_2
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


# --- the budget at standard sizes, replays, the history, resume ---------------------------------

STANDARD_EASY = frozenset({f"p{i}" for i in range(0, 150, 7)} | {f"v{i}" for i in range(0, 50, 4)})


@dataclass
class CountingContext(FakeContext):
    """A FakeContext that also logs every rollout request (replays included)."""

    requests: list[tuple[str, str, int]] = field(default_factory=list)

    async def rollout(self, bundle, problem, *, iteration, active=None):
        self.requests.append((bundle_hash(bundle), problem.id, iteration))
        return await super().rollout(bundle, problem, iteration=iteration, active=active)


def standard(budget: int = 600, *, easy: frozenset[str] = STANDARD_EASY,
             journal: dict | None = None, restored: dict | None = None,
             n_train: int = 150, n_val: int = 50) -> CountingContext:
    data = FakeData(train=tuple(make_problem(i) for i in range(n_train)),
                    validation=tuple(make_problem(i, prefix="v") for i in range(n_val)))
    ctx = CountingContext(seed_bundle=SEED, data=data, budget=budget, easy=easy,
                          script=dspy_script(), restored=restored)
    ctx._journal.update(journal or {})
    return ctx


def expected_trials(left: int, *, n_val: int = 50, mb: int = 35, steps: int = 5) -> int:
    """The rule, written out: trials of `mb` rows, a full evaluation (n_val - mb new rows)
    every `steps` trials and after the last, as many as `left` pays for."""
    trials = 0
    while (trials + 1) * mb + math.ceil((trials + 1) / steps) * (n_val - mb) <= left:
        trials += 1
    return trials


def bootstrap_charged(ctx: FakeContext) -> int:
    return sum(1 for c in ctx.calls if c["iteration"] == 0 and c["problem"].startswith("p"))


def full_evals(ctx: FakeContext) -> list[dict]:
    return [c for c in ctx.candidates if "val" in c["scores"] and c["iteration"]]


def test_plan_rule() -> None:
    plan = SearchPlan(budget=600, n_val=50, minibatch=35, full_eval_steps=5)
    assert [plan.cost(t) for t in (1, 5, 6, 13)] == [50, 190, 240, 500]
    assert (plan.least, plan.bootstrap_cap(None), plan.bootstrap_cap(40)) == (100, 150, 40)
    assert [plan.trials(spent=b) for b in (0, 33, 150, 500, 501)] == [14, 13, 10, 1, 0]
    small = SearchPlan(budget=120, n_val=50, minibatch=35, full_eval_steps=5)
    assert small.bootstrap_cap(None) == 20 and small.bootstrap_cap(500) == 20  # 120 - 100
    flat = SearchPlan(budget=30, n_val=3, minibatch=3, full_eval_steps=5)
    assert (flat.minibatching, flat.cost(4), flat.least) == (False, 12, 6)


@pytest.mark.parametrize("cap", [None, 40])
def test_standard_sizes_spend_the_budget(cap: int | None) -> None:
    ctx = standard(easy=frozenset() if cap else STANDARD_EASY)
    result = asyncio.run(make(max_bootstrap_rollouts=cap).optimize(ctx))
    charged, boot = ctx.ledger.charged, bootstrap_charged(ctx)
    assert 585 < charged <= 600 and len(ctx.calls) == charged
    assert boot <= (cap or 150) and (cap is None or boot == cap)  # nothing passes: the cap
    trials = ctx.checkpoints[-1]["state"]["trials"]
    assert trials == expected_trials(600 - boot - 50)
    extra = len(full_evals(ctx)) - math.ceil(trials / 5)
    assert charged == boot + 50 + 35 * trials + 15 * (math.ceil(trials / 5) + extra)
    assert 600 - charged < 15  # the rest paid for `extra` more full evaluations
    assert [len(ctx.proposals), ctx.checkpoints[-1]["state"]["trial"]] == [4 + trials, trials]
    assert KEYWORD in result["coder"] and bundle_hash(result) == ctx.checkpoints[-1][
        "state"]["best_hash"]


def test_replays_are_served_and_not_charged() -> None:
    ctx = standard(easy=frozenset())  # the whole train split is walked twice while bootstrapping
    asyncio.run(make().optimize(ctx))
    keys = Counter(ctx.requests)
    assert ctx.ledger.charged == len(keys) == len(ctx.calls)
    assert ctx.replays == len(ctx.requests) - len(keys)
    train_boot = [k for k in ctx.requests if k[2] == 0 and k[1].startswith("p")]
    assert (len(train_boot), len(set(train_boot))) == (300, 150)  # pass two: all replays
    for entry in full_evals(ctx):  # a full evaluation replays its trial's minibatch
        at = [k for k in ctx.requests if k[2] == entry["iteration"]]
        assert (len(at), len(set(at))) == (35 + 50, 50)
    assert ctx.replays == 150 + 35 * len(full_evals(ctx))


def test_a_budget_below_baseline_and_one_trial_keeps_the_seed(caplog) -> None:
    ctx = standard(99)
    with caplog.at_level(logging.WARNING):
        assert asyncio.run(make().optimize(ctx)) == SEED
    assert ctx.calls == [] and ctx.reflections == [] and ctx.proposals == []
    assert "cannot pay for the baseline evaluation and one trial (100); keeping the seed" in \
        caplog.text
    exact = standard(100)  # no bootstrapping, the baseline, one trial and its full evaluation
    asyncio.run(make().optimize(exact))
    assert (exact.ledger.charged, bootstrap_charged(exact)) == (100, 0)
    assert [p["scored_on"] for p in exact.proposals][-1] == "val"


def _valid(bundle: dict[str, str]) -> bool:
    try:
        return validate_bundle(bundle, seed=SEED) == bundle
    except BundleError:
        return False


def test_every_proposal_is_recorded() -> None:
    slot = "Read {problem_statement} twice."  # an unfilled template slot
    bad = dspy_script(lambda basic: slot if basic.startswith("Read") else f"{basic} {KEYWORD}")
    ctx = fake_context(budget=80, easy=EASY, script=bad)
    result = run(ctx)
    seed_hash = bundle_hash(SEED)
    instr = [p for p in ctx.proposals if p["iteration"] == 0]  # two per role: 3 candidates
    assert [p["roles"] for p in instr] == [["analyzer"]] * 2 + [["coder"]] * 2
    for p in instr:  # the script's third answer for the coder keeps a {slot}: rejected too
        valid = _valid(p["bundle"])
        assert (p["accepted"], p["rejected_by"], bool(p["reason"])) == (
            valid, None if valid else "validator", not valid)
    assert [p["accepted"] for p in instr[:3]] == [False, False, True]
    assert instr[0]["bundle"]["analyzer"] == slot  # the proposed text, even when rejected
    trials = [p for p in ctx.proposals if p["iteration"]]
    numbers = sorted({c["iteration"] for c in ctx.calls} - {0})
    assert sorted(p["iteration"] for p in trials) == numbers  # one per trial
    assert all(p["parent"] == seed_hash for p in ctx.proposals)
    for p in trials:
        assert p["roles"] == [r for r in SEED if p["bundle"][r] != SEED[r]]
        assert (p["rejected_by"] is None) == p["accepted"]
        assert p["scored_on"] == "val" or p["rejected_by"] in ("minibatch", "budget")
    accepted = [p for p in trials if p["accepted"]]
    assert accepted and accepted[-1]["bundle"] == result  # the last one kept is the incumbent
    assert [p["scores"]["val"] for p in accepted] == sorted({p["scores"]["val"]
                                                            for p in accepted})


def _replay(first: FakeContext, upto: int, restored: dict | None) -> CountingContext:
    journal = dict(list(first._journal.items())[:upto])  # what a job killed there journaled
    second = standard(first.budget, journal=journal, restored=restored, n_train=30, n_val=12)
    asyncio.run(make(minibatch_size=5, num_threads=3).optimize(second))
    return second


def _without(entries: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in keys} for e in entries]


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [3, 7])
def test_a_resumed_run_retraces_the_path_without_charging_twice(kill_at: int) -> None:
    first = standard(150, n_train=30, n_val=12)
    result = asyncio.run(make(minibatch_size=5, num_threads=3).optimize(first))
    assert first.ledger.charged > 140 and len(first.checkpoints) > kill_at
    mark = first.checkpoints[kill_at]
    upto = mark["ledger"]["charged"] + 4  # killed a little after that checkpoint
    second = _replay(first, upto, mark["state"])
    assert bundle_hash(_result(second)) == bundle_hash(result)
    assert _without(second.proposals, "charged") == _without(first.proposals, "charged")
    assert [c["state"] for c in second.checkpoints] == [c["state"] for c in first.checkpoints]
    assert _without(second.candidates, "charged", "thread") == _without(
        first.candidates, "charged", "thread")
    assert [r["prompt"] for r in second.reflections] == [r["prompt"] for r in first.reflections]
    ran = {(bundle_hash(c["bundle"]), c["problem"], c["iteration"]) for c in second.calls}
    journaled = {key[:3] for key in list(first._journal)[:upto]}
    everything = {key[:3] for key in first._journal}
    assert ran == everything - journaled and second.ledger.charged == len(ran)
    whole = _replay(first, len(first._journal), first.checkpoints[-1]["state"])
    assert whole.calls == [] and whole.ledger.charged == 0


def _result(ctx: FakeContext) -> dict[str, str]:
    best = ctx.checkpoints[-1]["state"]["best_hash"]
    return next(c["bundle"] for c in ctx.candidates if bundle_hash(c["bundle"]) == best)


def test_a_diverging_resume_is_refused() -> None:
    first = standard(150, n_train=30, n_val=12)
    asyncio.run(make(minibatch_size=5, num_threads=3).optimize(first))
    state = dict(first.checkpoints[2]["state"], best_hash="0" * 16)
    with pytest.raises(MiproDiverged, match="at trial 2 the interrupted run checkpointed"):
        _replay(first, len(first._journal), state)
    beyond = dict(first.checkpoints[-1]["state"], trial=99)
    with pytest.raises(MiproDiverged, match="before reaching the checkpoint of trial 99"):
        _replay(first, len(first._journal), beyond)


def test_an_error_from_a_rollout_during_the_trials_ends_the_search() -> None:
    """DSPy scores a failing example 0 and goes on; a misconfigured endpoint must stop it."""
    from lcb.optimize.outcomes import Misconfigured

    ctx = fake_context(budget=80, easy=frozenset({"p0", "p2", "v0"}), script=dspy_script())
    real, refused = ctx.rollout, []

    async def rollout(bundle, problem, *, iteration, active=None):
        if iteration >= 2:  # the endpoint starts refusing during the trials
            refused.append(problem.id)
            raise Misconfigured("the job looks misconfigured: the server refused ...")
        return await real(bundle, problem, iteration=iteration, active=active)

    ctx.rollout = rollout
    with pytest.raises(Misconfigured):
        asyncio.run(make(minibatch_size=2, num_threads=2).optimize(ctx))
    assert 0 < len(refused) <= 2 * 2  # stopped within the trial it happened in
