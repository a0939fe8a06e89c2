"""Our `gepa` adapter: a candidate is a prompt bundle, each role prompt is one component.

Contract (gepa's `GEPAAdapter` protocol; everything here runs in gepa's worker thread and
reaches the job's event loop through a `LoopBridge`):
- `evaluate(batch, candidate, capture_traces)` runs each distinct problem of `batch` once
  through the whole team with `candidate` via `ctx.rollouts`. Trajectories are
  `Trace(problem, rollout)`; a rollout lost to infrastructure (None while budget remains)
  scores 0 and is not a metric call.
- Spend is counted along gepa's path, not read off the ledger: `spent` is the number of
  distinct rollouts (bundle, row, iteration) this run has been given. Each was charged once,
  now or by the interrupted run a resumed job retraces (the job's context serves those from
  its journal; a repeat within this run is a free replay). So `remaining` (the budget minus
  `spent`, never more than the ledger has) is the same at every step of a retrace as it was
  the first time, and gepa takes the same decisions. Before a batch, the rollouts it does not
  already hold must fit in `remaining`, else `BudgetSpent`: no evaluation is cut in half.
- What the reflection model sees is the adapter's `Reflector`: the method's key (the purpose
  `<key>:reflect:<role>`), how many records one reflection gets, the record of one trace for
  one role, the reflection prompt and its temperature. gepa's (`SliceReflector`): each record
  is that role's slice of the transcript (`reflection.role_slice`) with the grader's verdict
  and feedback, and the prompt is `reflection.proposal_prompt` (the reflection model's own
  sampling); `mamut_gepa` gives whole-team transcripts (`mamut_gepa.TeamReflector`).
- `make_reflective_dataset` gives each requested role the reflector's records of the batch's
  traces, failures first, at most `records_per_reflection` of them.
- `propose_new_texts` asks `ctx.reflect` with the reflector's prompt and keeps a proposal
  only when its markers are complete (`reflection.parse_proposal`), `ctx.validate`
  accepts the bundle with it and the reflector's own `check` has no objection (both methods
  use `reflection.proposal_problem`: template echoes and too short or too long texts). Any other
  proposal (truncated, invalid, the current text again, or refused by `check`) is recorded
  with `ctx.record_proposal(..., rejected_by="validator", reason=...)` and never adopted.
  Any exception while proposing (a `ReflectionError` above all) is kept in `fatal` and raised
  again on a later proposal (gepa would retry a failed reflection and go on); the method's
  stopper then ends the run and the method re-raises it. So is an exception from a rollout
  (`Misconfigured`, a team crash) and an interrupt reaching gepa's thread through a rollout or a
  reflection (Ctrl-C, a cancelled job): kept in `fatal`, the iteration it cut writes no
  checkpoint, so the rerun retraces it instead of refusing a checkpoint it cannot reach.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gepa.core.adapter import EvaluationBatch

from lcb.agents.prompts import placeholders_in
from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError, bundle_hash
from lcb.optimize.method import OptimizeContext, Rollout
from lcb.optimize.methods.reflection import (
    BEGIN_MARK,
    LoopBridge,
    ReflectionSettings,
    parse_proposal,
    proposal_problem,
    proposal_prompt,
    render_slice,
    role_slice,
)
from lcb.text import clip

log = logging.getLogger(__name__)


class BudgetSpent(Exception):
    """The budget cannot pay for the next evaluation: the optimization ends here."""


@dataclass(frozen=True)
class Trace:
    """One evaluated problem: the problem and its rollout (None: lost to infrastructure)."""

    problem: Problem
    rollout: Rollout | None


class Reflector(Protocol):
    """What the reflection model is shown, and how it is asked (see the module docstring)."""

    key: str
    temperature: float | None
    records_per_reflection: int

    def record(self, trace: Trace, role: str) -> dict[str, str]:
        """One record (heading -> text) of a rolled-out trace, for the role under revision."""
        ...

    def prompt(self, *, topology: str, role: str, current: str,
               records: Sequence[Mapping[str, str]], placeholders: Sequence[str]) -> str:
        """The reflection prompt for `role` (its `current` text, the records)."""
        ...

    def check(self, text: str, *, current: str, seed: str) -> str | None:
        """Why a parsed, validated proposal for a role is dropped (None: it may be tried);
        `current` is the role's text in the parent, `seed` its seed text."""
        ...


@dataclass(frozen=True)
class SliceReflector:
    """gepa's reflector: the role's slice of each transcript, our proposal prompt."""

    settings: ReflectionSettings = field(default_factory=ReflectionSettings)
    key: str = "gepa"
    temperature: float | None = None  # the reflection model's own sampling

    @property
    def records_per_reflection(self) -> int:
        return self.settings.records_per_reflection

    def record(self, trace: Trace, role: str) -> dict[str, str]:
        rollout = trace.rollout
        assert rollout is not None
        passed = rollout.score >= 1.0
        feedback = rollout.feedback or ("" if passed else "no feedback")
        slice_ = role_slice(rollout.team.transcript, role, limits=self.settings.limits)
        return {
            "Problem": f"{trace.problem.id}: {trace.problem.title}",
            "Outcome": "solved (every hidden test passed)" if passed else "not solved",
            "Grader feedback": clip(feedback, self.settings.feedback_chars) or "(none)",
            f"What the role '{role}' saw and said": render_slice(slice_),
        }

    def prompt(self, *, topology: str, role: str, current: str,
               records: Sequence[Mapping[str, str]], placeholders: Sequence[str]) -> str:
        return proposal_prompt(topology=topology, role=role, current=current,
                               records=records, placeholders=placeholders)

    def check(self, text: str, *, current: str, seed: str) -> str | None:
        return proposal_problem(text, current=current, seed=seed)


