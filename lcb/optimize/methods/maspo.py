"""`maspo`: joint prompt optimization by coordinate ascent over roles (Wang et al., arXiv
2605.06623), native.

Contract:
- `schedule(graph, ...)`: role turns in the team graph's topological order (terminal role
  last), the whole order repeated `max_depth // steps_per_turn` times (revisits). A role turn
  runs `steps_per_turn` depth steps of an evolutionary beam over that role's text; the other
  roles hold the incumbent's texts. Shared-prompt teams (independent, decentralized) have one
  role: every turn is its turn, and credit over the replicas collapses onto it. `single` is
  refused (`ValueError`).
- A depth step expands every beam member (a node, at most `beam`): a fresh minibatch of
  `min(minibatch, |train|)` train rows (up to `inject` of them mined misalignment cases, the
  rest drawn from the seeded RNG: `strategies.batches.fill`), the parent's rollouts on it
  under the turn's iteration number (one per role turn, so a row that a member already ran
  this turn is a free replay), then one reflection (T = `temperature`) per slice of the
  minibatch (`offspring` slices), each shown its slice's samples of the role's input and
  output (`Rollout.role_io`) with outcome and feedback. Each valid child runs on the whole
  minibatch under the same iteration number (same rows, same request seeds) and is scored
  against its parent per row by pairwise judge calls (T = 0; `maspo_judge.RoleJudge`) that
  see the two versions' inputs and outputs, never their instruction texts: reward = mean over
  rows of 0.4·local + 0.4·lookahead + 0.2·global − 0.5. Lookahead (`lookahead_mode`): a role
  with successor roles is judged on their outputs (chain stage, star manager); a star worker
  and a shared role on the team's final answer (the manager's submission, the vote); the
  last stage of a chain (its output is the answer) takes the global value. The child side is
  B on even rows, A on odd ones (against position bias). A child's value = its parent's
  value + its reward; its gain = its parent's gain + (child's passes − parent's passes) on
  that minibatch. The new beam = the `beam` best of parents and children by value (parents
  first on ties).
- Misalignment mining: a row where the child's output was judged locally better but the
  team's program failed goes into that role's buffer (newest `buffer` kept, no duplicates);
  the minibatches of its predecessor (its parent in the graph; a shared role is its own
  predecessor: later debate rounds read earlier ones) take up to `inject` of them, oldest
  first, consuming them.
- Adoption, at the end of a role turn: the beam member with the highest value, if value > 0
  and (with `require_metric_gain`) gain > 0, becomes the role's incumbent text
  (`ctx.record_candidate`). The metric gate keeps a judge's taste alone from moving the
  incumbent.
- Beam refresh at a revisit: the incumbent's text re-enters as the anchor with value 0 and
  gain 0; every other survivor of the role's previous beam keeps (1 − `reanchor`) = 0.3 of
  its lead over the old anchor (value − anchor's value; its gain minus the anchor's gain):
  a blend 0.7·(its fresh value against the new anchor, taken as 0 because survivors are not
  re-scored) + 0.3·(its stale lead), its evidence having been gathered with other roles'
  older texts.
- Budget: a node starts only when `2 × rows` rollouts are available (the parent and one
  child: one scored proposal); a second child only when its rollouts still fit. Nothing
  half-done is started; the run ends at the first node that does not fit. A warning is logged
  at the start when the budget is below `revisit_budget` (the first sweep at its most plus one
  revisit node), so revisits may never run.
- Every proposal is recorded (`scored_on="minibatch"`; scores: reward, local, lookahead,
  global, parent, child; `reason`: JSON with the rows, the per-row terms, value, gain, the
  mined and injected rows, unparsed verdicts). Rejected ones name the stage: `validator`
  (no complete marked text, an invalid bundle, the parent's text, or a text already scored
  in this depth step: none of these is rolled out), `budget` (its rollouts no longer fit),
  `minibatch` (scored, but below the beam). `ctx.checkpoint` after every depth step and
  after every turn's adoption.
- Resume: retrace. The method is deterministic given the rollouts and answers (RNG seeded
  from `ctx.optimizer_seed`; calls in a fixed order), and a rerun gets every journaled one
  again for free; `ctx.restore()` (no fast-forward) gives the last checkpoint, which the
  retrace must reproduce exactly (`MaspoResumeDivergence` otherwise).
- The result is a NEW dict of the seed's roles: the incumbent (the seed when nothing passed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError, bundle_hash, thaw
from lcb.optimize.method import Bundle, OptimizeContext, Rollout
from lcb.optimize.methods import maspo_prompts as mp
from lcb.optimize.methods.maspo_judge import RoleJudge
from lcb.optimize.methods.maspo_prompts import (
    Member,
    MisalignmentBuffer,
    inject,
    refreshed,
    select,
)
from lcb.optimize.strategies.batches import fill, seeded_rng

if TYPE_CHECKING:
    from lcb.optimize.graph import TeamGraph

KEY = "maspo"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaspoSettings:
    """The method's knobs (the paper's reference values are the defaults)."""

    beam: int = 2
    offspring: int = 2
    minibatch: int = 10
    steps_per_turn: int = 3
    max_depth: int = 9
    buffer: int = 3
    inject: int = 5
    reanchor: float = 0.7
    require_metric_gain: bool = True
    temperature: float = 0.7
    turns_per_sample: int = 2
    clip_chars: int = 1500

    def __post_init__(self) -> None:
        for name in ("beam", "offspring", "minibatch", "steps_per_turn", "max_depth",
                     "turns_per_sample", "clip_chars"):
            _check_int(name, getattr(self, name), low=1)
        for name in ("buffer", "inject"):
            _check_int(name, getattr(self, name), low=0)
        if self.max_depth < self.steps_per_turn:
            raise ValueError(f"maspo setting max_depth ({self.max_depth}) must be >= "
                             f"steps_per_turn ({self.steps_per_turn})")
        for name, high in (("reanchor", 1.0), ("temperature", 2.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not 0.0 <= value <= high:
                raise ValueError(f"maspo setting {name} must be a number in [0, {high}], "
                                 f"got {value!r}")


def _check_int(name: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"maspo setting {name} must be an integer >= {low}, got {value!r}")


SETTINGS = MaspoSettings


class MaspoResumeDivergence(RuntimeError):
    """A resumed run did not reproduce its checkpoint (the journal or the code changed)."""


def schedule(graph: TeamGraph, *, steps_per_turn: int, max_depth: int) -> list[str]:
    """The role turns: the topological order, repeated `max_depth // steps_per_turn` times."""
    if graph.kind == "single":
        raise ValueError("maspo optimizes multi-agent teams; the single-agent team gets "
                         "identity, gepa or mipro")
    return list(graph.topological_order()) * (max_depth // steps_per_turn)


def revisit_budget(roles: int, rows: int, settings: MaspoSettings) -> int:
    """The charged rollouts that buy one revisit at worst: every one of `roles` first turns at
    its most (a node is `rows·(1 + offspring)`; one node at the first depth step, then as many
    as the beam can hold) plus the first revisit node's parent and one child (`2·rows`)."""
    width = nodes = 0
    for step in range(settings.steps_per_turn):
        width = 1 if step == 0 else min(settings.beam, width * (1 + settings.offspring))
        nodes += width
    return roles * nodes * rows * (1 + settings.offspring) + 2 * rows


