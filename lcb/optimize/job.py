"""One optimizer job: optimize → validate → test, each phase resumable, artifacts under `--out`.

Contract of `run_job(config)` (artifact files: `lcb.optimize.artifacts`):
- Configuration errors raise before any work: an unknown method (`UnknownMethod`), method
  setting (`SettingsError`) or team (`ValueError`), a seed prompt file changed since the job
  pinned its seed bundle (`ArtifactError` naming the role and file), a split file that does
  not fit the data (`SplitError`), an `--out` holding another job (`ArtifactError`), an
  endpoint that does not answer (`EndpointError`). An interrupted optimization is resumed by
  replaying its journal (`lcb.optimize.evaluator`), unless `restart_optimization`.
- Splits: `config.splits`, else the job's own `splits.json` (a rerun), else the standard file
  (`benchmarks/lcb/lcb_splits.json`) for the default hub source, else the documented rule
  (`lcb.optimize.splits`) applied to `config.data`. The job keeps a copy in `DIR/splits.json`
  and refuses a later run with other splits.
- optimize: the method runs on `OptimizerData` (train + validation rows only; test rows are not
  loaded) within the budget; the history starts with the seed bundle and ends with a "final"
  entry holding the incumbent; `DIR/ledger.json` keeps the ledger's final state.
- validate (uncharged, greedy): seed bundle and incumbent on the whole validation split with
  paired seeds; the incumbent is deployed only if strictly better; the decision is sealed in
  `selection.json` before any test row is loaded. An incumbent equal to the seed is run once.
- test (uncharged, greedy): the seed and deployed bundles on the test split (once when the seed
  is deployed); `test.json` and `result.json` (Δ in points).
- Recorded in `job.json` (`job_spec`): the settings, including the method's full settings
  (defaults and `method_settings` overrides), `opt_tests`, grader and sandbox; the
  conformance list (`lcb.optimize.conformance`) and this session's provenance
  (`lcb.optimize.provenance`). The first run pins the seed bundle in `DIR/seed_bundle.json`
  (hashes in `seed_prompts`); every later run uses that copy and refuses if a role's file in
  `configs/prompts/` no longer holds the pinned text.
- `opt_tests` k: optimize rollouts are graded on the first k private tests (None: all);
  validation and test always use all tests.
- `cache` / `replay`: every model call of the job (team runs with purpose optimize / validate /
  test, reflect / judge / probe calls) goes through the response cache in that directory
  (`lcb.agents.cache`); `replay` sends nothing to an endpoint and checks none.
- `phase="all"` runs whatever is missing, in order; a named phase needs the earlier ones done.
  Returns the one-line JSON summary of the job (`summary`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from lcb.agents.cache import check_cache, open_cache
from lcb.agents.check import check_endpoint
from lcb.agents.models import ModelConfig
from lcb.agents.prompts import bundle_hashes, role_path, seed_bundle
from lcb.grading import GradingPool
from lcb.grading.preflight import preflight
from lcb.optimize import conformance, phases, provenance
from lcb.optimize.artifacts import Artifact, ArtifactError, JobSpec, read_history
from lcb.optimize.calls import reflection_config
from lcb.optimize.jobdir import open_job_dir, pin_seed_bundle, read_pinned_seed
from lcb.optimize.method import Optimizer
from lcb.optimize.methods import check_topology, get_optimizer, resolve_settings
from lcb.optimize.splits import (
    DEFAULT_SPLITS_PATH,
    SplitError,
    Splits,
    check_hub_revision,
    load_split_source,
    splits_from_loaded,
)
from lcb.optimize.teamrun import DEFAULT_RUN_TIMEOUT_S, TeamCell
from lcb.teams.common import TeamRuntime

log = logging.getLogger("lcb.optimize")
SPLITS_FILE = "splits.json"
GRADER = "default"  # the grader every phase uses (`lcb.grading`)


class JobPhase(StrEnum):
    OPTIMIZE = "optimize"
    VALIDATE = "validate"
    TEST = "test"
    ALL = "all"


@dataclass(frozen=True)
class JobConfig:
    """Everything one job needs. `model` samples the optimize phase; evaluations use it greedy."""

    method: str
    topology: str
    model: ModelConfig
    out: Path
    seed: int = 0
    dataset: str = "lcb"
    team_size: int | None = None
    communication: str = "freeform"
    budget: int = 600
    phase: JobPhase = JobPhase.ALL
    data: str | None = None
    release: str = "release_v1"
    splits: Path | None = None
    concurrency: int = 4
    restart_optimization: bool = False
    reflection: ModelConfig | None = None  # None: from the environment over the task model
    method_settings: dict[str, Any] = field(default_factory=dict)  # overrides (`--set`)
    opt_tests: int | None = None  # grade optimize rollouts on the first k private tests
    sandbox: str = "process"
    grade_workers: int | None = None
    run_timeout_s: float = DEFAULT_RUN_TIMEOUT_S
    check_endpoints: bool = True
    cache: Path | None = None  # the response cache's directory (`lcb.agents.cache`)
    replay: bool = False  # every model call from the cache alone: no endpoint at all

    def __post_init__(self) -> None:
        if self.phase not in tuple(JobPhase):
            choices = ", ".join(JobPhase)
            raise ValueError(f"unknown phase {self.phase!r}: choose one of {choices}")
        object.__setattr__(self, "phase", JobPhase(self.phase))
        object.__setattr__(self, "out", Path(self.out))
        if self.dataset != "lcb":
            raise ValueError(f"unknown dataset {self.dataset!r}: only 'lcb' is supported")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.opt_tests is not None and self.opt_tests < 1:
            raise ValueError(f"opt_tests must be >= 1 (or unset: all tests), got {self.opt_tests}")


def resolve_splits(config: JobConfig) -> Splits:
    """The job's splits (see the module docstring for the order of sources).

    A new hub job refuses a split file computed from another hub revision (`SourceMismatch`)
    before any work; the phases' loads check the revision they get again (resumes).
    """
    saved = config.out / SPLITS_FILE
    if config.splits is not None:
        splits = Splits.load(config.splits)
    elif saved.exists():
        return Splits.load(saved)
    elif config.data is None and DEFAULT_SPLITS_PATH.exists():
        splits = Splits.load(DEFAULT_SPLITS_PATH)
    else:
        log.info("computing the splits of %s by the documented rule", config.data or "the hub")
        return splits_from_loaded(load_split_source(config.data, release=config.release))
    if saved.exists() and Splits.load(saved) != splits:
        raise SplitError(f"{saved} holds other splits than {config.splits}: this job was made "
                         "with them; choose a fresh --out to use new splits")
    if config.data is None and not saved.exists():
        check_hub_revision(splits, release=config.release)
    return splits


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
                   seed_prompts=bundle_hashes(seed),
                   provenance=provenance.collect(task=config.model, reflection=reflection,
                                                 grader=GRADER, sandbox=config.sandbox,
                                                 judge_sampling=judge))
    return spec.model_copy(update={"conformance": conformance.check(
        spec, splits=splits, reference=_reference(config.method, cell))})


def _reference(method: str, cell: TeamCell) -> conformance.Reference:
    standard = Splits.load(DEFAULT_SPLITS_PATH) if DEFAULT_SPLITS_PATH.exists() else None
    default_size = None if cell.is_single else TeamCell(cell.topology).size
    return conformance.Reference(
        team_size=default_size, method_settings=resolve_settings(method), splits=standard,
        prompt_hashes=conformance.load_prompt_manifest().get(cell.topology, {}))


def job_seed_bundle(out: Path, cell: TeamCell) -> dict[str, str]:
    """The job's pinned seed bundle (the role files' texts for a new job); a role file that no
    longer holds the pinned text raises `ArtifactError` naming the role and the file."""
    current = seed_bundle(cell.topology, cell.roles)
    pinned = read_pinned_seed(out)
    if pinned is None:
        return current
    if list(pinned) != list(current):
        raise ArtifactError(f"{out / Artifact.SEED} pins the roles {sorted(pinned)}, the team "
                            f"has {sorted(current)}: choose a fresh --out")
    for role, text in pinned.items():
        if current[role] != text:
            raise ArtifactError(
                f"the seed prompt of role {role!r} changed since this job pinned it: "
                f"{role_path(cell.topology, role)} differs from {out / Artifact.SEED}; restore "
                "the file, or choose a fresh --out to start a job with the new prompt")
    return pinned


def pending_phases(config: JobConfig, out: Path) -> list[JobPhase]:
    """The phases this run executes; a named phase whose prerequisite is missing raises."""
    history = read_history(out)
    state = {JobPhase.OPTIMIZE: bool(history) and history[-1].kind == "final",
             JobPhase.VALIDATE: (out / Artifact.SELECTION).exists(),
             JobPhase.TEST: (out / Artifact.RESULT).exists()}
    order = [JobPhase.OPTIMIZE, JobPhase.VALIDATE, JobPhase.TEST]
    if config.phase is JobPhase.ALL:
        return [phase for phase in order if not state[phase]]
    before = order[:order.index(config.phase)]
    missing = [phase.value for phase in before if not state[phase]]
    if missing:
        raise phases.JobError(f"--phase {config.phase} needs the {' and '.join(missing)} "
                              f"phase(s) of {out} first (or --phase all)")
    return [config.phase]


async def run_job(config: JobConfig) -> dict[str, Any]:
    """Run the phases `config.phase` asks for; return the job summary (module docstring)."""
    check_cache(config.cache, replay=config.replay)
    settings = resolve_settings(config.method, config.method_settings)
    check_topology(config.method, config.topology)
    optimizer = get_optimizer(config.method, **settings)
    cell = TeamCell(config.topology, config.team_size, config.communication)
    seed = job_seed_bundle(config.out, cell)
    reflection = config.reflection or reflection_config(config.model)
    splits = resolve_splits(config)
    spec = job_spec(config, cell, splits, reflection, seed=seed, method_settings=settings)
    finished = (config.out / Artifact.RESULT).exists()
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
                     optimizer_seed=config.seed, data=config.data, release=config.release)
    with GradingPool(config.grade_workers, sandbox=config.sandbox) as pool:
        if todo:  # prove the grader works here before the first rollout
            await asyncio.get_running_loop().run_in_executor(None, preflight, pool)
        for phase in todo:
            await _run_phase(phase, job, config, pool, optimizer=optimizer,
                             reflection=reflection)
    return phases.summary(out, spec, ran=[phase.value for phase in todo])


async def _run_phase(phase: JobPhase, job: phases.PhaseJob, config: JobConfig,
                     pool: GradingPool, *, optimizer: Optimizer,
                     reflection: ModelConfig) -> None:
    """One phase on its own runtime: sampled for optimize, greedy (temperature 0) otherwise."""
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
