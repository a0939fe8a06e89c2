"""Hostile rows are rows: each way a row can attack the loader is a reported, skipped row.

Deep nesting, wrong types, oversize fields, zlib bombs and unusable ids each become a `RowError`
(or an unreadable-line entry), never a crash of the load; one property per test.
"""

from __future__ import annotations

import base64
import json
import pickle
import sys
import tracemalloc
import zlib

import pytest
import typer
from click.testing import CliRunner
from helpers_data import functional_row, stdin_row, write_jsonl

from lcb.cli import app
from lcb.data import rowcheck
from lcb.data.datasets import DataError, Selection, load_problems
from lcb.data.problems import Mode, RowError, decode_row, encode_private_tests, row_id

DEEP = "[" * 100_000
SMALL_CAP = 64 * 1024


def _with(row: dict, **fields) -> dict:
    return {**row, **fields}


def _official(payload: str) -> str:
    """`payload` (JSON text, or not) encoded as LiveCodeBench stores private tests."""
    return base64.b64encode(zlib.compress(pickle.dumps(payload))).decode("ascii")


def _bomb(n_bytes: int) -> str:
    """Officially encoded private tests whose JSON text is about `n_bytes` long."""
    return encode_private_tests([{"input": "a" * n_bytes, "output": "1\n", "testtype": "stdin"}])


def _decode_error(row: dict) -> RowError:
    with pytest.raises(RowError) as info:
        decode_row(row)
    return info.value


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setenv(rowcheck.MAX_ROW_BYTES_ENV, str(SMALL_CAP))
    return SMALL_CAP


# Nesting depth

DEEP_FIELDS = [
    ("public_test_cases", DEEP),
    ("private_test_cases", DEEP),
    ("private_test_cases", _official('[{"input": ' + DEEP)),  # starts as a list of tests
    ("metadata", "{\"a\": " + DEEP),
]


@pytest.mark.parametrize(("field", "value"), DEEP_FIELDS,
                         ids=["public", "private-json", "private-official", "metadata"])
def test_deep_nesting_in_each_json_field_is_a_row_error(field, value):
    error = _decode_error(_with(stdin_row("deep"), **{field: value}))
    assert (error.row_id, error.field) == ("deep", field)
    assert "nested too deeply" in error.reason


def test_deep_nesting_in_the_jsonl_line_itself_is_an_unreadable_row(tmp_path):
    line = "{\"question_id\": \"x\", \"metadata\": " + DEEP + "]" * len(DEEP) + "}"
    path = write_jsonl(tmp_path / "rows.jsonl", [stdin_row("ok")], extra_lines={0: line})
    loaded = load_problems(str(path))
    assert [p.id for p in loaded.problems] == ["ok"]
    assert [(s.row_id, "nested too deeply" in s.reason) for s in loaded.skipped] == [
        (f"{path}:1", True)]


def test_a_deeply_nested_test_input_is_only_text():
    row = _with(stdin_row("text"), private_test_cases=encode_private_tests(
        [{"input": DEEP, "output": "0\n"}]))
    assert decode_row(row).private_tests[0].input == DEEP


def test_an_integer_literal_too_long_to_convert_is_a_row_error():
    # At Python's limit: lcb's import of LiveCodeBench no longer raises it for the process
    # (a test importing LiveCodeBench's modules itself, not by require_official, would).
    assert sys.get_int_max_str_digits() == 4300, "LiveCodeBench's import raised the limit"
    error = _decode_error(_with(stdin_row("digits"), public_test_cases="[" + "1" * 5000 + "]"))
    assert error.field == "public_test_cases" and "not valid JSON" in error.reason


# Wrong types

WRONG_TYPES = [
    ("starter_code", ["class Solution:"], "list"),
    ("starter_code", 7, "int"),
    ("question_id", 1873, "int"),
    ("question_title", {"t": 1}, "dict"),
    ("question_content", None, "NoneType"),
    ("platform", ["atcoder"], "list"),
    ("contest_id", 315, "int"),
    ("contest_date", 20230821, "int"),
    ("difficulty", None, "NoneType"),
    ("metadata", 5, "int"),
    ("public_test_cases", ["not", "text"], "list"),
]


@pytest.mark.parametrize(("field", "value", "type_name"), WRONG_TYPES,
                         ids=[f"{case[0]}-{case[2]}" for case in WRONG_TYPES])
def test_a_wrong_type_names_the_field_and_the_type(field, value, type_name):
    error = _decode_error(_with(stdin_row("typed"), **{field: value}))
    assert error.field == field and type_name in error.reason


