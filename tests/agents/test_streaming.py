"""Streaming model calls through lcb's streaming client (`lcb.agents.stream`) against the
scripted server: SSE framing, a server that does not stream, the idle timeout, closing
abandoned requests, tool calls and usage from the stream, and why an answer ended
(finish_reason, truncated) in the call record, the transcript, the team's fields and the
feedback optimizers read."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest
from langchain_core.messages import HumanMessage

from lcb.agents import stream
from lcb.agents.llm import ModelCallError, ModelGateway
from lcb.agents.stream import StreamedReply, _Events
from lcb.agents.tools import TOOL_NAME
from lcb.agents.usage import CallRecord, CallTag, UsageLedger
from lcb.optimize.teamrun import CUT_NOTE, feedback_text
from tests.helpers_agents import EchoRunner, fenced, make_problem, model_config, solve_all
from tests.scripted_server import Reply, ToolCall, scripted_server, tool_results
from tests.teams.test_agent_loop import PROGRAM, run_one

TAG = CallTag("P_1", "single", "solver", "solver", 1)


def call_records(server, n_calls: int = 1, **config) -> list[CallRecord]:
    """Make `n_calls` gateway calls in turn against `server`; their call records."""

    async def main() -> list[CallRecord]:
        gateway, ledger = ModelGateway(model_config(server.base_url, **config)), UsageLedger()
        try:
            for _ in range(n_calls):
                with contextlib.suppress(ModelCallError):  # kept in the ledger
                    await gateway.call([HumanMessage("[P_1] go")], tag=TAG, ledger=ledger)
        finally:
            await gateway.aclose()
        return ledger.calls

    return asyncio.run(main())


@pytest.mark.slow
def test_a_slow_stream_that_never_pauses_past_the_idle_timeout_completes():
    steady = Reply(fenced(PROGRAM), chunk_chars=4, chunk_delay_s=0.1)
    with scripted_server([steady]) as server:
        started = time.monotonic()
        agent = run_one(server, timeout_s=0.5, max_retries=0)
        elapsed = time.monotonic() - started
        [request] = server.requests
    n_events = 1 + len(range(0, len(fenced(PROGRAM)), 4)) + 2  # role, pieces, finish, usage
    assert agent.error is None and agent.code == PROGRAM
    assert request.streamed and request.chunks_sent == n_events and not request.client_closed
    assert elapsed >= (n_events - 1) * 0.1 > 3 * 0.5  # three idle timeouts' worth, uncut
    assert agent.transcript()[-1]["call"]["attempts"] == 1


def test_a_stream_gone_silent_times_out_is_closed_and_retried():
    with scripted_server([Reply.stall_mid_stream(30.0, after=2), fenced(PROGRAM)]) as server:
        started = time.monotonic()
        agent = run_one(server, timeout_s=0.5, max_retries=1)
        elapsed = time.monotonic() - started
        assert server.wait_for_close(1)
        first, second = server.requests
    assert agent.error is None and agent.code == PROGRAM
    assert (first.streamed, first.chunks_sent, first.client_closed) == (True, 2, True)
    assert second.chunks_sent > 0 and not second.client_closed
    assert agent.transcript()[-1]["call"]["attempts"] == 2
    assert elapsed < 5  # the stall (30 s) was abandoned, not sat out


def test_a_stream_silent_every_time_fails_with_the_idle_timeout():
    with scripted_server([Reply.stall_mid_stream(30.0)]) as server:
        agent = run_one(server, timeout_s=0.3, max_retries=1)
        assert server.wait_for_close(2)
        n_requests = len(server.requests)
    assert n_requests == 2
    assert agent.error and "2 attempt" in agent.error
    assert "IdleTimeout: no data from the server for 0.3 s" in agent.error


def test_a_cancelled_call_closes_its_connection_so_the_server_stops():
    slow = Reply("x" * 100, chunk_chars=1, chunk_delay_s=0.05)  # 103 events, ~5 s

    async def main(server) -> None:
        gateway = ModelGateway(model_config(server.base_url))
        task = asyncio.create_task(
            gateway.call([HumanMessage("go")], tag=TAG, ledger=UsageLedger()))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await gateway.aclose()

    with scripted_server([slow]) as server:
        asyncio.run(main(server))
        cancelled = time.monotonic()
        assert server.wait_for_close(1, timeout=2.0)
        noticed = time.monotonic() - cancelled
        [request] = server.requests
    assert request.client_closed and 0 < request.chunks_sent < 103
    assert noticed < 1.0


def test_finish_reason_length_marks_the_call_the_transcript_the_fields_and_the_feedback():
    cut = Reply("Let me write it.\n```python\nn = int(input(\n", finish_reason="length")
    with scripted_server([cut]) as server:
        [result], _ = solve_all(server.base_url, [make_problem()])
    [answer] = [e for e in result.transcript if e["type"] == "assistant"]
    assert (answer["finish_reason"], answer["truncated"]) == ("length", True)
    assert answer["call"]["truncated"] is True
    assert result.code is None
    fields = result.fields
    assert (fields["finish_reason"], fields["truncated"], fields["n_truncated_calls"]) == (
        "length", True, 1)
    assert feedback_text(result, None) == (
        "no program: the team's final answer held no complete ```python code block, so "
        "nothing was graded\n" + CUT_NOTE)
    assert CUT_NOTE == "the final answer was cut at the max_tokens limit (finish_reason=length)"


def test_a_cut_earlier_call_is_counted_but_the_submitted_answer_is_not_truncated():
    early = Reply.calls(ToolCall(TOOL_NAME, {"code": "print(1)"}), finish_reason="length")
    with scripted_server([early, fenced(PROGRAM)]) as server:
        [result], _ = solve_all(server.base_url, [make_problem()])
    ends = [(e["finish_reason"], e["truncated"]) for e in result.transcript
            if e["type"] == "assistant"]
    assert ends == [("length", True), ("stop", False)]
    assert result.code == PROGRAM
    assert (result.fields["finish_reason"], result.fields["truncated"],
            result.fields["n_truncated_calls"]) == ("stop", False, 1)
    assert CUT_NOTE not in feedback_text(result, None)


def test_tool_calls_arrive_whole_through_streaming():
    code = 'print("a, b")\nfor i in range(3):\n    print(i, "é")'
    calls = Reply.calls(ToolCall(TOOL_NAME, {"code": code, "stdin": "3\n"}, id="c0"),
                        ToolCall(TOOL_NAME, {"code": "print(2)"}, id="c1"), chunk_chars=1)
    runner = EchoRunner()
    with scripted_server([calls, fenced(PROGRAM)]) as server:
        [result], _ = solve_all(server.base_url, [make_problem()], runner=runner)
        second = server.chat_requests()[1]
    assert [(c[0], c[1]) for c in runner.calls] == [(code, "3\n"), ("print(2)", "")]
    sent_back = second["messages"][2]["tool_calls"]
    assert [c["id"] for c in sent_back] == ["c0", "c1"]
    assert result.code == PROGRAM and result.n_tool_calls == 2


def test_cut_off_tool_arguments_stay_invalid_through_streaming():
    """Joined deltas are parsed strictly: `{"code": "print(1)"` is not repaired into a call."""
    broken = Reply.calls(ToolCall(TOOL_NAME, '{"code": "print(1)"'), chunk_chars=2)
    runner = EchoRunner()
    with scripted_server([broken, fenced(PROGRAM)]) as server:
        [result], _ = solve_all(server.base_url, [make_problem()], runner=runner)
        [reply] = tool_results(server.chat_requests()[1])
    assert runner.calls == []
    assert reply.startswith("error:") and "not valid JSON" in reply
    assert result.transcript[2]["tool_calls"][0]["invalid"] is True


def test_usage_and_reasoning_tokens_are_counted_from_the_stream():
    replies = [Reply("ok", prompt_tokens=11, completion_tokens=7, reasoning_tokens=3),
               Reply("ok", usage=False)]
    with scripted_server(replies) as server:
        first, second = call_records(server, n_calls=2)
        bodies = server.chat_requests()
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True}
               for b in bodies)
    assert (first.prompt_tokens, first.completion_tokens, first.reasoning_tokens) == (11, 7, 3)
    assert (first.finish_reason, first.truncated) == ("stop", False)
    # a server that sent no usage: unknown, never 0 (lcb.agents.usage)
    assert (second.prompt_tokens, second.completion_tokens, second.reasoning_tokens) == (
        None, None, None)


def test_a_stream_that_ends_without_a_finish_reason_is_retried_not_taken_as_an_answer():
    """llama-cpp-python's server ends a stream it interrupts with a bare [DONE]: the part
    that came is no answer."""
    with scripted_server([Reply("```python\nprint(", finish_reason=""), fenced(PROGRAM)]) as server:
        agent = run_one(server, timeout_s=5.0, max_retries=2)
        first, second = server.requests
    assert first.streamed and agent.error is None and agent.code == PROGRAM
    assert agent.transcript()[-1]["call"]["attempts"] == 2


def test_a_server_error_sent_mid_stream_is_retried_like_a_5xx():
    """vLLM reports a crash during generation as an error event inside the stream: no HTTP
    status, but the event's code says 500."""
    chunk = ('{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", '
             '"choices": [{"index": 0, "delta": {"role": "assistant", "content": "x"}, '
             '"finish_reason": null}]}')
    broken = Reply(raw_body=f'data: {chunk}\n\ndata: {{"error": {{"message": "EngineCore '
                            f'encountered an issue", "code": 500}}}}\n\n')
    with scripted_server([broken, fenced(PROGRAM)]) as server:
        agent = run_one(server, timeout_s=5.0, max_retries=2)
    assert len(server.requests) == 2 and agent.error is None and agent.code == PROGRAM


