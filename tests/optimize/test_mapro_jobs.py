"""`mapro` whole jobs through the scripted server: the planted fix on every multi-agent team, a
star of three workers, the control, and kill -9 then rerun (mechanisms:
`tests/optimize/test_mapro.py`)."""

from __future__ import annotations

import gzip
import json

import pytest

from lcb.optimize.artifacts import read_history
from tests.helpers_mapro import mapro_responder
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_interrupted_resumes_to_whole
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(300)


TEAMS = {"independent": ("coder", 2), "sequential": ("debugger", 2),
         "centralized": ("manager", 2), "decentralized": ("debater", 2)}
JOB = {"pool_size": 3, "scoring_batch": 1, "feedback_rows": 2, "mutations": 1,
       "max_rounds": 3, "train_rows": 4}
PLANTED_BUDGET = 12  # the seed pass (4 of the 8 train rows) and two MAP passes


def _purposes(out):
    with gzip.open(out / "calls.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line)["purpose"] for line in handle if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("topology", sorted(TEAMS))
def test_a_planted_job_deploys_the_fix_on_every_team(scripted, tmp_path, monkeypatch,
                                                       topology):
    role, size = TEAMS[topology]
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="mapro", topology=topology,
                          team_size=size, budget=PLANTED_BUDGET, answering_role=role,
                          responders=[mapro_responder], settings=JOB)
    assert_fix_deployed(outcome)
    out = outcome.job.out
    history = read_history(out)
    proposals = [e for e in history if e.kind == "proposal"]
    purposes = _purposes(out)
    # every mutation asked is a proposal in the history; every charged pass but the seed's is
    assert sum(1 for e in proposals if '"stage": "pool"' in e.reason) == \
        purposes.count("mapro:mutate")
    maps = [e for e in proposals if '"stage": "map"' in e.reason]
    assert len(maps) == outcome.job.summary["charged"] // 4 - 1 >= 1
    assert maps[0].scored_on == "train" and maps[0].accepted
    assert any(p.startswith("mapro:probe|") for p in purposes) and "mapro:node" in purposes
    if topology == "sequential":
        assert "mapro:edge" in purposes  # the debugger quotes the coder
        assert list(json.loads(maps[0].reason)["edges"]) == ["coder>debugger"]


@pytest.mark.slow
def test_a_planted_job_on_a_star_of_three_workers(scripted, tmp_path, monkeypatch):
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="mapro",
                          topology="centralized", team_size=4, budget=PLANTED_BUDGET,
                          answering_role="manager", responders=[mapro_responder], settings=JOB)
    assert_fix_deployed(outcome)
    proposals = [e for e in read_history(outcome.job.out) if e.kind == "proposal"]
    assert "manager" in {r for e in proposals if '"stage": "pool"' in e.reason for r in e.roles}
    maps = [json.loads(e.reason) for e in proposals if '"stage": "map"' in e.reason]
    assert maps and set(maps[0]["slots"]) == {"manager", "analyzer", "coder", "tester"}
    assert all(edge.startswith("manager>") for m in maps for edge in m["edges"])


@pytest.mark.slow
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch):
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="mapro",
                          topology="sequential", team_size=2, budget=PLANTED_BUDGET,
                          answering_role="debugger", control=True,
                          responders=[mapro_responder], settings=JOB)
    assert_seed_kept(outcome)
    maps = [e for e in read_history(outcome.job.out)
            if e.kind == "proposal" and '"stage": "map"' in e.reason]
    assert maps and all(e.rejected_by == "gate" for e in maps)


@pytest.mark.slow
def test_an_interrupted_job_resumes_to_the_same_result(scripted, tmp_path, monkeypatch):
    settings = [f"{key}={value}" for key, value in {**JOB, "train_rows": 6}.items()]
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "mapro",
                                        budget=18,  # 12 charged: two passes
                                        topology="sequential", settings=settings,
                                        responders=[mapro_responder])
