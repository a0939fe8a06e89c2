"""The endpoint check: does the server answer, and does it serve the model?

Contract:
- `check_endpoint(config)` makes two cheap calls, GET /models (a connection, key and
  model-name check), then a 1-token chat completion with the real sampling settings (catches
  servers that reject them), and raises `EndpointError`, whose message names the URL and the
  model tried and how to set them.
- Busy is not down. A refused connection or an HTTP error fails the check at once. A server
  that took the request but has not begun to answer (a one-slot server at work: llama.cpp
  answers even /models only once its running generation ends) is waited for as a queued
  request is, up to `config.queue_timeout_s` (`--queue-timeout`) per call; once the probe's
  answer streams, a silence may last `config.timeout_s` (`--request-timeout`). When a request
  was sent and `BUSY_NOTICE_S` passed without an answer, the check says so, once per
  endpoint, on `report` (stderr by default). A host that never accepts the connection fails
  after the connect timeout (`models.CONNECT_TIMEOUT_S`), with no busy notice.
- `VLLM_BASE_URL` may list several base URLs (`ModelConfig.base_urls`): each is checked at
  once; the check passes when one of them answers, names the others, and fails naming each
  only when none does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Awaitable, Sequence
from typing import Any, TextIO

import aiohttp
import httpx
from langchain_core.messages import HumanMessage

from lcb.agents.endpoints import check_each, redact_url
from lcb.agents.failures import EndpointError, QueueTimeout, ServerError
from lcb.agents.models import (
    CONNECT_TIMEOUT_S,
    MODEL_ALIASES,
    ModelConfig,
    new_http_client,
    new_session,
    proxy_for,
)
from lcb.agents.stream import Limits, request_body, stream_reply

BUSY_NOTICE_S = 3.0

HOW_TO_SET = """\
Point lcb at an OpenAI-compatible endpoint with environment variables:
  VLLM_BASE_URL   the server's base URL, ending in /v1, for example
                    vLLM             http://localhost:8000/v1   (vllm serve Qwen/Qwen3.5-9B)
                    llama.cpp server http://localhost:8080/v1   (llama-server -m model.gguf)
                    Ollama           http://localhost:11434/v1  (ollama serve)
                    a hosted API     https://api.openai.com/v1
  MODEL_ID        the model id the server serves (or pass --model; aliases: {aliases})
  OPENAI_API_KEY  the API key, if the server wants one (default: EMPTY)
Hosted APIs that reject vLLM's extra sampling fields need vllm_extras switched off."""


def _endpoint_error(config: ModelConfig, problem: str, *,
                    tried: Sequence[str] | None = None) -> EndpointError:
    aliases = ", ".join(f"{k} -> {v}" for k, v in MODEL_ALIASES.items())
    if tried is None and "/v1" not in config.base_url:
        problem += " (OpenAI-compatible base URLs usually end in /v1)"
    urls = "".join(f"  URL tried:   {line}\n"
                   for line in tried or [redact_url(config.base_url)])
    err = EndpointError(
        f"Model endpoint check failed: {problem}\n{urls}"
        f"  model tried: {config.model_id}\n\n" + HOW_TO_SET.format(aliases=aliases)
    )
    err.problem = problem
    return err


class _Busy:
    """Says once, on `report`, that a server took a request but is slow to answer (module
    docstring). `sent` is set once a request reached the server (`trace`, httpx's trace
    extension, sees it waiting for the response head), so a host still connecting is not
    called busy."""

    def __init__(self, config: ModelConfig, report: TextIO | None):
        self.config, self.report = config, report
        self.sent = self.said = False

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith("receive_response_headers.started"):
            self.sent = True

    async def wait(self, call: Awaitable[Any]) -> Any:
        """`await call`, saying once that the server is busy if it is."""
        task = asyncio.ensure_future(call)
        try:
            while not self.said:
                done, _ = await asyncio.wait({task}, timeout=BUSY_NOTICE_S)
                if done:
                    break
                if self.sent:
                    self.said = True
                    print(f"lcb: {redact_url(self.config.base_url)} took the request but has "
                          f"not answered yet (busy with another one?); waiting up to "
                          f"{self.config.queue_timeout_s:g} s (--queue-timeout)",
                          file=self.report or sys.stderr, flush=True)
            return await task
        finally:
            task.cancel()  # a no-op once done; else (the caller was cancelled) no orphan


