"""`tavo`'s prompts (ours) and the strict parsing of the replies it acts on.

Contract:
- Five prompts, one per uncharged call: `subtraj_prompt` (a judge scores one sub-trajectory),
  `agent_prompt` (a judge gives one agent's credit and editing instructions), `merge_prompt`
  (one role's edits from several runs merged), `rewrite_prompt` (one role's prompt rewritten
  with its merged edits) and `overlay_prompt` (3-6 team rules from the pooled edits). Each
  opens with its own title line (`TITLES`), so a script can tell them apart.
- The outcome line reads `Outcome: PASSED` or `Outcome: FAILED`, always.
- JSON replies: `json_object(reply)` is the object between the first `{` and the last `}`
  (None when there is none or it does not parse: a truncated reply never parses). The
  `parse_*` functions then check the schema strictly and return None on any deviation:
  scores are numbers in 1..10 (booleans are not), text fields a string or a list of strings,
  edits an object with all three lists `add`, `remove`, `restructure` of strings; each list
  is cut to `EDIT_ITEMS` items and each item clipped to `ITEM_CHARS` characters.
- Marked replies: `marked(reply, begin, end)` is the text between the last `begin` marker and
  the first `end` marker after it, or None (missing marker, nothing between): a reply cut
  short is never mistaken for a prompt. `parse_rules` reads a rules block: bullet lines
  (`-`, `*`, `1.`, `1)`), a non-bullet line continuing the rule above; None when the first
  line is no bullet or the count is outside the bounds asked.
- What an agent-credit request shows about one agent: `actors` (who took a turn, with its
  role), `asked_of` (the manager's delegation payloads to it, else its user messages) and
  `step_scores` (the run's sub-trajectory judgments, one line each).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lcb.optimize.methods.reflection import marked_text, render_args
from lcb.registry import CENTRALIZED_MANAGER as MANAGER
from lcb.teams.layouts import DELEGATE_TOOL as TOOL
from lcb.text import clip

EDIT_KINDS = ("add", "remove", "restructure")
SCORE_KEYS = ("progress", "coordination", "stage_appropriateness")
TEXT_KEYS = ("contributions", "weaknesses", "suggestions")
EDIT_ITEMS, ITEM_CHARS = 8, 300  # per kind of edit, per item: what a parsed reply keeps
PROMPT_BEGIN, PROMPT_END = "<<<TAVO PROMPT>>>", "<<<END TAVO PROMPT>>>"
RULES_BEGIN, RULES_END = "<<<TAVO RULES>>>", "<<<END TAVO RULES>>>"
TITLES = {"subtraj": "# TAVO: judge one step of a team run",
          "agent": "# TAVO: credit one agent of a team run",
          "merge": "# TAVO: merge editing instructions",
          "rewrite": "# TAVO: rewrite one role prompt",
          "overlay": "# TAVO: write the team rules"}
_BULLET = re.compile(r"^\s*(?:[-*]|\d{1,2}[.)])\s+(.*\S)\s*$")

Edits = dict[str, list[str]]


@dataclass(frozen=True)
class StepJudgment:
    """A judge's scores (1-10) and notes on one sub-trajectory."""

    progress: float
    coordination: float
    stage_appropriateness: float
    contributions: tuple[str, ...]
    weaknesses: tuple[str, ...]
    suggestions: tuple[str, ...]

    def scores(self) -> list[float]:
        return [self.progress, self.coordination, self.stage_appropriateness]


@dataclass(frozen=True)
class AgentCredit:
    """A judge's credit (1-10) for one agent on one run, and its editing instructions."""

    score: float
    causal_analysis: str
    edits: Edits


