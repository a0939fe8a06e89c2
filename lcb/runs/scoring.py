"""Grade a file of given programs (`lcb score`): no model involved.

Contract:
- Input: JSONL, one prediction per line: `{"id": question_id, "code": program, ...}`. `code` may
  be named `predicted_code` (as in `lcb run` records) so run outputs can be regraded. Other
  fields are copied into the result line. Blank lines are ignored; several lines may name the
  same id (each is graded).
- Output: one result line per input line, in input order, appended and flushed as soon as it and
  every line before it are graded. A graded line holds the input fields, then `line`, `id`,
  `has_code`, `difficulty`, `platform`, `contest_date`, `error` (None) and `Grade.to_record()`
  (pass, total, pass_rate, em, tests_run, verdicts, feedback, grader, wall_s, cpu_s); those
  keys win over input fields of the same name. A line that cannot be graded (not UTF-8, not
  JSON, not an object, no id, an id outside the selected problems, no code, a grading-machinery
  failure) gives an error line: the same keys with `error` naming the line number and the
  problem, and `em` 0.
- pass@1 (`summarize_scores`): per problem, the fraction of its predictions that pass every
  test; averaged over problems. "overall" counts every problem that has a prediction (a line
  without code scores 0); "with code" only predictions that carry a program. Lines whose id is
  unknown, or that are not valid predictions at all, are counted as `n_invalid` and excluded.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lcb.data.datasets import DIFFICULTIES
from lcb.data.problems import Problem
from lcb.grading import GradingError, GradingPool, check_sandbox
from lcb.grading.official import require_official
from lcb.grading.pool import GRADERS
from lcb.grading.preflight import preflight
from lcb.runs.records import by_group, pass_at_1

CODE_KEYS = ("code", "predicted_code")


@dataclass(frozen=True)
class ScoreConfig:
    """How to grade: grader (default|official), every test or fail-fast, parallel jobs, tier."""

    grader: str = "default"
    all_tests: bool = False
    jobs: int | None = None
    sandbox: str = "process"


def check_grading(*, grader: str, sandbox: str) -> None:
    """Configuration errors of grading, raised before any work (`lcb run` and `lcb score`).

    ValueError for an unknown grader or sandbox; `SandboxUnavailable` / `OfficialGraderMissing`
    when the chosen tier or grader is not installed here. (Whether the tier actually runs is
    `lcb.grading.preflight`'s question, asked once the pool exists.)
    """
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}: choose one of {', '.join(GRADERS)}")
    check_sandbox(sandbox)
    if grader == "official":
        require_official()


@dataclass(frozen=True)
class Prediction:
    """One input line, parsed. `invalid` is set when the line is not a prediction at all."""

    line: int
    fields: dict[str, Any]
    id: str | None
    code: str | None
    invalid: str | None = None


def summary_path(out: Path) -> Path:
    """Where the JSON summary goes: next to RESULTS, `results.jsonl` -> `results.summary.json`."""
    return out.with_name(f"{out.stem}.summary.json")


def read_predictions(path: Path) -> list[Prediction]:
    """Parse the predictions file; malformed lines (not UTF-8, not JSON, not a prediction)
    become `Prediction`s with `invalid` set."""
    with path.open("rb") as handle:  # bytes: one bad line must not stop the others
        return [parse_line(raw, number) for number, raw in enumerate(handle, 1) if raw.strip()]


def parse_line(text: str | bytes, number: int) -> Prediction:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Prediction(number, {}, None, None, f"line {number}: not valid UTF-8 "
                                                      f"({exc.reason} at byte {exc.start})")
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Prediction(number, {}, None, None, f"line {number}: not valid JSON ({exc})")
    if not isinstance(value, dict):
        kind = type(value).__name__
        return Prediction(number, {}, None, None, f"line {number}: expected a JSON object, "
                                                  f"got {kind}")
    pid = value.get("id")
    if not isinstance(pid, str | int) or isinstance(pid, bool) or str(pid) == "":
        return Prediction(number, value, None, None, f"line {number}: no 'id' (a question_id)")
    code = next((value[k] for k in CODE_KEYS if k in value), None)
    return Prediction(number, value, str(pid), code if isinstance(code, str) else None)


def has_program(prediction: Prediction) -> bool:
    return prediction.code is not None and bool(prediction.code.strip())


def error_line(prediction: Prediction, message: str, problem: Problem | None = None) -> dict:
    """The result line of a prediction that could not be graded (nothing ran: total 0)."""
    return {**prediction.fields, **_identity(prediction, problem), "error": message,
            "pass": 0, "total": 0, "pass_rate": 0.0,
            "em": 0, "tests_run": 0, "verdicts": [], "feedback": None}


def graded_line(prediction: Prediction, problem: Problem, grade_record: dict) -> dict:
    return {**prediction.fields, **_identity(prediction, problem), "error": None,
            **grade_record}


def _identity(prediction: Prediction, problem: Problem | None) -> dict:
    return {"line": prediction.line, "id": prediction.id, "has_code": has_program(prediction),
            "difficulty": problem.difficulty if problem else None,
            "platform": problem.platform if problem else None,
            "contest_date": problem.contest_date if problem else None}


async def score_predictions(predictions: Sequence[Prediction], problems: Mapping[str, Problem],
                            out: TextIO, *, config: ScoreConfig) -> list[dict]:
    """Grade every prediction on one pool; write result lines in input order, each flushed.

    The pool is proven first (`lcb.grading.preflight`): a tier that cannot run here raises
    `SandboxUnavailable` before any line is written."""
    async with GradingPool(config.jobs, sandbox=config.sandbox) as pool:
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(preflight, pool, grader=config.grader))
        limit = asyncio.Semaphore(4 * max(config.jobs or 2, 1))

        async def one(prediction: Prediction) -> dict:
            async with limit:
                return await _score_one(pool, prediction, problems, config)

        tasks = [asyncio.ensure_future(one(p)) for p in predictions]
        lines = []
        try:
            for task in tasks:
                line = await task
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                out.flush()
                lines.append(line)
        finally:
            for task in tasks:
                task.cancel()
    return lines


async def _score_one(pool: GradingPool, prediction: Prediction,
                     problems: Mapping[str, Problem], config: ScoreConfig) -> dict:
    if prediction.invalid:
        return error_line(prediction, prediction.invalid)
    problem = problems.get(prediction.id or "")
    if problem is None:
        return error_line(prediction, f"line {prediction.line}: id {prediction.id!r} is not "
                                      f"among the selected problems")
    if not has_program(prediction):
        return error_line(prediction, f"line {prediction.line}: no program: 'code' must be "
                                      f"a non-empty string", problem)
    try:
        grade = await pool.grade(problem, prediction.code, all_tests=config.all_tests,
                                 grader=config.grader)
    except GradingError as exc:  # the machinery failed on this line; record it, go on
        return error_line(prediction, f"line {prediction.line}: grading failed: {exc}", problem)
    return graded_line(prediction, problem, grade.to_record())


def summarize_scores(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """pass@1 overall, on lines with code, per difficulty and per platform (see module doc).

    >>> summarize_scores([{"id": "a", "em": 1, "difficulty": "easy", "platform": "x"},
    ...                   {"id": "a", "em": 0, "difficulty": "easy", "platform": "x"}])["pass@1"]
    0.5
    """
    rows = list(lines)
    valid = [r for r in rows if r.get("difficulty") is not None]
    with_code = [r for r in valid if r.get("has_code", True)]
    return {
        "n_lines": len(rows),
        "n_invalid": len(rows) - len(valid),
        "n_errors": sum(1 for r in rows if r.get("error")),
        **_block(valid),
        "with_code": _block(with_code),
        "by_difficulty": _grouped(valid, "difficulty", DIFFICULTIES),
        "by_platform": _grouped(valid, "platform", ()),
    }


def _block(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {"n_predictions": len(rows), "n_problems": len({str(r["id"]) for r in rows}),
            "solved": sum(int(r["em"]) for r in rows),
            "pass@1": pass_at_1((r["id"], r["em"]) for r in rows)}


def _grouped(rows: list[Mapping[str, Any]], key: str, order: tuple[str, ...]) -> dict:
    return {name: _block(group) for name, group in by_group(rows, key, order).items()}
