"""MASPO's prompts, the strict parsing of their replies, and the reward and beam arithmetic.

Contract:
- `proposal_prompt(...)` asks the reflection model for a complete new text of one role, from
  samples of what the role was given and produced (with each run's outcome); the reply must
  hold the text between `BEGIN` and `END` (each on a line of its own). `parse_candidate`
  returns that text, or None when a marker is missing or nothing is between them: a truncated
  reply is never adopted.
- `judge_prompt(...)` asks for one pairwise verdict between two versions of a role (A and B),
  either on the role's own output (`Question.LOCAL`) or on what follows from it downstream
  (`Question.LOOKAHEAD`: the successor roles' outputs or the team's final answer). The judge
  sees what each version was given and produced, never its instruction text (a text cannot win
  on its own wording). The reply must hold a JSON object `{"verdict": "A" | "B" | "tie",
  "reason": "..."}`; `parse_verdict` takes the first complete JSON object in it (prose or a
  fence around it is ignored), and returns "A", "B" or "tie" (any case), else None.
- The numbers (`pairwise_value`): from the child's side, child better = 1.0, tie = 0.5, parent
  better = 0.0; an unparsable verdict counts as a tie (0.5: no evidence either way), and is
  counted in the record. `metric_value(child, parent)` applies the same map to the two final
  scores (greater = 1.0, equal = 0.5, smaller = 0.0).
- The beam (`Member`, `select`, `refreshed`) and the misalignment buffer
  (`MisalignmentBuffer`, `inject`) are the rest of the arithmetic; `lcb.optimize.methods.
  maspo` states what they mean.
- `item_reward(local, lookahead, global_)` = 0.4·local + 0.4·lookahead + 0.2·global − 0.5, so
  a reward lies in [−0.5, 0.5] and all-ties gives 0. For a role with no successor whose output
  is the team's answer (the last stage of a chain), `lookahead` is the global value: the grader
  is its successor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from lcb.optimize.methods.reflection import marked_text

BEGIN = "=== MASPO CANDIDATE BEGIN ==="
END = "=== MASPO CANDIDATE END ==="
JUDGE_TITLE = "MASPO pairwise judgement"
PASSED, FAILED = "PASSED", "FAILED"
WEIGHTS = (0.4, 0.4, 0.2)  # local validity, lookahead, global outcome
OFFSET = 0.5
VALUES = {"child": 1.0, "tie": 0.5, "parent": 0.0}
_VERDICTS = {"a": "A", "b": "B", "tie": "tie"}


class Question(StrEnum):
    LOCAL = "local"
    LOOKAHEAD = "lookahead"


_PROPOSE = (
    "You refine the instructions of one agent in a team of language-model agents that writes "
    "Python programs for competitive-programming problems. A program is run on hidden tests "
    "and a problem counts only when every test passes.\n\n"
    "Team topology: '{topology}'. The agent under revision plays the role '{role}'. {place} "
    "The harness appends its own output-format rules after these instructions: leave them out."
    "\n\n## Current instructions of '{role}'\n{current}\n\n"
    "## Samples: what '{role}' was given, what it produced, and how the team's program fared\n"
    "{samples}\n\n## Your task\n"
    "Find what in the role's behaviour hurt the team on the failed samples (misread "
    "constraints, missed edge cases, slow algorithms, careless parsing, vague hand-offs) and "
    "what helped on the passed ones. Write new instructions for '{role}' that keep its duties, "
    "keep what helps and add general guidance against the failures; never refer to these "
    "particular problems. {keep}Give the complete instructions, not a diff, between the two "
    "lines below, each on a line of its own, and write nothing after the second one:\n"
    "{begin}\n(the complete new instructions)\n{end}\n"
)

_JUDGE = (
    "# {title}\n"
    "Two versions of the role '{role}' in a '{topology}' team of agents that writes Python "
    "programs for competitive-programming problems. The versions differ only in the role's "
    "instructions, which are not shown; both ran on the same problem with the same sampling "
    "seeds. Judge only what each version was given and what it produced.\n\n"
    "{versions}\n\n## Question\n{question}\n"
    "Answer with one JSON object and nothing else, e.g. "
    '{{"verdict": "A", "reason": "one sentence"}}, where verdict is "A", "B" or "tie".\n'
)
_ASK = {
    Question.LOCAL: ("Judge the role's own output: which version's output is the more valid "
                     "response to its input for this role (correct reasoning, the role's "
                     "duties met, what teammates need handed on)?"),
    Question.LOOKAHEAD: ("Judge what followed downstream of the role: which version led to "
                         "the better result there (the next agents' work or the team's final "
                         "answer: more likely correct, complete and efficient)?"),
}


def proposal_prompt(*, topology: str, role: str, place: str, current: str,
                    samples: Sequence[Mapping[str, str]], placeholders: Sequence[str] = ()
                    ) -> str:
    """The reflection request for one offspring. Each sample maps a heading ("Input",
    "Output", "Feedback", ...) to its text and has an "outcome" (`PASSED` / `FAILED`)."""
    keep = ""
    if placeholders:
        names = ", ".join("{" + name + "}" for name in placeholders)
        keep = f"Keep the placeholder(s) {names} verbatim: the harness fills them in. "
    blocks = []
    for index, sample in enumerate(samples, start=1):
        body = "\n".join(f"{key}:\n{value}" for key, value in sample.items() if key != "outcome")
        blocks.append(f"### Sample {index} (outcome: {sample['outcome']})\n{body}")
    return _PROPOSE.format(topology=topology, role=role, place=place, current=current.strip(),
                           samples="\n\n".join(blocks) or "(no samples)", keep=keep,
                           begin=BEGIN, end=END)


def parse_candidate(reply: str) -> str | None:
    """The text between the last `BEGIN` line and the `END` after it; None when a marker is
    missing or the text is empty."""
    return marked_text(reply, BEGIN, END)


def judge_prompt(question: Question, *, topology: str, role: str,
                 sides: Sequence[Mapping[str, str]]) -> str:
    """A pairwise request: `sides` are version A then version B, each heading -> text."""
    versions = []
    for name, side in zip("AB", sides, strict=True):
        body = "\n".join(f"### {key}\n{value}" for key, value in side.items())
        versions.append(f"## Version {name}\n{body}")
    return _JUDGE.format(title=JUDGE_TITLE, role=role, topology=topology,
                         versions="\n\n".join(versions), question=_ASK[question])


def parse_verdict(reply: str) -> str | None:
    """"A", "B" or "tie" (any case in the reply) from the first complete JSON object in
    `reply` (text around it, a fence included, is ignored), when it is an object whose
    `verdict` is one of those strings; None for anything else (no complete object, another
    verdict, a non-string one)."""
    found = first_json_object(reply)
    verdict = found.get("verdict") if found is not None else None
    if not isinstance(verdict, str):
        return None
    return _VERDICTS.get(verdict.strip().lower())


def first_json_object(text: str) -> dict[str, object] | None:
    """The first complete JSON object in `text`, decoded from the first `{` that starts one
    (objects nested in it are part of it); None when no `{` does (e.g. a truncated reply)."""
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        return value if isinstance(value, dict) else None  # a `{` starts an object
    return None


def pairwise_value(verdict: str | None, *, child_side: str) -> float:
    """The child's number for one verdict (module docstring): 1, 0.5 or 0."""
    if verdict is None or verdict == "tie":
        return VALUES["tie"]
    return VALUES["child"] if verdict == child_side else VALUES["parent"]