async def _served_models(config: ModelConfig, client: httpx.AsyncClient, busy: _Busy
                         ) -> list[str] | None:
    """The ids listed by GET /models; None when the server has no such route."""
    headers = {"Authorization": f"Bearer {config.api_key}"}
    timeout = httpx.Timeout(config.queue_timeout_s,
                            connect=min(CONNECT_TIMEOUT_S, config.timeout_s))
    try:
        response = await busy.wait(client.get(f"{config.base_url}/models", headers=headers,
                                              timeout=timeout,
                                              extensions={"trace": busy.trace}))
    except httpx.ReadTimeout:
        raise _endpoint_error(config, f"the server took the request but did not answer in "
                              f"{config.queue_timeout_s:g} s (--queue-timeout)") from None
    except httpx.HTTPError as err:
        reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        raise _endpoint_error(config, f"no answer from the server ({reason})") from None
    busy.sent = True  # it answered: the probe's request will reach it too
    if response.status_code in (401, 403):
        status = response.status_code
        raise _endpoint_error(config, f"the server refused the API key (HTTP {status})")
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise _endpoint_error(config, f"GET /models answered HTTP {response.status_code}")
    try:
        return [str(m["id"]) for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return None


async def check_endpoint(config: ModelConfig, *, report: TextIO | None = None) -> None:
    """Verify that the endpoint answers and serves `config.model_id`; raise `EndpointError`.

    Two cheap calls: GET /models (a connection, key and model-name check), then a 1-token chat
    completion with the real sampling settings (catches servers that reject them). With
    several `base_urls`, each is checked at once: one that answers is enough (each that failed
    is named on `report`, default stderr; the gateway tries it again later); when none does,
    the error names every URL with its problem.
    """
    if len(config.base_urls) == 1:
        return await _check_one(config, report)
    failed = await check_each(config.base_urls, lambda url: _check_one(
        dataclasses.replace(config, base_url=url), report))
    for err in failed.values():
        if not isinstance(err, EndpointError):
            raise err
    problems = {url: getattr(err, "problem", str(err)) for url, err in failed.items()}
    if len(failed) == len(config.base_urls):
        raise _endpoint_error(config, f"none of the {len(failed)} endpoints answers",
                              tried=[f"{redact_url(url)}: {why}"
                                     for url, why in problems.items()])
    left = len(config.base_urls) - len(failed)
    for url, why in problems.items():
        print(f"lcb: endpoint {redact_url(url)} failed its check ({why}); the run starts on "
              f"the other {left} and tries it again later", file=report or sys.stderr)


async def _check_one(config: ModelConfig, report: TextIO | None) -> None:
    """The two cheap calls against `config.base_url` alone."""
    busy = _Busy(config, report)
    async with new_http_client(config) as client, new_session(config) as session:
        served = await _served_models(config, client, busy)
        if served and config.model_id not in served:
            listed = ", ".join(served[:10]) + (" ..." if len(served) > 10 else "")
            problem = f"the server does not serve this model (it serves: {listed})"
            raise _endpoint_error(config, problem)
        await _probe_completion(config, session, busy)


async def _probe_completion(config: ModelConfig, session: aiohttp.ClientSession, busy: _Busy
                            ) -> None:
    """A 1-token completion through the streaming path the run will use."""
    body = request_body(dataclasses.replace(config, max_tokens=1), [HumanMessage("Say OK.")],
                        [], config.seed)
    headers = {"Authorization": f"Bearer {config.api_key}"}
    limits = Limits(first_byte_s=config.queue_timeout_s, idle_s=config.timeout_s)
    try:
        await busy.wait(stream_reply(session, f"{config.base_url}/chat/completions", headers,
                                     body, limits, proxy=proxy_for(config.base_url)))
    except QueueTimeout:
        raise _endpoint_error(config, f"the server took a 1-token completion but did not "
                              f"begin it in {config.queue_timeout_s:g} s (--queue-timeout)"
                              ) from None
    except ServerError as err:
        raise _endpoint_error(config, f"a 1-token completion failed (HTTP {err.status_code}: "
                              f"{err.message})") from None
    except Exception as err:  # noqa: BLE001 - every other failure becomes one readable message
        detail = str(err) or type(err).__name__
        raise _endpoint_error(config, f"a 1-token completion failed ({type(err).__name__}: "
                              f"{detail})") from None
