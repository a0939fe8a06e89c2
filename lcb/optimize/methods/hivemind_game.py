"""`hivemind`'s game: the players, the data order, the coalitions a cycle runs and their
values, the gate's rows, and the state a checkpoint holds (`lcb.optimize.methods.hivemind`
has the algorithm and the rules quoted here).

Contract:
- `Game(ctx, settings)` reads the team (`TeamSpec`: its agents are the players, the graph
  names each one's role and the hub of a star) and runs rollouts (`Evaluator`); it never
  records nor reflects. Train rows: a seeded shuffle (`Random("hivemind:<seed>:train")`),
  passed in turn `batch_size` rows a cycle (`strategies.batches.Rotation`); gate rows: the
  first `val_size` of a seeded shuffle of the validation split (`...:val`).
- `plan(cycle)`: the coalitions to run, those valued 0 without a run (a star's coalitions
  without the manager, with `skip_managerless`), and the player orders: None for exact
  Shapley over the power set when it needs <= `exact_max_coalitions` runs, else Monte-Carlo
  orders drawn from `Random("hivemind:<seed>:<cycle>")`. A one-role team with
  `shapley_single_role` off runs the full coalition only (`skipped`).
- `charged(plan)`: the planned coalitions that are charged (the whole team's, and those the
  team's rule does not make free; every one with `reuse` off). `cost` counts those.
- `play(plan, bundle, batch, cycle)`: every planned (coalition, row) at iteration `cycle`,
  the whole team's coalition first (its answers are the others' to reuse); values are means
  over the rows that came back for every coalition; None when the budget ran out mid-way.
- `val_rows(bundle)`: the bundle's score per gate row at `VAL_ITERATION` (kept per bundle
  hash: never run twice); None when the budget ran out mid-way.
- `choose_target(credit, ...)`: the role to revise: the lowest credit (ties to `TIE`: the
  role targeted fewest times, then the latest in topological order); on a star, the manager
  every `every`-th cycle.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lcb.data.problems import Problem
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.method import Bundle, Evaluator, OptimizeContext, Rollout, TeamSpec
from lcb.optimize.methods import dag_shapley, shapley
from lcb.optimize.methods.hivemind_lessons import with_lessons
from lcb.optimize.strategies.batches import Rotation, seeded_rng, shuffled

if TYPE_CHECKING:
    from lcb.optimize.methods.hivemind import HivemindSettings

RNG_KEY = "hivemind"  # the method's key: its RNGs' seed prefix
VAL_ITERATION = 0  # every bundle's validation runs share it: paired seeds, free replays
TIE = 1e-9


@dataclass
class Plan:
    """One cycle's game: the coalitions to run, those valued 0 without a run, the orders."""

    run: list[shapley.Coalition]
    free: list[shapley.Coalition]
    orders: list[tuple[str, ...]] | None  # None: exact over the power set
    skipped: bool = False  # one role, `shapley_single_role` off: the full coalition only
    dag: bool = False  # DAG-Shapley: only viable coalitions run, the others take their core's


@dataclass
class Played:
    """The coalitions' runs of one batch: values on the rows every coalition has (None when
    there is none), those rows, and the full coalition's rollouts."""

    values: dict[shapley.Coalition, float] | None
    rows: list[str]
    full_runs: list[Rollout]


@dataclass
class State:
    """What a checkpoint holds (JSON-able through `to_json`)."""

    cycle: int = 0
    lessons: dict[str, list[str]] = field(default_factory=dict)
    val_scores: dict[str, dict[str, float]] = field(default_factory=dict)  # hash: row: score
    targeted: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"cycle": self.cycle, "lessons": self.lessons, "val_scores": self.val_scores,
                "targeted": self.targeted}


