"""What one batch writes: each sample's record and transcript, and the summary.

Contract:
- `sample_seed(seed, sample)` is the run seed of sample `sample` (0-based): `seed` itself for
  sample 0, so a one-sample batch sends exactly the request seeds it always sent; every later
  sample gets a 31-bit seed derived from (seed, sample) by a hash that is the same in every
  process (`lcb.agents.seeds.request_seed`), so its requests carry seeds of their own and a rerun
  repeats them. Records keep the batch's `seed` and name their `sample`.
- `build_record` makes one program's record (`lcb.runs.records.Record`). The team's
  `fields["finish_reason"]`, `fields["truncated"]` and `fields["n_truncated_calls"]` (why the
  submitted answer's generation ended) become the record's own keys, defaulting to None, False
  and 0 when the team sets none; the other fields are carried as they are.
- `write_summary` writes `summarize` over every record in the predictions file plus the run's
  context: topology, model, samples, n_selected, n_missing (selected problems with no record),
  n_skipped_rows, n_pending_at_start (programs still to run when this session started),
  complete (every selected problem has all its samples), wall_s, wall_s_total (over resumed
  sessions), finished_at.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from lcb.agents.seeds import request_seed
from lcb.data.datasets import Loaded
from lcb.data.problems import Problem
from lcb.grading import Grade
from lcb.io import write_json
from lcb.runs.config import RunConfig
from lcb.runs.records import Record, read_records, record_key, summarize
from lcb.runs.rundir import now_iso

if TYPE_CHECKING:  # a result is only read here: records load without the model stack
    from lcb.teams.common import TeamResult

ENDING_KEYS = ("finish_reason", "truncated", "n_truncated_calls")


def sample_seed(seed: int, sample: int) -> int:
    """The run seed of `sample`: `seed` itself for sample 0, a derived 31-bit seed otherwise.

    >>> sample_seed(7, 0)
    7
    >>> sample_seed(7, 1) == sample_seed(7, 1) != sample_seed(7, 2)
    True
    """
    if sample < 0:
        raise ValueError(f"a sample index is 0 or more, got {sample}")
    return seed if sample == 0 else request_seed(seed, "sample", sample)


def _default_total(problem: Problem, grader: str) -> int:
    """How many tests a grade would have counted (official grading adds the public tests)."""
    extra = len(problem.public_tests) if grader == "official" else 0
    return len(problem.hidden_tests) + extra


def build_record(problem: Problem, result: TeamResult, grade: Grade | None, *,
                 config: RunConfig, latency_s: float, error: str | None,
                 sample: int = 0) -> Record:
    """One program's record. Without a grade (no program, or an error) every score is 0."""
    graded = grade.to_record() if grade is not None else {}
    fields = {key: value for key, value in result.fields.items() if key not in ENDING_KEYS}
    return Record(
        id=problem.id, topology=config.topology, model=config.model.model_id,
        predicted_code=None if result.error else result.code,
        passed=grade.passed if grade else 0,
        total=grade.total if grade else _default_total(problem, config.grader),
        pass_rate=graded.get("pass_rate", 0.0), em=grade.em if grade else 0,
        difficulty=problem.difficulty, platform=problem.platform,
        contest_date=problem.contest_date, latency_s=round(latency_s, 3),
        prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
        n_llm_calls=result.n_llm_calls, n_tool_calls=result.n_tool_calls, error=error,
        feedback=graded.get("feedback"), tests_run=graded.get("tests_run", 0),
        verdicts=tuple(graded.get("verdicts", ())), seed=config.seed,
        grader=graded.get("grader", config.grader),
        grade_wall_s=round(grade.wall_s, 3) if grade else 0.0,
        grade_cpu_s=round(grade.cpu_s, 3) if grade else 0.0,
        sample=sample, finish_reason=result.fields.get("finish_reason"),
        truncated=bool(result.fields.get("truncated", False)),
        n_truncated_calls=int(result.fields.get("n_truncated_calls") or 0),
        n_calls_without_usage=result.n_calls_without_usage,
        generation=config.model.generation(), fields=fields,
    )


def transcript(record: Record, result: TeamResult) -> dict[str, Any]:
    """The transcript file's payload: the record's identity, the program and every message."""
    return {"id": record.id, "sample": record.sample, "topology": record.topology,
            "model": record.model, "seed": record.seed, "error": record.error,
            "predicted_code": result.code, "final_text": result.final_text,
            "usage_by_role": result.usage_by_role, "messages": result.transcript}


def write_summary(config: RunConfig, loaded: Loaded, wall_s: float, *,
                  n_pending: int) -> dict[str, Any]:
    """The summary of every record in the predictions file (module docstring), also written to
    summary.json with an output directory."""
    records = read_records(config.paths.predictions)
    summary = summarize(records)
    previous = 0.0
    if config.resume and config.paths.summary and config.paths.summary.exists():
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
            previous = float(json.loads(config.paths.summary.read_text())["wall_s_total"])
    recorded = {record_key(record) for record in records}
    ids = {problem_id for problem_id, _ in recorded}
    summary.update({
        "topology": config.topology, "model": config.model.model_id, "samples": config.samples,
        "n_selected": len(loaded.problems),
        "n_missing": sum(1 for problem in loaded.problems if problem.id not in ids),
        "n_skipped_rows": len(loaded.skipped), "n_pending_at_start": n_pending,
        "complete": all((problem.id, sample) in recorded for problem in loaded.problems
                        for sample in range(config.samples)),
        "wall_s": round(wall_s, 3), "wall_s_total": round(previous + wall_s, 3),
        "finished_at": now_iso(),
    })
    if config.paths.summary is not None:
        write_json(config.paths.summary, summary)
    return summary
