"""lcb.data.datasets with local sources: filters, windowing, lazy decoding, skipped rows,
formats."""

from __future__ import annotations

import sys
import types

import pytest
from helpers_data import functional_row, mixed_rows, stdin_row, write_jsonl, write_parquet

from lcb.data import problems
from lcb.data.datasets import DataError, Selection, load_problems


@pytest.fixture
def mixed(tmp_path):
    return str(write_jsonl(tmp_path / "rows.jsonl", mixed_rows()))


def ids(data, **selection) -> list[str]:
    return [p.id for p in load_problems(data, selection=Selection(**selection)).problems]


def test_loads_every_row_in_file_order(mixed):
    loaded = load_problems(mixed)
    assert [p.id for p in loaded.problems] == ["p1", "p2", "p3", "p4", "p5", "p6"]
    assert loaded.skipped == []
    assert loaded.source == {"kind": "local", "path": mixed, "files": [mixed]}


@pytest.mark.parametrize(("selection", "expected"), [
    ({"difficulty": "easy"}, ["p1", "p4"]),
    ({"difficulty": "HARD"}, ["p3", "p5"]),
    ({"platform": "atcoder"}, ["p1", "p4"]),
    ({"platform": "leetcode"}, ["p2", "p5"]),
    ({"platform": "codeforces", "difficulty": "medium"}, ["p6"]),
    ({"start_date": "2023-08-20"}, ["p4", "p5", "p6"]),
    ({"end_date": "2023-06-15"}, ["p1", "p2"]),
    ({"start_date": "2023-06-15", "end_date": "2023-09-30"}, ["p2", "p3", "p4", "p5"]),
    ({"start_date": "2023-07-02", "end_date": "2023-08-19"}, []),
    ({"offset": 2}, ["p3", "p4", "p5", "p6"]),
    ({"limit": 2}, ["p1", "p2"]),
    ({"offset": 1, "limit": 3}, ["p2", "p3", "p4"]),
    ({"offset": 10}, []),
    ({"limit": 0}, []),
    ({"difficulty": "hard", "offset": 1, "limit": 5}, ["p5"]),
    ({"platform": "leetcode", "end_date": "2023-07-01", "limit": 1}, ["p2"]),
])
def test_filters_then_offset_then_limit(mixed, selection, expected):
    assert ids(mixed, **selection) == expected


def test_only_follows_the_given_order(mixed):
    assert ids(mixed, only=("p5", "p1", "p3")) == ["p5", "p1", "p3"]
    assert ids(mixed, only=("p5", "p1", "p3"), offset=1, limit=1) == ["p1"]
    assert ids(mixed, only=("p6", "p1", "p6")) == ["p6", "p1"]


