"""Job artifacts and the grid aggregate, on a hand-made set of results."""

import itertools
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
    ItemOutcome,
    JobResult,
    JobSpec,
    SelectionDecision,
    append_history,
    eval_path,
    paired_outcomes,
    read_evaluations,
    read_history,
    read_model,
    read_selection,
    seal_selection,
    write_model,
)
from lcb.optimize.conformance import Requirement
from lcb.optimize.jobcost import kind_of
from lcb.optimize.jobdir import open_job_dir

ROOT = Path(__file__).resolve().parents[2]
CELL = {"dataset": "lcb", "topology": "sequential", "model": "qwen"}


def write_job(root: Path, name: str, *, method: str, seed: int, baseline: list[int],
              deployed: list[int], **spec_overrides) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    budget = spec_overrides.get("budget", 600)
    checked = [Requirement(name="budget", met=budget == 600, seen=budget, expected=600)]
    spec = JobSpec(method=method, seed=seed, **{"conformance": checked, **CELL,
                                                **spec_overrides})
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
    rows = list(itertools.takewhile(lambda line: line.startswith("| "), lines[2:]))
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


# --- settings fingerprint: unlike jobs are never pooled -----------------------------------
def patch_json(path: Path, *, drop: tuple[str, ...] = (), **updates) -> None:
    data = json.loads(path.read_text())
    for key in drop:
        del data[key]
    path.write_text(json.dumps({**data, **updates}))


def two_seeds(root: Path, first: dict, second: dict, **spec) -> tuple[Path, Path]:
    """gepa seeds 0 and 1 of one cell; `first` / `second` are written into their job.json."""
    a = write_job(root, "a/0", method="gepa", seed=0, baseline=[0, 1], deployed=[1, 1], **spec)
    b = write_job(root, "a/1", method="gepa", seed=1, baseline=[0, 0], deployed=[1, 0], **spec)
    patch_json(a / Artifact.JOB, **first)
    patch_json(b / Artifact.JOB, **second)
    return a, b


def test_budget_30_and_budget_12_of_one_cell_are_refused_naming_budget(tmp_path):
    root = tmp_path / "runs"
    write_job(root, "a/0", method="gepa", seed=0, baseline=[0, 1], deployed=[1, 1], budget=30)
    write_job(root, "a/1", method="gepa", seed=1, baseline=[0, 0], deployed=[1, 0], budget=12)
    with pytest.raises(AggregateError) as caught:
        aggregate(root, resamples=10)
    message = str(caught.value)
    assert message.startswith("gepa on lcb/sequential/qwen mixes seeds with different settings (")
    assert f"budget: 30 in {root / 'a/0'}, 12 in {root / 'a/1'}" in message
    assert "--split-mixed" in message and "seed:" not in message


def test_cli_exits_2_on_a_mixed_cell_and_splits_it_on_request(tmp_path):
    root = tmp_path / "runs"
    write_job(root, "a/0", method="gepa", seed=0, baseline=[0, 1], deployed=[1, 1], budget=30)
    write_job(root, "a/1", method="gepa", seed=1, baseline=[0, 0], deployed=[1, 0], budget=12)
    command = [sys.executable, "-m", "optimizers.protocol.aggregate", str(root), "--resamples",
               "10"]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "error: gepa on lcb/sequential/qwen mixes" in refused.stderr
    assert f"budget: 30 in {root / 'a/0'}, 12 in {root / 'a/1'}" in refused.stderr
    split = subprocess.run(command + ["--split-mixed"], capture_output=True, text=True, cwd=ROOT,
                           timeout=120)
    assert split.returncode == 0, split.stderr
    assert "] budget=12" in split.stdout and "] budget=30" in split.stdout


