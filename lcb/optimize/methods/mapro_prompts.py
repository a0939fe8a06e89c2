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

import json
import re
from collections.abc import Mapping, Sequence

from lcb.agents.prompts import PLACEHOLDERS, fill_placeholders
from lcb.optimize.graph import RoleTurn
from lcb.optimize.methods.reflection import marked_text

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


Demo = tuple[str, str]  # (what the role was given, what it answered), clipped


def preference_block(better: Sequence[Demo], worse: Sequence[Demo], *, given: str,
                     answer: str) -> str:
    """Few-shot preference demonstrations for a judge: answers this role gave in the team's
    own runs on train problems, in runs whose program passed every hidden test (better) and
    in runs that failed (worse). "" without a pair."""
    if not better or not worse:
        return ""
    parts = ["## How this role's answers fared in the team's own runs (train problems)",
             "Use them to calibrate your scale: a run's outcome depends on the whole team, so "
             "they are evidence, not labels.\n"]
    for title, demos in (("Better: the team's program passed every hidden test", better),
                         ("Worse: the team's program failed", worse)):
        for shown, said in demos:
            parts += [f"### {title}", f"{given}:\n{shown.strip() or '(empty)'}",
                      f"{answer}:\n{said.strip() or '(empty)'}\n"]
    return "\n".join(parts)


def node_judge_prompt(*, topology: str, role: str, prompt: str, given: str,
                      answer: str, demos: str = "") -> str:
    """How competent is one candidate prompt of `role`, judged on one probe answer; `demos` is
    its `preference_block`."""
    return "\n".join([
        f"You are judging one agent of {_TEAM.format(topology=topology)}.",
        *([demos] if demos else []),
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
                      child_prompt: str, child_answer: str, demos: str = "") -> str:
    """How well a parent's output serves one candidate prompt of the child; `demos` is the
    pair's `preference_block` (the parent's output as given, the child's answer)."""
    return "\n".join([
        f"You are judging a hand-off between two agents of {_TEAM.format(topology=topology)}.",
        *([demos] if demos else []),
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
