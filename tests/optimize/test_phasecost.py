"""Compute beside every Δ (issue #25): each phase's calls and tokens per model and kind, wall
time, and `--uncharged-cost`, from real jobs against the scripted server."""

import asyncio
import json
import math

import pytest

from lcb.optimize import methods
from lcb.optimize.aggregate import aggregate
from lcb.optimize.job import run_job
from lcb.optimize.jobcost import read_cost
from lcb.optimize.phasecost import phase_cost
from tests.helpers_optimize import Probe, TeamModel, job_config, sample_problems
from tests.scripted_server import scripted_fixture  # noqa: F401

KEYS = ("calls", "prompt_tokens", "completion_tokens", "n_calls_without_usage")


class Reflecting(Probe):
    """Three reflect calls, then rollouts of the seed over train rows while the budget lasts."""

    async def optimize(self, ctx):
        for index in range(3):
            await ctx.reflect(f"think about attempt {index}", purpose=f"think {index}")
        charged = []
        for problem in ctx.data.train:
            if ctx.ledger.available <= 0:
                break
            charged.append(await ctx.rollout(ctx.seed_bundle, problem, iteration=1))
        return dict(ctx.seed_bundle)


def _job(scripted, tmp_path, monkeypatch, **config):
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", Reflecting)
    server = scripted(TeamModel(sample_problems()))
    out = tmp_path / "job"
    asyncio.run(run_job(job_config(server.base_url, out, method="probe", budget=6, **config)))
    return out, json.loads((out / "result.json").read_text())["cost"]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_every_phase_reports_calls_and_tokens_per_model_and_kind_and_they_add_up(
        scripted, tmp_path, monkeypatch):
    out, cost = _job(scripted, tmp_path, monkeypatch)
    phases = cost["phases"]
    assert set(phases) == {"optimize", "validate", "test", "total", "curve"}
    assert phases["curve"]["kinds"]["rollout"]["calls"] == 0  # no --curve: nothing run
    assert "wall_s" not in phases["optimize"]  # result.json: the same job writes the same file
    optimize = phases["optimize"]
    journal = _lines(out / "rollouts.jsonl")
    assert optimize["charged"] == len(journal) == cost["charged"] == 6
    rollouts = optimize["kinds"]["rollout"]
    assert rollouts["calls"] == sum(line["n_llm_calls"] for line in journal) > 0
    assert rollouts["prompt_tokens"] == sum(line["prompt_tokens"] for line in journal)
    assert optimize["kinds"]["reflect"]["calls"] == 3
    assert optimize["models"]["reflection"]["calls"] == 3  # reflect and judge calls
    assert optimize["models"]["task"] == {**rollouts, "calls": rollouts["calls"]}  # no probes
    for phase in ("validate", "test"):
        records = [r for path in (out / "evals").glob(f"{phase}_*.jsonl") for r in _lines(path)]
        used = phases[phase]["kinds"]["rollout"]
        assert phases[phase]["charged"] == 0 and set(phases[phase]["kinds"]) == {"rollout"}
        assert used["calls"] == sum(r["n_llm_calls"] for r in records) > 0
        assert phases[phase]["models"]["reflection"]["calls"] == 0
    total = phases["total"]
    for model in ("task", "reflection"):
        for key in KEYS:
            assert total["models"][model][key] == sum(
                phases[p]["models"][model][key] for p in ("optimize", "validate", "test"))
    assert total["calls"] == sum(total["models"][m]["calls"] for m in ("task", "reflection"))
    assert total["tokens"] == sum(total["models"][m][k] for m in ("task", "reflection")
                                  for k in ("prompt_tokens", "completion_tokens"))
    # read back (aggregate, report) with each phase's wall time added
    read = read_cost(out, budget=6)["phases"]
    walls = [read[p]["wall_s"] for p in ("optimize", "validate", "test")]
    assert all(w > 0 for w in walls) and math.isclose(read["total"]["wall_s"], sum(walls),
                                                      abs_tol=0.01)
    assert cost["gate"] == "held_out" and cost["rows"]["validation"] == 0
    (row,) = aggregate(tmp_path, resamples=10)["groups"]
    assert row["cost"]["total_tokens_mean"] == total["tokens"]
    assert row["cost"]["total_calls_mean"] == total["calls"] and row["cost"]["gates"] == {
        "held_out": 1}


@pytest.mark.slow
def test_uncharged_cost_charges_each_call_and_is_reported(scripted, tmp_path, monkeypatch):
    out, cost = _job(scripted, tmp_path, monkeypatch, uncharged_cost=0.5)
    # three reflect calls at 0.5 take two of the six units: four rollouts are left
    assert (cost["charged"], cost["units"], cost["uncharged_rate"]) == (4, 6, 0.5)
    spec = json.loads((out / "job.json").read_text())
    assert spec["uncharged_cost"] == 0.5
    assert "uncharged_cost=0.5 (expected: 0.0)" in spec["deviations"]


def test_calls_a_coalition_reused_count_once_and_its_own_keep_their_tokens(tmp_path):
    # a free coalition's line and a charged one that reused a call without usage and sent a
    # call of 300 + 30 tokens: the optimize phase counts the whole team's 2 calls and the
    # coalition's own one; free lines are not charged rollouts
    def line(charged, free, **usage):
        return {"id": "r1", "iteration": 1, "charged": charged, "free": free, **usage}

    whole = line(1, False, n_llm_calls=2, prompt_tokens=100, completion_tokens=10,
                 n_calls_without_usage=1)
    free = line(1, True, n_llm_calls=2, prompt_tokens=100, completion_tokens=10,
                n_calls_without_usage=1,
                reused={"calls": 2, "prompt_tokens": 100, "completion_tokens": 10,
                        "n_calls_without_usage": 1})
    partly = line(2, False, n_llm_calls=2, prompt_tokens=300, completion_tokens=30,
                  n_calls_without_usage=1,
                  reused={"calls": 1, "prompt_tokens": 0, "completion_tokens": 0,
                          "n_calls_without_usage": 1})
    (tmp_path / "rollouts.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (whole, free, partly)))
    optimize = phase_cost(tmp_path, wall=False)["optimize"]
    assert optimize["charged"] == 2
    assert {k: optimize["kinds"]["rollout"][k] for k in KEYS} == {
        "calls": 3, "prompt_tokens": 400, "completion_tokens": 40, "n_calls_without_usage": 1}
