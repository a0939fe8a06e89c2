"""`mapro`'s node and edge potentials: probes of candidate prompts on recorded inputs, scored
by judges. Uncharged: it reads the team and makes probe and judge calls only (`Uncharged`).

Contract:
- `Potentials(ctx, settings, seed, seed_rollouts)` takes its evidence from the seed's train
  rollouts, failed rows first: per role the first `scoring_batch` inputs it was given
  (`NodeContext`), per edge (parent -> child of the team graph; the diagonal for a shared
  role whose peers read each other) the first `scoring_batch` hand-offs (`EdgeContext`).
- `update(pools)` judges every pool member (and pair) without a potential yet. Node: a probe
  of the candidate on the role's recorded input (`render_system` frames it as the seed was
  framed), scored 1..10 by a judge (`mapro:node`). Edge: the parent candidate's probe output
  put in place of what the child's recorded input quoted, a probe of the child candidate on
  that, scored 1..10 (`mapro:edge`). A potential is the mean score / 10, an exact `Fraction`.
- Judges are primed, as the paper's reward model is, with few-shot preference
  demonstrations: per role (node) and per edge, up to `preference_demos` answers from the
  seed's runs on train rows whose program passed (better) beside as many from runs that
  failed (worse), each clipped to a third of `clip_chars` (`node_demos`, `edge_demos`;
  `mapro_prompts.preference_block`). Only train rows serve (a rollout on any other row is
  skipped); a role or edge without both a passing and a failing run gets none.
- `judge_all` parses each reply strictly (`parse_json_score`); an unparsable one scores
  `judge_default` (a blame: the middle of its range) and is kept in `defaults`. Probe answers
  and judge scores are cached per text: each distinct call is made once. Calls go out in
  chunks of `CHUNK`, results in the order asked.
- `tables(pools)` gives the node and edge potentials over the pools for `map.solve_map`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from lcb.optimize.graph import RoleTurn
from lcb.optimize.method import Uncharged
from lcb.optimize.methods.mapro_prompts import (
    SCORE_RANGE,
    edge_judge_prompt,
    first_turn,
    frame_of,
    handoff_request,
    link,
    node_judge_prompt,
    parse_json_score,
    preference_block,
    render_system,
)
from lcb.text import clip

T = TypeVar("T")
CHUNK = 16  # uncharged calls in flight at once
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeContext:
    """One recorded invocation of a role: its input and how its system prompt was framed."""

    given: str
    frame: tuple[dict[str, str], str]


@dataclass(frozen=True)
class EdgeContext:
    """One recorded hand-off: the parent's input, what the child quoted of it, the child's
    input; `via` is `output` (the parent's answer) or `handoff` (a tool-call argument)."""

    parent: NodeContext
    child: NodeContext
    handed: str
    via: str


def _system_of(rollout: Any, turn: RoleTurn) -> str:
    return next((str(e.get("content") or "") for e in rollout.team.transcript
                 if e.get("type") == "system" and e.get("source") == turn.agent), "")


class Potentials:
    """Node and edge potentials of pool members, judged on the scoring batch (see
    `lcb.optimize.methods.mapro`); probe answers and judge scores are cached per text."""

    def __init__(self, ctx: Uncharged, settings: Any, seed: Mapping[str, str],
                 seed_rollouts: Sequence[Any]) -> None:
        self.ctx, self.s, self.seed = ctx, settings, seed
        graph = ctx.graph
        ordered = sorted(seed_rollouts, key=lambda r: r.passed)  # failed rows first (stable)
        ios = [(r, r.role_io) for r in ordered]
        self.node_contexts: dict[str, list[NodeContext]] = {}
        for role in graph.roles:
            found = [(r, first_turn(io, role)) for r, io in ios]
            self.node_contexts[role] = [self._context(role, r, t) for r, t in found
                                        if t is not None][:settings.scoring_batch]
        pairs = list(graph.edges)
        if graph.kind == "shared" and any(link(io, graph.roles[0], graph.roles[0])
                                          for _, io in ios):
            pairs = [(graph.roles[0], graph.roles[0])]  # the diagonal: peers read peers
        self.edges: list[tuple[str, str]] = pairs
        self._demos(ctx, ordered, pairs)
        self.edge_contexts: dict[tuple[str, str], list[EdgeContext]] = {}
        for parent, child in pairs:
            contexts = []
            for rollout, io in ios:
                found_link = link(io, parent, child)
                if found_link is not None and len(contexts) < settings.scoring_batch:
                    p_turn, c_turn, handed = found_link
                    contexts.append(EdgeContext(
                        self._context(parent, rollout, p_turn),
                        self._context(child, rollout, c_turn), handed,
                        "output" if handed == p_turn.output else "handoff"))
            self.edge_contexts[(parent, child)] = contexts
        self.node_scores: dict[str, dict[str, Fraction]] = {role: {} for role in graph.roles}
        self.edge_scores: dict[tuple[str, str], dict[tuple[str, str], Fraction]] = {
            pair: {} for pair in pairs}
        self._probes: dict[tuple[str, str, str], str] = {}
        self._judged: dict[tuple[str, str], tuple[int, str]] = {}
        self.defaults: list[dict[str, str]] = []  # unparsable judge replies, as recorded

    def _demos(self, ctx: Uncharged, rollouts: Sequence[Any],
               pairs: Sequence[tuple[str, str]]) -> None:
        """The judges' few-shot preference demonstrations (module docstring): from the seed's
        runs on train rows only, better (passed) against worse (failed)."""
        train = {problem.id for problem in ctx.data.train}
        own = [(r.passed, r.role_io) for r in rollouts if r.problem_id in train]
        n, chars = self.s.preference_demos, self.s.clip_chars // 3

        def split(found: list[tuple[bool, tuple[str, str]]]) -> tuple[list, list]:
            shown = [(ok, (clip(a, chars), clip(b, chars))) for ok, (a, b) in found]
            return ([d for ok, d in shown if ok][:n], [d for ok, d in shown if not ok][:n])

        self.node_demos: dict[str, str] = {}
        for role in ctx.graph.roles:
            turns = [(ok, first_turn(io, role)) for ok, io in own]
            better, worse = split([(ok, (t.input, t.output)) for ok, t in turns if t is not None])
            self.node_demos[role] = preference_block(better, worse, given="Input",
                                                     answer="Answer")
        self.edge_demos: dict[tuple[str, str], str] = {}
        for parent, child in pairs:
            links = [(ok, link(io, parent, child)) for ok, io in own]
            better, worse = split([(ok, (found[2], found[1].output)) for ok, found in links
                                   if found is not None])
            self.edge_demos[(parent, child)] = preference_block(
                better, worse, given=f"Output of {parent}", answer=f"Answer of {child}")

    def _context(self, role: str, rollout: Any, turn: RoleTurn) -> NodeContext:
        return NodeContext(turn.input, frame_of(self.seed[role], _system_of(rollout, turn)))

    async def gather(self, factories: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
        """Run the calls in chunks, results in the order given (positions stay fixed)."""
        out: list[T] = []
        for start in range(0, len(factories), CHUNK):
            out += await asyncio.gather(*(f() for f in factories[start:start + CHUNK]))
        return out

    async def probe_all(self, asks: Sequence[tuple[str, str, str]]) -> list[str]:
        """(role, system, user) -> the task model's greedy answer, each distinct ask once."""
        todo = list(dict.fromkeys(a for a in asks if a not in self._probes))
        answers = await self.gather([lambda a=a: self.ctx.probe(
            a[0], a[1], [{"role": "user", "content": a[2]}], purpose="mapro:probe",
            temperature=self.s.probe_temperature) for a in todo])
        self._probes.update(zip(todo, answers, strict=True))
        return [self._probes[a] for a in asks]

    async def judge_all(self, prompts: Sequence[str], *, purpose: str, key: str = "score",
                        text_key: str = "reason",
                        bounds: tuple[int, int] = SCORE_RANGE) -> list[tuple[int, str]]:
        """Each prompt's parsed judge answer; an unparsable one gets `judge_default` (for a
        blame, the middle of its range) and is recorded in `defaults`."""
        todo = list(dict.fromkeys(p for p in prompts if (purpose, p) not in self._judged))
        replies = await self.gather([lambda p=p: self.ctx.judge(p, purpose=purpose)
                                     for p in todo])
        for prompt, reply in zip(todo, replies, strict=True):
            parsed = parse_json_score(reply, key=key, text_key=text_key, bounds=bounds)
            if parsed is None:
                default = self.s.judge_default if key == "score" else sum(bounds) // 2
                self.defaults.append({"purpose": purpose, "reply": reply[:200]})
                log.warning("mapro: unparsable %s reply, scored %d: %.80r", purpose, default,
                            reply)
                parsed = (default, "")
            self._judged[(purpose, prompt)] = parsed
        return [self._judged[(purpose, p)] for p in prompts]

    def node_score(self, role: str, text: str) -> Fraction:
        """The node potential (mean judge score / 10, exact); 1 for a role without evidence."""
        return self.node_scores[role].get(text, Fraction(1))

    async def update(self, pools: Mapping[str, Sequence[str]]) -> None:
        """Judge every pool member (and pair) that has no potential yet."""
        clip_at = self.s.clip_chars
        nodes = [(role, text, c) for role, pool in pools.items() for text in pool
                 if text not in self.node_scores[role] for c in self.node_contexts[role]]
        answers = await self.probe_all([(r, render_system(t, c.frame), c.given)
                                        for r, t, c in nodes])
        judged = await self.judge_all([node_judge_prompt(
            topology=self.ctx.topology, role=r, prompt=t, given=clip(c.given, clip_at),
            answer=clip(a, clip_at), demos=self.node_demos.get(r, ""))
            for (r, t, c), a in zip(nodes, answers, strict=True)],
            purpose="mapro:node")
        by_text: dict[tuple[str, str], list[int]] = {}
        for (role, text, _), (value, _) in zip(nodes, judged, strict=True):
            by_text.setdefault((role, text), []).append(value)
        for (role, text), values in by_text.items():
            self.node_scores[role][text] = Fraction(sum(values), 10 * len(values))
        pairs = []
        for (parent, child), contexts in self.edge_contexts.items():
            done = self.edge_scores[(parent, child)]
            pairs += [((parent, child), ti, tj, c) for ti in pools[parent]
                      for tj in (pools[child] if parent != child else [ti])
                      if (ti, tj) not in done for c in contexts]
        handed = await self.probe_all([(e[0], render_system(ti, c.parent.frame), c.parent.given
                                        + ("" if c.via == "output" else handoff_request(e[1])))
                                       for e, ti, _, c in pairs])
        child_answers = await self.probe_all([
            (e[1], render_system(tj, c.child.frame), c.child.given.replace(c.handed, h))
            for (e, _, tj, c), h in zip(pairs, handed, strict=True)])
        judged = await self.judge_all([edge_judge_prompt(
            topology=self.ctx.topology, parent=e[0], child=e[1], handed=clip(h, clip_at),
            child_prompt=tj, child_answer=clip(a, clip_at), demos=self.edge_demos.get(e, ""))
            for (e, _, tj, _), h, a in zip(pairs, handed, child_answers, strict=True)],
            purpose="mapro:edge")
        collected: dict[tuple[tuple[str, str], tuple[str, str]], list[int]] = {}
        for (edge, ti, tj, _), (value, _) in zip(pairs, judged, strict=True):
            collected.setdefault((edge, (ti, tj)), []).append(value)
        for (edge, pair), values in collected.items():
            self.edge_scores[edge][pair] = Fraction(sum(values), 10 * len(values))

    def tables(self, pools: Mapping[str, Sequence[str]]
               ) -> tuple[dict[str, list[Fraction]], dict[tuple[str, str], list[list[Fraction]]]]:
        """Exact node and edge potentials over the pools, for `map.solve_map` (a pair never
        judged counts 1; an edge never seen handing over is no factor)."""
        node = {r: [self.node_score(r, t) for t in pool] for r, pool in pools.items()}
        edges = {}
        for (parent, child), scores in self.edge_scores.items():
            if self.edge_contexts[(parent, child)]:
                edges[(parent, child)] = [[scores.get((ti, tj), Fraction(1))
                                           for tj in pools[child]] for ti in pools[parent]]
        return node, edges
