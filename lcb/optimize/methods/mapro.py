"""`mapro`: multi-agent prompt optimization as MAP inference (Zhang et al., arXiv 2510.07475).

Contract (docs/optimizers/mapro.md has the whole algorithm, the costs and the departures):
- Charged: the seed on the train rows (all of train, or `train_rows` drawn once from the
  optimizer seed, kept in train order: `strategies.batches.ordered_subset`), then one pass
  over the same rows per NEW MAP assignment; every pass runs at iteration 0, so all bundles
  are compared on the same request seeds. Nothing starts unless the budget pays for the seed
  pass and one more pass; once it cannot pay another whole pass the run stops before any
  further uncharged call (no blame, mutation, probe or judge is wasted).
- A rollout that infrastructure lost (None with budget left) is not a 0: two passes are
  compared on the rows both completed, and the missing rows are recorded.
- Pools: per role up to `pool_size` prompts, slot 0 the seed (never replaced). The seed pass's
  failing rows seed `pool_size - 1` mutations per role (one focus hint each); a role that never
  ran on the recorded rows keeps the seed alone (no evidence to choose by).
- Potentials (uncharged; `mapro_potentials.Potentials`): judged on the scoring batch, the first
  `scoring_batch` seed train transcripts (failed rows first, in train order), where the role ran.
  Node: a greedy probe of the candidate on the role's recorded input, scored 1..10 by a judge.
  Edge (parent -> child): the parent candidate's probe output put in place of what the child's
  recorded input quoted, a probe of the child candidate on that, scored 1..10. A potential is
  the mean score / 10; an unparsable judge reply scores `judge_default`, counted and recorded.
- MAP: `map.solve_map` (exact, log space, lowest pool slots win ties) on `ctx.graph`; the
  potentials are exact fractions, so equal products tie exactly.
- Blame and mutation: on the `feedback_rows` worst rows of the latest pass, each child
  critiques each parent (`parent_blame` 0..10); roles blamed at least the mean get `mutations`
  trust-region revisions of the prompt that ran (similarity >= `trust_region`), which join the
  pool or replace its weakest member (lowest node potential) other than the seed, the best
  bundle's, the latest assignment's and this round's new ones. Each role's mutation reads at
  most `max_critiques` critiques, each clipped to `clip_chars`.
- Acceptance (`strategies.gates.strictly_better`): an assignment is the new incumbent only
  when its train score is strictly above the best's on the rows both completed (the seed
  first). At most `max_rounds` rounds; stop
  after `patience` rounds without a new best, at a perfect train score, or when the budget
  cannot pay a pass.
- History: every pool mutation is a proposal (accepted = joined the pool; else `validator`
  with the reason: unparsable, invalid, outside the trust region, a duplicate); every round's
  MAP assignment is a proposal: scored on `train` (`gate` when not better), or `gate` with
  `already_scored` when that bundle was scored before; its `reason` (one-line JSON) holds the
  pool slots, the node and edge log terms, the blame behind the pools, the judge defaults since
  the last round and the compared / missing rows; each new best also a candidate.
- Resume: retrace. Everything is journaled, so a rerun replays the same rollouts and answers
  in the same order; `ctx.checkpoint` after each round, and the retraced state must equal the
  checkpoint of the same round (`MaproDiverged` otherwise).
- `single` is refused (ValueError): the method needs a team. numpy (`map`) is imported only
  when the method runs, so the registry imports without it.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lcb.agents.prompts import placeholders_in
from lcb.optimize.bundle import BundleError, bundle_hash, thaw
from lcb.optimize.method import Bundle, OptimizeContext, Rollout
from lcb.optimize.methods import mapro_prompts as P
from lcb.optimize.methods.mapro_potentials import Potentials
from lcb.optimize.methods.mapro_prompts import first_turn, link
from lcb.optimize.settings import check_int_fields
from lcb.optimize.strategies.batches import ordered_subset, seeded_rng
from lcb.optimize.strategies.gates import strictly_better
from lcb.text import clip

KEY = "mapro"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaproSettings:
    """The method's knobs (the reference values are the defaults)."""

    pool_size: int = 5
    max_rounds: int = 8
    patience: int = 3
    scoring_batch: int = 3  # recorded seed transcripts the potentials are judged on
    feedback_rows: int = 3  # worst rows of a pass that blame and mutation read
    mutations: int = 2  # new pool members per blamed role and round
    train_rows: int | None = None  # None: the whole train split
    trust_region: float = 0.5  # least similarity of a mutation to the prompt it revises
    judge_default: int = 5  # the score of an unparsable judge reply
    probe_temperature: float = 0.0
    clip_chars: int = 3000  # per text shown to a judge or the mutator (critiques too)
    max_critiques: int = 6  # teammates' critiques one role's mutation reads at most
    preference_demos: int = 1  # better/worse pairs from the seed's train runs per judge; 0: none

    def __post_init__(self) -> None:
        check_int_fields(self, KEY, least={"pool_size": 2, "preference_demos": 0})
        if not P.SCORE_RANGE[0] <= self.judge_default <= P.SCORE_RANGE[1]:
            raise ValueError(f"mapro setting judge_default must be within {P.SCORE_RANGE}, "
                             f"got {self.judge_default!r}")
        if not 0.0 <= self.trust_region <= 1.0:
            raise ValueError(f"mapro setting trust_region must be within [0, 1], "
                             f"got {self.trust_region!r}")
        if not 0.0 <= self.probe_temperature <= 2.0:
            raise ValueError(f"mapro setting probe_temperature must be within [0, 2], "
                             f"got {self.probe_temperature!r}")


