"""Whole-team transcripts for reflection: every agent's messages, source-tagged, one role marked.

Contract (`mamut_gepa` builds its reflection records with this module):
- `time_ordered(transcript)`: a centralized team's transcript (every entry tagged
  `delegation`) lists the manager's whole run (`delegation 0`), then each worker run
  (`delegation n`, the n-th `delegate` call that reached the tool). In time order, each worker
  run goes right after the manager's `delegate` call that started it: right before that
  call's tool result (matched by `tool_call_id`), else right after the manager's message that
  made the call. A run is matched to the first unused valid `delegate` call, in call order,
  naming its agent as `worker` whose `instruction` is in the run's user message, else naming
  its agent; an unmatched run stays after the manager's. Any other transcript is kept as is.
- `team_messages(transcript, role, *, repeated=(), limits=...)` keeps every message of a team
  transcript (`TeamResult.transcript`) but the system prompts, in time order, as
  `TeamMessage`s: its number (1-based, among those messages), the agent (`source`), its role,
  the team step (`stage`, `round` or `delegation`, when the team tags one), its type, whether
  it is one of `role`'s own (`own`: every agent holding that prompt slot, replicas included),
  and its body. System prompts are left out: the reflected role's is the text under revision,
  shown on its own; the others' would multiply every record by the team size.
- A body is the message's content, with each text of `repeated` (what every agent is given:
  the question prompt, the statement; longest first) replaced by `TASK_NOTE` when it is at
  least `TASK_MIN` characters long, clipped to `message_chars` (`reflection.clip`: head and
  tail kept); then, one block each, the tool calls the message made, `[tool call NAME]` (or
  `[invalid tool call NAME]`) and their arguments (`reflection.render_args`: a delegation's
  worker and instruction, the code sent to `python_exec`), clipped to `args_chars`. A tool
  message's type reads `result of tool NAME`, with ` (failed)` when its status is an error.
- Caps per record (`select`): at most `max_messages` messages. The role's own come first (the
  first and the last ones when even they exceed the cap: the first half rounded up, then the
  rest from the end); the room left goes to the other agents' messages, again first ones, then
  last ones (the task and its hand-offs, then the final answers). Each run of left-out
  messages becomes one `Gap` saying how many, and how many of them were the role's. When the
  kept bodies together exceed `record_chars`, each is clipped to an equal share of it (at
  least `reflection.MIN_SHARE` characters).
- `render_team(items)`: one header line per message, then its body. Another agent's message:
  `--- [3] analyzer_0 (role analyzer, stage 0) assistant ---`; the role's own:
  `>>> [5] coder_0 (role coder, stage 1) assistant | ROLE UNDER REVISION <<<`; a gap:
  `... (4 messages left out, 1 of them the role's) ...`.
- `team_record(problem, rollout, role, settings)`: what one reflection sees of one problem
  (heading -> text): the problem, its task (the question prompt the team is given, clipped to
  `task_chars`; in the transcript it is `repeated`, unless it was clipped: then the
  transcript keeps it as the agents got it, so no part of it is lost), the global score with
  the verdict, the
  grader's feedback (clipped to `feedback_chars`) and the whole team transcript, after a line
  saying how to read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lcb.agents.prompts import question_prompt
from lcb.data.problems import Problem
from lcb.optimize.graph import STEP_KEYS
from lcb.optimize.method import Rollout
from lcb.optimize.methods.reflection import MIN_SHARE, render_args, require_positive
from lcb.teams.layouts import DELEGATE_TOOL as DELEGATE
from lcb.teams.layouts import DELEGATION_STEP as DELEGATION
from lcb.text import clip

TASK_NOTE = "[the task, shown above]"
TASK_MIN = 40  # shorter statements are left in place (they could be part of anything)
OWN_TAG = "ROLE UNDER REVISION"


@dataclass(frozen=True)
class TranscriptLimits:
    """How much of one team transcript a record may carry (see the module docstring)."""

    message_chars: int = 1500  # per message (a tool result too)
    args_chars: int = 1200  # per tool call, its rendered arguments
    max_messages: int = 40  # per record, every agent together
    record_chars: int = 12000  # per record, the kept bodies together

    def __post_init__(self) -> None:
        require_positive(self, "message_chars", "args_chars", "max_messages", "record_chars")


@dataclass(frozen=True)
class TeamReflectionSettings:
    """What one reflection sees: records (problems) per reflection, characters of the task
    statement and of grader feedback per record, and the transcript limits."""

    records_per_reflection: int = 3
    task_chars: int = 6000  # a longer task is clipped and left in place in the transcript
    feedback_chars: int = 1200
    limits: TranscriptLimits = field(default_factory=TranscriptLimits)

    def __post_init__(self) -> None:
        require_positive(self, "records_per_reflection", "task_chars", "feedback_chars")


@dataclass(frozen=True)
class TeamMessage:
    """One message of a team run, as a record shows it."""

    number: int
    source: str
    role: str
    step: str  # "stage 1", "round 0", "delegation 2", or "" when the team tags none
    kind: str
    own: bool
    body: str


@dataclass(frozen=True)
class Gap:
    """A run of messages the caps left out."""

    count: int
    own: int


def team_messages(transcript: Sequence[Mapping[str, Any]], role: str, *,
                  repeated: Sequence[str] = (),
                  limits: TranscriptLimits = TranscriptLimits()) -> list[TeamMessage]:
    """Every non-system message of `transcript`, tagged and clipped (see the module docstring)."""
    kept = [entry for entry in time_ordered(transcript) if entry.get("type") != "system"]
    texts = sorted({t.strip() for t in repeated if len(t.strip()) >= TASK_MIN}, key=len,
                   reverse=True)
    return [TeamMessage(number=number, source=str(entry.get("source") or entry.get("role")),
                        role=str(entry.get("role") or ""), step=_step(entry),
                        kind=_kind(entry), own=entry.get("role") == role,
                        body=_body(entry, texts, limits))
            for number, entry in enumerate(kept, start=1)]


@dataclass(frozen=True)
class _Call:
    """A valid `delegate` call of the manager: where it was made, its id, its arguments."""

    at: int
    id: str
    worker: str
    instruction: str


def time_ordered(transcript: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`transcript` with each worker run after the call that started it (see the module
    docstring)."""
    if not transcript or any(not isinstance(e.get(DELEGATION), int) for e in transcript):
        return list(transcript)
    manager = [e for e in transcript if e[DELEGATION] == 0]
    runs: dict[int, list[Mapping[str, Any]]] = {}
    for entry in transcript:
        if entry[DELEGATION] != 0:
            runs.setdefault(entry[DELEGATION], []).append(entry)
    calls = _delegations(manager)
    before: dict[int, list[int]] = {}  # manager entry -> the runs placed right before it
    after: dict[int, list[int]] = {}  # ... right after it
    loose: list[int] = []
    for number in sorted(runs):
        call = _match(runs[number], calls)
        if call is None:
            loose.append(number)
            continue
        result = next((i for i in range(call.at + 1, len(manager)) if call.id
                       and manager[i].get("type") == "tool"
                       and manager[i].get("tool_call_id") == call.id), None)
        (after.setdefault(call.at, []) if result is None
         else before.setdefault(result, [])).append(number)
    ordered: list[Mapping[str, Any]] = []
    for index, entry in enumerate(manager):
        ordered.extend(e for n in before.get(index, []) for e in runs[n])
        ordered.append(entry)
        ordered.extend(e for n in after.get(index, []) for e in runs[n])
    ordered.extend(e for n in loose for e in runs[n])
    return ordered


