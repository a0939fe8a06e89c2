"""The scripted server itself: each behaviour the other tests rely on, through real HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.scripted_server import (
    Reply,
    ToolCall,
    assistant_turns,
    failures,
    keyed,
    scripted_fixture,  # noqa: F401 - provides the `scripted` fixture
    scripted_server,
    tool_results,
)


def post(base_url: str, body: dict, *, timeout: float = 10.0) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def chat(text: str, model: str = "m") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


def test_keyed_queues_advance_per_marker_and_last_repeats():
    script = keyed({"alpha": ["a1", "a2"], "beta": ["b1"]}, default=["d"])
    with scripted_server(script) as server:
        markers = ["alpha", "beta", "alpha", "alpha", "z"]
        answers = [post(server.base_url, chat(t))[1] for t in markers]
    texts = [a["choices"][0]["message"]["content"] for a in answers]
    assert texts == ["a1", "b1", "a2", "a2", "d"]


def test_tool_calls_well_formed_and_malformed():
    good = ToolCall("python_exec", {"code": "print(2)"}, id="c9")
    bad = ToolCall("python_exec", "{not json")
    with scripted_server([Reply.calls(good, bad)]) as server:
        status, body, _ = post(server.base_url, chat("x"))
    assert status == 200
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert calls[0]["id"] == "c9"
    assert json.loads(calls[0]["function"]["arguments"]) == {"code": "print(2)"}
    assert calls[1]["function"]["arguments"] == "{not json"


def test_usage_given_or_estimated_or_omitted():
    replies = [Reply("ok", prompt_tokens=11, completion_tokens=7), "ok", Reply("ok", usage=False)]
    with scripted_server(replies) as server:
        bodies = [post(server.base_url, chat("y" * 40))[1] for _ in range(3)]
    assert bodies[0]["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert bodies[1]["usage"]["prompt_tokens"] == 10
    assert "usage" not in bodies[2]


def test_injected_errors_then_success_and_retry_after():
    with scripted_server([*failures(2, 503), Reply.error(429, retry_after=1), "fine"]) as server:
        results = [post(server.base_url, chat("q")) for _ in range(4)]
    assert [r[0] for r in results] == [503, 503, 429, 200]
    assert results[2][2].get("Retry-After") == "1"
    assert [r.status for r in server.requests] == [503, 503, 429, 200]


def test_unknown_model_404_and_models_listing():
    with scripted_server(["x"], models=["known"]) as server:
        status, body, _ = post(server.base_url, chat("q", model="other"))
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            listing = json.loads(response.read())
    assert status == 404 and "other" in body["error"]["message"]
    assert [m["id"] for m in listing["data"]] == ["known"]


def test_stall_is_cut_short_by_client_timeout_and_close_is_prompt():
    started = time.monotonic()
    with scripted_server([Reply.stall()]) as server:
        with pytest.raises(TimeoutError):
            post(server.base_url, chat("q"), timeout=0.5)
    assert time.monotonic() - started < 10


def test_latency_and_peak_in_flight():
    with scripted_server(["r"], latency_s=0.3) as server:
        args = (server.base_url, chat("q"))
        threads = [threading.Thread(target=post, args=args) for _ in range(4)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    assert elapsed >= 0.3
    assert server.peak_in_flight >= 2


def test_script_errors_become_500_and_are_recorded():
    def broken(request):
        raise RuntimeError("boom")

    with scripted_server(broken) as server:
        status, _, _ = post(server.base_url, chat("q"))
    assert status == 500
    assert "boom" in server.script_errors[0]


def test_helpers_read_turns_and_tool_results(scripted):
    seen = []

    def script(request):
        seen.append((assistant_turns(request), tool_results(request)))
        return "done"

    server = scripted(script)
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c", "content": "stdout: 3"},
    ]
    post(server.base_url, {"model": "m", "messages": messages})
    assert seen == [(1, ["stdout: 3"])]
    assert server.chat_requests()[0]["messages"] == messages


def test_paths_outside_v1_get_404():
    with scripted_server(["x"]) as server:
        status, body, _ = post(server.base_url.removesuffix("/v1"), chat("q"))
    assert status == 404 and "no route" in body["error"]["message"]
    assert server.chat_requests() == []


def stream(base_url: str, body: dict, *, timeout: float = 10.0) -> tuple[str, list]:
    """POST a streaming request; the content type and the decoded events (`[DONE]` as is)."""
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        kind, text = response.headers["Content-Type"], response.read().decode()
    frames = [f.removeprefix("data: ") for f in text.split("\n\n") if f]
    return kind, [f if f == "[DONE]" else json.loads(f) for f in frames]


def test_stream_sends_sse_chunks_then_finish_reason_usage_and_done():
    reply = Reply("abcdefghij", chunk_chars=4, finish_reason="length", prompt_tokens=5,
                  completion_tokens=3, reasoning_tokens=2)
    with scripted_server([reply]) as server:
        kind, events = stream(server.base_url,
                              {**chat("q"), "stream_options": {"include_usage": True}})
        [record] = server.requests
    assert kind == "text/event-stream" and events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-2]]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "abcd"},
                      {"content": "efgh"}, {"content": "ij"}, {}]
    assert [e["choices"][0]["finish_reason"] for e in events[:-2]] == [None] * 4 + ["length"]
    assert events[-2]["choices"] == [] and events[-2]["usage"] == {
        "prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
        "completion_tokens_details": {"reasoning_tokens": 2}}
    assert (record.streamed, record.chunks_sent, record.client_closed) == (True, 6, False)


def test_stream_without_include_usage_has_no_usage_chunk_and_tool_calls_come_as_deltas():
    calls = Reply.calls(ToolCall("python_exec", {"code": "x"}, id="c7"), chunk_chars=5)
    with scripted_server([calls]) as server:
        _, events = stream(server.base_url, chat("q"))
    assert all(e == "[DONE]" or e["choices"] for e in events)
    deltas = [e["choices"][0]["delta"].get("tool_calls") for e in events[1:-2]]
    head = {"id": "c7", "type": "function", "index": 0,
            "function": {"name": "python_exec", "arguments": ""}}
    parts = [d[0]["function"]["arguments"] for d in deltas[1:]]
    assert deltas[0] == [head] and "".join(parts) == '{"code": "x"}'
    assert parts == ['{"cod', 'e": "', 'x"}']
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_pacing_and_a_client_that_hangs_up_mid_stall_is_recorded():
    with scripted_server([Reply("abcdefgh", chunk_chars=2, chunk_delay_s=0.1)]) as server:
        started = time.monotonic()
        _, events = stream(server.base_url, chat("q"))
        paced = time.monotonic() - started
    assert len(events) == 7  # role, 4 pieces, finish, [DONE]: 5 gaps of 0.1 s before [DONE]
    assert paced >= 0.5
    with scripted_server([Reply.stall_mid_stream(30.0, after=2)]) as server:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            stream(server.base_url, chat("q"), timeout=0.5)
        assert server.wait_for_close(1, timeout=2.0)
        [record] = server.requests
    assert (record.chunks_sent, record.client_closed) == (2, True)
    assert time.monotonic() - started < 5


def test_errors_before_a_stream_are_plain_json():
    with scripted_server([Reply.error(503)]) as server:
        status, body, _ = post(server.base_url, {**chat("q"), "stream": True})
    assert status == 503 and body["error"]["message"] == "scripted HTTP 503"
    assert not server.requests[0].streamed


def test_a_client_that_resets_mid_request_leaves_stderr_untouched(capfd):
    """A hang-up is normal for the server: counted, never printed where a test reads output."""
    import socket
    import struct

    with scripted_server(["ok"]) as server:
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        time.sleep(0.05)  # the handler is now blocked reading the body
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, as a client that gives up mid-request sends
        deadline = time.monotonic() + 5
        while server.hangups + len(server.handler_errors) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (server.hangups, server.handler_errors) == (1, [])
        assert post(server.base_url, chat("after"))[0] == 200
    assert capfd.readouterr().err == ""


def raw_request(port: int, method: str, path: str, body: dict | None = None):
    """A request sent over a bare socket (to see whether any byte comes back)."""
    import socket

    data = json.dumps(body).encode() if body is not None else b""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


class SlotHolder:
    """A script whose request marked "hold" keeps its slot until `release` is set; `hold(server)`
    sends that request from a thread and returns once the server is working on it."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, request: dict) -> str:
        if "hold" in json.dumps(request):
            self.started.set()
            assert self.release.wait(10), "the test never released the slot"
        return "done"

    def hold(self, server) -> int:
        """Send the holding request; the server's port."""
        self.thread = threading.Thread(target=post, args=(server.base_url, chat("hold")))
        self.thread.start()
        assert self.started.wait(10)
        return int(server.base_url.rsplit(":", 1)[1].split("/")[0])

    def let_go(self) -> None:
        self.release.set()
        self.thread.join(10)


