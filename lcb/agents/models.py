"""The model endpoint: configuration, the chat-model factory and the endpoint check.

Contract:
- `ModelConfig` is the whole description of one OpenAI-compatible endpoint and its sampling.
  `ModelConfig.from_env()` reads `VLLM_BASE_URL`, `MODEL_ID`, `OPENAI_API_KEY` (`EMPTY` when
  unset); a `model` argument (an alias from `MODEL_ALIASES` or a model id) wins over `MODEL_ID`.
- `build_chat_model(config)` returns a `ChatOpenAI` on the Chat Completions API with the client's
  own retries switched off: lcb retries itself (`lcb.agents.llm`), so retries can be counted
  and tested.
- `check_endpoint(config)` makes two cheap calls (list the models, then a 1-token completion) and
  raises `EndpointError` whose message names the URL and model tried and how to set them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import ssl
from dataclasses import dataclass
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

MODEL_ALIASES: dict[str, str] = {
    "qwen": "Qwen/Qwen3.5-9B",
    "llama": "meta-llama/Llama-3.1-8B-Instruct",
}
DEFAULT_BASE_URL = "http://localhost:8000/v1"
DEFAULT_MODEL = MODEL_ALIASES["qwen"]
VLLM_EXTRAS: dict[str, Any] = {
    "chat_template_kwargs": {"enable_thinking": False},
    "repetition_penalty": 1.05,
}

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


def resolve_model(name: str) -> str:
    """An alias (`qwen`, `llama`) becomes its model id; anything else is taken as a model id."""
    return MODEL_ALIASES.get(name.strip().lower(), name.strip())


@dataclass(frozen=True)
class ModelConfig:
    """One endpoint and its sampling. `seed=None` sends no request seeds.

    `retry_backoff_s` is the first retry's delay (it doubles per attempt, with jitter, up to
    `retry_backoff_max_s`); tests set it near zero.
    """

    base_url: str
    model_id: str
    api_key: str = "EMPTY"
    temperature: float = 0.2
    top_p: float = 0.9
    max_tokens: int = 4096
    seed: int | None = 0
    timeout_s: float = 120.0
    max_retries: int = 3
    vllm_extras: bool = True
    max_concurrent_requests: int = 16
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (set VLLM_BASE_URL, "
                             f"e.g. {DEFAULT_BASE_URL}), got {self.base_url!r}")
        if not self.model_id.strip():
            raise ValueError("model_id is empty: set MODEL_ID or pass --model")
        checks = {
            "temperature": self.temperature >= 0,
            "top_p": 0 < self.top_p <= 1,
            "max_tokens": self.max_tokens > 0,
            "timeout_s": self.timeout_s > 0,
            "max_retries": self.max_retries >= 0,
            "max_concurrent_requests": self.max_concurrent_requests >= 1,
            "retry_backoff_s": self.retry_backoff_s >= 0,
            "retry_backoff_max_s": self.retry_backoff_max_s >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"ModelConfig.{name} is out of range: {getattr(self, name)!r}")

    @classmethod
    def from_env(cls, model: str | None = None, **overrides: Any) -> ModelConfig:
        """Build from `VLLM_BASE_URL`, `MODEL_ID`, `OPENAI_API_KEY`; `model` and `overrides` win.

        Example:
            >>> ModelConfig.from_env("llama", base_url="http://h:1/v1").model_id
            'meta-llama/Llama-3.1-8B-Instruct'
        """
        name = model or os.environ.get("MODEL_ID") or DEFAULT_MODEL
        values: dict[str, Any] = {
            "base_url": (os.environ.get("VLLM_BASE_URL") or DEFAULT_BASE_URL).rstrip("/"),
            "model_id": resolve_model(name),
            "api_key": os.environ.get("OPENAI_API_KEY") or "EMPTY",
        }
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"ModelConfig.from_env: unknown settings {sorted(unknown)}")
        values.update(overrides)
        return cls(**values)

    def to_record(self) -> dict[str, Any]:
        """JSON-able settings with the API key redacted."""
        record = dataclasses.asdict(self)
        record["api_key"] = "EMPTY" if self.api_key == "EMPTY" else "<redacted>"
        return record


def new_http_client(config: ModelConfig) -> httpx.AsyncClient:
    """An HTTP client for one event loop, with room for every request the config allows.

    LangChain's default async client is cached per URL across event loops, and a pooled
    connection from a closed loop fails with "Event loop is closed"; so each runtime (and each
    endpoint check) brings its own client and closes it.
    """
    n = config.max_concurrent_requests
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n)
    return httpx.AsyncClient(limits=limits, timeout=config.timeout_s, verify=tls_context())


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificate store every client of this process verifies against, loaded once (as
    httpx would load it: `SSL_CERT_FILE`/`SSL_CERT_DIR`, else certifi's bundle). Loading it
    costs ~30 ms of CPU, which each new client would otherwise pay again."""
    return httpx.create_ssl_context()


