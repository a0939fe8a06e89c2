"""Uncharged evaluations of one bundle on one split, recorded per item so they resume.

Contract of `evaluate(...)`:
- Each problem is run once through the team (greedy runtime: the caller passes a runner whose
  model has temperature 0) with the evaluation seed of (optimizer seed, phase, row)
  (`lcb.optimize.seeds.evaluation_scope`): never the bundle, so two bundles are paired item by
  item, and a bundle equal to the seed bundle reproduces the baseline.
- Each finished item appends one record (the batch runner's record format, `lcb.runs.runner`, plus
  `phase`, `bundle` (its label), `bundle_hash`, `infra_failure`) to
  `DIR/evals/<phase>_<label>.jsonl`, fsync-ed. On a rerun, items already recorded are skipped,
  except those whose last record is an infrastructure failure, which are tried again.
- It returns the records by id once every item has a usable record; if some items still failed
  for infrastructure reasons after their retries, it raises `EvaluationIncomplete` naming them
  (rerun the phase to try them again). Nothing is charged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lcb.data.problems import Problem
from lcb.optimize.artifacts import eval_path, read_evaluations
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.method import Rollout
from lcb.optimize.seeds import evaluation_scope
from lcb.optimize.teamrun import Failed, TeamRunner
from lcb.runs.records import RecordLog, summarize
from lcb.runs.rundir import RunPaths
from lcb.runs.runner import RunConfig, build_record
from lcb.teams import TeamResult

log = logging.getLogger("lcb.optimize")


class EvaluationIncomplete(RuntimeError):
    """Items whose evaluation failed for infrastructure reasons on every try."""


@dataclass(frozen=True)
class Evaluation:
    """What to evaluate: a bundle under a label, in a phase, for one job."""

    job_dir: Path
    phase: str
    label: str
    bundle: Mapping[str, str]
    optimizer_seed: int

    @property
    def path(self) -> Path:
        return eval_path(self.job_dir, phase=self.phase, label=self.label)


def evaluation_record(problem: Problem, outcome: Rollout | Failed, *, spec: Evaluation,
                      runner: TeamRunner, latency_s: float) -> dict[str, Any]:
    """One item's record: the runner's record of the run plus the evaluation's fields."""
    failed = isinstance(outcome, Failed)
    result = TeamResult.failed(outcome.error) if failed else outcome.team
    grade = None if failed else outcome.grade
    config = RunConfig(topology=runner.cell.topology, model=runner.runtime.config,
                       paths=RunPaths(predictions=Path(os.devnull)), seed=outcome.seed)
    record = build_record(problem, result, grade, config=config, latency_s=latency_s,
                          error=result.error)
    extra = {"phase": spec.phase, "bundle": spec.label, "bundle_hash": bundle_hash(spec.bundle),
             "infra_failure": failed}
    return replace(record, fields={**record.fields, **extra}).to_dict()


async def evaluate(runner: TeamRunner, problems: Sequence[Problem], spec: Evaluation
                   ) -> dict[str, dict[str, Any]]:
    """Evaluate `spec.bundle` on `problems`, resuming per item (see the module docstring)."""
    done = read_evaluations(spec.job_dir, phase=spec.phase, label=spec.label)
    pending = [p for p in problems if p.id not in done or done[p.id].get("infra_failure")]
    log.info("%s %s: %d of %d items to run", spec.phase, spec.label, len(pending), len(problems))
    if pending:
        with RecordLog(spec.path) as records:

            async def one(problem: Problem) -> None:
                seed = evaluation_scope(optimizer_seed=spec.optimizer_seed, phase=spec.phase,
                                        row=problem.id).rollout
                started = time.monotonic()
                outcome = await runner.uncharged(spec.bundle, problem, seed=seed)
                records.append(evaluation_record(problem, outcome, spec=spec, runner=runner,
                                                 latency_s=time.monotonic() - started))

            await asyncio.gather(*(one(problem) for problem in pending))
        done = read_evaluations(spec.job_dir, phase=spec.phase, label=spec.label)
    failed = [p.id for p in problems if done[p.id].get("infra_failure")]
    if failed:
        raise EvaluationIncomplete(
            f"{spec.phase} evaluation of the {spec.label} bundle: {len(failed)} item(s) failed "
            f"for infrastructure reasons after retries, e.g. {failed[:3]} "
            f"({done[failed[0]].get('error')}); rerun the phase to try them again")
    return {p.id: done[p.id] for p in problems}


def score(records: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """(passed, n) over evaluation records (one per item; see `lcb.runs.records.summarize`)."""
    summary = summarize(records.values())
    return summary["solved"], summary["n"]
