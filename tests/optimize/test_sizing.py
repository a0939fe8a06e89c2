"""A budget that buys a method nothing is refused before any work (issue #26), naming the
smallest budget that would; `--allow-small-budget` runs it anyway."""

import asyncio
import json
import re

import pytest

from lcb.agents.prompts import seed_bundle
from lcb.optimize.artifacts import read_history
from lcb.optimize.errors import BudgetTooSmall
from lcb.optimize.job import run_job
from lcb.optimize.methods import get_optimizer
from lcb.optimize.sizing import SizingView
from lcb.optimize.splits import load_optimizer_data
from lcb.optimize.teamrun import TeamCell
from lcb.registry import METHODS, SINGLE_AGENT_METHODS
from tests.helpers_methods import REFLECTION_ENV
from tests.helpers_optimize import TeamModel, job_config, sample_problems, sample_splits
from tests.helpers_planted import RESPONDERS, WRONG, PlantedModel
from tests.scripted_server import scripted_fixture  # noqa: F401

SIZED = [m for m in METHODS if m != "identity"]  # identity charges nothing: never refused


def topology_of(method):
    return "single" if method in SINGLE_AGENT_METHODS else "sequential"


def minimum(method, budget=600):
    cell = TeamCell(topology_of(method), None if method in SINGLE_AGENT_METHODS else 2)
    view = SizingView(cell=cell, seed_bundle=seed_bundle(cell.topology, cell.roles),
                      data=load_optimizer_data(sample_splits(), data="sample"),
                      optimizer_seed=0, budget=budget)
    return get_optimizer(method).minimum_budget(view)


@pytest.mark.parametrize("method", SIZED)
def test_one_rollout_short_of_the_minimum_is_refused_before_any_work(scripted, tmp_path,
                                                                      method, monkeypatch):
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    needed, what = minimum(method)
    server = scripted(TeamModel(sample_problems()))
    out = tmp_path / "job"
    config = job_config(server.base_url, out, method=method, budget=needed - 1,
                        topology=topology_of(method),
                        team_size=None if method in SINGLE_AGENT_METHODS else 2)
    with pytest.raises(BudgetTooSmall, match=re.escape(f"at least {needed} to buy {what}")):
        asyncio.run(run_job(config))
    assert not out.exists() and server.requests == []  # no folder, not even the endpoint check
    assert needed == minimum(method, budget=needed - 1)[0]  # the rule does not move with it


@pytest.mark.slow
def test_the_minimum_buys_gepa_one_scored_proposal_and_allowing_less_keeps_the_seed(
        scripted, tmp_path, monkeypatch):
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    needed, _ = minimum("gepa")
    server = scripted(PlantedModel(TeamModel(sample_problems(), wrong=WRONG), list(RESPONDERS)))
    asyncio.run(run_job(job_config(server.base_url, tmp_path / "enough", method="gepa",
                                   budget=needed)))
    scored = [e for e in read_history(tmp_path / "enough")
              if e.kind == "proposal" and e.scored_on == "minibatch"]
    assert scored  # the minimum is enough: one proposal reached gepa's acceptance
    summary = asyncio.run(run_job(job_config(server.base_url, tmp_path / "less", method="gepa",
                                             budget=needed - 1, allow_small_budget=True)))
    assert summary["status"] == "complete"
    result = json.loads((tmp_path / "less" / "selection.json").read_text())
    assert result["deployed"] == "seed"
