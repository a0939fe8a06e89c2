"""Learning curves on one axis (issue #25): the incumbent at 10/25/50/100 % of the budget,
scored on the validation split once the gate is sealed (`--curve`)."""

import asyncio
import json

import pytest

from lcb.optimize import methods
from lcb.optimize.artifacts import HistoryEntry
from lcb.optimize.curves import FRACTIONS, RULES, incumbent, snapshots
from lcb.optimize.errors import JobError
from lcb.optimize.job import run_job
from lcb.optimize.jobcost import read_cost
from lcb.registry import METHODS
from tests.helpers_methods import FIX
from tests.helpers_optimize import Probe, TeamModel, job_config, sample_problems, sample_splits
from tests.scripted_server import scripted_fixture  # noqa: F401

SEED = {"solver": "seed"}


def entry(kind, charged, text, **fields):
    return HistoryEntry(kind=kind, iteration=0, bundle={"solver": text}, charged=charged,
                        **fields)


HISTORY = [entry("candidate", 0, "seed", scores={"val": 0.5}),
           entry("candidate", 15, "a", scores={"val": 0.7}),
           entry("proposal", 30, "b", accepted=True, scores={"val": 0.9}),
           entry("candidate", 45, "c", scores={"val": 0.6}),
           entry("final", 100, "a")]


def test_every_method_has_a_rule():
    assert set(RULES) == set(METHODS)


@pytest.mark.parametrize(("method", "expected"), [
    ("gepa", ["seed", "a", "a", "a"]),  # the best full-validation candidate so far
    ("tavo", ["seed", "a", "c", "a"]),  # the last candidate
    ("maspob", ["seed", "a", "c", "a"]),  # the last candidate or accepted proposal
])
def test_each_fraction_holds_the_incumbent_of_its_rule_and_100_is_the_final(method, expected):
    points = snapshots(HISTORY, method=method, budget=100)
    assert [p.fraction for p in points] == list(FRACTIONS)
    assert [p.bundle["solver"] for p in points] == expected
    assert [p.charged for p in points] == [0, 15, 45, 100]


def test_maspobs_gate_sends_its_incumbent_back_to_the_seed():
    rejected = entry("proposal", 50, "b", accepted=False, rejected_by="gate")
    assert incumbent([*HISTORY[:3], rejected], method="maspob") is None
    assert incumbent([*HISTORY[:3], rejected], method="maspob") is None
    assert incumbent([*HISTORY[:3]], method="maspob").bundle["solver"] == "b"
    assert incumbent([*HISTORY[:3], rejected], method="tavo").bundle["solver"] == "a"
    with pytest.raises(JobError, match="finished optimization"):
        snapshots(HISTORY[:-1], method="gepa", budget=100)


class Adopting(Probe):
    """Rolls out over train rows; adopts a draft holding FIX after 2 rollouts and the final
    text after 5: three incumbents over the budget."""

    async def optimize(self, ctx):
        seed = dict(ctx.seed_bundle)
        bundle = seed
        for index, problem in enumerate(ctx.data.train):
            if ctx.ledger.available <= 0:
                break
            if index in (2, 5):
                note = " (draft)" if index == 2 else ""
                bundle = {role: f"{text}\n{FIX}{note}" for role, text in seed.items()}
                ctx.record_candidate(bundle, scores={}, note="adopted")
            await ctx.rollout(bundle, problem, iteration=index)
        return bundle


@pytest.mark.slow
def test_a_job_with_curve_scores_each_snapshot_on_validation_after_the_seal(
        scripted, tmp_path, monkeypatch):
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", Adopting)
    splits = sample_splits()
    team = TeamModel(sample_problems(), wrong=frozenset(splits.validation[:2]), fixed_by=FIX)
    server = scripted(team)
    out = tmp_path / "job"
    summary = asyncio.run(run_job(job_config(server.base_url, out, method="probe", budget=8)))
    assert not (out / "curve.json").exists()  # only when asked
    sent = len(server.chat_requests())
    again = asyncio.run(run_job(job_config(server.base_url, out, method="probe", budget=8,
                                           curve=True)))
    assert summary["phases_run"] == ["optimize", "validate", "test"]
    assert again["phases_run"] == ["curve"]  # a finished job's curve, added later
    curve = json.loads((out / "curve.json").read_text())
    n = len(splits.validation)
    assert curve["seed"] == 1 / n  # two of three validation rows fail without FIX
    assert [(p["fraction"], p["charged"], p["score"]) for p in curve["points"]] == [
        (0.1, 0, 1 / n), (0.25, 2, 1.0), (0.5, 2, 1.0), (1.0, 8, 1.0)]
    # the seed's and the incumbent's scores are the validate phase's; the draft alone runs,
    # on every validation row, greedy (plus the endpoint check's probe)
    (draft,) = (out / "evals").glob("validate_curve_*.jsonl")
    assert len(draft.read_text().splitlines()) == n
    new = server.chat_requests()[sent:]
    assert len(new) == n + 1 and all(r.get("temperature") == 0.0 for r in new[1:])
    cost = read_cost(out, budget=8)["phases"]
    assert cost["curve"]["kinds"]["rollout"]["calls"] == n and cost["curve"]["wall_s"] > 0
    assert cost["validate"]["kinds"]["rollout"]["calls"] == 2 * n  # seed and incumbent only
