"""Chat Completions over server-sent events, read lean: the path of every request to a server.

Why aiohttp and orjson: a fast server streams about one token per chunk, so the client's cost
per chunk is lcb's main CPU cost at scale. Through httpx a chunk climbs httpx, httpcore, anyio
and h11; aiohttp parses HTTP in C and hands over what came since the last read, and orjson
parses an event in a quarter of `json`'s time. `bench/scale.py` measures the whole batch path
(docs/benchmarks.md).

Contract:
- `wire_messages(messages)` gives the LangChain messages lcb sends (system, human, AI with its
  tool calls, tool results) in the Chat Completions format; `request_body(config, messages,
  tools, seed)` the whole JSON body: model, messages, temperature, top_p,
  max_completion_tokens, seed, `stream` with usage, tools, and `models.extra_body(config)`
  (vLLM's extras, the thinking switch, `max_tokens`) at the top level.
- `stream_reply(session, url, headers, body, limits, proxy=)` sends one request on an aiohttp
  session (`models.new_session`) and returns the `StreamedReply`. Per event it does little:
  the bytes are split on blank lines (a CRLF split between two reads is one line break), each
  `data:` payload is parsed once, content pieces are kept in a list, tool-call deltas joined
  by index; the reply is put together once, at the end (`StreamedReply.message()`).
- Two waits, two limits (`Limits`): until the first bytes of the body (the response head
  included) a request may wait `first_byte_s` (a request queued at a busy server has not gone
  silent: `QueueTimeout`); after them, each silence may last `idle_s` (`IdleTimeout`).
  Leaving early (a timeout, a cancelled task, Ctrl-C, an error event) closes the connection,
  so the server stops generating; a response read to its end leaves its connection to the
  session's pool, for the next request (the body's end is awaited `_END_S` after `[DONE]`).
- Failures: an HTTP status other than 200 raises `ServerError` (status, the server's error
  object, the response for its `Retry-After`); so does an error sent inside the stream: a
  `data:` object with an `error` member (vLLM's crash report), llama.cpp's `error:` field, or
  an `event: error` (its code, else 500). Transport failures raise aiohttp's
  own errors (a connection not made within the session's connect timeout:
  `aiohttp.ConnectionTimeoutError`). A 200 answered with a whole JSON completion (a server
  that does not stream) is read as one.
- `StreamedReply.message()`: the `AIMessage`, its tool calls parsed strictly once the stream
  is complete (arguments that are not valid JSON stay invalid calls, which the agent loop turns
  into an error for the model), `usage_metadata` only when the server reported usage (None
  means unknown, never 0), and `response_metadata` with `finish_reason` and `model_name`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp
import orjson
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call

from lcb.agents.failures import BadEvent, IdleTimeout, QueueTimeout, ServerError
from lcb.agents.models import ModelConfig, extra_body

_DONE = b"[DONE]"
_JSON = {"Content-Type": "application/json"}
_END_S = 1.0  # the longest wait for the end of a body after its [DONE]


class Limits(NamedTuple):
    """How long a request may wait for its first event, then for each next one (seconds)."""

    first_byte_s: float
    idle_s: float


def wire_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The Chat Completions form of lcb's messages (module docstring)."""
    return [_wire(message) for message in messages]


def _wire(message: BaseMessage) -> dict[str, Any]:
    # Not `convert_to_openai_messages`: it drops an AI message's invalid tool calls, whose
    # error replies (tool messages naming them) a server would then refuse as unmatched.
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "content": message.content, "tool_call_id": message.tool_call_id}
    if isinstance(message, AIMessage):
        calls = [{"type": "function", "id": call["id"],
                  "function": {"name": call["name"], "arguments": json.dumps(call["args"])}}
                 for call in message.tool_calls]
        calls += [{"type": "function", "id": call.get("id"),
                   "function": {"name": call.get("name"), "arguments": call.get("args")}}
                  for call in message.invalid_tool_calls]
        if not calls:
            return {"role": "assistant", "content": message.content}
        return {"role": "assistant", "content": message.content or None, "tool_calls": calls}
    raise TypeError(f"no Chat Completions form for a {type(message).__name__}")


