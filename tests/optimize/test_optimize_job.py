"""Optimizer jobs end to end (optimize -> validate -> test) on the sample set's tiny splits,
against the scripted server with the real client, teams and grader."""

import asyncio
import json
import os
import socket
import subprocess
import sys

import pytest

from lcb.agents.prompts import seed_bundle
from lcb.optimize import methods
from lcb.optimize.artifacts import (
    JobResult,
    JobSpec,
    read_evaluations,
    read_history,
    read_model,
    read_selection,
)
from lcb.optimize.job import JobPhase, run_job
from lcb.optimize.journal import ROLLOUT_LOG
from lcb.optimize.phases import JobError
from lcb.optimize.seeds import evaluation_scope
from lcb.optimize.splits import Splits
from lcb.optimize.teamrun import TeamCell
from tests.helpers_agents import MODEL
from tests.helpers_optimize import (
    PROBE_EDIT,
    Probe,
    TeamModel,
    job_config,
    sample_problems,
    sample_splits,
)
from tests.scripted_server import scripted_fixture  # noqa: F401

SPLITS = sample_splits()
TIMING_KEYS = {"latency_s", "grade_wall_s", "grade_cpu_s"}


def run(config):
    return asyncio.run(run_job(config))


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def use_probe(monkeypatch, **settings):
    probe = Probe(**settings)
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", lambda: probe)
    return probe


@pytest.mark.parametrize("topology", ["single", "sequential"])
def test_identity_runs_the_three_phases(scripted, tmp_path, topology):
    out = tmp_path / "job"
    model = TeamModel(sample_problems(), wrong=frozenset({SPLITS.test[0]}), job_dir=out)
    server = scripted(model)
    summary = run(job_config(server.base_url, out, topology=topology))

    assert summary["status"] == "complete" and summary["charged"] == 0
    assert summary["selection"]["deployed"] == "seed"
    assert summary["result"] == {"baseline": 2 / 3, "deployed": 2 / 3, "delta_points": 0.0,
                                 "n": 3}
    seed = seed_bundle(topology, TeamCell(topology).roles)
    history = read_history(out)
    assert [e.kind for e in history] == ["candidate", "final"]
    assert history[-1].bundle == seed and history[-1].charged == 0
    assert Splits.load(out / "splits.json") == SPLITS
    spec = read_model(out / "job.json", JobSpec)
    assert not spec.conformant and any("budget=4" in d for d in spec.deviations)
    # identity spends no rollout: no train row is ever sent; test rows only once sealed
    sent = {pid for pid, _ in model.seen}
    assert sent == set(SPLITS.validation) | set(SPLITS.test)
    assert all(sealed for pid, sealed in model.seen if pid in SPLITS.test)
    assert not any(sealed for pid, sealed in model.seen if pid in SPLITS.validation)
    assert sorted(p.name for p in (out / "evals").iterdir()) == ["test_seed.jsonl",
                                                                 "validate_seed.jsonl"]
    selection_time = (out / "selection.json").stat().st_mtime_ns
    assert selection_time <= (out / "evals" / "test_seed.jsonl").stat().st_mtime_ns
    records = read_evaluations(out, phase="test", label="seed")
    assert set(records) == set(SPLITS.test)
    for pid, record in records.items():
        assert (record["phase"], record["bundle"], record["topology"]) == ("test", "seed",
                                                                           topology)
        assert record["seed"] == evaluation_scope(optimizer_seed=0, phase="test", row=pid).rollout
        assert record["em"] == (0 if pid == SPLITS.test[0] else 1)
    team_requests = [r for r in server.chat_requests() if model.problem_of(r) is not None]
    assert {r.get("temperature") for r in team_requests} == {0.0}  # evaluations are greedy


