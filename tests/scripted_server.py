"""A scripted OpenAI-compatible chat server on 127.0.0.1 for offline tests of the real client path.

It speaks just enough of the OpenAI HTTP API for lcb's client and other OpenAI clients:
`POST /v1/chat/completions` (plain JSON, or server-sent events for `stream: true`, see
`tests.scripted_wire`) and `GET /v1/models`. A *script* decides every reply:

- a callable `(request_json) -> Reply | str` (a `str` is a plain text answer), or
- `keyed({marker: [reply, ...]}, default=[...])`: the first marker found in the request's messages
  picks a queue of replies, consumed one per request (the last one repeats).

A `Reply` can be plain text, OpenAI tool calls (well-formed or with malformed JSON arguments), carry
usage numbers and a finish reason, wait a fixed latency, stall past the client's timeout (before
answering, or mid-stream), stream slowly, or be an HTTP error (5xx, 429, ...). Every request is
logged (`ScriptedServer.requests`) for assertions, with whether the client hung up before the
reply was complete (`RecordedRequest.client_closed`, `ScriptedServer.wait_for_close`), and the peak
number of requests in flight (queued ones too) is tracked (`ScriptedServer.peak_in_flight`).

A server like llama.cpp's: `slots=1` serves one chat request at a time and queues the others
with no byte sent (`tests.scripted_slots`; `ScriptedServer.slots` counts them), and with
`queue_models` (the default) `GET /v1/models` waits its turn in that queue too, as llama.cpp's
answers only after the running generation. `api_key="k"` answers HTTP 401 to every request
without `Authorization: Bearer k` (vLLM's and llama.cpp's `--api-key`).

Example:
    >>> with scripted_server(keyed({"1873_A": ["```python\\nprint(1)\\n```"]})) as server:
    ...     config = ModelConfig(base_url=server.base_url, model_id="m")  # doctest: +SKIP

Exceptions raised by a callable script become HTTP 500 replies and are kept in
`ScriptedServer.script_errors`, so a broken script fails the test visibly instead of hanging it.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.scripted_scripts import (  # noqa: F401 - re-exported: tests import them from here
    assistant_turns,
    keyed,
    message_text,
    tool_results,
)
from tests.scripted_slots import Slots
from tests.scripted_wire import (
    SseWriter,
    completion_body,
    finish_reason,
    stream_events,
    usage_body,
    wait_unless_closed,
)

DEFAULT_MODEL = "scripted-model"
STALL_S = 60.0  # a stall sleeps this long at most (or until the server closes)
CHAT_PATH, MODELS_PATH = "/v1/chat/completions", "/v1/models"  # other paths get a 404, as on vLLM


@dataclass(frozen=True)
class ToolCall:
    """One OpenAI tool call. `arguments` given as a mapping is sent as JSON; a `str` is sent as is
    (so `ToolCall("python_exec", "{not json")` produces malformed arguments)."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None

    def to_json(self, index: int) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return {
            "id": self.id or f"call_{index}",
            "type": "function",
            "function": {"name": self.name, "arguments": args},
        }


