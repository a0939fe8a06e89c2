"""One problem's page: per condition the program, verdict, first failing test, finish reason,
tokens and latency per agent, the whole transcript by agent, and a program diff.

Contract of `problem_page(problem_id, conditions, baseline=...)` (a dict the template reads):
- `statement`: the first user message of the first transcript found (the problem as the team
  saw it), or None when no condition holds a transcript of it.
- `entries`: per condition holding a program for the problem (its first: sample 0, or the
  first valid line): `label`, `outcome` (`lcb.report.metrics.outcome`), `em`, `passed`/`total`,
  `verdicts`, `feedback` (the first failing test: input, expected, actual, error), `error`,
  `finish_reason`, `truncated`, `program`, `agents` (per agent id in order of first message:
  role, LLM calls, prompt and completion tokens (None when no call of it reported usage, with
  `n_calls_without_usage`: `lcb.agents.usage`), latency and its messages: type, content, tool
  calls with their arguments as JSON, tool results with name and status) and `diff`: the
  side-by-side line diff from the baseline's program to this one (`side_by_side`), None for
  the baseline itself or when either has no program.
Everything here is raw text; the template escapes it (model output is hostile).
"""

from __future__ import annotations

import json
from difflib import SequenceMatcher
from itertools import zip_longest
from typing import Any

from lcb.agents.usage import sum_usage
from lcb.report.collect import Condition
from lcb.report.metrics import outcome
from lcb.runs.rundir import transcript_name


def page_name(problem_id: str) -> str:
    """The file name of a problem's page (safe for any id, distinct per id)."""
    return transcript_name(problem_id).removesuffix(".json.gz") + ".html"


def first_records(cond: Condition) -> dict[str, dict[str, Any]]:
    """Problem id -> its first program's record (sample 0, or the first valid line)."""
    found: dict[str, dict[str, Any]] = {}
    for record in cond.graded:
        key = str(record["id"])
        if key not in found or int(record.get("sample") or 0) < int(found[key].get("sample")
                                                                    or 0):
            found[key] = record
    return found


def side_by_side(old: str, new: str) -> list[dict[str, Any]]:
    """Rows {tag, a, b} of a line diff; tag equal | replace | delete | insert.

    >>> [row["tag"] for row in side_by_side("x\\ny", "x\\nz")]
    ['equal', 'replace']
    """
    a, b = old.splitlines(), new.splitlines()
    rows = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for left, right in zip_longest(a[i1:i2], b[j1:j2]):
            rows.append({"tag": tag, "a": left, "b": right})
    return rows


def _message(message: dict[str, Any]) -> dict[str, Any]:
    calls = [{"name": c.get("name"), "invalid": bool(c.get("invalid")),
              "args": json.dumps(c.get("args"), indent=1, ensure_ascii=False)}
             for c in message.get("tool_calls") or []]
    content = message.get("content")
    return {"type": message.get("type"), "content": content if isinstance(content, str)
            else json.dumps(content, ensure_ascii=False),
            "name": message.get("name"), "status": message.get("status"), "tool_calls": calls,
            "finish_reason": message.get("finish_reason"),
            "cached": bool((message.get("call") or {}).get("cached"))}


def agents(transcript: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The transcript's messages by agent, with each agent's calls, tokens and latency."""
    by_agent: dict[str, dict[str, Any]] = {}
    calls: dict[str, list[dict[str, Any]]] = {}
    for message in (transcript or {}).get("messages") or []:
        agent = by_agent.setdefault(str(message.get("source")), {
            "agent": str(message.get("source")), "role": message.get("role"),
            "latency_s": 0.0, "messages": []})
        if message.get("type") == "assistant":
            calls.setdefault(agent["agent"], []).append(_call_usage(message.get("usage")))
            agent["latency_s"] += float((message.get("call") or {}).get("latency_s") or 0)
        agent["messages"].append(_message(message))
    for name, agent in by_agent.items():
        usage = sum_usage(calls.get(name, []))
        agent.update(usage, calls=usage["n_llm_calls"])
    return list(by_agent.values())


def _call_usage(usage: Any) -> dict[str, Any]:
    """One answered call's usage as a part of `sum_usage`: a transcript keeps the message's
    usage (LangChain's names), empty when the server reported none."""
    if not isinstance(usage, dict) or not usage:
        return {"n_llm_calls": 1, "n_calls_without_usage": 1}
    return {"n_llm_calls": 1, "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens")}


def _statement(transcripts: list[dict[str, Any] | None]) -> str | None:
    for found in transcripts:
        for message in (found or {}).get("messages") or []:
            if message.get("type") == "user" and isinstance(message.get("content"), str):
                return message["content"]
    return None


def _entry(cond: Condition, record: dict[str, Any],
           transcript: dict[str, Any] | None) -> dict[str, Any]:
    program = record.get("predicted_code", record.get("code"))
    return {"label": cond.label, "outcome": outcome(record), "em": int(record["em"]),
            "passed": record.get("pass"), "total": record.get("total"),
            "verdicts": record.get("verdicts") or [], "feedback": record.get("feedback"),
            "error": record.get("error"), "finish_reason": record.get("finish_reason"),
            "truncated": bool(record.get("truncated")),
            "program": program if isinstance(program, str) else None,
            "agents": agents(transcript), "diff": None}


def problem_page(problem_id: str, conditions: list[Condition],
                 records: dict[str, dict[str, dict[str, Any]]], *,
                 baseline: str | None) -> dict[str, Any]:
    """One problem's page data (module contract); `records` is `first_records` per label."""
    entries, transcripts = [], []
    for cond in conditions:
        record = records[cond.label].get(problem_id)
        if record is None:
            continue
        found = cond.transcript(problem_id, int(record.get("sample") or 0))
        transcripts.append(found)
        entries.append(_entry(cond, record, found))
    base = next((e for e in entries if e["label"] == baseline), None)
    for entry in entries:
        if base is not None and entry is not base and base["program"] and entry["program"]:
            entry["diff"] = side_by_side(base["program"], entry["program"])
    return {"id": problem_id, "statement": _statement(transcripts), "entries": entries,
            "baseline": baseline}
