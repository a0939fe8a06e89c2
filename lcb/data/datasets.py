"""Problem sources and filters: the hub dataset, local JSONL/Parquet files, the bundled sample.

Contract of `load_problems(data, release=, selection=, strict=)`:
- `data` None -> the hub dataset `livecodebench/code_generation_lite` at `release`;
  "sample" -> the bundled sample set; an existing path -> a JSONL/Parquet file or a directory
  of them (sorted); anything else shaped like `owner/name` -> a hub dataset repo with the same
  file layout. An unusable source raises `DataError` with a one-line message naming it.
- Rows stream in dataset order. The cheap filters (`only`, difficulty, platform, dates) read
  raw fields; then `offset` and `limit` count the rows that passed them; only rows inside that
  window are decoded (`decode_row`, the expensive part), and reading stops at the window's end.
  With `only`, the result follows the order of `only` (then offset/limit apply to it).
- A row without usable tests (`SkipRow`), a malformed row (`RowError`), an unreadable line and
  a row whose question_id an earlier row (that passed the filters) already has are reported in
  `Loaded.skipped` with a reason and the load goes on; with `strict=True` a malformed,
  unreadable or repeated row, or an `only` ID that is not found, raises `DataError` instead.
  A repeated row does not count towards `offset`/`limit`. Each `Skipped` entry has a `kind`
  (`SKIP_KINDS`), so a caller can tell an unknown `only` ID from a malformed row. Hostile rows
  (wrong types, deep nesting, oversize fields, zlib bombs, unusable ids: `lcb.data.rowcheck`)
  are malformed rows like any other; a bad `$LCB_MAX_ROW_BYTES` raises `DataError` before
  anything is read.
- `withhold` names rows whose private tests stay undecoded (`lcb splits` needs only to know
  that the eval rows are there): such a row gets every check `decode_row` makes except that
  its `private_test_cases` need only be non-blank text within the size cap; it then goes to
  `Loaded.withheld` (its id, in load order) instead of `Loaded.problems`.
- A hub load that starts at release_v1's first row with no filters checks the row order against
  the frozen eval IDs (`lcb.data.manifest.check_eval_order`) and warns on a mismatch.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from lcb.data import problems, rowcheck
from lcb.data.hub import DEFAULT_RELEASE, HUB_DATASET, fetch_release, version_file
from lcb.data.local import DATA_SUFFIXES, DataError, RawRow, iter_rows, resolve_files
from lcb.data.manifest import check_eval_order
from lcb.data.problems import Problem, RowError, SkipRow

__all__ = ["DataError", "Loaded", "Selection", "Skipped", "load_problems", "source_kind"]

DIFFICULTIES = ("easy", "medium", "hard")
PLATFORMS = ("atcoder", "leetcode", "codeforces")
SAMPLE = "sample"
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")
PRIVATE = "private_test_cases"
_STAND_IN = '[{"input": "", "output": ""}]'  # one empty test, so decode_row checks the rest
# Why a row was left out: a line that is no JSON object, a row that fails its checks, a repeated
# question_id, a well-formed row without usable tests, an `only` ID that no row has.
SKIP_KINDS = ("unreadable", "malformed", "duplicate", "untestable", "not_found")


@dataclass(frozen=True)
class Selection:
    """Which problems to load. Filters apply in this order: only/difficulty/platform/dates,
    then `offset`, then `limit` (both count rows that passed the filters, including rows that
    then fail to decode, so windows do not shift when a row is bad). Dates are ISO
    `YYYY-MM-DD`, both ends inclusive, compared with the date part of `contest_date`.
    Invalid values raise ValueError naming the option.
    """

    limit: int | None = None
    offset: int = 0
    only: tuple[str, ...] = ()
    difficulty: str | None = None
    platform: str | None = None
    start_date: str | None = None
    end_date: str | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"--limit must be >= 0, got {self.limit}")
        if self.offset < 0:
            raise ValueError(f"--offset must be >= 0, got {self.offset}")
        if isinstance(self.only, str):
            raise ValueError("only must be a sequence of problem IDs, not one string")
        ids = (str(item).strip() for item in self.only)
        object.__setattr__(self, "only", tuple(dict.fromkeys(i for i in ids if i)))
        object.__setattr__(self, "difficulty", _choice("difficulty", self.difficulty,
                                                       DIFFICULTIES))
        object.__setattr__(self, "platform", _choice("platform", self.platform, PLATFORMS))
        start, end = _iso("start-date", self.start_date), _iso("end-date", self.end_date)
        if start and end and start > end:
            raise ValueError(f"--start-date {start} is after --end-date {end}")

    @property
    def has_filters(self) -> bool:
        """True when a filter other than offset/limit is set."""
        return bool(self.only or self.difficulty or self.platform or self.start_date
                    or self.end_date)

    def matches(self, row: dict) -> bool:
        """The cheap filters, on a raw row. Raises RowError for an unreadable contest_date."""
        if self.only and problems.row_id(row) not in self.only:
            return False
        if self.difficulty and _raw_text(row, "difficulty").lower() != self.difficulty:
            return False
        if self.platform and _raw_text(row, "platform").lower() != self.platform:
            return False
        if self.start_date or self.end_date:
            day = _row_date(row)
            if self.start_date and day < dt.date.fromisoformat(self.start_date):
                return False
            if self.end_date and day > dt.date.fromisoformat(self.end_date):
                return False
        return True


def _choice(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered not in allowed:
        raise ValueError(f"--{name} {value!r}: expected one of {', '.join(allowed)}")
    return lowered


def _iso(name: str, value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"--{name} {value!r}: expected an ISO date such as 2023-09-01") from None


def _raw_text(row: dict, name: str) -> str:
    """A field the cheap filters read: text, or a `RowError` naming the type found."""
    value = row.get(name, "")
    if not isinstance(value, str):
        raise RowError(problems.row_id(row), name, f"expected text, got {type(value).__name__}")
    return value


def _row_date(row: dict) -> dt.date:
    text = _raw_text(row, "contest_date")
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        raise RowError(problems.row_id(row), "contest_date",
                       f"not an ISO date: {rowcheck.shown(text)}") from None


@dataclass(frozen=True)
class Skipped:
    """A row left out of a load and why (the reason names the field or the file and line);
    `kind` is one of `SKIP_KINDS`."""

    row_id: str
    reason: str
    kind: str = "malformed"


@dataclass
class Loaded:
    """The selected problems in order, the rows skipped on the way, and where they came from;
    `withheld`: ids of usable rows whose private tests were not decoded (`withhold`)."""

    problems: list[Problem]
    skipped: list[Skipped]
    source: dict = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)

    @property
    def not_found(self) -> list[str]:
        """The `only` IDs that no row of the source (passing the other filters) has."""
        return [entry.row_id for entry in self.skipped if entry.kind == "not_found"]


def load_problems(
    data: str | None = None,
    *,
    release: str = DEFAULT_RELEASE,
    selection: Selection = Selection(),  # noqa: B008  (frozen, so a shared default is safe)
    strict: bool = False,
    revision: str | None = None,
    withhold: Collection[str] = (),
) -> Loaded:
    """Load the problems `selection` picks from `data`; see the module contract.

    `revision` (hub only) pins a branch, tag or commit; default `$LCB_HF_REVISION` or `main`.
    `withhold`: ids whose private tests are not decoded (see the module contract).

    Example:
        >>> loaded = load_problems("sample", selection=Selection(limit=2))
        >>> [p.id for p in loaded.problems]  # doctest: +SKIP
    """
    cap = rowcheck.max_row_bytes()  # a bad $LCB_MAX_ROW_BYTES stops the load before any work
    files, source = _open_source(data, release=release, revision=revision)
    loaded = Loaded(problems=[], skipped=[], source=source)
    rows = iter_rows(files, max_line_bytes=cap)
    candidates = _candidates(rows, selection, loaded.skipped, strict=strict)
    candidates = _first_of_each_id(candidates, loaded.skipped, strict=strict)
    seen: list[str] = []
    if _checks_manifest(source, selection):
        candidates = _recording(candidates, seen, first_file=files[0])
    if selection.only:
        candidates = iter(_in_only_order(candidates, selection.only, loaded.skipped,
                                         strict=strict))
    stop = None if selection.limit is None else selection.offset + selection.limit
    withheld = frozenset(withhold)
    for raw in islice(candidates, selection.offset, stop):
        _decode_into(loaded, raw, strict=strict, withhold=withheld)
    if seen:
        check_eval_order(seen)
    return loaded


def source_kind(data: str | None) -> str:
    """What `data` names: "hub" (the default dataset or an `owner/name` that is no local path),
    "sample", or "local" (a file or directory, existing or not)."""
    if data is None or data == HUB_DATASET:
        return "hub"
    if data == SAMPLE:
        return SAMPLE
    path = Path(data).expanduser()
    if path.exists() or path.suffix.lower() in DATA_SUFFIXES or not _REPO_ID.fullmatch(data):
        return "local"
    return "hub"


def _open_source(data: str | None, *, release: str, revision: str | None
                 ) -> tuple[list[Path], dict]:
    kind = source_kind(data)
    if kind == "hub":
        fetched = fetch_release(release, repo_id=data or HUB_DATASET, revision=revision)
        return list(fetched.paths), fetched.source
    if kind == SAMPLE:
        return _sample_source()
    path = Path(str(data)).expanduser()
    files = resolve_files(str(data))
    return files, {"kind": "local", "path": str(path), "files": [str(f) for f in files]}


def _sample_source() -> tuple[list[Path], dict]:
    try:
        from lcb.data.samples import SAMPLE_ROWS
    except ImportError as exc:
        raise DataError(f"--data sample: the bundled sample set is not available ({exc})") from None
    files = resolve_files(SAMPLE_ROWS)
    return files, {"kind": SAMPLE, "path": str(SAMPLE_ROWS), "files": [str(f) for f in files]}


def _checks_manifest(source: dict, selection: Selection) -> bool:
    files = source.get("files") or []
    return (source.get("kind") == "hub" and files[:1] == [version_file(1)]
            and selection.offset == 0 and not selection.has_filters)


def _candidates(rows: Iterable[RawRow], selection: Selection, skipped: list[Skipped], *,
                strict: bool) -> Iterator[RawRow]:
    """Rows that pass the cheap filters; unreadable rows go to `skipped` (or raise if strict)."""
    for raw in rows:
        if raw.row is None:
            _reject(skipped, Skipped(raw.where, raw.problem, "unreadable"), strict=strict)
            continue
        try:
            if selection.matches(raw.row):
                yield raw
        except RowError as exc:
            _reject(skipped, Skipped(exc.row_id, f"{raw.where}: {exc}"), strict=strict)


def _first_of_each_id(rows: Iterable[RawRow], skipped: list[Skipped], *, strict: bool
                      ) -> Iterator[RawRow]:
    """Rows whose question_id has not been seen before; a repeat goes to `skipped` (or raises
    if strict). One id is one problem: a run records each once, and its summary needs that."""
    first: dict[str, str] = {}
    for raw in rows:
        qid = problems.row_id(raw.row or {})
        if qid in first:
            reason = f"{raw.where}: duplicate question_id (first seen in {first[qid]})"
            _reject(skipped, Skipped(qid, reason, "duplicate"), strict=strict)
            continue
        if raw.row and rowcheck.id_problem(raw.row.get("question_id")) is None:  # a real id
            first[qid] = raw.where
        yield raw


def _recording(rows: Iterator[RawRow], seen: list[str], *, first_file: Path
               ) -> Iterator[RawRow]:
    """Pass rows through, noting the IDs of those from release_v1's file (`test.jsonl`)."""
    for raw in rows:
        if raw.file == first_file:
            seen.append(problems.row_id(raw.row or {}))
        yield raw


