"""Unknown is not zero: a server that reports no usage gives null tokens, counted as
`n_calls_without_usage`, in call records, team results, records, summaries, the optimizer's
ledger and the console; the one summing rule (`lcb.agents.usage`) over all known, some
unknown, all unknown and old records without the key."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace

import pytest
from langchain_core.messages import HumanMessage
from typer.testing import CliRunner

from lcb.agents.cache import ResponseCache
from lcb.agents.llm import ModelGateway
from lcb.agents.usage import CallRecord, CallTag, UsageLedger, sum_usage, token_total
from lcb.cli import app
from lcb.optimize.budget import BudgetLedger, InfraFailure
from lcb.runs.progress import BatchProgress
from lcb.runs.records import summarize
from tests.helpers_runner import (
    MODEL,
    RIGHT,
    model_config,
    problem_ids,
    read_lines,
    script,
    write_problems,
)
from tests.scripted_server import Reply, scripted_fixture  # noqa: F401

TAG = CallTag("P_1", "single", "solver", "solver", 1)
KNOWN = {"prompt_tokens": 11, "completion_tokens": 7}


# --- the rule ------------------------------------------------------------------------------
def record(prompt, completion, *, calls=1, without=None) -> dict:
    """A record as `lcb run` writes it; `without` None leaves the key out (an old record)."""
    row = {"id": "p", "em": 0, "prompt_tokens": prompt,
           "completion_tokens": completion, "n_llm_calls": calls}
    return row if without is None else {**row, "n_calls_without_usage": without}


@pytest.mark.parametrize("rows, expected", [
    pytest.param([record(10, 2, without=0), record(5, 1, calls=2, without=0)],
                 (3, 15, 3, 0), id="all-known"),
    pytest.param([record(10, 2, without=0), record(None, None, without=1),
                  record(4, 1, calls=2, without=1)], (4, 14, 3, 2), id="some-unknown"),
    pytest.param([record(None, None, without=1), record(None, None, calls=2, without=2)],
                 (3, None, None, 3), id="all-unknown"),
    pytest.param([record(10, 2), record(5, 1, calls=0)], (1, 15, 3, 0), id="old-records"),
    pytest.param([record(10, 2), record(None, None, without=1)], (2, 10, 2, 1),
                 id="old-and-new"),
    pytest.param([], (0, 0, 0, 0), id="nothing"),
])
def test_summing_rule_over_records(rows, expected):
    got = sum_usage(rows)
    assert (got["n_llm_calls"], got["prompt_tokens"], got["completion_tokens"],
            got["n_calls_without_usage"]) == expected
    summary = summarize(rows, unique=False)
    assert {k: summary[k] for k in got} == got  # the summary applies the same rule


def test_token_total_is_none_only_when_every_answered_call_is_unknown():
    assert token_total(0, calls=0, without_usage=0) == 0  # no call: nothing spent
    assert token_total(30, calls=3, without_usage=2) == 30  # a lower bound, not a pretence
    assert token_total(0, calls=3, without_usage=3) is None


def test_the_ledger_counts_unknown_calls_apart_and_a_failed_call_as_known_zero():
    ledger = UsageLedger()
    ledger.add_call(CallRecord(TAG, None, None, 1, 0.1, None))  # answered, no usage
    ledger.add_call(CallRecord(TAG, 0, 0, 3, 0.1, None, error="HTTP 503"))  # failed
    alone = ledger.total().to_record()
    assert (alone["prompt_tokens"], alone["n_llm_calls"], alone["n_calls_without_usage"]) == (
        None, 1, 1)
    ledger.add_call(CallRecord(replace(TAG, role="critic", agent="critic"), 20, 4, 1, 0.1, None))
    total = ledger.total().to_record()
    assert (total["prompt_tokens"], total["completion_tokens"], total["n_llm_calls"],
            total["n_calls_without_usage"]) == (20, 4, 2, 1)
    by_role = ledger.by_role()
    assert by_role["solver"]["prompt_tokens"] is None
    assert sum_usage(by_role.values()) == {k: total[k] for k in sum_usage([])}


# --- the model call and the cache ----------------------------------------------------------
def test_a_reply_without_usage_is_recorded_unknown_and_a_cache_hit_keeps_it(scripted,
                                                                            tmp_path):
    server = scripted([Reply("ok", usage=False)])
    cache, ledger = ResponseCache(tmp_path / "cache"), UsageLedger()

    async def twice() -> None:
        gateway = ModelGateway(model_config(server.base_url), cache=cache)
        try:
            for _ in range(2):
                await gateway.call([HumanMessage("q")], tag=TAG, ledger=ledger)
        finally:
            await gateway.aclose()

    asyncio.run(twice())
    cache.close()
    answered, hit = ledger.calls
    assert len(server.chat_requests()) == 1 and hit.cached
    assert (answered.prompt_tokens, answered.completion_tokens) == (None, None)
    assert (hit.prompt_tokens, hit.completion_tokens) == (None, None)  # not 0 on the way back
    assert ledger.total().to_record()["n_calls_without_usage"] == 2


# --- a real batch ------------------------------------------------------------------------------
def lcb_run(server, tmp_path, name: str, ids: list[str]):
    data = write_problems(tmp_path / f"{name}.jsonl", ids)
    out = tmp_path / name
    env = {"VLLM_BASE_URL": server.base_url, "MODEL_ID": MODEL}
    result = CliRunner().invoke(app, ["run", "--data", str(data), "--out-dir", str(out)],
                                env=env)
    assert result.exit_code == 0, result.output
    records = {r["id"]: r for r in read_lines(out / "predictions.jsonl")}
    return records, json.loads((out / "summary.json").read_text()), result.output


def test_a_batch_against_a_server_without_usage_says_unknown_never_zero(scripted, tmp_path):
    ids = problem_ids(3)
    server = scripted(script({ids[0]: [Reply(RIGHT, usage=False)],
                              ids[1]: [Reply(RIGHT, **KNOWN)],
                              ids[2]: [Reply(RIGHT, usage=False)]}))
    records, summary, printed = lcb_run(server, tmp_path, "mixed", ids[:2])
    unknown, known = records[ids[0]], records[ids[1]]
    assert (unknown["prompt_tokens"], unknown["completion_tokens"], unknown["n_llm_calls"],
            unknown["n_calls_without_usage"]) == (None, None, 1, 1)
    assert (known["prompt_tokens"], known["completion_tokens"],
            known["n_calls_without_usage"]) == (11, 7, 0)
    assert (summary["prompt_tokens"], summary["completion_tokens"], summary["n_llm_calls"],
            summary["n_calls_without_usage"]) == (11, 7, 2, 1)
    assert "prompt tokens 11 + unknown" in printed and "calls without usage 1" in printed

    records, summary, printed = lcb_run(server, tmp_path, "blind", ids[2:])
    assert (summary["prompt_tokens"], summary["completion_tokens"],
            summary["n_calls_without_usage"]) == (None, None, 1)
    assert "prompt tokens unknown" in printed and "completion tokens unknown" in printed
    assert "1/1  pass@1 1.000  errors 0  tokens unknown" in printed  # the progress line


def test_progress_says_unknown_tokens():
    stream = io.StringIO()
    with BatchProgress(total=2, stream=stream, plain=True, interval_s=0.0) as progress:
        progress.update(record(None, None, without=1))
        progress.update(record(900, 200, without=0))
    first, second, third = stream.getvalue().splitlines()
    assert "tokens 0" in first  # nothing done yet: nothing spent
    assert "tokens unknown" in second and "tokens 1.1k + unknown" in third


# --- the optimizer's ledger ----------------------------------------------------------------
def test_the_budget_ledger_keeps_unknown_uncharged_and_failed_tokens_through_its_state():
    ledger = BudgetLedger(10)
    ledger.record_uncharged("reflect", prompt_tokens=None, completion_tokens=None,
                            n_calls_without_usage=1)
    ledger.record_uncharged("judge", prompt_tokens=None, completion_tokens=None,
                            n_calls_without_usage=1)
    ledger.record_uncharged("judge", prompt_tokens=30, completion_tokens=3)

    def down():
        raise InfraFailure("HTTP 503", usage={"prompt_tokens": None, "completion_tokens": None,
                                              "n_llm_calls": 1, "n_calls_without_usage": 1})

    ledger.run_rollout(down)
    state = json.loads(json.dumps(ledger.state()))
    assert state["uncharged"]["reflect"] == {"calls": 1, "prompt_tokens": None,
                                             "completion_tokens": None,
                                             "n_calls_without_usage": 1}
    assert state["uncharged"]["judge"] == {"calls": 2, "prompt_tokens": 30,
                                           "completion_tokens": 3, "n_calls_without_usage": 1}
    assert state["failed_attempt_tokens"] == {"calls": 3, "prompt_tokens": None,
                                              "completion_tokens": None,
                                              "n_calls_without_usage": 3}
    assert BudgetLedger.from_state(state).state() == ledger.state()


def test_an_old_ledger_state_without_the_key_reads_as_known_usage():
    old = {"total": 5, "charged": 1,
           "failed_attempt_tokens": {"calls": 1, "prompt_tokens": 9, "completion_tokens": 1},
           "uncharged": {"reflect": {"calls": 2, "prompt_tokens": 40, "completion_tokens": 4}}}
    state = BudgetLedger.from_state(old).state()
    assert state["failed_attempt_tokens"] == {**old["failed_attempt_tokens"],
                                              "n_calls_without_usage": 0}
    assert state["uncharged"]["reflect"] == {**old["uncharged"]["reflect"],
                                             "n_calls_without_usage": 0}


def test_tavo_states_unknown_tokens_and_keeps_its_prompt_over_known_usage():
    from lcb.optimize.methods.tavo_credit import usage_text

    known = {"prompt_tokens": 12, "completion_tokens": 3, "n_llm_calls": 1,
             "n_calls_without_usage": 0}
    # as the prompt read before the key existed: a resumed job's calls replay from its journal
    assert usage_text(known, tool_calls=2) == (
        "completion_tokens 3, n_llm_calls 1, prompt_tokens 12, tool_calls 2")
    blind = {"prompt_tokens": None, "completion_tokens": None, "n_llm_calls": 1,
             "n_calls_without_usage": 1}
    assert usage_text(blind, tool_calls=0) == (
        "completion_tokens unknown, n_calls_without_usage 1, n_llm_calls 1, "
        "prompt_tokens unknown, tool_calls 0")
