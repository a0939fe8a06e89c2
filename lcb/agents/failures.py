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
- `IdleTimeout`: the server sent nothing for `timeout_s` seconds (`--request-timeout`).
"""

from __future__ import annotations

import asyncio

import httpx
import openai

from lcb.agents.endpoints import Verdict
from lcb.agents.usage import CallTag

RETRYABLE_STATUS = frozenset({408, 409, 429})
BAD_REQUEST_STATUS = frozenset({400, 413, 422})  # the request's own fault: deterministic
# Failures of the transport itself; mid-stream they reach us unwrapped by the OpenAI client.
TRANSPORT_ERRORS = httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError


class IdleTimeout(TimeoutError):
    """The server sent nothing (no response head, no chunk) for `timeout_s` seconds."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        super().__init__(f"no data from the server for {timeout_s:g} s (the idle timeout "
                         "between chunks, --request-timeout)")


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
    """The HTTP status of a failed request: the response's, or, for an error event sent in the
    middle of a stream (vLLM's `data: {"error": {..., "code": 500}}`), the event's code."""
    status = getattr(err, "status_code", None)
    if isinstance(status, int):
        return status
    body = getattr(err, "body", None) if isinstance(err, openai.APIError) else None
    code = body.get("code") if isinstance(body, dict) else None
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def is_retryable(err: BaseException) -> bool:
    """Timeouts, connection errors, 408/409/429 and 5xx (also mid-stream) are worth another
    attempt."""
    if isinstance(err, openai.APIConnectionError | asyncio.TimeoutError | TRANSPORT_ERRORS
                  | StreamCut):
        return True  # openai.APITimeoutError is a connection error
    status = status_of(err)
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


def retry_after(err: BaseException) -> float | None:
    """The seconds a `Retry-After` header of the failed response asks for (None without)."""
    response = getattr(err, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
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
    if isinstance(err, TimeoutError | httpx.TimeoutException | openai.APITimeoutError):
        return Verdict.STRIKE
    if isinstance(err, openai.APIConnectionError | TRANSPORT_ERRORS):
        return Verdict.DOWN
    return Verdict.STRIKE if is_retryable(err) else Verdict.OK