def _chunk(delta: dict, finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                       "choices": [choice]})


def test_sse_framing_crlf_comments_and_data_split_over_lines_are_read():
    """Events may end in CRLF, comments (keep-alives) come between events, and one event's
    data may span several `data:` lines (joined with newlines)."""
    text = fenced(PROGRAM)
    first, last = _chunk({"content": text[:7]}), _chunk({"content": text[7:]}, "stop")
    split = last.replace(', "choices"', '\ndata: , "choices"', 1)  # JSON allows the newline
    raw = f": keep-alive\r\n\r\ndata: {first}\r\n\r\ndata:{split}\n\ndata: [DONE]\n\n"
    with scripted_server([Reply(raw_body=raw)]) as server:
        agent = run_one(server, max_retries=0)
    assert agent.error is None and agent.code == PROGRAM


def test_a_crlf_split_between_two_reads_is_one_line_break():
    """A CR that ends one read and the LF that begins the next are one line break: the
    event they are inside is not cut in two, wherever the bytes were split."""
    text = fenced(PROGRAM)
    first, last = _chunk({"content": text[:7]}), _chunk({"content": text[7:]}, "stop")
    split = last.replace(', "choices"', '\r\ndata: , "choices"', 1)  # one event, two lines
    raw = f"data: {first}\r\n\r\ndata: {split}\r\n\r\ndata: [DONE]\r\n\r\n".encode()
    for cut in range(1, len(raw)):
        reply = StreamedReply()
        events = _Events(reply)
        done = events.feed(raw[:cut]) or events.feed(raw[cut:])
        assert done and "".join(reply.parts) == text, cut
        assert (reply.events, reply.finish_reason) == (2, "stop")


