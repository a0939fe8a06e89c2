"""`gepa`: reflective prompt evolution (Agrawal et al., arXiv 2507.19457) on the `gepa` library.

Contract:
- A candidate is the prompt bundle; each role prompt is one component (`gepa_adapter`).
  Settings map onto `gepa.optimize`: Pareto candidate selection over validation items,
  round-robin over roles, merge (at most `max_merge_invocations`), reflection minibatches of
  `minibatch` training problems, strict-improvement acceptance, and a metric-call cap of
  `max_full_evals` × (train + validation) problems.
- The budget ledger is the real limit: gepa stops before an iteration the ledger can no
  longer pay for (two minibatches), and an evaluation that does not fit is never started
  (`BudgetSpent` ends the run). So the ledger is never overdrawn by this method.
- gepa runs in a worker thread (`asyncio.to_thread`); rollouts, reflection calls and history
  records go back to the job's event loop through a `LoopBridge`.
- The result is a NEW dict: the fully evaluated candidate with the best mean validation score
  (earliest on ties, so the seed wins a tie), else a copy of the seed bundle. Nothing gepa
  prints reaches stdout: its log goes to the `logging` module.
- The `gepa` library (extra `optimize`) is imported only when the method runs, so the
  registry imports without it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lcb.optimize.bundle import thaw
from lcb.optimize.method import Bundle, OptimizeContext
from lcb.optimize.methods.reflection import LoopBridge, ReflectionSettings, run_in_thread

if TYPE_CHECKING:  # the `gepa` library is imported when the method runs (optional extra)
    from lcb.optimize.methods.gepa_adapter import LcbAdapter, Recorder

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


class _LogToLogging:
    """gepa's `LoggerProtocol`, sent to `logging` instead of stdout."""

    def log(self, message: str) -> None:
        log.info("%s", message)


class _LedgerStopper:
    """gepa's stop condition: the ledger cannot pay for an iteration, or reflection failed."""

    def __init__(self, ctx: OptimizeContext, adapter: LcbAdapter, *, needed: int) -> None:
        self.ctx, self.adapter, self.needed = ctx, adapter, needed

    def __call__(self, _state: object) -> bool:
        return self.adapter.fatal is not None or self.ctx.ledger.available < self.needed


@dataclass(frozen=True)
class Gepa:
    """See the module docstring."""

    settings: GepaSettings = field(default_factory=GepaSettings)
    key: str = KEY

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after a gepa run within `ctx`'s budget (a new dict)."""
        from lcb.optimize.methods.gepa_adapter import BudgetSpent, LcbAdapter, Recorder

        train, val = list(ctx.data.train), list(ctx.data.validation)
        if not train:
            raise ValueError("gepa needs at least one training problem (the train split is empty)")
        bridge = LoopBridge.current()
        adapter = LcbAdapter(ctx, bridge, settings=self.settings.reflection)
        recorder = Recorder(adapter)
        try:
            await run_in_thread(bridge, self._run, ctx, adapter, recorder, train, val)
        except BudgetSpent as stop:
            log.info("gepa: stopping at the budget: %s", stop)
        if adapter.fatal is not None:
            raise adapter.fatal
        log.info("gepa: %d proposal(s), %d rejected by validation", adapter.proposed,
                 len(adapter.rejected))
        return dict(recorder.best.bundle) if recorder.best else thaw(ctx.seed_bundle)

    def _run(self, ctx: OptimizeContext, adapter: LcbAdapter, recorder: Recorder,
             train: list, val: list) -> None:
        import gepa

        s = self.settings
        gepa.optimize(
            seed_candidate=thaw(ctx.seed_bundle),
            trainset=train,
            valset=val or None,
            adapter=adapter,
            candidate_selection_strategy="pareto",
            frontier_type="instance",
            module_selector="round_robin",
            reflection_minibatch_size=s.minibatch,
            skip_perfect_score=True,
            perfect_score=1.0,
            acceptance_criterion="strict_improvement",
            use_merge=s.use_merge,
            max_merge_invocations=s.max_merge_invocations,
            max_metric_calls=s.max_full_evals * (len(train) + len(val)),
            stop_callbacks=[_LedgerStopper(ctx, adapter,
                                           needed=2 * min(s.minibatch, len(train)))],
            logger=_LogToLogging(),
            callbacks=[recorder],
            track_best_outputs=False,
            display_progress_bar=False,
            raise_on_exception=True,
            seed=ctx.optimizer_seed,
        )


def make(**settings: object) -> Gepa:
    """The factory of `OPTIMIZERS["gepa"]`: keyword settings of `GepaSettings`."""
    return Gepa(settings=GepaSettings(**settings))  # type: ignore[arg-type]
