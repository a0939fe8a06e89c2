"""`mipro`: MIPROv2 (Opsahl-Ong et al., arXiv 2406.11695) on DSPy, with our team behind it.

Contract:
- Search space: per role, `num_candidates` instructions (the current text plus proposals of
  the reflection model, each validated) × `num_candidates` demo sets (zero-shot, and sets of
  up to `max_bootstrapped_demos` (input, output) pairs bootstrapped from train rollouts that
  passed; `max_labeled_demos` = 0: LCB rows hold no per-role labels). Optuna's TPE picks the
  trials' combinations, scored on validation minibatches (when the split is larger than
  `minibatch_size`) with a full-validation evaluation of the best-averaging new combination
  every `minibatch_full_eval_steps` trials and after the last, as MIPROv2 does.
- Every evaluated program is a bundle built from its predictors' instructions and demos
  (`mipro_program.render_role`), validated, and run through `ctx.rollout`: the incumbent is
  exactly what ran. Rollouts of a trial carry its trial number as their iteration, and so does
  the later full evaluation of that trial's program, so its minibatch rows are replays
  (uncharged); bootstrapping and the baseline evaluation run at iteration 0, so the second
  bootstrap pass replays the rows the first one ran.
- The budget (`SearchPlan`), with V = |validation|, m = the minibatch size (V when not
  minibatching) and k = `minibatch_full_eval_steps`:
  * a budget below 2V (the baseline plus one trial and its full evaluation) buys nothing:
    the run keeps the seed, spends nothing, and logs why;
  * bootstrapping charges at most `max_bootstrap_rollouts` (None: a quarter of the budget),
    and never so much that the baseline plus one trial no longer fit; at the cap it stops
    with the demos it has (rows already run are replays and still served);
  * then the baseline costs V, a trial m, and a full evaluation V − m (its m minibatch rows
    replay; without minibatching a trial is its own full evaluation), so T trials cost
    T·m + ⌈T/k⌉·(V − m). `num_trials` (None: derived) is the largest T that what is left
    after bootstrapping and the baseline pays for; what is still left when the last trial
    ends pays for more full evaluations (V − m each) of the next best-averaging minibatch
    combinations. Fewer than V − m units stay unspent when enough combinations were tried
    (fewer than V without minibatching; 600/50/35/5: at least 586 charged); never more.
  Spend is counted as rollouts requested for the first time in this run (what an
  uninterrupted run is charged), so a resumed job plans exactly as the interrupted one did.
  The ledger stays the hard limit: an evaluation it cuts scores 0, so it never wins.
- History: every instruction candidate is a proposal (parent: the seed; kept when it passed
  validation, else rejected by the validator with the reason); every trial's program is one,
  recorded when its fate is known: at its full evaluation (scored on `val`, accepted when it
  beat the best full score so far, else rejected by the gate), or when the search ends
  (rejected by the minibatch ranking, or by the budget when its evaluation was cut). Every
  evaluation is also a candidate entry. The incumbent is MIPRO's best full evaluation.
- Resume: after the baseline and after each trial, `ctx.checkpoint` gets {trial, iteration,
  best_hash, best_score, charged, trials}. A rerun retraces the path from the journal; when it
  reaches the trial of `ctx.restore()`'s state, it must match it, else `MiproDiverged`.
- Reflection failures (`ReflectionError`) and invalid bundles re-raise. The result is a NEW
  dict. DSPy and MIPRO print progress: stdout is sent to stderr while MIPRO runs (the job's
  stdout carries only its JSON line). DSPy (extra `optimize`) is imported only when it runs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from lcb.data.problems import Problem
from lcb.optimize.bundle import thaw
from lcb.optimize.method import Bundle, OptimizeContext
from lcb.optimize.methods.reflection import LoopBridge, run_in_thread
from lcb.text import clip

if TYPE_CHECKING:  # DSPy (extra `optimize`) is imported when the method runs
    from lcb.optimize.methods.mipro_program import TeamRunner

KEY = "mipro"
BOOTSTRAP_SHARE = 0.25  # of the budget: the default cap on bootstrapping's charged rollouts
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MiproSettings:
    """The method's knobs (the standard protocol's values are the defaults)."""

    max_bootstrapped_demos: int = 4
    max_labeled_demos: int = 0
    num_candidates: int = 3
    num_trials: int | None = None  # None: what the budget pays for (SearchPlan)
    max_bootstrap_rollouts: int | None = None  # None: BOOTSTRAP_SHARE of the budget
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
            if item.type not in ("int", "int | None") or (value is None and item.type != "int"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"mipro setting {item.name} must be an integer >= 0"
                                 f"{' or null' if item.type != 'int' else ''}, got {value!r}")
        if self.max_labeled_demos != 0:
            raise ValueError("mipro setting max_labeled_demos must be 0: LiveCodeBench rows "
                             "hold no per-role (task, response) labels to show")
        if self.num_candidates < 3:
            raise ValueError("mipro setting num_candidates must be >= 3 (MIPROv2 counts the "
                             "zero-shot and the unshuffled demo sets among them)")
        if (self.num_trials == 0 or self.num_threads < 1 or self.minibatch_size < 1
                or self.minibatch_full_eval_steps < 1):
            raise ValueError("mipro settings num_trials, num_threads, minibatch_size, "
                             "minibatch_full_eval_steps must be >= 1")


SETTINGS = MiproSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


@dataclass(frozen=True)
class SearchPlan:
    """What the budget buys (the rule is in the module docstring).

    >>> plan = SearchPlan(budget=600, n_val=50, minibatch=35, full_eval_steps=5)
    >>> plan.bootstrap_cap(None), plan.trials(spent=30), plan.cost(13)
    (150, 13, 500)
    """

    budget: int
    n_val: int
    minibatch: int  # rows per trial: min(minibatch_size, n_val)
    full_eval_steps: int

    @property
    def minibatching(self) -> bool:
        return self.minibatch < self.n_val

    @property
    def full_eval_cost(self) -> int:
        """A full evaluation of a trial's program: its minibatch rows are replays."""
        return self.n_val - self.minibatch

    def cost(self, trials: int) -> int:
        """Charged rollouts of `trials` trials with their full evaluations."""
        if not self.minibatching:
            return trials * self.n_val
        return trials * self.minibatch + math.ceil(trials / self.full_eval_steps) * \
            self.full_eval_cost

    @property
    def least(self) -> int:
        """The baseline evaluation plus one trial (and its full evaluation)."""
        return self.n_val + self.cost(1)

    def bootstrap_cap(self, setting: int | None) -> int:
        cap = int(self.budget * BOOTSTRAP_SHARE) if setting is None else setting
        return max(0, min(cap, self.budget - self.least))

    def trials(self, *, spent: int) -> int:
        """The most trials that the budget left after `spent` and the baseline pays for."""
        left = self.budget - spent - self.n_val
        count = 0
        while self.cost(count + 1) <= left:
            count += 1
        return count


