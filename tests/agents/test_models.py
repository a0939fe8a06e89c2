"""Model layer: config, the endpoint check and the retrying gateway."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import pytest
from langchain_core.messages import HumanMessage

from lcb.agents.check import EndpointError, check_endpoint
from lcb.agents.llm import ModelCallError, ModelGateway, request_seed
from lcb.agents.models import (
    MODEL_ALIASES,
    ModelConfig,
    new_http_client,
    new_session,
    tls_context,
)
from lcb.agents.usage import CallTag, UsageLedger
from tests.helpers_agents import MODEL, model_config
from tests.scripted_server import Reply, failures, scripted_server

TAG = CallTag("P_1", "single", "solver", "solver", 1)


def test_from_env_reads_variables_and_model_argument_wins(monkeypatch):
    monkeypatch.setenv("VLLM_BASE_URL", "http://gpu:9000/v1/")
    monkeypatch.setenv("MODEL_ID", "some/model")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = ModelConfig.from_env()
    assert (config.base_url, config.model_id, config.api_key) == (
        "http://gpu:9000/v1", "some/model", "EMPTY")
    assert ModelConfig.from_env("llama").model_id == MODEL_ALIASES["llama"]
    assert ModelConfig.from_env("org/other", temperature=0.0).temperature == 0.0


def test_config_errors_name_the_setting():
    with pytest.raises(ValueError, match="max_tokens"):
        ModelConfig("http://h/v1", "m", max_tokens=0)
    with pytest.raises(ValueError, match="base_url"):
        ModelConfig("h:8000", "m")
    with pytest.raises(TypeError, match="temprature"):
        ModelConfig.from_env("qwen", temprature=1.0)


def test_record_redacts_the_key():
    record = ModelConfig("http://h/v1", "m", api_key="sk-secret").to_record()
    assert record["api_key"] == "<redacted>" and "sk-secret" not in str(record)


@pytest.mark.parametrize("extras", [True, False])
def test_requests_carry_sampling_and_vllm_extras_when_enabled(extras):
    with scripted_server(["ok"]) as server:
        config = model_config(server.base_url, vllm_extras=extras, seed=5)

        async def main() -> None:
            gateway = ModelGateway(config)
            await gateway.call([HumanMessage("hi")], tag=TAG, ledger=UsageLedger(), seed=77)
            await gateway.aclose()

        asyncio.run(main())
        body = server.chat_requests()[0]
    assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (0.2, 0.9, 4096)
    assert (body.get("max_tokens") == 4096) is extras
    assert body["seed"] == 77 and body["model"] == MODEL
    assert ("repetition_penalty" in body) is extras
    assert (body.get("chat_template_kwargs") == {"enable_thinking": False}) is extras


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_helpful(message: str, config: ModelConfig) -> None:
    assert config.base_url in message and config.model_id in message
    for name in ("VLLM_BASE_URL", "MODEL_ID", "OPENAI_API_KEY", "Ollama", "llama.cpp"):
        assert name in message
    assert "Traceback" not in message


def test_check_endpoint_on_a_closed_port():
    config = model_config(f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(EndpointError) as info:
        asyncio.run(check_endpoint(config))
    assert_helpful(str(info.value), config)
    assert "no answer" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_check_endpoint_when_the_model_is_not_served():
    with scripted_server(["ok"], models=["other/model"]) as server:
        config = model_config(server.base_url)
        with pytest.raises(EndpointError) as info:
            asyncio.run(check_endpoint(config))
    assert_helpful(str(info.value), config)
    assert "other/model" in str(info.value)


def test_check_endpoint_reports_a_failing_completion():
    with scripted_server([Reply.error(400)], models=[MODEL]) as server:
        config = model_config(server.base_url)
        with pytest.raises(EndpointError, match="HTTP 400") as info:
            asyncio.run(check_endpoint(config))
    assert_helpful(str(info.value), config)


def test_check_endpoint_passes_with_two_cheap_calls():
    with scripted_server(["OK"], models=[MODEL]) as server:
        asyncio.run(check_endpoint(model_config(server.base_url)))
    assert [r.path.rsplit("/", 1)[-1] for r in server.requests] == ["models", "completions"]
    assert server.chat_requests()[0]["max_completion_tokens"] == 1


def call_once(config: ModelConfig, ledger: UsageLedger) -> str:
    async def main() -> str:
        gateway = ModelGateway(config)
        try:
            return (await gateway.call([HumanMessage("q")], tag=TAG, ledger=ledger)).text
        finally:
            await gateway.aclose()

    return asyncio.run(main())


def test_gateway_retries_5xx_and_429_then_answers_and_counts_retries():
    ledger = UsageLedger()
    with scripted_server([*failures(1, 502), Reply.error(429), "fine"]) as server:
        assert call_once(model_config(server.base_url), ledger) == "fine"
    assert len(server.requests) == 3
    assert ledger.total().n_retries == 2 and ledger.total().n_llm_calls == 1
    assert ledger.calls[0].attempts == 3


def test_gateway_does_not_retry_a_client_error():
    ledger = UsageLedger()
    with scripted_server([Reply.error(400), "never"]) as server:
        with pytest.raises(ModelCallError, match="HTTP 400"):
            call_once(model_config(server.base_url), ledger)
    assert len(server.requests) == 1
    assert ledger.calls[0].error is not None and ledger.total().n_llm_calls == 0


def test_gateway_gives_up_after_max_retries_in_bounded_time():
    started = time.monotonic()
    with scripted_server(failures(10, 503)) as server:
        with pytest.raises(ModelCallError, match="3 attempt"):
            call_once(model_config(server.base_url, max_retries=2), UsageLedger())
    assert len(server.requests) == 3
    assert time.monotonic() - started < 10


def test_backoff_doubles_with_jitter_and_is_capped():
    gateway = ModelGateway(ModelConfig("http://h/v1", "m", retry_backoff_s=1.0,
                                       retry_backoff_max_s=5.0))
    delays = [gateway.backoff(n, RuntimeError()) for n in (1, 2, 3, 4, 5)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
    assert all(d <= 5.0 for d in delays)


def test_request_seed_is_stable_and_depends_on_every_part():
    seed = request_seed(0, "P_1", "solver", 1)
    assert seed == request_seed(0, "P_1", "solver", 1)
    others = {request_seed(1, "P_1", "solver", 1), request_seed(0, "P_2", "solver", 1),
              request_seed(0, "P_1", "coder", 1), request_seed(0, "P_1", "solver", 2)}
    assert seed not in others and len(others) == 4
    assert 0 <= seed < 2**31


def test_endpoint_check_then_calls_in_new_event_loops_share_no_connections():
    """LangChain caches its async HTTP client per URL across loops; ours must not break."""
    with scripted_server(["OK"]) as server:
        config = model_config(server.base_url, model_id="any/model", max_retries=0)
        asyncio.run(check_endpoint(config))  # the server lists no models: any id passes
        for _ in range(2):
            assert call_once(config, UsageLedger()) == "OK"


def test_check_endpoint_hints_at_a_missing_v1():
    with scripted_server(["OK"]) as server:
        config = model_config(server.base_url.removesuffix("/v1"))
        with pytest.raises(EndpointError, match="usually end in /v1") as info:
            asyncio.run(check_endpoint(config))
    assert_helpful(str(info.value), config)


def test_http_clients_share_one_certificate_store_that_verifies():
    config = model_config("https://api.example.invalid/v1", max_concurrent_requests=5)

    async def contexts() -> list[ssl.SSLContext]:
        seen = []
        for _ in range(2):
            async with new_http_client(config) as client, new_session(config) as session:
                seen.append(client._transport._pool._ssl_context)  # httpx keeps it on its pool
                seen.append(session.connector._ssl)  # aiohttp on its connector
                assert session.connector.limit == 5 + 4 and not session.trust_env  # see proxy_for
        return seen

    seen = asyncio.run(contexts())
    assert all(context is tls_context() for context in seen)
    assert tls_context().verify_mode == ssl.CERT_REQUIRED and tls_context().check_hostname


GENERATION_ENV_VARS = ("LCB_TEMPERATURE", "LCB_TOP_P", "LCB_MAX_TOKENS", "LCB_THINKING",
                       "LCB_REQUEST_TIMEOUT")


@pytest.fixture
def clean_env(monkeypatch):
    for name in GENERATION_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_from_env_reads_the_generation_variables_and_overrides_win(clean_env):
    for name, value in zip(GENERATION_ENV_VARS, ("0.7", "0.5", "1000", "Yes", "45"),
                           strict=True):
        clean_env.setenv(name, value)
    config = ModelConfig.from_env("m")
    assert (config.temperature, config.top_p, config.max_tokens) == (0.7, 0.5, 1000)
    assert (config.thinking, config.timeout_s) == (True, 45.0)
    config = ModelConfig.from_env("m", temperature=0.0, thinking=False, timeout_s=3.0)
    assert (config.temperature, config.thinking, config.timeout_s) == (0.0, False, 3.0)
    assert config.max_tokens == 1000


def test_from_env_defaults_when_the_variables_are_unset_or_empty(clean_env):
    clean_env.setenv("LCB_TOP_P", "  ")
    config = ModelConfig.from_env("m")
    assert (config.temperature, config.top_p, config.max_tokens) == (0.2, 0.9, 4096)
    assert (config.thinking, config.timeout_s) == (None, 120.0)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("LCB_TEMPERATURE", "warm", "LCB_TEMPERATURE='warm': expected a number"),
    ("LCB_TEMPERATURE", "-0.5", "LCB_TEMPERATURE='-0.5': temperature must be >= 0"),
    ("LCB_TOP_P", "0", "LCB_TOP_P='0': top_p must be in (0, 1]"),
    ("LCB_MAX_TOKENS", "1.5", "LCB_MAX_TOKENS='1.5': expected a whole number"),
    ("LCB_THINKING", "perhaps", "LCB_THINKING='perhaps': expected 1/0, true/false"),
    ("LCB_REQUEST_TIMEOUT", "nan", "LCB_REQUEST_TIMEOUT='nan': timeout_s must be > 0"),
])
def test_a_bad_generation_variable_is_named(clean_env, name, value, message):
    clean_env.setenv(name, value)
    with pytest.raises(ValueError) as info:
        ModelConfig.from_env("m")
    assert message in str(info.value)


def test_an_override_makes_its_bad_variable_irrelevant(clean_env):
    clean_env.setenv("LCB_TEMPERATURE", "warm")
    assert ModelConfig.from_env("m", temperature=1.0).temperature == 1.0


def test_thinking_without_vllm_extras_is_refused(clean_env):
    with pytest.raises(ValueError, match="--no-vllm-extras switches off"):
        ModelConfig.from_env("m", thinking=True, vllm_extras=False)
    clean_env.setenv("LCB_THINKING", "0")
    with pytest.raises(ValueError, match="LCB_THINKING"):
        ModelConfig.from_env("m", vllm_extras=False)
    assert ModelConfig.from_env("m").to_record()["thinking"] is False


@pytest.mark.parametrize(("thinking", "extras", "sent"), [
    (True, True, {"enable_thinking": True}), (False, True, {"enable_thinking": False}),
    (None, True, {"enable_thinking": False}), (True, False, None),
])
def test_thinking_sets_the_chat_template_kwargs(thinking, extras, sent):
    with scripted_server(["ok"]) as server:
        config = model_config(server.base_url, thinking=thinking, vllm_extras=extras,
                              temperature=0.9, top_p=0.3, max_tokens=77)

        async def main() -> None:
            gateway = ModelGateway(config)
            await gateway.call([HumanMessage("hi")], tag=TAG, ledger=UsageLedger())
            await gateway.aclose()

        asyncio.run(main())
        body = server.chat_requests()[0]
    assert body.get("chat_template_kwargs") == sent
    assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (0.9, 0.3, 77)
    assert config.generation() == {"temperature": 0.9, "top_p": 0.3, "max_tokens": 77,
                                   "thinking": thinking, "timeout_s": 5.0,
                                   "queue_timeout_s": 1800.0}
