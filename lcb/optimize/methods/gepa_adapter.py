"""Our `gepa` adapter: a candidate is a prompt bundle, each role prompt is one component.

Contract (gepa's `GEPAAdapter` protocol; everything here runs in gepa's worker thread and
reaches the job's event loop through a `LoopBridge`):
- `evaluate(batch, candidate, capture_traces)` runs each problem of `batch` through the whole
  team with `candidate` via `ctx.rollouts` (charged). Before it starts a batch it checks that
  the ledger can pay for all of it, and raises `BudgetSpent` otherwise, so no evaluation is
  ever cut in half. A rollout lost to infrastructure (None while budget remains) scores 0 and
  is not counted as a metric call. Trajectories are `Trace(problem, rollout)`.
- `make_reflective_dataset` gives each requested role records of that role's slice of the
  transcript (clipped per message) with the grader's verdict and feedback, failures first, at
  most `records_per_reflection` of them.
- `propose_new_texts` asks `ctx.reflect` with our prompt (`reflection.proposal_prompt`) and
  keeps a proposal only when its markers are complete and `ctx.validate` accepts the bundle
  with it; a rejected proposal is logged and counted, never adopted. A `ReflectionError` is
  kept in `fatal` (the method's stopper then ends the run and the method re-raises it).
- `Recorder` is a gepa callback: it tracks the iteration (part of every request seed),
  records every candidate that gets a full validation score (`ctx.record_candidate`) and
  remembers the best one (highest mean, earliest on ties: gepa's own rule).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gepa.core.adapter import EvaluationBatch

from lcb.agents.prompts import placeholders_in
from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError, bundle_hash
from lcb.optimize.method import OptimizeContext, ReflectionError, Rollout
from lcb.optimize.methods.reflection import (
    LoopBridge,
    ReflectionSettings,
    clip,
    parse_proposal,
    proposal_prompt,
    render_slice,
    role_slice,
)

log = logging.getLogger(__name__)


class BudgetSpent(Exception):
    """The ledger cannot pay for the next evaluation: the optimization ends here."""


@dataclass(frozen=True)
class Trace:
    """One evaluated problem: the problem and its rollout (None: lost to infrastructure)."""

    problem: Problem
    rollout: Rollout | None


class LcbAdapter:
    """See the module docstring."""

    def __init__(self, ctx: OptimizeContext, bridge: LoopBridge, *,
                 settings: ReflectionSettings | None = None) -> None:
        self.ctx = ctx
        self.bridge = bridge
        self.settings = settings or ReflectionSettings()
        self.iteration = 0
        self.rejected: list[str] = []
        self.proposed = 0
        self.fatal: BaseException | None = None

    # --- evaluation -------------------------------------------------------------------
    def evaluate(self, batch: list[Problem], candidate: dict[str, str],
                 capture_traces: bool = False) -> EvaluationBatch:
        available = self.ctx.ledger.available
        if available < len(batch):
            raise BudgetSpent(f"{available} rollout(s) left, an evaluation needs {len(batch)}")
        rollouts = self.bridge.run(
            self.ctx.rollouts(dict(candidate), list(batch), iteration=self.iteration))
        if any(r is None for r in rollouts) and self.ctx.ledger.available == 0:
            raise BudgetSpent("the budget ran out during an evaluation")
        traces = [Trace(problem, rollout) for problem, rollout in zip(batch, rollouts, strict=True)]
        return EvaluationBatch(
            outputs=traces,
            scores=[r.score if r is not None else 0.0 for r in rollouts],
            trajectories=traces if capture_traces else None,
            num_metric_calls=sum(r is not None for r in rollouts),
        )

    # --- reflection -------------------------------------------------------------------
    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> dict[str, list[dict]]:
        traces = [t for t in (eval_batch.trajectories or []) if t.rollout is not None]
        traces.sort(key=lambda t: t.rollout.score)  # failures first (stable: batch order)
        traces = traces[: self.settings.records_per_reflection]
        return {role: [self._record(t, role) for t in traces] for role in components_to_update}

    def _record(self, trace: Trace, role: str) -> dict[str, str]:
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

    def propose_new_texts(self, candidate: dict[str, str],
                          reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                          components_to_update: list[str]) -> dict[str, str]:
        new_texts: dict[str, str] = {}
        for role in components_to_update:
            records = [dict(r) for r in reflective_dataset.get(role, [])]
            if not records:
                continue
            text = self._propose_one(candidate, role, records)
            if text is not None and text != candidate[role]:
                new_texts[role] = text
        return new_texts

    def _propose_one(self, candidate: Mapping[str, str], role: str,
                     records: list[dict[str, str]]) -> str | None:
        prompt = proposal_prompt(
            topology=self.ctx.topology, role=role, current=candidate[role], records=records,
            placeholders=sorted(placeholders_in(self.ctx.seed_bundle[role])))
        try:
            reply = self.bridge.run(self.ctx.reflect(prompt, purpose=f"gepa:reflect:{role}"))
        except ReflectionError as err:
            self.fatal = err
            raise
        self.proposed += 1
        text = parse_proposal(reply)
        if text is None:
            return self._reject(role, "the reply has no complete marked prompt (truncated?)")
        try:
            checked = self.ctx.validate({**candidate, role: text})
        except BundleError as err:
            return self._reject(role, str(err))
        return checked[role]

    def _reject(self, role: str, reason: str) -> None:
        self.rejected.append(f"{role}: {reason}")
        log.warning("gepa: proposal for role %r rejected: %s", role, reason)
        return None


@dataclass
class Best:
    """The best fully evaluated candidate so far."""

    bundle: dict[str, str]
    score: float


class Recorder:
    """A gepa callback (see the module docstring)."""

    def __init__(self, adapter: LcbAdapter) -> None:
        self.adapter = adapter
        self.best: Best | None = None
        self.hashes: dict[int, str] = {}  # gepa's candidate index -> bundle hash

    def on_iteration_start(self, event: Mapping[str, Any]) -> None:
        self.adapter.iteration = int(event["iteration"])

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
            self.adapter.ctx.record_candidate, candidate, scores={"val": score}, note=note,
            iteration=int(event["iteration"]),
            parent=self.hashes.get(parents[0]) if parents else None)
