"""`tavo`: trajectory-aware verbalized optimization (OpenReview dkbQwUp9gW), our build.

Contract (steps in `docs/optimizers/tavo.md`):
- Batches, drawn once from `random.Random("tavo:<optimizer seed>")`: `train_batch` train rows
  (fewer when train is smaller) and a validation batch of `val_batch_size(B, |val|)` rows,
  `max(3, (B - 30) // 6)` capped at |val| unless `val_batch` is set.
- The seed is scored once on the validation batch (iteration 0). A round: the chain's bundle
  on the train batch (iteration = round number) -> `split_transcript` -> one judge call per
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

import asyncio
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError, bundle_hash, thaw
from lcb.optimize.graph import STEP_KEYS, invocations
from lcb.optimize.method import Bundle, OptimizeContext, Rollout
from lcb.optimize.methods import tavo_prompts as tp
from lcb.optimize.methods.reflection import clip
from lcb.optimize.methods.tavo_parts import (  # noqa: F401 - re-exported for tests and docs
    EPS,
    OVERLAY_BEGIN,
    OVERLAY_END,
    gate,
    mean_of,
    merge_fallback,
    overlay_rules,
    paired_gate,
    pick_sources,
    propose,
    with_overlay,
)
from lcb.optimize.settings import check_int_fields
from lcb.teams.centralized import MANAGER, TOOL

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
    update_mode: Literal["overlay", "rewrite"] = "overlay"
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
        if self.update_mode not in ("overlay", "rewrite"):
            raise ValueError(f"tavo setting update_mode must be 'overlay' or 'rewrite', "
                             f"got {self.update_mode!r}")
        if self.min_rules > self.max_rules:
            raise ValueError(f"tavo settings min_rules ({self.min_rules}) must not exceed "
                             f"max_rules ({self.max_rules})")

    @property
    def caps(self) -> dict[str, int]:
        return {"add": self.max_add, "remove": self.max_remove,
                "restructure": self.max_restructure}


SETTINGS = TavoSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


# --- sub-trajectories ---------------------------------------------------------------------
@dataclass
class SubTrajectory:
    """One step of a run: the acting agent's turn and what belongs to it (`split_transcript`)."""

    agent: str
    role: str
    step: int | None
    entries: list[dict[str, Any]] = field(default_factory=list)


def _step_of(entry: Mapping[str, Any]) -> int | None:
    return next((entry[key] for key in STEP_KEYS if key in entry), None)


def _turns(entries: Sequence[Mapping[str, Any]]) -> list[SubTrajectory]:
    """One sub-trajectory per assistant message, with the tool replies that follow it."""
    steps: list[SubTrajectory] = []
    for entry in entries:
        if entry.get("type") == "assistant":
            steps.append(SubTrajectory(str(entry.get("source")), str(entry.get("role")),
                                       _step_of(entry), [dict(entry)]))
        elif entry.get("type") == "tool" and steps and steps[-1].agent == entry.get("source"):
            steps[-1].entries.append(dict(entry))
    return steps


def split_transcript(transcript: Sequence[Mapping[str, Any]], *,
                     topology: str) -> list[SubTrajectory]:
    """A run cut into sub-trajectories (system and user messages are inputs, left out).

    Centralized: one per manager turn: the manager's message, then the runs of the workers it
    delegated to in that turn (their messages and tool replies), then the tool replies the
    manager got. A worker run belongs to the turn whose `delegate` call names that worker
    with an instruction its user message holds (first unmatched call), else to the last
    manager turn. Other teams (and a centralized run without a manager turn): one per agent
    turn (assistant message) plus the tool replies after it.
    """
    manager = [e for e in transcript if e.get("source") == MANAGER]
    steps = _turns(manager) if topology == "centralized" else []
    if not steps:
        return _turns(transcript)
    pending = [[(str(c["args"].get("worker")), str(c["args"].get("instruction") or "").strip())
                for c in step.entries[0].get("tool_calls") or ()
                if c.get("name") == TOOL and not c.get("invalid") and isinstance(c.get("args"),
                                                                                  Mapping)]
               for step in steps]
    inserted = [1] * len(steps)  # where the next worker run goes: after the manager's message
    for run in invocations([e for e in transcript if e.get("source") != MANAGER]):
        home = _home(run, pending)
        kept = [dict(e) for e in run if e.get("type") in ("assistant", "tool")]
        steps[home].entries[inserted[home]:inserted[home]] = kept
        inserted[home] += len(kept)
    return steps


