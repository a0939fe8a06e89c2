"""`tavo`: trajectory-aware verbalized optimization (OpenReview dkbQwUp9gW), our build.

Contract (steps in `docs/optimizers/tavo.md`):
- Batches, drawn once from `random.Random("tavo:<optimizer seed>")` (`strategies.batches`:
  `draw`, train first): `train_batch` train rows (fewer when train is smaller) and a
  validation batch of `val_batch_size(B, |val|)` rows, `max(3, (B - 30) // 6)` capped at
  |val| unless `val_batch` is set.
- The seed is scored once on the validation batch (iteration 0). A round: the chain's bundle
  on the train batch (iteration = round number) -> `tavo_credit` (`split_transcript` and
  `Credit`: they make uncharged calls only) -> one judge call per
  sub-trajectory (`tavo:subtraj`, T = 0.3) -> one judge call per (task, agent that took a
  turn) (`tavo:agent`, T = 0.5) -> per role one merge call (`tavo:merge`, reflect) over the
  edits of every agent holding it (replicas of a shared prompt collapse onto their role),
  with `merge_fallback` when the reply is unusable (at most `merge_sources` edit sets, the
  lowest credit first) -> the policy update (`tavo:update`, reflect; `tavo_parts.propose`):
  `overlay` (default: offending rules dropped, >= `min_rules` must be left) or `rewrite`
  (each role checked alone; an invalid one keeps the chain's text) -> `ctx.validate` -> the
  candidate on the validation batch (iteration 0: request seeds paired with the seed's) ->
  the gate.
- Gate (`paired_gate`), over the validation rows where the seed, the best adopted bundle and
  the candidate all got a rollout (none: not adopted): adopted iff its mean there >= the
  seed's + `gate_margin` and >= the best's. The chain moves to the newest candidate even when
  it is rejected. A rejected round (or a round without a usable update) is followed by a
  retry, which is the next round; `keep_going` stops after `patience` rejected rounds in a row
  or `max_rounds` rounds. That the retries count among the rounds is what makes the batch rule
  exact: V + 5 (6 + V) = B. No round runs when the seed's score + `gate_margin` > 1 (nothing
  could pass) or the seed got no validation rollout; the seed's record says why.
- Budget: nothing is charged unless the seed's scoring plus one round fit (V + 6 + V); a
  round starts only when `6 + V` units are available (its train batch and its scoring).
- History: the seed's score (a candidate), every round's proposal (kept, rejected by the gate,
  or rejected by the validator: the bundle proposed when one was written, else the parent with
  the reply clipped) with its parent, the roles it changed and the evidence (train scores,
  step and agent credit, each (task, agent) credit with its edits before the merge, merged
  edits, how each merge went, the rules kept and dropped or the roles rewritten and dropped,
  the gate's numbers) as JSON in `reason`; each adopted candidate again as a candidate.
- Resume: `ctx.checkpoint` after the seed's scoring and after every round holds the whole
  state (batches, chain, its rules, the base texts, best, per-row scores, counters); a rerun
  restores it with `fast_forward` and continues with the next round. The result is a NEW
  dict: the best adopted bundle, else the seed. `single` is refused (ValueError).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError, bundle_hash, thaw
from lcb.optimize.method import Bundle, Evaluator, OptimizeContext
from lcb.optimize.methods.tavo_credit import Credit
from lcb.optimize.methods.tavo_parts import (  # noqa: F401 - re-exported for tests and docs
    EPS,
    OVERLAY_BEGIN,
    OVERLAY_END,
    gate,
    merge_fallback,
    overlay_rules,
    paired_gate,
    propose,
    with_overlay,
)
from lcb.optimize.settings import check_int_fields
from lcb.optimize.strategies.batches import draw, seeded_rng
from lcb.optimize.strategies.gates import pair, scores_of

KEY = "tavo"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TavoSettings:
    """The method's knobs (the reference values of METHODS.md are the defaults)."""

    train_batch: int = 6
    val_batch: int | None = None  # None: max(3, (B - 30) // 6), capped at |val|
    max_rounds: int = 5
    patience: int = 2  # rejected rounds in a row that end the run (a rejection gets 1 retry)
    gate_margin: float = 0.01
    # TAVO's own policy update rewrites each credited role's prompt; "truce_overlay" is the
    # follow-up (TRUCE) release's shared block of 3-6 team rules, a setting named for it
    update_mode: Literal["rewrite", "truce_overlay"] = "rewrite"
    min_rules: int = 3
    max_rules: int = 6
    max_add: int = 6
    max_remove: int = 4
    max_restructure: int = 4
    subtraj_temperature: float = 0.3
    agent_temperature: float = 0.5
    merge_temperature: float = 0.3
    update_temperature: float = 0.7
    clip_chars: int = 1500  # per transcript message shown to a judge
    context_chars: int = 6000  # the step under judgment, earlier steps, step scores, ...
    merge_sources: int = 8  # (run, agent) edit sets one merge call sees at most

    def __post_init__(self) -> None:
        check_int_fields(self, KEY)
        for item in fields(self):
            value = getattr(self, item.name)
            if item.type == "float" and not 0 <= value <= (1 if item.name == "gate_margin"
                                                          else 2):
                raise ValueError(f"tavo setting {item.name} is out of range, got {value!r}")
        if self.update_mode not in ("rewrite", "truce_overlay"):
            raise ValueError(f"tavo setting update_mode must be 'rewrite' (TAVO's per-role "
                             f"update) or 'truce_overlay' (TRUCE's shared rules), got "
                             f"{self.update_mode!r}")
        if self.min_rules > self.max_rules:
            raise ValueError(f"tavo settings min_rules ({self.min_rules}) must not exceed "
                             f"max_rules ({self.max_rules})")

    @property
    def caps(self) -> dict[str, int]:
        return {"add": self.max_add, "remove": self.max_remove,
                "restructure": self.max_restructure}


