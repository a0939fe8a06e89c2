"""Several endpoints: the base-URL list, the least-busy choice and cool-downs of the pool, the
endpoint check over every URL, and batches spread over two scripted servers, one of which
dies mid-batch."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import aiohttp
import httpx
import pytest
from langchain_core.messages import HumanMessage

from lcb.agents.check import EndpointError, check_endpoint
from lcb.agents.endpoints import EndpointPool, Verdict, redact_url, split_base_urls
from lcb.agents.failures import IdleTimeout, ServerError, is_retryable, verdict_of
from lcb.agents.llm import ModelCallError, ModelGateway
from lcb.agents.models import ModelConfig
from lcb.agents.usage import CallTag, UsageLedger
from lcb.runs.records import read_records
from lcb.runs.runner import run_batch
from tests.helpers_runner import (
    MODEL,
    RIGHT,
    marker,
    model_config,
    problem_ids,
    run_config,
    script,
    write_problems,
)
from tests.scripted_server import (
    ScriptedServer,
    _Handler,
    _Server,
    message_text,
    scripted_fixture,  # noqa: F401
)

TAG = CallTag("P_1", "single", "solver", "solver", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def test_split_and_redact_base_urls():
    assert split_base_urls("http://a:1/v1/, http://b:2/v1 ,,http://a:1/v1") == (
        "http://a:1/v1", "http://b:2/v1")
    assert split_base_urls(" , ") == ()
    assert redact_url("https://u:secret@h:8443/v1?key=k") == "https://h:8443/v1"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_model_config_keeps_the_list_and_the_first_as_base_url(monkeypatch):
    monkeypatch.setenv("VLLM_BASE_URL", "http://a:1/v1/, https://u:pw@b:2/v1?t=1")
    config = ModelConfig.from_env("m")
    assert config.base_url == "http://a:1/v1"
    assert config.base_urls == ("http://a:1/v1", "https://u:pw@b:2/v1?t=1")
    record = config.to_record()
    assert (record["base_url"], record["base_urls"]) == (
        "http://a:1/v1", ["http://a:1/v1", "https://b:2/v1"])
    assert replace(config, temperature=0.0).base_urls == config.base_urls
    assert replace(config, base_url="http://c:3/v1").base_urls == ("http://c:3/v1",)
    assert ModelConfig("http://h/v1/", "m").base_urls == ("http://h/v1/",)
    with pytest.raises(ValueError, match="'ftp://b'"):
        ModelConfig("http://a/v1,ftp://b", "m")


def test_the_pool_picks_the_fewest_in_flight_then_the_fewest_sent():
    pool = EndpointPool(["a", "b", "c"], clock=Clock())
    first, second, third = pool.acquire(), pool.acquire(), pool.acquire()
    assert [first.url, second.url, third.url] == ["a", "b", "c"]
    pool.release(second, Verdict.OK)
    assert pool.acquire().url == "b"  # b: 0 in flight
    pool.release(first, Verdict.OK)
    pool.release(third, Verdict.OK)
    assert [e.in_flight for e in pool.endpoints] == [0, 1, 0]
    assert pool.acquire().url == "a"  # a and c idle, each sent 1: list order
    assert pool.acquire().url == "c"
    assert [e.sent for e in pool.endpoints] == [2, 2, 2]


def test_a_down_endpoint_is_skipped_until_its_cool_down_ends_and_cool_downs_double():
    clock = Clock()
    pool = EndpointPool(["a", "b"], clock=clock, cooldown_s=5.0, cooldown_max_s=8.0)
    a = pool.acquire()
    pool.release(a, Verdict.DOWN)
    assert [pool.acquire().url for _ in range(3)] == ["b", "b", "b"]
    clock.now += 5.0  # the cool-down is over: a is tried again, and fails again
    assert pool.acquire().url == "a"
    pool.release(a, Verdict.DOWN)
    clock.now += 5.0
    assert pool.acquire().url == "b"  # the second cool-down is 8 s (10 capped at 8)
    clock.now += 3.0
    retried = pool.acquire()
    assert retried is a
    pool.release(a, Verdict.OK)
    pool.release(a, Verdict.DOWN)
    clock.now += 5.0
    assert pool.is_live(a)  # an answer reset the doubling: 5 s again


def test_strikes_in_a_row_take_an_endpoint_down_and_an_answer_clears_them():
    clock = Clock()
    pool = EndpointPool(["a", "b"], clock=clock, strikes=2)
    a = pool.endpoints[0]
    for verdict in (Verdict.STRIKE, Verdict.OK, Verdict.STRIKE):
        pool.release(pool.acquire(avoid=pool.endpoints[1]), verdict)
    assert pool.is_live(a)
    pool.release(pool.acquire(avoid=pool.endpoints[1]), Verdict.STRIKE)
    assert not pool.is_live(a) and pool.other_live(a)


def test_with_every_endpoint_down_the_one_back_first_is_used_and_avoid_prefers_another():
    clock = Clock()
    pool = EndpointPool(["a", "b"], clock=clock)
    a, b = pool.endpoints
    pool.release(pool.acquire(), Verdict.DOWN)  # a: back at 105
    clock.now += 1.0
    pool.release(pool.acquire(), Verdict.DOWN)  # b: back at 106
    assert not pool.other_live(a) and pool.acquire() is a
    clock.now += 10.0
    assert pool.acquire(avoid=a) is b and pool.acquire(avoid=b) is a


def test_the_check_passes_when_one_endpoint_answers_and_names_the_others(scripted):
    server = scripted(["OK"], models=[MODEL])
    dead = closed_url()
    report = io.StringIO()
    config = model_config(f"{dead},{server.base_url}")
    asyncio.run(check_endpoint(config, report=report))
    [line] = report.getvalue().splitlines()
    assert line.startswith(f"lcb: endpoint {dead} failed its check (no answer from the server (")
    assert line.endswith("); the run starts on the other 1 and tries it again later")
    assert [r.path.rsplit("/", 1)[-1] for r in server.requests] == ["models", "completions"]


def test_the_check_refuses_when_no_endpoint_answers_and_names_each():
    first, second = closed_url(), closed_url()
    with pytest.raises(EndpointError) as caught:
        asyncio.run(check_endpoint(model_config(f"{first},{second}")))
    lines = str(caught.value).splitlines()
    assert lines[0] == "Model endpoint check failed: none of the 2 endpoints answers"
    assert lines[1].startswith(f"  URL tried:   {first}: no answer from the server (")
    assert lines[2].startswith(f"  URL tried:   {second}: no answer from the server (")
    assert lines[3] == f"  model tried: {MODEL}"


def run(config) -> dict:
    return asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))


def asked(server: ScriptedServer, ids: list[str]) -> list[str]:
    """The problem ids of `server`'s chat requests, one per request (the check has none)."""
    texts = [message_text(body) for body in server.chat_requests()]
    return [qid for text in texts for qid in ids if marker(qid) in text]