def test_budget_infra_refunds_and_a_strictly_better_incumbent(scripted, tmp_path,
                                                              monkeypatch):
    out = tmp_path / "job"
    probe = use_probe(monkeypatch)
    down, weak = SPLITS.train[1], SPLITS.validation[0]
    model = TeamModel(sample_problems(), down=frozenset({down}),
                      wrong=frozenset({weak, SPLITS.test[1]}), fixed_by=PROBE_EDIT, job_dir=out)
    server = scripted(model)
    summary = run(job_config(server.base_url, out, method="probe", budget=5, concurrency=3))

    ledger = json.loads((out / "ledger.json").read_text())
    assert (ledger["charged"], ledger["infra_failures"], ledger["abandoned"]) == (5, 3, 1)
    logged = lines(out / ROLLOUT_LOG)
    assert len(logged) == 5 and down not in {line["id"] for line in logged}
    assert all(e.charged <= 5 for e in read_history(out)) and summary["charged"] == 5
    # the budget went to the first rows in order; the failed row was refunded and re-spent
    assert [r is not None for r in probe.results[:7]] == [True, False, True, True, True,
                                                         False, False]
    assert set(probe.seen_ids) <= set(SPLITS.train) | set(SPLITS.validation)
    assert all(sealed for pid, sealed in model.seen if pid in SPLITS.test)
    selection = read_selection(out)
    assert (selection.deployed, selection.seed_score, selection.incumbent_score) == (
        "incumbent", 2 / 3, 1.0)
    assert all(text.endswith(PROBE_EDIT) for text in selection.deployed_bundle.values())
    result = read_model(out / "result.json", JobResult)
    assert (result.baseline, result.deployed) == (2 / 3, 1.0)
    assert result.delta_points == pytest.approx(100 / 3)
    assert [i.id for i in result.items if i.baseline < i.deployed] == [SPLITS.test[1]]


@pytest.mark.slow
def test_a_rerun_with_the_same_seeds_reproduces_the_records(scripted, tmp_path, monkeypatch):
    runs = []
    for name in ("a", "b"):
        use_probe(monkeypatch, passes=1)
        server = scripted(TeamModel(sample_problems(), wrong=frozenset({SPLITS.train[0]})))
        run(job_config(server.base_url, tmp_path / name, method="probe", budget=4))
        out = tmp_path / name
        evals = {phase_label: {pid: {k: v for k, v in rec.items() if k not in TIMING_KEYS}
                               for pid, rec in read_evaluations(out, phase=phase_label[0],
                                                                label=phase_label[1]).items()}
                 for phase_label in (("validate", "seed"), ("validate", "incumbent"),
                                     ("test", "seed"))}
        rollouts = sorted((r["id"], r["iteration"], r["seed"], r["score"], r["bundle_hash"])
                          for r in lines(out / ROLLOUT_LOG))
        seeds = sorted(r.get("seed") for r in server.chat_requests())
        runs.append((evals, rollouts, seeds, (out / "result.json").read_text()))
    assert runs[0] == runs[1]
    assert len(runs[0][1]) == 4 and all(runs[0][0].values())


def test_evaluations_resume_per_item(scripted, tmp_path):
    out = tmp_path / "job"
    model = TeamModel(sample_problems())
    server = scripted(model)
    run(job_config(server.base_url, out))
    before = (out / "result.json").read_text()
    path = out / "evals" / "test_seed.jsonl"
    kept = path.read_text().splitlines()[:1]
    path.write_text("\n".join(kept) + "\n" + '{"id": "cut sho')  # a line cut by a kill
    (out / "result.json").unlink()
    model.seen.clear()
    summary = run(job_config(server.base_url, out))
    assert summary["phases_run"] == ["test"]
    redone = {pid for pid, _ in model.seen}
    assert redone == set(SPLITS.test) - {json.loads(kept[0])["id"]}
    assert json.loads((out / "result.json").read_text())["items"] == json.loads(before)["items"]


