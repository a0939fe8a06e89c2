"""MIPRO's search: `dspy.MIPROv2` with our hooks, and what it writes down (history, checkpoints).

Contract:
- `LcbMipro` is `dspy.MIPROv2` with hooks: instruction candidates screened by the runner
  (validated, recorded as proposals), the number of trials from the `SearchPlan` (or the
  setting; `NoTrialAffordable` when none fits), each trial's program carrying its trial number
  (its rollouts' iteration, and that of its later full evaluation), more full evaluations with
  what the last trial leaves (while unevaluated combinations remain), and every evaluation
  reported to the `SearchLog`.
- `SearchLog(runner, restored)` is told, in MIPRO's order (its worker thread, one call at a
  time), of each trial's start (`start_trial`) and program (`trial_program`), of every
  finished or cut evaluation (through `RecordingEvaluate`, which wraps MIPRO's `Evaluate`) and
  of the end of the search (`finish`). Context calls go through the runner's loop bridge.
- Every evaluation is a candidate entry (`val` for a full evaluation, `val_minibatch` for a
  minibatch; parent: the seed for a trial's program). The best is the baseline, then each
  full evaluation whose DSPy score is strictly higher: MIPROv2's own rule, so the best is the
  program MIPRO returns.
- Each trial's program is one proposal (parent: the seed; roles: those whose text differs
  from the seed's), recorded when its fate is known: at its full evaluation (`scored_on`
  "val", accepted when it became the best, else rejected by the "gate"), or by `finish`, in
  trial order (rejected by the "minibatch" ranking, or by the "budget" when its evaluation
  was cut short).
- Checkpoints: after the baseline and after each trial (at the next trial's start; the last
  one at `finish`) `ctx.checkpoint({trial, iteration, trials, best_hash, best_score,
  charged})`: trials completed, the last one's number, trials planned, the best so far and
  the units spent (`TeamRunner.units`). When the state of `restored` (a resumed job's last
  checkpoint) comes round again it must be equal, else `MiproDiverged`; a search that ends
  before reaching it diverged too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspy.teleprompt import MIPROv2

from lcb.optimize.bundle import bundle_hash
from lcb.optimize.methods.mipro_program import ATTR_PREFIX

if TYPE_CHECKING:
    from lcb.optimize.method import Recorder
    from lcb.optimize.methods.mipro_method import SearchPlan
    from lcb.optimize.methods.mipro_program import TeamRunner

log = logging.getLogger(__name__)


class MiproDiverged(RuntimeError):
    """A resumed MIPRO run did not retrace the interrupted one (see the module docstring)."""


class NoTrialAffordable(Exception):
    """What is left after bootstrapping cannot pay for the baseline and one trial."""


@dataclass
class Trial:
    """One trial's program, until its proposal is recorded."""

    number: int
    bundle: dict[str, str]
    combo: str  # MIPRO's key of the (instruction, demo set) choices
    minibatch: float | None = None
    cut: bool = False


