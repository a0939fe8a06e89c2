"""The batch runner through lcb's model client against the scripted server."""

import asyncio
import gc
import io
import json
import os
import weakref

import pytest
from rich.console import Console

from lcb.agents.check import EndpointError
from lcb.grading import SandboxUnavailable
from lcb.runs.progress import BatchProgress
from lcb.runs.records import read_records
from lcb.runs.rundir import OutputError, read_transcript
from lcb.runs.runner import BatchAborted, run_batch
from tests.helpers_runner import (
    MODEL,
    RIGHT,
    WRONG,
    kill_group,
    marker,
    model_config,
    problem_ids,
    read_lines,
    run_config,
    script,
    solvable_batch,
    start_batch,
    wait_for_records,
    write_problems,
)
from tests.scripted_server import (
    Reply,
    ToolCall,
    failures,
    message_text,
    scripted_fixture,  # noqa: F401
)

CONTRACT_KEYS = {
    "id", "topology", "model", "predicted_code", "pass", "total", "pass_rate", "em",
    "difficulty", "platform", "contest_date", "latency_s", "prompt_tokens", "completion_tokens",
    "n_llm_calls", "n_tool_calls", "error", "feedback", "tests_run", "verdicts", "seed",
}


def run(config) -> dict:
    return asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))


def requested_ids(server, ids) -> list[str]:
    texts = [message_text(body) for body in server.chat_requests()]
    return [qid for qid in ids for text in texts if marker(qid) in text]


def test_batch_writes_records_summary_manifest_and_transcripts(scripted, tmp_path):
    ids = problem_ids(4)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [RIGHT], ids[1]: [WRONG], ids[2]: [RIGHT],
                              ids[3]: ["I cannot solve this one."]}), models=[MODEL])
    config = run_config(server.base_url, data, tmp_path / "out",
                        model=model_config(server.base_url, api_key="sk-secret-123"))
    summary = run(config)

    records = {r["id"]: r for r in read_lines(tmp_path / "out" / "predictions.jsonl")}
    assert sorted(records) == ids
    assert all(CONTRACT_KEYS <= set(r) for r in records.values())
    assert [records[q]["em"] for q in ids] == [1, 0, 1, 0]
    assert records[ids[0]]["pass"] == records[ids[0]]["total"] == 2
    assert records[ids[1]]["verdicts"][0] == "wrong_answer"
    assert records[ids[1]]["feedback"]["expected"].strip() == "1"
    assert records[ids[3]]["predicted_code"] is None and records[ids[3]]["error"] is None
    assert all(r["n_llm_calls"] >= 1 and r["prompt_tokens"] > 0 for r in records.values())
    assert {r["model"] for r in records.values()} == {MODEL}

    assert (summary["n"], summary["n_extracted"], summary["em"]) == (4, 3, 0.5)
    assert summary["extracted_em"] == pytest.approx(2 / 3)
    assert summary["complete"] is True and summary["wall_s"] > 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summary

    manifest_text = (tmp_path / "out" / "manifest.json").read_text()
    assert "sk-secret-123" not in manifest_text
    manifest = json.loads(manifest_text)
    assert manifest["config"]["topology"] == "single"
    assert manifest["data_source"] and manifest["sessions"][0]["versions"]["langgraph"]
    transcript = read_transcript(tmp_path / "out" / "transcripts" / f"{ids[1]}.json.gz")
    assert transcript["id"] == ids[1] and transcript["messages"]
    assert any(m.get("type") == "assistant" for m in transcript["messages"])


def test_endpoint_failure_after_retries_is_an_error_record_and_the_batch_goes_on(scripted,
                                                                                  tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: failures(20), ids[1]: [RIGHT]}))
    run(run_config(server.base_url, data, tmp_path / "out"))
    records = {r["id"]: r for r in read_lines(tmp_path / "out" / "predictions.jsonl")}
    assert records[ids[0]]["error"] and records[ids[0]]["em"] == 0
    assert records[ids[0]]["predicted_code"] is None
    assert records[ids[1]]["error"] is None and records[ids[1]]["em"] == 1