def test_a_complete_response_leaves_its_connection_for_the_next_request():
    """The body's end may come a little after [DONE] (it is read); an error is read whole."""
    late_end = Reply("one", end_delay_s=0.2)
    with scripted_server([late_end, "two", Reply.error(503), "three"]) as server:
        call_records(server, n_calls=3, max_retries=1)
        ports = [request.client_port for request in server.requests]
    assert len(ports) == 4 and len(set(ports)) == 1  # one connection: streams and an error


def test_a_body_left_open_after_done_keeps_the_answer_and_drops_the_connection(monkeypatch):
    monkeypatch.setattr(stream, "_END_S", 0.05)
    with scripted_server([Reply("one", end_delay_s=30.0), "two"]) as server:
        started = time.monotonic()
        first, second = call_records(server, n_calls=2)
        elapsed = time.monotonic() - started
        assert server.wait_for_close(1)
        held, fresh = server.requests
    assert (first.error, first.attempts, second.error) == (None, 1, None)
    assert held.client_closed and not fresh.client_closed
    assert held.client_port != fresh.client_port and elapsed < 5


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
def test_requests_go_through_the_proxy_the_environment_names(monkeypatch, tmp_path, variable):
    """`HTTP_PROXY`, else `ALL_PROXY`, is honoured (as curl and httpx do): the scripted server,
    named as the proxy, gets the request for a host that does not exist, in a proxy's
    absolute form. A `~/.netrc` with a default login is not read (it would clash with the
    API key's Authorization header)."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("default login someone password secret\n")
    monkeypatch.setenv("NETRC", str(netrc))
    with scripted_server(["OK"]) as proxy:
        monkeypatch.setenv(variable, proxy.base_url.removesuffix("/v1"))
        [record] = call_records(FakeUrl("http://lcb-via-proxy.invalid/v1"), max_retries=0)
        [request] = proxy.requests
    assert request.path == "http://lcb-via-proxy.invalid/v1/chat/completions"
    assert "HTTP 404" in record.error  # the scripted server is no proxy: it has no such route


def test_a_socks_proxy_is_refused_naming_it(monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:9")
    [record] = call_records(FakeUrl("http://lcb-via-proxy.invalid/v1"), max_retries=0)
    assert "socks5://127.0.0.1:9" in record.error and "HTTP(S) proxies only" in record.error


class FakeUrl:
    """A server stand-in for `call_records`: just a base URL."""

    def __init__(self, base_url: str):
        self.base_url = base_url


def test_an_event_that_is_not_json_is_retried_like_a_cut_stream():
    broken = Reply(raw_body=f"data: {_chunk({'content': 'x'})}\n\ndata: {{not json\n\n")
    with scripted_server([broken, fenced(PROGRAM)]) as server:
        agent = run_one(server, max_retries=1)
        first, second = server.requests
    assert first.streamed and second.streamed
    assert agent.error is None and agent.code == PROGRAM
    assert agent.transcript()[-1]["call"]["attempts"] == 2


def test_an_event_that_is_not_json_every_time_names_the_cause():
    broken = Reply(raw_body="data: [1, 2]\n\n")
    with scripted_server([broken]) as server:
        agent = run_one(server, max_retries=1)
    assert agent.error and "BadEvent" in agent.error and "a JSON list, not an object" in agent.error


def test_a_server_that_does_not_stream_is_read_as_one_whole_reply():
    whole = Reply(fenced(PROGRAM), whole=True, prompt_tokens=13, completion_tokens=5)
    with scripted_server([whole]) as server:
        [record] = call_records(server)
        [request] = server.requests
    assert not request.streamed and request.status == 200
    assert (record.prompt_tokens, record.completion_tokens) == (13, 5)
    assert record.finish_reason == "stop" and record.attempts == 1


def test_llama_cpp_error_field_is_the_servers_error_and_a_400_is_not_retried():
    """llama.cpp's server sends a failure as an `error:` field, then `data: [DONE]`."""
    error = ('{"code": 400, "message": "the request exceeds the available context size", '
             '"type": "exceed_context_size_error"}')
    refused = Reply(raw_body=f"error: {error}\n\ndata: [DONE]\n\n")
    with scripted_server([refused, fenced(PROGRAM)]) as server:
        agent = run_one(server, max_retries=2)
        n_requests = len(server.requests)
    assert n_requests == 1
    assert agent.error and "HTTP 400: the request exceeds the available context size" in agent.error


