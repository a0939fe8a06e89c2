"""Shared pieces of the reflective methods: transcript slices, reflection prompts, the bridge.

Contract:
- `role_slice(transcript, role)` keeps the messages a role's agents exchanged (their own
  system prompt excluded: that is the text under revision), each clipped to `clip_chars`,
  at most `max_messages` of them (the first and the last ones: the task and the answer).
- `proposal_prompt(...)` is our reflection prompt: the current text of one role, what that
  role did on a few problems with the grader's verdict, and the request to answer with a
  complete new text between two marker lines. `parse_proposal(reply)` returns that text, or
  None when a marker is missing (a truncated reply is never mistaken for a prompt).
- `LoopBridge` lets library code running in a worker thread (gepa, DSPy) call back into the
  job's event loop: `run(coro)` waits for a coroutine scheduled on the loop, `call(fn, ...)`
  runs a plain function on the loop thread. Calling either from the loop thread itself is a
  programming error and raises `RuntimeError` (it would deadlock). `run_in_thread` runs the
  library in a worker thread and closes the bridge when the awaiting task is cancelled, so
  the thread stops at its next call back (`BridgeClosed`) instead of blocking forever.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

BEGIN_MARK = "=== REVISED PROMPT ==="
END_MARK = "=== END OF PROMPT ==="
CLIP_NOTE = " [... clipped ...] "


def clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, keeping its head and its tail."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = max(1, (limit * 2) // 3)
    tail = max(1, limit - head)
    return text[:head] + CLIP_NOTE + text[-tail:]


@dataclass(frozen=True)
class SliceLimits:
    """How much of a transcript one reflection record may carry."""

    clip_chars: int = 1500
    max_messages: int = 8


@dataclass(frozen=True)
class ReflectionSettings:
    """How much the reflection model sees per proposal: records (problems) per reflection,
    characters of grader feedback, and the per-record transcript limits."""

    records_per_reflection: int = 3
    feedback_chars: int = 1200
    limits: SliceLimits = field(default_factory=SliceLimits)


def role_slice(transcript: Sequence[Mapping[str, Any]], role: str, *,
               limits: SliceLimits = SliceLimits()) -> list[dict[str, str]]:
    """The messages of `role`'s agents (system prompts excluded), clipped, at most
    `limits.max_messages`: the first half and the last half when there are more."""
    kept = [
        {"source": str(entry.get("source", role)), "type": str(entry.get("type", "")),
         "content": clip(_content(entry), limits.clip_chars)}
        for entry in transcript
        if entry.get("role") == role and entry.get("type") != "system"
    ]
    if len(kept) > limits.max_messages:
        first = limits.max_messages // 2
        last = limits.max_messages - first
        skipped = len(kept) - limits.max_messages
        gap = {"source": "-", "type": "note", "content": f"({skipped} messages left out)"}
        kept = [*kept[:first], gap, *kept[-last:]] if last else [*kept[:first], gap]
    return kept


def _content(entry: Mapping[str, Any]) -> str:
    text = str(entry.get("content") or "")
    calls = entry.get("tool_calls") or []
    if calls:
        names = ", ".join(str(call.get("name", "?")) for call in calls)
        text = f"{text}\n(tool calls: {names})".strip()
    return text


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
    "own, and nothing after the second marker:\n{begin}\n(the complete new prompt)\n{end}\n"
)


def proposal_prompt(*, topology: str, role: str, current: str,
                    records: Sequence[Mapping[str, str]], placeholders: Sequence[str] = ()) -> str:
    """Our reflection prompt for one role (see the module docstring). Each record maps a
    heading (problem, outcome, feedback, transcript) to its text."""
    keep_note = ""
    if placeholders:
        names = ", ".join("{" + name + "}" for name in placeholders)
        keep_note = f"Keep the placeholder(s) {names} verbatim: the harness fills them in. "
    parts = [_INTRO.format(topology=topology, role=role),
             "## The current prompt\n" + current.strip() + "\n",
             "## What happened on some training problems"]
    for index, record in enumerate(records, start=1):
        body = "\n".join(f"{key}:\n{value}" for key, value in record.items())
        parts.append(f"### Problem {index}\n{body}\n")
    parts.append("## Your task\n" + _TASK.format(role=role, keep_note=keep_note,
                                                  begin=BEGIN_MARK, end=END_MARK))
    return "\n".join(parts)


def parse_proposal(reply: str) -> str | None:
    """The text between the last begin marker and the end marker after it; None when either
    marker is missing or nothing is between them."""
    start = reply.rfind(BEGIN_MARK)
    if start < 0:
        return None
    body = reply[start + len(BEGIN_MARK):]
    end = body.find(END_MARK)
    if end < 0:
        return None
    text = body[:end].strip()
    return text or None


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
