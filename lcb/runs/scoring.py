"""Grade a file of given programs (`lcb score`): no model involved.

Contract:
- Input: JSONL, one prediction per line: `{"id": question_id, "code": program, ...}`. `code` may
  be named `predicted_code` (as in `lcb run` records) so run outputs can be regraded. Other
  fields are copied into the result line. Blank lines are ignored; several lines may name the
  same id (each is graded).
- Output: one result line per input line, in input order, appended and flushed as soon as it and
  every line before it are graded. A graded line holds the input fields, then `line`, `id`,
  `has_code`, `difficulty`, `platform`, `contest_date`, `error` (None) and `Grade.to_record()`
  (pass, total, pass_rate, em, tests_run, verdicts, feedback, grader, wall_s, cpu_s). The input
  fields never carry a key this scoring sets (`RESERVED`: those, and `--grader both`'s
  `official`, `agree`, `divergence`): an input line's own (a stale grade in a results file
  scored again, or a forged one) is dropped, so every grade and agreement in a result line
  and in the summary was made by this scoring. A line that cannot be graded (not UTF-8, not
  JSON or nested too deeply, not an object, no id, an id outside the selected problems, no
  code, a grading-machinery failure) gives an error line: the same keys with `error` naming
  the line number and the problem, and `em` 0. A program whose grading failed twice (verdict
  `infra`, see `lcb.grading.pool`) keeps its grade, with `error` saying what failed. Result
  lines hold any string the input held
  (`lcb.io.json_text`: a lone surrogate is written as its `\\uXXXX` escape).
- The summary (`summarize_scores`) is the summary schema of `lcb.runs.records` (the keys and
  meanings of `lcb run`'s summary) over the valid lines: the lines of a selected problem, so a
  line without code or whose grading failed counts, with em 0 (`n_errors` counts them). The
  lines of one id are its samples: pass@1 is per problem the share of its lines that pass every
  test, averaged over problems, and pass@k uses the same estimator as `lcb run`. Lines that are
  not predictions at all or name an unselected id are `n_invalid` and left out. Selected
  problems without any valid line are `n_missing` (their ids: `missing_ids`): left out of the
  summary, or with `missing_as_fail` counted as one failed program each (they get no result
  line). The summary adds `n_lines`, `n_invalid`, `n_selected`, `n_missing`, `missing_ids` and
  `missing_as_fail`. `notes` says on the console which lines were not graded and why, and which
  selected problems have no prediction.
- `reference_predictions(problems)` makes predictions of the bundled sample set's reference
  solutions (`lcb score --references`): no file is read; each carries `programs: "reference"`
  into its result line, and the summary of such a scoring says `programs: "reference"` (else
  `"predictions"`), so a report can tell them from programs a model wrote.
- With `grader="both"` every program is graded by the default grader (the line's grade, as
  above) and by the official one: the line adds `official` (its pass, total, em, tests_run,
  verdicts, feedback), `agree` and `divergence` (`lcb.grading.agreement.compare`), and the
  summary adds `agreement` (`summarize_agreement`) and `em_official` (pass@1 by the official
  grades of the same lines).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lcb.data.problems import Problem
from lcb.data.samples import reference_solution
from lcb.grading import GradingError, GradingPool, check_sandbox
from lcb.grading.agreement import compare, summarize_agreement
from lcb.grading.official import require_official
from lcb.grading.pool import GRADERS
from lcb.grading.preflight import preflight
from lcb.io import BadJson, json_text, loads
from lcb.runs.records import pass_at_1, summarize

CODE_KEYS = ("code", "predicted_code")
PROGRAMS = "programs"  # the key that says whose programs were graded: one of the two below
REFERENCE = "reference"  # the sample set's reference solutions (`lcb score --references`)
PREDICTIONS = "predictions"  # the programs of a predictions file
BOTH = "both"  # --grader both: the default and the official grader, and their agreement
# The keys a result line's identity, grade and agreement set: never carried from the input.
RESERVED = frozenset({
    "line", "id", "has_code", "difficulty", "platform", "contest_date", "error",  # identity
    "pass", "total", "pass_rate", "em", "tests_run", "verdicts", "feedback", "grader",
    "wall_s", "cpu_s",  # Grade.to_record()
    "official", "agree", "divergence",  # --grader both
})
NAMED_LINES = 20  # error lines named one by one on the console; the rest are counted
NAMED_MISSING = 5  # ids named of the selected problems without a prediction


@dataclass(frozen=True)
class ScoreConfig:
    """How to grade: grader (default|official|both), every test or fail-fast, jobs, tier;
    `missing_as_fail` counts selected problems without a prediction as failures."""

    grader: str = "default"
    all_tests: bool = False
    jobs: int | None = None
    sandbox: str = "process"
    missing_as_fail: bool = False


def check_grading(*, grader: str, sandbox: str) -> None:
    """Configuration errors of grading, raised before any work (`lcb run` and `lcb score`).

    ValueError for an unknown grader or sandbox; `SandboxUnavailable` / `OfficialGraderMissing`
    when the chosen tier or grader is not installed here. (Whether the tier actually runs is
    `lcb.grading.preflight`'s question, asked once the pool exists.)
    """
    if grader not in (*GRADERS, BOTH):
        raise ValueError(f"unknown grader {grader!r}: choose one of "
                         f"{', '.join((*GRADERS, BOTH))}")
    check_sandbox(sandbox)
    if grader in ("official", BOTH):
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
    """Parse the predictions file; malformed lines (not UTF-8, not JSON, nested too deeply,
    not a prediction) become `Prediction`s with `invalid` set, naming the line."""
    with path.open("rb") as handle:  # bytes: one bad line must not stop the others
        return [parse_line(raw, number) for number, raw in enumerate(handle, 1) if raw.strip()]


def parse_line(text: str | bytes, number: int) -> Prediction:
    try:
        value = loads(text)
    except BadJson as exc:  # not UTF-8, not JSON, or nested too deeply
        return Prediction(number, {}, None, None, f"line {number}: {exc}")
    if not isinstance(value, dict):
        kind = type(value).__name__
        return Prediction(number, {}, None, None, f"line {number}: expected a JSON object, "
                                                  f"got {kind}")
    pid = value.get("id")
    if not isinstance(pid, str | int) or isinstance(pid, bool) or str(pid) == "":
        return Prediction(number, value, None, None, f"line {number}: no 'id' (a question_id)")
    code = next((value[k] for k in CODE_KEYS if k in value), None)
    return Prediction(number, value, str(pid), code if isinstance(code, str) else None)


def reference_predictions(problems: Iterable[Problem]) -> list[Prediction]:
    """Each problem's reference solution as a prediction, numbered from line 1 in the order
    given, with the fields `id`, `code` and `programs: "reference"`. Raises
    `lcb.data.samples.UnknownSampleError` for a problem outside the sample set."""
    predictions = []
    for number, problem in enumerate(problems, 1):
        code = reference_solution(problem.id)
        fields = {"id": problem.id, "code": code, PROGRAMS: REFERENCE}
        predictions.append(Prediction(number, fields, problem.id, code))
    return predictions


def has_program(prediction: Prediction) -> bool:
    return prediction.code is not None and bool(prediction.code.strip())


def error_line(prediction: Prediction, message: str, problem: Problem | None = None) -> dict:
    """The result line of a prediction that could not be graded (nothing ran: total 0)."""
    return {**carried(prediction.fields), **_identity(prediction, problem), "error": message,
            "pass": 0, "total": 0, "pass_rate": 0.0,
            "em": 0, "tests_run": 0, "verdicts": [], "feedback": None}


def graded_line(prediction: Prediction, problem: Problem, grade_record: dict) -> dict:
    return {**carried(prediction.fields), **_identity(prediction, problem), "error": None,
            **grade_record}


def carried(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The input fields a result line keeps: all but the `RESERVED` keys, which only this
    scoring sets (a results file scored again must not bring its old grades along)."""
    return {key: value for key, value in fields.items() if key not in RESERVED}


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
            None, functools.partial(preflight, pool, grader=_preflight_grader(config.grader)))
        limit = asyncio.Semaphore(4 * max(config.jobs or 2, 1))

        async def one(prediction: Prediction) -> dict:
            async with limit:
                return await _score_one(pool, prediction, problems, config)

        tasks = [asyncio.ensure_future(one(p)) for p in predictions]
        lines = []
        try:
            for task in tasks:
                line = await task
                out.write(json_text(line) + "\n")
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
    grader = "default" if config.grader == BOTH else config.grader
    try:
        grade = await pool.grade(problem, prediction.code, all_tests=config.all_tests,
                                 grader=grader)
        official = (await pool.grade(problem, prediction.code, all_tests=config.all_tests,
                                     grader="official") if config.grader == BOTH else None)
    except GradingError as exc:  # the machinery failed on this line; record it, go on
        return error_line(prediction, f"line {prediction.line}: grading failed: {exc}", problem)
    line = graded_line(prediction, problem, grade.to_record())
    if grade.infra:
        line["error"] = (f"line {prediction.line}: grading failed (infra): "
                         f"{grade.feedback.error if grade.feedback else 'no verdict'}")
    if official is not None:
        line.update(_both(prediction.code, problem, line, official.to_record()))
    return line


