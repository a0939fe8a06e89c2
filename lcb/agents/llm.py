"""The one wrapper every model call goes through: streaming, concurrency cap, retries, usage,
think-stripping.

Contract:
- `ModelGateway.call(messages, tag=..., ledger=...)` sends one chat request and returns the
  assistant message with `<think>…</think>` removed from its text. It holds the shared request
  semaphore only while a request is in flight (not while backing off).
- Every request streams (`lcb.agents.stream`, on the gateway's one aiohttp session, made in
  its event loop at the first request and closed by `aclose()`): the events are joined into
  one message at the end, tool-call deltas included, and tool-call arguments are parsed only
  once the stream is complete (arguments that are not valid JSON stay `invalid_tool_calls`).
  Two limits, never one on the whole reply: a request may wait `config.queue_timeout_s` for
  its first byte (queued at a busy server; `QueueTimeout`), then `config.timeout_s` for each
  next piece (`IdleTimeout`); a long answer that keeps arriving is never cut. A stream left
  early (a timeout, a cancelled task, Ctrl-C) is closed there and then, so its connection is
  dropped and the server stops generating. A stream that ends without a finish reason was
  interrupted (`StreamCut`): what came is no answer, and the request is retried like a
  dropped connection.
- Retried, with exponential backoff and jitter: HTTP 408/409/429/5xx, timeouts (a stream that
  went silent, too) and connection errors (a stream cut mid-way, too), at most
  `config.max_retries` times. Anything else (400, 401, 404, ...) fails at once.
  When the call fails for good it raises `ModelCallError` (after recording the failed call).
  `ModelCallError.bad_request` is True when the server refused the request itself as malformed
  or too long (HTTP 400, 413, 422: the same request would be refused again), with the server's
  own words in `server_message`; every other failure (5xx, timeouts, 401, 404) is not.
- Every call is recorded once in the given `UsageLedger` with its tag, attempts and seed, from
  the usage numbers of the response (`usage_metadata`: the stream's final usage chunk); a
  response without usage has None tokens: unknown, not 0 (`lcb.agents.usage` says how totals
  count it). The record also keeps why the answer ended
  (`finish_reason`; `truncated` when it is "length", the max_tokens cut) and the reasoning
  tokens when the server reports them. The returned message carries the same in
  `response_metadata["lcb"]`: `attempts`, `latency_s`, `seed`, `finish_reason`, `truncated`,
  `reasoning_tokens`, `cached`.
- Several endpoints (`config.base_urls`): each attempt goes to the live endpoint with the
  fewest requests in flight (`lcb.agents.endpoints.EndpointPool`); a refused or cut
  connection takes an endpoint down for a cool-down, and so do repeated timeouts or 5xx; a
  retry prefers another endpoint, and goes there without the backoff wait when the one that
  failed is down. With one endpoint, retries and backoff are as without the pool.
- With a `ResponseCache` (`lcb.agents.cache`), a call whose key (model, messages, tools,
  sampling, seed, `sample`, `purpose`, agent) is stored is answered from it: no request, the
  stored tokens counted again (as the original counted them: usage describes the answers a
  run used, whoever paid for them), `attempts` 0, and `cached: true` in the `CallRecord` and
  in `response_metadata["lcb"]` (so in the transcript). A call answered by the endpoint is
  stored whole; a failed call never is. In replay mode (`ResponseCache.replay`) a call that is
  not stored fails at once with `CacheMiss` (a `ModelCallError` naming problem, role, agent,
  turn, sample and purpose) and sends nothing.
- With `shared` (`lcb.agents.shared.SharedAnswers`: answers another run of the same team on
  the same row got), a call whose key it holds is answered from it first, the same way
  (`cached: true`); every other call is counted there as fresh before it is looked up or sent,
  and its answer is kept for the view to store. A view that only reuses fails a call it
  cannot answer with `CacheMiss`.
- `request_seed` (from `lcb.agents.seeds`, re-exported) is each request's seed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from lcb.agents.cache import CachedReply, ResponseCache, cache_key, request_sampling
from lcb.agents.endpoints import Endpoint, EndpointPool, Verdict
from lcb.agents.failures import (  # re-exported: the gateway's failures are part of its contract
    BAD_REQUEST_STATUS,
    RETRYABLE_STATUS,
    TRANSPORT_ERRORS,
    CacheMiss,
    IdleTimeout,
    ModelCallError,
    StreamCut,
    describe_error,
    is_retryable,
    retry_after,
    server_message,
    verdict_of,
)
from lcb.agents.models import ModelConfig, new_session, proxy_for
from lcb.agents.seeds import request_seed
from lcb.agents.shared import SharedAnswers
from lcb.agents.stream import Limits, request_body, stream_reply
from lcb.agents.usage import CallRecord, CallTag, UsageLedger
from lcb.extract import strip_think

__all__ = ["BAD_REQUEST_STATUS", "RETRYABLE_STATUS", "TRANSPORT_ERRORS", "TRUNCATED", "CacheMiss",
           "IdleTimeout", "ModelCallError", "ModelGateway", "StreamCut", "describe_error",
           "is_retryable", "request_seed", "server_message", "verdict_of"]

Sleep = Callable[[float], Awaitable[Any]]
TRUNCATED = "length"  # the finish reason of an answer cut at max_tokens


class ModelGateway:
    """Shared by every agent of a batch: one request semaphore, one HTTP session (its
    connections, to every endpoint), the endpoint pool and the response cache (if any).
    `purpose` is the cache purpose of its calls (`lcb.agents.cache.PURPOSES`). `slots`, the
    request semaphore, may be shared with other gateways of the same endpoint (an optimizer
    job's team runs and its reflection calls), so that `--max-requests` caps them together;
    by default the gateway makes its own of `config.max_concurrent_requests`. Use it within
    one event loop and `aclose()` it there."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        cache: ResponseCache | None = None,
        purpose: str = "batch",
        slots: asyncio.Semaphore | None = None,
    ):
        self.config, self.cache, self.purpose = config, cache, purpose
        self.endpoints = EndpointPool(config.base_urls)
        self._session: aiohttp.ClientSession | None = None  # made in the loop of the first call
        self._headers = {"Authorization": f"Bearer {config.api_key}",
                         "Accept": "text/event-stream"}
        self._limits = Limits(first_byte_s=config.queue_timeout_s, idle_s=config.timeout_s)
        self.slots = slots or asyncio.Semaphore(config.max_concurrent_requests)
        self._sleep = sleep
        self._rng = rng or random.Random(0)
        self._schemas: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        self._proxies: dict[str, str | None] = {}  # endpoint URL -> its proxy (`proxy_for`)

    async def aclose(self) -> None:
        """Close the gateway's HTTP session (if a request made one)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def backoff(self, attempt: int, err: BaseException) -> float:
        """Delay before retry number `attempt` (1-based): doubling, jittered, capped."""
        cfg = self.config
        delay = min(cfg.retry_backoff_max_s, cfg.retry_backoff_s * 2 ** (attempt - 1))
        delay *= 0.5 + self._rng.random() / 2
        hinted = retry_after(err)
        return min(cfg.retry_backoff_max_s, max(delay, hinted)) if hinted else delay

    def cache_key(self, messages: Sequence[BaseMessage], tools: Sequence[BaseTool], *,
                  tag: CallTag, seed: int | None, sample: int, purpose: str) -> str:
        """The response-cache key of this call (`lcb.agents.cache.cache_key`)."""
        return cache_key(model_id=self.config.model_id, messages=messages,
                         tools=self._tool_schemas(tools), sampling=request_sampling(self.config),
                         seed=seed, sample=sample, purpose=purpose, agent=tag.agent)

    async def call(
        self,
        messages: Sequence[BaseMessage],
        *,
        tag: CallTag,
        ledger: UsageLedger,
        tools: Sequence[BaseTool] = (),
        seed: int | None = None,
        sample: int = 0,
        purpose: str | None = None,
        shared: SharedAnswers | None = None,
    ) -> AIMessage:
        """Send one request (retrying as the module says); return the think-stripped answer.
        With a cache, a stored answer comes back without a request (`sample` and `purpose`,
        default the gateway's, are part of its key); `shared` answers first
        (`lcb.agents.shared`)."""
        purpose = purpose or self.purpose
        started = time.monotonic()
        key = None if self.cache is None and shared is None else self.cache_key(
            messages, tools, tag=tag, seed=seed, sample=sample, purpose=purpose)
        stored = self._stored(key, shared, tag=tag, ledger=ledger, seed=seed, sample=sample,
                              purpose=purpose)
        if stored is not None:
            return self._finish(stored.message(), tag=tag, ledger=ledger, attempts=0,
                                latency_s=time.monotonic() - started, seed=seed, cached=True)
        reply, attempts = await self._send(messages, tools, tag=tag, ledger=ledger, seed=seed)
        if key is not None and self.cache is not None:
            self.cache.put(key, CachedReply.of(reply), model=self.config.model_id,
                           purpose=purpose)
        if key is not None and shared is not None:
            shared.keep(key, reply)
        return self._finish(reply, tag=tag, ledger=ledger, attempts=attempts,
                            latency_s=time.monotonic() - started, seed=seed, cached=False)

    def _stored(self, key: str | None, shared: SharedAnswers | None, *, tag: CallTag,
                ledger: UsageLedger, seed: int | None, sample: int,
                purpose: str) -> CachedReply | None:
        """A stored answer for this call, the shared view's before the response cache's; None
        when it must be sent. Raises `CacheMiss` (recorded) where nothing may be sent."""
        if key is None:
            return None
        if shared is not None:
            stored = shared.answer(key)
            if stored is not None:
                return stored
            if shared.only_reuse:
                shared.missed = True
                raise _missed(tag, ledger, seed=seed, sample=sample, purpose=purpose)
            shared.sending()
        if self.cache is None:
            return None
        stored = self.cache.get(key)
        if stored is None and self.cache.replay:
            raise _missed(tag, ledger, seed=seed, sample=sample, purpose=purpose)
        if stored is not None and shared is not None:
            shared.keep(key, stored.message())
        return stored

    async def _send(self, messages: Sequence[BaseMessage], tools: Sequence[BaseTool], *,
                    tag: CallTag, ledger: UsageLedger, seed: int | None
                    ) -> tuple[AIMessage, int]:
        """The answer and the attempts it took. Each attempt goes to the least busy live
        endpoint; a retry after an endpoint went down moves to another one at once."""
        kwargs = {"seed": seed} if seed is not None else {}
        started = time.monotonic()
        attempt, endpoint, moved_once = 0, None, False
        while True:
            attempt += 1
            try:
                async with self.slots:
                    endpoint = self.endpoints.acquire(avoid=endpoint)
                    return await self._attempt(endpoint, tools, messages, kwargs), attempt
            except Exception as err:  # noqa: BLE001 - classified below, re-raised as data
                if attempt > self.config.max_retries or not is_retryable(err):
                    failed = CallRecord(tag, 0, 0, attempt, time.monotonic() - started, seed,
                                        error=describe_error(err))
                    ledger.add_call(failed)
                    raise ModelCallError(tag, attempt, err) from err
                # Straight to another endpoint once, if this one went down and another is
                # healthy; otherwise (every endpoint failing at once: a restart) back off.
                moved = (not moved_once and endpoint is not None
                         and not self.endpoints.is_live(endpoint)
                         and self.endpoints.other_healthy(endpoint))
                moved_once = moved_once or moved
                if not moved:
                    await self._sleep(self.backoff(attempt, err))

    async def _attempt(self, endpoint: Endpoint, tools: Sequence[BaseTool],
                       messages: Sequence[BaseMessage], kwargs: dict[str, Any]) -> AIMessage:
        """One request to `endpoint`, counted in flight there until it ends."""
        verdict = None
        try:
            reply = await self._stream(endpoint.url, tools, messages, kwargs.get("seed"))
            verdict = Verdict.OK
            return reply
        except Exception as err:
            verdict = verdict_of(err)
            raise
        finally:
            self.endpoints.release(endpoint, verdict)

    async def _stream(self, url: str, tools: Sequence[BaseTool],
                      messages: Sequence[BaseMessage], seed: int | None) -> AIMessage:
        """One streamed request (`lcb.agents.stream`)."""
        body = request_body(self.config, messages, self._tool_schemas(tools), seed)
        if self._session is None:
            self._session = new_session(self.config)
        if url not in self._proxies:  # the environment does not change: decided once
            self._proxies[url] = proxy_for(url)
        streamed = await stream_reply(self._session, f"{url}/chat/completions", self._headers,
                                      body, self._limits, proxy=self._proxies[url])
        if not streamed.finish_reason:
            raise StreamCut  # a stream that never said why it ended
        return streamed.message()

    def _tool_schemas(self, tools: Sequence[BaseTool]) -> list[dict[str, Any]]:
        names = tuple(t.name for t in tools)
        if names not in self._schemas:
            self._schemas[names] = [convert_to_openai_tool(t) for t in tools]
        return self._schemas[names]

    @staticmethod
    def _finish(reply: AIMessage, *, tag: CallTag, ledger: UsageLedger, attempts: int,
                latency_s: float, seed: int | None, cached: bool) -> AIMessage:
        usage = reply.usage_metadata or {}
        known = bool(usage)  # a server that sent no usage: unknown tokens, never 0
        finish = reply.response_metadata.get("finish_reason")
        reasoning = (usage.get("output_token_details") or {}).get("reasoning")
        ended = {"finish_reason": finish if isinstance(finish, str) else None,
                 "truncated": finish == TRUNCATED,
                 "reasoning_tokens": int(reasoning) if reasoning is not None else None}
        record = CallRecord(tag, int(usage.get("input_tokens") or 0) if known else None,
                            int(usage.get("output_tokens") or 0) if known else None,
                            attempts, latency_s, seed, **ended, cached=cached)
        ledger.add_call(record)
        text = reply.content if isinstance(reply.content, str) else reply.text
        meta = {**reply.response_metadata,
                "lcb": {"attempts": attempts, "latency_s": round(latency_s, 4), "seed": seed,
                        **ended, "cached": cached}}
        return reply.model_copy(update={"content": strip_think(text), "response_metadata": meta})


def _missed(tag: CallTag, ledger: UsageLedger, *, seed: int | None, sample: int,
            purpose: str) -> CacheMiss:
    """The `CacheMiss` of a call that may not be sent, recorded as a failed call."""
    miss = CacheMiss(tag, sample=sample, purpose=purpose)
    ledger.add_call(CallRecord(tag, 0, 0, 0, 0.0, seed, error=str(miss)))
    return miss