# --- rendering ----------------------------------------------------------------------------
def render_entry(entry: Mapping[str, Any], *, clip_chars: int) -> str:
    """One transcript entry as a headed block: who, what kind, the text, its tool calls."""
    kind = str(entry.get("type") or "")
    if kind == "tool":
        failed = " (failed)" if entry.get("status") == "error" else ""
        kind = f"reply of tool {entry.get('name') or '?'}{failed}"
    parts = [f"--- {entry.get('source') or '?'} ({kind}) ---",
             clip(str(entry.get("content") or ""), clip_chars)]
    for call in entry.get("tool_calls") or ():
        args = clip(render_args(call.get("args")), clip_chars)
        parts.append(f"[calls {call.get('name') or '?'}]\n{args}".rstrip())
    return "\n".join(part for part in parts if part.strip())


def render_steps(steps: Sequence[Sequence[Mapping[str, Any]]], *, clip_chars: int,
                 first: int = 1) -> str:
    """Sub-trajectories, each under a `Step k` heading."""
    blocks = []
    for number, entries in enumerate(steps, start=first):
        body = "\n".join(render_entry(e, clip_chars=clip_chars) for e in entries)
        blocks.append(f"## Step {number}\n{body}")
    return "\n\n".join(blocks)


def outcome_text(score: float, feedback: str, *, chars: int) -> str:
    verdict = "PASSED" if score >= 1.0 else "FAILED"
    note = clip(feedback.strip(), chars) if feedback.strip() else "(no failing test)"
    return f"Outcome: {verdict} (score {score:g})\nGrader feedback: {note}"


def render_edits(edits: Mapping[str, Sequence[str]]) -> str:
    lines = []
    for kind in EDIT_KINDS:
        items = list(edits.get(kind, ()))
        lines.append(f"{kind}:" + ("" if items else " (none)"))
        lines += [f"- {item}" for item in items]
    return "\n".join(lines)


# --- prompts ------------------------------------------------------------------------------
_TEAM = ("A team of language-model agents writes one Python program for a competitive-"
         "programming problem; the program is graded on hidden tests and counts only when "
         "every test passes. The team's topology is '{topology}'.")
_JSON = "Answer with one JSON object and nothing else, in this shape:\n"


def subtraj_prompt(*, topology: str, task: str, outcome: str, earlier: str, step: str,
                   actor: str, number: int, total: int) -> str:
    """The judge's request for one sub-trajectory (T = 0.3 in the method)."""
    return "\n\n".join([
        TITLES["subtraj"], _TEAM.format(topology=topology),
        f"## The problem\n{task}", f"## How the team's program fared\n{outcome}",
        "## Earlier steps of this run\n" + (earlier or "(none: this is the first step)"),
        f"## The step under judgment: step {number} of {total}, taken by {actor}\n{step}",
        "## Your task\nRate this step's part in the outcome from 1 (harmful) to 10 "
        "(excellent) on three scales: progress (how far it moved the team toward a correct "
        "program), coordination (how well it used and served the other agents' work: "
        "instructions, hand-offs, replies) and stage_appropriateness (whether it did what "
        "its role and its moment in the run called for). Then name its contributions, its "
        "weaknesses and concrete suggestions. " + _JSON +
        '{"progress": 5, "coordination": 5, "stage_appropriateness": 5, "contributions": '
        '["..."], "weaknesses": ["..."], "suggestions": ["..."]}'])


def agent_prompt(*, topology: str, agent: str, role: str, task: str, outcome: str,
                 step_scores: str, prompt: str, asked: str, said: str, usage: str) -> str:
    """The judge's request for one (task, agent) credit (T = 0.5 in the method)."""
    return "\n\n".join([
        TITLES["agent"], _TEAM.format(topology=topology),
        f"The agent under review is '{agent}'; it runs with the prompt of the role '{role}'.",
        f"## The problem\n{task}", f"## How the team's program fared\n{outcome}",
        f"## Scores the judge gave each step of this run\n{step_scores}",
        f"## The agent's prompt (the text to be edited)\n{prompt}",
        f"## What the agent was asked\n{asked}", f"## What the agent said\n{said}",
        f"## Its usage\n{usage}",
        "## Your task\nJudge how far this agent caused the outcome (score 1: it caused the "
        "failure or added nothing; 10: the result rests on it), explain the causal chain, and "
        "write editing instructions for its prompt: sentences to add, parts to remove, and "
        "parts to restructure. Make them general habits that would help on other problems; "
        "never mention this problem. Empty lists are fine when the prompt should stay. " + _JSON +
        '{"score": 5, "causal_analysis": "...", "editing_instructions": {"add": ["..."], '
        '"remove": ["..."], "restructure": ["..."]}}'])


