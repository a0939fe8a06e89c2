"""LiveCodeBench's compressed tests, zlib(pickle(text)), unpacked with bounded memory.

`pickle.dumps(text)` (protocols 1-5) writes PROTO, at protocol 4+ a FRAME for a short text,
then one opcode that declares the text's length in its first bytes (SHORT_BINUNICODE,
BINUNICODE or BINUNICODE8; the BINBYTES forms for bytes), the text, and a memo opcode and STOP.

Contract (`unpickle_text(data, cap=…, rid=…, field=…)`, every failure a `RowError` naming the
row and the field):
- The zlib stream is inflated only as far as the unpickler reads it, never ahead, so a zlib
  bomb costs what is read, not what it would inflate to.
- A pickle that starts with such a text opcode is refused at once when the declared length
  passes `cap` (nothing more is inflated), and may take at most `_TRAILER` bytes past the text:
  more data (a small text followed by gigabytes of zeros, say) is refused after those bytes.
- Before a text longer than `_PROBE` (1 KiB) is read, its first `_PROBE` bytes are inflated
  and must be able to start a JSON list of tests: JSON whitespace, `[`, whitespace, then `{`
  or `]`. Anything else (zeros, junk, a text that is not a list) is refused having cost only
  those bytes, however long the declared text. A text that does start so is read whole, at
  about twice its length (the inflated bytes, then the text): a bomb that looks like JSON (one
  test holding a huge run of one character) is bounded by `cap` only.
- Any other stream (a pickle of something else, of text at protocol 0, or no pickle at all) is
  inflated only up to `_OTHER_LIMIT` (64 KiB): longer ones are refused unread, shorter ones are
  unpickled so the refusal can say what they hold. Opcodes that build containers cost memory
  per byte of input; they never see more than that.
- Nothing decompresses past `cap` bytes in all. The unpickler refuses every global, so only
  plain data (the text the official pickle holds) loads: a row never runs code.
"""

from __future__ import annotations

import io
import pickle
import zlib
from typing import Any

from lcb.data.rowcheck import RowError, over_cap, shown, size_text

_HEAD = 20  # PROTO (2 bytes) + FRAME (9) + a text opcode and its length (9)
_PROBE = 1024  # the first bytes of a declared text that must look like a JSON list of tests
_JSON_SPACE = b" \t\n\r"
_TRAILER = 16  # memo (at most 5 bytes) and STOP after the text, with room to spare
_OTHER_LIMIT = 64 << 10
_PROTO, _FRAME = 0x80, 0x95
# text opcodes -> bytes of their little-endian length field
_TEXT_OPCODES = {0x8C: 1, ord("X"): 4, 0x8D: 8, ord("C"): 1, ord("B"): 4, 0x8E: 8}


class _MoreData(Exception):
    """The stream goes on past the pickled text and the few bytes that may follow it."""


class _DataOnlyUnpickler(pickle.Unpickler):
    """Loads plain data only: any class or function reference in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")


def safe_unpickle(blob: bytes) -> Any:
    return _DataOnlyUnpickler(io.BytesIO(blob)).load()


def text_end(head: bytes) -> int | None:
    """Where the text of a pickle starting with `head` ends, as its opcodes declare (bytes from
    the start); None when it does not start with PROTO, FRAME and a text opcode (module doc).

    >>> text_end(pickle.dumps("abc", protocol=4)), len(pickle.dumps("abc", protocol=4))
    (16, 18)
    """
    span = _text_span(head)
    return None if span is None else span[1]


def _text_span(head: bytes) -> tuple[int, int] | None:
    """(start, end) of the declared text, in bytes from the stream's start (see `text_end`)."""
    pos = 2 if head[:1] == bytes([_PROTO]) else 0
    if head[pos:pos + 1] == bytes([_FRAME]):
        pos += 9
    width = _TEXT_OPCODES.get(head[pos]) if pos < len(head) else None
    if width is None or pos + 1 + width > len(head):
        return None
    start = pos + 1 + width
    return start, start + int.from_bytes(head[pos + 1:start], "little")


def _can_start_tests(first: bytes) -> bool:
    """Whether a text starting with `first` can be a JSON list of test objects: whitespace,
    `[`, whitespace, then `{` or `]`, all within `first`.

    >>> _can_start_tests(b' [{"input": '), _can_start_tests(b"[ ]"), _can_start_tests(bytes(9))
    (True, True, False)
    """
    rest = first.lstrip(_JSON_SPACE)
    return rest[:1] == b"[" and rest[1:].lstrip(_JSON_SPACE)[:1] in (b"{", b"]")