class SearchLog:
    """See the module docstring."""

    def __init__(self, runner: TeamRunner, restored: dict | None) -> None:
        self.runner, self.restored = runner, restored
        self.ctx: Recorder = runner.ctx  # the search only records: history and checkpoints
        self.seed = dict(runner.ctx.seed_bundle)
        self.seed_hash = bundle_hash(self.seed)
        self.best_hash: str | None = None
        self.best_score: float | None = None
        self._best_dspy: float | None = None
        self.pending: dict[int, Trial] = {}
        self.full_combos: dict[str, int] = {}  # combination -> the trial evaluated in full
        self.completed, self.last_iteration, self.planned = 0, 0, 0

    def start_trial(self, number: int) -> None:
        if self.runner.fatal is not None:  # an error DSPy swallowed: stop before this trial
            raise self.runner.fatal
        self.completed += 1 if self.last_iteration else 0  # the previous trial is complete
        self._checkpoint()
        self.last_iteration = number

    def trial_program(self, number: int, bundle: dict[str, str], combo: str) -> None:
        self.pending[number] = Trial(number, dict(bundle), combo)

    def evaluated(self, bundle: dict[str, str], *, iteration: int, full: bool, score: float,
                  rows: int, dspy_score: float) -> None:
        """One finished evaluation (see the module docstring)."""
        self._call(self.ctx.record_candidate, bundle,
                   scores={"val" if full else "val_minibatch": score},
                   note=f"mipro {'eval_full' if full else 'eval_minibatch'} on {rows} "
                        f"problem(s)", iteration=iteration,
                   parent=self.seed_hash if iteration else None)
        trial = self.pending.get(iteration) if iteration else None
        if not full:
            if trial is not None:
                trial.minibatch = score
            return
        previous = self.best_score
        better = self._best_dspy is None or dspy_score > self._best_dspy
        if better:
            self.best_hash, self.best_score, self._best_dspy = bundle_hash(bundle), score, \
                dspy_score
        if trial is None:
            return
        del self.pending[iteration]
        self.full_combos.setdefault(trial.combo, iteration)
        scores = {"val": score} if trial.minibatch is None else {
            "val_minibatch": trial.minibatch, "val": score}
        verb = "beat" if better else "did not beat"
        best = "none" if previous is None else f"{previous:.3f}"
        self._proposal(trial, scores=scores, scored_on="val", accepted=better,
                       rejected_by=None if better else "gate",
                       reason=f"trial {iteration}: full validation {score:.3f} {verb} the "
                              f"best so far ({best})")

    def cut(self, iteration: int) -> None:
        """An evaluation of that iteration's program was cut short (the budget)."""
        if iteration in self.pending:
            self.pending[iteration].cut = True

    def finish(self) -> None:
        """The search ended: the remaining trials' proposals, then the last checkpoint."""
        for number in sorted(self.pending):
            trial = self.pending[number]
            first = self.full_combos.get(trial.combo)
            if trial.cut or trial.minibatch is None:
                verdict, why = "budget", "its evaluation was cut short: the budget ran out"
            elif first is not None:
                verdict, why = "minibatch", (f"repeats the combination of trial {first}, "
                                             f"evaluated on the full validation split there")
            else:
                verdict, why = "minibatch", ("its combination's minibatch mean did not rank "
                                             "among those evaluated on the full split")
            self._proposal(trial, scores={} if trial.minibatch is None else {
                "val_minibatch": trial.minibatch}, scored_on=None if trial.minibatch is None
                else "minibatch", accepted=False, rejected_by=verdict,
                reason=f"trial {number}: {why}")
        self.pending.clear()
        self.completed += 1 if self.last_iteration else 0
        self._checkpoint()
        if self.restored is not None:
            self._diverged(f"the rerun ended after trial {self.completed} before reaching the "
                           f"checkpoint of trial {self.restored.get('trial')}")

    def state(self) -> dict[str, Any]:
        return {"trial": self.completed, "iteration": self.last_iteration,
                "trials": self.planned, "best_hash": self.best_hash,
                "best_score": self.best_score, "charged": self.runner.units}

    def _checkpoint(self) -> None:
        state = self.state()
        if self.restored is not None and self.restored.get("trial") == state["trial"]:
            if self.restored != state:
                self._diverged(f"at trial {state['trial']} the interrupted run checkpointed "
                               f"{self.restored}, the rerun reached {state}")
            self.restored = None  # checked: the rest of the path is new
        self._call(self.ctx.checkpoint, state)

    def _diverged(self, detail: str) -> None:
        err = MiproDiverged(f"mipro: the resumed job did not retrace the interrupted run: "
                            f"{detail} (were all rollouts and reflection answers served from "
                            f"the journal, with the same settings?); start its optimization "
                            f"over with --restart-optimization")
        self.runner._fail(err)
        raise err

    def _proposal(self, trial: Trial, **fields: Any) -> None:
        roles = [role for role in self.seed if trial.bundle[role] != self.seed[role]]
        self._call(self.ctx.record_proposal, trial.bundle, parent=self.seed_hash, roles=roles,
                   iteration=trial.number, **fields)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self.runner.bridge.call(fn, *args, **kwargs)


