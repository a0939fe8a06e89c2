"""`hivemind`: contribution-guided online prompt optimization (CG-OPO; Xia et al., arXiv
2512.06432): Shapley credit over coalitions of agents, lessons for the lowest-credit role.

Contract (the game itself, players to gate rows, is `hivemind_game.Game`):
- Players are the team's agents (`ctx.agents`; `ctx.graph.agents` names each one's role). A
  cycle c (1, 2, ...) runs the current bundle, masked to each coalition it needs
  (`ctx.rollout(..., active=coalition)`: an inactive agent makes no call), on a batch of
  `batch_size` train rows (a rotating pass over a seeded shuffle of the split:
  `strategies.batches.Rotation` over `shuffled`) at iteration c.
  A coalition's value is its mean score on the batch rows that came back for every planned
  coalition (an infrastructure loss drops the row from all of them; no such row: no credit, no
  proposal this cycle). The empty coalition runs too, as an abstaining team (score 0, no model
  call), never an infrastructure failure. On a centralized team (`kind == "star"`) a
  coalition without the manager abstains as well; with `skip_managerless` (default) its value
  is 0 without a rollout.
- DAG-Shapley (`shapley="dag"`, default; `dag_shapley`): only viable coalitions run, the
  others take their core's value. Reuse (`reuse`, default on): the whole team's coalition runs
  first on the batch, the others after it with `reuse=True`, taking its answers where their
  requests are the same; a coalition the team's rule (`ctx.whole_team_answers`) says needs no
  new request is free (not charged), and the abstaining ones with it.
- Shapley values (`shapley`): exact over the power set when the coalitions that need a
  rollout number <= `exact_max_coalitions`; else Monte-Carlo over at most `mc_permutations`
  player orders drawn from `Random("hivemind:<seed>:<cycle>")`, no more orders than keep the
  coalitions to run <= `exact_max_coalitions` (only visited coalitions are run).
- A role's credit is the sum of its players' values (replicas of a shared prompt pool theirs).
  A one-role team's credit is v(N) - v({}) whatever the game, and the target is that role
  whatever the credit: the game cannot change what a cycle does. So by default
  (`shapley_single_role` off) such a team runs only the full coalition and skips the Shapley
  step, and its budget buys cycles (lessons and gates) instead; the job log says so once.
  `shapley_single_role=true` plays the game anyway.
  Target: the lowest-credit role; on a centralized team the manager every `manager_every`-th
  cycle and the lowest-credit worker otherwise. Ties (to 1e-9) go to the role targeted fewest
  times so far, then to the latest in topological order (nearest the team's answer).
- Reflection (`ctx.reflect`, purpose "hivemind:lessons", T = `temperature`;
  `hivemind_lessons`: our prompt and its strict parser) reads the target's failures and
  successes in the full coalition's runs and answers a LESSONS block; an unparsable one is
  rejected with the reason, never adopted. The candidate's prompt for the target = its seed
  prompt + its latest <= `max_lessons` lessons (append-only: lessons are only ever added to
  the incumbent's list). Every candidate goes through `ctx.validate`.
- Gate (`strategies.gates.strictly_better`): the candidate is accepted only if strictly better
  than the current bundle on the first `val_size` rows (capped by |val|) of a seeded shuffle
  of the validation split, both at iteration 0 (paired request seeds), compared on the rows
  that came back for both (no such row: rejected by the gate, not compared). Each bundle's
  per-row scores are kept: one scored before is not run again (a row infrastructure lost
  would come back None again).
- Budget: a cycle costs R * |batch| + |val rows| * (1 + [current not yet scored on val]),
  R = the coalitions it runs that are not free (sequential 4: 2 * 5 + 10 = 20; full Shapley
  without reuse 16 * 5 + 10 = 90; centralized 4: 8 * 5 + 10 = 50).
  A cycle starts only when `ctx.ledger.available` pays for all of it; `max_cycles` caps cycles;
  a cycle that charged nothing (every rollout lost to infrastructure) is the last.
- History: the seed's val score (candidate), then per cycle one proposal (parent hash, target,
  scores on the paired rows, `rejected_by` "validator" for an unparsable reply / invalid bundle
  / no new lesson, "gate" or "budget"), its reason holding the evidence as JSON (coalition
  values, Shapley values, credit, target, lessons, rows used); an accepted one is also a
  candidate.
- Resume: `ctx.checkpoint` after every cycle ({cycle, lessons, per-row val scores, target
  counts}); a rerun calls `ctx.restore(fast_forward=True)` and continues at the next cycle.
  Nothing else is random (batches, orders and seeds derive from the cycle number).
- The result is a NEW dict with exactly the seed's roles: the incumbent. Topology `single`
  is refused (ValueError): one agent has no coalitions to credit.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from lcb.optimize.bundle import BundleError, bundle_hash
from lcb.optimize.method import Bundle, OptimizeContext, Rollout
from lcb.optimize.methods import dag_shapley, shapley
from lcb.optimize.methods.hivemind_game import (
    VAL_ITERATION,
    Game,
    Plan,
    State,
    mean_score,
)
from lcb.optimize.methods.hivemind_lessons import LessonsError, lessons_prompt, parse_lessons
from lcb.optimize.settings import check_int_fields
from lcb.optimize.strategies.gates import strictly_better

KEY = "hivemind"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HivemindSettings:
    """The method's knobs (METHODS.md's reference values are the defaults)."""

    batch_size: int = 5
    val_size: int = 5
    max_lessons: int = 6
    lessons_per_reflection: int = 3
    exact_max_coalitions: int = 40
    mc_permutations: int = 24
    manager_every: int = 3
    failure_below: float = 0.5
    temperature: float = 0.7
    failures_shown: int = 3
    successes_shown: int = 2
    clip_chars: int = 1500
    skip_managerless: bool = True
    shapley_single_role: bool = False
    max_cycles: int | None = None
    shapley: Literal["dag", "full"] = "dag"  # DAG-Shapley (the paper's) or every coalition run
    reuse: bool = True  # coalitions take the whole team's answers (DAG-Shapley's reuse)

    def __post_init__(self) -> None:
        check_int_fields(self, KEY, least={"successes_shown": 0, "failures_shown": 0})
        if not 0.0 < self.failure_below <= 1.0:
            raise ValueError(f"hivemind setting failure_below must be in (0, 1], "
                             f"got {self.failure_below!r}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"hivemind setting temperature must be in [0, 2], "
                             f"got {self.temperature!r}")
        if self.lessons_per_reflection > self.max_lessons:
            raise ValueError("hivemind setting lessons_per_reflection must be <= max_lessons")
        if self.exact_max_coalitions < 2:
            raise ValueError("hivemind setting exact_max_coalitions must be >= 2")
        if self.shapley not in ("dag", "full"):
            raise ValueError(f"hivemind setting shapley must be 'dag' (DAG-Shapley) or 'full', "
                             f"got {self.shapley!r}")


SETTINGS = HivemindSettings  # `--set` keys and job.json's method_settings


@dataclass(frozen=True)
class Hivemind:
    """See the module docstring."""

    settings: HivemindSettings = field(default_factory=HivemindSettings)
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """Cycle 1: its coalitions on the train batch and both bundles on the val rows."""
        if ctx.topology == "single" or not ctx.data.train or not ctx.data.validation:
            return 0, "one cycle"  # optimize says why it cannot run
        job = Game(ctx, self.settings)
        return (job.cost(job.plan(1), job.batch(1), job.bundle(job.state.lessons)),
                "one full cycle (coalitions, credit and one gated proposal)")

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after as many cycles as the budget pays for (a new dict)."""
        if ctx.topology == "single":
            raise ValueError("hivemind credits the agents of a team; topology 'single' has "
                             "one agent (it gets identity, gepa or mipro)")
        job = Game(ctx, self.settings)
        if job.plan(1).skipped:
            log.info("hivemind: the %s team has one role (%s): Shapley credit cannot tell its "
                     "agents apart nor change the target, so each cycle runs the full team on "
                     "its batch and gates one lesson (shapley_single_role=true plays the "
                     "coalition game anyway)", ctx.topology, ", ".join(ctx.roles))
        saved = ctx.restore(fast_forward=True)
        if saved is not None:
            job.state = State(cycle=int(saved["cycle"]), lessons=saved["lessons"],
                              val_scores=saved["val_scores"], targeted=saved["targeted"])
        if not job.train or not job.val:
            raise ValueError("hivemind needs training and validation problems")
        while self.settings.max_cycles is None or job.state.cycle < self.settings.max_cycles:
            cycle, charged = job.state.cycle + 1, ctx.ledger.charged
            if not await self._cycle(ctx, job, cycle):
                break
            job.state.cycle = cycle
            ctx.checkpoint(job.state.to_json())
            if ctx.ledger.charged == charged:  # infrastructure lost every rollout: stop
                log.warning("hivemind: cycle %d charged nothing (every rollout lost to "
                            "infrastructure): stopping", cycle)
                break
        return job.bundle(job.state.lessons)

    async def _cycle(self, ctx: OptimizeContext, job: Game, cycle: int) -> bool:
        """One cycle; False when it could not be paid for (nothing more will be)."""
        current = job.bundle(job.state.lessons)
        plan, batch = job.plan(cycle), job.batch(cycle)
        need = job.cost(plan, batch, current)
        if ctx.ledger.available < need:
            log.info("hivemind: cycle %d needs %d rollouts, %d left: stopping", cycle, need,
                     ctx.ledger.available)
            return False
        played = await job.play(plan, current, batch, cycle)
        first_val = bundle_hash(current) not in job.state.val_scores
        current_rows = await job.val_rows(current)
        if played is None or current_rows is None:
            return False
        if first_val and cycle == 1:
            ctx.record_candidate(current, scores=mean_score(current_rows), note="the seed",
                                 iteration=VAL_ITERATION)
        if played.values is None:
            log.warning("hivemind: cycle %d: no train row came back for every coalition "
                        "(infrastructure): no credit, no proposal", cycle)
            return True
        values = played.values
        credit, how, phi = self._credit(job, plan, values)
        role, why = job.target(credit, cycle)
        job.state.targeted[role] = job.state.targeted.get(role, 0) + 1
        evidence = {"cycle": cycle, "target": role, "why": why, "shapley": how,
                    "train_rows": len(played.rows),
                    "values": {",".join(sorted(c)) or "{}": round(v, 4)
                               for c, v in values.items()},
                    "phi": {p: round(v, 4) for p, v in phi.items()},
                    "credit": {r: round(v, 4) for r, v in credit.items()}}
        await self._propose(ctx, job, current, current_rows, role, why, credit,
                            played.full_runs, evidence)
        return True

    @staticmethod
    def _credit(job: Game, plan: Plan, values: dict[shapley.Coalition, float]
                ) -> tuple[dict[str, float], str, dict[str, float]]:
        """Each role's credit, how it was computed, and the players' Shapley values."""
        if plan.skipped:  # one role: efficiency makes its credit v(N) - v({}), no game needed
            (role,) = set(job.roles_of.values())
            full = values[frozenset(job.players)] - values[frozenset()]
            return {role: full}, "skipped (one role: its credit is v(N) - v({}))", {}
        if plan.dag:  # a coalition the workflow cannot run is worth what it runs of it
            values = dag_shapley.complete(job.players, values, job.upstream)
        if plan.orders is None:
            phi, how = shapley.exact_shapley(job.players, values), "exact"
        else:
            phi = shapley.permutation_shapley(plan.orders, values)
            how = f"monte-carlo over {len(plan.orders)} orders"
        how = f"DAG-Shapley, {how}" if plan.dag else how
        return shapley.role_credit(phi, job.roles_of), how, phi

    async def _propose(self, ctx: OptimizeContext, job: Game, current: Bundle,
                       current_rows: dict[str, float], role: str, why: str,
                       credit: dict[str, float], runs: list[Rollout],
                       evidence: dict[str, Any]) -> None:
        s = self.settings
        cycle, parent = evidence["cycle"], bundle_hash(current)
        prompt = lessons_prompt(topology=ctx.topology, role=role, why=why, credit=credit,
                                seed_text=ctx.seed_bundle[role],
                                lessons=job.state.lessons[role][-s.max_lessons:],
                                runs=runs, settings=s)
        reply = await ctx.reflect(prompt, purpose=f"{KEY}:lessons", temperature=s.temperature)

        def reject(bundle: Bundle, reason: str, *, by: str = "validator",
                   scores: dict[str, float] | None = None) -> None:
            ctx.record_proposal(bundle, parent=parent, roles=[role], accepted=False,
                                scores=scores, scored_on="val" if scores else None,
                                rejected_by=by, iteration=cycle,
                                reason=json.dumps({**evidence, "verdict": reason}))

        try:
            new = parse_lessons(reply, limit=s.lessons_per_reflection)
        except LessonsError as err:
            return reject(current, f"unparsable LESSONS reply: {err}")
        known = set(job.state.lessons[role])
        fresh = [lesson for lesson in dict.fromkeys(new) if lesson not in known]
        evidence["lessons"] = fresh
        lessons = {**job.state.lessons, role: [*job.state.lessons[role], *fresh]}
        candidate = job.bundle(lessons)
        if not fresh:
            return reject(candidate, "no new lesson")
        try:
            candidate = ctx.validate(candidate)
        except BundleError as err:
            return reject(candidate, str(err))
        rows = await job.val_rows(candidate)
        if rows is None:
            return reject(candidate, "the budget ran out during validation", by="budget")
        gate = strictly_better(rows, current_rows, order=[p.id for p in job.val])
        if not gate.paired.rows:
            return reject(candidate, "no validation row came back for both bundles "
                          "(infrastructure): not compared", by="gate")
        evidence["val_rows"] = len(gate.paired.rows)
        scores = {"val": gate.candidate, "val_current": gate.incumbent}
        if not gate.adopted:
            return reject(candidate, "not strictly better on validation", by="gate",
                          scores=scores)
        ctx.record_proposal(candidate, parent=parent, roles=[role], accepted=True,
                            scores=scores, scored_on="val", iteration=cycle,
                            reason=json.dumps({**evidence, "verdict": "strictly better"}))
        ctx.record_candidate(candidate, scores=mean_score(rows), parent=parent,
                             iteration=cycle,
                             note=f"cycle {cycle}: {len(fresh)} lesson(s) for {role}")
        job.state.lessons = lessons


def make(**settings: object) -> Hivemind:
    """The factory of `OPTIMIZERS["hivemind"]`: keyword settings of `HivemindSettings`.

    >>> make(batch_size=3).settings.batch_size
    3
    """
    return Hivemind(settings=HivemindSettings(**settings))  # type: ignore[arg-type]