def build_chat_model(
    config: ModelConfig, *, http_client: httpx.AsyncClient | None = None
) -> ChatOpenAI:
    """The one chat-model factory. Client-side retries are off: `lcb.agents.llm` retries and counts.

    Pass `http_client` (see `new_http_client`) for async use; the caller closes it.
    """
    return ChatOpenAI(
        model=config.model_id,
        base_url=config.base_url,
        api_key=SecretStr(config.api_key),
        temperature=config.temperature,
        top_p=config.top_p,
        max_tokens=config.max_tokens,
        seed=config.seed,
        timeout=config.timeout_s,
        max_retries=0,
        use_responses_api=False,
        # ChatOpenAI sends `max_completion_tokens`; older local servers read only `max_tokens`.
        extra_body={**VLLM_EXTRAS, "max_tokens": config.max_tokens} if config.vllm_extras else None,
        http_async_client=http_client,
    )


class EndpointError(RuntimeError):
    """The endpoint or model is unusable. The message is meant for users, not a stack trace."""


def _endpoint_error(config: ModelConfig, problem: str) -> EndpointError:
    aliases = ", ".join(f"{k} -> {v}" for k, v in MODEL_ALIASES.items())
    if "/v1" not in config.base_url:
        problem += " (OpenAI-compatible base URLs usually end in /v1)"
    return EndpointError(
        f"Model endpoint check failed: {problem}\n"
        f"  URL tried:   {config.base_url}\n"
        f"  model tried: {config.model_id}\n\n" + HOW_TO_SET.format(aliases=aliases)
    )


async def _served_models(config: ModelConfig, client: httpx.AsyncClient) -> list[str] | None:
    """The ids listed by GET /models; None when the server has no such route."""
    headers = {"Authorization": f"Bearer {config.api_key}"}
    try:
        response = await client.get(f"{config.base_url}/models", headers=headers,
                                    timeout=min(config.timeout_s, 30.0))
    except httpx.HTTPError as err:
        reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        raise _endpoint_error(config, f"no answer from the server ({reason})") from None
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


async def check_endpoint(config: ModelConfig) -> None:
    """Verify that the endpoint answers and serves `config.model_id`; raise `EndpointError`.

    Two cheap calls: GET /models (a connection, key and model-name check), then a 1-token chat
    completion with the real sampling settings (catches servers that reject them).
    """
    async with new_http_client(config) as client:
        served = await _served_models(config, client)
        if served and config.model_id not in served:
            listed = ", ".join(served[:10]) + (" ..." if len(served) > 10 else "")
            problem = f"the server does not serve this model (it serves: {listed})"
            raise _endpoint_error(config, problem)
        await _probe_completion(config, client)


async def _probe_completion(config: ModelConfig, client: httpx.AsyncClient) -> None:
    probe = build_chat_model(dataclasses.replace(config, max_tokens=1), http_client=client)
    try:
        await probe.ainvoke([HumanMessage("Say OK.")])
    except Exception as err:  # noqa: BLE001 - every failure becomes one readable message
        status = getattr(err, "status_code", None)
        what = f"HTTP {status}" if status else type(err).__name__
        detail = getattr(err, "message", None) or str(err) or what
        raise _endpoint_error(config, f"a 1-token completion failed ({what}: {detail})") from None