def test_two_endpoints_share_a_batch_and_the_manifest_lists_both(scripted, tmp_path):
    ids = problem_ids(16)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    answers = script({qid: [RIGHT] for qid in ids})
    a, b = scripted(answers, latency_s=0.05), scripted(answers, latency_s=0.05)
    config = run_config(f"{a.base_url},{b.base_url}", data, tmp_path / "out", concurrency=8)
    summary = run(config)
    on_a, on_b = asked(a, ids), asked(b, ids)
    assert summary["solved"] == 16 and len(on_a) + len(on_b) == 16
    assert sorted(on_a + on_b) == ids  # each problem asked once, on one endpoint
    assert min(len(on_a), len(on_b)) >= 4
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["model"]["base_urls"] == [a.base_url, b.base_url]
    assert manifest["config"]["model"]["base_url"] == a.base_url


@pytest.mark.slow
def test_the_busier_endpoint_gets_fewer_requests(scripted, tmp_path):
    ids = problem_ids(12)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    answers = script({qid: [RIGHT] for qid in ids})
    fast, slow = scripted(answers), scripted(answers, latency_s=1.0)
    config = run_config(f"{fast.base_url},{slow.base_url}", data, tmp_path / "out",
                        concurrency=4)
    assert run(config)["solved"] == 12
    on_fast, on_slow = asked(fast, ids), asked(slow, ids)
    assert len(on_fast) + len(on_slow) == 12
    assert 1 <= len(on_slow) < len(on_fast)


