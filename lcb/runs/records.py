"""The record and summary schema, and the append-only JSONL log that holds records.

Contract:
- A record is one JSON object per program graded: one per problem, or one per (problem, sample)
  when a batch draws several samples per problem (see `Record`). Its keys are the ARCHITECTURE.md
  contract plus `sample` (0-based), why the submitted answer's generation ended
  (`finish_reason`, `truncated`, `n_truncated_calls`), the generation settings used
  (`generation`: `ModelConfig.generation()`), grading detail (`tests_run`, `verdicts`,
  `feedback`, `grader`) and the team's topology-specific `fields`, flattened into the top level.
  `record_key` is a record's identity, (id, sample); a record without `sample` is sample 0.
- `RecordLog.append` writes one line, flushes and fsyncs it before returning: a record that was
  appended survives a kill of the process. Any string is written (`lcb.io.json_text`: a lone
  surrogate from a model's reply as its `\\uXXXX` escape).
- `read_records` tolerates (and with `repair=True` removes) a truncated last line, the only
  damage a kill mid-write can cause; damage anywhere else (not UTF-8, not JSON, nested too
  deeply, not a record) raises `RecordsError` naming the line: a resume must not skip a record.
- `pass_at_1` is the one place pass@1 is computed (`summarize`, `lcb.runs.scoring` and the optimizer
  artifacts call it; `lcb.stats` holds the estimator); `by_group` is the one per-difficulty /
  per-platform grouping.

The summary (`summarize`; `lcb run`'s summary.json and `lcb score`'s RESULTS.summary.json both
hold every key of `SUMMARY_KEYS`, with these meanings):
- `n`: programs graded (records, or valid prediction lines); `n_problems`: distinct problems
  among them; `samples_per_problem`: the fewest programs any of those problems has.
- `n_extracted`: programs that are non-empty code; `n_errors`: programs whose record has an error.
- `n_infra`: programs whose grading failed, on a retry too (`is_infra`: a verdict `infra`);
  their records also have an error, so they are among `n_errors`.
- `solved` / `extracted_solved`: programs that passed every hidden test (all / with code).
- `em`: pass@1: per problem, the share of its programs that passed, averaged over problems (with
  one program per problem, solved / n); `extracted_em`: the same over programs with code.
  `em` counts an `infra` program as a failure, as LiveCodeBench would; `em_graded` is the same
  pass@1 with the `infra` programs left out (every other program counts, one without code too).
- `pass_at_k`: {"1": pass@1, "5": ..., "10": ...}, the unbiased estimator averaged over problems,
  for each k at most `samples_per_problem` (see `lcb.stats`); "1" always equals `em`.
- `ci`: the bootstrap interval of pass@1 over problems: {level, low, high, resamples, seed}.
- `n_truncated` / `truncation_rate`: programs whose submitted answer was cut by the token limit,
  and their share of `n` (0.0 over nothing).
- `by_difficulty` (easy, medium, hard first), `by_platform`: per group {n, n_problems, solved,
  em, n_truncated}.
- `prompt_tokens`, `completion_tokens`, `n_llm_calls`, `n_tool_calls`, `latency_s`: sums over the
  programs (0 where the rows carry none, as for predictions scored without their run records).
  Only well-formed values count: a whole number from 0 to 2**63 - 1 (a count), a finite number
  of at least 0 (`latency_s`); anything else a row holds there (a string, `1e400`, NaN, a
  negative number: `lcb score` carries its input's fields) counts 0.
- `n_calls_without_usage`: answered model calls whose server reported no usage (0 for a row
  without the key: a record written before it existed). The token totals follow
  `lcb.agents.usage`'s rule (`sum_usage`): the known sums, None when every call is unknown.
  A record's own `prompt_tokens` / `completion_tokens` follow it too, over its team's calls.
Commands add their own context: `lcb run` (see `lcb.runs.runner`) and `lcb score` (see
`lcb.runs.scoring`) both add `n_selected` (problems selected) and `n_missing` (selected problems
with no program at all).
"""
from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lcb.agents.usage import count, sum_usage
from lcb.data.datasets import DIFFICULTIES
from lcb.io import BadJson, json_text, loads
from lcb.stats import bootstrap_ci, counts, pass_at_k, problem_rates


class RecordsError(ValueError):
    """A records file or record that cannot be used. The message names the file, line or key."""


