"""Scripts for the scripted server (`tests.scripted_server`): what reads a request, and `keyed`.

- `message_text(request)`: the request's message texts joined; `assistant_turns(request)`: how
  many assistant messages it holds; `tool_results(request)`: its tool messages' contents.
- `keyed({marker: [reply, ...]}, default=[...])`: a script that picks a reply queue by the first
  marker found in the request's messages (see the class).
Every name here is also importable from `tests.scripted_server`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.scripted_server import Reply


def message_text(request: Mapping[str, Any]) -> str:
    """All message contents of a chat request joined by newlines (text parts only)."""
    parts: list[str] = []
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def assistant_turns(request: Mapping[str, Any]) -> int:
    """How many assistant messages the request already holds (0 on the first model turn)."""
    return sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")


def tool_results(request: Mapping[str, Any]) -> list[str]:
    """The contents of the request's tool messages, in order."""
    return [str(m.get("content")) for m in request.get("messages", []) if m.get("role") == "tool"]


class keyed:  # noqa: N801 - used like a function: keyed({...})
    """A script that picks a reply queue by the first marker found in the request's messages.

    Each queue is consumed one reply per matching request; its last reply repeats. Requests that
    match no marker use `default`; without a default they get an HTTP 500 (logged as a script
    error). Markers are tried in mapping order. Thread-safe.
    """

    def __init__(
        self,
        queues: Mapping[str, Sequence[Reply | str]],
        *,
        default: Sequence[Reply | str] | None = None,
    ):
        for marker, replies in queues.items():
            if not replies:
                raise ValueError(f"keyed: empty reply list for marker {marker!r}")
        self._queues = {k: list(v) for k, v in queues.items()}
        self._default = list(default) if default else None
        self._used: dict[str | None, int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply | str:
        text = message_text(request)
        marker = next((m for m in self._queues if m in text), None)
        replies = self._queues[marker] if marker is not None else self._default
        if replies is None:
            raise LookupError(f"no scripted reply: no marker of {list(self._queues)} in request")
        with self._lock:
            used = self._used.get(marker, 0)
            self._used[marker] = used + 1
        return replies[min(used, len(replies) - 1)]
