"""The model endpoint: configuration, the chat-model factory and the endpoint check.

Contract:
- `ModelConfig` is the whole description of one OpenAI-compatible endpoint and its sampling.
  `ModelConfig.from_env()` reads `VLLM_BASE_URL`, `MODEL_ID`, `OPENAI_API_KEY` (`EMPTY` when
  unset) and the generation settings of `GENERATION_ENV` (`LCB_TEMPERATURE`, `LCB_TOP_P`,
  `LCB_MAX_TOKENS`, `LCB_THINKING`, `LCB_REQUEST_TIMEOUT`); a `model` argument (an alias from
  `MODEL_ALIASES` or a model id) wins over `MODEL_ID`, and keyword overrides (the command-line
  flags) win over the variables. A variable that does not parse or is out of range is a
  `ValueError` naming it.
- `thinking` None sends vLLM's default extras (thinking off); True/False sets
  `chat_template_kwargs.enable_thinking`. Either way it is sent only with `vllm_extras` on.
- `build_chat_model(config)` returns a `ChatOpenAI` on the Chat Completions API with the client's
  own retries switched off: lcb retries itself (`lcb.agents.llm`), so retries can be counted
  and tested. It streams every request; `timeout_s` is the idle timeout between chunks.
- `check_endpoint(config)` makes two cheap calls (list the models, then a 1-token completion) and
  raises `EndpointError` whose message names the URL and model tried and how to set them.
  `VLLM_BASE_URL` may list several base URLs, comma-separated (`ModelConfig.base_urls`; the
  gateway spreads requests over them, `lcb.agents.endpoints`): the check passes when one of
  them answers, names the others, and fails naming each only when none does.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import ssl
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import httpx
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from lcb.agents.endpoints import check_each, redact_url, split_base_urls

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


def parse_yes_no(raw: str) -> bool:
    """`1/true/yes/on` -> True, `0/false/no/off` -> False (any case); anything else raises."""
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a yes/no value: {raw!r}")


# The settings with a range, and the rule each must meet (checked by `ModelConfig`).
LIMITS: dict[str, tuple[Callable[[float], bool], str]] = {
    "temperature": (lambda v: 0 <= v < math.inf, ">= 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_tokens": (lambda v: v > 0, "> 0"),
    "timeout_s": (lambda v: 0 < v < math.inf, "> 0 seconds"),
    "max_retries": (lambda v: v >= 0, ">= 0"),
    "max_concurrent_requests": (lambda v: v >= 1, ">= 1"),
    "retry_backoff_s": (lambda v: 0 <= v < math.inf, ">= 0"),
    "retry_backoff_max_s": (lambda v: 0 <= v < math.inf, ">= 0"),
}
# Generation settings that an environment variable may set: field -> (variable, parser, kind).
GENERATION_ENV: dict[str, tuple[str, Callable[[str], object], str]] = {
    "temperature": ("LCB_TEMPERATURE", float, "a number"),
    "top_p": ("LCB_TOP_P", float, "a number"),
    "max_tokens": ("LCB_MAX_TOKENS", int, "a whole number"),
    "thinking": ("LCB_THINKING", parse_yes_no, "1/0, true/false, yes/no or on/off"),
    "timeout_s": ("LCB_REQUEST_TIMEOUT", float, "a number of seconds"),
}
GENERATION_FIELDS = tuple(GENERATION_ENV)


def out_of_range(name: str, value: object) -> str | None:
    """Why `value` cannot be setting `name` (None when it can, or `name` has no range)."""
    if name not in LIMITS or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    ok, rule = LIMITS[name]
    return None if ok(value) else f"{name} must be {rule}, got {value!r}"


@dataclass(frozen=True)
class ModelConfig:
    """One endpoint and its sampling. `seed=None` sends no request seeds.

    `timeout_s` is how long a request may wait for the server (`--request-timeout`). `thinking`
    None keeps vLLM's default extras; True/False asks the chat template to think or not.
    `retry_backoff_s` is the first retry's delay (it doubles per attempt, with jitter, up to
    `retry_backoff_max_s`); tests set it near zero.

    `base_urls` lists every endpoint serving the model (`lcb.agents.endpoints`: requests go to
    the least busy one); `base_url` is always the first, the one records name. A `base_url`
    holding a comma-separated list (`VLLM_BASE_URL=a,b`) sets both; `base_urls` is kept only
    when it starts with `base_url` (so `replace(config, base_url=u)` means the one URL `u`).
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
    thinking: bool | None = None
    base_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        first, every = _endpoint_urls(self.base_url, self.base_urls)
        object.__setattr__(self, "base_url", first)
        object.__setattr__(self, "base_urls", every)
        if not self.model_id.strip():
            raise ValueError("model_id is empty: set MODEL_ID or pass --model")
        for name in LIMITS:
            problem = out_of_range(name, getattr(self, name))
            if problem:
                raise ValueError(f"ModelConfig.{problem}")

    @classmethod
    def from_env(cls, model: str | None = None, **overrides: Any) -> ModelConfig:
        """Build from `VLLM_BASE_URL`, `MODEL_ID`, `OPENAI_API_KEY` and `GENERATION_ENV`;
        `model` and `overrides` win. Asking for `thinking` with `vllm_extras` off is refused:
        the setting would never be sent.

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
        values.update(_generation_from_env(skip=set(overrides)))
        values.update(overrides)
        config = cls(**values)
        if config.thinking is not None and not config.vllm_extras:
            raise ValueError("thinking (--thinking/--no-thinking or LCB_THINKING) is sent as "
                             "vLLM's chat_template_kwargs, which --no-vllm-extras switches off: "
                             "drop one of the two")
        return config

    def generation(self) -> dict[str, Any]:
        """The generation settings (`GENERATION_FIELDS`) that records carry."""
        return {name: getattr(self, name) for name in GENERATION_FIELDS}

    def template_kwargs(self) -> dict[str, Any]:
        """The extra-body entry that sets `thinking` (empty when it is None)."""
        if self.thinking is None:
            return {}
        return {"chat_template_kwargs": {"enable_thinking": self.thinking}}

    def to_record(self) -> dict[str, Any]:
        """JSON-able settings with the API key redacted."""
        record = dataclasses.asdict(self)
        record["api_key"] = "EMPTY" if self.api_key == "EMPTY" else "<redacted>"
        record["base_url"] = redact_url(self.base_url)
        record["base_urls"] = [redact_url(url) for url in self.base_urls]
        return record


def _endpoint_urls(base_url: str, base_urls: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(`base_url`, `base_urls`) as `ModelConfig` keeps them (see its docstring); a URL that
    is not http(s) raises `ValueError`."""
    urls = split_base_urls(base_url) if "," in base_url else (base_url,)
    if len(urls) == 1 and tuple(base_urls)[:1] == urls:
        urls = tuple(base_urls)
    for url in urls or ("",):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (set VLLM_BASE_URL, "
                             f"e.g. {DEFAULT_BASE_URL}; several are comma-separated), "
                             f"got {url!r}")
    return urls[0], tuple(urls)