@contextmanager
def killable_server(script_fn: Callable, *, latency_s: float = 0.0
                    ) -> Iterator[tuple[ScriptedServer, Callable[[], None]]]:
    """A scripted server with a `kill()` that dies as a crashed process would: the port stops
    accepting, and every open connection (requests in flight too) is cut."""
    connections: set[socket.socket] = set()

    class Handler(_Handler):
        def setup(self) -> None:
            super().setup()
            connections.add(self.connection)

    httpd = _Server(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state = ScriptedServer(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1",
                           script=script_fn, models=None, latency_s=latency_s)
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    dead = threading.Event()

    def kill() -> None:
        if dead.is_set():
            return
        dead.set()
        httpd.shutdown()
        httpd.server_close()
        for conn in list(connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    try:
        yield state, kill
    finally:
        kill()
        state.closing.set()
        thread.join(timeout=5)


def test_an_endpoint_dying_mid_batch_does_not_stop_the_batch(scripted, tmp_path):
    ids = problem_ids(12)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    answers = script({qid: [RIGHT] for qid in ids})
    survivor = scripted(answers, latency_s=0.1)
    seen = []

    def dying(body):
        seen.append(body)
        if len(seen) == 4:  # the endpoint check and three problems: then it crashes
            threading.Thread(target=kill).start()
        return answers(body)

    with killable_server(dying, latency_s=0.3) as (server, kill):
        config = run_config(f"{server.base_url},{survivor.base_url}", data, tmp_path / "out",
                            concurrency=6)
        summary = run(config)
        on_dead = asked(server, ids)
    records = read_records(tmp_path / "out" / "predictions.jsonl")
    assert summary["solved"] == 12 and [r["error"] for r in records] == [None] * 12
    on_survivor = asked(survivor, ids)
    moved = set(on_dead) & set(on_survivor)
    assert len(on_dead) >= 3 and moved  # requests in flight at the crash were retried there
    assert set(on_survivor) | set(on_dead) == set(ids)
    assert len(on_survivor) >= 12 - len(on_dead) + len(moved)


def test_every_endpoint_dead_is_the_usual_endpoint_error(tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    first, second = closed_url(), closed_url()
    with pytest.raises(EndpointError, match="none of the 2 endpoints answers") as caught:
        run(run_config(f"{first},{second}", data, tmp_path / "out"))
    assert first in str(caught.value) and second in str(caught.value)
    assert not (tmp_path / "out" / "predictions.jsonl").exists()


def test_a_call_moves_off_a_dead_endpoint_at_once_and_retries_stay_as_with_one(scripted):
    server = scripted(["fine"])
    dead = closed_url()

    async def call(base_url: str) -> tuple[str, list[float], object]:
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)

        gateway = ModelGateway(model_config(base_url, max_retries=1), sleep=sleep)
        ledger = UsageLedger()
        try:
            reply = await gateway.call([HumanMessage("hi")], tag=TAG, ledger=ledger)
            return reply.text, slept, ledger.calls[0]
        finally:
            await gateway.aclose()

    text, slept, record = asyncio.run(call(f"{dead},{server.base_url}"))
    assert (text, slept, record.attempts, record.error) == ("fine", [], 2, None)
    with pytest.raises(ModelCallError, match="2 attempt"):
        asyncio.run(call(dead))  # one endpoint: the backoff between attempts, as always
    assert len(server.chat_requests()) == 1


@pytest.mark.parametrize(("err", "verdict"), [
    (aiohttp.ClientOSError(111, "Connect call failed"), Verdict.DOWN),  # refused
    (aiohttp.ServerDisconnectedError(), Verdict.DOWN),  # gone before its answer
    (aiohttp.ClientPayloadError("Response payload is not completed"), Verdict.DOWN),  # cut
    (aiohttp.ConnectionTimeoutError("no connection in 10 s"), Verdict.STRIKE),
    (httpx.ConnectError("refused"), Verdict.DOWN),
    (httpx.RemoteProtocolError("peer closed connection"), Verdict.DOWN),
    (httpx.ReadTimeout("slow"), Verdict.STRIKE),
    (IdleTimeout(1.0), Verdict.STRIKE),
    (ServerError(503, "busy"), Verdict.STRIKE),
    (ServerError(400, "too long"), Verdict.OK),
])
def test_failures_of_either_http_client_say_the_same_of_an_endpoint(err, verdict):
    """Model requests go on aiohttp, the endpoint check's GET /models on httpx: a refused or
    cut connection is down, a timeout a strike, whichever raised it."""
    assert verdict_of(err) is verdict
    assert is_retryable(err) is (verdict is not Verdict.OK)


def test_one_outage_is_one_cool_down_and_an_answer_brings_an_endpoint_back():
    clock = [100.0]
    pool = EndpointPool(("http://a/v1", "http://b/v1"), clock=lambda: clock[0])
    taken = [pool.acquire() for _ in range(8)]
    for endpoint in taken:  # every request of one outage fails at once
        pool.release(endpoint, Verdict.DOWN)
    a, b = pool.endpoints
    assert (a.cooldowns, b.cooldowns) == (1, 1) and a.down_until == 100.0 + pool.cooldown_s
    slow = pool.acquire()  # a long stream that started before ...
    pool.release(pool.acquire(), Verdict.DOWN)
    pool.release(slow, Verdict.OK)  # ... and ends well: its endpoint answered
    assert slow.live(clock[0]) and slow.cooldowns == 0


def test_every_endpoint_failing_at_once_backs_off_instead_of_spinning():
    ports = []
    for _ in range(3):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        ports.append(probe.getsockname()[1])
        probe.close()
    urls = ",".join(f"http://127.0.0.1:{port}/v1" for port in ports)
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def main() -> None:
        gateway = ModelGateway(model_config(urls, max_retries=3), sleep=fake_sleep)
        try:
            with pytest.raises(ModelCallError):
                await gateway.call([HumanMessage("x")], tag=CallTag("p", "t", "r", "a", 0),
                                   ledger=UsageLedger())
        finally:
            await gateway.aclose()

    asyncio.run(main())
    assert len(sleeps) >= 2  # at most one free move to another endpoint, then backoff
