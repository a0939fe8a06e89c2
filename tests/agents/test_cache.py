"""The response cache: a cached rerun makes no model call and writes the same records, a replay
runs with no endpoint at all and names each miss, the key's ingredients, errors never
stored, several cache files in one directory, and the `--cache` / `--replay` flags."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from typer.testing import CliRunner

from lcb.agents.cache import CachedReply, CacheError, ResponseCache, cache_key, check_cache
from lcb.agents.llm import CacheMiss, ModelCallError, ModelGateway
from lcb.agents.tools import TOOL_NAME
from lcb.agents.usage import CallTag, UsageLedger
from lcb.cli import app
from lcb.optimize import methods
from lcb.optimize.job import run_job
from lcb.runs.records import read_records
from lcb.runs.rundir import read_transcript
from lcb.runs.runner import run_batch
from tests.helpers_optimize import Probe, TeamModel, job_config, sample_problems
from tests.helpers_runner import (
    MODEL,
    RIGHT,
    WRONG,
    marker,
    model_config,
    problem_ids,
    run_config,
    script,
    write_problems,
)
from tests.scripted_server import Reply, ToolCall, message_text, scripted_fixture  # noqa: F401

TAG = CallTag("P_1", "single", "solver", "solver", 1)
TIMING = ("latency_s", "grade_wall_s", "grade_cpu_s")  # the record fields a rerun may change


def run(config) -> dict:
    return asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))


def model_calls(server) -> list[dict]:
    """The chat requests of problems (the endpoint check's probe carries no marker)."""
    return [body for body in server.chat_requests() if "[[" in message_text(body)]


def untimed(path: Path) -> list[dict]:
    records = sorted(read_records(path), key=lambda r: (r["id"], r["sample"]))
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


def messages(out: Path, qid: str, sample: int = 0) -> list[dict]:
    folder = out / "transcripts" / (f"sample_{sample}" if sample else "")
    return read_transcript(folder / f"{qid}.json.gz")["messages"]


def batch(scripted, tmp_path: Path, ids: list[str]):
    answers = {ids[0]: [Reply.calls(ToolCall(TOOL_NAME, {"code": "print(3)"})), RIGHT],
               ids[1]: [RIGHT], ids[2]: [WRONG]}
    data = write_problems(tmp_path / "rows.jsonl", ids)
    return data, scripted(script(answers))


def test_a_second_run_with_the_cache_calls_no_model_and_writes_the_same_records(
        scripted, tmp_path):
    ids = problem_ids(3)
    data, server = batch(scripted, tmp_path, ids)
    cache = tmp_path / "cache"
    first = run(run_config(server.base_url, data, tmp_path / "one", cache=cache, samples=2))
    sent = len(model_calls(server))
    second = run(run_config(server.base_url, data, tmp_path / "two", cache=cache, samples=2))
    assert sent == 7  # 3 problems x 2 samples, and a tool-call turn before q000's first answer
    assert len(model_calls(server)) == sent  # nothing more
    assert untimed(tmp_path / "one" / "predictions.jsonl") == untimed(
        tmp_path / "two" / "predictions.jsonl")
    assert (first["solved"], second["solved"]) == (4, 4)
    assert (first["prompt_tokens"], first["n_llm_calls"]) == (
        second["prompt_tokens"], second["n_llm_calls"])
    for qid in ids:
        for sample in (0, 1):
            old, new = messages(tmp_path / "one", qid, sample), messages(
                tmp_path / "two", qid, sample)
            calls = [(o["call"]["cached"], n["call"]["cached"], n["call"]["attempts"])
                     for o, n in zip(old, new, strict=True) if o["type"] == "assistant"]
            assert calls and set(calls) == {(False, True, 0)}
            drop = [{k: v for k, v in e.items() if k != "call"} for e in old]
            assert drop == [{k: v for k, v in e.items() if k != "call"} for e in new]
    [db] = cache.glob("*.sqlite")
    assert sqlite3.connect(db).execute("SELECT count(*) FROM replies").fetchone() == (7,)


def test_replay_needs_no_endpoint_and_a_miss_fails_its_problem_by_name(scripted, tmp_path):
    ids = problem_ids(3)
    data, server = batch(scripted, tmp_path, ids)
    cache = tmp_path / "cache"
    run(run_config(server.base_url, data, tmp_path / "one", cache=cache))
    more = write_problems(tmp_path / "more.jsonl", [*ids, "q999"])
    nowhere = "http://127.0.0.1:9/v1"  # nothing listens: any request would fail
    summary = run(run_config(nowhere, more, tmp_path / "two", cache=cache, replay=True,
                             max_consecutive_errors=0))
    records = {r["id"]: r for r in read_records(tmp_path / "two" / "predictions.jsonl")}
    assert records["q999"]["error"] == (
        "not in the cache (--replay sends no request): no stored reply for problem q999, "
        "role solver (agent solver), turn 1, sample 0, purpose batch")
    assert (records["q999"]["em"], records["q999"]["n_llm_calls"]) == (0, 0)
    assert [records[q]["error"] for q in ids] == [None] * 3
    assert summary["solved"] == 2
    assert untimed(tmp_path / "one" / "predictions.jsonl") == [
        r for r in untimed(tmp_path / "two" / "predictions.jsonl") if r["id"] != "q999"]


def test_replay_and_cache_directories_that_cannot_serve_are_refused(tmp_path):
    with pytest.raises(CacheError, match="name it with --cache DIR"):
        check_cache(None, replay=True)
    with pytest.raises(CacheError, match="does not exist"):
        check_cache(tmp_path / "none", replay=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CacheError, match=r"holds no cache file \(\*\.sqlite\)"):
        check_cache(tmp_path / "empty", replay=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(CacheError, match="cannot be made"):
        check_cache(tmp_path / "file" / "cache", replay=False)


def test_the_run_flags_refuse_a_replay_without_a_usable_cache(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    env = {"VLLM_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_ID": MODEL}
    (tmp_path / "empty").mkdir()
    for extra, message in ((["--replay"], "--replay runs from the cache alone: name it with "
                                          "--cache DIR"),
                           (["--replay", "--cache", str(tmp_path / "empty")],
                            "holds no cache file")):
        result = CliRunner().invoke(app, ["run", "--data", str(data), "--out-dir",
                                          str(tmp_path / "out"), *extra], env=env)
        assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out").exists()


BASE = dict(model_id="m", messages=[SystemMessage("s"), HumanMessage("q")],
            tools=[{"type": "function", "function": {"name": "t", "parameters": {}}}],
            sampling={"temperature": 0.2, "top_p": 0.9, "max_tokens": 64,
                      "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
            seed=1, sample=0, purpose="batch", agent="solver")
CHANGES = {
    "model_id": "m2",
    "messages": [SystemMessage("s"), HumanMessage("q2")],
    "tools": [{"type": "function", "function": {"name": "t", "parameters": {"x": 1}}}],
    "seed": 2, "sample": 1, "purpose": "validate", "agent": "coder_1",
}
SAMPLING = {"temperature": 0.7, "top_p": 0.5, "max_tokens": 65,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}


def test_the_key_changes_with_each_of_its_inputs():
    base = cache_key(**BASE)
    keys = [cache_key(**{**BASE, name: value}) for name, value in CHANGES.items()]
    keys += [cache_key(**{**BASE, "sampling": {**BASE["sampling"], name: value}})
             for name, value in SAMPLING.items()]
    keys.append(cache_key(**{**BASE, "messages": [*BASE["messages"], AIMessage("a")]}))
    keys.append(cache_key(**{**BASE, "seed": None}))
    assert len(set(keys)) == len(keys) == 13 and base not in keys
    assert base == cache_key(**BASE) and len(base) == 64


def test_the_key_holds_the_sampling_sent_but_not_the_url_or_the_key():
    def key(config) -> str:
        gateway = ModelGateway(config)
        return gateway.cache_key([HumanMessage("q")], (), tag=TAG, seed=3, sample=0,
                                 purpose="batch")

    config = model_config("http://a:1/v1")
    same = [replace(config, base_url="http://b:2/v1,http://c:3/v1", api_key="sk-x"),
            replace(config, timeout_s=99.0, max_retries=0, max_concurrent_requests=2)]
    differ = [replace(config, temperature=0.0), replace(config, top_p=0.5),
              replace(config, max_tokens=7), replace(config, thinking=True),
              replace(config, vllm_extras=False), replace(config, model_id="other")]
    assert {key(c) for c in same} == {key(config)}
    assert len({key(c) for c in differ} | {key(config)}) == 1 + len(differ)


def gateway_call(server_url: str, cache: ResponseCache, ledger: UsageLedger, **config):
    async def main() -> str:
        gateway = ModelGateway(model_config(server_url, **config), cache=cache)
        try:
            return (await gateway.call([HumanMessage("q")], tag=TAG, ledger=ledger)).text
        finally:
            await gateway.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("status", [500, 400])
def test_an_error_is_never_cached(scripted, tmp_path, status):
    server = scripted([Reply.error(status), Reply("fine", prompt_tokens=9,
                                                  completion_tokens=4)])
    cache, ledger = ResponseCache(tmp_path / "cache"), UsageLedger()
    with pytest.raises(ModelCallError, match=f"HTTP {status}"):
        gateway_call(server.base_url, cache, ledger, max_retries=0)
    assert (cache.stored, cache.hits) == (0, 0)
    assert gateway_call(server.base_url, cache, ledger, max_retries=0) == "fine"
    assert gateway_call(server.base_url, cache, ledger, max_retries=0) == "fine"
    assert len(server.chat_requests()) == 2 and (cache.stored, cache.hits) == (1, 1)
    failed, answered, hit = ledger.calls
    assert failed.error and not failed.cached
    assert (answered.prompt_tokens, answered.completion_tokens, answered.cached) == (9, 4, False)
    assert (hit.prompt_tokens, hit.completion_tokens, hit.cached, hit.attempts) == (
        9, 4, True, 0)
    assert ledger.total().n_llm_calls == 2 and ledger.total().n_retries == 0


def test_a_replay_miss_sends_nothing_and_names_the_call(tmp_path):
    (tmp_path / "cache").mkdir()
    cache, ledger = ResponseCache(tmp_path / "cache", replay=True), UsageLedger()
    with pytest.raises(CacheMiss) as caught:
        gateway_call("http://127.0.0.1:9/v1", cache, ledger)
    assert str(caught.value).endswith("problem P_1, role solver (agent solver), turn 1, "
                                      "sample 0, purpose batch")
    assert caught.value.attempts == 0 and not caught.value.bad_request
    [record] = ledger.calls
    assert (record.attempts, record.error) == (0, str(caught.value))
    assert not list((tmp_path / "cache").iterdir())  # a replay writes no file


def test_every_file_in_the_directory_is_read_and_each_process_writes_its_own(tmp_path):
    reply = CachedReply(content="a", tool_calls=[{"name": "t", "args": {"x": 1}, "id": "c",
                                                  "type": "tool_call"}],
                        usage={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                        metadata={"finish_reason": "tool_calls"})
    mine, other = ResponseCache(tmp_path), ResponseCache(tmp_path)
    other.own = tmp_path / "other-host-1.sqlite"
    assert mine.get("k1") is None  # a miss before the other file exists
    other.put("k1", reply, model="m", purpose="batch")
    mine.put("k2", CachedReply(content="b"), model="m", purpose="batch")
    other.put("k2", CachedReply(content="not mine"), model="m", purpose="batch")
    assert mine.get("k1") == reply  # found in the file made after the first look
    assert mine.get("k2").content == "b"  # the own file first
    assert sorted(p.name for p in tmp_path.glob("*.sqlite")) == sorted(
        [mine.own.name, "other-host-1.sqlite"])
    assert json.loads(json.dumps(reply.message().tool_calls)) == reply.tool_calls
    mine.close()
    mine.close()
    assert mine.get("k1") == reply  # opens again after a close
    modes = {sqlite3.connect(p).execute("PRAGMA journal_mode").fetchone()[0]
             for p in tmp_path.glob("*.sqlite")}
    assert modes == {"wal"}


def test_concurrent_calls_share_one_cache(scripted, tmp_path):
    server = scripted(lambda body: f"answer to {message_text(body)}")

    async def main(cache: ResponseCache) -> list[str]:
        gateway = ModelGateway(model_config(server.base_url), cache=cache)
        try:
            calls = [gateway.call([HumanMessage(f"[[q{i}]]")], tag=TAG, ledger=UsageLedger())
                     for i in range(20)]
            return [m.text for m in await asyncio.gather(*calls)]
        finally:
            await gateway.aclose()

    cache = ResponseCache(tmp_path)
    first = asyncio.run(main(cache))
    again = asyncio.run(main(cache))
    assert first == again == [f"answer to [[q{i}]]" for i in range(20)]
    assert (len(server.chat_requests()), cache.stored, cache.hits) == (20, 20, 20)
    assert marker("q1") == "[[q1]]"


def test_lcb_run_fills_the_cache_and_replays_it_with_no_endpoint(scripted, tmp_path):
    ids = problem_ids(3)
    data, server = batch(scripted, tmp_path, ids)
    cache = tmp_path / "cache"

    def lcb_run(out: str, url: str, *extra: str):
        env = {"VLLM_BASE_URL": url, "MODEL_ID": MODEL}
        argv = ["run", "--data", str(data), "--out-dir", str(tmp_path / out),
                "--cache", str(cache), *extra]
        return CliRunner().invoke(app, argv, env=env)

    filled = lcb_run("one", server.base_url)
    replayed = lcb_run("two", "http://127.0.0.1:9/v1", "--replay")
    assert (filled.exit_code, replayed.exit_code) == (0, 0), replayed.output
    assert untimed(tmp_path / "one" / "predictions.jsonl") == untimed(
        tmp_path / "two" / "predictions.jsonl")
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert (manifest["config"]["cache"], manifest["config"]["replay"]) == (str(cache), True)
    assert "--replay" in manifest["sessions"][0]["command"]


@pytest.mark.slow
def test_an_optimizer_job_caches_each_phase_under_its_purpose_and_replays(
        scripted, tmp_path, monkeypatch):
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", lambda: Probe(passes=1))
    server = scripted(TeamModel(sample_problems()))
    cache = tmp_path / "cache"
    first = asyncio.run(run_job(job_config(server.base_url, tmp_path / "one", method="probe",
                                           budget=2, cache=cache)))
    [db] = cache.glob("*.sqlite")
    purposes = sqlite3.connect(db).execute(
        "SELECT purpose, count(*) FROM replies GROUP BY purpose ORDER BY purpose").fetchall()
    assert [purpose for purpose, _ in purposes] == ["optimize", "test", "validate"]
    sent = len(server.chat_requests())
    second = asyncio.run(run_job(job_config("http://127.0.0.1:9/v1", tmp_path / "two",
                                            method="probe", budget=2, cache=cache,
                                            replay=True)))
    assert len(server.chat_requests()) == sent
    assert (second["result"], second["selection"]) == (first["result"], first["selection"])
    assert (tmp_path / "one" / "result.json").read_text() == (
        tmp_path / "two" / "result.json").read_text()


def test_a_foreign_file_is_skipped_and_a_failed_store_keeps_the_answer(tmp_path, caplog):
    (tmp_path / "junk.sqlite").write_text("not a database")
    cache = ResponseCache(tmp_path)
    cache.put("k", CachedReply(content="a"), model="m", purpose="batch")
    assert cache.get("k").content == "a" and cache.get("other") is None
    blocked = ResponseCache(tmp_path / "blocked")
    (tmp_path / "blocked").mkdir()
    blocked.own.mkdir()  # where its file would go: it cannot be made
    with caplog.at_level("WARNING", logger="lcb.cache"):
        for _ in range(2):
            blocked.put("k", CachedReply(content="a"), model="m", purpose="batch")
    assert (blocked.stored, blocked.write_errors) == (0, 2)
    [warning] = caplog.records
    assert "cannot store a reply" in warning.getMessage()
