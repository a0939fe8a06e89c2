"""Shared pieces of the reflective methods: transcript slices, reflection prompts, the bridge.

Contract:
- `role_slice(transcript, role)` keeps the messages a role's agents exchanged (their own
  system prompt excluded: that is the text under revision), agent by agent (in order of first
  appearance, each message labelled with its agent id). Caps hold per agent, not per role: each
  agent keeps at most `max_messages` messages (its first and its last ones: the task and the
  answer, with a note counting what was left out), each clipped to `clip_chars`. An assistant
  message shows the tool calls it made with their arguments (a manager's delegation, the code
  sent to `python_exec`), each call's arguments clipped to `args_chars`; a tool message shows
  the tool's name, whether it failed, and its result. When the kept messages together exceed
  `record_chars`, each is clipped to an equal share of it (at least `MIN_SHARE`).
- `proposal_prompt(...)` is our reflection prompt: the current text of one role, what that
  role did on a few problems with the grader's verdict, and the request to answer with a
  complete new text between two marker lines. `parse_proposal(reply)` returns that text, or
  None when a marker is missing (a truncated reply is never mistaken for a prompt).
  `proposal_problem(text, current=..., seed=...)` says why a parsed text is still no prompt: it
  echoes the answer template's placeholder (`TEMPLATE_WORDING`, any case), keeps under
  `MIN_KEPT` (30 %) of the current text's length, or exceeds `GROWTH` (4) × the seed's length
  + `SLACK` (2000) characters; None when it may be tried.
- `LoopBridge` lets library code running in a worker thread (gepa, DSPy) call back into the
  job's event loop: `run(coro)` waits for a coroutine scheduled on the loop, `call(fn, ...)`
  runs a plain function on the loop thread. Calling either from the loop thread itself is a
  programming error and raises `RuntimeError` (it would deadlock). `run_in_thread` runs the
  library in a worker thread and closes the bridge when the awaiting task is cancelled, so
  the thread stops at its next call back (`BridgeClosed`) instead of blocking forever.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lcb.text import clip

T = TypeVar("T")

BEGIN_MARK = "=== REVISED PROMPT ==="
END_MARK = "=== END OF PROMPT ==="
TEMPLATE_WORDING = "the complete new prompt"  # the answer template's placeholder, in our prompts
MIN_KEPT = 0.3  # a proposal keeps at least this share of the current role text's length
GROWTH, SLACK = 4, 2000  # ... and is at most GROWTH x the seed's role text + SLACK characters
MIN_SHARE = 200  # characters a message keeps however many share a record


def require_positive(owner: object, *names: str) -> None:
    """Raise ValueError unless each named field of `owner` is an integer >= 1."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(owner).__name__}.{name} must be an integer >= 1, "
                             f"got {value!r}")


@dataclass(frozen=True)
class SliceLimits:
    """How much of a transcript one reflection record may carry, per agent of the role, and
    in all (`record_chars`: a team of ten agents must not make a prompt ten times longer)."""

    clip_chars: int = 1500  # per message (a tool result too)
    max_messages: int = 8  # per agent
    args_chars: int = 1200  # per tool call, its rendered arguments
    record_chars: int = 16000  # per record, every agent together

    def __post_init__(self) -> None:
        require_positive(self, "clip_chars", "max_messages", "args_chars", "record_chars")


@dataclass(frozen=True)
class ReflectionSettings:
    """How much the reflection model sees per proposal: records (problems) per reflection,
    characters of grader feedback, and the per-record transcript limits."""

    records_per_reflection: int = 3
    feedback_chars: int = 1200
    limits: SliceLimits = field(default_factory=SliceLimits)

    def __post_init__(self) -> None:
        require_positive(self, "records_per_reflection", "feedback_chars")