def test_a_program_written_before_the_endpoint_failed_is_graded_and_recorded(scripted,
                                                                             tmp_path):
    [qid] = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", [qid])
    draft = Reply.calls(ToolCall("python_exec", {"code": "print(1)"}), content=RIGHT)
    server = scripted(script({qid: [draft, *failures(20)]}))
    run(run_config(server.base_url, data, tmp_path / "out"))
    [record] = read_lines(tmp_path / "out" / "predictions.jsonl")
    assert record["error"] is None and record["predicted_code"] and record["em"] == 1
    assert "model call failed" in record["agent_errors"]["solver"]


def test_a_problem_over_its_time_budget_is_an_error_record(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [Reply.stall(30)], ids[1]: [RIGHT]}))
    config = run_config(server.base_url, data, tmp_path / "out", problem_timeout_s=1.0,
                        model=model_config(server.base_url, timeout_s=20.0))
    run(config)
    records = {r["id"]: r for r in read_lines(tmp_path / "out" / "predictions.jsonl")}
    assert "timed out after 1s" in records[ids[0]]["error"]
    assert records[ids[1]]["em"] == 1


@pytest.mark.slow
def test_a_timed_out_problem_records_the_usage_spent_before_the_timeout(scripted, tmp_path):
    [qid] = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", [qid])
    first = Reply.calls(ToolCall("python_exec", {"code": "print(1)"}), prompt_tokens=120,
                        completion_tokens=7)
    server = scripted(script({qid: [first, Reply.stall(30)]}))
    config = run_config(server.base_url, data, tmp_path / "out", problem_timeout_s=1.5,
                        model=model_config(server.base_url, timeout_s=20.0))
    summary = run(config)
    [record] = read_lines(tmp_path / "out" / "predictions.jsonl")
    assert "timed out" in record["error"]
    assert (record["prompt_tokens"], record["completion_tokens"]) == (120, 7)
    assert (record["n_llm_calls"], record["n_tool_calls"]) == (1, 1)
    assert summary["prompt_tokens"] == 120


def test_retry_errors_reruns_failed_problems_and_sets_their_records_aside(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    out = tmp_path / "out"
    down = scripted(script({ids[0]: failures(50), ids[1]: [RIGHT]}))
    run(run_config(down.base_url, data, out))
    back = scripted(script({qid: [RIGHT] for qid in ids}))
    run(run_config(back.base_url, data, out, resume=True, retry_errors=True))
    records = {r["id"]: r for r in read_records(out / "predictions.jsonl")}
    assert sorted(records) == ids and records[ids[0]]["em"] == 1
    assert requested_ids(back, ids) == [ids[0]]
    aside = read_records(out / "predictions.errors.jsonl")
    assert [r["id"] for r in aside] == [ids[0]] and aside[0]["error"]


def test_overlapping_data_files_solve_each_id_once_and_resume(scripted, tmp_path):
    ids = problem_ids(3)
    folder = tmp_path / "rows"
    write_problems(folder / "a.jsonl", ids[:2])
    write_problems(folder / "b.jsonl", ids[1:])
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    summary = run(run_config(server.base_url, folder, tmp_path / "out"))
    assert (summary["n"], summary["n_selected"], summary["n_skipped_rows"]) == (3, 3, 1)
    again = run(run_config(server.base_url, folder, tmp_path / "out", resume=True))
    assert (again["n"], again["n_pending_at_start"], again["complete"]) == (3, 0, True)


def test_retry_errors_without_resume_is_refused(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    with pytest.raises(ValueError, match="--resume"):
        run(run_config("http://127.0.0.1:9/v1", data, tmp_path / "out", retry_errors=True))


def test_consecutive_errors_stop_the_batch(scripted, tmp_path):
    ids = problem_ids(6)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: failures(50) for qid in ids}))
    with pytest.raises(BatchAborted, match="3 problems in a row"):
        run(run_config(server.base_url, data, tmp_path / "out", concurrency=1,
                       max_consecutive_errors=3))
    assert len(read_records(tmp_path / "out" / "predictions.jsonl")) == 3
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["complete"] is False