def test_differing_method_settings_are_refused_naming_the_key(tmp_path):
    root = tmp_path / "runs"
    a, b = two_seeds(root, {"method_settings": {"minibatch": 3, "merge": True}},
                     {"method_settings": {"minibatch": 5, "merge": True}})
    with pytest.raises(AggregateError) as caught:
        aggregate(root, resamples=10)
    message = str(caught.value)
    assert f"(method_settings.minibatch: 3 in {a}, 5 in {b}); aggregate them apart" in message
    assert "merge" not in message


def test_a_setting_one_job_lacks_is_named_absent(tmp_path):
    root = tmp_path / "runs"
    a, b = two_seeds(root, {"opt_tests": 3}, {})
    patch_json(b / Artifact.JOB, drop=("opt_tests",))  # a job.json written before the field
    with pytest.raises(AggregateError, match=r"opt_tests: 3 in .*a/0, null in .*a/1\)"):
        aggregate(root, resamples=10)


def test_split_mixed_reports_each_fingerprint_as_its_own_group(tmp_path):
    root = tmp_path / "runs"
    two_seeds(root, {"method_settings": {"minibatch": 3}}, {"method_settings": {"minibatch": 5}})
    summary = aggregate(root, resamples=10, split_mixed=True)
    assert summary["settings"]["split_mixed"] is True
    groups = summary["groups"]
    assert len(groups) == 2 and [g["n_seeds"] for g in groups] == [1, 1]
    assert sorted((g["differs"]["method_settings.minibatch"], g["seeds"][0]["seed"])
                  for g in groups) == [(3, 0), (5, 1)]
    fingerprints = [g["fingerprint"] for g in groups]
    assert len(set(fingerprints)) == 2 and all(len(f) == 8 for f in fingerprints)
    table = markdown_table(summary)
    for g in groups:
        value = g["differs"]["method_settings.minibatch"]
        assert f"| gepa [{g['fingerprint']}] | lcb |" in table
        assert f"\n[{g['fingerprint']}] method_settings.minibatch={value}" in table


def test_identical_settings_pool_and_provenance_does_not_split(tmp_path):
    root = tmp_path / "runs"
    first = {"method_settings": {"minibatch": 3}, "deviations": ["x"],
             "provenance": {"lcb_commit": "1111111", "dirty": False, "time": "2025-01-01"},
             "conformance": [{"name": "budget", "met": True, "seen": 600, "expected": 600}]}
    second = {"method_settings": {"minibatch": 3}, "deviations": [],
              "provenance": {"lcb_commit": "2222222", "dirty": True, "time": "2025-02-02"}}
    a, _ = two_seeds(root, first, second)
    patch_json(a / Artifact.JOB, drop=("release",))  # an older job.json: JobSpec's default
    (gepa,) = aggregate(root, resamples=10)["groups"]
    assert gepa["n_seeds"] == 2 and gepa["differs"] == {}
    assert [row["seed"] for row in gepa["seeds"]] == [0, 1]
    assert gepa["settings"]["method_settings"] == {"minibatch": 3}
    assert "provenance" not in gepa["settings"] and "seed" not in gepa["settings"]


def test_conformant_and_non_conformant_seeds_are_never_pooled(tmp_path):
    root = tmp_path / "runs"
    a, b = two_seeds(root, {"conformant": True}, {"conformant": False})
    with pytest.raises(AggregateError) as caught:
        aggregate(root, resamples=10)
    assert f"(conformant: true in {a}, false in {b})" in str(caught.value)
    groups = aggregate(root, resamples=10, split_mixed=True)["groups"]
    assert sorted(g["conformant"] for g in groups) == [False, True]
    assert len({g["fingerprint"] for g in groups}) == 1  # the settings alone agree


# --- cost columns --------------------------------------------------------------------------
RESULT_COST = {"budget": 30, "charged": 29, "proposals": 4, "accepted": 1,
               "uncharged": {"reflect": {"calls": 4, "prompt_tokens": 1000,
                                         "completion_tokens": 200},
                             "judge": {"calls": 2, "prompt_tokens": 300,
                                       "completion_tokens": 10}}}
