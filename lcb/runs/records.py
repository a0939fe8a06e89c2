"""The record and summary schema, and the append-only JSONL log that holds records.

Contract:
- A record is one JSON object per problem (see `Record`); its keys are the ARCHITECTURE.md
  contract plus grading detail (`tests_run`, `verdicts`, `feedback`, `grader`) and the team's
  topology-specific `fields`, which are flattened into the top level of the JSON object.
- `RecordLog.append` writes one line, flushes and fsyncs it before returning: a record that was
  appended survives a kill of the process.
- `read_records` tolerates (and with `repair=True` removes) a truncated last line, the only
  damage a kill mid-write can cause; damage anywhere else raises `RecordsError` naming the line.
- `pass_at_1` is the one place pass@1 is computed (`summarize`, `lcb.runs.scoring` and the optimizer
  artifacts call it); `by_group` is the one per-difficulty / per-platform grouping.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lcb.data.datasets import DIFFICULTIES


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
    prompt_tokens: int
    completion_tokens: int
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
        line = json.dumps(record, ensure_ascii=False) + "\n"
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
            last = json.loads(tail)
        except ValueError:
            if repair:
                with path.open("r+b") as handle:
                    handle.truncate(len(data) - len(tail))
            return records
        _check(last, f"{path}:{len(lines) + 1}")
        records.append(last)
        if repair:
            with path.open("ab") as handle:
                handle.write(b"\n")
    return records


def _parse(line: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise RecordsError(f"{path}:{number}: not a JSON record ({exc})") from None
    if not isinstance(record, dict):
        raise RecordsError(f"{path}:{number}: expected a JSON object")
    _check(record, f"{path}:{number}")
    return record


def pass_at_1(outcomes: Iterable[tuple[str, int]]) -> float:
    """pass@1 over `(problem id, em)` outcomes, `em` 1 when a program passed every hidden test:
    per problem, the share of its programs that passed; averaged over problems. With one
    program per problem that is solved / n. 0.0 over no outcomes.

    >>> pass_at_1([("a", 1), ("a", 0), ("b", 1)])
    0.75
    """
    per_problem: dict[str, list[int]] = {}
    for problem_id, em in outcomes:
        per_problem.setdefault(str(problem_id), []).append(int(em))
    rates = [sum(ems) / len(ems) for ems in per_problem.values()]
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


def _em(rows: Iterable[Mapping[str, Any]]) -> float:
    return pass_at_1((row["id"], row["em"]) for row in rows)


def _group(records: list[Mapping[str, Any]], key: str, order: tuple[str, ...] = ()) -> dict:
    return {
        name: {"n": len(rows), "solved": sum(int(r["em"]) for r in rows), "em": _em(rows)}
        for name, rows in by_group(records, key, order).items()
    }


def has_code(record: Mapping[str, Any]) -> bool:
    """True when the team submitted an extracted program."""
    code = record.get("predicted_code")
    return isinstance(code, str) and bool(code.strip())


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The summary contract over records (one per problem; a repeated id raises `RecordsError`).

    `em` is pass@1 over all records, `extracted_em` over records with an extracted program; both
    are 0.0 over an empty set. Token and call counts are totals; `latency_s` is the sum of the
    problems' latencies (the batch's wall time is added by the runner, which knows it).

    >>> summarize([{"id": "a", "em": 1, "predicted_code": "print(1)"}, {"id": "b", "em": 0}])["em"]
    0.5
    """
    rows = list(records)
    seen: set[str] = set()
    for index, record in enumerate(rows):
        _check(record, f"record {index}")
        if record["id"] in seen:
            raise RecordsError(f"record {index}: id {record['id']!r} appears more than once")
        seen.add(record["id"])
    extracted = [record for record in rows if has_code(record)]
    solved = sum(int(record["em"]) for record in rows)
    extracted_solved = sum(int(record["em"]) for record in extracted)

    def total(key: str) -> int | float:
        return sum(record.get(key) or 0 for record in rows)

    return {
        "n": len(rows),
        "n_extracted": len(extracted),
        "n_errors": sum(1 for record in rows if record.get("error")),
        "solved": solved,
        "em": _em(rows),
        "extracted_solved": extracted_solved,
        "extracted_em": _em(extracted),
        "by_difficulty": _group(rows, "difficulty", DIFFICULTIES),
        "by_platform": _group(rows, "platform"),
        "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"),
        "n_llm_calls": total("n_llm_calls"),
        "n_tool_calls": total("n_tool_calls"),
        "latency_s": round(total("latency_s"), 3),
    }
