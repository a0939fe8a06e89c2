"""What the scripted server sends on the wire: whole replies, streamed (SSE) replies, and
noticing a client that hangs up.

Contract:
- `completion_body(reply, ...)` is the JSON of a whole chat completion; `usage_body` its usage
  (None when the reply carries none; estimated as characters / 4 when not given).
- `stream_events(reply, ...)` turns one scripted reply into the chunk objects an OpenAI-compatible
  server streams for it: a role chunk, the content in pieces of `reply.chunk_chars` characters,
  each tool call as a head (id, name, empty arguments) followed by its arguments in pieces, a
  final chunk with the `finish_reason`, and, when the client asked for it
  (`stream_options.include_usage`) and the reply carries usage, a usage chunk with no choices.
- `SseWriter` sends them as `data: {...}` events over HTTP/1.1 chunked transfer, then
  `data: [DONE]`; it waits `reply.chunk_delay_s` between events, `reply.stall_s` after
  `reply.stall_after` events and `reply.end_delay_s` between `[DONE]` and the body's end.
  Every wait watches the socket: a client that closed the connection ends the stream at once
  (the server stops "generating"), and the writer reports it.
- `wait_unless_closed(sock, seconds, closing)` is that watchful wait, also used before a reply.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

POLL_S = 0.02  # how often a wait looks at the socket


class Streamable(Protocol):
    """What the wire needs from a scripted `Reply` (`tests.scripted_server`)."""

    content: str | None
    tool_calls: tuple[Any, ...]
    finish_reason: str | None
    usage: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    chunk_chars: int
    chunk_delay_s: float
    stall_s: float
    stall_after: int
    end_delay_s: float


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: characters / 4, at least 1."""
    return max(1, len(text) // 4)


def tool_calls_json(reply: Streamable) -> list[dict[str, Any]]:
    return [c.to_json(i) for i, c in enumerate(reply.tool_calls)]


def finish_reason(reply: Streamable) -> str:
    """The reply's own finish reason, else "tool_calls" when it has tool calls, else "stop"."""
    if reply.finish_reason is not None:  # "" ends a stream without one (an interrupted stream)
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def usage_body(reply: Streamable, prompt_text: str) -> dict[str, Any] | None:
    """The usage object of `reply` (None when the reply carries none)."""
    if not reply.usage:
        return None
    reply_text = (reply.content or "") + json.dumps(tool_calls_json(reply))
    prompt, completion = reply.prompt_tokens, reply.completion_tokens
    prompt = estimate_tokens(prompt_text) if prompt is None else prompt
    completion = estimate_tokens(reply_text) if completion is None else completion
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return usage


def completion_body(reply: Streamable, *, completion_id: str, model: str,
                    prompt_text: str) -> dict[str, Any]:
    """A whole `chat.completion` object for `reply`."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = tool_calls_json(reply)
    choice = {"index": 0, "message": message, "finish_reason": finish_reason(reply),
              "logprobs": None}
    body: dict[str, Any] = {"id": completion_id, "object": "chat.completion",
                            "created": int(time.time()), "model": model, "choices": [choice]}
    usage = usage_body(reply, prompt_text)
    if usage is not None:
        body["usage"] = usage
    return body


def pieces(text: str, size: int) -> Iterator[str]:
    """`text` cut into pieces of `size` characters (nothing for an empty text)."""
    for start in range(0, len(text), max(1, size)):
        yield text[start:start + max(1, size)]


def stream_events(reply: Streamable, *, completion_id: str, model: str, finish: str,
                  usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The chunk objects streamed for `reply` (module doc); `usage` None sends no usage chunk."""
    base = {"id": completion_id, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def event(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {**base, "choices": [choice]}

    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": p}) for p in pieces(reply.content or "", reply.chunk_chars)]
    for index, call in enumerate(reply.tool_calls):
        whole = call.to_json(index)
        head = {**whole, "index": index, "function": {**whole["function"], "arguments": ""}}
        events.append(event({"tool_calls": [head]}))
        for part in pieces(whole["function"]["arguments"], reply.chunk_chars):
            delta = {"index": index, "function": {"arguments": part}}
            events.append(event({"tool_calls": [delta]}))
    if finish:
        events.append(event({}, finish))
    if usage is not None:
        events.append({**base, "choices": [], "usage": usage})
    return events


def wait_unless_closed(sock: socket.socket, seconds: float, closing: threading.Event) -> bool:
    """Wait `seconds` (or until `closing` is set); True as soon as the peer closed `sock`."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not closing.is_set():
        try:
            readable, _, _ = select.select([sock], [], [], min(left, POLL_S))
            if readable and not sock.recv(1, socket.MSG_PEEK):
                return True  # end of file: the client hung up
        except (OSError, ValueError):
            return True
        if readable:  # data we did not ask for (never from our clients): just sleep it out
            closing.wait(max(0.0, deadline - time.monotonic()))
            return False
    return False


class SseWriter:
    """Writes one streamed reply; `sent` counts events delivered, `closed_by_client` says why
    it stopped early. `before_last` runs once, just before the closing `[DONE]` goes out."""

    def __init__(self, wfile: BinaryIO, sock: socket.socket, closing: threading.Event, *,
                 before_last: Callable[[], None]):
        self._wfile, self._sock, self._closing = wfile, sock, closing
        self._before_last = before_last
        self.sent = 0
        self.closed_by_client = False

    def head(self) -> bool:
        return self._write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")

    def _write(self, data: bytes) -> bool:
        try:
            self._wfile.write(data)
            self._wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.closed_by_client = True
        return not self.closed_by_client

    def _frame(self, text: str) -> bool:
        data = text.encode()
        return self._write(b"%X\r\n%s\r\n" % (len(data), data))

    def _pause(self, seconds: float) -> bool:
        if seconds > 0 and wait_unless_closed(self._sock, seconds, self._closing):
            self.closed_by_client = True
        return not self.closed_by_client

    def send(self, events: list[dict[str, Any]], reply: Streamable) -> None:
        """Stream `events` with the reply's pacing; stop at once when the client hangs up."""
        if not self.head():
            return
        for n, item in enumerate(events):
            if n and not self._pause(reply.chunk_delay_s):
                return
            if n == reply.stall_after and not self._pause(reply.stall_s):
                return
            if not self._frame(f"data: {json.dumps(item)}\n\n"):
                return
            self.sent += 1
        self.send_raw_tail("data: [DONE]\n\n", end_delay_s=reply.end_delay_s)

    def send_raw_tail(self, text: str, *, end_delay_s: float = 0.0) -> None:
        """The last data frame, then (`end_delay_s` later) the end of the chunked body."""
        self._before_last()
        if self._frame(text) and self._pause(end_delay_s):
            self._write(b"0\r\n\r\n")
