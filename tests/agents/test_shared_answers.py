"""Answers runs share (`lcb.agents.shared`): the writing view stores and never takes, a reading
view takes what is stored and sends the rest, a view that only reuses sends nothing, and the
response cache (`--cache`) never makes a call count as reused."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage

from lcb.agents.cache import ResponseCache
from lcb.agents.llm import CacheMiss, ModelGateway
from lcb.agents.shared import SharedAnswers
from lcb.agents.usage import CallTag, UsageLedger
from tests.helpers_agents import model_config
from tests.scripted_server import scripted_fixture  # noqa: F401

TAG = CallTag("p1", "sequential", "coder", "coder", 0)


def ask(gateway, text, shared):
    return gateway.call([HumanMessage(text)], tag=TAG, ledger=UsageLedger(), seed=5,
                        shared=shared)


def views(store, config):
    def view(**kind):
        return SharedAnswers(store, model=config.model_id, purpose="optimize", **kind)
    return view


def test_the_whole_teams_answers_serve_the_same_requests_only(scripted, tmp_path):
    server = scripted(["first", "second", "third"])
    config = model_config(server.base_url)
    view = views(ResponseCache(tmp_path / "store"), config)

    async def main():
        gateway = ModelGateway(config, purpose="optimize")
        try:
            whole, reader, strict = view(writes=True), view(writes=False), \
                view(writes=False, only_reuse=True)
            asked = [await ask(gateway, "A", whole), await ask(gateway, "A", whole)]
            taken = await ask(gateway, "A", reader)
            other = await ask(gateway, "B", reader)
            with pytest.raises(CacheMiss):
                await ask(gateway, "C", strict)
            kept = await ask(gateway, "A", strict)
            return whole, reader, strict, asked, taken, other, kept
        finally:
            await gateway.aclose()

    whole, reader, strict, asked, taken, other, kept = asyncio.run(main())
    # the writer sends every call (never taking, even its own stored answer), stores the first
    assert [m.content for m in asked] == ["first", "second"] and whole.fresh == 2
    assert (taken.content, taken.response_metadata["lcb"]["cached"]) == ("first", True)
    assert other.content == "third" and (reader.reused, reader.fresh) == (1, 1)
    assert not reader.sent_nothing and reader.reused_usage["calls"] == 1
    assert kept.content == "first" and strict.missed and strict.sent_nothing
    assert len(server.chat_requests()) == 3  # "C" was never sent


def test_a_response_cache_hit_is_a_fresh_call_for_the_shared_view(scripted, tmp_path):
    # what a coalition costs must not depend on whether `--cache` holds the answers
    server = scripted(["stored"])
    config = model_config(server.base_url)
    cache = ResponseCache(tmp_path / "cache")
    view = views(ResponseCache(tmp_path / "store"), config)

    async def main():
        gateway = ModelGateway(config, cache=cache, purpose="optimize")
        try:
            await ask(gateway, "A", None)  # fills the response cache
            reader = view(writes=False)
            answer = await ask(gateway, "A", reader)
            return reader, answer
        finally:
            await gateway.aclose()

    reader, answer = asyncio.run(main())
    assert answer.content == "stored" and len(server.chat_requests()) == 1
    assert (reader.reused, reader.fresh, reader.sent_nothing) == (0, 1, False)
    with pytest.raises(ValueError, match="cannot be the one that writes"):
        view(writes=True, only_reuse=True)