class RecordingEvaluate:
    """Wraps MIPRO's `Evaluate`: each finished (or cut) evaluation goes to the `SearchLog`."""

    def __init__(self, evaluate: Any, search: SearchLog) -> None:
        self.evaluate, self.search = evaluate, search

    def __call__(self, program: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self.evaluate(program, *args, **kwargs)
        except Exception:
            self.search.cut(program.iteration)
            raise
        devset = kwargs.get("devset", args[0] if args else [])
        kind = (kwargs.get("callback_metadata") or {}).get("metric_key", "eval")
        outcomes = [float(item[-1]) for item in getattr(result, "results", None) or []]
        score = sum(outcomes) / len(outcomes) if outcomes else float(result.score) / 100.0
        self.search.evaluated(program.bundle(), iteration=program.iteration,
                              full=kind == "eval_full", score=score, rows=len(devset),
                              dspy_score=float(result.score))
        return result


class LcbMipro(MIPROv2):
    """`dspy.MIPROv2` with our hooks (see the module docstring)."""

    def __init__(self, *, runner: TeamRunner, plan: SearchPlan, num_trials: int | None,
                 search: SearchLog, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner, self.plan, self.fixed_trials, self.search = runner, plan, num_trials, search

    def _propose_instructions(self, program: Any, *args: Any, **kwargs: Any) -> dict:
        candidates = super()._propose_instructions(program, *args, **kwargs)
        texts = program.instructions()
        for index, (name, _) in enumerate(program.named_predictors()):
            role = name.removeprefix(ATTR_PREFIX)
            candidates[index] = self.runner.screen(texts, role, list(candidates[index]))
        return candidates

    def _select_and_insert_instructions_and_demos(self, candidate_program: Any, *args: Any,
                                                  **kwargs: Any) -> Any:
        trial_num = int(kwargs.get("trial_num", args[-1] if args else 0))
        self.search.start_trial(trial_num)  # checkpoints the previous one first
        chosen = super()._select_and_insert_instructions_and_demos(candidate_program, *args,
                                                                   **kwargs)
        candidate_program.iteration = trial_num
        self.search.trial_program(trial_num, candidate_program.bundle(),
                                  ",".join(map(str, chosen[0])))
        return chosen

    def _optimize_prompt_parameters(self, program: Any, instruction_candidates: Any,
                                    demo_candidates: Any, evaluate: Any, valset: Any,
                                    num_trials: int, *args: Any) -> Any:
        self.runner.bootstrapping = False
        trials = self.fixed_trials or self.plan.trials(spent=self.runner.units)
        log.info("mipro: %d charged bootstrap rollout(s) (cap %d), %d trial(s)",
                 self.runner.bootstrap_units, self.runner.bootstrap_cap, trials)
        if trials < 1:
            raise NoTrialAffordable(f"the {self.plan.budget - self.runner.units} rollouts left "
                                    f"after bootstrapping pay for no trial")
        self.search.planned = trials
        best = super()._optimize_prompt_parameters(
            program, instruction_candidates, demo_candidates,
            RecordingEvaluate(evaluate, self.search), valset, trials, *args)
        self.search.finish()
        return best

    def _perform_full_evaluation(self, trial_num: int, adjusted_num_trials: int,
                                 param_score_dict: dict, fully_evaled: dict, *rest: Any) -> Any:
        # rest, in MIPROv2's order: evaluate, valset, trial_logs, total_eval_calls, score_data,
        # best_score, best_program, study, instruction_candidates, demo_candidates
        evaluate, valset, logs, total, score_data, best_score, best_program, *more = rest
        last = trial_num == adjusted_num_trials - 1
        while any(key not in fully_evaled for key in param_score_dict):
            best_score, best_program, total = super()._perform_full_evaluation(
                trial_num, adjusted_num_trials, param_score_dict, fully_evaled, evaluate,
                valset, logs, total, score_data, best_score, best_program, *more)
            if not last or self.plan.budget - self.runner.units < self.plan.full_eval_cost:
                break  # after the last trial, what is left pays for more full evaluations
        return best_score, best_program, total