class Game:
    """One optimize phase: the team's game, the data order and the state. It reads the team
    (`TeamSpec`) and runs rollouts (`Evaluator`); the method records and reflects."""

    def __init__(self, ctx: OptimizeContext, settings: HivemindSettings) -> None:
        self.team: TeamSpec = ctx
        self.evaluator: Evaluator = ctx
        self.s = settings
        graph = ctx.graph
        self.players = tuple(ctx.agents)
        self.roles_of = {agent: graph.agents[agent] for agent in self.players}
        self.order = graph.topological_order()
        edges = graph.edges if settings.shapley == "dag" else ()
        self.upstream = dag_shapley.ancestors(self.players, self.roles_of, edges)
        self.star = graph.kind == "star"
        self.hub = graph.edges[0][0] if self.star and graph.edges else None
        seed = ctx.optimizer_seed
        self.train = shuffled(ctx.data.train, seeded_rng(RNG_KEY, seed, "train"))
        self.batches = Rotation.over(self.train, settings.batch_size)
        val = shuffled(ctx.data.validation, seeded_rng(RNG_KEY, seed, "val"))
        self.val = val[:settings.val_size]
        self.state = State(lessons={role: [] for role in ctx.roles})

    # --- bundles ------------------------------------------------------------------------
    def bundle(self, lessons: dict[str, list[str]]) -> Bundle:
        return {role: with_lessons(text, lessons.get(role, ()), cap=self.s.max_lessons)
                for role, text in self.team.seed_bundle.items()}

    # --- the game -----------------------------------------------------------------------
    def abstains(self, coalition: shapley.Coalition) -> bool:
        """Known without a run: a centralized coalition without its manager abstains."""
        return (self.s.skip_managerless and self.hub is not None
                and not any(self.roles_of[a] == self.hub for a in coalition))

    def plan(self, cycle: int) -> Plan:
        if not self.s.shapley_single_role and len(set(self.roles_of.values())) == 1:
            return Plan([frozenset(self.players)], [frozenset()], None, skipped=True)
        dag = self.s.shapley == "dag"
        everyone = [c for c in shapley.power_set(self.players)
                    if not dag or dag_shapley.viable(c, self.upstream)]
        free = [c for c in everyone if self.abstains(c)]
        if len(everyone) - len(free) <= self.s.exact_max_coalitions:
            return Plan([c for c in everyone if c not in free], free, None, dag=dag)
        rng = seeded_rng(RNG_KEY, self.team.optimizer_seed, cycle)
        orders = shapley.sample_permutations(self.players, rng, count=self.s.mc_permutations,
                                             max_coalitions=self.s.exact_max_coalitions,
                                             free=free)
        visited = list(dict.fromkeys(dag_shapley.core(c, self.upstream) if dag else c
                                     for c in shapley.prefixes(orders)))
        return Plan([c for c in visited if not self.abstains(c)],
                    [c for c in visited if self.abstains(c)], orders, dag=dag)

    def batch(self, cycle: int) -> list[Problem]:
        """Cycle `cycle`'s train rows (1, 2, ...): the next batch of the rotating pass."""
        return self.batches.batch(cycle - 1)

    def charged(self, plan: Plan) -> list[shapley.Coalition]:
        """The planned coalitions that send requests: the others take the whole team's
        answers (`lcb.teams.reuse`) and are not charged."""
        if not self.s.reuse:
            return list(plan.run)
        whole = frozenset(self.players)
        return [c for c in plan.run if c == whole or not self.team.whole_team_answers(c)]

    def cost(self, plan: Plan, batch: list[Problem], current: Bundle) -> int:
        scored = bundle_hash(current) in self.state.val_scores
        return len(self.charged(plan)) * len(batch) + len(self.val) * (1 if scored else 2)

    async def play(self, plan: Plan, bundle: Bundle, batch: list[Problem], cycle: int
                   ) -> Played | None:
        """The planned coalitions' runs, the whole team's first (the others reuse its
        answers); None when the budget ran out mid-way. Values are means over the batch rows
        that came back for every coalition (paired differences)."""
        full = frozenset(self.players)
        first = [full] if self.s.reuse and full in plan.run else []
        got: dict[tuple[shapley.Coalition, str], Rollout] = {}
        if not await self._wave(first, batch, bundle, cycle, got):
            return None
        # a row the whole team's run lost is dropped: its coalitions would find no answers
        rows = [p for p in batch if (full, p.id) in got] if first else batch
        if not await self._wave([c for c in plan.run if c not in first], rows, bundle, cycle,
                                got):
            return None
        rows = [p.id for p in batch if all((c, p.id) in got for c in plan.run)]
        runs = [got[full, p.id] for p in batch if (full, p.id) in got]
        if not rows:
            return Played(None, rows, runs)
        values = dict.fromkeys(plan.free, 0.0)
        for c in plan.run:
            values[c] = sum(got[c, row].score for row in rows) / len(rows)
        return Played(values, rows, runs)

    async def _wave(self, coalitions: list[shapley.Coalition], rows: list[Problem],
                    bundle: Bundle, cycle: int,
                    got: dict[tuple[shapley.Coalition, str], Rollout]) -> bool:
        """Run `coalitions` on `rows` at once into `got`; False when the budget ran out."""
        pairs = [(c, p) for c in coalitions for p in rows]
        results = await asyncio.gather(*(
            self.evaluator.rollout(bundle, p, iteration=cycle, active=c, reuse=self.s.reuse)
            for c, p in pairs))
        if any(r is None for r in results) and self.evaluator.ledger.available <= 0:
            return False
        got |= {(c, p.id): r for (c, p), r in zip(pairs, results, strict=True) if r is not None}
        return True

    def target(self, credit: dict[str, float], cycle: int) -> tuple[str, str]:
        return choose_target(credit, cycle=cycle, order=self.order, hub=self.hub,
                             targeted=self.state.targeted, every=self.s.manager_every)

    async def val_rows(self, bundle: Bundle) -> dict[str, float] | None:
        """The bundle's score on each gate row that came back (infrastructure lost the
        others for good: the journal hands such a row None again); None when the budget ran
        out mid-way (nothing is kept then)."""
        known = self.state.val_scores.get(bundle_hash(bundle))
        if known is not None:
            return known
        results = await asyncio.gather(*(self.evaluator.rollout(bundle, p,
                                                                iteration=VAL_ITERATION)
                                         for p in self.val))
        if any(r is None for r in results) and self.evaluator.ledger.available <= 0:
            return None
        rows = {p.id: r.score for p, r in zip(self.val, results, strict=True) if r is not None}
        self.state.val_scores[bundle_hash(bundle)] = rows
        return rows


def mean_score(rows: dict[str, float]) -> dict[str, float]:
    """A bundle's gate score as `scores` (empty when no row came back)."""
    return {"val": sum(rows.values()) / len(rows)} if rows else {}


def choose_target(credit: dict[str, float], *, cycle: int, order: tuple[str, ...],
                  hub: str | None, targeted: dict[str, int], every: int) -> tuple[str, str]:
    """The role to revise in `cycle` and why (rule in the module docstring).

    >>> choose_target({"a": 0.2, "b": 0.1}, cycle=1, order=("a", "b"), hub=None,
    ...               targeted={}, every=3)
    ('b', 'lowest credit')
    """
    if hub is not None and cycle % every == 0:
        return hub, f"the manager's turn (every {every}th cycle)"
    pool = [role for role in order if role in credit and role != hub] or list(credit)

    def rank(role: str) -> tuple[float, int, int]:
        return (round(credit[role] / TIE), targeted.get(role, 0), -order.index(role))

    return min(pool, key=rank), "lowest credit"