def test_null_starter_code_still_means_a_stdin_problem():
    assert decode_row(_with(stdin_row("nul"), starter_code=None)).mode is Mode.STDIN


BAD_CASES = [
    ("not an object", [1], "expected an object, got int"),
    ("input a list", [{"input": ["1"], "output": "1"}], "'input' must be text, got list"),
    ("output null", [{"input": "1", "output": None}], "'output' must be text, got NoneType"),
    ("unknown testtype", [{"input": "1", "output": "1", "testtype": "exec"}], "'exec'"),
    ("testtype a number", [{"input": "1", "output": "1", "testtype": 3}], "testtype int"),
]


@pytest.mark.parametrize(("label", "cases", "message"), BAD_CASES,
                         ids=[case[0] for case in BAD_CASES])
def test_a_badly_shaped_test_case_is_a_row_error(label, cases, message):
    error = _decode_error(_with(stdin_row("case"), private_test_cases=_official(
        json.dumps(cases))))
    assert error.field == "private_test_cases" and message in error.reason


def test_func_name_must_be_text():
    row = _with(functional_row("fn"), metadata=json.dumps({"func_name": ["addTwo"]}))
    error = _decode_error(row)
    assert error.field == "metadata" and "must be text, got list" in error.reason


def test_a_filter_on_a_wrong_typed_field_reports_the_row(tmp_path):
    rows = [_with(stdin_row("odd"), difficulty=["easy"]), stdin_row("ok")]
    loaded = load_problems(str(write_jsonl(tmp_path / "rows.jsonl", rows)),
                           selection=Selection(difficulty="easy"))
    assert [p.id for p in loaded.problems] == ["ok"]
    assert loaded.skipped[0].row_id == "odd" and "got list" in loaded.skipped[0].reason


# Oversize fields and decompression bombs

def test_a_zlib_bomb_over_the_cap_is_a_row_error(small_cap):
    error = _decode_error(_with(stdin_row("bomb"), private_test_cases=_bomb(4 * small_cap)))
    assert error.field == "private_test_cases"
    assert "decompresses to more than 64 KiB" in error.reason


def test_the_cap_is_exact_on_the_decompressed_bytes(monkeypatch):
    cases = [{"input": "a" * 1000, "output": "1\n"}]
    size = len(pickle.dumps(json.dumps(cases)))
    row = _with(stdin_row("edge"), private_test_cases=encode_private_tests(cases))
    monkeypatch.setenv(rowcheck.MAX_ROW_BYTES_ENV, str(size))
    assert decode_row(row).private_tests[0].input == "a" * 1000
    monkeypatch.setenv(rowcheck.MAX_ROW_BYTES_ENV, str(size - 1))
    assert "decompresses to more than" in _decode_error(row).reason


def test_decoding_a_bomb_keeps_memory_near_the_cap(small_cap):
    row = _with(stdin_row("bomb"), private_test_cases=_bomb(16 << 20))
    tracemalloc.start()
    try:
        _decode_error(row)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"peak {peak} bytes while decoding a 16 MiB bomb"


def test_an_oversize_text_field_is_a_row_error(small_cap):
    error = _decode_error(_with(stdin_row("long"), question_content="x" * (small_cap + 1)))
    assert error.field == "question_content" and "longer than 64 KiB" in error.reason


def test_an_oversize_jsonl_line_is_skipped_and_the_next_row_loads(tmp_path, small_cap):
    huge = json.dumps(_with(stdin_row("huge"), question_content="x" * (2 * small_cap)))
    path = write_jsonl(tmp_path / "rows.jsonl", [stdin_row("a"), stdin_row("b")],
                       extra_lines={1: huge})
    loaded = load_problems(str(path))
    assert [p.id for p in loaded.problems] == ["a", "b"]
    assert loaded.skipped[0].row_id == f"{path}:2"
    assert "longer than the row cap" in loaded.skipped[0].reason


@pytest.mark.parametrize(("value", "expected"), [("65536", 65536), (" 64K ", 65536),
                                                 ("2MiB", 2 << 20), ("1g", 1 << 30), ("", 1 << 30)])
def test_the_cap_reads_bytes_or_binary_suffixes(monkeypatch, value, expected):
    monkeypatch.setenv(rowcheck.MAX_ROW_BYTES_ENV, value)
    assert rowcheck.max_row_bytes() == expected


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5G", "12 parsecs"])
def test_a_bad_cap_stops_the_load_naming_the_variable(tmp_path, monkeypatch, value):
    path = write_jsonl(tmp_path / "rows.jsonl", [stdin_row("a")])
    monkeypatch.setenv(rowcheck.MAX_ROW_BYTES_ENV, value)
    with pytest.raises(DataError, match=rowcheck.MAX_ROW_BYTES_ENV):
        load_problems(str(path))