@dataclass(frozen=True)
class Record:
    """The result of one problem. `passed` is written as the JSON key `pass`."""

    id: str
    topology: str
    model: str
    predicted_code: str | None
    passed: int
    total: int
    pass_rate: float
    em: int
    difficulty: str
    platform: str
    contest_date: str
    latency_s: float
    prompt_tokens: int | None  # None: no call's server reported usage (lcb.agents.usage)
    completion_tokens: int | None
    n_llm_calls: int
    n_tool_calls: int
    error: str | None
    feedback: dict | None
    tests_run: int
    verdicts: tuple[str, ...]
    seed: int
    grader: str
    grade_wall_s: float = 0.0
    grade_cpu_s: float = 0.0
    sample: int = 0
    finish_reason: str | None = None
    truncated: bool = False
    n_truncated_calls: int = 0
    n_calls_without_usage: int = 0
    generation: dict[str, Any] = field(default_factory=dict)  # `ModelConfig.generation()`
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to predictions.jsonl (team fields never shadow core keys)."""
        values = asdict(self)
        extra = values.pop("fields")
        values["verdicts"] = list(self.verdicts)
        core = {("pass" if key == "passed" else key): value for key, value in values.items()}
        clashes = sorted(set(extra) & set(core))
        if clashes:
            raise RecordsError(f"team fields {clashes} would overwrite record keys")
        return {**core, **extra}


REQUIRED_KEYS = ("id", "em")


def record_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """A record's identity: (problem id, sample index); a record without `sample` is sample 0."""
    return str(record["id"]), int(record.get("sample") or 0)


def _check(record: Mapping[str, Any], where: str) -> None:
    for key in REQUIRED_KEYS:
        if key not in record:
            raise RecordsError(f"{where}: record lacks the key {key!r}")
    if record["em"] not in (0, 1):
        raise RecordsError(f"{where}: 'em' must be 0 or 1, got {record['em']!r}")


class RecordLog:
    """An append-only JSONL file of records, opened once per batch.

    >>> with RecordLog(Path("predictions.jsonl")) as log:  # doctest: +SKIP
    ...     log.append(record.to_dict())
    """

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line; returns once the line is on disk. Thread-safe."""
        _check(record, str(self.path))
        line = json_text(record) + "\n"  # any string, lone surrogates included
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RecordLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Read a records file; a missing file reads as empty.

    A last line that is cut short (no newline, not valid JSON) is dropped; with `repair=True` it is
    also removed from the file, and a complete last line that lacks its newline gets one, so the
    next append starts on a fresh line.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # the bytes after the last newline: b"" for a well-formed file
    records = [_parse(line, path, number) for number, line in enumerate(lines, 1) if line.strip()]
    if tail.strip():
        try:
            last = loads(tail)
        except BadJson:
            if repair:
                with path.open("r+b") as handle:
                    handle.truncate(len(data) - len(tail))
            return records
        records.append(_checked(last, path, len(lines) + 1))
        if repair:
            with path.open("ab") as handle:
                handle.write(b"\n")
    return records


def _parse(line: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        record = loads(line)
    except BadJson as exc:
        raise RecordsError(f"{path}:{number}: not a JSON record ({exc})") from None
    return _checked(record, path, number)


def _checked(record: Any, path: Path, number: int) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise RecordsError(f"{path}:{number}: expected a JSON object")
    _check(record, f"{path}:{number}")
    return record


def read_readable(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of a file that can be read, and for each line that cannot (not UTF-8, not
    JSON, nested too deeply, not a record) its `RecordsError` message, naming the file and
    line. For readers that show what they can (`lcb report`), never for a resume."""
    records, unreadable = [], []
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if line.strip():
            try:
                records.append(_parse(line, path, number))
            except RecordsError as exc:
                unreadable.append(str(exc))
    return records, unreadable




SUMMARY_KEYS = (
    "n", "n_problems", "samples_per_problem", "n_extracted", "n_errors", "n_infra", "solved",
    "em", "em_graded", "extracted_solved", "extracted_em", "pass_at_k", "ci", "n_truncated",
    "truncation_rate", "by_difficulty", "by_platform", "prompt_tokens", "completion_tokens",
    "n_llm_calls", "n_tool_calls", "n_calls_without_usage", "latency_s",
)
TOTAL_KEYS = ("prompt_tokens", "completion_tokens", "n_llm_calls", "n_tool_calls",
              "n_calls_without_usage")


