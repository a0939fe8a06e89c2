"""What a `gepa` run leaves in the job: candidates, every proposal, and a checkpoint per iteration.

Contract (`GepaRecorder` is a gepa callback; gepa calls it on its worker thread, and every record
goes to the job's event loop through the adapter's `LoopBridge`):
- Candidates: each candidate gepa evaluates on the whole validation set is recorded
  (`ctx.record_candidate`, scores `{"val": mean}`); `best` is the best so far (highest mean,
  earliest on ties: gepa's own rule).
- Proposals: each proposal that reaches gepa's acceptance is recorded once
  (`ctx.record_proposal`) from gepa's own verdict events, so the record says what gepa decided:
  a reflective child (`scored_on="minibatch"`, scores `{"parent", "child"}`: mean scores of the
  parent and the child on the same minibatch) is accepted on `on_candidate_accepted` (after its
  validation evaluation) and rejected on `on_candidate_rejected` (`rejected_by="minibatch"`,
  gepa's reason: not strictly better). A merge (`scored_on="val_subsample"`: gepa scores it on
  a few validation rows both parents were scored on; scores add `"other_parent"`) is accepted
  when not worse than both parents, else rejected by `on_merge_rejected`. A proposal still open
  when its iteration ends could not be paid for (its minibatch or its validation evaluation):
  `rejected_by="budget"`. An iteration cut short by an error (`adapter.fatal`: a reflection or
  endpoint failure) records nothing more and writes no checkpoint: the rerun that follows the
  fix retraces it whole. `parent` is the hash of the (first) parent; `roles` are the roles whose
  text differs from it. Proposals the validator refused never reach gepa: the adapter records
  them.
- Checkpoints: after each iteration, `ctx.checkpoint(state)` with `state` = `{"method"` (the
  method's key: `gepa`, or one built on this run such as `mamut_gepa`), `"iteration",
  "candidates"` (bundle hashes in gepa's order), `"best"` (hash), `"best_score"`,
  `"charged"` (rollouts paid along the path: the adapter's `spent`), `"proposals"}`. On a resumed
  job (`expected`: what `ctx.restore()` gave) the run retraces from the start; the state at the
  end of iteration `expected["iteration"]` must equal `expected`, else `ResumeDivergence`.
  Retraced iterations before it are not checkpointed again (the checkpoint never moves back).
- gepa logs and swallows a callback's exception; so every handler stores the first failure
  (a divergence included) in `adapter.fatal`, where the method's stopper ends the run and the
  method raises it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lcb.optimize.bundle import bundle_hash
from lcb.optimize.method import Recorder
from lcb.optimize.methods.gepa_adapter import LcbAdapter

KEY = "gepa"
Handler = TypeVar("Handler", bound=Callable[..., None])


class ResumeDivergence(RuntimeError):
    """A resumed gepa run did not retrace the path of the run it resumes."""


@dataclass
class Best:
    """The best fully evaluated candidate so far."""

    bundle: dict[str, str]
    score: float


@dataclass
class _Open:
    """A proposal gepa has not decided on yet."""

    parent: dict[str, str]
    child: dict[str, str]
    scored_on: str
    scores: dict[str, float] = field(default_factory=dict)
    note: str = ""


def _mean(scores: Sequence[float] | None) -> float:
    return sum(scores) / len(scores) if scores else 0.0


def _guarded(handler: Handler) -> Handler:
    """Keep a handler's first failure in `adapter.fatal` (gepa would only log it)."""

    @functools.wraps(handler)
    def run(self: GepaRecorder, event: Mapping[str, Any]) -> None:
        try:
            handler(self, event)
        except Exception as exc:
            if self.adapter.fatal is None:
                self.adapter.fatal = exc
            raise

    return run  # type: ignore[return-value]