def _preflight_grader(grader: str) -> str:
    return "official" if grader == BOTH else grader  # the official canary, and the default ones


def _both(code: str, problem: Problem, line: Mapping[str, Any], official: dict) -> dict:
    """The fields `--grader both` adds to a result line (module docstring)."""
    compared = compare(code, mode=str(problem.mode), default=line, official=official,
                       n_public=len(problem.public_tests))
    kept = ("pass", "total", "em", "tests_run", "verdicts", "feedback")
    return {"official": {key: official[key] for key in kept}, "agree": compared.agree,
            "divergence": compared.divergence}


def summarize_scores(lines: Iterable[Mapping[str, Any]], *,
                     selected: Mapping[str, Problem] | None = None,
                     missing_as_fail: bool = False) -> dict[str, Any]:
    """The summary of result lines (module docstring); `selected` are the problems asked for
    (None: only those the lines name, so none is missing).

    >>> summarize_scores([{"id": "a", "em": 1, "difficulty": "easy", "platform": "x"},
    ...                   {"id": "a", "em": 0, "difficulty": "easy", "platform": "x"}])["em"]
    0.5
    """
    rows = list(lines)
    valid = [r for r in rows if r.get("difficulty") is not None]
    predicted = {str(r["id"]) for r in valid}
    missing = [pid for pid in (selected or {}) if pid not in predicted]
    # A missing problem fails as many samples as the others have, so pass@k keeps its ks.
    counts = Counter(str(r["id"]) for r in valid)
    samples = min(counts.values(), default=1)
    failed = [_missing_row(selected[pid], sample) for pid in missing
              for sample in range(samples)] if missing_as_fail else []
    summary = {
        **summarize(valid + failed, unique=False),
        "n_lines": len(rows), "n_invalid": len(rows) - len(valid),
        "n_selected": len(selected) if selected is not None else len(predicted),
        "n_missing": len(missing), "missing_ids": missing, "missing_as_fail": missing_as_fail,
    }
    agreement = summarize_agreement(valid)
    if agreement is not None:  # graded by both graders
        graded = [r for r in valid if isinstance(r.get("official"), dict)]
        summary["em_official"] = pass_at_1((r["id"], int(r["official"]["em"])) for r in graded)
        summary["agreement"] = agreement
    return summary


