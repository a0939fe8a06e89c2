"""`gepa`: reflective prompt evolution (Agrawal et al., arXiv 2507.19457) on the `gepa` library.

Contract:
- A candidate is the prompt bundle; each role prompt is one component (`gepa_adapter`).
  Settings map onto `gepa.optimize`: Pareto candidate selection over validation items,
  round-robin over roles, merge (at most `max_merge_invocations`), reflection minibatches of
  `minibatch` training problems, strict-improvement acceptance, and a metric-call cap of
  `max_full_evals` × (train + validation) problems.
- The budget is the real limit. An iteration starts only when what is left along the path
  (`LcbAdapter.remaining`: rollouts already given to this run are free) pays for its worst
  case: the parent's minibatch, the child's minibatch and, should the child be accepted, its
  full validation evaluation (`2 × minibatch + |validation|`; a merge iteration costs at most
  the validation set, its subsample rows being replays then). So a child gepa accepts is
  always validated, never dropped for want of budget. An evaluation that does not fit is
  never started (`BudgetSpent` ends the run): the ledger is never overdrawn.
- `GepaRun` is the run itself, shared with `mamut_gepa` (which sets its own key, metric-call
  cap and reflector: what the reflection model is shown).
- gepa runs in a worker thread (`asyncio.to_thread`); rollouts, reflection calls and records
  go back to the job's event loop through a `LoopBridge`.
- History (`gepa_records.GepaRecorder`): every candidate with a full validation score, and every
  proposal (validator, minibatch and budget-gate rejections included) with its parent, roles,
  scores and verdict; `ctx.checkpoint` after every iteration.
- Resume: gepa is deterministic given the same rollout results and reflection answers (its
  RNG is seeded from the job's optimizer seed; every request seed comes from the iteration
  and the row). A resumed job re-runs gepa from the start; the context serves the journaled
  rollouts and answers without a model call or a second charge, so the run retraces its path
  and is checked against `ctx.restore()` when it reaches the checkpointed iteration
  (`ResumeDivergence` otherwise). gepa's own state saving (`run_dir`) is not used: it pickles
  `GEPAState` but not the RNG shared by its candidate selector, minibatch sampler and merge
  proposer, nor the sampler's epoch order or the merge schedule, so a run resumed from it
  draws different minibatches than the uninterrupted run would (checked on gepa 0.1.4); it
  also re-evaluates the seed on resume.
- The result is a NEW dict: the fully evaluated candidate with the best mean validation score
  (earliest on ties, so the seed wins a tie), else a copy of the seed bundle. Nothing gepa
  prints reaches stdout: its log goes to the `logging` module.
- The `gepa` library (extra `optimize`) is imported only when the method runs, so the
  registry imports without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lcb.optimize.bundle import thaw
from lcb.optimize.method import Bundle, OptimizeContext
from lcb.optimize.methods.reflection import LoopBridge, ReflectionSettings, run_in_thread

if TYPE_CHECKING:  # the `gepa` library is imported when the method runs (optional extra)
    from lcb.optimize.methods.gepa_adapter import LcbAdapter, Reflector
    from lcb.optimize.methods.gepa_records import GepaRecorder

KEY = "gepa"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GepaSettings:
    """The method's knobs (the standard protocol's values are the defaults)."""

    minibatch: int = 3
    max_full_evals: int = 5
    use_merge: bool = True
    max_merge_invocations: int = 5
    reflection: ReflectionSettings = field(default_factory=ReflectionSettings)

    def __post_init__(self) -> None:
        for name in ("minibatch", "max_full_evals"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"gepa setting {name} must be an integer >= 1, got {value!r}")
        merges = self.max_merge_invocations
        if isinstance(merges, bool) or not isinstance(merges, int) or merges < 0:
            raise ValueError(f"gepa setting max_merge_invocations must be an integer >= 0, "
                             f"got {merges!r}")


SETTINGS = GepaSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


class _LogToLogging:
    """gepa's `LoggerProtocol`, sent to `logging` instead of stdout."""

    def log(self, message: str) -> None:
        log.info("%s", message)


class _BudgetStopper:
    """gepa's stop condition: a fatal error, or the budget left along the path cannot pay for
    the next iteration's worst case (`needed`)."""

    def __init__(self, adapter: LcbAdapter, *, needed: int) -> None:
        self.adapter, self.needed = adapter, needed

    def __call__(self, _state: object) -> bool:
        return self.adapter.fatal is not None or self.adapter.remaining < self.needed