class LcbAdapter:
    """See the module docstring."""

    def __init__(self, ctx: OptimizeContext, bridge: LoopBridge, *,
                 reflector: Reflector | None = None) -> None:
        self.ctx = ctx
        self.bridge = bridge
        self.reflector: Reflector = reflector or SliceReflector()
        self.iteration = 0
        self.paid: set[tuple[str, str, int]] = set()  # (bundle hash, row, iteration) given
        self.rejected: list[str] = []
        self.proposed = 0
        self.fatal: BaseException | None = None

    # --- budget along the path --------------------------------------------------------
    @property
    def spent(self) -> int:
        return len(self.paid)

    @property
    def remaining(self) -> int:
        return min(self.ctx.ledger.total - self.spent, self.ctx.ledger.available)

    # --- evaluation -------------------------------------------------------------------
    def evaluate(self, batch: list[Problem], candidate: dict[str, str],
                 capture_traces: bool = False) -> EvaluationBatch:
        digest = bundle_hash(candidate)
        distinct = list({problem.id: problem for problem in batch}.values())
        new = [p for p in distinct if (digest, p.id, self.iteration) not in self.paid]
        if len(new) > self.remaining:
            raise BudgetSpent(f"{self.remaining} rollout(s) left, an evaluation needs {len(new)}")
        try:
            rollouts = self.bridge.run(
                self.ctx.rollouts(dict(candidate), distinct, iteration=self.iteration))
        except BaseException as exc:  # a misconfigured endpoint, a crash, an interrupt: it ends
            self.fatal = self.fatal or exc
            raise
        by_id = dict(zip((p.id for p in distinct), rollouts, strict=True))
        self.paid.update((digest, pid, self.iteration) for pid, r in by_id.items()
                         if r is not None)
        if any(r is None for r in rollouts) and self.ctx.ledger.available == 0:
            raise BudgetSpent("the budget ran out during an evaluation")
        traces = [Trace(problem, by_id[problem.id]) for problem in batch]
        return EvaluationBatch(
            outputs=traces,
            scores=[t.rollout.score if t.rollout is not None else 0.0 for t in traces],
            trajectories=traces if capture_traces else None,
            num_metric_calls=sum(t.rollout is not None for t in traces),
        )

    # --- reflection -------------------------------------------------------------------
    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> dict[str, list[dict]]:
        traces = [t for t in (eval_batch.trajectories or []) if t.rollout is not None]
        traces.sort(key=lambda t: t.rollout.score)  # failures first (stable: batch order)
        traces = traces[: self.reflector.records_per_reflection]
        return {role: [self.reflector.record(t, role) for t in traces]
                for role in components_to_update}

    def propose_new_texts(self, candidate: dict[str, str],
                          reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                          components_to_update: list[str]) -> dict[str, str]:
        if self.fatal is not None:  # gepa retries a failed reflection: do not ask again
            raise self.fatal
        new_texts: dict[str, str] = {}
        try:
            for role in components_to_update:
                records = [dict(r) for r in reflective_dataset.get(role, [])]
                if records:
                    text = self._propose_one(candidate, role, records)
                    if text is not None:
                        new_texts[role] = text
        except BaseException as exc:  # gepa would log an Exception and go on: end the run
            self.fatal = self.fatal or exc
            raise
        return new_texts

    def _propose_one(self, candidate: Mapping[str, str], role: str,
                     records: list[dict[str, str]]) -> str | None:
        reflector = self.reflector
        prompt = reflector.prompt(
            topology=self.ctx.topology, role=role, current=candidate[role], records=records,
            placeholders=sorted(placeholders_in(self.ctx.seed_bundle[role])))
        reply = self.bridge.run(self.ctx.reflect(
            prompt, purpose=f"{reflector.key}:reflect:{role}", temperature=reflector.temperature))
        self.proposed += 1
        text = parse_proposal(reply)
        if text is None:
            return self._reject(candidate, role, _unfinished(reply),
                                "the reply has no complete marked prompt (truncated?)")
        try:
            checked = self.ctx.validate({**candidate, role: text})[role]
        except BundleError as err:
            return self._reject(candidate, role, text, str(err))
        if checked == candidate[role]:
            return self._reject(candidate, role, checked, "the proposal is the current text")
        why = reflector.check(checked, current=candidate[role], seed=self.ctx.seed_bundle[role])
        if why is not None:
            return self._reject(candidate, role, checked, why)
        return checked

    def _reject(self, candidate: Mapping[str, str], role: str, text: str, reason: str) -> None:
        self.rejected.append(f"{role}: {reason}")
        log.warning("%s: proposal for role %r rejected: %s", self.reflector.key, role, reason)
        self.bridge.call(self.ctx.record_proposal, {**candidate, role: text},
                         parent=bundle_hash(candidate), roles=[role], accepted=False,
                         rejected_by="validator", reason=reason, iteration=self.iteration)
        return None


def _unfinished(reply: str) -> str:
    """What a reply without a complete marked prompt proposed: the text after its last begin
    marker, else the whole reply."""
    start = reply.rfind(BEGIN_MARK)
    return (reply[start + len(BEGIN_MARK):] if start >= 0 else reply).strip()
