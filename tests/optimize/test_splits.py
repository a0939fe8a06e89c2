"""Splits: the documented rule, scaling for small data, the file, and the test-row guards."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_data import FAKE_SHA, make_hub_cache, stdin_row, write_jsonl
from typer.testing import CliRunner

from lcb.cli import app
from lcb.data import problems as problems_module
from lcb.data.manifest import eval_ids
from lcb.optimize.artifacts import SelectionDecision, seal_selection
from lcb.optimize.splits import (
    SPLIT_SEED,
    OptimizerData,
    SelectionNotSealed,
    SplitError,
    SplitLeak,
    Splits,
    load_optimizer_data,
    load_test_problems,
    make_splits,
    split_sizes,
)

ROOT = Path(__file__).resolve().parents[2]
EVAL = eval_ids()


def release_like_ids(n_other: int = 300) -> list[str]:
    """The 50 eval IDs first (as in release_v1), then other rows."""
    return EVAL + [f"x{i:03d}" for i in range(n_other)]


def test_standard_sizes_and_test_is_the_eval_ids_in_manifest_order():
    splits = make_splits(release_like_ids())
    assert splits.sizes == {"train": 150, "validation": 50, "test": 50}
    assert splits.standard and splits.test == tuple(EVAL) and splits.test_rule == "eval_ids"
    assert not set(splits.train) & set(EVAL) and not set(splits.validation) & set(EVAL)


def test_the_rule_is_a_seeded_shuffle_of_the_other_rows_in_dataset_order():
    import random

    pool = [f"x{i:03d}" for i in range(300)]
    random.Random(SPLIT_SEED).shuffle(pool)  # the documented rule, restated independently
    splits = make_splits(release_like_ids())
    assert splits.train == tuple(pool[:150])
    assert splits.validation == tuple(pool[150:200])


def test_the_split_is_identical_in_another_process():
    code = ("from lcb.optimize.splits import make_splits; from lcb.data.manifest import eval_ids; "
            "import json; s = make_splits(eval_ids() + [f'x{i:03d}' for i in range(300)]); "
            "print(json.dumps([s.train, s.validation]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT, env={"PYTHONHASHSEED": "99"})
    splits = make_splits(release_like_ids())
    assert json.loads(done.stdout) == [list(splits.train), list(splits.validation)]


@pytest.mark.parametrize("n_pool, expected", [
    (200, (150, 50)), (500, (150, 50)), (199, (149, 50)), (11, (8, 3)), (10, (7, 3)),
    (6, (4, 2)), (2, (1, 1)),
])
def test_sizes_scale_down_three_to_one(n_pool, expected):
    # n_val = max(1, round_half_up(n_pool / 4)): 199/4 = 49.75 -> 50; 10/4 = 2.5 -> 3;
    # 6/4 = 1.5 -> 2; 2/4 = 0.5 -> 1. Train gets the rest.
    assert split_sizes(n_pool) == expected


def test_too_small_a_dataset_is_refused():
    with pytest.raises(SplitError, match="need at least 2"):
        split_sizes(1)


def test_a_dataset_without_eval_ids_tests_on_its_first_rows():
    ids = [f"r{i}" for i in range(14)]
    splits = make_splits(ids)
    # 14 / 5 = 2.8 -> 3 test rows (the first three); pool 11 -> validation 3, train 8.
    assert splits.test == ("r0", "r1", "r2") and splits.test_rule == "first_rows"
    assert splits.sizes == {"train": 8, "validation": 3, "test": 3} and not splits.standard
    assert sorted(splits.train + splits.validation) == sorted(ids[3:])


def test_splits_refuse_overlap_and_duplicates():
    with pytest.raises(SplitError, match="'train' and 'test' share"):
        Splits(train=("a", "b"), validation=("c",), test=("b",))
    with pytest.raises(SplitError, match="twice"):
        Splits(train=("a", "a"), validation=("c",), test=("d",))


def test_file_round_trip_and_bad_files(tmp_path):
    splits = make_splits(release_like_ids())
    path = splits.save(tmp_path / "s.json")
    assert Splits.load(path) == splits
    (tmp_path / "bad.json").write_text('{"train": [], "validation": "abc", "test": []}')
    with pytest.raises(SplitError, match="'validation' must be a list of row ids"):
        Splits.load(tmp_path / "bad.json")
    (tmp_path / "overlap.json").write_text('{"train": ["a"], "validation": ["a"], "test": []}')
    with pytest.raises(SplitError, match="overlap.json: splits 'train' and 'validation' share"):
        Splits.load(tmp_path / "overlap.json")
    with pytest.raises(SplitError, match="lcb splits"):
        Splits.load(tmp_path / "missing.json")


@pytest.fixture
def dataset(tmp_path) -> Path:
    """Four eval-ID rows, one unusable row (no private tests), then eleven other rows."""
    unusable = stdin_row("empty_1")
    unusable["private_test_cases"] = "[]"
    rows = ([stdin_row(i) for i in EVAL[:4]] + [unusable]
            + [stdin_row(f"o{i}") for i in range(11)])
    return write_jsonl(tmp_path / "rows.jsonl", rows)


def test_cli_writes_the_split_file_and_leaves_out_unusable_rows(dataset, tmp_path):
    out = tmp_path / "splits.json"
    result = CliRunner().invoke(app, ["splits", "--data", str(dataset), "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = Splits.load(out)
    assert written.test == tuple(EVAL[:4])
    assert written.sizes == {"train": 8, "validation": 3, "test": 4}
    assert "empty_1" not in written.train + written.validation
    assert json.loads(out.read_text())["excluded"][0]["row_id"] == "empty_1"


def test_cli_reports_a_bad_source_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["splits", "--data", str(tmp_path / "none.jsonl"),
                                      "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 2 and "error:" in result.output
    assert not (tmp_path / "s.json").exists()


def test_optimizer_data_never_decodes_or_serves_test_rows(dataset, monkeypatch):
    splits = make_splits([*EVAL[:4], *(f"o{i}" for i in range(11))])
    decoded = []
    real = problems_module.decode_row

    def spy(row):
        decoded.append(row["question_id"])
        return real(row)

    monkeypatch.setattr(problems_module, "decode_row", spy)
    data = load_optimizer_data(splits, data=str(dataset))
    assert not set(decoded) & set(splits.test)
    assert [p.id for p in data.train] == list(splits.train)
    assert [p.id for p in data.validation] == list(splits.validation)
    with pytest.raises(SplitLeak, match="test split"):
        data.problem(EVAL[0])
    assert data.problem(splits.train[0]).id == splits.train[0]


def test_optimizer_data_refuses_a_test_problem_handed_to_it(dataset):
    from lcb.data.datasets import load_problems

    everything = load_problems(str(dataset)).problems
    splits = make_splits([p.id for p in everything])
    with pytest.raises(SplitLeak, match=EVAL[0]):
        OptimizerData(splits, everything)


def test_test_split_stays_closed_until_the_selection_is_sealed(dataset, tmp_path):
    splits = make_splits([*EVAL[:4], *(f"o{i}" for i in range(11))])
    job = tmp_path / "job"
    job.mkdir()
    with pytest.raises(SelectionNotSealed, match="selection.json does not exist"):
        load_test_problems(splits, job_dir=job, data=str(dataset))
    (job / "selection.json").write_text("{}")
    with pytest.raises(SelectionNotSealed, match="not a valid SelectionDecision"):
        load_test_problems(splits, job_dir=job, data=str(dataset))
    (job / "selection.json").unlink()
    seed = {"solver": "Solve."}
    seal_selection(job, SelectionDecision.decide(seed=seed, incumbent=seed, seed_score=0.5,
                                                 incumbent_score=0.5, n_items=3))
    tests = load_test_problems(splits, job_dir=job, data=str(dataset))
    assert [p.id for p in tests] == list(EVAL[:4])


# --- the hub source: eval rows' private tests never decoded; the revision is checked ----------

OTHER_SHA = "f" * 40
UNDECODABLE = "!! this is not base64, so decoding it would raise !!"


def hub_rows() -> list[dict]:
    """release_v1's 50 eval rows, each with a private-test blob that raises if decoded, then
    an unusable row (no private tests) and twelve other rows."""
    evals = [stdin_row(i) for i in EVAL]
    for row in evals:
        row["private_test_cases"] = UNDECODABLE
    unusable = stdin_row("empty_1")
    unusable["private_test_cases"] = ""
    return [*evals, unusable, *(stdin_row(f"o{i:02d}") for i in range(12))]


@pytest.fixture
def private_decodes(monkeypatch) -> list[str]:
    """The ids of the rows whose private-test blob (stored text, not JSON) gets decoded."""
    seen: list[str] = []
    real = problems_module.decode_test_cases

    def spy(text, *, row_id, field, cap=None):
        if field == "private_test_cases" and text.strip() and not text.startswith("["):
            seen.append(row_id)
        return real(text, row_id=row_id, field=field, cap=cap)

    monkeypatch.setattr(problems_module, "decode_test_cases", spy)
    return seen


def test_cli_splits_the_hub_without_decoding_the_eval_rows_private_tests(
        hub_cache, tmp_path, private_decodes):
    make_hub_cache(hub_cache, {"test.jsonl": hub_rows()})
    out = tmp_path / "lcb_splits.json"
    result = CliRunner().invoke(app, ["splits", "--out", str(out)])  # default source: the hub
    assert result.exit_code == 0, result.output
    written = Splits.load(out)
    assert written.test == tuple(EVAL) and written.test_rule == "eval_ids"
    assert written.sizes == {"train": 9, "validation": 3, "test": 50}
    assert sorted(written.train + written.validation) == [f"o{i:02d}" for i in range(12)]
    assert not set(private_decodes) & set(EVAL)
    assert sorted(private_decodes) == [f"o{i:02d}" for i in range(12)]
    assert written.source == {
        "kind": "hub", "repo": "livecodebench/code_generation_lite", "release": "release_v1",
        "revision": FAKE_SHA, "requested_revision": "main", "files": ["test.jsonl"],
        "rows": 63, "usable": 62}
    assert f"revision {FAKE_SHA}" in result.stdout


def test_withheld_rows_get_every_check_but_the_private_decoding(tmp_path, private_decodes):
    from lcb.data.datasets import load_problems

    blank, bad_public, wrong_type = stdin_row("w_blank"), stdin_row("w_public"), stdin_row("w_type")
    blank["private_test_cases"] = "  "
    bad_public["public_test_cases"] = "[{"
    wrong_type["private_test_cases"] = ["not", "text"]
    hidden = stdin_row("w_ok")
    hidden["private_test_cases"] = UNDECODABLE
    path = write_jsonl(tmp_path / "rows.jsonl",
                       [stdin_row("a"), hidden, blank, bad_public, wrong_type])
    loaded = load_problems(str(path), withhold={"w_ok", "w_blank", "w_public", "w_type"})
    assert [p.id for p in loaded.problems] == ["a"] and loaded.withheld == ["w_ok"]
    reasons = {entry.row_id: entry.reason for entry in loaded.skipped}
    assert reasons["w_blank"] == "no private tests"
    assert "'public_test_cases'" in reasons["w_public"]
    assert "'private_test_cases': expected text, got list" in reasons["w_type"]
    assert private_decodes == ["a"]


def test_withholding_changes_nothing_when_every_row_is_usable(tmp_path):
    from lcb.data.datasets import load_problems
    from lcb.optimize.splits import load_split_source, splits_from_loaded

    rows = [stdin_row(f"o{i:03d}") for i in range(120)]
    rows[7:7] = [stdin_row(i) for i in EVAL[:30]]  # eval rows amid others, out of manifest order
    rows[40], rows[41] = rows[41], rows[40]
    path = str(write_jsonl(tmp_path / "rows.jsonl", rows))
    light = load_split_source(path)
    assert len(light.withheld) == 30 and len(light.problems) == 120
    old = splits_from_loaded(load_problems(path))  # every row decoded, as before
    new = splits_from_loaded(light)
    assert (new.train, new.validation, new.test) == (old.train, old.validation, old.test)
    assert new.test == tuple(EVAL[:30])


def hub_splits(hub_cache, tmp_path, *, sha: str) -> Path:
    """`lcb splits` on a hub whose main branch is at `sha` (50 eval rows, 12 others)."""
    make_hub_cache(hub_cache, {"test.jsonl": hub_rows()}, sha=sha)
    out = tmp_path / f"splits-{sha[:4]}.json"
    result = CliRunner().invoke(app, ["splits", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_loads_refuse_splits_of_another_revision_naming_both(hub_cache, tmp_path, monkeypatch):
    from lcb.optimize.splits import SourceMismatch

    made = Splits.load(hub_splits(hub_cache, tmp_path, sha=FAKE_SHA))
    assert len(load_optimizer_data(made).train) == 9  # same revision: loads
    make_hub_cache(hub_cache, {"test.jsonl": hub_rows()}, sha=OTHER_SHA)  # main moved on
    with pytest.raises(SourceMismatch) as info:
        load_optimizer_data(made)
    message = str(info.value)
    assert f"revision {FAKE_SHA}" in message and f"revision {OTHER_SHA}" in message
    assert "`lcb splits`" in message and "--splits FILE" in message
    assert f"$LCB_HF_REVISION={FAKE_SHA}" in message
    job = tmp_path / "job"
    job.mkdir()
    seed = {"solver": "Solve."}
    seal_selection(job, SelectionDecision.decide(seed=seed, incumbent=seed, seed_score=0.5,
                                                 incumbent_score=0.5, n_items=3))
    with pytest.raises(SourceMismatch, match=OTHER_SHA):
        load_test_problems(made, job_dir=job)
    monkeypatch.setenv("LCB_HF_REVISION", FAKE_SHA)  # the fix the message names
    assert len(load_optimizer_data(made).validation) == 3


def test_other_releases_are_refused_and_local_splits_are_not_checked(tmp_path):
    from lcb.optimize.splits import SourceMismatch, check_source

    hub = {"kind": "hub", "repo": "r/x", "release": "release_v1", "revision": FAKE_SHA}
    made = Splits(train=("a",), validation=("b",), test=("c",), source=hub)
    check_source(made, dict(hub))
    with pytest.raises(SourceMismatch, match="release release_v1.*release release_v2.*"
                                             "--release release_v1"):
        check_source(made, {**hub, "release": "release_v2"})
    check_source(made, {"kind": "local", "path": "rows.jsonl"})
    check_source(Splits(train=("a",), validation=("b",), test=("c",),
                        source={"kind": "local"}), {**hub, "revision": OTHER_SHA})


def job_at(out: Path, **overrides):
    from lcb.agents.models import ModelConfig
    from lcb.optimize.job import JobConfig

    model = ModelConfig(base_url="http://127.0.0.1:9", model_id="m")
    return JobConfig(method="identity", topology="single", model=model, out=out, **overrides)


@pytest.mark.parametrize("how", ["--splits", "standard file"])
def test_a_new_hub_job_refuses_splits_of_another_revision_before_any_work(
        hub_cache, tmp_path, monkeypatch, how):
    from lcb.optimize import job as job_module
    from lcb.optimize.splits import SourceMismatch

    path = hub_splits(hub_cache, tmp_path, sha=FAKE_SHA)
    if how == "--splits":
        config = job_at(tmp_path / "job", splits=path)
    else:
        monkeypatch.setattr(job_module, "DEFAULT_SPLITS_PATH", path)
        config = job_at(tmp_path / "job")
    assert job_module.resolve_splits(config).test == tuple(EVAL)  # same revision: accepted
    make_hub_cache(hub_cache, {"test.jsonl": hub_rows()}, sha=OTHER_SHA)
    with pytest.raises(SourceMismatch, match=f"{FAKE_SHA}.*{OTHER_SHA}"):
        job_module.resolve_splits(config)
    assert not (tmp_path / "job").exists()


def test_a_hub_job_without_a_split_file_computes_them_withholding_eval_rows(
        hub_cache, tmp_path, private_decodes):
    from lcb.optimize.job import resolve_splits

    make_hub_cache(hub_cache, {"test.jsonl": hub_rows()})
    splits = resolve_splits(job_at(tmp_path / "job"))
    assert splits.test == tuple(EVAL) and splits.source["revision"] == FAKE_SHA
    assert not set(private_decodes) & set(EVAL)


def test_the_test_phase_refuses_a_test_row_that_is_not_usable(tmp_path):
    rows = [stdin_row(i) for i in EVAL[:4]] + [stdin_row(f"o{i}") for i in range(11)]
    rows[1]["private_test_cases"] = UNDECODABLE
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    splits = make_splits([*EVAL[:4], *(f"o{i}" for i in range(11))])
    job = tmp_path / "job"
    job.mkdir()
    seed = {"solver": "Solve."}
    seal_selection(job, SelectionDecision.decide(seed=seed, incumbent=seed, seed_score=0.5,
                                                 incumbent_score=0.5, n_items=3))
    with pytest.raises(SplitError, match=f"1 test row.*{EVAL[1]}: .*neither JSON nor valid"):
        load_test_problems(splits, job_dir=job, data=str(path))