def role_slice(transcript: Sequence[Mapping[str, Any]], role: str, *,
               limits: SliceLimits = SliceLimits()) -> list[dict[str, str]]:
    """The messages of `role`'s agents (system prompts excluded), grouped by agent, each agent
    capped and clipped on its own (see the module docstring)."""
    by_agent: dict[str, list[dict[str, str]]] = {}
    for entry in transcript:
        if entry.get("role") != role or entry.get("type") == "system":
            continue
        agent = str(entry.get("source") or role)
        by_agent.setdefault(agent, []).append(
            {"source": agent, "type": _label(entry), "content": _content(entry, limits)})
    kept = [message for agent, messages in by_agent.items()
            for message in _cap(agent, messages, limits.max_messages)]
    if sum(len(m["content"]) for m in kept) > limits.record_chars:  # share the record's room
        share = max(MIN_SHARE, limits.record_chars // len(kept))
        kept = [{**m, "content": clip(m["content"], share)} for m in kept]
    return kept


def _cap(agent: str, kept: list[dict[str, str]], limit: int) -> list[dict[str, str]]:
    """The first half and the last half of one agent's messages when it has more than `limit`."""
    if len(kept) <= limit:
        return kept
    first, last = limit // 2, limit - limit // 2
    gap = {"source": agent, "type": "note",
           "content": f"({len(kept) - limit} more messages of {agent} left out)"}
    return [*kept[:first], gap, *kept[len(kept) - last:]]


def _label(entry: Mapping[str, Any]) -> str:
    kind = str(entry.get("type", ""))
    if kind != "tool":
        return kind
    failed = " (failed)" if entry.get("status") == "error" else ""
    return f"result of tool {entry.get('name') or '?'}{failed}"


def _content(entry: Mapping[str, Any], limits: SliceLimits) -> str:
    parts = [clip(str(entry.get("content") or ""), limits.clip_chars)]
    for call in entry.get("tool_calls") or []:
        verb = "invalid tool call" if call.get("invalid") else "tool call"
        args = clip(render_args(call.get("args")), limits.args_chars)
        parts.append(f"[{verb} {call.get('name') or '?'}]\n{args}".rstrip())
    return "\n".join(part for part in parts if part).strip()


def render_args(args: object) -> str:
    """A tool call's arguments, readably: one `name: value` line per argument; a text value
    that spans lines starts on the next line (code stays code)."""
    if not isinstance(args, Mapping):
        return "" if args is None else str(args)
    lines = []
    for name, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"{name}:\n{text}" if "\n" in text else f"{name}: {text}")
    return "\n".join(lines)


def render_slice(messages: Sequence[Mapping[str, str]]) -> str:
    """A readable block of a role slice: one header line per message."""
    if not messages:
        return "(this role took no turn on this problem)"
    return "\n".join(f"--- {m['source']} ({m['type']}) ---\n{m['content']}" for m in messages)


def first_and_last(transcript: Sequence[Mapping[str, Any]], role: str) -> tuple[str, str] | None:
    """What the first agent of `role` was given (its first user message) and what it answered
    last (its last assistant message); None when that agent has no such pair."""
    sources = [e.get("source") for e in transcript if e.get("role") == role]
    if not sources:
        return None
    mine = [e for e in transcript if e.get("source") == sources[0] and e.get("role") == role]
    asked = [str(e.get("content") or "") for e in mine if e.get("type") == "user"]
    answered = [str(e.get("content") or "") for e in mine if e.get("type") == "assistant"]
    if not asked or not answered or not answered[-1].strip():
        return None
    return asked[0], answered[-1]


_INTRO = (
    "You are improving one prompt of a team of language-model agents that write Python "
    "programs for competitive-programming problems. Each program is judged on hidden tests; "
    "a problem counts as solved only when every test passes.\n\n"
    "The team's topology is '{topology}'. The prompt under revision belongs to the role "
    "'{role}'. The harness appends its own output-format rules after this prompt, so do not "
    "restate them.\n"
)
_TASK = (
    "Study what this role did and how the team's final program fared. Find the habits that "
    "led to failures (misread constraints, missed edge cases, slow algorithms, wrong input "
    "parsing, skipped testing, unclear hand-offs to teammates) and the ones that worked. Then "
    "write an improved prompt for the role '{role}': keep what helps, add concrete, general "
    "guidance that would have prevented the failures, and never mention these particular "
    "problems. {keep_note}Write the complete prompt, not a diff.\n\n"
    "Answer with the new prompt between the two marker lines below, each on a line of its "
    "own, and nothing after the second marker:\n{begin}\n(" + TEMPLATE_WORDING + ")\n{end}\n"
)


