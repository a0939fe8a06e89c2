"""Problems and tests: LiveCodeBench rows decoded into frozen dataclasses.

A row of `livecodebench/code_generation_lite` holds the statement, optional LeetCode starter
code, `public_test_cases` (JSON text) and `private_test_cases` (JSON text, or
base64(zlib(pickle(JSON text))) for most rows), and `metadata` (JSON text whose `func_name`
names the method of functional problems).

Contract:
- `decode_row(row)` returns a `Problem` or raises `RowError` (malformed row: names the row and
  the field) or `SkipRow` (well-formed, but no usable hidden tests). It never runs code from the
  row: pickles go through an unpickler that refuses every global, so only plain data (the JSON
  string the official pickle holds) loads (`lcb.data.pickled`, which also inflates the zlib
  stream only as far as the pickle's declared text, so a zlib bomb costs next to nothing).
- Hostile rows are rows: wrong types, JSON nested too deeply, oversize fields, zlib bombs and
  unusable ids are `RowError`s too (the checks and the size cap are in `lcb.data.rowcheck`).
- Functional test inputs are kept as stored: one JSON value per line, one per argument.
- A problem's mode follows LiveCodeBench's prompt template: starter code -> functional,
  none -> stdin.
"""

from __future__ import annotations

import base64
import binascii
import json
import pickle
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lcb.data import rowcheck
from lcb.data.pickled import safe_unpickle, unpickle_text  # noqa: F401 - re-exported
from lcb.data.rowcheck import RowError, SkipRow


class Mode(StrEnum):
    STDIN = "stdin"
    FUNCTIONAL = "functional"


@dataclass(frozen=True)
class Test:
    """One test: `input` is stdin text (stdin mode) or JSON values one per line (functional)."""

    input: str
    output: str
    mode: Mode


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    statement: str
    starter_code: str
    mode: Mode
    fn_name: str | None
    public_tests: tuple[Test, ...]
    private_tests: tuple[Test, ...]
    difficulty: str
    platform: str
    contest_id: str
    contest_date: str

    @property
    def hidden_tests(self) -> tuple[Test, ...]:
        """The tests lcb grades by default: the private tests, in stored order."""
        return self.private_tests


REQUIRED_FIELDS = (
    "question_title",
    "question_content",
    "platform",
    "question_id",
    "contest_id",
    "contest_date",
    "starter_code",
    "difficulty",
    "public_test_cases",
    "private_test_cases",
    "metadata",
)


def decode_test_cases(text: str, *, row_id: str, field: str, cap: int | None = None
                      ) -> list[dict]:
    """Decode a test-case field: JSON text, or base64 -> zlib -> pickle -> JSON text.

    `cap` bounds the decompressed size (default `rowcheck.max_row_bytes()`).
    """
    if not isinstance(text, str):
        raise RowError(row_id, field, f"expected text, got {type(text).__name__}")
    if not text.strip():
        return []
    if text.lstrip()[:1] in "[{":
        cases = rowcheck.parse_json(text, rid=row_id, field=field)
    else:
        limit = rowcheck.max_row_bytes() if cap is None else cap
        cases = _decode_compressed(text, rid=row_id, field=field, cap=limit)
    if not isinstance(cases, list):
        raise RowError(row_id, field, f"expected a JSON list of tests, got {type(cases).__name__}")
    return cases


def _decode_compressed(text: str, *, rid: str, field: str, cap: int) -> Any:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise RowError(rid, field, "neither JSON nor valid base64") from None
    payload = unpickle_text(raw, cap=cap, rid=rid, field=field)  # bounded memory: see there
    del raw
    if isinstance(payload, bytes):
        payload = payload.decode("utf-8", errors="replace")
    if not isinstance(payload, str):
        raise RowError(rid, field, f"pickle holds {type(payload).__name__}, expected JSON text")
    return rowcheck.parse_json(payload, rid=rid, field=field, what="decompressed text is not JSON")


def _tests(cases: list[dict], mode: Mode, *, row_id: str, field: str) -> tuple[Test, ...]:
    checked = (rowcheck.check_case(case, index, rid=row_id, field=field)
               for index, case in enumerate(cases))
    return tuple(Test(input=case["input"], output=case["output"], mode=mode) for case in checked)


def _field_tests(row: dict, field: str, mode: Mode, *, rid: str, cap: int) -> tuple[Test, ...]:
    cases = decode_test_cases(row[field], row_id=rid, field=field, cap=cap)
    return _tests(cases, mode, row_id=rid, field=field)


def row_id(row: dict) -> str:
    """The row's question_id, or a short printable placeholder when it is absent or unusable."""
    value = row.get("question_id")
    if value is None or value == "":
        return "<no question_id>"
    if not isinstance(value, str):
        return f"<question_id of type {type(value).__name__}>"
    return value if rowcheck.id_problem(value) is None else \
        f"<bad question_id {rowcheck.shown(value)}>"


def decode_metadata(row: dict, *, rid: str) -> dict:
    raw = row.get("metadata") or "{}"
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        raise RowError(rid, "metadata", f"expected JSON text, got {type(raw).__name__}")
    meta = rowcheck.parse_json(raw, rid=rid, field="metadata", what="not valid JSON text")
    if not isinstance(meta, dict):
        raise RowError(rid, "metadata", "expected a JSON object")
    return meta


def decode_row(row: dict) -> Problem:
    """Decode one LiveCodeBench row (a dict of its fields) into a `Problem`."""
    rid = row_id(row)
    missing = [name for name in REQUIRED_FIELDS if name not in row]
    if missing:
        raise RowError(rid, missing[0], "missing" + (f" (also {', '.join(missing[1:])})"
                                                     if len(missing) > 1 else ""))
    cap = rowcheck.max_row_bytes()
    rowcheck.check_fields(row, rid=rid, cap=cap)
    starter = row["starter_code"] or ""
    mode = Mode.FUNCTIONAL if starter.strip() else Mode.STDIN
    meta = decode_metadata(row, rid=rid)
    fn_name = rowcheck.check_func_name(meta, rid=rid) if mode is Mode.FUNCTIONAL else None
    public = _field_tests(row, "public_test_cases", mode, rid=rid, cap=cap)
    private = _field_tests(row, "private_test_cases", mode, rid=rid, cap=cap)
    if not private:
        raise SkipRow(rid, "no private tests")
    return Problem(
        id=rid,
        title=row["question_title"],
        statement=row["question_content"],
        starter_code=starter,
        mode=mode,
        fn_name=fn_name,
        public_tests=public,
        private_tests=private,
        difficulty=row["difficulty"].lower(),
        platform=row["platform"].lower(),
        contest_id=row["contest_id"],
        contest_date=row["contest_date"],
    )


def encode_private_tests(cases: list[dict]) -> str:
    """Encode tests the way LiveCodeBench stores `private_test_cases` (for fixtures and samples)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode("ascii")