class _Inflating:
    """A read-only file over zlib data for the unpickler: it inflates only what is read, and
    refuses (`RowError`) a read that would take it past `limit` bytes in all."""

    def __init__(self, data: bytes, *, limit: int, cap: int, rid: str, field: str) -> None:
        self._inflater = zlib.decompressobj()
        self._input = data
        self.limit, self.cap, self.rid, self.field = limit, cap, rid, field
        self.used = 0

    def read(self, size: int) -> bytes:
        if self.used + size > self.limit:
            if self.limit < self.cap:
                raise _MoreData
            raise RowError(self.rid, self.field, f"decompresses to more than {over_cap(self.cap)}")
        out = _inflate(self._inflater, self._input, size, rid=self.rid, field=self.field)
        self._input = self._inflater.unconsumed_tail
        self.used += len(out)
        return out

    def readline(self) -> bytes:
        # Only text-protocol opcodes read lines, and no pickle of one text has them after it.
        raise pickle.UnpicklingError("a text-protocol opcode after the text")

    def check_end(self) -> None:
        """The stream must end where the pickle did: nothing left, and the zlib end reached."""
        if _inflate(self._inflater, self._input, 1, rid=self.rid, field=self.field):
            raise _MoreData
        if not self._inflater.eof:
            raise RowError(self.rid, self.field,
                           "base64 payload is not zlib data (truncated stream)")


def _inflate(inflater: Any, data: bytes, size: int, *, rid: str, field: str) -> bytes:
    try:
        return inflater.decompress(data, size) if size else b""
    except zlib.error as exc:
        raise RowError(rid, field, f"base64 payload is not zlib data ({exc})") from None


def unpickle_text(data: bytes, *, cap: int, rid: str, field: str) -> Any:
    """The object pickled in the zlib stream `data`, read with bounded memory (module doc)."""
    head = _inflate(zlib.decompressobj(), data, _HEAD, rid=rid, field=field)
    span = _text_span(head)
    if span is None:
        return _unpickle_other(data, cap=cap, rid=rid, field=field)
    start, end = span
    if end > cap:
        raise RowError(rid, field, f"decompresses to more than {over_cap(cap)} (its pickle "
                                   f"declares a text ending at byte {end})")
    _check_start(data, start, end, rid=rid, field=field)
    reader = _Inflating(data, limit=min(cap, end + _TRAILER), cap=cap, rid=rid, field=field)
    try:
        value = _load(_DataOnlyUnpickler(reader), rid=rid, field=field)
        reader.check_end()
    except _MoreData:  # not one text after all: a small stream still gets a precise refusal
        return _unpickle_other(data, cap=cap, rid=rid, field=field,
                               over="invalid pickle: more data after its text")
    return value


def _check_start(data: bytes, start: int, end: int, *, rid: str, field: str) -> None:
    """Refuse the declared text at bytes start..end, longer than `_PROBE`, when its first
    `_PROBE` bytes cannot start a JSON list of tests, having inflated only those (module doc).
    A shorter text, or a stream that ends sooner, costs little: the parsers judge it."""
    if end - start <= _PROBE:
        return
    first = _inflate(zlib.decompressobj(), data, start + _PROBE, rid=rid, field=field)[start:]
    if len(first) == _PROBE and not _can_start_tests(first):
        raise RowError(rid, field, f"decompressed text is not a JSON list of tests (it "
                                   f"starts {first[:16]!r}; its pickle declares "
                                   f"{size_text(end - start)})")


def _unpickle_other(data: bytes, *, cap: int, rid: str, field: str,
                    over: str = "invalid pickle: not one pickled text") -> Any:
    """A stream that is not one pickled text: unpickled only when it is small (module doc);
    a longer one is refused with `over` and the limit."""
    limit = min(cap, _OTHER_LIMIT)
    inflater = zlib.decompressobj()
    blob = _inflate(inflater, data, limit + 1, rid=rid, field=field)
    if len(blob) > limit:
        if limit == cap:
            raise RowError(rid, field, f"decompresses to more than {over_cap(cap)}")
        raise RowError(rid, field, f"{over} (over {size_text(limit)})")
    if not inflater.eof:
        raise RowError(rid, field, "base64 payload is not zlib data (truncated stream)")
    stream = io.BytesIO(blob)
    value = _load(_DataOnlyUnpickler(stream), rid=rid, field=field)
    if stream.tell() < len(blob):
        raise RowError(rid, field, "invalid pickle: more data after its end")
    return value


def _load(unpickler: pickle.Unpickler, *, rid: str, field: str) -> Any:
    try:
        return unpickler.load()
    except (RowError, _MoreData):
        raise
    except pickle.UnpicklingError as exc:
        raise RowError(rid, field, f"unsafe or invalid pickle: {shown(str(exc), 80)}") from None
    except RecursionError:
        raise RowError(rid, field, "invalid pickle: nested too deeply") from None
    except Exception as exc:  # truncated or corrupt pickle streams raise assorted errors
        reason = shown(f"{type(exc).__name__}: {exc}", 80)
        raise RowError(rid, field, f"invalid pickle ({reason})") from None