@dataclass(frozen=True)
class Mipro:
    """See the module docstring."""

    settings: MiproSettings = MiproSettings()
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """The baseline evaluation and one trial (`SearchPlan.least`)."""
        return (self.plan(ctx.ledger.total, len(ctx.data.validation)).least,
                "the baseline evaluation and one trial")

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after a MIPROv2 run within `ctx`'s budget (a new dict)."""
        from lcb.optimize.methods.mipro_program import TeamRunner

        train, val = list(ctx.data.train), list(ctx.data.validation)
        if not train or not val:
            raise ValueError(f"mipro needs train and validation problems; got {len(train)} "
                             f"train and {len(val)} validation")
        plan = self.plan(ctx.ledger.total, len(val))
        if ctx.ledger.total < plan.least:
            log.warning("mipro: a budget of %d rollouts cannot pay for the baseline evaluation "
                        "and one trial (%d); keeping the seed", ctx.ledger.total, plan.least)
            return thaw(ctx.seed_bundle)
        bridge = LoopBridge.current()
        runner = TeamRunner(ctx, bridge, [*train, *val], demo_chars=self.settings.demo_chars,
                            bootstrap_cap=plan.bootstrap_cap(self.settings.max_bootstrap_rollouts))
        restored = ctx.restore()
        best = await run_in_thread(bridge, self._compile, ctx, runner, plan, restored, train, val)
        if runner.fatal is not None:
            raise runner.fatal
        log.info("mipro: %d instruction proposal(s) rejected by validation", len(runner.rejected))
        return dict(best) if best is not None else thaw(ctx.seed_bundle)

    def plan(self, budget: int, n_val: int) -> SearchPlan:
        return SearchPlan(budget=budget, n_val=n_val,
                          minibatch=min(self.settings.minibatch_size, n_val),
                          full_eval_steps=self.settings.minibatch_full_eval_steps)

    def _compile(self, ctx: OptimizeContext, runner: TeamRunner, plan: SearchPlan,
                 restored: dict | None, train: list[Problem],
                 val: list[Problem]) -> dict[str, str] | None:
        import dspy

        from lcb.optimize.methods.mipro_program import (
            BudgetSpent,
            ReflectionEngine,
            TeamProgram,
            rollout_metric,
        )
        from lcb.optimize.methods.mipro_search import LcbMipro, NoTrialAffordable, SearchLog

        s = self.settings
        lm = dspy.LM("lcb/reflection", engine=ReflectionEngine(ctx, runner.bridge, runner),
                     cache=False, num_retries=0)
        student = TeamProgram(thaw(ctx.seed_bundle), runner)
        mipro = LcbMipro(
            runner=runner, plan=plan, num_trials=s.num_trials,
            search=SearchLog(runner, restored), metric=rollout_metric, prompt_model=lm,
            task_model=lm, auto=None, max_bootstrapped_demos=s.max_bootstrapped_demos,
            max_labeled_demos=s.max_labeled_demos, num_candidates=s.num_candidates,
            num_threads=s.num_threads, max_errors=1, seed=ctx.optimizer_seed,
            track_stats=False)
        with contextlib.redirect_stdout(sys.stderr), dspy.context(lm=lm):
            try:
                best = mipro.compile(
                    student, trainset=self._examples(train), valset=self._examples(val),
                    num_trials=s.num_trials or 1, seed=ctx.optimizer_seed,
                    minibatch=plan.minibatching, minibatch_size=plan.minibatch,
                    minibatch_full_eval_steps=s.minibatch_full_eval_steps,
                    program_aware_proposer=False, data_aware_proposer=s.data_aware,
                    tip_aware_proposer=s.tip_aware, fewshot_aware_proposer=s.fewshot_aware)
            except (BudgetSpent, NoTrialAffordable) as err:
                log.warning("mipro: %s; keeping the seed", err)
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