@pytest.mark.slow
def test_an_interrupted_optimization_resumes_and_charges_nothing_twice(scripted, tmp_path,
                                                                        monkeypatch):
    out = tmp_path / "job"
    crashes = iter([True])

    class Flaky(Probe):
        async def optimize(self, ctx):
            train = list(ctx.data.train)[:3]
            first = await ctx.rollouts(ctx.seed_bundle, train, iteration=1)
            ctx.record_candidate(ctx.seed_bundle, scores={"train": 1.0}, note="pass 1")
            if next(crashes, False):
                raise RuntimeError("killed mid-way")
            again = await ctx.rollouts(ctx.seed_bundle, train, iteration=1)  # replays
            assert [r.replay for r in again] == [True] * 3 and first == again
            return dict(ctx.seed_bundle)

    monkeypatch.setitem(methods.OPTIMIZERS, "probe", Flaky)
    model = TeamModel(sample_problems())
    server = scripted(model)
    with pytest.raises(RuntimeError, match="killed"):
        run(job_config(server.base_url, out, method="probe", budget=5))
    sent = len(model.seen)
    summary = run(job_config(server.base_url, out, method="probe", budget=5))
    assert summary["status"] == "complete" and summary["charged"] == 3
    # the resumed optimization re-sent nothing: the 3 rollouts came back from the journal
    assert {pid for pid, _ in model.seen[sent:]} <= set(SPLITS.validation) | set(SPLITS.test)
    assert len((out / ROLLOUT_LOG).read_text().splitlines()) == 3
    ledger = json.loads((out / "ledger.json").read_text())
    assert (ledger["charged"], ledger["replays"]) == (3, 3)
    kinds = [entry.kind for entry in read_history(out)]
    assert kinds == ["candidate", "candidate", "final"]  # seed, pass 1 (once), final
    # an explicit restart discards it all and starts over
    summary = run(job_config(server.base_url, tmp_path / "job2", method="probe", budget=5,
                             restart_optimization=True))
    assert summary["status"] == "complete"


def test_named_phases_need_the_earlier_ones(scripted, tmp_path):
    model = TeamModel(sample_problems())
    server = scripted(model)
    with pytest.raises(JobError, match="optimize"):
        run(job_config(server.base_url, tmp_path / "a", phase=JobPhase.VALIDATE))
    summary = run(job_config(server.base_url, tmp_path / "b", phase=JobPhase.OPTIMIZE))
    assert (summary["optimized"], summary["selection"]) == (True, None)
    assert model.seen == []  # identity's optimize phase sends no team request
    with pytest.raises(JobError, match="validate"):
        run(job_config(server.base_url, tmp_path / "b", phase=JobPhase.TEST))


def _entry(base_url, *args):
    env = {**os.environ, "VLLM_BASE_URL": base_url, "MODEL_ID": MODEL}
    return subprocess.run([sys.executable, "-m", "optimizers.protocol.run", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_the_entry_point_prints_one_json_line(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))
    out = tmp_path / "job"
    done = _entry(server.base_url, "--method", "identity", "--dataset", "lcb", "--topology",
                  "single", "--seed", "1", "--out", str(out), "--data", "sample",
                  "--budget", "3")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    summary = json.loads(line)
    assert (summary["status"], summary["seed"], summary["budget"]) == ("complete", 1, 3)
    assert "lcb.optimize" in done.stderr  # logs go to stderr
    bad = _entry(server.base_url, "--method", "nope", "--topology", "single", "--out",
                 str(tmp_path / "x"))
    assert bad.returncode == 2 and "unknown optimizer method 'nope'" in bad.stderr
    assert json.loads(bad.stdout)["status"] == "error"
    star = _entry(server.base_url, "--method", "identity", "--topology", "star", "--out",
                  str(tmp_path / "y"), "--data", "sample")
    assert star.returncode == 2 and "unknown topology 'star'" in star.stderr
    solo = _entry(server.base_url, "--method", "tavo", "--topology", "single", "--out",
                  str(tmp_path / "z"), "--data", "sample")
    assert solo.returncode == 2, solo.stderr
    assert "topology 'single' gets identity, gepa, mipro" in solo.stderr
    assert not (tmp_path / "z" / "job.json").exists()  # refused before any work


@pytest.mark.slow
def test_a_missing_endpoint_stops_the_job_before_any_work(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    done = _entry(url, "--method", "identity", "--topology", "single", "--out",
                  str(tmp_path / "job"), "--data", "sample")
    assert done.returncode == 1 and url in done.stderr
    assert not (tmp_path / "job").exists()
