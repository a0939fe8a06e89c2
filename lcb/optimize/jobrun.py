"""The part of an optimizer job that needs the model stack (`lcb.optimize.job` checks the job's
own input first, then calls `run_checked`).

Contract: `run_checked(config, optimizer, cell=..., seed=..., splits=..., settings=...)` writes
`job.json` (`job_spec`: settings, conformance, provenance), checks the
endpoints, opens the job directory, then runs the pending phases on one grading pool, each on a
runtime of its own (sampled for optimize, greedy otherwise). Returns the job summary; raises
what `lcb.optimize.job.run_job` documents.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lcb.agents.cache import open_cache
from lcb.agents.check import check_endpoint
from lcb.agents.models import ModelConfig
from lcb.agents.prompts import bundle_hashes
from lcb.grading import GradingPool
from lcb.grading.preflight import preflight
from lcb.optimize import conformance, phases, provenance
from lcb.optimize.artifacts import Artifact, JobSpec, read_history
from lcb.optimize.calls import reflection_config
from lcb.optimize.cell import TeamCell
from lcb.optimize.curves import CURVE_FILE, run_curve
from lcb.optimize.job import SPLITS_FILE, JobConfig, JobPhase, pending_phases
from lcb.optimize.jobdir import open_job_dir, pin_seed_bundle
from lcb.optimize.method import Optimizer
from lcb.optimize.methods import resolve_settings
from lcb.optimize.phasecost import record_wall
from lcb.optimize.sealing import SELECTION_SEED
from lcb.optimize.sizing import SizingView, check_budget
from lcb.optimize.splits import (
    DEFAULT_SPLITS_PATH,
    OptimizerData,
    Splits,
    load_optimizer_rows,
    selection_rows,
)
from lcb.teams.common import TeamRuntime

log = logging.getLogger("lcb.optimize")
GRADER = "default"  # the grader every phase uses (`lcb.grading`)


async def run_checked(config: JobConfig, optimizer: Optimizer, *, cell: TeamCell,
                      seed: dict[str, str], splits: Splits,
                      settings: dict[str, Any]) -> dict[str, Any]:
    """Run the phases of a job whose input `lcb.optimize.job.run_job` checked (module doc)."""
    reflection = config.reflection or reflection_config(config.model)
    spec = job_spec(config, cell, splits, reflection, seed=seed, method_settings=settings)
    rows = None  # loaded once, for the budget check and then the optimize phase
    if hasattr(optimizer, "minimum_budget") and not _optimized(config.out):
        rows = load_optimizer_rows(splits, data=config.data, release=config.release,
                                   selection=config.selection)
        view = SizingView(cell=cell, seed_bundle=seed, optimizer_seed=config.seed,
                          data=OptimizerData(splits, rows, selection=config.selection),
                          budget=config.budget)
        check_budget(optimizer, view, allow=config.allow_small_budget)
    finished = (config.out / Artifact.RESULT).exists() and (
        not config.curve or (config.out / CURVE_FILE).exists())
    if config.check_endpoints and not config.replay and not finished:
        await check_endpoint(config.model)
        other = (reflection.model_id, reflection.base_url) != (config.model.model_id,
                                                               config.model.base_url)
        if other and config.method != "identity":
            await check_endpoint(reflection)
    out = open_job_dir(config.out, spec, restart_optimization=config.restart_optimization)
    pin_seed_bundle(out, seed)
    if not (out / SPLITS_FILE).exists():
        splits.save(out / SPLITS_FILE)
    todo = pending_phases(config, out)
    log.info("job %s: phases to run: %s", out, ", ".join(todo) or "none")
    job = phases.PhaseJob(out=out, cell=cell, seed_bundle=seed, splits=splits,
                          optimizer_seed=config.seed, data=config.data, release=config.release,
                          selection=config.selection, feedback=config.feedback,
                          uncharged_cost=config.uncharged_cost,
                          rows=None if rows is None else tuple(rows))
    curve = config.curve and not (out / CURVE_FILE).exists()
    with GradingPool(config.grade_workers, sandbox=config.sandbox) as pool:
        if todo or curve:  # prove the grader works here before the first rollout
            await asyncio.get_running_loop().run_in_executor(None, preflight, pool)
        for phase in todo:
            await _run_phase(phase, job, config, pool, optimizer=optimizer,
                             reflection=reflection)
        ran = [phase.value for phase in todo]
        if config.curve and (out / Artifact.SELECTION).exists() and not (out / CURVE_FILE).exists():
            await _run_curve(job, config, pool)
            ran.append("curve")
    return phases.summary(out, spec, ran=ran)


def _optimized(out: Path) -> bool:
    """The job's optimize phase is done (its history ends with the incumbent)."""
    history = read_history(out)
    return bool(history) and history[-1].kind == "final"