SETTINGS = TavoSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


# --- the schedule -----------------------------------------------------------------------
def keep_going(*, rounds: int, streak: int, settings: TavoSettings) -> bool:
    """Another round (or retry)? Not after `max_rounds`, nor after `patience` rejections in a
    row."""
    return rounds < settings.max_rounds and streak < settings.patience


def val_batch_size(budget: int, n_val: int, setting: int | None = None) -> int:
    """Rows of the validation batch: `setting`, else max(3, (B - 30) // 6); at most |val|.

    >>> val_batch_size(600, 50), val_batch_size(12, 50), val_batch_size(90, 3)
    (50, 3, 3)
    """
    wanted = max(3, (budget - 30) // 6) if setting is None else setting
    return min(wanted, n_val)


# --- the method ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Tavo:
    """See the module docstring."""

    settings: TavoSettings = field(default_factory=TavoSettings)
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """The seed and one candidate on the validation batch, and one train batch."""
        n_val = len(ctx.data.validation)
        val_rows = val_batch_size(ctx.ledger.total, n_val, self.settings.val_batch)
        return (2 * val_rows + min(self.settings.train_batch, len(ctx.data.train)),
                "the seed's scoring and one round")

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The best adopted bundle after at most `max_rounds` rounds (a new dict)."""
        if ctx.topology == "single":
            raise ValueError("tavo optimizes multi-agent teams; the single agent has no "
                             "sub-trajectories to credit (use identity, gepa or mipro)")
        train, val = list(ctx.data.train), list(ctx.data.validation)
        if not train or not val:
            raise ValueError(f"tavo needs train and validation problems; got {len(train)} "
                             f"train and {len(val)} validation")
        state = ctx.restore(fast_forward=True)
        if state is None:
            state = await self._start(ctx, train, val)
            if state is None:
                return thaw(ctx.seed_bundle)
        rows = {p.id: p for p in [*train, *val]}
        batch = [rows[i] for i in state["train_ids"]]
        val_rows = [rows[i] for i in state["val_ids"]]
        cost = len(batch) + len(val_rows)
        while keep_going(rounds=state["round"], streak=state["streak"], settings=self.settings):
            if state.get("stop"):
                log.info("tavo: %s; stopping", state["stop"])
                break
            if ctx.ledger.available < cost:
                log.info("tavo: %d rollouts left, a round costs %d; stopping",
                         ctx.ledger.available, cost)
                break
            state = await self._round(ctx, state, batch, val_rows)
            ctx.checkpoint(state)
        return dict(state["best"])

    async def _start(self, ctx: OptimizeContext, train: list[Problem],
                     val: list[Problem]) -> dict[str, Any] | None:
        rng = seeded_rng(KEY, ctx.optimizer_seed)
        batch = draw(train, self.settings.train_batch, rng)
        val_rows = draw(val, val_batch_size(ctx.ledger.total, len(val), self.settings.val_batch),
                        rng)
        least = 2 * len(val_rows) + len(batch)
        if ctx.ledger.available < least:
            log.warning("tavo: a budget of %d rollouts cannot pay for the seed's scoring and "
                        "one round (%d); keeping the seed", ctx.ledger.available, least)
            return None
        seed = thaw(ctx.seed_bundle)
        seed_rows = await _rows(ctx, seed, val_rows)
        score, margin = pair(seed_rows).mean(0), self.settings.gate_margin
        stop = None
        if all(v is None for v in seed_rows.values()):
            stop = "the seed got no rollout on the validation batch"
        elif score + margin > 1 + EPS:
            stop = (f"the seed scores {score:g} on the validation batch: no candidate can "
                    f"reach seed + gate_margin ({margin:g}) above 1")
        ctx.record_candidate(seed, scores={"val_batch": score}, iteration=0,
                             note=f"seed on the validation batch ({len(val_rows)} rows)"
                             + (f"; {stop}" if stop else ""))
        state = {"round": 0, "streak": 0, "chain": seed, "best": seed, "seed_score": score,
                 "best_score": score, "train_ids": [p.id for p in batch],
                 "val_ids": [p.id for p in val_rows], "adopted": [], "base": seed,
                 "rules": [], "seed_rows": seed_rows, "best_rows": seed_rows, "stop": stop}
        ctx.checkpoint(state)
        return state

    async def _round(self, ctx: OptimizeContext, state: dict[str, Any], batch: list[Problem],
                     val_rows: list[Problem]) -> dict[str, Any]:
        number, chain = state["round"] + 1, dict(state["chain"])
        rollouts = await ctx.rollouts(chain, batch, iteration=number)
        runs = [(p, r) for p, r in zip(batch, rollouts, strict=True) if r is not None]
        evidence: dict[str, Any] = {"round": number, "mode": self.settings.update_mode,
                                    "train": {p.id: r.score for p, r in runs}}
        edits = await Credit(self.settings, ctx, chain, evidence).edits_by_role(runs)
        update = await propose(ctx, self.settings, chain=chain, base=state["base"],
                               rules=state["rules"], edits=edits, evidence=evidence)
        candidate, proposed, why = update.bundle, update.proposed, update.why
        parent = bundle_hash(chain)
        next_state = {**state, "round": number, "streak": state["streak"] + 1}
        if candidate is not None:
            try:
                candidate = ctx.validate(candidate)
            except BundleError as err:
                candidate, proposed, why = None, candidate, str(err)
        if candidate is None:
            shown = proposed or chain
            ctx.record_proposal(shown, parent=parent, accepted=False, rejected_by="validator",
                                roles=[role for role in chain if shown[role] != chain[role]],
                                reason=_reason(evidence, why), iteration=number)
            return next_state
        next_state.update(chain=candidate, rules=update.rules)
        rows = await _rows(ctx, candidate, val_rows)
        adopted, numbers = paired_gate(rows, seed=state["seed_rows"], best=state["best_rows"],
                                       margin=self.settings.gate_margin)
        evidence["gate"] = numbers
        score = numbers.get("score")
        verdict = ("adopted" if adopted else "below seed + margin or the best so far"
                   if score is not None else "no validation row paired with the seed's")
        ctx.record_proposal(candidate, parent=parent, accepted=adopted,
                            roles=[role for role in chain if candidate[role] != chain[role]],
                            scores={} if score is None else {"val_batch": score},
                            scored_on="val_batch", rejected_by=None if adopted else "gate",
                            reason=_reason(evidence, verdict), iteration=number)
        if not adopted:
            return next_state
        ctx.record_candidate(candidate, scores={"val_batch": score}, iteration=number,
                             parent=parent, note=f"round {number}: adopted")
        return {**next_state, "streak": 0, "best": candidate, "best_score": score,
                "best_rows": rows, "adopted": [*state["adopted"], number]}


async def _rows(evaluator: Evaluator, bundle: Mapping[str, str],
                rows: Sequence[Problem]) -> dict[str, float | None]:
    """Each row's score at iteration 0 (paired request seeds); None: no rollout came back."""
    return scores_of(rows, await evaluator.rollouts(bundle, list(rows), iteration=0))


def _reason(evidence: Mapping[str, Any], verdict: str) -> str:
    return json.dumps({**evidence, "verdict": verdict}, ensure_ascii=False, sort_keys=True)


def make(**settings: object) -> Tavo:
    """The factory of `OPTIMIZERS["tavo"]`: keyword settings of `TavoSettings`."""
    return Tavo(settings=TavoSettings(**settings))  # type: ignore[arg-type]
