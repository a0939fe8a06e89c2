"""Uncharged evaluations of one bundle on one split, recorded per item so they resume.

Contract of `evaluate(...)`:
- Each problem is run once through the team (greedy runtime: the caller passes a runner whose
  model has temperature 0) with the evaluation seed of (optimizer seed, phase, row)
  (`lcb.optimize.seeds.evaluation_scope`): never the bundle, so two bundles are paired item by
  item, and a bundle equal to the seed bundle reproduces the baseline.
- Each finished item appends one record (the batch runner's record format, `lcb.runs.runner`, plus
  `phase`, `bundle` (its label), `bundle_hash`, `infra_failure`, `bad_request` (the server's
  words when it refused the request, else None), `failed_attempt_tokens` (tokens of tries that
  failed for infrastructure reasons)) to `DIR/evals/<phase>_<label>.jsonl`, fsync-ed. On a
  rerun, items already recorded are skipped, except those whose last record is an
  infrastructure failure, which are tried again.
- A request the server refused (HTTP 400, e.g. the prompt exceeded the model's context) is the
  bundle's fault: a usable record with em 0, `infra_failure: false` and the error text.
- The refusal watch (`lcb.optimize.outcomes.RefusalWatch`, streak rule only): refusals on
  `MISCONFIGURED_STREAK` distinct items in a row, with no other usable outcome between, mean a
  misconfigured job: items not started yet are skipped, the streak's records are superseded by
  infrastructure-failure records (so a rerun tries them again), and `Misconfigured` is raised.
  A rerun starts the watch with the refused records at the end of the file, so a streak split
  by an interruption still trips and gives all its items back.
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
from lcb.optimize.errors import EvaluationIncomplete
from lcb.optimize.method import Rollout
from lcb.optimize.outcomes import RefusalWatch
from lcb.optimize.seeds import evaluation_scope
from lcb.optimize.teamrun import Failed, TeamRunner, refusal_of
from lcb.runs.records import RecordLog, summarize
from lcb.runs.rundir import RunPaths
from lcb.runs.runner import RunConfig, build_record
from lcb.teams.common import TeamResult

log = logging.getLogger("lcb.optimize")


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
                      runner: TeamRunner, latency_s: float,
                      failed_tokens: Mapping[str, int] | None = None) -> dict[str, Any]:
    """One item's record: the runner's record of the run plus the evaluation's fields."""
    failed = isinstance(outcome, Failed)
    result = TeamResult.failed(outcome.error) if failed else outcome.team
    grade = None if failed else outcome.grade
    config = RunConfig(topology=runner.cell.topology, model=runner.runtime.config,
                       paths=RunPaths(predictions=Path(os.devnull)), seed=outcome.seed)
    record = build_record(problem, result, grade, config=config, latency_s=latency_s,
                          error=result.error)
    extra = {"phase": spec.phase, "bundle": spec.label, "bundle_hash": bundle_hash(spec.bundle),
             "infra_failure": failed, "bad_request": refusal_of(outcome),
             "failed_attempt_tokens": dict(failed_tokens or {})}
    return replace(record, fields={**record.fields, **extra}).to_dict()


def _superseded(record: Mapping[str, Any], error: str) -> dict[str, Any]:
    """`record` turned into an infrastructure failure (tried again on a rerun)."""
    return {**record, "infra_failure": True, "error": error, "em": 0}


async def evaluate(runner: TeamRunner, problems: Sequence[Problem], spec: Evaluation
                   ) -> dict[str, dict[str, Any]]:
    """Evaluate `spec.bundle` on `problems`, resuming per item (see the module docstring)."""
    done = read_evaluations(spec.job_dir, phase=spec.phase, label=spec.label)
    pending = [p for p in problems if p.id not in done or done[p.id].get("infra_failure")]
    log.info("%s %s: %d of %d items to run", spec.phase, spec.label, len(pending), len(problems))
    if pending:
        await _run_items(runner, pending, spec, streak=_refusals_on_disk(done))
        done = read_evaluations(spec.job_dir, phase=spec.phase, label=spec.label)
    failed = [p.id for p in problems if done[p.id].get("infra_failure")]
    if failed:
        raise EvaluationIncomplete(
            f"{spec.phase} evaluation of the {spec.label} bundle: {len(failed)} item(s) failed "
            f"for infrastructure reasons after retries, e.g. {failed[:3]} "
            f"({done[failed[0]].get('error')}); rerun the phase to try them again")
    return {p.id: done[p.id] for p in problems}


def _refusals_on_disk(done: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The refused records after the last answered one: an earlier session's part of a streak
    (so the watch does not start over on every rerun)."""
    streak: list[dict[str, Any]] = []
    for record in done.values():
        if record.get("infra_failure"):
            continue  # neither extends nor breaks a streak (and is run again anyway)
        if record.get("bad_request") is not None:
            streak.append(record)
        else:
            streak = []
    return streak


async def _run_items(runner: TeamRunner, pending: Sequence[Problem], spec: Evaluation, *,
                     streak: Sequence[dict[str, Any]] = ()) -> None:
    """Run and record `pending` (at most `runner.concurrency` at once); raises `Misconfigured`
    when the refusal watch trips (module docstring). `streak`: refused records on disk that
    the watch counts first."""
    watch = RefusalWatch(first_calls=False)
    refused: dict[str, dict[str, Any]] = {}  # the current streak's records, by id
    for record in streak:
        refused[str(record["id"])] = record
        watch.refused(str(record["id"]), str(record["bad_request"]))
    slots = asyncio.Semaphore(runner.concurrency)
    with RecordLog(spec.path) as records:

        async def one(problem: Problem) -> None:
            async with slots:
                if watch.tripped is not None:
                    return  # a misconfigured job: leave the item for a rerun
                seed = evaluation_scope(optimizer_seed=spec.optimizer_seed, phase=spec.phase,
                                        row=problem.id).rollout
                started, spent = time.monotonic(), {}
                outcome = await runner.uncharged(spec.bundle, problem, seed=seed, spent=spent)
                record = evaluation_record(problem, outcome, spec=spec, runner=runner,
                                           latency_s=time.monotonic() - started,
                                           failed_tokens=spent)
                _watch(watch, problem.id, outcome, record, refused, records)

        await asyncio.gather(*(one(problem) for problem in pending))
    if watch.tripped is not None:
        raise watch.tripped


def _watch(watch: RefusalWatch, row: str, outcome: Rollout | Failed, record: dict[str, Any],
           refused: dict[str, dict[str, Any]], records: RecordLog) -> None:
    """Show one outcome to the watch, then append its record (superseding the streak's records
    as infrastructure failures once the watch has tripped)."""
    message = refusal_of(outcome)
    was_tripped = watch.tripped is not None
    if message is not None:
        refused[row] = record
        watch.refused(row, message)
    elif not isinstance(outcome, Failed):
        watch.usable()
        refused.clear()
    if watch.tripped is None:
        records.append(record)
        return
    error = str(watch.tripped)
    if not was_tripped:  # just tripped: every record of the streak is given back
        for earlier in refused.values():
            if earlier is not record:
                records.append(_superseded(earlier, error))
    records.append(_superseded(record, error) if message is not None else record)


def score(records: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """(passed, n) over evaluation records (one per item; see `lcb.runs.records.summarize`)."""
    summary = summarize(records.values())
    return summary["solved"], summary["n"]