def _missing_row(problem: Problem, sample: int = 0) -> dict[str, Any]:
    """One failed sample of a selected problem without a prediction."""
    return {"id": problem.id, "sample": sample, "em": 0, "has_code": False,
            "difficulty": problem.difficulty, "platform": problem.platform, "missing": True}


def notes(lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> list[str]:
    """What the console should say besides the table: each line that was not graded (its
    number and reason, the first `NAMED_LINES` of them) and the selected problems without a
    prediction (the first `NAMED_MISSING` ids and how many)."""
    said = [str(line["error"]) for line in lines if line.get("error")]
    out = [f"{len(said)} line(s) not graded:"] if said else []
    out += [f"  {message}" for message in said[:NAMED_LINES]]
    if len(said) > NAMED_LINES:
        out.append(f"  ... and {len(said) - NAMED_LINES} more (their 'error' field in the "
                   "results says why)")
    missing = list(summary.get("missing_ids") or ())
    if missing:
        named = ", ".join(missing[:NAMED_MISSING])
        more = f" and {len(missing) - NAMED_MISSING} more" if len(missing) > NAMED_MISSING else ""
        counted = ("counted as failures (--missing-as-fail)" if summary.get("missing_as_fail")
                   else "left out of pass@1 (--missing-as-fail counts them as failures)")
        out.append(f"{len(missing)} of {summary['n_selected']} selected problem(s) have no "
                   f"prediction: {named}{more}; {counted}.")
    return out