def mining_sources(graph: TeamGraph, role: str) -> tuple[str, ...]:
    """The roles whose misalignment buffers feed `role`'s minibatches (`role` is their
    predecessor)."""
    if graph.kind == "shared":
        return (role,)
    return tuple(graph.children(role))


@dataclass
class Proposal:
    """A scored child waiting for the beam selection, with what goes into its record."""

    member: Member
    bundle: Bundle
    parent: str
    scores: dict[str, float]
    evidence: dict[str, object]
    iteration: int


class Search:
    """One run of the coordinate ascent (module docstring): its state and its steps."""

    def __init__(self, ctx: OptimizeContext, settings: MaspoSettings) -> None:
        self.ctx, self.s, self.graph = ctx, settings, ctx.graph
        self.judge = RoleJudge(ctx, settings)
        self.turns = schedule(self.graph, steps_per_turn=settings.steps_per_turn,
                              max_depth=settings.max_depth)
        self.incumbent: Bundle = thaw(ctx.seed_bundle)
        self.beams: dict[str, list[Member]] = {}
        self.buffers = {role: MisalignmentBuffer(settings.buffer) for role in ctx.roles}
        self.depth: Counter[str] = Counter()
        self.iteration = self.saves = 0
        self.rng = seeded_rng(KEY, ctx.optimizer_seed)
        self.expected = ctx.restore()

    async def run(self) -> None:
        self.warn_without_revisit()
        for turn, role in enumerate(self.turns):
            self.iteration = turn + 1  # one per role turn: overlapping rows replay for free
            beam = refreshed(self.beams.get(role, []), self.incumbent[role], beam=self.s.beam,
                             reanchor=self.s.reanchor)
            going = True
            for _ in range(self.s.steps_per_turn):
                going = await self.depth_step(role, beam)
                if not going:
                    break
                self.depth[role] += 1
                self.checkpoint(turn)
            self.beams[role] = beam
            self.adopt(role, beam, turn)
            self.checkpoint(turn)
            if not going:
                break
        if self.expected is not None and self.saves < int(self.expected.get("save", 0)):
            raise MaspoResumeDivergence(
                f"maspo: the resumed run ended after {self.saves} checkpoint(s); the "
                f"interrupted one had reached {self.expected.get('save')}")

    def warn_without_revisit(self) -> None:
        """Log when the budget may end before the first revisit (no beam refresh, and no
        injection of a successor's mined rows into its predecessor, on a chain or a star)."""
        roles = len(self.graph.topological_order())
        rows = min(self.s.minibatch, len(self.ctx.data.train))
        total = self.ctx.ledger.charged + self.ctx.ledger.available
        need = revisit_budget(roles, rows, self.s)
        if len(self.turns) > roles and total < need:
            log.warning("maspo: a budget of %d may end before any revisit: the first turns of "
                        "%d role(s) can spend %d, so a revisit needs a budget of %d", total,
                        roles, need - 2 * rows, need)

    async def depth_step(self, role: str, beam: list[Member]) -> bool:
        """Expand every beam member; the new beam replaces `beam`. False: out of budget."""
        rows = min(self.s.minibatch, len(self.ctx.data.train))
        proposals: list[Proposal] = []
        taken = {member.text for member in beam}  # a text already scored here is not rerun
        going = True
        for parent in list(beam):
            if self.ctx.ledger.exhausted or self.ctx.ledger.available < 2 * rows:
                going = False
                break
            proposals += await self.expand(role, parent, taken)
        beam[:] = select([*beam, *(p.member for p in proposals)], self.s.beam)
        for proposal in proposals:
            accepted = any(member is proposal.member for member in beam)
            evidence = {**proposal.evidence,
                        "beam": "entered the beam" if accepted else "below the beam"}
            self.ctx.record_proposal(
                proposal.bundle, parent=proposal.parent, roles=[role], accepted=accepted,
                scores=proposal.scores, scored_on="minibatch",
                rejected_by=None if accepted else "minibatch",
                reason=json.dumps(evidence, sort_keys=True), iteration=proposal.iteration)
        return going

    async def expand(self, role: str, parent: Member, taken: set[str]) -> list[Proposal]:
        """One node: the parent on a fresh minibatch, then its children against it."""
        ctx = self.ctx
        rows, injected = self.minibatch(role)
        base = {**self.incumbent, role: parent.text}
        runs = await ctx.rollouts(base, rows, iteration=self.iteration)
        kept = [(row, run) for row, run in zip(rows, runs, strict=True) if run is not None]
        if not kept:
            return []
        count = min(self.s.offspring, ctx.ledger.available // len(kept))
        size = -(-len(kept) // self.s.offspring)
        slices = [part for part in (kept[i * size:(i + 1) * size] for i in range(count)) if part]
        replies = await asyncio.gather(*(self.judge.propose(role, parent.text, part)
                                         for part in slices))
        found = []
        node = {"iteration": self.iteration, "rows": [row.id for row, _ in kept],
                "injected": injected}
        for reply in replies:
            proposal = await self.child(role, parent, base, kept, reply, node, taken)
            if proposal is not None:
                found.append(proposal)
                taken.add(proposal.member.text)
        return found

    async def child(self, role: str, parent: Member, base: Bundle,
                    kept: list[tuple[Problem, Rollout]], reply: str,
                    node: dict[str, object], taken: set[str]) -> Proposal | None:
        """Validate one reply, run it on the parent's rows and seeds, and score it."""
        ctx, iteration, parent_hash = self.ctx, int(node["iteration"]), bundle_hash(base)

        def reject(bundle: Bundle, stage: str, reason: str) -> None:
            ctx.record_proposal(bundle, parent=parent_hash, roles=[role], accepted=False,
                                rejected_by=stage, reason=reason, iteration=iteration)

        text = mp.parse_candidate(reply)
        if text is None:
            reject({**base, role: reply.strip() or parent.text}, "validator",
                   "the reply has no complete marked candidate (truncated?)")
            return None
        try:
            bundle = ctx.validate({**base, role: text})
        except BundleError as err:
            reject({**base, role: text}, "validator", str(err))
            return None
        if bundle[role] == parent.text.strip():
            reject(bundle, "validator", "the proposal repeats its parent's text")
            return None
        if bundle[role] in taken:
            reject(bundle, "validator", "the proposal repeats a text already in this beam step")
            return None
        if ctx.ledger.available < len(kept):
            reject(bundle, "budget", f"its {len(kept)} rollouts no longer fit")
            return None
        runs = await ctx.rollouts(bundle, [row for row, _ in kept], iteration=iteration)
        terms = await self.judge.score(role, kept, runs)
        if terms is None:
            reject(bundle, "minibatch", "no rollout of the child came back")
            return None
        scores, evidence = terms
        for row_id in evidence["misaligned"]:  # type: ignore[union-attr]
            self.buffers[role].add(row_id)
        member = Member(bundle[role], parent.value + scores["reward"],
                        parent.gain + int(evidence["gain"]))  # type: ignore[call-overload]
        evidence |= {**node, "value": member.value, "lineage_gain": member.gain}
        return Proposal(member, bundle, parent_hash, scores, evidence, iteration)

    def minibatch(self, role: str) -> tuple[list[Problem], list[str]]:
        """A fresh minibatch: mined cases of `role`'s successors first, then seeded draws."""
        train = list(self.ctx.data.train)
        size = min(self.s.minibatch, len(train))
        known = {problem.id: problem for problem in train}
        sources = [self.buffers[r] for r in mining_sources(self.graph, role)]
        taken = [i for i in inject(sources, limit=min(self.s.inject, size)) if i in known]
        return fill([known[i] for i in taken], train, size, self.rng), taken

    def adopt(self, role: str, beam: Sequence[Member], turn: int) -> None:
        """The turn's best eligible member becomes the role's incumbent text (docstring)."""
        eligible = [m for m in beam if m.value > 0
                    and (m.gain > 0 or not self.s.require_metric_gain)]
        if not eligible:
            return
        best = max(eligible, key=lambda m: m.value)  # the first of the best on ties
        if best.text == self.incumbent[role]:
            return
        parent = bundle_hash(self.incumbent)
        self.incumbent = {**self.incumbent, role: best.text}
        self.ctx.record_candidate(self.incumbent, scores={"value": best.value,
                                                          "gain": float(best.gain)},
                                  note=f"maspo: {role} adopted after turn {turn + 1}",
                                  iteration=self.iteration, parent=parent)

    def checkpoint(self, turn: int) -> None:
        """Save the state; on a retrace, check it against the interrupted run's."""
        self.saves += 1
        state = json.loads(json.dumps({
            "save": self.saves, "turn": turn, "iteration": self.iteration,
            "incumbent": self.incumbent, "depth": dict(self.depth),
            "beams": {role: [asdict(m) for m in beam] for role, beam in self.beams.items()},
            "buffers": {role: list(b.ids) for role, b in self.buffers.items()},
            "charged": self.ctx.ledger.charged,
            "rng": hashlib.sha256(repr(self.rng.getstate()).encode()).hexdigest()[:16]}))
        if (self.expected is not None and self.saves == self.expected.get("save")
                and state != self.expected):
            raise MaspoResumeDivergence(
                f"maspo: the resumed run differs from its checkpoint {self.saves} "
                f"(turn {turn}): the journal or the code changed")
        self.ctx.checkpoint(state)


@dataclass(frozen=True)
class Maspo:
    """See the module docstring."""

    settings: MaspoSettings = field(default_factory=MaspoSettings)
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        """One parent and one child on the same minibatch: one scored proposal."""
        return 2 * min(self.settings.minibatch, len(ctx.data.train)), "one scored proposal"

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent after the coordinate ascent within `ctx`'s budget (a new dict)."""
        if not ctx.data.train:
            raise ValueError("maspo needs at least one training problem (the train split is "
                             "empty)")
        search = Search(ctx, self.settings)
        await search.run()
        return thaw(search.incumbent)


def make(**settings: object) -> Maspo:
    """The factory of `OPTIMIZERS["maspo"]`: keyword settings of `MaspoSettings`."""
    return Maspo(settings=MaspoSettings(**settings))  # type: ignore[arg-type]