# Ids

BAD_IDS = [
    ("empty", "", "empty"),
    ("too long", "a" * 201, "longer than 200"),
    ("NUL", "a\x00b", "control"),
    ("newline", "a\nb", "control"),
    ("tab", "a\tb", "control"),
    ("escape", "a\x1b[2Jb", "control"),
    ("C1 control", "a\x85b", "control"),
    ("line separator", "a\u2028b", "line breaks"),
    ("dot", ".", "not a usable id"),
    ("dot dot", "..", "not a usable id"),
]


@pytest.mark.parametrize(("label", "qid", "message"), BAD_IDS, ids=[c[0] for c in BAD_IDS])
def test_an_unusable_id_is_a_row_error_with_a_printable_name(label, qid, message):
    error = _decode_error(stdin_row(qid))
    assert error.field == "question_id" and message in error.reason
    assert error.row_id.isprintable() and len(error.row_id) < 100
    assert error.row_id == row_id(stdin_row(qid))
    assert str(error).isprintable() and len(str(error)) < 300


@pytest.mark.parametrize("qid", ["abc315/A", "two words", "1873_A", "a" * 200, "é-ü"])
def test_ordinary_ids_are_kept_as_they_are(qid):
    assert decode_row(stdin_row(qid)).id == qid


# A mixed file, through the loader and the CLI

def _mixed_file(tmp_path):
    deep = "[" * 20_000  # deep enough to hit the recursion limit, short enough for SMALL_CAP
    hostile = [
        _with(stdin_row("deep"), public_test_cases=deep),
        _with(stdin_row("typed"), starter_code=["class Solution:"]),
        _with(stdin_row("bomb"), private_test_cases=_bomb(4 * SMALL_CAP)),
        stdin_row("a\nb"),
    ]
    nested = "{\"question_id\": \"nest\", \"x\": " + deep + "]" * len(deep) + "}"
    return write_jsonl(tmp_path / "rows.jsonl", [stdin_row("good1"), *hostile,
                                                 stdin_row("good2")], extra_lines={5: nested})


MIXED_REASONS = {"deep": "nested too deeply", "typed": "expected text, got list",
                 "bomb": "decompresses to more than 64 KiB",
                 "<bad question_id 'a\\nb'>": "control characters"}


def test_a_mixed_file_loads_the_good_rows_and_reports_each_hostile_one(tmp_path, small_cap):
    path = _mixed_file(tmp_path)
    loaded = load_problems(str(path))
    assert [p.id for p in loaded.problems] == ["good1", "good2"]
    reasons = {s.row_id: s.reason for s in loaded.skipped}
    assert set(reasons) == {*MIXED_REASONS, f"{path}:6"}
    for rid, reason in MIXED_REASONS.items():
        assert reason in reasons[rid], rid
    assert "nested too deeply" in reasons[f"{path}:6"]


def test_strict_stops_at_the_first_hostile_row(tmp_path, small_cap):
    with pytest.raises(DataError, match="'deep'.*nested too deeply.*--strict"):
        load_problems(str(_mixed_file(tmp_path)), strict=True)


def test_lcb_problems_reports_hostile_rows_on_stderr_and_lists_the_rest(tmp_path):
    path = _mixed_file(tmp_path)
    runner = CliRunner(env={"COLUMNS": "200", rowcheck.MAX_ROW_BYTES_ENV: str(SMALL_CAP)})
    result = runner.invoke(typer.main.get_group(app), ["problems", "--data", str(path),
                                                       "--json"], prog_name="lcb")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["good1", "good2"]
    lines = result.stderr.splitlines()
    assert "skipped 5 row(s):" in lines and "Traceback" not in result.output
    for rid, reason in MIXED_REASONS.items():
        assert any(line.startswith(f"  {rid}: ") and reason in line for line in lines), rid


def test_lcb_problems_with_a_bad_cap_is_a_one_line_error(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [stdin_row("a")])
    runner = CliRunner(env={rowcheck.MAX_ROW_BYTES_ENV: "lots"})
    result = runner.invoke(typer.main.get_group(app), ["problems", "--data", str(path)],
                           prog_name="lcb")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: $LCB_MAX_ROW_BYTES='lots'")
    assert len(result.stderr.strip().splitlines()) == 1