def _home(run: Sequence[Mapping[str, Any]], pending: list[list[tuple[str, str]]]) -> int:
    source = str(run[0].get("source"))
    asked = "\n".join(str(e.get("content") or "") for e in run if e.get("type") == "user")
    for index, calls in enumerate(pending):
        for position, (worker, instruction) in enumerate(calls):
            if worker == source and instruction and instruction in asked:
                del calls[position]
                return index
    return len(pending) - 1


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
        rng = random.Random(f"{KEY}:{ctx.optimizer_seed}")
        batch = rng.sample(train, min(self.settings.train_batch, len(train)))
        val_rows = rng.sample(val, val_batch_size(ctx.ledger.total, len(val),
                                                  self.settings.val_batch))
        least = 2 * len(val_rows) + len(batch)
        if ctx.ledger.available < least:
            log.warning("tavo: a budget of %d rollouts cannot pay for the seed's scoring and "
                        "one round (%d); keeping the seed", ctx.ledger.available, least)
            return None
        seed = thaw(ctx.seed_bundle)
        seed_rows = await _rows(ctx, seed, val_rows)
        score, margin = mean_of(seed_rows), self.settings.gate_margin
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


async def _rows(ctx: OptimizeContext, bundle: Mapping[str, str],
                rows: Sequence[Problem]) -> dict[str, float | None]:
    """Each row's score at iteration 0 (paired request seeds); None: no rollout came back."""
    results = await ctx.rollouts(bundle, list(rows), iteration=0)
    return {p.id: None if r is None else r.score for p, r in zip(rows, results, strict=True)}


def _reason(evidence: Mapping[str, Any], verdict: str) -> str:
    return json.dumps({**evidence, "verdict": verdict}, ensure_ascii=False, sort_keys=True)


