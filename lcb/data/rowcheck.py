"""Checks that turn a hostile or broken row into a `RowError` instead of a crash.

A row comes from a file anyone can write, so every field `lcb.data.problems.decode_row` uses is
checked before it is trusted:
- Types: the text fields are strings (`starter_code` may also be null), test cases a list of
  objects with string `input`/`output` and a known `testtype`, metadata an object.
- Nesting: a JSON field nested deeper than the parser's recursion limit is a `RowError`
  ("nested too deeply"), not a `RecursionError` out of the load. Nothing nested is kept after
  decoding (tests are flat strings), so no later step walks a deep structure.
- Size: a row (a JSONL line), a text field, or the private tests after zlib decompression may
  not exceed `max_row_bytes()`: `$LCB_MAX_ROW_BYTES`, default 1 GiB (real rows reach tens of
  MB). Decompression is streamed (`lcb.data.pickled`): a pickle declaring a text over the
  cap is refused before it is inflated, and data past the declared text is refused after a few
  bytes, so a zlib bomb costs next to nothing; only a row whose declared text really is that
  long costs memory, about twice the text.
- Ids: `question_id` is non-empty text of at most 200 characters, without control characters
  or line breaks, and not `.` or `..`. Slashes and spaces are fine: run directories derive
  their own safe file names.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from typing import Any

from lcb.data.local import DataError

MAX_ROW_BYTES_ENV = "LCB_MAX_ROW_BYTES"
DEFAULT_MAX_ROW_BYTES = 1 << 30
MAX_ID_CHARS = 200
TEST_TYPES = ("stdin", "functional")
# The fields decode_row reads as plain text, and whether null stands for "" (as it always has
# for starter_code, which most stdin rows leave empty).
TEXT_FIELDS = {
    "question_id": False, "question_title": False, "question_content": False,
    "platform": False, "contest_id": False, "contest_date": False, "starter_code": True,
    "difficulty": False,
}
_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?)i?b?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_BREAKS = frozenset({"Cc", "Zl", "Zp"})  # C0/C1 controls, DEL, line and paragraph separators


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


def max_row_bytes() -> int:
    """The size cap: `$LCB_MAX_ROW_BYTES` (bytes, or with a K/M/G suffix), default 1 GiB.

    Raises `DataError` naming the variable for a value that is not a positive size.
    """
    text = os.environ.get(MAX_ROW_BYTES_ENV, "")
    if not text.strip():
        return DEFAULT_MAX_ROW_BYTES
    match = _SIZE.fullmatch(text)
    value = int(match[1]) * _UNITS[match[2].lower()] if match else 0
    if value <= 0:
        raise DataError(f"${MAX_ROW_BYTES_ENV}={text!r}: expected a positive size in bytes, "
                        f"such as 1073741824 or 1G")
    return value


def size_text(n_bytes: int) -> str:
    """`n_bytes` as the largest whole binary unit that fits exactly: 1 GiB, 64 KiB, 1000 bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes % scale == 0:
            return f"{n_bytes // scale} {unit}"
    return f"{n_bytes} bytes"


def over_cap(cap: int) -> str:
    return f"{size_text(cap)} (${MAX_ROW_BYTES_ENV})"


def shown(text: str, limit: int = 40) -> str:
    """A short, printable form of untrusted text: its repr, cut after `limit` characters."""
    return repr(text[:limit]) + (f"… ({len(text)} characters)" if len(text) > limit else "")


def id_problem(value: object) -> str | None:
    """What is wrong with a question_id, or None for a usable one."""
    if value is None:
        return "null"
    if value == "":
        return "empty"
    if not isinstance(value, str):
        return f"expected text, got {type(value).__name__}"
    if len(value) > MAX_ID_CHARS:
        return f"longer than {MAX_ID_CHARS} characters: {shown(value)}"
    if any(unicodedata.category(char) in _BREAKS for char in value):
        return f"contains control characters or line breaks: {shown(value)}"
    if value in (".", ".."):
        return f"{value!r} is not a usable id"
    return None


def check_fields(row: dict, *, rid: str, cap: int) -> None:
    """The id, the types of the text fields, and the size of every text field of the row."""
    problem = id_problem(row["question_id"])
    if problem:
        raise RowError(rid, "question_id", problem)
    for name, nullable in TEXT_FIELDS.items():
        value = row[name]
        if not isinstance(value, str) and not (nullable and value is None):
            raise RowError(rid, name, f"expected text, got {type(value).__name__}")
    for name, value in row.items():
        if isinstance(value, str) and len(value) > cap:
            raise RowError(rid, str(name)[:40], f"longer than {over_cap(cap)}")


def parse_json(text: str, *, rid: str, field: str, what: str = "not valid JSON") -> Any:
    """`json.loads(text)`, with every way it can fail on hostile text as a `RowError`."""
    try:
        return json.loads(text)
    except RecursionError:
        raise RowError(rid, field, f"{what}: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise RowError(rid, field, f"{what} ({exc.msg} at {exc.pos})") from None
    except ValueError as exc:  # an integer literal longer than Python converts, for one
        raise RowError(rid, field, f"{what} ({shown(str(exc), 80)})") from None


def check_case(case: object, index: int, *, rid: str, field: str) -> dict:
    """One test case: an object with text `input` and `output` and, if given, a known testtype."""
    if not isinstance(case, dict):
        raise RowError(rid, field, f"test {index}: expected an object, got {type(case).__name__}")
    if "input" not in case or "output" not in case:
        raise RowError(rid, field, f"test {index} lacks 'input' or 'output'")
    for key in ("input", "output"):
        if not isinstance(case[key], str):
            raise RowError(rid, field, f"test {index}: {key!r} must be text, "
                                       f"got {type(case[key]).__name__}")
    kind = case.get("testtype", TEST_TYPES[0])
    if not isinstance(kind, str) or kind not in TEST_TYPES:
        seen = shown(kind) if isinstance(kind, str) else type(kind).__name__
        raise RowError(rid, field, f"test {index}: testtype {seen} is not one of "
                                   f"{', '.join(TEST_TYPES)}")
    return case


def check_func_name(meta: dict, *, rid: str) -> str:
    """A functional problem's method name: non-empty text."""
    name = meta.get("func_name")
    if name is None or name == "":
        raise RowError(rid, "metadata", "starter-code problem without 'func_name'")
    if not isinstance(name, str):
        raise RowError(rid, "metadata", f"'func_name' must be text, got {type(name).__name__}")
    return name
