"""`mapro`'s own prompts (judge, blame, mutation, hand-off), their strict parsers, and the
recorded evidence the probes are built from.

Contract:
- Judges answer with ONE JSON object and nothing else (a ```json fence around it is tolerated):
  node and edge judges `{"score": <integer 1..10>, "reason": "..."}`, blame judges
  `{"parent_blame": <integer 0..10>, "critique": "..."}`. `parse_json_score` returns the
  integer and the text field, or None for anything else (prose around the object, a float, a
  bool, a value out of range, a missing key, a reply over `MAX_JUDGE_CHARS` characters or
  nested deeper than `MAX_JSON_DEPTH`): the caller then uses its documented default. Nothing a
  judge sends raises (a bounded scan finds the object's end before `json.loads` runs).
- A mutation reply carries the complete new prompt between `BEGIN_MARK` and `END_MARK` lines;
  `parse_prompt` returns it, or None when a marker is missing or nothing is between them (a
  truncated reply is never adopted).
- Every text shown (inputs, answers, feedback) is clipped by the caller; these functions only
  lay it out. Failing examples say `Outcome: FAILED` (solved ones `Outcome: solved`).
- A probe sends a candidate text framed as the team framed the seed in the recorded run
  (`frame_of` / `render_system`: the same placeholder values, the same appended contracts).
  A child's input reads its parent through a verbatim quote (`quoted`): a sequential stage
  quotes the earlier stage's output, a centralized worker the manager's delegation, a
  later debate round a peer's earlier answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from lcb.agents.prompts import PLACEHOLDERS, fill_placeholders
from lcb.optimize.graph import RoleTurn
from lcb.optimize.methods.reflection import clip, marked_text

T = TypeVar("T")
CHUNK = 16  # uncharged calls in flight at once
log = logging.getLogger(__name__)

BEGIN_MARK = "=== MAPRO PROMPT BEGIN ==="
END_MARK = "=== MAPRO PROMPT END ==="
SCORE_RANGE = (1, 10)
BLAME_RANGE = (0, 10)
MAX_JUDGE_CHARS = 20_000  # a longer judge reply is unparsable
MAX_JSON_DEPTH = 4  # nesting of a judge's object at most (ours is flat: depth 1)
_FENCED = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)

_TEAM = ("a team of language-model agents that write Python programs for competitive-"
         "programming problems (topology '{topology}'); a problem counts as solved only when "
         "the team's final program passes every hidden test")

# Focus hints that make the initial mutations of one role differ from each other.
VARIANT_HINTS = (
    "reading the statement and its constraints exactly",
    "edge cases and boundary inputs",
    "the algorithm's correctness and running time",
    "what this role hands to its teammates, and in what form",
    "checking the work against the examples before answering",
)


def _block(title: str, text: str) -> str:
    return f"## {title}\n{text.strip() or '(empty)'}\n"


def node_judge_prompt(*, topology: str, role: str, prompt: str, given: str,
                      answer: str) -> str:
    """How competent is one candidate prompt of `role`, judged on one probe answer."""
    return "\n".join([
        f"You are judging one agent of {_TEAM.format(topology=topology)}.",
        f"The agent plays the role '{role}'. It was run with the candidate prompt below on "
        "an input this role really received, and gave the answer below.\n",
        _block("Candidate prompt", prompt), _block("Input the agent was given", given),
        _block("The agent's answer", answer),
        "## Your task\nScore how well this answer does the job of the role '" + role + "' "
        "for this input: correct reasoning, a correct and efficient program where one is due, "
        "and a result its teammates can use. 1 is useless or wrong, 10 is excellent.\n"
        'Answer with only a JSON object: {"score": <integer 1-10>, "reason": "<one sentence>"}',
    ])


def edge_judge_prompt(*, topology: str, parent: str, child: str, handed: str,
                      child_prompt: str, child_answer: str) -> str:
    """How well a parent's output serves one candidate prompt of the child."""
    return "\n".join([
        f"You are judging a hand-off between two agents of {_TEAM.format(topology=topology)}.",
        f"The agent '{parent}' produced the output below; the agent '{child}' read it as part "
        "of its input and, run with the candidate prompt below, gave the answer below.\n",
        _block(f"Output of {parent}", handed), _block(f"Candidate prompt of {child}",
                                                      child_prompt),
        _block(f"Answer of {child}", child_answer),
        "## Your task\nScore how well this pair works together: does the output of '"
        f"{parent}' give '{child}' what it needs, and does '{child}' build on it correctly "
        "(using what is right, catching what is wrong)? 1 is a broken hand-off, 10 is a "
        "seamless one.\n"
        'Answer with only a JSON object: {"score": <integer 1-10>, "reason": "<one sentence>"}',
    ])