def _generation_from_env(*, skip: set[str]) -> dict[str, Any]:
    """The `GENERATION_ENV` variables that are set (and not in `skip`), parsed and checked."""
    values: dict[str, Any] = {}
    for name, (variable, parse, kind) in GENERATION_ENV.items():
        raw = os.environ.get(variable, "").strip()
        if name in skip or not raw:
            continue
        try:
            value = parse(raw)
        except ValueError:
            raise ValueError(f"environment variable {variable}={raw!r}: expected {kind}") from None
        problem = out_of_range(name, value)
        if problem:
            raise ValueError(f"environment variable {variable}={raw!r}: {problem}")
        values[name] = value
    return values


CONNECT_TIMEOUT_S = 10.0


def new_http_client(config: ModelConfig) -> httpx.AsyncClient:
    """An HTTP client for one event loop, with room for every request the config allows.

    LangChain's default async client is cached per URL across event loops, and a pooled
    connection from a closed loop fails with "Event loop is closed"; so each runtime (and each
    endpoint check) brings its own client and closes it.
    """
    n = config.max_concurrent_requests
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n)
    # A host that does not answer at all must not hold a request for the whole idle timeout.
    timeout = httpx.Timeout(config.timeout_s, connect=min(CONNECT_TIMEOUT_S, config.timeout_s))
    return httpx.AsyncClient(limits=limits, timeout=timeout, verify=tls_context())


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

    Every request streams, with usage in the stream's last chunk. `config.timeout_s` is an idle
    timeout, never a bound on the whole reply: httpx applies it to each read (the response
    head, each piece of the body) and the client's `stream_chunk_timeout` to each wait for the
    next parsed chunk (so SSE keep-alive comments alone do not keep a silent stream open).
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
        streaming=True,
        stream_usage=True,
        stream_chunk_timeout=config.timeout_s,  # also shields us from its environment variable
        max_retries=0,
        use_responses_api=False,
        extra_body=extra_body(config),
        http_async_client=http_client,
    )


def extra_body(config: ModelConfig) -> dict[str, Any] | None:
    """The fields sent beyond OpenAI's own: vLLM's extras and the thinking switch (None with
    `vllm_extras` off). ChatOpenAI sends `max_completion_tokens`; older local servers read
    only `max_tokens`, so it goes here too."""
    if not config.vllm_extras:
        return None
    return {**VLLM_EXTRAS, **config.template_kwargs(), "max_tokens": config.max_tokens}


class EndpointError(RuntimeError):
    """The endpoint or model is unusable. The message is meant for users, not a stack trace;
    `problem` is its first line's reason alone."""

    problem: str = ""


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


async def check_endpoint(config: ModelConfig, *, report: TextIO | None = None) -> None:
    """Verify that the endpoint answers and serves `config.model_id`; raise `EndpointError`.

    Two cheap calls: GET /models (a connection, key and model-name check), then a 1-token chat
    completion with the real sampling settings (catches servers that reject them). With
    several `base_urls`, each is checked at once: one that answers is enough (each that failed
    is named on `report`, default stderr; the gateway tries it again later); when none does,
    the error names every URL with its problem.
    """
    if len(config.base_urls) == 1:
        return await _check_one(config)
    failed = await check_each(config.base_urls, lambda url: _check_one(
        dataclasses.replace(config, base_url=url)))
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


async def _check_one(config: ModelConfig) -> None:
    """The two cheap calls against `config.base_url` alone."""
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