LEDGER = {"total": 30, "charged": 27, "retries": 2, "infra_failures": 1, "abandoned": 0,
          "uncharged": {"gepa:reflect:coder": {"calls": 3, "prompt_tokens": 900,
                                               "completion_tokens": 100},
                        "gepa:reflect:solver": {"calls": 1, "prompt_tokens": 100,
                                                "completion_tokens": 50},
                        "mapro:judge:coder": {"calls": 1, "prompt_tokens": 40,
                                              "completion_tokens": 2},
                        "probe": {"calls": 2, "prompt_tokens": 20, "completion_tokens": 30}}}
HISTORY = [{"kind": "candidate", "iteration": 0}, {"kind": "proposal", "accepted": False},
           {"kind": "proposal", "accepted": True}, {"kind": "proposal", "accepted": False},
           {"kind": "final", "iteration": 3}]


def _without_spend(cost):
    """A cost without the whole-job compute and the gate (checked in tests/optimize/
    test_phasecost.py)."""
    return {key: value for key, value in cost.items()
            if key not in ("phases", "rows", "gate", "total_tokens_mean", "total_calls_mean",
                           "gates")}


def test_cost_comes_from_result_json_else_ledger_and_history(tmp_path):
    root = tmp_path / "runs"
    a, b = two_seeds(root, {}, {}, budget=30)
    patch_json(a / Artifact.RESULT, cost=RESULT_COST)
    (b / "ledger.json").write_text(json.dumps(LEDGER))
    lines = "".join(json.dumps(entry) + "\n" for entry in HISTORY)
    (b / Artifact.HISTORY).write_text(lines + '{"kind": "propo')  # a cut-off last line
    (gepa,) = aggregate(root, resamples=10)["groups"]
    # files written before n_calls_without_usage existed: none of their calls lacks usage
    none = {"n_calls_without_usage": 0}
    zero = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, **none}
    first, second = (_without_spend(row["cost"]) for row in gepa["seeds"])
    assert first == {"budget": 30, "charged": 29, "proposals": 4, "accepted": 1,
                     "infra_failures": None,
                     "uncharged": {**{kind: {**usage, **none} for kind, usage
                                      in RESULT_COST["uncharged"].items()}, "probe": zero},
                     "source": "result.json"}
    assert second == {"budget": 30, "charged": 27, "proposals": 3, "accepted": 1,
                      "infra_failures": 1,  # the ledger's: not charged, counted apart
                      "uncharged": {"reflect": {"calls": 4, "prompt_tokens": 1000,
                                                "completion_tokens": 150, **none},
                                    "judge": {"calls": 1, "prompt_tokens": 40,
                                              "completion_tokens": 2, **none},
                                    "probe": {"calls": 2, "prompt_tokens": 20,
                                              "completion_tokens": 30, **none}},
                      "source": "ledger.json"}
    # tokens per seed: reflect 1200 and 1150, judge 310 and 42, probe 0 and 50
    assert _without_spend(gepa["cost"]) == {
        "budget": 30, "charged_mean": 28.0, "proposals_mean": 3.5, "accepted_mean": 1.0,
        "infra_failures_mean": 1.0,
        "tokens_mean": {"reflect": 1175.0, "judge": 176.0, "probe": 25.0},
        "calls_without_usage": {"reflect": 0, "judge": 0, "probe": 0}}
    row = markdown_table(aggregate(root, resamples=10)).splitlines()[2]
    assert row.endswith("| 28 / 30 | 3.5 (1) | 1175 / 176 / 25 |")


def test_a_job_without_ledger_or_cost_shows_unknown_spend(grid):
    gepa = group(aggregate(grid, resamples=10), "gepa")
    assert _without_spend(gepa["seeds"][0]["cost"]) == {
        "budget": 600, "charged": None, "proposals": 0, "accepted": 0, "infra_failures": None,
        "uncharged": None, "source": None}
    assert _without_spend(gepa["cost"]) == {
        "budget": 600, "charged_mean": None, "proposals_mean": 0.0, "accepted_mean": 0.0,
        "infra_failures_mean": None, "tokens_mean": {"reflect": None, "judge": None,
                                                     "probe": None},
        "calls_without_usage": {"reflect": 0, "judge": 0, "probe": 0}}
    table = markdown_table(aggregate(grid, resamples=10))
    assert "| — / 600 | 0 (0) | — / — / — |" in table