def merge_prompt(*, role: str, sources: Sequence[tuple[str, Mapping[str, Sequence[str]]]],
                 caps: Mapping[str, int]) -> str:
    """One role's edits from several (task, agent) credits, to be merged into one set."""
    blocks = [f"### {label}\n{render_edits(edits)}" for label, edits in sources]
    limits = ", ".join(f"{caps[kind]} {kind}" for kind in EDIT_KINDS)
    return "\n\n".join([
        TITLES["merge"],
        f"Editing instructions for the prompt of the role '{role}' were written after "
        f"several runs of a team of programming agents, one set per run and agent.",
        "## The proposed edits\n" + "\n\n".join(blocks),
        "## Your task\nMerge them into one set: drop duplicates and near-duplicates, resolve "
        "conflicts (something one run asks to add and another to remove: keep the side more "
        "runs support, or drop both), put the best-supported edits first, and keep at most "
        f"{limits}. " + _JSON + '{"add": ["..."], "remove": ["..."], "restructure": ["..."]}'])


def rewrite_prompt(*, role: str, topology: str, current: str, edits: Mapping[str, Sequence[str]],
                   placeholders: Sequence[str] = ()) -> str:
    """The request to rewrite one role's prompt with its merged edits."""
    keep = ""
    if placeholders:
        keep = ("Keep " + ", ".join("{" + name + "}" for name in placeholders) +
                " verbatim: the harness fills it in. ")
    return "\n\n".join([
        TITLES["rewrite"], _TEAM.format(topology=topology),
        f"You revise the prompt of the role '{role}'. The harness appends its own output-"
        "format rules after the prompt, so do not restate them.",
        f"## The current prompt\n{current.strip()}", f"## Edits to apply\n{render_edits(edits)}",
        "## Your task\nWrite the complete revised prompt: apply every edit, keep the role's "
        f"responsibilities and everything the edits do not touch. {keep}Answer with the "
        f"prompt between these two marker lines and nothing after the second:\n"
        f"{PROMPT_BEGIN}\n(the complete revised prompt)\n{PROMPT_END}"])


def overlay_prompt(*, topology: str, current_rules: Sequence[str],
                   pooled: Sequence[tuple[str, Mapping[str, Sequence[str]]]],
                   bounds: tuple[int, int]) -> str:
    """The request for one shared block of team rules from every role's merged edits."""
    rules = "\n".join(f"- {rule}" for rule in current_rules) or "(none yet)"
    blocks = "\n\n".join(f"### role {role}\n{render_edits(edits)}" for role, edits in pooled)
    low, high = bounds
    return "\n\n".join([
        TITLES["overlay"], _TEAM.format(topology=topology),
        "Every agent's prompt ends with one shared block of team rules; you write that block "
        "anew (it replaces the current one).",
        f"## The current team rules\n{rules}", f"## Edits proposed for the roles\n{blocks}",
        f"## Your task\nWrite {low} to {high} short behavioural rules that carry the most "
        "useful of these edits and hold for every agent of the team; keep a current rule only "
        "if it still helps. One rule a line, each starting with '- '. Answer with the rules "
        f"between these two marker lines and nothing after the second:\n"
        f"{RULES_BEGIN}\n- (a rule)\n{RULES_END}"])


