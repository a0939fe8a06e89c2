"""The one wrapper every model call goes through: concurrency cap, retries, usage, think-stripping.

Contract:
- `ModelGateway.call(messages, tag=..., ledger=...)` sends one chat request and returns the
  assistant message with `<think>…</think>` removed from its text. It holds the shared request
  semaphore only while a request is in flight (not while backing off).
- Retried, with exponential backoff and jitter: HTTP 408/409/429/5xx, timeouts and connection
  errors, at most `config.max_retries` times. Anything else (400, 401, 404, ...) fails at once.
  When the call fails for good it raises `ModelCallError` (after recording the failed call).
  `ModelCallError.bad_request` is True when the server refused the request itself as malformed
  or too long (HTTP 400, 413, 422: the same request would be refused again), with the server's
  own words in `server_message`; every other failure (5xx, timeouts, 401, 404) is not.
- Every call is recorded once in the given `UsageLedger` with its tag, attempts and seed, from
  the usage numbers of the response (`usage_metadata`); a response without usage counts 0.
- `request_seed(run_seed, *parts)` derives the per-request seed from the run seed and the call's
  identity (problem, agent, turn), so reruns send the same seeds and replicas differ.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool

from lcb.agents.models import ModelConfig, build_chat_model, new_http_client
from lcb.agents.usage import CallRecord, CallTag, UsageLedger
from lcb.runs.extract import strip_think

RETRYABLE_STATUS = frozenset({408, 409, 429})
BAD_REQUEST_STATUS = frozenset({400, 413, 422})  # the request's own fault: deterministic
Sleep = Callable[[float], Awaitable[Any]]


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


def is_retryable(err: BaseException) -> bool:
    """Timeouts, connection errors, 408/409/429 and 5xx are worth another attempt."""
    if isinstance(err, openai.APIConnectionError | asyncio.TimeoutError):
        return True  # openai.APITimeoutError is a connection error
    status = getattr(err, "status_code", None)
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


def request_seed(run_seed: int, *parts: object) -> int:
    """A stable 31-bit seed from the run seed and the call's identity."""
    key = "\x1f".join(str(p) for p in (run_seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def _retry_after(err: BaseException) -> float | None:
    response = getattr(err, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class ModelGateway:
    """Shared by every agent of a batch: one chat model, one request semaphore, one HTTP client.
    Use it within one event loop and `aclose()` it there."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        chat_model: BaseChatModel | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ):
        self.config = config
        self._http = None if chat_model is not None else new_http_client(config)
        self.chat_model = chat_model or build_chat_model(config, http_client=self._http)
        self._semaphore = asyncio.Semaphore(config.max_concurrent_requests)
        self._sleep = sleep
        self._rng = rng or random.Random(0)
        self._bound: dict[tuple[str, ...], Any] = {}

    async def aclose(self) -> None:
        """Close the HTTP client this gateway made (if any)."""
        if self._http is not None:
            await self._http.aclose()

    def backoff(self, attempt: int, err: BaseException) -> float:
        """Delay before retry number `attempt` (1-based): doubling, jittered, capped."""
        cfg = self.config
        delay = min(cfg.retry_backoff_max_s, cfg.retry_backoff_s * 2 ** (attempt - 1))
        delay *= 0.5 + self._rng.random() / 2
        hinted = _retry_after(err)
        return min(cfg.retry_backoff_max_s, max(delay, hinted)) if hinted else delay

    def _runnable(self, tools: Sequence[BaseTool]) -> Any:
        key = tuple(t.name for t in tools)
        if key not in self._bound:
            self._bound[key] = self.chat_model.bind_tools(list(tools)) if tools else self.chat_model
        return self._bound[key]

    async def call(
        self,
        messages: Sequence[BaseMessage],
        *,
        tag: CallTag,
        ledger: UsageLedger,
        tools: Sequence[BaseTool] = (),
        seed: int | None = None,
    ) -> AIMessage:
        """Send one request (retrying as the module says); return the think-stripped answer."""
        runnable = self._runnable(tools)
        kwargs = {"seed": seed} if seed is not None else {}
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._semaphore:
                    reply = await runnable.ainvoke(list(messages), **kwargs)
                break
            except Exception as err:  # noqa: BLE001 - classified below, re-raised as data
                if attempt > self.config.max_retries or not is_retryable(err):
                    failed = CallRecord(tag, 0, 0, attempt, time.monotonic() - started, seed,
                                        error=describe_error(err))
                    ledger.add_call(failed)
                    raise ModelCallError(tag, attempt, err) from err
                await self._sleep(self.backoff(attempt, err))
        return self._finish(reply, tag=tag, ledger=ledger, attempts=attempt,
                            latency_s=time.monotonic() - started, seed=seed)

    @staticmethod
    def _finish(reply: AIMessage, *, tag: CallTag, ledger: UsageLedger, attempts: int,
                latency_s: float, seed: int | None) -> AIMessage:
        usage = reply.usage_metadata or {}
        record = CallRecord(tag, int(usage.get("input_tokens", 0)),
                            int(usage.get("output_tokens", 0)), attempts, latency_s, seed)
        ledger.add_call(record)
        text = reply.content if isinstance(reply.content, str) else reply.text
        meta = {**reply.response_metadata,
                "lcb": {"attempts": attempts, "latency_s": round(latency_s, 4), "seed": seed}}
        return reply.model_copy(update={"content": strip_think(text), "response_metadata": meta})
