"""Why a model call failed, and what each failure means for retries and for its endpoint.

Contract:
- `is_retryable(err)`: timeouts, connection errors (a stream cut mid-way too), HTTP
  408/409/429 and 5xx are worth another attempt; anything else (400, 401, 404, ...) is not.
- `verdict_of(err)`: what a failed request says of its endpoint (`lcb.agents.endpoints`): a
  timeout or a retryable status is a strike; a refused or cut connection takes it down; any
  other answer shows it alive.
- `ModelCallError` is a call that failed for good; `bad_request` is True when the server
  refused the request itself as malformed or too long (HTTP 400, 413, 422), with its words in
  `server_message`. `CacheMiss` is the `ModelCallError` of a replay whose call is not stored.
- `EndpointError`: the endpoint or model is unusable (`lcb.agents.check` raises it before any
  work); its message is for users.
- `IdleTimeout`: the server sent nothing for `timeout_s` seconds (`--request-timeout`) in the
  middle of an answer; `QueueTimeout`: no answer began within `first_byte_s` of the request.
- `ServerError`: an HTTP error status or an error event inside a stream, as the lean streaming
  path (`lcb.agents.stream`) raises it; `BadEvent`: an event that is not JSON.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
from datetime import UTC, datetime

import aiohttp
import httpx

from lcb.agents.endpoints import EndpointError as EndpointError  # defined there: light
from lcb.agents.endpoints import Verdict
from lcb.agents.usage import CallTag

RETRYABLE_STATUS = frozenset({408, 409, 429})
BAD_REQUEST_STATUS = frozenset({400, 413, 422})  # the request's own fault: deterministic
# Failures of the transport itself, raised as they are: aiohttp's (every model request: a
# refused or reset connection, a server gone before its answer or in the middle of a stream)
# and httpx's (the endpoint check's GET /models).
TRANSPORT_ERRORS = (aiohttp.ClientConnectionError | aiohttp.ClientPayloadError
                    | aiohttp.ClientResponseError  # a response head that does not parse
                    | httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


class IdleTimeout(TimeoutError):
    """The server's answer began, then nothing more came for `timeout_s` seconds."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        super().__init__(f"no data from the server for {timeout_s:g} s (the idle timeout "
                         "between chunks, --request-timeout)")


class QueueTimeout(TimeoutError):
    """The server sent nothing, not even the response head or a first event, for
    `first_byte_s` seconds after the request (`--queue-timeout`): it accepted the request but
    never began the answer (a busy server with a queue, or a hung one)."""

    def __init__(self, first_byte_s: float):
        self.first_byte_s = first_byte_s
        super().__init__(f"no answer began within {first_byte_s:g} s of the request (the wait "
                         "for a first byte, --queue-timeout)")


class ServerError(RuntimeError):
    """An HTTP error status, or an `error` event inside a stream: `status_code` (the event's
    code, else 500), the server's error object `body` (None when it sent none), its `message`,
    and `response` (for `Retry-After`; None mid-stream)."""

    def __init__(self, status_code: int, message: str, *, body: dict | None = None,
                 response: aiohttp.ClientResponse | None = None):
        self.status_code, self.message, self.body, self.response = (
            status_code, message, body, response)
        super().__init__(f"HTTP {status_code}: {message}")

    @classmethod
    async def from_response(cls, response: aiohttp.ClientResponse, *, limit: int = 4096
                            ) -> ServerError:
        """The error of a response whose status is not 200 (its body read, up to `limit`)."""
        data = b""
        async for piece in response.content.iter_any():
            data += piece
            if len(data) >= limit:
                break
        error = _error_object(data)
        message = (error or {}).get("message")
        if not isinstance(message, str) or not message.strip():
            message = data[:500].decode("utf-8", "replace").strip() or response.reason or ""
        return cls(response.status, message, body=error, response=response)

    @classmethod
    def from_event(cls, error: object) -> ServerError:
        """The error of an `error` event sent inside a stream (vLLM's crash report)."""
        body = error if isinstance(error, dict) else {"message": str(error)}
        code = body.get("code")
        if isinstance(code, str) and code.isdigit():
            code = int(code)
        status = code if isinstance(code, int) and not isinstance(code, bool) else 500
        message = body.get("message")
        return cls(status, message if isinstance(message, str) else "an error event in the "
                   "stream", body=body)


