"""Odd text never ends a run: any string is written, every bad line is named and skipped.

`lcb.io.json_text` writes lone surrogates (legal in JSON and in Python strings, not in UTF-8) as
escapes; readers name a line nested too deeply instead of raising RecursionError. One property
per test: the helper round-trips, `lcb score` grades around odd lines, `lcb run` records a
model reply that holds a lone surrogate and goes on, the optimizer's journals and the response
cache keep such text, and a damaged journal line refuses a resume naming the line.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest
from typer.testing import CliRunner

from lcb.agents.cache import CachedReply, ResponseCache, cache_key
from lcb.agents.prompts import prompt_hash
from lcb.cli import app
from lcb.data.samples import reference_solution, sample_ids
from lcb.io import BadJson, json_text, loads, write_text
from lcb.optimize import gradecache
from lcb.optimize.artifacts import ArtifactError, HistoryEntry, append_history, read_history
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.calls import CALLS_LOG, CallJournal
from lcb.optimize.embed import HashingEmbedder
from lcb.optimize.journal import ROLLOUT_LOG, HistoryLog, RolloutJournal, program_hash
from lcb.optimize.methods.maspob_pool import VariantsRejected, parse_variants
from lcb.optimize.methods.tavo_prompts import json_object
from lcb.runs.records import RecordLog, RecordsError, read_records
from lcb.runs.scoring import summary_path
from lcb.sandbox import wire
from lcb.teams.formats import compliance
from tests.helpers_runner import MODEL, RIGHT, problem_ids, script, write_problems
from tests.scripted_server import scripted_fixture  # noqa: F401

DEEP = "[" * 200_000  # far past the parser's recursion limit

ROUND_TRIPS = [
    "\ud800", "\udfff", "a\udc80b", "\udc00\ud800",  # lone, or a low before a high: no pair
    "x\ud800", "\ud800\\udc00",  # a lone high before an escaped backslash: not a pair
    "\U0001f600", "e\u0301 \u00e9 \u4e2d", "\x00\x1f\"\\", "",  # astral, combining, controls
]


@pytest.mark.parametrize("text", ROUND_TRIPS, ids=[ascii(t) for t in ROUND_TRIPS])
def test_json_text_round_trips_any_string_through_utf8(text):
    value = {text: [text, {"k": text}]}
    data = (json_text(value) + "\n").encode("utf-8")  # strict UTF-8: raises if one got through
    assert json.loads(data) == value and loads(data) == value


def test_json_text_writes_ordinary_text_as_json_dumps_does():
    value = {"é": "\U0001f600 中", "n": [1, 2.5, None], "b": True}
    for kw in ({}, {"indent": 2}, {"sort_keys": True, "separators": (",", ":")}):
        assert json_text(value, **kw) == json.dumps(value, ensure_ascii=False, **kw)


def test_a_surrogate_pair_of_code_points_reads_back_as_its_character():
    """The one string JSON cannot keep (module contract): as with ensure_ascii=True."""
    text = "\ud83d\ude00"
    assert json.loads(json_text(text)) == json.loads(json.dumps(text)) == "\U0001f600"


def test_write_text_escapes_what_utf8_cannot_hold(tmp_path):
    path = tmp_path / "page.html"
    write_text(path, "<p>\ud800 é</p>")
    assert path.read_bytes().decode("utf-8") == "<p>\\ud800 é</p>"


@pytest.mark.parametrize(("data", "reason"), [
    (DEEP, "nested too deeply"), (b"\xff{}", "not valid UTF-8"), ("{", "not valid JSON"),
    ("1" * 5000, "not valid JSON"),  # longer than int() converts (at the default limit)
])
def test_loads_names_every_kind_of_bad_line(data, reason):
    with pytest.raises(BadJson, match=reason):
        loads(data)


def test_the_record_log_writes_a_lone_surrogate_and_reads_it_back(tmp_path):
    path = tmp_path / "predictions.jsonl"
    record = {"id": "a\ud800", "em": 1, "predicted_code": "# \udfff\nprint(1)\n"}
    with RecordLog(path) as log:
        log.append(record)
        log.append({"id": "b", "em": 0})
    assert read_records(path) == [record, {"id": "b", "em": 0}]


def test_a_records_line_nested_too_deeply_is_named_not_a_recursion_error(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"id": "a", "em": 1}\n' + DEEP + "\n", encoding="utf-8")
    with pytest.raises(RecordsError, match=r"predictions.jsonl:2: .*nested too deeply"):
        read_records(path)


# lcb score

def _score(tmp_path, lines: list[str]):
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(out), "--jobs", "2"])
    return result, out


def test_lcb_score_writes_lone_surrogates_and_skips_a_line_nested_too_deeply(tmp_path):
    first, second = sample_ids()[:2]
    odd_program = "# \ud800 a comment\n" + reference_solution(first)
    lines = [
        json.dumps({"id": first, "code": reference_solution(first), "note": "\udfff"}),
        DEEP,
        json.dumps({"id": first, "code": odd_program}),
        json.dumps({"id": second, "code": reference_solution(second)}),
    ]
    result, out = _score(tmp_path, lines)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["em"] == 1 and rows[0]["note"] == "\udfff" and rows[0]["error"] is None
    assert rows[1]["em"] == 0 and rows[1]["error"] == "line 2: not valid JSON: nested too deeply"
    # Graded, not an error line: Python itself cannot compile a lone surrogate (`python
    # prog.py` and the official grader's exec both refuse it), so it fails as they do.
    assert rows[2]["error"] is None and rows[2]["code"] == odd_program
    assert rows[2]["verdicts"] == ["compile_error"] and rows[2]["em"] == 0
    assert rows[3]["em"] == 1
    summary = json.loads(summary_path(out).read_text(encoding="utf-8"))
    assert (summary["n_lines"], summary["n_invalid"], summary["n"]) == (4, 1, 3)
    assert "line 2: not valid JSON: nested too deeply" in result.output


# lcb run

ODD_PROSE = "Here it is \ud800 (an odd reply).\n" + RIGHT
ODD_CODE = "```python\n# \udfff\na, b = map(int, input().split())\nprint(a + b)\n```"


def test_lcb_run_records_a_reply_with_a_lone_surrogate_and_goes_on(scripted, tmp_path):
    ids = problem_ids(3)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [ODD_PROSE], ids[1]: [ODD_CODE], ids[2]: [RIGHT]}))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "--data", str(data), "--out-dir", str(out),
                                      "--concurrency", "1"],
                                env={"VLLM_BASE_URL": server.base_url, "MODEL_ID": MODEL})
    assert result.exit_code == 0, result.output
    records = {r["id"]: r for r in read_records(out / "predictions.jsonl")}
    assert sorted(records) == ids and all(r["error"] is None for r in records.values())
    assert records[ids[0]]["em"] == 1 and records[ids[2]]["em"] == 1
    # A block that does not parse as Python is no program (lcb.extract), and none does
    # with a lone surrogate in it: recorded as a failure, like a reply without code.
    assert records[ids[1]]["predicted_code"] is None and records[ids[1]]["em"] == 0
    for qid, odd in ((ids[0], "\ud800"), (ids[1], "\udfff")):
        with gzip.open(out / "transcripts" / f"{qid}.json.gz", "rb") as handle:
            transcript = json.loads(handle.read().decode("utf-8"))  # strict UTF-8
        assert any(odd in str(m.get("content")) for m in transcript["messages"])
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["n"] == 3


# The optimizer's journals and the response cache

def test_a_damaged_rollout_journal_refuses_the_resume_naming_the_line(tmp_path):
    (tmp_path / ROLLOUT_LOG).write_text('{"key": "a"}\n' + DEEP + '\n{"key": "b"}\n',
                                        encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"rollouts.jsonl:2: .*nested too deeply.*resume"):
        RolloutJournal(tmp_path)


def test_a_damaged_call_journal_refuses_the_resume_naming_the_line(tmp_path):
    with gzip.open(tmp_path / CALLS_LOG, "wb") as handle:
        handle.write(b'{"key": "a", "error": null}\n' + DEEP.encode() + b"\n")
    with pytest.raises(ArtifactError, match=r"calls.jsonl.gz: line 2: .*nested too deeply"):
        CallJournal(tmp_path)


def test_the_history_keeps_a_proposed_prompt_with_a_lone_surrogate(tmp_path):
    entry = HistoryEntry(iteration=1, bundle={"coder": "Solve it \ud800."}, charged=3,
                         reason="odd \udfff")
    HistoryLog(tmp_path).append(entry)  # the journal's writer, then the artifacts' one
    append_history(tmp_path, entry.model_copy(update={"iteration": 2}))
    assert [(e.iteration, e.bundle, e.reason) for e in read_history(tmp_path)] == [
        (1, entry.bundle, entry.reason), (2, entry.bundle, entry.reason)]


def test_a_history_line_nested_too_deeply_is_named(tmp_path):
    (tmp_path / "history.jsonl").write_text(DEEP + "\n", encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"history.jsonl:1: .*nested too deeply"):
        read_history(tmp_path)


def test_the_response_cache_keys_and_stores_a_reply_with_a_lone_surrogate(tmp_path):
    messages = [{"role": "user", "content": "earlier reply: \ud800"}]
    key = cache_key(model_id="m", messages=messages, tools=[], sampling={}, seed=None,
                    sample=0, purpose="batch", agent="coder")
    cache = ResponseCache(tmp_path)
    cache.put(key, CachedReply(content="answer \udfff"), model="m", purpose="batch")
    assert cache.get(key).content == "answer \udfff"
    cache.close()


# Model text in parsers and hashes: never an exception out of them

def test_a_reply_nested_too_deeply_is_no_report_no_verdict_and_no_variants():
    assert compliance(f"JSON_REPORT:\n{DEEP}\nEND_JSON_REPORT\n", "structured_soft") is False
    assert json_object('{"a": ' + DEEP + "}") is None
    with pytest.raises(VariantsRejected, match="too deep"):
        parse_variants('{"variants": ' + DEEP + "}")


def test_programs_and_prompts_with_a_lone_surrogate_hash():
    odd = "# \ud800\nprint(1)\n"
    assert program_hash(odd) != program_hash("# \udfff\nprint(1)\n")
    assert gradecache.sha256(odd) != gradecache.sha256(odd + " ")
    assert bundle_hash({"coder": odd}) != bundle_hash({"coder": "x"})
    assert prompt_hash(odd) == prompt_hash(odd) and len(HashingEmbedder().embed([odd])[0]) == 384


def test_the_pool_to_judge_channel_carries_a_lone_surrogate():
    read_end, write_end = os.pipe()
    try:
        wire.write_frame(write_end, {"code": "# \ud800\n", "stdin": "\udfff"})
        frame = wire.read_frame(read_end, limit=1 << 20)
        assert frame == {"code": "# \ud800\n", "stdin": "\udfff"}
    finally:
        os.close(read_end)
        os.close(write_end)