def _in_only_order(rows: Iterator[RawRow], only: tuple[str, ...], skipped: list[Skipped], *,
                   strict: bool) -> list[RawRow]:
    """The rows named by `only`, in its order; stops reading once all are found."""
    found: dict[str, RawRow] = {}
    for raw in rows:
        found.setdefault(problems.row_id(raw.row or {}), raw)
        if len(found) == len(only):
            break
    for missing in (i for i in only if i not in found):
        reason = "requested with --only but not in the source (or excluded by another filter)"
        _reject(skipped, Skipped(missing, reason, "not_found"), strict=strict)
    return [found[i] for i in only if i in found]


def _decode_into(loaded: Loaded, raw: RawRow, *, strict: bool, withhold: frozenset[str]
                 ) -> None:
    row = raw.row or {}
    try:
        if withhold and problems.row_id(row) in withhold:
            loaded.withheld.append(_check_withheld(row))
        else:
            loaded.problems.append(problems.decode_row(row))
    except SkipRow as exc:
        loaded.skipped.append(Skipped(exc.row_id, exc.reason, "untestable"))
    except RowError as exc:
        _reject(loaded.skipped, Skipped(exc.row_id, f"{raw.where}: {exc}"), strict=strict)


def _check_withheld(row: dict) -> str:
    """The row's id once it passes every check but the decoding of its private tests."""
    rid = problems.decode_row({**row, PRIVATE: _STAND_IN} if PRIVATE in row else row).id
    text, cap = row[PRIVATE], rowcheck.max_row_bytes()
    if not isinstance(text, str):
        raise RowError(rid, PRIVATE, f"expected text, got {type(text).__name__}")
    if len(text) > cap:
        raise RowError(rid, PRIVATE, f"longer than {rowcheck.over_cap(cap)}")
    if not text.strip():
        raise SkipRow(rid, "no private tests")
    return rid


def _reject(skipped: list[Skipped], entry: Skipped, *, strict: bool) -> None:
    if strict:
        where = "" if entry.row_id in entry.reason else f"{entry.row_id}: "
        raise DataError(f"{where}{entry.reason} (stopped by --strict)")
    skipped.append(entry)