def blame_prompt(*, topology: str, parent: str, child: str, handed: str, child_output: str,
                 feedback: str) -> str:
    """The child critiques its parent on one failed problem."""
    return "\n".join([
        f"You are '{child}', an agent of {_TEAM.format(topology=topology)}. On the problem "
        f"below the team FAILED. You read the output of '{parent}' and answered as shown.\n",
        _block(f"What {parent} handed to you", handed), _block("Your answer", child_output),
        _block("The grader's verdict on the team's program", feedback),
        "## Your task\nSay how much of this failure comes from what '" + parent + "' handed "
        "to you (10: its output misled you or left out what you needed; 0: it was right and "
        "the fault is yours), and what '" + parent + "' should do differently in general.\n"
        'Answer with only a JSON object: {"parent_blame": <integer 0-10>, '
        '"critique": "<two sentences at most>"}',
    ])


def mutation_prompt(*, topology: str, role: str, current: str,
                    examples: Sequence[Mapping[str, str]], critiques: Sequence[str],
                    hint: str, keep: float, placeholders: Sequence[str] = ()) -> str:
    """A trust-region revision of one role's prompt, from failures and teammates' critiques."""
    parts = [
        f"You are revising the prompt of the role '{role}' in {_TEAM.format(topology=topology)}."
        " The harness appends its own output-format rules after the prompt: do not restate "
        "them.\n",
        _block("The current prompt", current),
        "## What this role did on training problems",
    ]
    for index, example in enumerate(examples, start=1):
        body = "\n".join(f"{key}:\n{value}" for key, value in example.items())
        parts.append(f"### Problem {index}\n{body}\n")
    if critiques:
        parts.append(_block("What the agents that read this role's output said about it",
                            "\n".join(f"- {c}" for c in critiques)))
    keep_note = ""
    if placeholders:
        names = ", ".join("{" + name + "}" for name in placeholders)
        keep_note = f" Keep the placeholder(s) {names} verbatim: the harness fills them in."
    parts.append(
        "## Your task\nFind the habit of this role that led to the failures and revise the "
        f"prompt to fix it, paying attention to {hint}. Stay close to the current prompt: keep "
        f"its structure and at least {round(keep * 100)}% of its wording, and change or add "
        "only a few sentences of concrete, general guidance; never mention these particular "
        f"problems.{keep_note} Write the complete prompt, not a diff.\n\n"
        "Answer with the new prompt between the two marker lines below, each on a line of its "
        f"own, and nothing after the second marker:\n{BEGIN_MARK}\n(the complete new prompt)\n"
        f"{END_MARK}\n")
    return "\n".join(parts)


def handoff_request(child: str) -> str:
    """Appended to a parent's recorded input: the probe asks for its message to `child`."""
    return (f"\n\n(For this step, write only the instruction you would send to the teammate "
            f"'{child}' now: what it should do and what it needs to know.)")


def parse_prompt(reply: str) -> str | None:
    """The text between the last begin marker and the end marker after it, else None."""
    return marked_text(reply, BEGIN_MARK, END_MARK)


