"""`maspob`: bandit prompt optimization with a graph surrogate (after MASPOB, Hong et al.,
arXiv 2603.02630): fixed per-role variant pools, a GATv2 surrogate, LinUCB, coordinate ascent.

Contract:
- Pool plan (once, before the pools; `maspob_cover`): with `cover_arms=true` each role's pool
  holds k = min(`pool_size`, A) texts (k >= 2), A = P - P // 10 for the P pulls that the
  budget available at the start pays for beside the gate's reserve (at most `max_pulls`):
  the covering warm-up takes k pulls whatever the number of roles, and LinUCB keeps a tenth
  of the pulls. With `false`, pools of `pool_size` and the paper's random warm-up. `auto`
  (the default) covers only when whole pools of `pool_size` fit in A, else it is `false`.
  Logged once; held in the checkpoint, never decided again on resume.
- Pools (once, uncharged): per role of the team graph a pool of at most the plan's size,
  variant 0 = the seed text, the others written by the reflection model from our style
  template at temperature `temperature` (`PoolBuilder`: strict JSON replies, every variant
  validated: no echo of our template, 30 % to 4 x + 2000 chars of the seed text's length;
  rejections and wrong-sized replies recorded; a pool that stays short after `generation_rounds`
  rounds is used smaller). Each text is embedded (`ctx.embed`, 384-d). A shared-role team
  (independent `coder`, decentralized `debater`) is one role, so one node and one pool.
- Pulls (charged): pull 0 runs the seed combination; then, when the plan covers, every arm at
  least once, every role varied in each pull (`maspob_cover.covering_warmup`: pull i gives
  the role at rank p of the topological order its variant 1 + (i - 1 + p) mod (k - 1)),
  without it pulls 1 .. `warmup` - 1 random combinations (drawn once from the seed: the
  paper's 5 at `warmup` 6); later pulls are LinUCB's choice.
  A pull runs the combination's bundle on the next `rows_per_pull` rows of a rotating pass
  over the train split (shuffled once from the seed: `strategies.batches` `draw` of every
  row, then `Rotation`), iteration = pull number + 1; its score is the mean.
- After every pull a fresh surrogate (`surrogate.fit`, torch seed = base + pull number, base =
  42 + 1000 * optimizer seed) is fitted to all pulls; LinUCB (`linucb.Posterior`, features =
  the surrogate's last-layer features and a constant 1, `ridge` = lambda) is refitted on the
  same pulls. The incumbent is the pulled combination with the highest posterior mean (ties:
  the seed, else the lowest indices). The next combination is the coordinate-ascent argmax of
  the UCB (`alpha`), started at the incumbent, roles in topological order, `sweeps` at most.
- Gate (charged, on by default; `gate=false` is the paper's rule): an incumbent that is not
  the seed is run again, and the seed with it, on the first `rows_per_pull` rows the
  incumbent was pulled on, both at the gate's iteration (fresh samples, paired request
  seeds); it is adopted only when its mean there, over the rows both got back, is strictly
  higher than the seed's (`strategies.gates.strictly_better`). Neither
  row luck nor the lucky scores that made it the incumbent can make a prompt win.
  2 x `rows_per_pull` units stay in reserve for it while pulling.
- Budget: a pull starts only when `rows_per_pull` (+ the reserve) is available; the seed pull
  only when the seed pull, one more pull and the reserve fit; else nothing is charged and
  the seed is kept. Pulls stop at `max_pulls` (None: the budget).
- History: pool variants (kept or rejected by the validator) at iteration 0; every pull of a
  non-seed combination is a proposal (scored on "train"; accepted when it is the incumbent
  after its pull, else rejected by "minibatch"); reasons hold the pull's evidence as JSON
  (combination, rows, UCB, posterior mean, the fit's epochs and loss); seed pulls
  are candidates; an incumbent that the pull's entry does not show (an earlier pull's
  combination, the seed's included) gets a candidate after it, so that the last candidate or
  accepted proposal is always the incumbent (`curves`' gated rule); the gate's verdict is a
  proposal (rejected by "gate" or accepted, then a candidate).
- Surrogate training time: each fit's seconds are in the checkpoint state (`fit_seconds`, one
  per pull, and the total `surrogate_train_s`) and, after `optimize`, in `optimizer.timings`
  (`surrogate_train_s`, `surrogate_fits`, `embed_s`). They stay out of the history, whose
  entries a resumed run must reproduce exactly.
- Resume: fast-forward. `ctx.checkpoint` after the pools and after every pull holds the pool
  plan, the pools, the pulls, the row cursor, the incumbent and the next combination; a rerun
  restores it and goes on from there (the plan, pools and decisions are not recomputed;
  embeddings are, deterministically).
- torch (extra `maspob`) is imported only when the method runs; without it `optimize` raises
  `TorchMissing` naming `pip install -e '.[maspob]'` before any call or rollout. The embedder
  is tried next (on the first role's seed text): without the model `optimize` raises
  `EmbeddingsMissing` naming `EMBEDDINGS_INSTALL`, also before any call or rollout (both
  checks: `maspob_requires`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from lcb.data.problems import Problem
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.bundle import bundle_hash, thaw
from lcb.optimize.method import Bundle, OptimizeContext, TeamSpec
from lcb.optimize.methods.maspob_cover import (
    PoolPlan,
    affordable_pulls,
    covering_warmup,
    plan_pools,
)
from lcb.optimize.methods.maspob_pool import PoolBuilder
from lcb.optimize.methods.maspob_requires import require_embeddings, require_torch
from lcb.optimize.methods.maspob_search import (
    Bandit,
    Combo,
    Pull,
    Search,
    listed,
    row_scores,
)
from lcb.optimize.settings import check_int_fields
from lcb.optimize.strategies.batches import Rotation, draw, seeded_rng
from lcb.optimize.strategies.gates import scores_of, strictly_better

KEY = "maspob"
SEED_BASE, SEED_STEP = 42, 1000
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaspobSettings:
    """The method's knobs: METHODS.md's reference values are the defaults, but for the
    warm-up (`cover_arms="auto"` covers every arm from a budget that pays for it; the method
    page's *Where it departs from the paper*)."""

    pool_size: int = 20  # per role, the seed included (with cover_arms=true: at most)
    warmup: int = 6  # the random warm-up's pulls: the seed pull + 5 (when not covering)
    # true: pools sized to the budget, the warm-up every arm once; auto: so when the budget
    # covers whole pools, else false (the paper's random warm-up over pools of pool_size)
    cover_arms: bool | Literal["auto"] = "auto"
    rows_per_pull: int = 5
    hidden: int = 32
    lr: float = 5e-3
    epochs: int = 800
    patience: int = 200
    alpha: float = 0.2
    ridge: float = 1.0  # LinUCB's lambda
    temperature: float = 0.5  # variant generation
    per_call: int = 5  # variants asked for in one reflection call
    generation_rounds: int = 2
    sweeps: int = 3  # coordinate-ascent passes over the roles, at most
    max_pulls: int | None = None  # None: what the budget pays for
    gate: bool = True

    def __post_init__(self) -> None:
        check_int_fields(self, KEY)
        if self.pool_size < 2:
            raise ValueError(f"maspob setting pool_size must be >= 2 (the seed and one "
                             f"variant), got {self.pool_size!r}")
        for name in ("lr", "ridge"):
            if not getattr(self, name) > 0:
                raise ValueError(f"maspob setting {name} must be > 0, got {getattr(self, name)!r}")
        if not (isinstance(self.cover_arms, bool) or self.cover_arms == "auto"):
            raise ValueError(f"maspob setting cover_arms must be true, false or 'auto', got "
                             f"{self.cover_arms!r}")
        for name in ("alpha", "temperature"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"maspob setting {name} must be >= 0, "
                                 f"got {getattr(self, name)!r}")


SETTINGS = MaspobSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


# --- the method ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Maspob:
    """See the module docstring. `timings` is filled by `optimize` (seconds)."""

    settings: MaspobSettings = field(default_factory=MaspobSettings)
    key: str = KEY
    timings: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """The seed pull, one more pull and the gate's reserve."""
        rows = min(self.settings.rows_per_pull, len(ctx.data.train))
        reserve = 2 * rows if self.settings.gate else 0
        return 2 * rows + reserve, "the seed pull, one more pull and the gate"

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after the bandit search within `ctx`'s budget (a new dict)."""
        require_torch()
        require_embeddings(ctx)
        s, train = self.settings, list(ctx.data.train)
        if not train:
            raise ValueError("maspob needs training problems (the train split is empty)")
        rows = min(s.rows_per_pull, len(train))
        reserve = 2 * rows if s.gate else 0
        if ctx.ledger.available < 2 * rows + reserve:
            log.warning("maspob: %d rollouts left cannot pay for the seed pull, one more pull "
                        "and the gate (%d); keeping the seed", ctx.ledger.available,
                        2 * rows + reserve)
            return thaw(ctx.seed_bundle)
        graph, base = ctx.graph, SEED_BASE + SEED_STEP * ctx.optimizer_seed
        if tuple(graph.roles) != tuple(ctx.roles):
            raise ValueError(f"maspob: the team graph's roles {graph.roles} are not the "
                             f"bundle's {ctx.roles}")
        restored = ctx.restore(fast_forward=True)
        if restored is not None:
            search = Search.from_state(restored)
        else:
            plan = self._plan(ctx.ledger, rows=rows, reserve=reserve,
                              roles=len(graph.roles))
            search = Search(pools=await self._pools(ctx, graph.roles, plan.size), plan=plan)
            ctx.checkpoint(search.state())
        started = time.perf_counter()
        bandit = Bandit(graph.roles, graph.edges,
                        [ctx.embed(search.pools[role]) for role in graph.roles], s)
        self.timings["embed_s"] = time.perf_counter() - started
        order = draw(train, len(train), seeded_rng(KEY, "rows", base))
        batches = Rotation.over(order, rows)
        seed_combo = (0,) * len(graph.roles)
        topo = [graph.roles.index(role) for role in graph.topological_order()]
        warmup = [seed_combo, *self._warmup(search, base, order=topo)]
        while (s.max_pulls is None or len(search.pulls) < s.max_pulls) and \
                ctx.ledger.available >= rows + reserve:
            t = len(search.pulls)
            combo = warmup[t] if t < len(warmup) else search.next
            assert combo is not None
            batch = batches.at(search.cursor)
            pull = await self._pull(ctx, search, combo, batch, iteration=t + 1)
            if pull is None:
                break
            search.pulls.append(pull)
            search.cursor += rows
            before = search.incumbent
            fit, ucb = self._decide(search, bandit, seed=base + t, order=topo,
                                    warmup=len(warmup))
            shown = self._record_pull(ctx, search, bandit, pull, t=t, fit=fit, next_ucb=ucb,
                                      warmup=len(warmup)) or before
            if shown != search.incumbent:
                self._record_incumbent(ctx, search, bandit, t=t)
            ctx.checkpoint(search.state())
        self.timings.update(surrogate_train_s=search.train_s,
                            surrogate_fits=len(search.fit_seconds))
        if search.incumbent is None or search.incumbent == seed_combo:
            return thaw(ctx.seed_bundle)
        return await self._gate(ctx, search, search.incumbent, order, rows=rows,
                                iteration=len(search.pulls) + 1)

    def _decide(self, search: Search, bandit: Bandit, *, seed: int, order: list[int],
                warmup: int) -> tuple[dict[str, float], float | None]:
        """Refit on every pull; set the incumbent and (after the `warmup` pulls) the next
        combination. Returns the fit's record and the next combination's UCB."""
        fit = bandit.refit(search.pulls, seed=seed)
        search.fit_seconds.append(fit.pop("seconds"))
        observed = sorted({p.combo for p in search.pulls})
        search.incumbent = bandit.linucb.incumbent(observed, bandit.means(observed),
                                                   seed=(0,) * len(order))
        if len(search.pulls) < warmup:
            return fit, None
        sizes = [len(pool) for pool in search.pools.values()]
        search.next, ucb = bandit.linucb.coordinate_ascent(
            search.incumbent, sizes, bandit.ucb, order=order, sweeps=self.settings.sweeps)
        return fit, ucb

    def _plan(self, ledger: BudgetLedger, *, rows: int, reserve: int, roles: int) -> PoolPlan:
        """The pools' size from the budget available now (`maspob_cover`), logged once. Where
        uncharged calls cost units (`--uncharged-cost`), the pools' requests are paid first."""
        s = self.settings

        def plan_for(available: int) -> PoolPlan:
            pulls = affordable_pulls(available, rows=rows, reserve=reserve,
                                     max_pulls=s.max_pulls)
            return plan_pools(pulls=pulls, cap=s.pool_size, cover=s.cover_arms)

        plan = plan_for(ledger.available)
        if ledger.uncharged_rate:  # the requests for these pools, one round, leave fewer pulls
            calls = roles * math.ceil((plan.size - 1) / s.per_call)
            plan = plan_for(ledger.available - math.ceil(ledger.uncharged_rate * calls - 1e-9))
        log.info(plan.note(roles))
        return plan

    async def _pools(self, ctx: OptimizeContext, roles: Sequence[str],
                     size: int) -> dict[str, list[str]]:
        s = self.settings
        builders = [PoolBuilder(ctx, role, size, s.per_call, s.generation_rounds,
                                s.temperature) for role in roles]
        pools = await asyncio.gather(*(b.build() for b in builders))  # one purpose per role
        for builder in builders:  # recorded in role order, whichever reply came first
            builder.flush(ctx)
        for role, pool in zip(roles, pools, strict=True):
            if len(pool) < size:
                log.warning("maspob: the pool of %s holds %d of %d variants", role, len(pool),
                            size)
        return dict(zip(roles, pools, strict=True))

    def _warmup(self, search: Search, base: int, *, order: list[int]) -> list[Combo]:
        """The warm-up combinations after the seed pull: every arm once (`cover_arms`), else
        random ones drawn once from the seed. Both follow from the pools alone."""
        sizes = [len(pool) for pool in search.pools.values()]
        plan = search.plan
        if (self.settings.cover_arms is True) if plan is None else plan.cover:
            return covering_warmup(sizes, order, rotate=plan is None or plan.rotate)
        rng = seeded_rng(KEY, "warmup", base)
        return [tuple(rng.randrange(n) for n in sizes) for _ in range(self.settings.warmup - 1)]

    def _bundle(self, team: TeamSpec, search: Search, combo: Combo) -> Bundle:
        return team.validate({role: search.pools[role][v]
                              for role, v in zip(search.pools, combo, strict=True)})

    async def _pull(self, ctx: OptimizeContext, search: Search, combo: Combo,
                    batch: list[Problem], *, iteration: int) -> Pull | None:
        results = await ctx.rollouts(self._bundle(ctx, search, combo), batch,
                                     iteration=iteration)
        kept = [(p.id, r.score) for p, r in zip(batch, results, strict=True) if r is not None]
        if not kept:  # the budget is spent, or infrastructure lost every row
            return None
        return Pull(combo, [pid for pid, _ in kept], [score for _, score in kept])

    def _record_pull(self, ctx: OptimizeContext, search: Search, bandit: Bandit, pull: Pull,
                     *, t: int, fit: dict[str, float], next_ucb: float | None,
                     warmup: int) -> Combo | None:
        """Record pull `t`. Returns the combination the history shows as the incumbent now
        (`curves`' gated rule: the last candidate or accepted proposal); None: unchanged."""
        bundle = self._bundle(ctx, search, pull.combo)
        mean = bandit.means([pull.combo])[0]
        evidence = {"pull": t, "warmup": t < warmup, "combo": list(pull.combo),
                    "rows": pull.rows, "posterior_mean": round(mean, 6),
                    "incumbent": listed(search.incumbent), "next": listed(search.next),
                    "next_ucb": None if next_ucb is None else round(next_ucb, 6), "fit": fit}
        scores = {"train_pull": pull.mean, "posterior_mean": mean}
        if not any(pull.combo):
            ctx.record_candidate(bundle, scores=scores, iteration=t + 1,
                                 note=f"seed pull: {json.dumps(evidence)}")
            return pull.combo
        kept = pull.combo == search.incumbent
        seed = thaw(ctx.seed_bundle)
        ctx.record_proposal(bundle, parent=bundle_hash(seed),
                            roles=[r for r in seed if bundle[r] != seed[r]], accepted=kept,
                            scores=scores, scored_on="train",
                            rejected_by=None if kept else "minibatch",
                            reason=json.dumps(evidence), iteration=t + 1)
        return pull.combo if kept else None

    def _record_incumbent(self, ctx: OptimizeContext, search: Search, bandit: Bandit, *,
                          t: int) -> None:
        """A candidate for an incumbent that pull `t`'s record does not show: a combination
        pulled before (the seed's included) whose posterior mean now leads."""
        assert search.incumbent is not None
        mean = bandit.means([search.incumbent])[0]
        ctx.record_candidate(self._bundle(ctx, search, search.incumbent),
                             scores={"posterior_mean": mean}, iteration=t + 1,
                             note=f"incumbent by posterior mean after pull {t}: "
                                  f"{json.dumps({'combo': list(search.incumbent)})}")

    async def _gate(self, ctx: OptimizeContext, search: Search, winner: Combo,
                    order: list[Problem], *, rows: int, iteration: int) -> Bundle:
        """The winner if, run again with the seed on `rows` of its pulled rows at
        `iteration`, it beat the seed there; else the seed."""
        seed, bundle = thaw(ctx.seed_bundle), self._bundle(ctx, search, winner)
        if not self.settings.gate:
            return bundle
        by_id = {p.id: p for p in order}
        batch = [by_id[pid] for pid in row_scores(search.pulls, winner)]
        batch = batch[:min(rows, max(ctx.ledger.available, 0) // 2)]
        ours, theirs = await asyncio.gather(ctx.rollouts(bundle, batch, iteration=iteration),
                                            ctx.rollouts(seed, batch, iteration=iteration))
        gate = strictly_better(scores_of(batch, ours), scores_of(batch, theirs))
        adopt, paired = gate.adopted, gate.paired
        scores = {"gate_incumbent": gate.candidate, "gate_seed": gate.incumbent}
        evidence = {"combo": list(winner), "rows": list(paired.rows),
                    "incumbent": list(paired.values[0]), "seed": list(paired.values[1])}
        ctx.record_proposal(bundle, parent=bundle_hash(seed),
                            roles=[r for r in seed if bundle[r] != seed[r]], accepted=adopt,
                            scores=scores, scored_on="train",
                            rejected_by=None if adopt else "gate", iteration=iteration,
                            reason=json.dumps(evidence))
        if not adopt:
            return seed
        ctx.record_candidate(bundle, scores=scores, iteration=iteration,
                             note="incumbent by posterior mean, beat the seed on a paired rerun")
        return dict(bundle)


def make(**settings: object) -> Maspob:
    """The factory of `OPTIMIZERS["maspob"]`: keyword settings of `MaspobSettings`."""
    return Maspob(settings=MaspobSettings(**settings))  # type: ignore[arg-type]