def _delegations(manager: Sequence[Mapping[str, Any]]) -> list[_Call]:
    """The manager's valid `delegate` calls, in call order."""
    return [_Call(at=index, id=str(call.get("id") or ""), worker=str(call["args"].get("worker")),
                  instruction=str(call["args"].get("instruction") or ""))
            for index, entry in enumerate(manager) if entry.get("type") == "assistant"
            for call in entry.get("tool_calls") or []
            if call.get("name") == DELEGATE and not call.get("invalid")
            and isinstance(call.get("args"), Mapping)]


def _match(run: Sequence[Mapping[str, Any]], calls: list[_Call]) -> _Call | None:
    """The call that started `run`, taken out of `calls` (see the module docstring)."""
    agent = str(run[0].get("source") or run[0].get("role"))
    user = next((str(e.get("content") or "") for e in run if e.get("type") == "user"), "")
    named = [call for call in calls if call.worker == agent]
    call = next((c for c in named if c.instruction.strip() and c.instruction in user),
                named[0] if named else None)
    if call is not None:
        calls.remove(call)
    return call


def _step(entry: Mapping[str, Any]) -> str:
    key = next((key for key in STEP_KEYS if key in entry), None)
    return "" if key is None else f"{key} {entry[key]}"


def _kind(entry: Mapping[str, Any]) -> str:
    kind = str(entry.get("type") or "")
    if kind != "tool":
        return kind
    failed = " (failed)" if entry.get("status") == "error" else ""
    return f"result of tool {entry.get('name') or '?'}{failed}"


