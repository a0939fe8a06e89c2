"""Job artifacts and the grid aggregate, on a hand-made set of results."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from lcb.optimize.aggregate import AggregateError, aggregate, main, markdown_table
from lcb.optimize.artifacts import (
    Artifact,
    ArtifactError,
    HistoryEntry,
    InterruptedOptimization,
    ItemOutcome,
    JobResult,
    JobSpec,
    SelectionDecision,
    append_history,
    eval_path,
    open_job_dir,
    paired_outcomes,
    read_evaluations,
    read_history,
    read_model,
    read_selection,
    seal_selection,
    write_model,
)

ROOT = Path(__file__).resolve().parents[1]
CELL = {"dataset": "lcb", "topology": "sequential", "model": "qwen"}


def write_job(root: Path, name: str, *, method: str, seed: int, baseline: list[int],
              deployed: list[int], **spec_overrides) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    spec = JobSpec(method=method, seed=seed, **{**CELL, **spec_overrides})
    write_model(folder / Artifact.JOB, spec)
    items = [ItemOutcome(id=f"q{i}", baseline=b, deployed=d)
             for i, (b, d) in enumerate(zip(baseline, deployed, strict=True))]
    write_model(folder / Artifact.RESULT, JobResult.from_items(items, deployed_label="incumbent"))
    return folder


@pytest.fixture
def grid(tmp_path) -> Path:
    root = tmp_path / "runs"
    # gepa, seed 0: b = 1 (q0), c = 5 -> McNemar 2 * (1 + 6) / 64 = 0.21875; Δ = 83.3 - 16.7
    write_job(root, "gepa/0", method="gepa", seed=0, baseline=[1, 0, 0, 0, 0, 0],
              deployed=[0, 1, 1, 1, 1, 1])
    # gepa, seed 1: b = 0, c = 6 -> 2 / 64 = 0.03125; Δ = 100
    write_job(root, "gepa/1", method="gepa", seed=1, baseline=[0] * 6, deployed=[1] * 6)
    # gepa, seed 2: identical outcomes -> p = 1; Δ = 0
    write_job(root, "gepa/2", method="gepa", seed=2, baseline=[1, 1, 1, 0, 0, 0],
              deployed=[1, 1, 1, 0, 0, 0])
    for seed in range(3):  # identity deploys the seed bundle: nothing changes
        write_job(root, f"identity/{seed}", method="identity", seed=seed,
                  baseline=[1, 0, 1, 0, 1, 0], deployed=[1, 0, 1, 0, 1, 0])
    # another family (model llama), non-conformant (budget 100): b = 0, c = 6
    write_job(root, "small/0", method="gepa", seed=0, baseline=[0] * 6, deployed=[1] * 6,
              model="llama", budget=100)
    incomplete = root / "gepa_unfinished"
    incomplete.mkdir()
    write_model(incomplete / Artifact.JOB, JobSpec(method="gepa", seed=0, **CELL))
    return root


def group(summary: dict, method: str, model: str = "qwen") -> dict:
    (found,) = [g for g in summary["groups"] if g["method"] == method and g["model"] == model]
    return found


def test_per_seed_values_match_hand_computation(grid):
    gepa = group(aggregate(grid, resamples=500), "gepa")
    rows = {row["seed"]: row for row in gepa["seeds"]}
    assert (rows[0]["b"], rows[0]["c"]) == (1, 5)
    assert rows[0]["p_mcnemar"] == pytest.approx(0.21875)
    assert rows[1]["p_mcnemar"] == pytest.approx(0.03125) and rows[2]["p_mcnemar"] == 1.0
    assert rows[0]["baseline"] == pytest.approx(100 / 6)
    assert rows[0]["deployed"] == pytest.approx(500 / 6)
    assert [rows[s]["delta"] for s in range(3)] == pytest.approx([200 / 3, 100, 0])


def test_mean_std_and_ci_of_delta(grid):
    gepa = group(aggregate(grid), "gepa")
    # Δ = 200/3, 100, 0: mean 500/9 = 55.56; deviations 100/9, 400/9, -500/9;
    # squares sum 420000/81; / 2 -> 210000/81; std = sqrt(210000) / 9 = 50.92
    assert gepa["n_seeds"] == 3
    assert gepa["delta_mean"] == pytest.approx(500 / 9)
    assert gepa["delta_std"] == pytest.approx(math.sqrt(210000) / 9)
    low, high = gepa["ci"]
    assert low <= 500 / 9 <= high
    assert group(aggregate(grid), "identity")["ci"] == [0.0, 0.0]  # all-equal: zero width


def test_holm_runs_within_each_dataset_model_family(grid):
    summary = aggregate(grid, resamples=200)
    gepa, identity = group(summary, "gepa"), group(summary, "identity")
    # family (lcb, qwen): p = 0.21875, 0.03125, 1 (gepa) and 1, 1, 1 (identity); m = 6.
    # sorted: 0.03125 x 6 = 0.1875; 0.21875 x 5 = 1.09 -> 1; the rest stay 1.
    holm = {row["seed"]: row["p_holm"] for row in gepa["seeds"]}
    assert holm == pytest.approx({0: 1.0, 1: 0.1875, 2: 1.0})
    assert all(row["p_holm"] == 1.0 for row in identity["seeds"])
    # family (lcb, llama) has one test: no correction.
    small = group(summary, "gepa", model="llama")
    assert small["seeds"][0]["p_holm"] == pytest.approx(0.03125)
    assert small["conformant"] is False and gepa["conformant"] is True


def test_incomplete_jobs_are_listed_not_counted(grid):
    summary = aggregate(grid, resamples=100)
    assert summary["n_jobs"] == 7
    assert [Path(job["path"]).name for job in summary["incomplete"]] == ["gepa_unfinished"]


def test_markdown_table_has_one_row_per_group_and_marks_non_conformant(grid):
    table = markdown_table(aggregate(grid, resamples=100))
    lines = table.splitlines()
    assert lines[0].startswith("| method |")
    rows = [line for line in lines[2:] if line.startswith("| ")]
    assert len(rows) == 3
    assert any(row.startswith("| gepa* | lcb | sequential |") for row in rows)
    assert "+55.6 ± 50.9" in table and "s1: 0.0312 (0.188)" in table


def test_entry_point_writes_json_and_prints_the_table(grid, tmp_path):
    out = tmp_path / "summary.json"
    done = subprocess.run([sys.executable, "-m", "optimizers.protocol.aggregate", str(grid),
                           "--out", str(out), "--resamples", "200"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| method |")
    summary = json.loads(out.read_text())
    assert summary["settings"]["bootstrap_resamples"] == 200 and len(summary["groups"]) == 3
    assert "incomplete" in done.stderr


def test_duplicate_seed_and_malformed_result_are_refused(grid, tmp_path, capsys):
    write_job(grid, "copy/0", method="gepa", seed=0, baseline=[1], deployed=[1])
    with pytest.raises(AggregateError, match="same group and seed 0"):
        aggregate(grid, resamples=10)
    bad = tmp_path / "bad"
    write_job(bad, "x/0", method="gepa", seed=0, baseline=[1, 0], deployed=[1, 1])
    result = bad / "x/0" / Artifact.RESULT
    data = json.loads(result.read_text())
    data["deployed"] = 0.9  # disagrees with its items (0.5 + 0.5 -> 1.0)
    result.write_text(json.dumps(data))
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert "result.json is not a valid JobResult" in err and "deployed=0.9 disagrees" in err


# --- artifacts -----------------------------------------------------------------------------
def test_job_spec_conformance():
    standard = JobSpec(method="gepa", seed=0, **CELL)
    assert standard.conformant and standard.deviations == []
    assert JobSpec(method="gepa", seed=0, reflection_model="qwen", **CELL).conformant
    odd = JobSpec(method="gepa", seed=0, budget=60, reflection_model="big-model", **CELL)
    assert not odd.conformant
    assert odd.deviations == ["budget=60 (standard: 600)",
                              "reflection_model='big-model' (standard: None)"]
    dumped = odd.model_dump(mode="json")
    assert dumped["conformant"] is False and JobSpec.model_validate(dumped) == odd


def test_result_from_items_and_consistency():
    items = [ItemOutcome(id="a", baseline=1, deployed=1), ItemOutcome(id="b", baseline=0,
                                                                      deployed=1)]
    result = JobResult.from_items(items, deployed_label="incumbent")
    assert (result.baseline, result.deployed, result.delta_points) == (0.5, 1.0, 50.0)
    with pytest.raises(ValueError, match="twice"):
        JobResult.from_items(items + items[:1], deployed_label="seed")


def test_selection_deploys_only_a_strictly_better_different_incumbent(tmp_path):
    seed, other = {"coder": "A."}, {"coder": "B."}
    tie = SelectionDecision.decide(seed=seed, incumbent=other, seed_score=0.4,
                                   incumbent_score=0.4, n_items=50)
    assert tie.deployed == "seed" and tie.deployed_bundle == seed
    better = SelectionDecision.decide(seed=seed, incumbent=other, seed_score=0.4,
                                      incumbent_score=0.42, n_items=50)
    assert better.deployed == "incumbent" and better.deployed_bundle == other
    seal_selection(tmp_path, better)
    seal_selection(tmp_path, better)  # the same decision again is fine
    assert read_selection(tmp_path).deployed == "incumbent"
    with pytest.raises(ArtifactError, match="already sealed"):
        seal_selection(tmp_path, tie)


def test_history_round_trip_ignores_a_cut_off_last_line(tmp_path):
    entry = HistoryEntry(iteration=0, bundle={"solver": "Solve."}, scores={"val": 0.5},
                         charged=12, uncharged={"reflection": {"calls": 1}})
    append_history(tmp_path, entry)
    with (tmp_path / Artifact.HISTORY).open("a") as handle:
        handle.write('{"kind": "candi')
    (again,) = read_history(tmp_path)
    assert again == entry and len(again.bundle_hash) == 16
    with pytest.raises(ValueError, match="does not match"):
        HistoryEntry(iteration=0, bundle={"solver": "x"}, bundle_hash="0" * 16, charged=0)


def test_job_dir_guard(tmp_path):
    spec = JobSpec(method="gepa", seed=0, **CELL)
    out = open_job_dir(tmp_path / "job", spec)
    assert read_model(out / Artifact.JOB, JobSpec) == spec
    assert open_job_dir(out, spec) == out  # same settings: reusable
    with pytest.raises(ArtifactError, match="budget: 600 -> 50"):
        open_job_dir(out, JobSpec(method="gepa", seed=0, budget=50, **CELL))
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("x")
    with pytest.raises(ArtifactError, match="not empty and holds no job.json"):
        open_job_dir(stray, spec)


def test_interrupted_optimization_refuses_to_restart_silently(tmp_path):
    spec = JobSpec(method="gepa", seed=0, **CELL)
    out = open_job_dir(tmp_path / "job", spec)
    append_history(out, HistoryEntry(iteration=3, bundle={"s": "x"}, charged=40))
    with pytest.raises(InterruptedOptimization, match="iteration 3, 40 rollouts charged"):
        open_job_dir(out, spec)
    open_job_dir(out, spec, restart_optimization=True)
    assert read_history(out) == []
    assert len(list(out.glob("history.interrupted.*.jsonl"))) == 1
    append_history(out, HistoryEntry(kind="final", iteration=5, bundle={"s": "y"}, charged=60))
    assert open_job_dir(out, spec) == out  # a finished optimization goes on to evaluation


def test_evaluation_records_resume_per_item_and_pair_up(tmp_path):
    from lcb.runs.records import RecordLog

    path = eval_path(tmp_path, phase="test", label="seed")
    with RecordLog(path) as log:
        log.append({"id": "q1", "em": 1})
        log.append({"id": "q2", "em": 0})
    with path.open("a") as handle:
        handle.write('{"id": "q3", "e')  # a kill mid-write
    seed = read_evaluations(tmp_path, phase="test", label="seed")
    assert sorted(seed) == ["q1", "q2"]
    assert path.read_text().endswith('"em": 0}\n')  # the cut-off line is gone
    deployed = {"q1": {"id": "q1", "em": 1}, "q2": {"id": "q2", "em": 1}}
    items = paired_outcomes(seed, deployed, ["q1", "q2"])
    assert [(i.baseline, i.deployed) for i in items] == [(1, 1), (0, 1)]
    with pytest.raises(ArtifactError, match="lack a baseline or deployed record"):
        paired_outcomes(seed, deployed, ["q1", "q3"])


def test_eval_paths():
    assert eval_path(Path("d"), phase="test", label="seed") == Path("d/evals/test_seed.jsonl")
    with pytest.raises(ValueError, match="phase='optimize'"):
        eval_path(Path("d"), phase="optimize", label="seed")