@dataclass(frozen=True)
class Reply:
    """What the server answers to one request.

    Attributes:
        content: the assistant text (None allowed alongside tool calls).
        tool_calls: tool calls in OpenAI format.
        prompt_tokens / completion_tokens: usage to report; None -> a deterministic estimate
            (characters / 4 of the request's messages / of the reply).
        usage: False omits the `usage` field altogether.
        latency_s: seconds to wait before answering (added to the server's default latency).
        status: HTTP status; anything but 200 sends an OpenAI-style error body.
        message: the error body's `message` (None: "scripted HTTP <status>").
        retry_after: value of a `Retry-After` header (for 429s), if any.
        raw_body: sent verbatim instead of a generated body (malformed responses).
        finish_reason: None -> "tool_calls" when there are tool calls, else "stop"; "" ends a
            stream with no finish reason at all (a server that interrupted it)
            (`"length"` says the answer was cut at max_tokens).
        reasoning_tokens: reported as `usage.completion_tokens_details.reasoning_tokens`.
        chunk_chars: characters per streamed content / tool-argument piece.
        chunk_delay_s: seconds between streamed events (a slow but steady stream).
        stall_s / stall_after: stop sending for `stall_s` seconds after `stall_after` streamed
            events (a stream that goes silent mid-way); ignored by non-streaming requests.
        whole: answer with one JSON completion even when the request asks to stream (a server
            that does not stream).
        end_delay_s: seconds between a stream's last event and the end of its body (a server
            slow to end it, or one that keeps it open).
    """

    content: str | None = ""
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage: bool = True
    latency_s: float = 0.0
    status: int = 200
    retry_after: float | None = None
    raw_body: str | None = None
    finish_reason: str | None = None
    message: str | None = None
    reasoning_tokens: int | None = None
    chunk_chars: int = 16
    chunk_delay_s: float = 0.0
    stall_s: float = 0.0
    stall_after: int = 1
    whole: bool = False
    end_delay_s: float = 0.0

    @classmethod
    def error(cls, status: int = 500, *, retry_after: float | None = None,
              message: str | None = None) -> Reply:
        """An HTTP error reply (5xx, 429, a 400 with the server's `message`, ...)."""
        return cls(content=None, status=status, retry_after=retry_after, message=message)

    @classmethod
    def stall(cls, seconds: float = STALL_S) -> Reply:
        """A reply that never arrives in time: the server waits `seconds` (or until it closes)."""
        return cls(content="(too late)", latency_s=seconds)

    @classmethod
    def stall_mid_stream(cls, seconds: float = STALL_S, *, after: int = 2,
                         content: str = "(never finished)") -> Reply:
        """A streamed reply that starts, then goes silent for `seconds` after `after` events."""
        return cls(content=content, stall_s=seconds, stall_after=after, chunk_chars=4)

    @classmethod
    def calls(cls, *calls: ToolCall, content: str | None = None, **kw: Any) -> Reply:
        """A reply made of tool calls."""
        return cls(content=content, tool_calls=tuple(calls), **kw)


def failures(n: int, status: int = 500) -> list[Reply]:
    """`n` HTTP error replies, e.g. `[*failures(2), "answer"]` for "fail twice, then answer"."""
    return [Reply.error(status) for _ in range(n)]


Script = Callable[[dict[str, Any]], "Reply | str"]


@dataclass
class RecordedRequest:
    """One request the server received, logged on arrival. `body` is the parsed JSON (None for
    GET / bad JSON); `status` is the HTTP status sent (0 while the reply is still pending).
    `streamed` marks an SSE reply, `chunks_sent` counts its events delivered, and
    `client_closed` says the client hung up before the reply was complete; `client_port` is
    the client's end of the connection (the same for requests on one kept-alive
    connection)."""

    method: str
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str]
    started: float
    status: int = 0
    streamed: bool = False
    chunks_sent: int = 0
    client_closed: bool = False
    client_port: int = 0