def test_refuses_to_overwrite_an_earlier_run_without_resume(scripted, tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    server = scripted(["OK"])
    out = tmp_path / "preds.jsonl"
    out.write_text('{"id": "q000", "em": 1}\n')
    with pytest.raises(OutputError, match="--resume"):
        run(run_config(server.base_url, data, out=out))
    assert out.read_text() == '{"id": "q000", "em": 1}\n'
    assert server.chat_requests() == []


def test_resume_skips_recorded_ids_and_repairs_a_cut_last_line(scripted, tmp_path):
    ids = problem_ids(3)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "preds.jsonl"
    done = {"id": ids[0], "em": 1, "topology": "single", "model": MODEL}
    out.write_text(json.dumps(done) + '\n{"id": "' + ids[1])  # q001 was cut by a kill
    run(run_config(server.base_url, data, out=out, resume=True))
    records = read_records(out)
    assert sorted(r["id"] for r in records) == ids
    assert records[0] == done
    assert requested_ids(server, ids) == ids[1:]


def test_resume_refuses_records_of_another_model(scripted, tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(2))
    server = scripted(["OK"])
    out = tmp_path / "preds.jsonl"
    out.write_text(json.dumps({"id": "q000", "em": 1, "topology": "single", "model": "x"}) + "\n")
    with pytest.raises(OutputError, match="model = 'x'"):
        run(run_config(server.base_url, data, out=out, resume=True))


def test_endpoint_down_stops_before_writing_anything(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(2))
    url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
    with pytest.raises(EndpointError) as caught:
        run(run_config(url, data, tmp_path / "out"))
    assert url in str(caught.value) and MODEL in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_problems_run_concurrently(scripted, tmp_path):
    _, data, server, out = solvable_batch(scripted, tmp_path, 6, latency_s=0.4)
    summary = run(run_config(server.base_url, data, out, concurrency=3))
    assert summary["em"] == 1.0
    assert 2 <= server.peak_in_flight <= 3


def test_a_batch_freezes_what_outlives_it_so_full_collections_stay_short(scripted, tmp_path):
    _, data, server, out = solvable_batch(scripted, tmp_path, 2)
    gc.unfreeze()
    gc.disable()  # only the batch's own collection may free the cycle below
    try:
        garbage = [[]]
        garbage[0].append(garbage)  # a cycle that only the collector can free
        probe = weakref.ref(Probe := type("Probe", (), {}))  # noqa: N806 - kept by the cycle
        garbage[0].append(Probe)
        del garbage, Probe
        summary = run(run_config(server.base_url, data, out, concurrency=2))
    finally:
        gc.enable()
    assert summary["em"] == 1.0
    assert gc.get_freeze_count() > 10_000  # the modules and problems, at least
    assert probe() is None  # collected before the freeze, not kept for good


@pytest.mark.slow
def test_resume_after_sigkill_loses_and_duplicates_nothing(scripted, tmp_path):
    ids, data, server, out = solvable_batch(scripted, tmp_path, 10, latency_s=0.3)
    proc = start_batch(server.base_url, data, out)
    try:
        wait_for_records(out / "predictions.jsonl", 3, proc)
    finally:
        kill_group(proc)
    before = (out / "predictions.jsonl").read_text()
    kept = [json.loads(line) for line in before.splitlines() if line.endswith("}")]
    assert 3 <= len(kept) < len(ids)

    summary = run(run_config(server.base_url, data, out, resume=True))
    after = read_records(out / "predictions.jsonl")
    assert sorted(r["id"] for r in after) == ids  # every id exactly once
    assert after[: len(kept)] == kept  # finished records were not touched
    assert summary["n"] == len(ids) and summary["complete"] is True
    assert len(json.loads((out / "manifest.json").read_text())["sessions"]) == 2


def test_plain_progress_lines_count_done_pass_rate_errors_and_tokens():
    stream = io.StringIO()
    with BatchProgress(total=3, stream=stream, plain=True, interval_s=0.0) as progress:
        progress.count({"id": "a", "em": 1, "prompt_tokens": 900, "completion_tokens": 100})
        progress.update({"id": "b", "em": 0, "error": "boom", "prompt_tokens": 500})
        progress.update({"id": "c", "em": 1, "completion_tokens": 1})
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[batch] 0/3  pass@1 0.000  errors 0  tokens 0")  # at once
    assert lines[1].startswith("[batch] 2/3  pass@1 0.500  errors 1  tokens 1.5k")
    assert lines[2].startswith("[batch] 3/3  pass@1 0.667  errors 1  tokens 1.5k")
    assert len(lines) == 3  # the end repeats no line already printed


def test_terminal_progress_bar_renders_the_same_counts():
    stream = io.StringIO()
    with BatchProgress(total=2, stream=stream, plain=False, label="single") as progress:
        progress.update({"id": "a", "em": 1, "prompt_tokens": 10})
        progress.update({"id": "b", "em": 1})
    assert "2/2" in stream.getvalue() and "pass@1 1.000" in stream.getvalue()


def test_a_tier_that_cannot_run_here_stops_the_batch_before_any_model_call(tmp_path,
                                                                          monkeypatch):
    # A "bwrap" that refuses to sandbox anything, as on a host without the rights it needs.
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    # The endpoint is unreachable: had the batch got as far as a model call, it would say so.
    config = run_config("http://127.0.0.1:9/v1", data, tmp_path / "out", sandbox="bwrap")
    with pytest.raises(SandboxUnavailable, match="bwrap.*Permission denied"):
        run(config)
    assert not (tmp_path / "out" / "predictions.jsonl").exists()


def test_a_truncated_answer_marks_its_record_and_the_truncation_rate(scripted, tmp_path):
    from lcb.runs.tables import print_summary

    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    cut = Reply(content=RIGHT, finish_reason="length")
    server = scripted(script({ids[0]: [cut], ids[1]: [RIGHT]}))
    summary = run(run_config(server.base_url, data, tmp_path / "out"))
    records = {r["id"]: r for r in read_lines(tmp_path / "out" / "predictions.jsonl")}
    assert (records[ids[0]]["finish_reason"], records[ids[0]]["truncated"]) == ("length", True)
    assert records[ids[0]]["n_truncated_calls"] == 1
    assert (records[ids[1]]["finish_reason"], records[ids[1]]["truncated"]) == ("stop", False)
    assert (summary["n_truncated"], summary["truncation_rate"]) == (1, 0.5)
    assert summary["by_difficulty"]["easy"]["n_truncated"] == 1  # ids[0] is the easy one

    console = Console(file=io.StringIO(), width=200)
    print_summary(summary, console=console)
    text = console.file.getvalue()
    assert "truncated 50.0% (1 of 2)" in text
    def cells(line: str, bar: str) -> list[str]:
        return [cell.strip() for cell in line.split(bar)[1:-1]]

    lines = text.splitlines()
    header = next(cells(line, "┃") for line in lines if "┃ set" in line)
    everything = next(cells(line, "│") for line in lines if "│ all " in line)
    assert header == ["set", "n", "solved", "pass@1", "truncated"]  # truncation next to pass@1
    assert everything == ["all", "2", "2", "1.000", "50.0%"]


def test_lcb_score_of_a_runs_records_gives_the_runs_summary(scripted, tmp_path):
    from typer.testing import CliRunner

    from lcb.cli import app
    from lcb.runs.records import SUMMARY_KEYS

    ids = problem_ids(4)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [RIGHT], ids[1]: [WRONG], ids[2]: [RIGHT],
                              ids[3]: ["no program here"]}))
    ran = run(run_config(server.base_url, data, tmp_path / "out", samples=2))
    results = tmp_path / "scored.jsonl"
    result = CliRunner().invoke(app, [
        "score", "--data", str(data), "--predictions", str(tmp_path / "out" / "predictions.jsonl"),
        "--out", str(results), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    scored = json.loads((tmp_path / "scored.summary.json").read_text())
    for name in SUMMARY_KEYS:
        if name != "n_errors":  # a line with no program is an error line to `lcb score`
            assert scored[name] == ran[name], name
    assert (ran["n_errors"], scored["n_errors"]) == (0, 2)
    assert (scored["n_selected"], scored["n_missing"]) == (ran["n_selected"], ran["n_missing"])
    assert (ran["n"], ran["em"], ran["pass_at_k"]) == (8, 0.5, {"1": 0.5})