def request_body(config: ModelConfig, messages: Sequence[BaseMessage],
                 tools: Sequence[dict[str, Any]], seed: int | None) -> dict[str, Any]:
    """The JSON body of one streamed request (module docstring)."""
    body: dict[str, Any] = {"model": config.model_id, "messages": wire_messages(messages),
                            "stream": True, "stream_options": {"include_usage": True},
                            "temperature": config.temperature, "top_p": config.top_p,
                            "max_completion_tokens": config.max_tokens}
    if seed is not None:
        body["seed"] = seed
    if tools:
        body["tools"] = list(tools)
    return {**body, **(extra_body(config) or {})}


@dataclass
class StreamedReply:
    """What one stream added up to (see `message()`)."""

    parts: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    events: int = 0
    began: bool = False  # some of the body came (the wait for a first byte is over)

    def take(self, chunk: dict[str, Any]) -> None:
        """Add one parsed event."""
        if "error" in chunk:
            raise ServerError.from_event(chunk["error"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            text = delta.get("content")
            if text:
                self.parts.append(text)
            if delta.get("tool_calls"):
                self._take_calls(delta["tool_calls"])
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if self.model is None:
            self.model = chunk.get("model")

    def _take_calls(self, deltas: list[dict[str, Any]]) -> None:
        for position, delta in enumerate(deltas):
            index = delta.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                index = self._unindexed(position, delta.get("id"))
            call = self.calls.setdefault(index, {"id": None, "name": "", "args": []})
            call["id"] = delta.get("id") or call["id"]
            function = delta.get("function") or {}
            call["name"] += function.get("name") or ""
            if function.get("arguments"):
                call["args"].append(function["arguments"])

    def _unindexed(self, position: int, call_id: str | None) -> int:
        """Where a delta without an index goes: the call with its id, a new call for a new id
        (whole calls sent one per event, unnumbered), else it goes on with the latest call."""
        if call_id:
            for index, call in self.calls.items():
                if call["id"] == call_id:
                    return index
            return max(self.calls, default=-1) + 1
        return max(self.calls, default=position)

    def message(self) -> AIMessage:
        """The whole reply as a message (module docstring)."""
        calls, invalid = [], []
        for _, call in sorted(self.calls.items()):
            raw = {"id": call["id"],
                   "function": {"name": call["name"], "arguments": "".join(call["args"])}}
            try:
                calls.append(parse_tool_call(raw, return_id=True))
            except OutputParserException as err:
                invalid.append(make_invalid_tool_call(raw, str(err)))
        meta = {"finish_reason": self.finish_reason, "model_name": self.model}
        return AIMessage("".join(self.parts), tool_calls=calls, invalid_tool_calls=invalid,
                         usage_metadata=usage_metadata(self.usage), response_metadata=meta)


def usage_metadata(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """LangChain's usage fields from an OpenAI usage object; None when there is none."""
    if not usage:
        return None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(
        usage.get("completion_tokens") or 0)
    meta: dict[str, Any] = {"input_tokens": prompt, "output_tokens": completion,
                            "total_tokens": int(usage.get("total_tokens") or prompt + completion)}
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        meta["output_token_details"] = {"reasoning": int(reasoning)}
    return meta


async def stream_reply(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                       body: dict[str, Any], limits: Limits, *, proxy: str | None
                       ) -> StreamedReply:
    """Send one request on `session` (`models.new_session`), through `proxy` (the caller's
    `models.proxy_for`, decided once per endpoint), and read its stream to the end (module
    docstring)."""
    loop = asyncio.get_running_loop()
    reply = StreamedReply()
    data = orjson.dumps(body)
    try:
        async with asyncio.timeout_at(loop.time() + limits.first_byte_s) as guard:
            async with session.post(url, data=data, headers={**headers, **_JSON},
                                    proxy=proxy) as response:
                try:
                    await _read(response, reply, guard, limits)
                except BaseException:
                    response.close()  # not back to the pool: the server must stop generating
                    raise
    except TimeoutError as err:
        if not guard.expired():
            raise  # aiohttp's own: no connection within the connect timeout
        raise _timeout(reply, limits) from err
    return reply


async def _read(response: aiohttp.ClientResponse, reply: StreamedReply,
                guard: asyncio.Timeout, limits: Limits) -> None:
    """Read `response` into `reply`: an error status, a whole JSON completion or the events;
    `guard` holds the first-byte limit until a piece of the stream came, then the idle one."""
    if response.status != 200:
        raise await ServerError.from_response(response)
    if response.content_type == "application/json":
        reply.take(_parsed(await response.read()))
        return
    loop, events, content = asyncio.get_running_loop(), _Events(reply), response.content
    while data := await content.readany():  # what came since the last read, however framed
        guard.reschedule(loop.time() + limits.idle_s)
        reply.began = True
        if events.feed(data):
            break
    else:
        return
    guard.reschedule(None)  # the answer is whole: only the drain's own limit applies now
    await _drain(response, _END_S)


async def _drain(response: aiohttp.ClientResponse, seconds: float) -> None:
    """Read what is left of a body after its [DONE] (its end, due at once: vLLM sends it with
    the event or right after), so that the connection goes back to the pool. A server that
    keeps the body open, or cuts it there, costs the connection, never the answer."""
    try:
        async with asyncio.timeout(seconds):
            while await response.content.readany():
                pass
    except (TimeoutError, aiohttp.ClientError):
        response.close()


def _timeout(reply: StreamedReply, limits: Limits) -> TimeoutError:
    return IdleTimeout(limits.idle_s) if reply.began else QueueTimeout(limits.first_byte_s)


class _Events:
    """Splits a stream's bytes into SSE events and feeds each `data:` payload to `reply`;
    `feed` says True once `[DONE]` came. An error sent as its own event (llama.cpp's
    `error:` field, or `event: error`) raises `ServerError`. Linear in the stream's size: an
    event that spans many reads is joined once, when it ends."""

    def __init__(self, reply: StreamedReply):
        self.reply = reply
        self.pending: list[bytes] = []  # the reads since the last event ended
        self.after_cr = False  # the last read ended in a CR, whose LF may begin the next one

    def feed(self, data: bytes) -> bool:
        if self.after_cr:
            self.after_cr = False
            if data[:1] == b"\n":  # the second half of a CRLF: one line break, not two
                data = data[1:]
        if b"\r" in data:
            self.after_cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        straddles = data[:1] == b"\n" and bool(self.pending) and self.pending[-1][-1:] == b"\n"
        if b"\n\n" not in data and not straddles:
            self.pending.append(data)
            return False
        *events, rest = b"".join((*self.pending, data)).split(b"\n\n")
        self.pending = [rest] if rest else []
        for event in events:
            payload = _payload(event)
            if payload is None:
                continue
            if payload == _DONE:
                return True
            self.reply.events += 1
            self.reply.take(_parsed(payload))
        return False


def _parsed(payload: bytes) -> dict[str, Any]:
    try:
        chunk = orjson.loads(payload)  # a quarter of json.loads's time: it runs once per token
    except ValueError:
        try:  # orjson refuses what JSON allows and models write: a lone surrogate's escape
            chunk = json.loads(payload)
        except ValueError as err:
            raise BadEvent(str(err)) from None
    if not isinstance(chunk, dict):
        raise BadEvent(f"a JSON {type(chunk).__name__}, not an object")
    return chunk


def _payload(event: bytes) -> bytes | None:
    """The data of one SSE event (its `data:` lines joined), None for a comment or blank; an
    error event raises its `ServerError`."""
    if event.startswith(b"data: ") and b"\n" not in event:  # nearly every event
        return event[6:]
    data, kind, error = [], b"", None
    for line in event.split(b"\n"):
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            data.append(value)
        elif name == b"event":
            kind = value.strip()
        elif name == b"error":  # llama.cpp's server: `error: {...}`, then `data: [DONE]`
            error = value
    if error is None and kind == b"error" and data:
        error = b"\n".join(data)
    if error is not None:
        raise ServerError.from_event(_error_of(error))
    return b"\n".join(data) if data else None


def _error_of(payload: bytes) -> object:
    """The error object an error event carries (its `error` member when it wraps one)."""
    try:
        found = json.loads(payload)
    except ValueError:
        return payload.decode("utf-8", "replace")
    return found.get("error", found) if isinstance(found, dict) else found