async def _run_curve(job: phases.PhaseJob, config: JobConfig, pool: GradingPool) -> None:
    """The learning curve (`lcb.optimize.curves`) on a greedy runtime, like validate's."""
    started = time.monotonic()
    runtime = TeamRuntime(replace(config.model, temperature=0.0),
                          cache=open_cache(config.cache, replay=config.replay),
                          purpose=JobPhase.VALIDATE.value)
    try:
        team = phases.runner(job, runtime, pool, concurrency=config.concurrency,
                             run_timeout_s=config.run_timeout_s)
        await run_curve(job, team, method=config.method, budget=config.budget)
    finally:
        await runtime.aclose()
        record_wall(job.out, "curve", time.monotonic() - started)


def job_spec(config: JobConfig, cell: TeamCell, splits: Splits, reflection: ModelConfig, *,
             seed: dict[str, str], method_settings: dict[str, Any]) -> JobSpec:
    """`job.json` of this job: settings, the conformance list and this session's provenance."""
    judge = {**provenance.sampling(reflection), "temperature": 0.0}  # a judge call's default
    spec = JobSpec(method=config.method, dataset=config.dataset, topology=cell.topology,
                   model=config.model.model_id, seed=config.seed,
                   team_size=None if cell.is_single else cell.size,
                   communication=None if cell.is_single else cell.communication,
                   budget=config.budget, temperature=config.model.temperature,
                   top_p=config.model.top_p, max_tokens=config.model.max_tokens,
                   thinking=config.model.thinking, reflection_model=reflection.model_id,
                   reflection_sampling=provenance.sampling(reflection),
                   split_sizes=splits.sizes, data=config.data, release=config.release,
                   revision=splits.source.get("revision"), test_rule=splits.test_rule,
                   splits_digest=conformance.splits_digest(splits), grader=GRADER,
                   sandbox=config.sandbox, opt_tests=config.opt_tests,
                   method_settings=method_settings,
                   selection=config.selection, selection_split=_carved(splits, config.selection),
                   feedback=config.feedback, uncharged_cost=config.uncharged_cost,
                   allow_small_budget=config.allow_small_budget,
                   seed_prompts=bundle_hashes(seed),
                   provenance=provenance.collect(task=config.model, reflection=reflection,
                                                 grader=GRADER, sandbox=config.sandbox,
                                                 judge_sampling=judge))
    return spec.model_copy(update={"conformance": conformance.check(
        spec, splits=splits, reference=_reference(config.method, cell))})


def _carved(splits: Splits, selection: str) -> dict[str, Any] | None:
    """The `--selection train` carve of the train split, as `job.json` records it."""
    if selection != "train":
        return None
    train, chosen = selection_rows(splits, selection)
    return {"seed": SELECTION_SEED, "train": list(train), "selection": list(chosen)}


def _reference(method: str, cell: TeamCell) -> conformance.Reference:
    standard = Splits.load(DEFAULT_SPLITS_PATH) if DEFAULT_SPLITS_PATH.exists() else None
    default_size = None if cell.is_single else TeamCell(cell.topology).size
    return conformance.Reference(
        team_size=default_size, method_settings=resolve_settings(method), splits=standard,
        prompt_hashes=conformance.load_prompt_manifest().get(cell.topology, {}))


async def _run_phase(phase: JobPhase, job: phases.PhaseJob, config: JobConfig,
                     pool: GradingPool, *, optimizer: Optimizer,
                     reflection: ModelConfig) -> None:
    """One phase on its own runtime: sampled for optimize, greedy (temperature 0) otherwise.
    Its wall time in this session goes to the job's `phase_times.json`, finished or not."""
    started = time.monotonic()
    greedy = phase is not JobPhase.OPTIMIZE
    runtime = TeamRuntime(replace(config.model, temperature=0.0) if greedy else config.model,
                          cache=open_cache(config.cache, replay=config.replay),
                          purpose=phase.value)
    try:
        team = phases.runner(job, runtime, pool, concurrency=config.concurrency,
                             run_timeout_s=config.run_timeout_s,
                             opt_tests=None if greedy else config.opt_tests)
        if phase is JobPhase.OPTIMIZE:
            await phases.run_optimize(job, team, optimizer, budget=config.budget,
                                      reflection=reflection)
        elif phase is JobPhase.VALIDATE:
            await phases.run_validate(job, team)
        else:
            await phases.run_test(job, team)
    finally:
        await runtime.aclose()
        record_wall(job.out, phase.value, time.monotonic() - started)
