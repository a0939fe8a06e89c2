"""File utilities: JSON text that any string can be written as, and JSON that any line is read as.

Contract:
- `json_text(value, **kw)` is `json.dumps(value, ensure_ascii=False, **kw)` with every lone
  surrogate (U+D800..U+DFFF, which Python strings may hold and JSON may escape, but UTF-8 cannot
  encode) written as its `\\uXXXX` escape. The result always encodes as UTF-8 and `json.loads`
  gives back the same value. The one exception is inherent to JSON: a high surrogate directly
  followed by a low one (two code points) reads back as the one character the pair encodes, as
  it does after `json.dumps` with `ensure_ascii=True`.
- `write_text(path, text)` writes UTF-8, with lone surrogates written as `\\uXXXX` escapes: for
  text that is not JSON (HTML pages, tables), where no encoding could keep them.
- `loads(data)` is `json.loads` of one line or file, with every way damaged or hostile text can
  fail (not UTF-8, not JSON, nested deeper than the parser's recursion limit, an integer literal
  longer than Python converts) raised as `BadJson`, a `ValueError` whose message says why in a
  few words; the caller adds the file and the line number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


class BadJson(ValueError):
    """Text that is not a usable JSON value; the message says why (without the file or line)."""


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(value: Any, **kw: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, **kw)`, with lone surrogates escaped (see above).

    >>> json_text({"a": "\\ud800 é"})
    '{"a": "\\\\ud800 é"}'
    >>> json.loads(json_text("\\udfff")) == "\\udfff"
    True
    """
    # Only string contents can hold surrogates and a JSON string may escape any character, so
    # escaping them in the finished text is exact (json's own escapes are all ASCII).
    return _SURROGATE.sub(_escape, json.dumps(value, ensure_ascii=False, **kw))


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` as UTF-8; a lone surrogate becomes the six characters `\\udXXX`."""
    path.write_text(text, encoding="utf-8", errors="backslashreplace")


def loads(data: str | bytes) -> Any:
    """`json.loads(data)`; bytes must be UTF-8. Raises `BadJson` (never RecursionError).

    >>> loads(b'{"a": [1]}')
    {'a': [1]}
    >>> loads("[" * 100_000)
    Traceback (most recent call last):
    ...
    lcb.io.BadJson: not valid JSON: nested too deeply
    """
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadJson(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise BadJson("not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise BadJson(f"not valid JSON ({exc})") from None
    except ValueError as exc:  # an integer literal longer than Python converts, for one
        raise BadJson(f"not valid JSON ({str(exc)[:80]})") from None
