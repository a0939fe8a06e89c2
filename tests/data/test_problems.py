"""lcb.data.problems: row decoding, the data-only unpickler, and every malformed-row error."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pytest
from helpers_data import functional_row, stdin_row

from lcb.data.problems import (
    REQUIRED_FIELDS,
    Mode,
    RowError,
    SkipRow,
    decode_row,
    encode_private_tests,
    safe_unpickle,
)


def _b64_zlib(blob: bytes) -> str:
    return base64.b64encode(zlib.compress(blob)).decode("ascii")


class _Payload:
    """Unpickling this would run a shell command that creates `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_decodes_official_encoding_in_order():
    cases = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
    row = stdin_row("x1")
    row["private_test_cases"] = encode_private_tests(cases)
    problem = decode_row(row)
    assert problem.mode is Mode.STDIN and problem.fn_name is None
    assert [(t.input, t.output) for t in problem.hidden_tests] == [("1 2\n", "3\n"),
                                                                   ("5 5\n", "10\n")]
    assert problem.public_tests[0].input == "1 2\n"


def test_plain_json_private_tests_are_accepted():
    row = stdin_row("x2")
    row["private_test_cases"] = json.dumps([{"input": "7\n", "output": "8\n"}])
    assert [t.output for t in decode_row(row).private_tests] == ["8\n"]


def test_functional_row_keeps_inputs_as_stored():
    problem = decode_row(functional_row("f1", fn_name="addTwo"))
    assert problem.mode is Mode.FUNCTIONAL and problem.fn_name == "addTwo"
    assert problem.private_tests[0].input == "4\n5"
    assert problem.private_tests[0].mode is Mode.FUNCTIONAL


def test_fields_are_normalised():
    row = stdin_row("x3", difficulty="Hard", platform="AtCoder")
    problem = decode_row(row)
    assert (problem.difficulty, problem.platform) == ("hard", "atcoder")
    assert problem.contest_date == row["contest_date"] and problem.contest_id == "cx3"


def test_unpickler_refuses_a_pickled_class(tmp_path):
    marker = tmp_path / "ran"
    class_blob = pickle.dumps(_Payload(marker))
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        safe_unpickle(class_blob)
    row = stdin_row("evil")
    row["private_test_cases"] = _b64_zlib(class_blob)
    with pytest.raises(RowError) as info:
        decode_row(row)
    assert info.value.field == "private_test_cases" and "unsafe" in str(info.value)
    assert not marker.exists()


def test_unpickler_refuses_a_plain_class_reference():
    with pytest.raises(pickle.UnpicklingError, match="Mode"):
        safe_unpickle(pickle.dumps(Mode.STDIN))


def _break(row: dict, field: str, value) -> dict:
    broken = dict(row)
    broken[field] = value
    return broken


MALFORMED = [
    ("not base64", "private_test_cases", "@@@not base64@@@", "neither JSON nor valid base64"),
    ("not zlib", "private_test_cases", base64.b64encode(b"plain bytes").decode(), "not zlib"),
    ("bad pickle", "private_test_cases", _b64_zlib(b"\x80\x04garbage"), "invalid pickle"),
    ("pickle of a list", "private_test_cases", _b64_zlib(pickle.dumps([1, 2])),
     "expected JSON text"),
    ("pickled non-JSON text", "private_test_cases", _b64_zlib(pickle.dumps("not json")),
     "not JSON"),
    ("JSON syntax error", "public_test_cases", "[{\"input\": ", "not valid JSON"),
    ("JSON but not a list", "public_test_cases", "{\"input\": \"1\"}", "expected a JSON list"),
    ("test without output", "public_test_cases", json.dumps([{"input": "1"}]),
     "lacks 'input' or 'output'"),
    ("non-text input", "public_test_cases", json.dumps([{"input": 1, "output": "2"}]),
     "must be text"),
    ("field not text", "private_test_cases", 12, "expected text"),
    ("metadata not JSON", "metadata", "{func_name", "not valid JSON"),
    ("metadata not an object", "metadata", "[1]", "expected a JSON object"),
]


@pytest.mark.parametrize(("label", "field", "value", "message"), MALFORMED,
                         ids=[case[0] for case in MALFORMED])
def test_each_malformed_field_names_row_and_field(label, field, value, message):
    with pytest.raises(RowError) as info:
        decode_row(_break(stdin_row("bad1"), field, value))
    assert (info.value.row_id, info.value.field) == ("bad1", field)
    assert message in str(info.value) and "'bad1'" in str(info.value)


def test_starter_code_without_func_name_is_malformed():
    row = _break(functional_row("bad2"), "metadata", "{}")
    with pytest.raises(RowError, match="func_name") as info:
        decode_row(row)
    assert info.value.field == "metadata"


@pytest.mark.parametrize("field", REQUIRED_FIELDS)
def test_each_missing_field_is_named(field):
    row = stdin_row("bad3")
    del row[field]
    with pytest.raises(RowError) as info:
        decode_row(row)
    assert info.value.field == field and "missing" in str(info.value)


@pytest.mark.parametrize("private", ["", "[]", encode_private_tests([])])
def test_row_without_private_tests_is_skipped(private):
    with pytest.raises(SkipRow, match="no private tests") as info:
        decode_row(_break(stdin_row("empty"), "private_test_cases", private))
    assert info.value.row_id == "empty"
