"""Splits: the documented rule, scaling for small data, the file, and the test-row guards."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_data import stdin_row, write_jsonl
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

ROOT = Path(__file__).resolve().parents[1]
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
