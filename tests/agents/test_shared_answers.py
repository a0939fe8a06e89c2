"""Answers runs share (`lcb.agents.shared`): the writing view stores the answers of the try
that became the rollout and never takes one, a reading view takes what is stored under its
scope and sends the rest, a view that only reuses sends nothing, a request that fails still
counts as sent, and the response cache (`--cache`) never makes a call count as reused."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage

from lcb.agents.cache import ResponseCache
from lcb.agents.llm import CacheMiss, ModelCallError, ModelGateway
from lcb.agents.shared import SharedAnswers
from lcb.agents.usage import CallTag, UsageLedger
from tests.helpers_agents import model_config
from tests.scripted_server import Reply, scripted_fixture  # noqa: F401

TAG = CallTag("p1", "sequential", "coder", "coder", 0)


def ask(gateway, text, shared):
    return gateway.call([HumanMessage(text)], tag=TAG, ledger=UsageLedger(), seed=5,
                        shared=shared)


def views(store, config):
    def view(scope="row-1", **kind):
        return SharedAnswers(store, scope=scope, model=config.model_id, purpose="optimize",
                             **kind)
    return view


def run(server, tmp_path, steps, cache=None):
    config = model_config(server.base_url, max_retries=0)
    view = views(ResponseCache(tmp_path / "store"), config)

    async def main():
        gateway = ModelGateway(config, cache=cache, purpose="optimize")
        try:
            return await steps(gateway, view)
        finally:
            await gateway.aclose()

    return asyncio.run(main())


def test_the_whole_teams_answers_serve_the_same_requests_only(scripted, tmp_path):
    server = scripted(["lost try", "first", "second", "third"])

    async def steps(gateway, view):
        whole = view(writes=True)
        await ask(gateway, "A", whole)
        whole.begin_try()  # infrastructure lost that try: its answer is not the rollout's
        asked = [await ask(gateway, "A", whole), await ask(gateway, "A", whole)]
        early = view(writes=False, only_reuse=True)
        with pytest.raises(CacheMiss):  # nothing is stored before the rollout ends
            await ask(gateway, "A", early)
        whole.commit()
        reader, strict, elsewhere = (view(writes=False), view(writes=False, only_reuse=True),
                                     view("row-2", writes=False, only_reuse=True))
        taken, other = await ask(gateway, "A", reader), await ask(gateway, "B", reader)
        with pytest.raises(CacheMiss):
            await ask(gateway, "C", strict)
        with pytest.raises(CacheMiss):  # another row or iteration: another scope
            await ask(gateway, "A", elsewhere)
        kept = await ask(gateway, "A", strict)
        return whole, reader, strict, asked, taken, other, kept

    whole, reader, strict, asked, taken, other, kept = run(server, tmp_path, steps)
    # the writer sends every call, never taking one; the latest answer of a request is stored
    assert [m.content for m in asked] == ["first", "second"] and whole.fresh == 3
    assert (taken.content, taken.response_metadata["lcb"]["cached"]) == ("second", True)
    assert other.content == "third" and (reader.reused, reader.fresh) == (1, 1)
    assert not reader.sent_nothing and reader.reused_usage["calls"] == 1
    assert kept.content == "second" and strict.missed and strict.sent_nothing
    assert len(server.chat_requests()) == 4  # "C" and the early, elsewhere "A" never sent


def test_a_request_that_failed_counts_as_sent(scripted, tmp_path):
    # a coalition whose call went out and failed has cost the server a request: charged
    server = scripted([Reply.error(500)])

    async def steps(gateway, view):
        reader = view(writes=False)
        with pytest.raises(ModelCallError):
            await ask(gateway, "A", reader)
        return reader

    reader = run(server, tmp_path, steps)
    assert (reader.fresh, reader.sent_nothing) == (1, False)


def test_a_response_cache_hit_is_a_fresh_call_for_the_shared_view(scripted, tmp_path):
    # what a coalition costs must not depend on whether `--cache` holds the answers
    server = scripted(["stored"])
    cache = ResponseCache(tmp_path / "cache")

    async def steps(gateway, view):
        await ask(gateway, "A", None)  # fills the response cache
        reader = view(writes=False)
        return reader, await ask(gateway, "A", reader)

    reader, answer = run(server, tmp_path, steps, cache=cache)
    assert answer.content == "stored" and len(server.chat_requests()) == 1
    assert (reader.reused, reader.fresh, reader.sent_nothing) == (0, 1, False)
    with pytest.raises(ValueError, match="cannot be the one that writes"):
        SharedAnswers(cache, scope="s", writes=True, only_reuse=True, model="m", purpose="p")
