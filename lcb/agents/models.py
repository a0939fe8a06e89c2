"""The model endpoint's description: configuration, the HTTP client, the request's extras.

Contract:
- `ModelConfig` is the whole description of one OpenAI-compatible endpoint and its sampling.
  `ModelConfig.from_env()` reads `VLLM_BASE_URL`, `MODEL_ID`, `OPENAI_API_KEY` (`EMPTY` when
  unset) and the generation settings of `GENERATION_ENV` (`LCB_TEMPERATURE`, `LCB_TOP_P`,
  `LCB_MAX_TOKENS`, `LCB_THINKING`, `LCB_REQUEST_TIMEOUT`, `LCB_QUEUE_TIMEOUT`); a `model`
  argument (an alias from `MODEL_ALIASES` or a model id) wins over `MODEL_ID`, and keyword
  overrides (the command-line flags) win over the variables. A variable that does not parse or
  is out of range is a `ValueError` naming it.
- `thinking` None sends vLLM's default extras (thinking off); True/False sets
  `chat_template_kwargs.enable_thinking`. Either way it is sent only with `vllm_extras` on
  (`extra_body`).
- `new_session(config)` is the aiohttp session of one event loop (created inside it, closed
  there), which every chat request goes through (`lcb.agents.stream`, which applies the two
  time limits itself: `timeout_s` between chunks, `queue_timeout_s` until the answer begins);
  the session bounds only the connection (10 s) and has room for `max_concurrent_requests`
  connections (+4). `new_http_client(config)` is the httpx client of the endpoint check's GET
  /models (`lcb.agents.check`). Both verify TLS against one store (`tls_context()`) and take
  the same proxy from the environment (`proxy_for`: `NO_PROXY`, `HTTP(S)_PROXY`,
  `ALL_PROXY`; HTTP(S) proxies only); neither reads `~/.netrc`.
  `VLLM_BASE_URL` may list several base URLs, comma-separated (`ModelConfig.base_urls`; the
  gateway spreads requests over them, `lcb.agents.endpoints`). The endpoint check is
  `lcb.agents.check`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from lcb.agents.endpoints import redact_url, split_base_urls

if TYPE_CHECKING:
    import aiohttp

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
    "queue_timeout_s": (lambda v: 0 < v < math.inf, "> 0 seconds"),
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
    "queue_timeout_s": ("LCB_QUEUE_TIMEOUT", float, "a number of seconds"),
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

    `timeout_s` is how long an answer may go silent between two chunks (`--request-timeout`);
    `queue_timeout_s` how long a request may wait for its answer to begin (`--queue-timeout`: a
    busy server queues requests, and a queued request is not a silent one). `thinking`
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
    queue_timeout_s: float = 1800.0
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
    """An httpx client for one event loop (the endpoint check's GET /models).

    LangChain's default async client is cached per URL across event loops, and a pooled
    connection from a closed loop fails with "Event loop is closed"; so each runtime (and each
    endpoint check) brings its own client and closes it.
    """
    timeout = httpx.Timeout(None, connect=min(CONNECT_TIMEOUT_S, config.timeout_s))
    # The proxy the chat requests take too (`proxy_for`), and no netrc: one rule for both.
    return httpx.AsyncClient(timeout=timeout, verify=tls_context(), trust_env=False,
                             proxy=proxy_for(config.base_url))


def new_session(config: ModelConfig) -> aiohttp.ClientSession:
    """The aiohttp session of the running event loop, with room for every request the config
    allows (module docstring); the caller closes it in the same loop (`async with
    new_session(config) as session: await stream_reply(session, ...)`)."""
    import aiohttp  # ~0.1 s: only processes that send model requests load it

    # Only the connection is bounded here (a host that does not answer at all must not hold a
    # request); the waits for an answer are `lcb.agents.stream`'s, which tell a queued request
    # from a silent one.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(CONNECT_TIMEOUT_S,
                                                                 config.timeout_s))
    connector = aiohttp.TCPConnector(limit=config.max_concurrent_requests + 4,
                                     limit_per_host=0, ssl=tls_context())
    # Not `trust_env`: it would also read ~/.netrc into every request (aiohttp then refuses
    # the Authorization header lcb sends) and skip ALL_PROXY; each request names its proxy
    # (`proxy_for`) instead.
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


def proxy_for(url: str) -> str | None:
    """The proxy a request to `url` goes through, from the environment as curl and httpx read
    it: `NO_PROXY` first, then `HTTPS_PROXY` / `HTTP_PROXY` by the URL's scheme, then
    `ALL_PROXY`; None for none. A proxy that is not HTTP(S) (SOCKS) is a `ValueError`
    naming the variable, since lcb's model client speaks HTTP to proxies only."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass_environment(parts.hostname):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy is None:
        return None
    if urllib.parse.urlsplit(proxy).scheme not in ("http", "https"):
        raise ValueError(f"the proxy for {redact_url(url)} from the environment ({proxy!r}) is "
                         "not an HTTP proxy: lcb's model client supports HTTP(S) proxies only")
    return proxy


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificate store every client of this process verifies against, loaded once (as
    httpx would load it: `SSL_CERT_FILE`/`SSL_CERT_DIR`, else certifi's bundle). Loading it
    costs ~30 ms of CPU, which each new client would otherwise pay again."""
    return httpx.create_ssl_context()


def extra_body(config: ModelConfig) -> dict[str, Any] | None:
    """The fields sent beyond OpenAI's own: vLLM's extras and the thinking switch (None with
    `vllm_extras` off). The body has `max_completion_tokens`; older local servers read only
    `max_tokens`, so it goes here too."""
    if not config.vllm_extras:
        return None
    return {**VLLM_EXTRAS, **config.template_kwargs(), "max_tokens": config.max_tokens}