def proposal_prompt(*, topology: str, role: str, current: str,
                    records: Sequence[Mapping[str, str]], placeholders: Sequence[str] = ()) -> str:
    """Our reflection prompt for one role (see the module docstring). Each record maps a
    heading (problem, outcome, feedback, transcript) to its text."""
    return assemble_request(_INTRO.format(topology=topology, role=role), _TASK, role=role,
                            current=current, heading="## What happened on some training problems",
                            records=records, placeholders=placeholders)


def assemble_request(intro: str, task: str, *, role: str, current: str, heading: str,
                     records: Sequence[Mapping[str, str]], placeholders: Sequence[str]) -> str:
    """A proposal request: `intro`, the current prompt, `heading` over the numbered records
    (each heading -> text), then `task` (a template of `role`, `keep_note`, `begin`, `end`)."""
    keep_note = ""
    if placeholders:
        names = ", ".join("{" + name + "}" for name in placeholders)
        keep_note = f"Keep the placeholder(s) {names} verbatim: the harness fills them in. "
    parts = [intro, "## The current prompt\n" + current.strip() + "\n", heading]
    for index, record in enumerate(records, start=1):
        body = "\n".join(f"{key}:\n{value}" for key, value in record.items())
        parts.append(f"### Problem {index}\n{body}\n")
    parts.append("## Your task\n" + task.format(role=role, keep_note=keep_note,
                                                begin=BEGIN_MARK, end=END_MARK))
    return "\n".join(parts)


def proposal_problem(text: str, *, current: str, seed: str) -> str | None:
    """Why a validated proposal for a role is dropped, or None (see the module docstring).

    >>> proposal_problem("(The complete new prompt)", current="Write code.", seed="Write code.")
    "the proposal echoes the answer template's placeholder '(the complete new prompt)'"
    """
    size, now = len(text.strip()), len(current.strip())
    if TEMPLATE_WORDING in text.lower():
        return f"the proposal echoes the answer template's placeholder '({TEMPLATE_WORDING})'"
    if size < MIN_KEPT * now:
        return (f"the proposal has {size} characters, under {MIN_KEPT:.0%} of the current "
                f"prompt's {now}")
    cap = GROWTH * len(seed.strip()) + SLACK
    if size > cap:
        return (f"the proposal has {size} characters, over the cap of {GROWTH} x the seed "
                f"prompt's {len(seed.strip())} + {SLACK} = {cap}")
    return None


def marked_text(reply: str, begin: str, end: str) -> str | None:
    """The text between the last `begin` marker and the `end` marker after it; None when
    either marker is missing or nothing is between them (the methods' marked replies)."""
    start = reply.rfind(begin)
    if start < 0:
        return None
    body = reply[start + len(begin):]
    stop = body.find(end)
    if stop < 0:
        return None
    return body[:stop].strip() or None


def parse_proposal(reply: str) -> str | None:
    """The text between our two proposal markers (`marked_text`), else None."""
    return marked_text(reply, BEGIN_MARK, END_MARK)


class BridgeClosed(RuntimeError):
    """The bridge was closed because the awaiting task was cancelled."""


async def run_in_thread(bridge: LoopBridge, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread; if the awaiting task is cancelled, the bridge closes
    so that the thread's next call back into the loop fails fast and the thread ends."""
    try:
        return await asyncio.to_thread(fn, *args)
    except asyncio.CancelledError:
        bridge.close()
        raise


class LoopBridge:
    """Calls from a worker thread into the event loop that owns the context (see above)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._loop_thread = threading.get_ident()
        self.closed = False

    def close(self) -> None:
        """Refuse every later call (`BridgeClosed`): the caller was cancelled, so the worker
        thread must wind down instead of waiting on a loop that will not answer."""
        self.closed = True

    @classmethod
    def current(cls) -> LoopBridge:
        """A bridge to the running loop; call it on the loop thread, before leaving it."""
        return cls(asyncio.get_running_loop())

    def _check_thread(self) -> None:
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError("LoopBridge used from the event loop's own thread (deadlock)")
        if self.closed:
            raise BridgeClosed("the optimization was cancelled")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for its result (or its exception)."""
        try:
            self._check_thread()
        except RuntimeError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run the plain function `fn` on the loop thread and wait for its result."""
        self._check_thread()

        async def wrapper() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result()