def test_an_error_event_by_type_is_the_servers_error_and_retried_like_a_5xx():
    crashed = Reply(raw_body='event: error\ndata: {"message": "engine died"}\n\n')
    with scripted_server([crashed, fenced(PROGRAM)]) as server:
        agent = run_one(server, max_retries=1)
        n_requests = len(server.requests)
    assert n_requests == 2 and agent.error is None and agent.code == PROGRAM
    with scripted_server([crashed]) as server:
        agent = run_one(server, max_retries=0)
    assert agent.error and "HTTP 500: engine died" in agent.error


def test_tool_call_deltas_without_a_usable_index_are_kept_apart_by_id():
    def delta(call_id, name, args, index="absent"):
        item = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        return item if index == "absent" else {**item, "index": index}

    reply = StreamedReply()
    for part in ([delta("a", "python_exec", '{"code": ', index=None)],
                 [delta(None, "", '"1"}', index=None)],
                 [delta("b", "python_exec", '{"code": "2"}')],  # a second whole call, no index
                 [delta(None, "", "", index=None)]):
        reply.take({"choices": [{"index": 0, "delta": {"tool_calls": part}}]})
    calls = reply.message().tool_calls
    assert [(c["id"], c["args"]) for c in calls] == [("a", {"code": "1"}), ("b", {"code": "2"})]


def test_a_body_held_open_after_done_is_no_idle_timeout_even_with_a_short_one():
    held = Reply(fenced(PROGRAM), end_delay_s=0.8)
    with scripted_server([held]) as server:
        [record] = call_records(server, timeout_s=0.3, max_retries=0)
    assert record.error is None and record.attempts == 1