def test_only_combines_with_other_filters_and_reports_missing_ids(mixed):
    loaded = load_problems(mixed, selection=Selection(only=("p4", "p2", "zz"),
                                                      difficulty="easy"))
    assert [p.id for p in loaded.problems] == ["p4"]
    assert sorted(s.row_id for s in loaded.skipped) == ["p2", "zz"]
    with pytest.raises(DataError, match="^zz: requested with --only"):
        load_problems(mixed, selection=Selection(only=("zz",)), strict=True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"limit": -1}, "--limit"),
    ({"offset": -3}, "--offset"),
    ({"difficulty": "extreme"}, "--difficulty 'extreme'"),
    ({"platform": "topcoder"}, "--platform 'topcoder'"),
    ({"start_date": "2023-02-30"}, "--start-date"),
    ({"end_date": "yesterday"}, "--end-date"),
    ({"start_date": "2024-01-01", "end_date": "2023-01-01"}, "after"),
    ({"only": "1873_A"}, "sequence"),
])
def test_bad_selection_values_name_the_option(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Selection(**kwargs)


def test_selection_normalises_values():
    selection = Selection(only=(" a ", "b", "a", ""), difficulty=" Medium", platform="LeetCode")
    assert selection.only == ("a", "b")
    assert (selection.difficulty, selection.platform) == ("medium", "leetcode")


@pytest.fixture
def decode_counter(monkeypatch):
    calls: list[str] = []
    real = problems.decode_row

    def counting(row):
        calls.append(row["question_id"])
        return real(row)

    monkeypatch.setattr(problems, "decode_row", counting)
    return calls


def test_limit_decodes_only_the_selected_rows(tmp_path, decode_counter):
    path = write_jsonl(tmp_path / "big.jsonl", [stdin_row(f"q{i}") for i in range(1000)])
    loaded = load_problems(str(path), selection=Selection(limit=5, offset=7))
    assert [p.id for p in loaded.problems] == [f"q{i}" for i in range(7, 12)]
    assert decode_counter == [f"q{i}" for i in range(7, 12)]


def test_filters_do_not_decode_rejected_rows(tmp_path, decode_counter):
    rows = [stdin_row(f"q{i}", difficulty="hard" if i % 100 == 0 else "easy")
            for i in range(1000)]
    path = write_jsonl(tmp_path / "big.jsonl", rows)
    loaded = load_problems(str(path), selection=Selection(difficulty="hard", limit=3))
    assert [p.id for p in loaded.problems] == ["q0", "q100", "q200"]
    assert decode_counter == ["q0", "q100", "q200"]


def test_parquet_limit_is_lazy_too(tmp_path, decode_counter):
    rows = [stdin_row(f"q{i}") for i in range(300)]
    path = write_parquet(tmp_path / "big.parquet", rows, row_group_size=50)
    assert ids(str(path), limit=4) == ["q0", "q1", "q2", "q3"]
    assert decode_counter == ["q0", "q1", "q2", "q3"]


def test_bad_rows_are_reported_and_the_load_goes_on(tmp_path):
    bad = functional_row("bad", fn_name="f")
    bad["metadata"] = "{}"
    empty = stdin_row("empty")
    empty["private_test_cases"] = "[]"
    rows = [stdin_row("a"), bad, empty, stdin_row("b")]
    path = write_jsonl(tmp_path / "rows.jsonl", rows, extra_lines={3: "{oops", 1: "[1, 2]"})
    loaded = load_problems(str(path))
    assert [p.id for p in loaded.problems] == ["a", "b"]
    reasons = {s.row_id: s.reason for s in loaded.skipped}
    assert set(reasons) == {f"{path}:2", "bad", "empty", f"{path}:5"}
    assert "expected a JSON object" in reasons[f"{path}:2"]
    assert "not valid JSON" in reasons[f"{path}:5"]
    assert f"{path}:3" in reasons["bad"] and "func_name" in reasons["bad"]
    assert reasons["empty"] == "no private tests"


def test_strict_raises_on_the_first_malformed_row_but_not_on_skips(tmp_path):
    empty = stdin_row("empty")
    empty["private_test_cases"] = ""
    path = write_jsonl(tmp_path / "rows.jsonl", [stdin_row("a"), empty, stdin_row("b")])
    assert ids(str(path)) == ["a", "b"]
    assert [p.id for p in load_problems(str(path), strict=True).problems] == ["a", "b"]
    broken = write_jsonl(tmp_path / "broken.jsonl", [stdin_row("a")], extra_lines={0: "nope"})
    with pytest.raises(DataError, match=r"broken\.jsonl:1: not valid JSON"):
        load_problems(str(broken), strict=True)
    bad = stdin_row("c")
    bad["public_test_cases"] = "[{"
    with pytest.raises(DataError, match="'c'.*public_test_cases"):
        load_problems(str(write_jsonl(tmp_path / "bad.jsonl", [bad])), strict=True)


def test_bad_contest_date_is_skipped_only_when_dates_are_filtered(tmp_path):
    odd = stdin_row("odd", date="someday")
    path = str(write_jsonl(tmp_path / "rows.jsonl", [odd, stdin_row("a")]))
    assert ids(path) == ["odd", "a"]
    loaded = load_problems(path, selection=Selection(start_date="2000-01-01"))
    assert [p.id for p in loaded.problems] == ["a"]
    assert loaded.skipped[0].row_id == "odd" and "contest_date" in loaded.skipped[0].reason


def test_parquet_file_matches_jsonl(tmp_path, mixed):
    path = write_parquet(tmp_path / "rows.parquet", mixed_rows(), row_group_size=4)
    from_parquet = load_problems(str(path))
    assert from_parquet.problems == load_problems(mixed).problems
    assert ids(str(path), platform="codeforces") == ["p3", "p6"]


def test_directory_reads_its_data_files_in_sorted_order(tmp_path):
    rows = mixed_rows()
    folder = tmp_path / "rows"
    write_jsonl(folder / "b.jsonl", rows[2:4])
    write_parquet(folder / "a.parquet", rows[:2])
    write_jsonl(folder / "c.jsonl", rows[4:])
    (folder / "notes.txt").write_text("not data")
    loaded = load_problems(str(folder), selection=Selection(offset=1, limit=4))
    assert [p.id for p in loaded.problems] == ["p2", "p3", "p4", "p5"]
    assert [f.rsplit("/", 1)[1] for f in loaded.source["files"]] == [
        "a.parquet", "b.jsonl", "c.jsonl"]


def test_a_repeated_question_id_loads_once_and_is_reported(tmp_path):
    folder = tmp_path / "rows"
    first = write_jsonl(folder / "a.jsonl", [stdin_row("x"), stdin_row("y")])
    again = write_jsonl(folder / "b.jsonl", [stdin_row("y"), stdin_row("z")])
    loaded = load_problems(str(folder))
    assert [p.id for p in loaded.problems] == ["x", "y", "z"]
    [skip] = loaded.skipped
    assert skip.row_id == "y"
    assert skip.reason == f"{again}:1: duplicate question_id (first seen in {first}:2)"
    assert ids(str(folder), limit=3) == ["x", "y", "z"]  # a repeat takes no place in the window
    with pytest.raises(DataError, match="duplicate question_id"):
        load_problems(str(folder), strict=True)


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "missing.jsonl", "no such file"),
    (lambda d: d / "missing_dir", "no such file"),
    (lambda d: (d / "x.csv").write_text("a,b") and d / "x.csv", "unsupported file type"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "holds no"),
    (lambda d: (d / "junk.parquet").write_text("nope") and d / "junk.parquet", "Parquet"),
])
def test_unusable_local_sources_raise_data_error(tmp_path, make, message):
    target = make(tmp_path)
    with pytest.raises(DataError, match=message) as info:
        load_problems(str(target))
    assert str(target) in str(info.value) or "Parquet" in message


def test_sample_source_reads_the_bundled_rows(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "sample.jsonl", mixed_rows()[:3])
    monkeypatch.setitem(sys.modules, "lcb.data.samples", types.SimpleNamespace(SAMPLE_ROWS=path))
    loaded = load_problems("sample", selection=Selection(limit=2))
    assert [p.id for p in loaded.problems] == ["p1", "p2"]
    assert loaded.source["kind"] == "sample" and loaded.source["path"] == str(path)


def test_the_real_bundled_sample_loads_cleanly():
    from lcb.data.samples import DEMO_IDS

    loaded = load_problems("sample")
    assert len(loaded.problems) >= 12 and loaded.skipped == []
    assert {p.mode.value for p in loaded.problems} == {"stdin", "functional"}
    assert ids("sample", only=DEMO_IDS) == list(DEMO_IDS)
