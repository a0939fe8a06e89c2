"""`mipro`: MIPROv2 (Opsahl-Ong et al., arXiv 2406.11695) on DSPy, with our team behind it.

Contract:
- Search space: per role, `num_candidates` instructions (the current text plus proposals of
  the reflection model, each validated) × `num_candidates` demo sets (zero-shot, and sets of
  up to `max_bootstrapped_demos` (input, output) pairs bootstrapped from train rollouts that
  passed; `max_labeled_demos` = 0: LCB rows hold no per-role labels). Optuna's TPE picks
  `num_trials` combinations, scored on validation minibatches (when the split is larger than
  `minibatch_size`) with a full-validation evaluation at the end, as MIPROv2 does.
- Every evaluated program is a bundle built from its predictors' instructions and demos
  (`mipro_program.render_role`), validated, and run through `ctx.rollout`: the incumbent is
  exactly what ran. Rollouts of a trial carry its trial number as their iteration
  (bootstrapping and the baseline evaluation: 0).
- The budget: once the ledger is spent, every evaluation still running fails and MIPRO scores
  it 0, so a cut evaluation never wins; a budget spent while bootstrapping ends the run with
  the seed bundle. Reflection failures (`ReflectionError`) and invalid bundles re-raise.
- The result is a NEW dict. DSPy and MIPRO print progress: stdout is sent to stderr while
  MIPRO runs (the job's stdout carries only its JSON line). DSPy (extra `optimize`) is
  imported only when the method runs.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from lcb.data.problems import Problem
from lcb.optimize.bundle import thaw
from lcb.optimize.method import Bundle, OptimizeContext
from lcb.optimize.methods.reflection import LoopBridge, clip, run_in_thread

if TYPE_CHECKING:  # DSPy (extra `optimize`) is imported when the method runs
    from lcb.optimize.methods.mipro_program import TeamRunner

KEY = "mipro"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MiproSettings:
    """The method's knobs (the standard protocol's values are the defaults)."""

    max_bootstrapped_demos: int = 4
    max_labeled_demos: int = 0
    num_candidates: int = 3
    num_trials: int = 3
    minibatch_size: int = 35
    minibatch_full_eval_steps: int = 5
    num_threads: int = 4
    demo_chars: int = 1500
    question_chars: int = 1200
    data_aware: bool = True
    tip_aware: bool = True
    fewshot_aware: bool = True

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.type == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                       or value < 0):
                raise ValueError(f"mipro setting {item.name} must be an integer >= 0, "
                                 f"got {value!r}")
        if self.num_candidates < 3:
            raise ValueError("mipro setting num_candidates must be >= 3 (MIPROv2 counts the "
                             "zero-shot and the unshuffled demo sets among them)")
        if self.num_trials < 1 or self.num_threads < 1 or self.minibatch_size < 1:
            raise ValueError("mipro settings num_trials, num_threads, minibatch_size must be >= 1")


@dataclass(frozen=True)
class Mipro:
    """See the module docstring."""

    settings: MiproSettings = MiproSettings()
    key: str = KEY

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after a MIPROv2 run within `ctx`'s budget (a new dict)."""
        from lcb.optimize.methods.mipro_program import TeamRunner

        train, val = list(ctx.data.train), list(ctx.data.validation)
        if not train or not val:
            raise ValueError(f"mipro needs train and validation problems; got {len(train)} "
                             f"train and {len(val)} validation")
        bridge = LoopBridge.current()
        runner = TeamRunner(ctx, bridge, [*train, *val], demo_chars=self.settings.demo_chars)
        best = await run_in_thread(bridge, self._compile, ctx, runner, train, val)
        if runner.fatal is not None:
            raise runner.fatal
        log.info("mipro: %d instruction proposal(s) rejected by validation", len(runner.rejected))
        return dict(best) if best is not None else thaw(ctx.seed_bundle)

    def _compile(self, ctx: OptimizeContext, runner: TeamRunner, train: list[Problem],
                 val: list[Problem]) -> dict[str, str] | None:
        import dspy

        from lcb.optimize.methods.mipro_program import (
            BudgetSpent,
            LcbMipro,
            ReflectionEngine,
            TeamProgram,
            rollout_metric,
        )

        s = self.settings
        lm = dspy.LM("lcb/reflection", engine=ReflectionEngine(ctx, runner.bridge, runner),
                     cache=False, num_retries=0)
        student = TeamProgram(thaw(ctx.seed_bundle), runner)
        mipro = LcbMipro(
            runner=runner, metric=rollout_metric, prompt_model=lm, task_model=lm, auto=None,
            max_bootstrapped_demos=s.max_bootstrapped_demos,
            max_labeled_demos=s.max_labeled_demos, num_candidates=s.num_candidates,
            num_threads=s.num_threads, max_errors=1, seed=ctx.optimizer_seed,
            track_stats=False)
        minibatch = len(val) > s.minibatch_size
        with contextlib.redirect_stdout(sys.stderr), dspy.context(lm=lm):
            try:
                best = mipro.compile(
                    student, trainset=self._examples(train), valset=self._examples(val),
                    num_trials=s.num_trials, seed=ctx.optimizer_seed, minibatch=minibatch,
                    minibatch_size=min(s.minibatch_size, len(val)),
                    minibatch_full_eval_steps=s.minibatch_full_eval_steps,
                    program_aware_proposer=False, data_aware_proposer=s.data_aware,
                    tip_aware_proposer=s.tip_aware, fewshot_aware_proposer=s.fewshot_aware)
            except BudgetSpent:
                log.info("mipro: the budget ran out while bootstrapping demos; keeping the seed")
                return None
            except Exception:
                if runner.fatal is None:  # DSPy wraps errors: `optimize` raises the original
                    raise
                return None
        return best.bundle()

    def _examples(self, problems: list[Problem]) -> list:
        import dspy

        return [dspy.Example(problem_id=p.id,
                             question=clip(p.statement, self.settings.question_chars))
                .with_inputs("problem_id", "question") for p in problems]


def make(**settings: object) -> Mipro:
    """The factory of `OPTIMIZERS["mipro"]`: keyword settings of `MiproSettings`."""
    return Mipro(settings=MiproSettings(**settings))  # type: ignore[arg-type]