def _one_object(text: str) -> str | None:
    """`text` when it is one JSON object from its first to its last character, nested at most
    `MAX_JSON_DEPTH` deep (a linear scan that tracks strings and escapes); else None."""
    if not text.startswith("{"):
        return None
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif in_string:
            escaped, in_string = char == "\\", char != '"'
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return None
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return text if index == len(text) - 1 else None  # nothing may follow it
    return None


def parse_json_score(reply: str, *, key: str, text_key: str,
                     bounds: tuple[int, int]) -> tuple[int, str] | None:
    """(`key`'s integer within `bounds`, `text_key`'s text) of a reply that is one JSON object
    (optionally fenced); None for any other reply (see the module docstring); never raises."""
    if len(reply) > MAX_JUDGE_CHARS:
        return None
    text = reply.strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1).strip()
    obj = _one_object(text)
    if obj is None:
        return None
    try:
        data = json.loads(obj)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if not bounds[0] <= value <= bounds[1]:
        return None
    note = data.get(text_key, "")
    return value, note if isinstance(note, str) else json.dumps(note)


# --- the recorded evidence the probes are built from ------------------------------------------

def frame_of(seed_text: str, recorded_system: str) -> tuple[dict[str, str], str]:
    """How the team turned the seed text into the system prompt it sent: the values it put in
    the seed's placeholders and what it appended (format and output contracts). ({}, "") when
    the recorded system prompt does not start from the seed text."""
    slot = "|".join(map(re.escape, PLACEHOLDERS))
    names = re.findall(r"\{(" + slot + r")\}", seed_text)
    pieces = re.split(r"\{(?:" + slot + r")\}", seed_text)
    pattern = "(.*?)".join(re.escape(piece) for piece in pieces) + "(.*)"
    match = re.fullmatch(pattern, recorded_system, flags=re.DOTALL)
    if match is None:
        return {}, ""
    return dict(zip(names, match.groups()[:-1], strict=True)), match.groups()[-1]


def render_system(text: str, frame: tuple[dict[str, str], str]) -> str:
    """A candidate text framed as the team frames its seed (`frame_of`)."""
    values, suffix = frame
    present = {name: value for name, value in values.items() if f"{{{name}}}" in text}
    return fill_placeholders(text, **present) + suffix if present else text + suffix


def quoted(parent_texts: Sequence[str], child_input: str, *, least: int = 16) -> str | None:
    """The longest of `parent_texts` (an output, delegation arguments) that the child's input
    quotes verbatim, of at least `least` characters; None when it quotes none."""
    found = [t for t in parent_texts if len(t.strip()) >= least and t in child_input]
    return max(found, key=len) if found else None


def first_turn(io: Mapping[str, Sequence[RoleTurn]], role: str) -> RoleTurn | None:
    """`role`'s first invocation that was given an input, else None."""
    return next((turn for turn in io.get(role, ()) if turn.input.strip()), None)


def link(io: Mapping[str, Sequence[RoleTurn]], parent: str, child: str
         ) -> tuple[RoleTurn, RoleTurn, str] | None:
    """The first (parent turn, child turn, quoted text) of a run where the child's input quotes
    the parent's output or one of its tool-call arguments (for a self-edge, an earlier turn of
    the same role); None when the child never read the parent."""
    for index, child_turn in enumerate(io.get(child, ())):
        parents = io.get(parent, ())[:index] if parent == child else io.get(parent, ())
        for parent_turn in parents:
            texts = [parent_turn.output, *(str(value) for _, args in parent_turn.tool_calls
                                           if isinstance(args, Mapping)
                                           for value in args.values())]
            handed = quoted(texts, child_turn.input)
            if handed is not None:
                return parent_turn, child_turn, handed
    return None


# --- potentials: probes and judges on the scoring batch ---------------------------------------

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

    def __init__(self, ctx: Any, settings: Any, seed: Mapping[str, str],
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
            answer=clip(a, clip_at)) for (r, t, c), a in zip(nodes, answers, strict=True)],
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
            child_prompt=tj, child_answer=clip(a, clip_at))
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