SETTINGS = MaproSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


class MaproDiverged(RuntimeError):
    """A resumed run retraced to another state than the interrupted run's checkpoint."""


TRAIN_ITERATION = 0  # every train pass: the same request seeds for every bundle


@dataclass
class Pass:
    """One charged pass of a bundle over the train rows: the rollouts that completed (train
    order) and the ids of the rows infrastructure lost."""

    bundle: Bundle
    rollouts: list[Rollout]
    missing: list[str]

    @property
    def score(self) -> float:
        """The mean score over the completed rows (0.0 when none completed)."""
        scores = [r.score for r in self.rollouts]
        return sum(scores) / len(scores) if scores else 0.0

    @property
    def scores(self) -> dict[str, float]:
        """Each completed row's score, in train order."""
        return {r.problem_id: r.score for r in self.rollouts}

    def worst(self, count: int) -> list[Rollout]:
        """The failed rollouts, lowest score first, then train order."""
        failed = sorted((r for r in self.rollouts if not r.passed), key=lambda r: r.score)
        return failed[:count]


class _Run:
    """One optimization: the pools, the potentials, the incumbent (see the module docstring)."""

    def __init__(self, ctx: OptimizeContext, settings: MaproSettings) -> None:
        self.ctx, self.s, self.graph = ctx, settings, ctx.graph
        self.seed = thaw(ctx.seed_bundle)
        self.rows = self._rows()
        self.expected = ctx.restore()
        self.pools: dict[str, list[str]] = {role: [self.seed[role]] for role in self.graph.roles}
        self.scores: dict[str, float] = {}
        self.best: Pass | None = None
        self.latest: Pass | None = None
        self.potentials: Potentials | None = None
        self.patience = 0
        self.blame: dict[str, float] | None = None  # the blame behind the latest mutations
        self.defaults_seen = 0  # judge defaults already reported in a MAP proposal

    def _rows(self) -> list:
        return ordered_subset(self.ctx.data.train, self.s.train_rows,
                              seeded_rng(KEY, self.ctx.optimizer_seed))

    async def run(self) -> Bundle:
        need = len(self.rows)
        if not need or self.ctx.ledger.available < 2 * need:
            log.warning("mapro: a budget of %d cannot pay for the seed pass and one MAP pass "
                        "(%d each); keeping the seed", self.ctx.ledger.available, need)
            return thaw(self.seed)
        seed_pass = await self._pass(self.seed)
        if seed_pass is None:
            return thaw(self.seed)
        self.best = self.latest = seed_pass
        self.ctx.record_candidate(self.seed, scores={"train": seed_pass.score}, note="seed",
                                  iteration=0)
        if seed_pass.score < 1.0 and self._affords_pass():
            self.potentials = Potentials(self.ctx, self.s, self.seed, seed_pass.rollouts)
            await self._seed_pools(seed_pass)
            self._checkpoint(0)
            for round_ in range(1, self.s.max_rounds + 1):
                if not await self._round(round_):
                    break
        self._check_retraced_to_the_end()
        return dict(self.best.bundle)

    def _affords_pass(self) -> bool:
        ledger = self.ctx.ledger
        return not ledger.exhausted and ledger.available >= len(self.rows)

    async def _pass(self, bundle: Bundle) -> Pass | None:
        results = await self.ctx.rollouts(bundle, self.rows, iteration=TRAIN_ITERATION)
        if any(r is None for r in results) and self.ctx.ledger.available <= 0:
            return None  # cut by the budget: a partial pass is not comparable
        done = [r for r in results if r is not None]  # None with budget left: infra, missing
        missing = [row.id for row, r in zip(self.rows, results, strict=True) if r is None]
        scored = Pass(dict(bundle), done, missing)
        self.scores[bundle_hash(bundle)] = scored.score
        return scored

    # --- a round ------------------------------------------------------------------------
    async def _round(self, round_: int) -> bool:
        """One round; False when the run stops."""
        from lcb.optimize.methods.map import solve_map  # numpy: imported when the method runs

        assert self.potentials is not None and self.best is not None and self.latest
        if not self._affords_pass():
            return False  # no probe or judge whose assignment could not be scored
        await self.potentials.update(self.pools)
        node, edges = self.potentials.tables(self.pools)
        slots = solve_map(self.graph.roles, node, edges, kind=self.graph.kind)
        bundle = {role: self.pools[role][slots[role]] for role in self.graph.roles}
        evidence = self._evidence(round_, slots, node, edges)
        key = bundle_hash(bundle)
        if key in self.scores:  # scored before: nothing new to charge
            self.patience += 1
            self._record_map(bundle, None, {**evidence, "already_scored": self.scores[key]},
                             rejected_by="gate", iteration=round_)
        else:
            scored = await self._pass(bundle)
            if scored is None:
                self._record_map(bundle, None, evidence, rejected_by="budget", iteration=round_)
                return False
            better = self._compare(scored, evidence)
            self._record_map(bundle, scored.score, evidence,
                             rejected_by=None if better else "gate", iteration=round_)
            if better:
                self.ctx.record_candidate(bundle, scores={"train": scored.score},
                                          note=f"MAP assignment of round {round_}",
                                          iteration=round_, parent=bundle_hash(self.best.bundle))
                self.best, self.patience = scored, 0
            else:
                self.patience += 1
            self.latest = scored
        stop = (self.best.score >= 1.0 or self.patience >= self.s.patience
                or round_ == self.s.max_rounds or not self._affords_pass())
        if not stop:
            await self._mutate(round_)
        self._checkpoint(round_)
        return not stop

    def _evidence(self, round_: int, slots: Mapping[str, int], node: Mapping,
                  edges: Mapping) -> dict:
        """What a MAP proposal's `reason` shows: slots, log terms, blame, new judge defaults."""
        assert self.potentials is not None
        fresh = self.potentials.defaults[self.defaults_seen:]
        self.defaults_seen = len(self.potentials.defaults)
        defaults: dict[str, int] = {}
        for entry in fresh:
            defaults[entry["purpose"]] = defaults.get(entry["purpose"], 0) + 1
        return {"round": round_, "slots": dict(slots),
                "node": {r: round(math.log(node[r][slots[r]]), 4) for r in node},
                "edges": {f"{p}>{c}": round(math.log(m[slots[p]][slots[c]]), 4)
                          for (p, c), m in edges.items()},
                "blame": self.blame, "judge_defaults": defaults}

    def _compare(self, scored: Pass, evidence: dict) -> bool:
        """Whether `scored` beats the best on the rows both completed (noted in `evidence`)."""
        assert self.best is not None
        gate = strictly_better(scored.scores, self.best.scores)
        evidence["compared"] = {"rows": len(gate.paired.rows),
                                "score": round(gate.candidate, 4),
                                "best": round(gate.incumbent, 4)}
        if scored.missing or self.best.missing:
            evidence["missing"] = {"assignment": scored.missing, "best": self.best.missing}
        return gate.adopted

    def _record_map(self, bundle: Bundle, score: float | None, evidence: dict, *,
                    rejected_by: str | None, iteration: int) -> None:
        assert self.best is not None
        parent = self.best.bundle
        changed = [r for r in self.graph.roles if bundle[r] != parent[r]]
        self.ctx.record_proposal(
            bundle, parent=bundle_hash(parent), roles=changed, accepted=rejected_by is None,
            scores=None if score is None else {"train": score},
            scored_on=None if score is None else "train", rejected_by=rejected_by,
            reason=json.dumps({"stage": "map", **evidence}, sort_keys=True),
            iteration=iteration)

    # --- pools: seeding and blame-driven mutation -----------------------------------------
    async def _seed_pools(self, seed_pass: Pass) -> None:
        assert self.potentials is not None
        failures = seed_pass.worst(self.s.feedback_rows)
        requests = []
        for role in self.graph.roles:
            if not self.potentials.node_contexts[role]:
                continue  # the role never ran on the recorded rows
            for variant in range(self.s.pool_size - 1):
                requests.append((role, self.seed[role], failures, [], variant))
        await self._propose(requests, base=self.seed, round_=0)

    async def _mutate(self, round_: int) -> None:
        assert self.latest is not None and self.potentials is not None
        failures = self.latest.worst(self.s.feedback_rows)
        with_evidence = [r for r in self.graph.roles if self.potentials.node_contexts[r]]
        if not with_evidence or not failures:
            return
        blame, critiques = await self._blame(failures)
        self.blame = {r: round(b, 3) for r, b in blame.items()}
        mean = sum(blame.get(r, 0.0) for r in with_evidence) / len(with_evidence)
        targets = [r for r in with_evidence if blame.get(r, 0.0) >= mean]
        requests = [(role, self.latest.bundle[role], failures, critiques.get(role, []),
                     round_ * self.s.mutations + m)
                    for role in targets for m in range(self.s.mutations)]
        await self._propose(requests, base=self.latest.bundle, round_=round_, blame=blame)

    async def _blame(self, failures: Sequence[Rollout]
                     ) -> tuple[dict[str, float], dict[str, list[str]]]:
        """Each child critiques each parent it read, per failed row: blame per role (the mean
        of its shares: b/10 as a parent, 1 - b/10 as a child) and the critiques."""
        assert self.potentials is not None
        edges = self.potentials.edges
        asks, where = [], []
        for rollout in failures:
            io = rollout.role_io
            for parent, child in edges:
                found = link(io, parent, child)
                if found is None:
                    continue
                _, child_turn, handed = found
                asks.append(P.blame_prompt(
                    topology=self.ctx.topology, parent=parent, child=child,
                    handed=clip(handed, self.s.clip_chars),
                    child_output=clip(child_turn.output, self.s.clip_chars),
                    feedback=clip(rollout.feedback or "(no feedback)", self.s.clip_chars)))
                where.append((parent, child))
        replies = await self.potentials.judge_all(asks, purpose="mapro:blame",
                                                  key="parent_blame", text_key="critique",
                                                  bounds=P.BLAME_RANGE)
        shares: dict[str, list[float]] = {}
        critiques: dict[str, list[str]] = {}
        for (parent, child), (value, text) in zip(where, replies, strict=True):
            shares.setdefault(parent, []).append(value / 10)
            shares.setdefault(child, []).append(1 - value / 10)
            said = f"{child}: {clip(text.strip(), self.s.clip_chars)}"
            kept = critiques.setdefault(parent, [])
            if text.strip() and said not in kept and len(kept) < self.s.max_critiques:
                kept.append(said)
        if not shares:  # no hand-off on these rows (replicas): the failures are every role's
            return {role: 1.0 for role in self.graph.roles}, {}
        return {r: sum(v) / len(v) for r, v in shares.items()}, critiques

    async def _propose(self, requests: list, *, base: Bundle, round_: int,
                       blame: Mapping[str, float] | None = None) -> None:
        assert self.potentials is not None
        prompts = [self._mutation_prompt(*request) for request in requests]
        replies = await self.potentials.gather(
            [lambda p=p: self.ctx.reflect(p, purpose="mapro:mutate") for p in prompts])
        added: set[str] = set()
        for (role, current, _, _, variant), reply in zip(requests, replies, strict=True):
            text = P.parse_prompt(reply)
            proposal = {**base, role: text if text is not None else reply.strip() or current}
            note = {"stage": "pool", "round": round_, "hint": self._hint(variant),
                    **({"blame": {r: round(b, 3) for r, b in blame.items()}} if blame else {})}
            problem = None
            if text is None:
                problem = "the reply has no complete marked prompt (truncated?)"
            else:
                try:
                    proposal = self.ctx.validate(proposal)
                except BundleError as err:
                    problem = str(err)
            if problem is None:
                problem = self._admit(role, current, proposal[role], added, note)
            self.ctx.record_proposal(proposal, parent=bundle_hash(base), roles=[role],
                                     accepted=problem is None,
                                     rejected_by=None if problem is None else "validator",
                                     reason=json.dumps({**note, **({"rejected": problem}
                                                       if problem else {})}, sort_keys=True),
                                     iteration=round_)

    def _admit(self, role: str, current: str, text: str, added: set[str],
               note: dict) -> str | None:
        """Put `text` in `role`'s pool (None), or say why not."""
        similarity = difflib.SequenceMatcher(None, current, text, autojunk=False).ratio()
        note["similarity"] = round(similarity, 3)
        pool = self.pools[role]
        if similarity < self.s.trust_region:
            return (f"outside the trust region: similarity {similarity:.3f} to the prompt it "
                    f"revises < {self.s.trust_region}")
        if text in pool:
            return f"a duplicate of pool slot {pool.index(text)}"
        if len(pool) < self.s.pool_size:
            pool.append(text)
        else:
            kept = {pool[0], *(p.bundle[role] for p in (self.best, self.latest) if p), *added}
            open_slots = [i for i, member in enumerate(pool) if member not in kept]
            if not open_slots:
                return "the pool has no member left to replace"
            assert self.potentials is not None
            weakest = min(open_slots, key=lambda i: (self.potentials.node_score(role, pool[i]),
                                                     -i))
            note["replaced_slot"] = weakest
            pool[weakest] = text
        added.add(text)
        return None

    def _hint(self, variant: int) -> str:
        return P.VARIANT_HINTS[variant % len(P.VARIANT_HINTS)]

    def _mutation_prompt(self, role: str, current: str, failures: Sequence[Rollout],
                         critiques: Sequence[str], variant: int) -> str:
        examples = []
        for rollout in failures:
            turn = first_turn(rollout.role_io, role)
            examples.append({
                "Outcome": "FAILED (the team's program did not pass)",
                "Grader feedback": clip(rollout.feedback or "(none)", self.s.clip_chars),
                "What the role was given": clip(turn.input, self.s.clip_chars) if turn
                else "(this role took no turn on this problem)",
                "What the role answered": clip(turn.output, self.s.clip_chars) if turn else "",
            })
        return P.mutation_prompt(topology=self.ctx.topology, role=role, current=current,
                                 examples=examples, critiques=critiques,
                                 hint=self._hint(variant), keep=self.s.trust_region,
                                 placeholders=sorted(placeholders_in(self.seed[role])))

    # --- checkpoints (retrace-and-check resume) -------------------------------------------
    def _state(self, round_: int) -> dict:
        assert self.best is not None
        return {"round": round_, "best": bundle_hash(self.best.bundle),
                "best_score": self.best.score, "patience": self.patience,
                "charged": self.ctx.ledger.charged, "scored": sorted(self.scores),
                "pools": {r: [bundle_hash({r: t}) for t in pool] for r, pool in
                          self.pools.items()}}

    def _checkpoint(self, round_: int) -> None:
        state = self._state(round_)
        if self.expected is not None and self.expected.get("round") == round_:
            if json.loads(json.dumps(state)) != self.expected:
                raise MaproDiverged(f"mapro: the resumed run reached round {round_} in another "
                                    f"state than the interrupted run: {state} != "
                                    f"{self.expected}")
            self.expected = None  # checked: the rest of the run is new
        self.ctx.checkpoint(state)

    def _check_retraced_to_the_end(self) -> None:
        if self.expected is not None:
            raise MaproDiverged(f"mapro: the resumed run ended before reaching the interrupted "
                                f"run's checkpoint (round {self.expected.get('round')})")


@dataclass(frozen=True)
class Mapro:
    """See the module docstring."""

    settings: MaproSettings = MaproSettings()
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """The seed's pass and one MAP assignment's pass over the train rows."""
        rows = len(ctx.data.train)
        if self.settings.train_rows is not None:
            rows = min(rows, self.settings.train_rows)
        return 2 * rows, "the seed's pass and one MAP pass"

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after a MAPRO run within `ctx`'s budget (a new dict)."""
        if ctx.graph.kind == "single":
            raise ValueError("mapro optimizes the prompts of a team; topology 'single' has one "
                             "agent (use gepa or mipro)")
        if not ctx.data.train:
            raise ValueError("mapro needs training problems (the train split is empty)")
        return await _Run(ctx, self.settings).run()


def make(**settings: object) -> Mapro:
    """The factory of `OPTIMIZERS["mapro"]`: keyword settings of `MaproSettings`."""
    return Mapro(settings=MaproSettings(**settings))  # type: ignore[arg-type]