@dataclass(frozen=True)
class GepaRun:
    """One `gepa.optimize` run over the whole bundle as a method sets it up: its key (history,
    checkpoints, purposes), its search knobs, its metric-call cap (`max_metric_calls`, given
    the train size, the validation size and the budget) and what reflection sees (`reflector`;
    None: `SliceReflector`). `gepa` and `mamut_gepa` differ only in these."""

    key: str
    minibatch: int
    use_merge: bool
    max_merge_invocations: int
    max_metric_calls: Callable[[int, int, int], int]
    reflector: Reflector | None = None

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after a gepa run within `ctx`'s budget (a new dict)."""
        from lcb.optimize.methods.gepa_adapter import BudgetSpent, LcbAdapter
        from lcb.optimize.methods.gepa_records import GepaRecorder

        train, val = list(ctx.data.train), list(ctx.data.validation)
        if not train:
            raise ValueError(f"{self.key} needs at least one training problem (the train "
                             f"split is empty)")
        bridge = LoopBridge.current()
        adapter = LcbAdapter(ctx, bridge, reflector=self.reflector)
        recorder = GepaRecorder(adapter, expected=ctx.restore(), method=self.key)
        try:
            await run_in_thread(bridge, self._run, ctx, adapter, recorder, train, val)
        except BudgetSpent as stop:
            log.info("%s: stopping at the budget: %s", self.key, stop)
        if adapter.fatal is not None:
            raise adapter.fatal
        diverged = recorder.unfinished_retrace()
        if diverged is not None:
            raise diverged
        log.info("%s: %d proposal(s), %d rejected by validation", self.key, adapter.proposed,
                 len(adapter.rejected))
        return dict(recorder.best.bundle) if recorder.best else thaw(ctx.seed_bundle)

    def _run(self, ctx: OptimizeContext, adapter: LcbAdapter, recorder: GepaRecorder,
             train: list, val: list) -> None:
        import gepa

        gepa.optimize(
            seed_candidate=thaw(ctx.seed_bundle),
            trainset=train,
            valset=val or None,
            adapter=adapter,
            candidate_selection_strategy="pareto",
            frontier_type="instance",
            module_selector="round_robin",
            reflection_minibatch_size=self.minibatch,
            skip_perfect_score=True,
            perfect_score=1.0,
            acceptance_criterion="strict_improvement",
            use_merge=self.use_merge,
            max_merge_invocations=self.max_merge_invocations,
            max_metric_calls=self.max_metric_calls(len(train), len(val), ctx.ledger.total),
            stop_callbacks=[_BudgetStopper(adapter, needed=iteration_cost(
                self.minibatch, n_train=len(train), n_val=len(val)))],
            logger=_LogToLogging(),
            callbacks=[recorder],
            track_best_outputs=False,
            display_progress_bar=False,
            raise_on_exception=True,
            seed=ctx.optimizer_seed,
        )


@dataclass(frozen=True)
class Gepa:
    """See the module docstring."""

    settings: GepaSettings = field(default_factory=GepaSettings)
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """The seed's validation, then one iteration's worst case (`iteration_cost`)."""
        return first_proposal_cost(self.settings.minibatch, ctx)

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after a gepa run within `ctx`'s budget (a new dict)."""
        from lcb.optimize.methods.gepa_adapter import SliceReflector

        s = self.settings
        run = GepaRun(key=KEY, minibatch=s.minibatch, use_merge=s.use_merge,
                      max_merge_invocations=s.max_merge_invocations,
                      max_metric_calls=lambda n_train, n_val, _budget:
                      s.max_full_evals * (n_train + n_val),
                      reflector=SliceReflector(s.reflection))
        return await run.optimize(ctx)


def first_proposal_cost(minibatch: int, ctx: OptimizeContext) -> tuple[int, str]:
    """(rollouts, what they buy): the seed scored on validation, then one iteration whose
    child is validated: the least that scores one proposal."""
    n_train, n_val = len(ctx.data.train), len(ctx.data.validation)
    return ((n_val or n_train) + iteration_cost(minibatch, n_train=n_train, n_val=n_val),
            "the seed's validation and one scored proposal")


def iteration_cost(minibatch: int, *, n_train: int, n_val: int) -> int:
    """The most rollouts one gepa iteration can charge: the parent's and the child's minibatch,
    then the child's full validation evaluation (gepa validates on the train set when there
    is no validation set)."""
    return 2 * min(minibatch, n_train) + (n_val or n_train)


def make(**settings: object) -> Gepa:
    """The factory of `OPTIMIZERS["gepa"]`: keyword settings of `GepaSettings`."""
    return Gepa(settings=GepaSettings(**settings))  # type: ignore[arg-type]
