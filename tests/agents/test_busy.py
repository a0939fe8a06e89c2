"""Busy is not down (issue #23): the endpoint checks against a one-slot server at work.

A one-slot scripted server (`scripted_server(slots=1)`) whose slot a generation holds answers
nothing, /v1/models included, until that generation ends. The check waits for it (bounded by
the queue timeout, not the idle one) and says so once; a refused connection or an HTTP error
is still "down" at once. The slot is freed when the check's notice is written, so no test
waits on a clock to line things up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from lcb.agents import check
from lcb.agents.check import EndpointError, check_endpoint
from lcb.grid.checks import usable_endpoints
from tests.helpers_agents import MODEL, model_config
from tests.helpers_grid import sleeper_job
from tests.scripted_server import ScriptedServer, message_text, scripted_server

FAST_S = 2.0  # "at once": well under any wait for a busy server


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Notices(io.StringIO):
    """A report stream that calls `on_write` whenever something is written to it."""

    def __init__(self, on_write: Callable[[], None]):
        super().__init__()
        self.on_write = on_write

    def write(self, text: str) -> int:
        written = super().write(text)
        self.on_write()
        return written


@contextmanager
def busy_server(**kw) -> Iterator[tuple[ScriptedServer, threading.Event]]:
    """A one-slot server serving `MODEL`, its slot held by a generation until the yielded
    event is set (or the block ends)."""
    started, release = threading.Event(), threading.Event()

    def script(request: dict) -> str:
        if "hold the slot" in message_text(request):
            started.set()
            release.wait(30)
            return "held"
        return "OK"

    with scripted_server(script, slots=1, models=[MODEL], **kw) as server:
        body = (b'{"model": "%s", "messages": [{"role": "user", "content": "hold the slot"}]}'
                % MODEL.encode())
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body,
                                         headers={"Authorization": "Bearer k"})
        holder = threading.Thread(target=lambda: urllib.request.urlopen(request, timeout=60))
        holder.start()
        assert started.wait(10)
        try:
            yield server, release
        finally:
            release.set()
            holder.join(10)


@pytest.fixture
def quick_notice(monkeypatch):
    monkeypatch.setattr(check, "BUSY_NOTICE_S", 0.2)


@pytest.mark.parametrize("queue_models", [True, False])  # llama.cpp's /models waits; vLLM's not
def test_a_busy_server_is_waited_for_past_the_idle_timeout_and_said_once(quick_notice,
                                                                          queue_models):
    with busy_server(queue_models=queue_models) as (server, release):
        report = Notices(release.set)  # the notice frees the slot
        config = model_config(server.base_url, timeout_s=0.05, queue_timeout_s=30)
        asyncio.run(check_endpoint(config, report=report))
    said = report.getvalue()
    assert said.count("lcb: ") == 1 and "not answered yet" in said
    assert "waiting up to 30 s (--queue-timeout)" in said
    assert server.slots.peak_queued >= 1  # /v1/models or the probe did wait
    assert [r.path.rsplit("/", 1)[-1] for r in server.requests][1:] == ["models", "completions"]


def test_a_busy_server_past_the_queue_timeout_fails_naming_it(quick_notice):
    with busy_server() as (server, _):
        config = model_config(server.base_url, timeout_s=60, queue_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(EndpointError) as info:
            asyncio.run(check_endpoint(config, report=io.StringIO()))
        assert time.monotonic() - started < 30
    assert "did not answer in 0.5 s (--queue-timeout)" in str(info.value)


def test_a_cancelled_check_hangs_up_its_queued_request(quick_notice):
    async def give_up(server: ScriptedServer) -> bool:
        config = model_config(server.base_url, queue_timeout_s=30)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(check_endpoint(config, report=io.StringIO()), 0.5)
        return await asyncio.to_thread(server.wait_for_close, 1, 5.0)

    with busy_server() as (server, _):
        assert asyncio.run(give_up(server)), "the queued /v1/models request was left open"


def test_a_refused_connection_is_down_at_once_with_the_advice():
    config = model_config(f"http://127.0.0.1:{closed_port()}/v1", queue_timeout_s=600)
    report, started = io.StringIO(), time.monotonic()
    with pytest.raises(EndpointError, match="no answer from the server") as info:
        asyncio.run(check_endpoint(config, report=report))
    assert time.monotonic() - started < FAST_S
    assert "VLLM_BASE_URL" in str(info.value) and report.getvalue() == ""


@pytest.mark.parametrize(("key", "path", "problem"), [
    ("wrong", "/v1", "refused the API key (HTTP 401)"),
    ("k", "/v2", "HTTP 404"),
])
def test_http_errors_are_down_at_once_even_while_busy(key, path, problem):
    with busy_server(api_key="k") as (server, _):
        base_url = server.base_url.removesuffix("/v1") + path
        config = model_config(base_url, api_key=key, queue_timeout_s=600)
        report, started = io.StringIO(), time.monotonic()
        with pytest.raises(EndpointError, match="Model endpoint check failed") as info:
            asyncio.run(check_endpoint(config, report=report))
        assert time.monotonic() - started < FAST_S
    assert problem in str(info.value) and "OPENAI_API_KEY" in str(info.value)
    assert report.getvalue() == ""


def test_the_grid_check_of_a_job_waits_for_a_busy_server(quick_notice, monkeypatch, tmp_path):
    with busy_server() as (server, release):
        monkeypatch.setattr("sys.stderr", Notices(release.set))
        live, dropped = usable_endpoints(sleeper_job(tmp_path, server.base_url), "k")
    assert (live, dropped) == ([server.base_url], {})
    assert server.slots.peak_queued >= 1


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_the_grid_check_keeps_the_jobs_queue_timeout(quick_notice, monkeypatch, tmp_path, where):
    job = sleeper_job(tmp_path, "")
    if where == "flag":  # the grid's settings.sampling.queue_timeout becomes the job's flag
        job = dataclasses.replace(job, argv=(*job.argv, "--queue-timeout", "0.5"))
    else:
        monkeypatch.setenv("LCB_QUEUE_TIMEOUT", "0.5")
    with busy_server() as (server, _):
        job = dataclasses.replace(job, env={**job.env, "VLLM_BASE_URL": server.base_url})
        started = time.monotonic()
        live, dropped = usable_endpoints(job, "k")
        assert time.monotonic() - started < 30
    assert live == [] and "0.5 s (--queue-timeout)" in dropped[server.base_url]


@pytest.mark.slow
def test_a_run_goes_on_once_the_busy_server_answers(quick_notice, monkeypatch, tmp_path):
    from lcb.runs.runner import run_batch
    from tests.helpers_runner import problem_ids, run_config, write_problems

    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    with busy_server() as (server, release):
        said = Notices(release.set)
        monkeypatch.setattr("sys.stderr", said)
        config = run_config(server.base_url, data, tmp_path / "out",
                            model=model_config(server.base_url, timeout_s=0.05))
        summary = asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))
    assert said.getvalue().count("not answered yet") == 1
    assert summary["n"] == 1 and server.chat_requests()[-1]["max_completion_tokens"] != 1
