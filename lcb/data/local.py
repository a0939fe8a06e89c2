"""Streaming LiveCodeBench rows out of local JSONL and Parquet files.

Contract:
- `resolve_files(path)` turns a file or a directory into the ordered list of data files it
  holds (a directory: its `*.jsonl`, `*.json` and `*.parquet` files in sorted name order, not
  recursive). A missing path, an unknown extension or an empty directory raises `DataError`.
- `iter_rows(files, max_line_bytes=)` yields `RawRow`s one at a time, in file order then row
  order, without decoding test cases (that is `lcb.data.problems.decode_row`'s job, done only for
  selected rows). JSONL is read line by line, at most `max_line_bytes` of a line held at once;
  Parquet batch by batch, so memory stays bounded on large files.
- A line that is not a JSON object (not UTF-8, not JSON, nested too deeply, longer than
  `max_line_bytes`) is yielded as a `RawRow` with `row=None` and `problem` saying what is wrong
  (`where` names the file and line), so the caller can report it and carry on.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
PARQUET_BATCH_ROWS = 64
SKIP_CHUNK_BYTES = 1 << 20


class DataError(ValueError):
    """An unusable data source (missing file, bad release tag, unreachable hub, bad file)."""


@dataclass(frozen=True)
class RawRow:
    """One undecoded row and where it came from: `file` and its 1-based line (JSONL) or 0-based
    row index (Parquet). `row` is None when the line is not a JSON object; `problem` says why.
    """

    row: dict | None
    file: Path
    position: int
    problem: str = ""

    @property
    def where(self) -> str:
        """`file:line` for JSONL, `file#row` for Parquet."""
        mark = "#" if self.file.suffix.lower() == ".parquet" else ":"
        return f"{self.file}{mark}{self.position}"


def resolve_files(path: str | Path) -> list[Path]:
    """The data files a path names: the file itself, or a directory's data files, sorted."""
    target = Path(path).expanduser()
    if not target.exists():
        raise DataError(f"--data {path}: no such file or directory")
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.is_file() and _is_data_file(p))
        if not files:
            raise DataError(
                f"--data {path}: directory holds no {'/'.join(DATA_SUFFIXES)} files"
            )
        return files
    if not _is_data_file(target):
        raise DataError(
            f"--data {path}: unsupported file type {target.suffix!r} "
            f"(expected one of {', '.join(DATA_SUFFIXES)})"
        )
    return [target]


def _is_data_file(path: Path) -> bool:
    return path.suffix.lower() in DATA_SUFFIXES


def iter_rows(files: Sequence[Path], *, max_line_bytes: int) -> Iterator[RawRow]:
    """Yield every row of `files` in order; see the module contract.

    `max_line_bytes` is the row cap (`lcb.data.rowcheck.max_row_bytes()` for a load).
    """
    for file in files:
        if file.suffix.lower() == ".parquet":
            yield from _parquet_rows(file)
        else:
            yield from _jsonl_rows(file, max_line_bytes)


def _jsonl_rows(file: Path, cap: int) -> Iterator[RawRow]:
    try:
        handle = file.open("rb")
    except OSError as exc:
        raise DataError(f"cannot read {file}: {exc.strerror or exc}") from None
    with handle:
        for number, line in enumerate(_lines(handle, cap), start=1):
            if line is None:
                yield RawRow(None, file, number, f"line longer than the row cap, {cap} bytes "
                                           "($LCB_MAX_ROW_BYTES)")
            elif line.strip():
                yield _parse_line(line, file, number)


def _lines(handle: BinaryIO, cap: int) -> Iterator[bytes | None]:
    """Each line of `handle`; None for a line over `cap` bytes, which is read past, not kept."""
    while line := handle.readline(cap + 1):
        if len(line) <= cap or line.endswith(b"\n"):
            yield line
            continue
        while (rest := handle.readline(SKIP_CHUNK_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None


def _parse_line(line: bytes, file: Path, number: int) -> RawRow:
    try:
        row = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return RawRow(None, file, number, f"not UTF-8 text (byte {exc.start})")
    except RecursionError:
        return RawRow(None, file, number, "not valid JSON (nested too deeply)")
    except json.JSONDecodeError as exc:
        return RawRow(None, file, number, f"not valid JSON ({exc.msg}, column {exc.colno})")
    except ValueError as exc:  # an integer literal longer than Python converts, for one
        return RawRow(None, file, number, f"not valid JSON ({str(exc)[:80]})")
    if not isinstance(row, dict):
        return RawRow(None, file, number, f"expected a JSON object, got {type(row).__name__}")
    return RawRow(row, file, number)


def _parquet_rows(file: Path) -> Iterator[RawRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(file)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"cannot read Parquet file {file}: {exc}") from None
    index = 0
    with parquet:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                yield RawRow(_plain(row), file, index)
                index += 1


def _plain(row: dict) -> dict:
    """Parquet may store dates as timestamps: give them the ISO text the JSONL rows hold."""
    return {
        key: value.isoformat() if isinstance(value, dt.date | dt.datetime) else value
        for key, value in row.items()
    }