def pass_at_1(outcomes: Iterable[tuple[str, int]]) -> float:
    """pass@1 over `(problem id, em)` outcomes, `em` 1 when a program passed every hidden test:
    per problem, the share of its programs that passed; averaged over problems. With one
    program per problem that is solved / n. 0.0 over no outcomes.

    >>> pass_at_1([("a", 1), ("a", 0), ("b", 1)])
    0.75
    """
    rates = problem_rates(outcomes)
    return sum(rates) / len(rates) if rates else 0.0


def by_group(rows: Iterable[Mapping[str, Any]], key: str, order: tuple[str, ...] = ()
             ) -> dict[str, list[Mapping[str, Any]]]:
    """`rows` grouped by `row[key]` ("unknown" when missing): the names in `order` first, in
    that order, then the others sorted."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get(key) or "unknown"), []).append(row)
    names = [name for name in order if name in groups]
    names += sorted(name for name in groups if name not in order)
    return {name: groups[name] for name in names}


def _outcomes(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    return [(row["id"], row["em"]) for row in rows]


def _group(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {"n": len(rows), "n_problems": len({str(r["id"]) for r in rows}),
            "solved": sum(int(r["em"]) for r in rows), "em": pass_at_1(_outcomes(rows)),
            "n_truncated": sum(1 for r in rows if r.get("truncated"))}


def is_infra(record: Mapping[str, Any]) -> bool:
    """True when grading failed on the record's program (a verdict `infra`: see
    `lcb.grading.verdicts`), so its em 0 says nothing about the program."""
    verdicts = record.get("verdicts")
    return isinstance(verdicts, list | tuple) and "infra" in verdicts


def has_code(record: Mapping[str, Any]) -> bool:
    """True when the program is non-empty code: a scored line's `has_code`, else the record's
    extracted `predicted_code`."""
    if "has_code" in record:
        return bool(record["has_code"])
    code = record.get("predicted_code")
    return isinstance(code, str) and bool(code.strip())


def check_unique(records: Iterable[Mapping[str, Any]]) -> None:
    """`RecordsError` for a record without `id`/`em` or a (id, sample) recorded twice."""
    seen: set[tuple[str, int]] = set()
    for index, record in enumerate(records):
        _check(record, f"record {index}")
        key = record_key(record)
        if key in seen:
            sample = f" sample {key[1]}" if key[1] else ""
            raise RecordsError(f"record {index}: id {record['id']!r}{sample} appears more "
                               "than once")
        seen.add(key)


def summarize(records: Iterable[Mapping[str, Any]], *, unique: bool = True) -> dict[str, Any]:
    """The summary (module docstring) over records; with `unique`, an (id, sample) that
    appears twice raises `RecordsError` (scored lines are samples in their own right: `lcb
    score` passes `unique=False`). Rates are 0.0 over an empty set.

    >>> summarize([{"id": "a", "em": 1, "predicted_code": "print(1)"}, {"id": "b", "em": 0}])["em"]
    0.5
    """
    rows = list(records)
    if unique:
        check_unique(rows)
    extracted = [row for row in rows if has_code(row)]
    graded = [row for row in rows if not is_infra(row)]
    per_problem = counts(_outcomes(rows))
    n_truncated = sum(1 for row in rows if row.get("truncated"))
    return {
        "n": len(rows),
        "n_problems": len(per_problem),
        "samples_per_problem": min((n for n, _ in per_problem.values()), default=0),
        "n_extracted": len(extracted),
        "n_errors": sum(1 for row in rows if row.get("error")),
        "n_infra": len(rows) - len(graded),
        "solved": sum(int(row["em"]) for row in rows),
        "em": pass_at_1(_outcomes(rows)),
        "em_graded": pass_at_1(_outcomes(graded)),
        "extracted_solved": sum(int(row["em"]) for row in extracted),
        "extracted_em": pass_at_1(_outcomes(extracted)),
        "pass_at_k": pass_at_k(_outcomes(rows)),
        "ci": bootstrap_ci(problem_rates(_outcomes(rows))),
        "n_truncated": n_truncated,
        "truncation_rate": n_truncated / len(rows) if rows else 0.0,
        "by_difficulty": {name: _group(group)
                          for name, group in by_group(rows, "difficulty", DIFFICULTIES).items()},
        "by_platform": {name: _group(group) for name, group in by_group(rows, "platform").items()},
        **sum_usage(rows),
        "n_tool_calls": sum(count(row.get("n_tool_calls")) for row in rows),
        "latency_s": round(sum(_seconds(row.get("latency_s")) for row in rows), 3),
    }


def _seconds(value: Any) -> float:
    """A well-formed duration (a finite number >= 0), else 0.0."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 0.0
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        return 0.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 0.0
