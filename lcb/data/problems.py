"""Problems and tests: LiveCodeBench rows decoded into frozen dataclasses.

A row of `livecodebench/code_generation_lite` holds the statement, optional LeetCode starter
code, `public_test_cases` (JSON text) and `private_test_cases` (JSON text, or
base64(zlib(pickle(JSON text))) for most rows), and `metadata` (JSON text whose `func_name`
names the method of functional problems).

Contract:
- `decode_row(row)` returns a `Problem` or raises `RowError` (malformed row: names the row and
  the field) or `SkipRow` (well-formed, but no usable hidden tests). It never runs code from the
  row: pickles go through an unpickler that refuses every global, so only plain data (the JSON
  string the official pickle holds) loads.
- Functional test inputs are kept as stored: one JSON value per line, one per argument.
- A problem's mode follows LiveCodeBench's prompt template: starter code -> functional,
  none -> stdin.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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


class RowError(ValueError):
    """A malformed row. The message names the row and the field."""

    def __init__(self, row_id: str, field: str, reason: str):
        self.row_id, self.field, self.reason = row_id, field, reason
        super().__init__(f"row {row_id!r}: field {field!r}: {reason}")


class SkipRow(Exception):
    """A well-formed row that cannot be graded (for example: no private tests)."""

    def __init__(self, row_id: str, reason: str):
        self.row_id, self.reason = row_id, reason
        super().__init__(f"row {row_id!r} skipped: {reason}")


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


class _DataOnlyUnpickler(pickle.Unpickler):
    """Loads plain data only: any class or function reference in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")


def safe_unpickle(blob: bytes) -> Any:
    return _DataOnlyUnpickler(io.BytesIO(blob)).load()


def decode_test_cases(text: str, *, row_id: str, field: str) -> list[dict]:
    """Decode a test-case field: JSON text, or base64 -> zlib -> pickle -> JSON text."""
    if not isinstance(text, str):
        raise RowError(row_id, field, f"expected text, got {type(text).__name__}")
    if not text.strip():
        return []
    stripped = text.lstrip()
    if stripped[:1] in "[{":
        try:
            cases = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RowError(row_id, field, f"not valid JSON ({exc.msg} at {exc.pos})") from None
    else:
        cases = _decode_compressed(text, row_id=row_id, field=field)
    if not isinstance(cases, list):
        raise RowError(row_id, field, f"expected a JSON list of tests, got {type(cases).__name__}")
    return cases


def _decode_compressed(text: str, *, row_id: str, field: str) -> Any:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise RowError(row_id, field, "neither JSON nor valid base64") from None
    try:
        blob = zlib.decompress(raw)
    except zlib.error as exc:
        raise RowError(row_id, field, f"base64 payload is not zlib data ({exc})") from None
    try:
        payload = safe_unpickle(blob)
    except pickle.UnpicklingError as exc:
        raise RowError(row_id, field, f"unsafe or invalid pickle: {exc}") from None
    except Exception as exc:  # truncated or corrupt pickle streams raise assorted errors
        raise RowError(row_id, field, f"invalid pickle ({type(exc).__name__}: {exc})") from None
    if isinstance(payload, bytes):
        payload = payload.decode("utf-8", errors="replace")
    if not isinstance(payload, str):
        raise RowError(row_id, field, f"pickle holds {type(payload).__name__}, expected JSON text")
    try:
        return json.loads(payload)
    except json.JSONDecodeError as exc:
        raise RowError(row_id, field, f"decompressed text is not JSON ({exc.msg})") from None


def _tests(cases: list[dict], mode: Mode, *, row_id: str, field: str) -> tuple[Test, ...]:
    tests = []
    for index, case in enumerate(cases):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise RowError(row_id, field, f"test {index} lacks 'input' or 'output'")
        if not isinstance(case["input"], str) or not isinstance(case["output"], str):
            raise RowError(row_id, field, f"test {index}: input and output must be text")
        tests.append(Test(input=case["input"], output=case["output"], mode=mode))
    return tuple(tests)


def row_id(row: dict) -> str:
    """The row's question_id as text, or a placeholder naming its position if absent."""
    value = row.get("question_id")
    return str(value) if value not in (None, "") else "<no question_id>"


def decode_metadata(row: dict, *, rid: str) -> dict:
    raw = row.get("metadata") or "{}"
    if isinstance(raw, dict):
        return raw
    try:
        meta = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        raise RowError(rid, "metadata", "not valid JSON text") from None
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
    starter = row["starter_code"] or ""
    mode = Mode.FUNCTIONAL if starter.strip() else Mode.STDIN
    fn_name = decode_metadata(row, rid=rid).get("func_name")
    if mode is Mode.FUNCTIONAL and not fn_name:
        raise RowError(rid, "metadata", "starter-code problem without 'func_name'")
    public = _tests(decode_test_cases(row["public_test_cases"], row_id=rid,
                                      field="public_test_cases"), mode,
                    row_id=rid, field="public_test_cases")
    private = _tests(decode_test_cases(row["private_test_cases"], row_id=rid,
                                       field="private_test_cases"), mode,
                     row_id=rid, field="private_test_cases")
    if not private:
        raise SkipRow(rid, "no private tests")
    return Problem(
        id=rid,
        title=str(row["question_title"]),
        statement=str(row["question_content"]),
        starter_code=starter,
        mode=mode,
        fn_name=fn_name if mode is Mode.FUNCTIONAL else None,
        public_tests=public,
        private_tests=private,
        difficulty=str(row["difficulty"]).lower(),
        platform=str(row["platform"]).lower(),
        contest_id=str(row["contest_id"]),
        contest_date=str(row["contest_date"]),
    )


def encode_private_tests(cases: list[dict]) -> str:
    """Encode tests the way LiveCodeBench stores `private_test_cases` (for fixtures and samples)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode("ascii")