@dataclass
class ScriptedServer:
    """A running scripted server. `base_url` ends in `/v1` (as OpenAI clients expect)."""

    base_url: str
    script: Script
    models: tuple[str, ...] | None
    latency_s: float
    requests: list[RecordedRequest] = field(default_factory=list)
    script_errors: list[str] = field(default_factory=list)
    handler_errors: list[str] = field(default_factory=list)
    hangups: int = 0
    slots: Slots | None = None  # None: every request is served at once
    queue_models: bool = True
    api_key: str | None = None
    peak_in_flight: int = 0
    in_flight: int = 0
    closing: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of every chat-completion request, in arrival order."""
        with self.lock:
            chats = [r for r in self.requests if r.path.rstrip("/") == CHAT_PATH]
            return [r.body for r in chats if r.body is not None]

    def log(self, record: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(record)

    def closed_early(self) -> list[RecordedRequest]:
        """The requests whose client hung up before the reply was complete."""
        with self.lock:
            return [r for r in self.requests if r.client_closed]

    def wait_for_close(self, n: int = 1, timeout: float = 5.0) -> bool:
        """Wait until `n` requests were abandoned by their client; False on timeout."""
        deadline = time.monotonic() + timeout
        while len(self.closed_early()) < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def enter(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1


_ids = itertools.count(1)


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "scripted_error", "code": status}}


class _Server(ThreadingHTTPServer):
    # The default backlog (5) drops connections when a batch opens many at once; each drop
    # costs the client a one-second retransmit.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Keep a handler's failure off stderr, which a test may be reading (a CLI runner
        captures the whole process's output): a client that hangs up mid-request is normal
        here and only counted; anything else is kept in `handler_errors` for the test."""
        state: ScriptedServer = self.state  # type: ignore[attr-defined]
        error = sys.exc_info()[1]
        with state.lock:
            if isinstance(error, (ConnectionError, TimeoutError)):
                state.hangups += 1
            else:
                state.handler_errors.append(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    server_version = "ScriptedOpenAI/1.0"
    protocol_version = "HTTP/1.1"
    # Without TCP_NODELAY every reply waits ~40 ms on the client's delayed ACK.
    disable_nagle_algorithm = True

    @property
    def state(self) -> ScriptedServer:
        return self.server.state  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        """Silence the default stderr access log."""

    def _send(self, status: int, body: str, headers: Mapping[str, str] = {}) -> None:  # noqa: B006
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to deliver

    def _record(
        self, body: dict[str, Any] | None, started: float, status: int = 0
    ) -> RecordedRequest:
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = RecordedRequest(self.command, self.path, body, headers, started, status,
                                 client_port=self.client_address[1])
        self.state.log(record)
        return record

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        started = time.monotonic()
        if self._unauthorized():
            return
        if self.path.rstrip("/") == MODELS_PATH:
            record = self._record(None, started)
            slots = self.state.slots if self.state.queue_models else None
            if slots is not None and not slots.take(self.connection):
                record.client_closed = self.close_connection = True  # it left the queue
                return
            if slots is not None:
                slots.give()
            names = self.state.models or ()
            data = [{"id": n, "object": "model", "created": 0, "owned_by": "tests"} for n in names]
            record.status = 200
            self._send(200, json.dumps({"object": "list", "data": data}))
            return
        self._record(None, started, 404)
        self._send(404, json.dumps(_error_body(404, f"no route {self.path}")))

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        started = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = None
        if self._unauthorized():
            return
        record = self._record(body if isinstance(body, dict) else None, started)
        refusal = self._refusal(body)
        if refusal is not None:
            record.status = refusal[0]
            self._send(*refusal)
            return
        self._answer(body, record)

    def _unauthorized(self) -> bool:
        """Answer HTTP 401 (and say so) when the server wants a key this request lacks."""
        key = self.state.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._record(None, time.monotonic(), 401)
        self._send(401, json.dumps(_error_body(401, "Invalid API Key")))
        return True

    def _refusal(self, body: Any) -> tuple[int, str] | None:
        """The error a real server gives before looking at the script, if any."""
        if self.path.rstrip("/") != CHAT_PATH:
            return 404, json.dumps(_error_body(404, f"no route {self.path}"))
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return 400, json.dumps(_error_body(400, "body must be JSON with `messages`"))
        model = body.get("model")
        if self.state.models is not None and model not in self.state.models:
            return 404, json.dumps(_error_body(404, f"The model `{model}` does not exist."))
        return None

    def _answer(self, body: dict[str, Any], record: RecordedRequest) -> None:
        state = self.state
        state.enter()
        served = state.slots is None or state.slots.take(self.connection)
        left = False

        def leave() -> None:  # before the last bytes go out: the client may answer at once
            nonlocal left
            if not left:
                left = True
                state.leave()
                if served and state.slots is not None:
                    state.slots.give()

        try:
            if not served:  # the client hung up while queued
                record.client_closed = self.close_connection = True
                return
            reply = self._scripted_reply(body)
            wait = state.latency_s + (reply.latency_s if reply else 0.0)
            if wait > 0 and wait_unless_closed(self.connection, wait, state.closing):
                record.client_closed = True
                self.close_connection = True
                return
            if reply is not None and reply.status == 200 and body.get("stream") and \
                    not reply.whole:
                self._stream(body, reply, record, before_last=leave)
                return
            leave()
            record.status, payload, headers = self._plain(body, reply)
            self._send(record.status, payload, headers)
        finally:
            leave()

    def _plain(self, body: dict[str, Any], reply: Reply | None) -> tuple[int, str, dict[str, str]]:
        """A whole (non-streamed) reply: the completion, an error, or the raw body."""
        if reply is None:
            return 500, json.dumps(_error_body(500, "the script raised")), {}
        headers = {} if reply.retry_after is None else {"Retry-After": str(reply.retry_after)}
        if reply.status != 200:
            text = reply.message or f"scripted HTTP {reply.status}"
            return reply.status, json.dumps(_error_body(reply.status, text)), headers
        if reply.raw_body is not None:
            return 200, reply.raw_body, headers
        whole = completion_body(reply, completion_id=f"chatcmpl-scripted-{next(_ids)}",
                                model=body.get("model", DEFAULT_MODEL),
                                prompt_text=message_text(body))
        return 200, json.dumps(whole), headers

    def _stream(self, body: dict[str, Any], reply: Reply, record: RecordedRequest, *,
                before_last: Callable[[], None]) -> None:
        """Answer `stream: true` with server-sent events (`tests.scripted_wire`)."""
        record.streamed, record.status = True, 200
        writer = SseWriter(self.wfile, self.connection, self.state.closing,
                           before_last=before_last)
        if reply.raw_body is not None:
            if writer.head():
                writer.send_raw_tail(reply.raw_body, end_delay_s=reply.end_delay_s)
        else:
            options = body.get("stream_options")
            wanted = isinstance(options, dict) and bool(options.get("include_usage"))
            usage = usage_body(reply, message_text(body)) if wanted else None
            events = stream_events(reply, completion_id=f"chatcmpl-scripted-{next(_ids)}",
                                   model=body.get("model", DEFAULT_MODEL),
                                   finish=finish_reason(reply), usage=usage)
            writer.send(events, reply)
        record.chunks_sent = writer.sent
        if writer.closed_by_client or self.state.closing.is_set():
            record.client_closed = writer.closed_by_client
            self.close_connection = True

    def _scripted_reply(self, body: dict[str, Any]) -> Reply | None:
        try:
            reply = self.state.script(body)
        except Exception:  # noqa: BLE001 - reported through script_errors and an HTTP 500
            with self.state.lock:
                self.state.script_errors.append(traceback.format_exc())
            return None
        return Reply(content=reply) if isinstance(reply, str) else reply


@contextmanager
def scripted_server(
    script: Script | Sequence[Reply | str],
    *,
    models: Sequence[str] | None = None,
    latency_s: float = 0.0,
    slots: int | None = None,
    queue_models: bool = True,
    api_key: str | None = None,
) -> Iterator[ScriptedServer]:
    """Run a scripted OpenAI-compatible server on 127.0.0.1 (a free port) for the `with` block.

    Args:
        script: a callable `(request_json) -> Reply | str`, or a list of replies served in order
            to every request (the last one repeats).
        models: model ids the server knows; a chat request for any other model gets a 404 and
            `/v1/models` lists exactly these. None accepts any model (and lists none).
        latency_s: a fixed delay added before every chat reply.
        slots: serve at most this many chat requests at a time, queueing the others without a
            byte sent (None: no limit); `queue_models`: `GET /v1/models` waits in that queue.
        api_key: refuse requests without this bearer key (HTTP 401).

    Yields:
        The running `ScriptedServer` (use `.base_url`, `.requests`, `.chat_requests()`).
    """
    if not callable(script):
        script = keyed({}, default=list(script))
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    state = ScriptedServer(
        base_url=f"http://127.0.0.1:{port}/v1",
        script=script,
        models=tuple(models) if models is not None else None,
        latency_s=latency_s,
        queue_models=queue_models,
        api_key=api_key,
    )
    if slots is not None:
        state.slots = Slots(slots, state.closing)
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"scripted-{port}", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.closing.set()  # wakes stalled handlers
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(name="scripted")
def scripted_fixture() -> Iterator[Callable[..., ScriptedServer]]:
    """Pytest fixture `scripted`: a factory `scripted(script, **kw) -> ScriptedServer` taking the
    arguments of `scripted_server`; every server started stops at teardown.

    Import it into a test module: `from tests.scripted_server import scripted_fixture`
    (with `# noqa: F401`)
    and ask for `scripted`.
    """
    with ExitStack() as stack:
        yield lambda script, **kw: stack.enter_context(scripted_server(script, **kw))