def _error_object(data: bytes) -> dict | None:
    """The `error` object of an OpenAI-style error body (or the body itself), if JSON."""
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    if isinstance(parsed, dict):
        inner = parsed.get("error", parsed)
        return inner if isinstance(inner, dict) else {"message": str(inner)}
    return None


class BadEvent(ConnectionError):
    """An event of the stream that is not JSON: what came is no answer; retried like a cut."""

    def __init__(self, detail: str):
        super().__init__(f"the server sent an event that is not JSON ({detail})")


class StreamCut(ConnectionError):
    """A stream that ended without a finish reason: the server stopped it (llama.cpp's server
    ends a stream with a bare [DONE] when another request interrupts it), so what came is not
    a whole answer. Retried like a dropped connection."""

    def __init__(self) -> None:
        super().__init__("the server ended the stream without a finish reason (interrupted "
                         "or cut off; a llama-cpp-python server needs --interrupt_requests "
                         "False under concurrent requests)")


class ModelCallError(RuntimeError):
    """A model call that failed for good (after retries, or at once when not retryable)."""

    def __init__(self, tag: CallTag, attempts: int, cause: BaseException):
        self.tag, self.attempts, self.cause = tag, attempts, cause
        super().__init__(
            f"model call failed after {attempts} attempt(s) "
            f"(role {tag.role}, turn {tag.turn}): {describe_error(cause)}"
        )

    @property
    def status(self) -> int | None:
        """The HTTP status of the failure (None for timeouts and connection errors)."""
        status = getattr(self.cause, "status_code", None)
        return status if isinstance(status, int) else None

    @property
    def bad_request(self) -> bool:
        """True when the server refused the request as malformed or too long (module doc)."""
        return self.status in BAD_REQUEST_STATUS

    @property
    def server_message(self) -> str:
        """The server's own error message (the `error.message` of an OpenAI-style body)."""
        return server_message(self.cause)


def server_message(err: BaseException) -> str:
    """The message an OpenAI-compatible server put in its error body, else the error's text."""
    body = getattr(err, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, str) and message.strip():
        return message.strip()
    return str(getattr(err, "message", None) or err or type(err).__name__)


def describe_error(err: BaseException) -> str:
    """A one-line description of a client error (status code and message when known)."""
    status = getattr(err, "status_code", None)
    message = getattr(err, "message", None) or str(err) or type(err).__name__
    return f"HTTP {status}: {message}" if status else f"{type(err).__name__}: {message}"


def status_of(err: BaseException) -> int | None:
    """The HTTP status of a failed request (a `ServerError`'s: the response's, or for an error
    event sent in the middle of a stream, the event's code); None for other failures."""
    status = getattr(err, "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def is_retryable(err: BaseException) -> bool:
    """Timeouts, connection errors, 408/409/429 and 5xx (also mid-stream) are worth another
    attempt."""
    if isinstance(err, asyncio.TimeoutError | TRANSPORT_ERRORS | StreamCut | BadEvent):
        return True
    status = status_of(err)
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


def retry_after(err: BaseException) -> float | None:
    """The seconds the failed response asks to wait: its `retry-after-ms` header (OpenAI's),
    else `Retry-After` in seconds or as an HTTP date; None without one (or a bad one)."""
    response = getattr(err, "response", None)
    if response is None:
        return None
    millis, value = response.headers.get("retry-after-ms"), response.headers.get("retry-after")
    try:
        if millis is not None:
            return float(millis) / 1000
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (ValueError, TypeError):
        return None


class CacheMiss(ModelCallError):
    """`--replay` and no stored reply for this call: nothing is sent, the call fails at once."""

    def __init__(self, tag: CallTag, *, sample: int, purpose: str):
        self.tag, self.attempts = tag, 0
        self.cause = LookupError("not in the cache")
        RuntimeError.__init__(
            self, f"not in the cache (--replay sends no request): no stored reply for problem "
                  f"{tag.problem_id}, role {tag.role} (agent {tag.agent}), turn {tag.turn}, "
                  f"sample {sample}, purpose {purpose}")


def verdict_of(err: BaseException) -> Verdict:
    """What a failed request says of its endpoint: a timeout or a retryable status is a
    strike; a refused or cut connection takes it down; any other answer shows it alive."""
    if isinstance(err, TimeoutError | httpx.TimeoutException):
        return Verdict.STRIKE
    if isinstance(err, TRANSPORT_ERRORS):
        return Verdict.DOWN
    return Verdict.STRIKE if is_retryable(err) else Verdict.OK