def test_a_malformed_cost_is_refused_naming_the_file(tmp_path, capsys):
    root = tmp_path / "runs"
    a = write_job(root, "a/0", method="gepa", seed=0, baseline=[1], deployed=[1])
    patch_json(a / Artifact.RESULT, cost={"charged": "many"})
    assert main([str(root)]) == 2
    assert f"{a / Artifact.RESULT}: cost.charged must be an integer >= 0, got 'many'" in (
        capsys.readouterr().err)


def test_kind_of_maps_old_purposes_to_kinds():
    assert [kind_of(key) for key in ("reflect", "judge", "probe", "gepa:reflect:coder",
                                     "reflection", "mapro:judge:coder", "maspo:probe:x")] == [
        "reflect", "judge", "probe", "reflect", "reflect", "judge", "probe"]


# --- artifacts -----------------------------------------------------------------------------
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


def test_an_interrupted_optimization_is_resumed_unless_restarted(tmp_path):
    spec = JobSpec(method="gepa", seed=0, **CELL)
    out = open_job_dir(tmp_path / "job", spec)
    append_history(out, HistoryEntry(iteration=3, bundle={"s": "x"}, charged=40))
    assert open_job_dir(out, spec) == out and len(read_history(out)) == 1  # kept: resumed
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


def test_uncharged_tokens_no_server_reported_are_unknown_in_the_cost_never_zero(tmp_path):
    """A reflection endpoint that reports no usage (`lcb.agents.usage`): its kind's tokens are
    null per seed, counted as calls without usage, and the group's mean says "unknown"."""
    a, b = two_seeds(tmp_path / "runs", {}, {}, budget=30)
    blind = {"reflect": {"calls": 2, "prompt_tokens": None, "completion_tokens": None,
                         "n_calls_without_usage": 2},
             "judge": {"calls": 1, "prompt_tokens": 30, "completion_tokens": 3,
                       "n_calls_without_usage": 0}}
    patch_json(a / Artifact.RESULT, cost={**RESULT_COST, "uncharged": blind})
    patch_json(b / Artifact.RESULT, cost=RESULT_COST)  # written before the key existed
    summary = aggregate(tmp_path / "runs", resamples=10)
    (gepa,) = summary["groups"]
    first = gepa["seeds"][0]["cost"]["uncharged"]
    assert (first["reflect"]["prompt_tokens"], first["reflect"]["n_calls_without_usage"]) == (
        None, 2)
    # judge: 33 and 310 tokens, every call known; reflect: unknown on seed 0
    assert gepa["cost"]["tokens_mean"] == {"reflect": None, "judge": 171.5, "probe": 0.0}
    assert gepa["cost"]["calls_without_usage"] == {"reflect": 2, "judge": 0, "probe": 0}
    assert markdown_table(summary).splitlines()[2].endswith("| unknown / 171.5 / 0 |")


def test_tables_name_which_tavo_update_ran(tmp_path):
    root = tmp_path / "runs"
    for name, mode in (("own", "rewrite"), ("truce", "truce_overlay")):
        write_job(root, f"{name}/0", method="tavo", seed=0, baseline=[0, 1], deployed=[1, 1],
                  method_settings={"update_mode": mode})
    summary = aggregate(root, resamples=10, split_mixed=True)
    assert sorted(g["label"] for g in summary["groups"]) == ["tavo (rewrite)",
                                                            "tavo (truce_overlay)"]
    table = markdown_table(summary)
    assert "| tavo (rewrite)" in table and "| tavo (truce_overlay)" in table
