"""One optimizer job: optimize → validate → test, each phase resumable, artifacts under `--out`.

Contract of `run_job(config)` (artifact files: `lcb.optimize.artifacts`; the phases run in
`lcb.optimize.jobrun`, loaded only once the job's own input passed its checks here):
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

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from lcb.agents.cachedir import check_cache
from lcb.agents.models import ModelConfig
from lcb.agents.prompts import role_path, seed_bundle
from lcb.optimize.artifacts import Artifact, ArtifactError, read_history
from lcb.optimize.cell import DEFAULT_RUN_TIMEOUT_S, TeamCell
from lcb.optimize.errors import JobError
from lcb.optimize.jobdir import read_pinned_seed
from lcb.optimize.methods import check_topology, get_optimizer, resolve_settings
from lcb.optimize.splits import (
    DEFAULT_SPLITS_PATH,
    SplitError,
    Splits,
    check_hub_revision,
    load_split_source,
    splits_from_loaded,
)
from lcb.registry import FEEDBACK_MODES, SELECTIONS

log = logging.getLogger("lcb.optimize")
SPLITS_FILE = "splits.json"


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
    selection: str = "validation"  # the method's selection set: validation, or carved from train
    feedback: str = "full"  # what a method learns of a failed train rollout (FEEDBACK_MODES)
    uncharged_cost: float = 0.0  # budget units per uncharged call (0: the standard protocol)
    curve: bool = False  # once the gate is sealed, score the learning curve (lcb.optimize.curves)
    allow_small_budget: bool = False  # run a method its budget buys nothing (lcb.optimize.sizing)

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
        if not 0 <= self.uncharged_cost < float("inf"):
            raise ValueError(f"uncharged_cost must be a number >= 0, got {self.uncharged_cost}")
        for name, known in (("selection", SELECTIONS), ("feedback", FEEDBACK_MODES)):
            if getattr(self, name) not in known:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; known: "
                                 f"{', '.join(known)}")


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
        raise JobError(f"--phase {config.phase} needs the {' and '.join(missing)} "
                              f"phase(s) of {out} first (or --phase all)")
    return [config.phase]


async def run_job(config: JobConfig) -> dict[str, Any]:
    """Run the phases `config.phase` asks for; return the job summary (module docstring).

    The job's own input (cache, method and its settings, team, seed prompts, data and splits)
    is checked here, with nothing of the model stack loaded, so such an error comes back at once;
    `lcb.optimize.jobrun` (methods, teams, model clients) loads only after that."""
    check_cache(config.cache, replay=config.replay)
    settings = resolve_settings(config.method, config.method_settings)
    check_topology(config.method, config.topology)
    optimizer = get_optimizer(config.method, **settings)
    cell = TeamCell(config.topology, config.team_size, config.communication)
    seed = job_seed_bundle(config.out, cell)
    splits = resolve_splits(config)
    from lcb.optimize.jobrun import run_checked  # the heavy part, once the input is sound

    return await run_checked(config, optimizer, cell=cell, seed=seed, splits=splits,
                             settings=settings)