def _body(entry: Mapping[str, Any], repeated: Sequence[str], limits: TranscriptLimits) -> str:
    content = str(entry.get("content") or "")
    for text in repeated:
        content = content.replace(text, TASK_NOTE)
    parts = [clip(content.strip(), limits.message_chars)]
    for call in entry.get("tool_calls") or []:
        verb = "invalid tool call" if call.get("invalid") else "tool call"
        args = clip(render_args(call.get("args")), limits.args_chars)
        parts.append(f"[{verb} {call.get('name') or '?'}]\n{args}".rstrip())
    return "\n".join(part for part in parts if part)


def _ends(items: Sequence[int], count: int) -> list[int]:
    """The first `count - count // 2` and the last `count // 2` of `items`."""
    count = min(count, len(items))
    tail = count // 2
    return [*items[:count - tail], *items[len(items) - tail:]]


def select(messages: Sequence[TeamMessage],
           limits: TranscriptLimits = TranscriptLimits()) -> list[TeamMessage | Gap]:
    """The messages a record keeps, with a `Gap` for each run left out, each body shared
    down to the record's room (see the module docstring)."""
    own = [i for i, m in enumerate(messages) if m.own]
    others = [i for i, m in enumerate(messages) if not m.own]
    chosen = set(_ends(own, limits.max_messages))
    chosen |= set(_ends(others, limits.max_messages - len(chosen)))
    kept = [messages[i] for i in sorted(chosen)]
    if sum(len(m.body) for m in kept) > limits.record_chars:
        share = max(MIN_SHARE, limits.record_chars // len(kept))
        kept = [replace(m, body=clip(m.body, share)) for m in kept]
    by_index = dict(zip(sorted(chosen), kept, strict=True))
    items: list[TeamMessage | Gap] = []
    for index, message in enumerate(messages):
        if index in by_index:
            items.append(by_index[index])
        elif items and isinstance(items[-1], Gap):
            items[-1] = Gap(items[-1].count + 1, items[-1].own + message.own)
        else:
            items.append(Gap(1, int(message.own)))
    return items


def _header(message: TeamMessage) -> str:
    where = f"role {message.role}" + (f", {message.step}" if message.step else "")
    head = f"[{message.number}] {message.source} ({where}) {message.kind}"
    return f">>> {head} | {OWN_TAG} <<<" if message.own else f"--- {head} ---"


def render_team(items: Sequence[TeamMessage | Gap]) -> str:
    """The kept messages as one readable block (see the module docstring)."""
    if not items:
        return "(the team exchanged no message on this problem)"
    lines = []
    for item in items:
        if isinstance(item, Gap):
            noun = "message" if item.count == 1 else "messages"
            lines.append(f"... ({item.count} {noun} left out, {item.own} of them the "
                         f"role's) ...")
        else:
            lines.append(f"{_header(item)}\n{item.body}".rstrip())
    return "\n".join(lines)


def team_record(problem: Problem, rollout: Rollout, role: str,
                settings: TeamReflectionSettings = TeamReflectionSettings()) -> dict[str, str]:
    """The reflection record of one problem for `role` (see the module docstring)."""
    passed = rollout.score >= 1.0
    verdict = "solved: every hidden test passed" if passed else "not solved"
    feedback = rollout.feedback or ("" if passed else "no feedback")
    task = question_prompt(problem).strip()
    whole = len(task) <= settings.task_chars  # a clipped task stays in the transcript
    messages = team_messages(rollout.team.transcript, role,
                             repeated=(task, problem.statement) if whole else (),
                             limits=settings.limits)
    guide = (f"({len(messages)} messages, system prompts left out; the turns of the role "
             f"'{role}' are marked >>> ... {OWN_TAG} <<<)")
    return {
        "Problem": f"{problem.id}: {problem.title}",
        "Task": clip(task, settings.task_chars),
        "Global score": f"{rollout.score:g} ({verdict})",
        "Grader feedback": clip(feedback, settings.feedback_chars) or "(none)",
        "Team transcript": f"{guide}\n{render_team(select(messages, settings.limits))}",
    }