class GepaRecorder:
    """A gepa callback (see the module docstring)."""

    def __init__(self, adapter: LcbAdapter, *, expected: Mapping[str, Any] | None = None,
                 method: str = KEY) -> None:
        self.adapter = adapter
        self.method = method
        self.ctx: Recorder = adapter.ctx  # it records only: history and checkpoints
        self.best: Best | None = None
        self.hashes: dict[int, str] = {}  # gepa's candidate index -> bundle hash
        self.expected = json.loads(json.dumps(expected)) if expected else None
        self.verified = self.expected is None
        self.proposals = 0
        self.last_iteration = 0
        self._state: Any = None  # gepa's state, as the iteration started
        self._parent: dict[str, str] = {}
        self._parent_scores: list[float] = []
        self._merged_scores: list[float] = []
        self._open: _Open | None = None

    # --- iterations -------------------------------------------------------------------
    @_guarded
    def on_iteration_start(self, event: Mapping[str, Any]) -> None:
        self.adapter.iteration = self.last_iteration = int(event["iteration"])
        self._state, self._open = event["state"], None
        self._parent_scores, self._merged_scores = [], []

    @_guarded
    def on_iteration_end(self, event: Mapping[str, Any]) -> None:
        if self.adapter.fatal is not None:
            return  # an error ended it: not a state the rerun after the fix will reach
        if self._open is not None:
            late = "child" in self._open.scores
            self._close(accepted=False, rejected_by="budget", reason=(
                "accepted on the minibatch, but the budget cannot pay for its validation"
                if late else "the budget ran out before it was scored"))
        self._checkpoint(int(event["iteration"]))

    # --- evaluations and proposals ----------------------------------------------------
    @_guarded
    def on_evaluation_end(self, event: Mapping[str, Any]) -> None:
        scores = list(event["scores"])
        if event["candidate_idx"] is not None:  # a pool candidate: the parent's minibatch
            self._parent_scores = scores
        elif self._open is not None:  # the reflective child's minibatch
            self._open.scores["child"] = _mean(scores)
        else:  # a merged candidate, scored before gepa announces the merge
            self._merged_scores = scores

    @_guarded
    def on_proposal_start(self, event: Mapping[str, Any]) -> None:
        self._parent = dict(event["parent_candidate"])

    @_guarded
    def on_proposal_end(self, event: Mapping[str, Any]) -> None:
        child = {**self._parent, **dict(event["new_instructions"])}
        self._open = _Open(self._parent, child, "minibatch",
                           {"parent": _mean(self._parent_scores)})

    @_guarded
    def on_candidate_rejected(self, event: Mapping[str, Any]) -> None:
        self._close(accepted=False, rejected_by="minibatch", reason=str(event["reason"]))

    @_guarded
    def on_candidate_accepted(self, event: Mapping[str, Any]) -> None:
        self._close(accepted=True, reason=f"gepa candidate {event['new_candidate_idx']}")

    @_guarded
    def on_merge_attempted(self, event: Mapping[str, Any]) -> None:
        first, second = (int(i) for i in event["parent_ids"])
        trace = self._state.full_program_trace[-1]
        self._open = _Open(
            dict(self._state.program_candidates[first]), dict(event["merged_candidate"]),
            "val_subsample",
            {"parent": _mean(trace.get("id1_subsample_scores")),
             "other_parent": _mean(trace.get("id2_subsample_scores")),
             "child": _mean(self._merged_scores)},
            note=f"merge of gepa candidates {first} and {second}")

    @_guarded
    def on_merge_rejected(self, event: Mapping[str, Any]) -> None:
        self._close(accepted=False, rejected_by="minibatch", reason=str(event["reason"]))

    def _close(self, *, accepted: bool, rejected_by: str | None = None, reason: str = "") -> None:
        proposal, self._open = self._open, None
        if proposal is None:
            return
        self.proposals += 1
        roles = [r for r in proposal.child if proposal.child[r] != proposal.parent.get(r)]
        scored = "child" in proposal.scores
        self.adapter.bridge.call(
            self.ctx.record_proposal, proposal.child, parent=bundle_hash(proposal.parent),
            roles=roles, accepted=accepted, scores=proposal.scores,
            scored_on=proposal.scored_on if scored else None,
            rejected_by=None if accepted else rejected_by,
            reason="; ".join(part for part in (proposal.note, reason) if part),
            iteration=self.adapter.iteration)

    # --- candidates -------------------------------------------------------------------
    @_guarded
    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        candidate = dict(event["candidate"])
        complete = event["num_examples_evaluated"] >= event["total_valset_size"]
        score = float(event["average_score"])
        if complete and (self.best is None or score > self.best.score):
            self.best = Best(candidate, score)
        index = int(event["candidate_idx"])
        self.hashes[index] = bundle_hash(candidate)
        parents = [p for p in event.get("parent_ids") or [] if p is not None]
        note = (f"gepa candidate {index}, parents {parents}" if parents
                else "gepa seed evaluation")
        self.adapter.bridge.call(
            self.ctx.record_candidate, candidate, scores={"val": score}, note=note,
            iteration=int(event["iteration"]),
            parent=self.hashes.get(parents[0]) if parents else None)

    # --- checkpoints ------------------------------------------------------------------
    def snapshot(self, iteration: int) -> dict[str, Any]:
        """The state checkpointed after `iteration` (see the module docstring)."""
        return {"method": self.method, "iteration": iteration,
                "candidates": [self.hashes[i] for i in sorted(self.hashes)],
                "best": bundle_hash(self.best.bundle) if self.best else None,
                "best_score": self.best.score if self.best else None,
                "charged": self.adapter.spent,
                "proposals": self.proposals + len(self.adapter.rejected)}

    def _checkpoint(self, iteration: int) -> None:
        state = self.snapshot(iteration)
        if not self.verified and self.expected is not None:
            if iteration < int(self.expected.get("iteration", 0)):
                return  # retracing: the interrupted run checkpointed this iteration already
            self._verify(state)
        self.adapter.bridge.call(self.ctx.checkpoint, state)

    def _verify(self, state: dict[str, Any]) -> None:
        expected = self.expected or {}
        differs = [key for key in sorted({*expected, *state})
                   if expected.get(key) != state.get(key)]
        if differs:
            shown = "; ".join(f"{key}: saved {expected.get(key)!r}, now {state.get(key)!r}"
                              for key in differs)
            raise ResumeDivergence(
                f"the resumed {self.method} run did not retrace the interrupted run at "
                f"iteration {state['iteration']} ({shown}); rerun the job from scratch in a "
                f"new job directory")
        self.verified = True

    def unfinished_retrace(self) -> ResumeDivergence | None:
        """Why a resumed run that ended short of the checkpointed iteration diverged."""
        if self.verified or self.expected is None:
            return None
        return ResumeDivergence(
            f"the resumed {self.method} run ended after iteration {self.last_iteration}, "
            f"before the checkpointed iteration {self.expected.get('iteration')}: it did not "
            f"retrace the interrupted run; start its optimization over with --restart-optimization "
            f"(or use a new job directory)")
