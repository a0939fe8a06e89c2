"""File utilities: whole-file writes that are atomic and durable, JSON text that any string can be
written as, and JSON that any line is read as.

Contract:
- `json_text(value, **kw)` is `json.dumps(value, ensure_ascii=False, **kw)` with every lone
  surrogate (U+D800..U+DFFF, which Python strings may hold and JSON may escape, but UTF-8 cannot
  encode) written as its `\\uXXXX` escape. The result always encodes as UTF-8 and `json.loads`
  gives back the same value. The one exception is inherent to JSON: a high surrogate directly
  followed by a low one (two code points) reads back as the one character the pair encodes, as
  it does after `json.dumps` with `ensure_ascii=True`.
- `atomic_writer(path)` is the one way lcb replaces a whole file, with one durability rule: the
  bytes go to a new temporary file beside `path` (`<name>.<8 hex>.tmp`, created exclusively,
  mode 0666 less the umask), which is flushed and fsync-ed, renamed over `path` (`os.replace`),
  and then the folder is fsync-ed. A reader sees the old file or the new one, never half of
  one, and once the call returns the new file survives a crash of the machine. Any failure (a
  full disk, an error in the caller's block, a Ctrl-C) removes the temporary file and leaves
  `path` as it was; an `OSError` then names `path`, not the temporary file. Missing parent
  folders are made. Appends (JSONL logs) do not go through it: they fsync each line.
- `write_text(path, text)` replaces `path` through `atomic_writer` with UTF-8 text, lone
  surrogates written as `\\uXXXX` escapes: for text that is not JSON (HTML pages, tables),
  where no encoding could keep them. `write_json(path, value)` writes indented JSON (any
  string, as `json_text`) plus a newline the same way.
- `loads(data)` is `json.loads` of one line or file, with every way damaged or hostile text can
  fail (not UTF-8, not JSON, nested deeper than the parser's recursion limit, an integer literal
  longer than Python converts) raised as `BadJson`, a `ValueError` whose message says why in a
  few words; the caller adds the file and the line number.
- `page_link(target, start)` is how a written page links to another file: the path relative to
  the page's folder `start` (both folders can move together), a `file://` address only where
  no relative path exists (another drive).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

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


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary handle whose bytes replace `path` when the block ends (module contract).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with atomic_writer(folder / "a.txt") as handle:
    ...     _ = handle.write(b"whole")
    >>> (folder / "a.txt").read_bytes(), [p.name for p in folder.iterdir()]
    (b'whole', ['a.txt'])
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise _naming(exc, path) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise _naming(exc, path) from exc
        raise
    try:
        fsync_folder(path.parent)
    except OSError as exc:
        raise _naming(exc, path) from exc


def fsync_folder(folder: Path) -> None:
    """fsync `folder`, so a rename in it is on disk (a file system that cannot: EINVAL, let be)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def _naming(exc: OSError, path: Path) -> OSError:
    """`exc` with `path` as its file name (the temporary file means nothing to a reader)."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` as UTF-8, atomically; a lone surrogate becomes the six
    characters `\\udXXX`."""
    with atomic_writer(path) as handle:
        handle.write(text.encode("utf-8", errors="backslashreplace"))


def write_json(path: Path, value: Any) -> None:
    """Replace `path` with `value` as indented JSON and a newline, atomically (any string)."""
    write_text(path, json_text(value, indent=2) + "\n")


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


def page_link(target: Path, start: Path) -> str:
    """A link from a page in folder `start` to `target` (module contract)."""
    try:
        return Path(os.path.relpath(target, start)).as_posix()
    except ValueError:  # another drive: no relative path
        return Path(os.path.abspath(target)).as_uri()