def test_one_slot_queues_the_second_request_without_a_byte_then_serves_it():
    holder = SlotHolder()
    with scripted_server(holder, slots=1) as server:
        port = holder.hold(server)
        queued = raw_request(port, "POST", "/v1/chat/completions", chat("next"))
        assert server.slots.wait_queued(1)
        queued.settimeout(0.2)
        with pytest.raises(TimeoutError):
            queued.recv(1)  # busy, not down: the connection is open and nothing comes
        holder.release.set()
        queued.settimeout(10)
        assert queued.recv(12).startswith(b"HTTP/1.1 200")
        holder.thread.join(10)
        queued.close()
    assert (server.peak_in_flight, server.slots.peak_queued, server.slots.served) == (2, 1, 2)


@pytest.mark.parametrize("queue_models", [True, False])
def test_models_wait_for_the_running_generation_unless_told_not_to(queue_models):
    holder, listing = SlotHolder(), []
    with scripted_server(holder, slots=1, models=["m"], queue_models=queue_models) as server:
        holder.hold(server)
        getter = threading.Thread(target=lambda: listing.append(
            urllib.request.urlopen(f"{server.base_url}/models", timeout=10).status))
        getter.start()
        if queue_models:
            assert server.slots.wait_queued(1) and listing == []
        else:
            getter.join(10)
            assert listing == [200] and server.slots.queued == 0
        holder.let_go()
        getter.join(10)
    assert listing == [200]


def test_a_queued_client_that_hangs_up_leaves_the_queue():
    holder = SlotHolder()
    with scripted_server(holder, slots=1) as server:
        port = holder.hold(server)
        raw_request(port, "POST", "/v1/chat/completions", chat("gone")).close()
        assert server.wait_for_close(1)
        holder.let_go()
        assert post(server.base_url, chat("after"))[0] == 200
    assert server.slots.served == 2 and server.slots.queued == 0


def test_an_api_key_is_required_when_the_server_has_one():
    with scripted_server(["ok"], api_key="k") as server:
        assert post(server.base_url, chat("x"))[0] == 401
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{server.base_url}/models", timeout=10)
        assert info.value.code == 401
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions", data=json.dumps(chat("x")).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