# --- parsing ------------------------------------------------------------------------------
def json_object(reply: str) -> dict[str, Any] | None:
    """The JSON object of `reply` (first `{` to last `}`), or None."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        value = json.loads(reply[start:end + 1])
    except (ValueError, RecursionError):  # not JSON, or nested too deeply
        return None
    return value if isinstance(value, dict) else None


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 1 <= value <= 10 else None


def _texts(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return (value.strip(),) if value.strip() else ()
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(item.strip() for item in value if item.strip())
    return None


def parse_edits(value: Any) -> Edits | None:
    """`{"add": [...], "remove": [...], "restructure": [...]}` with every key, lists of
    strings (blank items dropped, at most `EDIT_ITEMS` kept, each clipped to `ITEM_CHARS`),
    else None."""
    if not isinstance(value, dict) or set(value) != set(EDIT_KINDS):
        return None
    edits: Edits = {}
    for kind in EDIT_KINDS:
        items = value[kind]
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            return None
        kept = [item.strip() for item in items if item.strip()][:EDIT_ITEMS]
        edits[kind] = [clip(item, ITEM_CHARS) for item in kept]
    return edits


def parse_step(reply: str) -> StepJudgment | None:
    data = json_object(reply)
    if data is None:
        return None
    scores = [_score(data.get(key)) for key in SCORE_KEYS]
    texts = [_texts(data.get(key, [])) for key in TEXT_KEYS]
    if any(s is None for s in scores) or any(t is None for t in texts):
        return None
    return StepJudgment(*scores, *texts)  # type: ignore[arg-type]


def parse_credit(reply: str) -> AgentCredit | None:
    data = json_object(reply)
    if data is None:
        return None
    score, analysis = _score(data.get("score")), data.get("causal_analysis")
    edits = parse_edits(data.get("editing_instructions"))
    if score is None or not isinstance(analysis, str) or edits is None:
        return None
    return AgentCredit(score, analysis.strip(), edits)


def marked(reply: str, begin: str, end: str) -> str | None:
    return marked_text(reply, begin, end)


def parse_rules(reply: str, *, bounds: tuple[int, int]) -> list[str] | None:
    block = marked(reply, RULES_BEGIN, RULES_END)
    if block is None:
        return None
    rules: list[str] = []
    for line in (line for line in block.splitlines() if line.strip()):
        bullet = _BULLET.match(line)
        if bullet:
            rules.append(bullet.group(1))
        elif rules:
            rules[-1] = f"{rules[-1]} {line.strip()}"
        else:
            return None
    return rules if bounds[0] <= len(rules) <= bounds[1] else None


# --- what an agent-credit request shows -----------------------------------------------------
def actors(transcript: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Agent -> role, for every agent that took a turn, in order of first turn."""
    return {str(e.get("source")): str(e.get("role")) for e in transcript
            if e.get("type") == "assistant"}


def asked_of(transcript: Sequence[Mapping[str, Any]], agent: str) -> str:
    """What `agent` was asked: the manager's `delegate` payloads to it, else its user
    messages."""
    delegated = [str(c["args"].get("instruction") or "") for e in transcript
                 if e.get("source") == MANAGER and e.get("type") == "assistant"
                 for c in e.get("tool_calls") or ()
                 if c.get("name") == TOOL and isinstance(c.get("args"), Mapping)
                 and c["args"].get("worker") == agent]
    if delegated:
        return "\n\n".join(f"(delegation {k}) {text}" for k, text in enumerate(delegated, 1))
    return "\n\n".join(str(e.get("content") or "") for e in transcript
                       if e.get("source") == agent and e.get("type") == "user")


def step_scores(judged: Sequence[tuple[str, StepJudgment | None]]) -> str:
    """One line per sub-trajectory of a run: its agent, scores and notes."""
    lines = []
    for number, (agent, j) in enumerate(judged, start=1):
        if j is None:
            lines.append(f"step {number} ({agent}): no usable judgment")
            continue
        notes = "; ".join(f"{name}: {' / '.join(items)}" for name, items in
                          (("weaknesses", j.weaknesses), ("suggestions", j.suggestions)) if items)
        lines.append(f"step {number} ({agent}): progress {j.progress:g}, coordination "
                     f"{j.coordination:g}, stage {j.stage_appropriateness:g}"
                     + (f"; {notes}" if notes else ""))
    return "\n".join(lines) or "(no steps)"