@dataclass
class Credit:
    """Steps 2-5 of one round: sub-trajectory judgments, agent credit, merged edits per role."""

    settings: TavoSettings
    ctx: OptimizeContext
    chain: Bundle
    evidence: dict[str, Any]

    async def edits_by_role(self, runs: Sequence[tuple[Problem, Rollout]]) -> dict[str, tp.Edits]:
        s, ctx = self.settings, self.ctx
        splits = [split_transcript(r.team.transcript, topology=ctx.topology) for _, r in runs]
        asks = [self._step_prompt(p, r, steps, k) for (p, r), steps in zip(runs, splits,
                                                                           strict=True)
                for k in range(len(steps))]
        replies = await asyncio.gather(*(ctx.judge(a, purpose=f"{KEY}:subtraj",
                                                   temperature=s.subtraj_temperature)
                                         for a in asks))
        parsed = iter([tp.parse_step(reply) for reply in replies])
        judged = [[next(parsed) for _ in steps] for steps in splits]
        agents = [(i, agent, role) for i, (_, r) in enumerate(runs)
                  for agent, role in tp.actors(r.team.transcript).items()]
        credit_asks = [self._agent_prompt(runs[i], splits[i], judged[i], agent, role)
                       for i, agent, role in agents]
        answers = await asyncio.gather(*(ctx.judge(a, purpose=f"{KEY}:agent",
                                                   temperature=s.agent_temperature)
                                         for a in credit_asks))
        credits = [tp.parse_credit(answer) for answer in answers]
        self._note(runs, splits, judged, agents, credits)
        by_role: dict[str, list[tuple[float, str, tp.Edits]]] = {}
        for (i, agent, role), credit in zip(agents, credits, strict=True):
            if credit is not None and any(credit.edits.values()) and role in self.chain:
                by_role.setdefault(role, []).append(
                    (credit.score, f"run {i + 1}, agent {agent}, score {credit.score:g}",
                     credit.edits))
        self.evidence["sources"] = {role: [min(len(found), s.merge_sources), len(found)]
                                    for role, found in by_role.items()}
        merged = await asyncio.gather(*(self._merge(role, pick_sources(found, s.merge_sources))
                                        for role, found in by_role.items()))
        return dict(zip(by_role, merged, strict=True))

    def _step_prompt(self, problem: Problem, rollout: Rollout, steps: list[SubTrajectory],
                     k: int) -> str:
        s = self.settings
        earlier = tp.render_steps([st.entries for st in steps[:k]], clip_chars=s.clip_chars)
        current = tp.render_steps([steps[k].entries], clip_chars=s.clip_chars, first=k + 1)
        return tp.subtraj_prompt(
            topology=self.ctx.topology, task=clip(problem.statement, s.context_chars),
            outcome=tp.outcome_text(rollout.score, rollout.feedback, chars=s.clip_chars),
            earlier=clip(earlier, s.context_chars), step=clip(current, s.context_chars),
            actor=f"{steps[k].agent} (role {steps[k].role})", number=k + 1, total=len(steps))

    def _agent_prompt(self, run: tuple[Problem, Rollout], steps: list[SubTrajectory],
                      judged: list[tp.StepJudgment | None], agent: str, role: str) -> str:
        s, (problem, rollout) = self.settings, run
        transcript = rollout.team.transcript
        mine = [e for e in transcript if e.get("source") == agent]
        said = "\n".join(tp.render_entry(e, clip_chars=s.clip_chars) for e in mine
                         if e.get("type") == "assistant")
        usage = dict(rollout.team.fields.get("usage_by_agent", {}).get(agent, {}))
        usage["tool_calls"] = sum(len(e.get("tool_calls") or ()) for e in mine)
        return tp.agent_prompt(
            topology=self.ctx.topology, agent=agent, role=role,
            task=clip(problem.statement, s.context_chars),
            outcome=tp.outcome_text(rollout.score, rollout.feedback, chars=s.clip_chars),
            step_scores=clip(tp.step_scores([(st.agent, j) for st, j in zip(
                steps, judged, strict=True)]), s.context_chars),
            prompt=self.chain.get(role, ""),
            asked=clip(tp.asked_of(transcript, agent), s.context_chars) or "(nothing)",
            said=clip(said, s.context_chars) or "(nothing)",
            usage=", ".join(f"{k} {v}" for k, v in sorted(usage.items())))

    async def _merge(self, role: str, sources: list[tuple[str, tp.Edits]]) -> tp.Edits:
        s = self.settings
        reply = await self.ctx.reflect(tp.merge_prompt(role=role, sources=sources, caps=s.caps),
                                       purpose=f"{KEY}:merge", temperature=s.merge_temperature)
        data = tp.json_object(reply)
        merged = tp.parse_edits(data) if data is not None else None
        how = self.evidence.setdefault("merge", {})
        if merged is None or not any(merged.values()):
            how[role] = "fallback"
            merged = merge_fallback([e for _, e in sources], s.caps)
        else:
            how[role] = "llm"
            merged = {kind: merged[kind][:s.caps[kind]] for kind in tp.EDIT_KINDS}
        self.evidence.setdefault("edits", {})[role] = merged
        return merged

    def _note(self, runs: Sequence[tuple[Problem, Rollout]], splits: list[list[SubTrajectory]],
              judged: list[list[tp.StepJudgment | None]], agents: list[tuple[int, str, str]],
              credits: list[tp.AgentCredit | None]) -> None:
        steps: dict[str, list[float]] = {}
        for run_steps, run_judged in zip(splits, judged, strict=True):
            for step, judgment in zip(run_steps, run_judged, strict=True):
                if judgment is not None:
                    steps.setdefault(step.agent, []).append(sum(judgment.scores()) / 3)
        by_agent: dict[str, list[float]] = {}
        by_role: dict[str, list[float]] = {}
        for (_, agent, role), credit in zip(agents, credits, strict=True):
            if credit is not None:
                by_agent.setdefault(agent, []).append(credit.score)
                by_role.setdefault(role, []).append(credit.score)
        mean = {name: round(sum(v) / len(v), 3) for name, v in steps.items()}
        self.evidence["credit"] = [_credit_note(runs[i][0].id, agent, role, credit)
                                   for (i, agent, role), credit in zip(agents, credits,
                                                                       strict=True)]
        self.evidence.update(
            steps=mean, agents={a: round(sum(v) / len(v), 3) for a, v in by_agent.items()},
            roles={r: round(sum(v) / len(v), 3) for r, v in by_role.items()},
            unusable={"subtraj": sum(j is None for js in judged for j in js),
                      "agent": sum(c is None for c in credits)},
            calls={"subtraj": sum(map(len, splits)), "agent": len(agents)})


def _credit_note(task: str, agent: str, role: str, credit: tp.AgentCredit | None
                 ) -> dict[str, Any]:
    """One (task, agent) credit as the history shows it: clipped, the edits before merging."""
    note: dict[str, Any] = {"task": task, "agent": agent, "role": role}
    if credit is None:
        return {**note, "unusable": True}
    return {**note, "score": credit.score, "analysis": clip(credit.causal_analysis, 240),
            "edits": {k: [clip(item, 120) for item in v] for k, v in credit.edits.items() if v}}


def make(**settings: object) -> Tavo:
    """The factory of `OPTIMIZERS["tavo"]`: keyword settings of `TavoSettings`."""
    return Tavo(settings=TavoSettings(**settings))  # type: ignore[arg-type]