def metric_value(child: float, parent: float) -> float:
    """The global term of one item: the child's final score against the parent's."""
    if child > parent:
        return VALUES["child"]
    return VALUES["tie"] if child == parent else VALUES["parent"]


def item_reward(local: float, lookahead: float, global_: float) -> float:
    """0.4·local + 0.4·lookahead + 0.2·global − 0.5 (module docstring)."""
    w_local, w_look, w_global = WEIGHTS
    return w_local * local + w_look * lookahead + w_global * global_ - OFFSET


def render_turns(turns: Sequence[object], *, limit: int, chars: int) -> dict[str, str]:
    """The last `limit` invocations of a role (`lcb.optimize.graph.RoleTurn`), each input,
    output and tool calls clipped to `chars`, as headed texts for a prompt."""
    from lcb.optimize.methods.reflection import render_args
    from lcb.text import clip

    shown: dict[str, str] = {}
    for turn in list(turns)[-limit:]:
        where = f"{turn.agent}" + ("" if turn.step is None else f", step {turn.step}")
        shown[f"Input to {where}"] = clip(turn.input, chars) or "(empty)"
        calls = "\n".join(f"[{name}] {render_args(args)}" for name, args in turn.tool_calls)
        if calls:
            shown[f"Tool calls of {where}"] = clip(calls, chars)
        shown[f"Output of {where}"] = clip(turn.output, chars) or "(no answer)"
    return shown or {"Role": "(this role took no turn on this problem)"}


# --- the beam's arithmetic and the misalignment buffer ----------------------------------

@dataclass
class Member:
    """A beam member: one text of the role, its value (summed rewards along its lineage,
    relative to the turn's anchor) and its gain (passes gained along the lineage)."""

    text: str
    value: float = 0.0
    gain: int = 0


@dataclass
class MisalignmentBuffer:
    """Rows where a role looked locally good but the team failed (newest `cap` kept)."""

    cap: int
    ids: list[str] = field(default_factory=list)

    def add(self, problem_id: str) -> None:
        if problem_id in self.ids:
            self.ids.remove(problem_id)
        self.ids.append(problem_id)
        del self.ids[:max(0, len(self.ids) - self.cap)]


def inject(buffers: Sequence[MisalignmentBuffer], *, limit: int) -> list[str]:
    """Up to `limit` ids, oldest first, buffer after buffer; the ids taken leave their buffer."""
    taken: list[str] = []
    for buffer in buffers:
        while buffer.ids and len(taken) < limit:
            problem_id = buffer.ids.pop(0)
            if problem_id not in taken:
                taken.append(problem_id)
    return taken


def select(pool: Sequence[Member], k: int) -> list[Member]:
    """The `k` best distinct texts by value; earlier members first on ties."""
    ranked = sorted(enumerate(pool), key=lambda pair: (-pair[1].value, pair[0]))
    kept: list[Member] = []
    for _, member in ranked:
        if len(kept) < k and all(m.text != member.text for m in kept):
            kept.append(member)
    return kept


def refreshed(previous: Sequence[Member], anchor: str, *, beam: int,
              reanchor: float) -> list[Member]:
    """The beam at a revisit (`lcb.optimize.methods.maspo`): the anchor, then the carried
    survivors."""
    base = next((m for m in previous if m.text == anchor), Member(anchor))
    carried = [Member(m.text, (1.0 - reanchor) * (m.value - base.value), m.gain - base.gain)
               for m in previous if m.text != anchor]
    return [Member(anchor), *carried][:beam]
