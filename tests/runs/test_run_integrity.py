"""Run-directory integrity: one writer per output, repeated ids repaired, safe transcript names."""

import asyncio
import io
import json
import os
import re

import pytest
from typer.testing import CliRunner

from lcb.cli import app
from lcb.data.datasets import Selection
from lcb.runs.lock import LOCK_NAME, OutputLock, file_lock, run_lock
from lcb.runs.records import read_records
from lcb.runs.rundir import OutputError, RunPaths, read_transcript, write_transcript
from lcb.runs.runner import run_batch
from tests.helpers_runner import (
    MODEL,
    RIGHT,
    hold_lock,
    kill_group,
    marker,
    problem_ids,
    run_config,
    script,
    write_problems,
)
from tests.scripted_server import message_text, scripted_fixture  # noqa: F401


def run(config, stream: io.StringIO | None = None) -> dict:
    return asyncio.run(run_batch(config, stream=stream or io.StringIO(), plain=True))


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def requested(server, ids) -> list[str]:
    texts = [message_text(body) for body in server.chat_requests()]
    return [qid for qid in ids if any(marker(qid) in text for text in texts)]


def test_a_second_open_of_a_held_lock_is_refused_and_release_cleans_up(tmp_path):
    target = tmp_path / "new" / "out.jsonl"
    with file_lock(target) as held:
        assert json.loads(held.path.read_text())["pid"] == os.getpid()
        with pytest.raises(OutputError, match=rf"out\.jsonl is in use .*pid {os.getpid()}"):
            file_lock(target).acquire()
    assert not (tmp_path / "new").exists()  # the lock file and the folder it made are gone


def test_a_stale_lock_file_blocks_nobody(tmp_path):
    path = tmp_path / LOCK_NAME
    path.write_text('{"pid": 999999, "started_at": "long ago"}\n')  # left by a killed run
    with OutputLock(path, subject=tmp_path):
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_a_locked_out_dir_is_refused_before_any_work_and_resumes_after_the_holder(scripted,
                                                                                  tmp_path):
    ids = problem_ids(3)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"
    data = write_problems(tmp_path / "all.jsonl", ids)
    run(run_config(server.base_url, data, out, selection=Selection(limit=2)))
    holder = hold_lock(out)
    try:
        before, calls = snapshot(out), len(server.chat_requests())
        with pytest.raises(OutputError, match=rf"{re.escape(str(out))} is in use by another "
                                              rf"lcb run \(pid {holder.pid}, started "):
            run(run_config(server.base_url, data, out, resume=True))
        assert snapshot(out) == before and len(server.chat_requests()) == calls
    finally:
        kill_group(holder)
    assert (out / LOCK_NAME).exists()  # what the killed holder left: content only, no lock
    summary = run(run_config(server.base_url, data, out, resume=True))
    assert (summary["n"], summary["n_pending_at_start"], summary["complete"]) == (3, 1, True)
    assert not (out / LOCK_NAME).exists()


def test_a_locked_out_file_is_refused_and_the_next_resume_proceeds(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "preds.jsonl"
    first = json.dumps({"id": ids[0], "em": 1, "topology": "single", "model": MODEL}) + "\n"
    out.write_text(first)
    with run_lock(RunPaths(predictions=out)):
        with pytest.raises(OutputError, match=rf"preds\.jsonl is in use .*pid {os.getpid()}.*"
                                              r"choose another --out$"):
            run(run_config(server.base_url, data, out=out, resume=True))
    assert out.read_text() == first and server.chat_requests() == []
    run(run_config(server.base_url, data, out=out, resume=True))
    assert [r["id"] for r in read_records(out)] == ids
    assert not out.with_name("preds.jsonl.lock").exists()


def test_cli_run_and_score_on_a_locked_output_exit_2_naming_the_holder(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    out = tmp_path / "out"
    env = {"VLLM_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_ID": MODEL}
    with run_lock(RunPaths.choose(out=None, out_dir=out, default_dir=out)):
        ran = CliRunner().invoke(app, ["run", "--data", str(data), "--out-dir", str(out)],
                                 env=env)
    assert ran.exit_code == 2 and f"pid {os.getpid()}" in ran.output, ran.output
    results = tmp_path / "results.jsonl"
    (tmp_path / "pred.jsonl").write_text('{"id": "x", "code": "print(1)"}\n')
    with file_lock(results, by="lcb score"):
        scored = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions",
                                          str(tmp_path / "pred.jsonl"), "--out", str(results)])
    assert scored.exit_code == 2 and "in use by another lcb score" in scored.output
    assert not results.exists()


def test_resume_sets_a_repeated_id_aside_and_finishes_the_rest(scripted, tmp_path):
    ids = problem_ids(3)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"
    out.mkdir()
    base = {"topology": "single", "model": MODEL}
    kept = {"id": ids[0], "em": 1, **base, "tag": "first"}
    again = {"id": ids[0], "em": 0, **base, "tag": "second"}
    other = {"id": ids[1], "em": 1, **base}
    (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                   for r in (kept, other, again)))
    stream = io.StringIO()
    summary = run(run_config(server.base_url, data, out, resume=True), stream)
    assert read_records(out / "predictions.jsonl")[:2] == [kept, other]
    assert [r["id"] for r in read_records(out / "predictions.jsonl")] == ids
    assert read_records(out / "predictions.duplicates.jsonl") == [again]
    assert requested(server, ids) == [ids[2]]
    assert (summary["n"], summary["solved"], summary["complete"]) == (3, 3, True)
    assert "1 repeated record" in stream.getvalue()
    assert "predictions.duplicates.jsonl" in stream.getvalue()


AWKWARD_IDS = ["x" * 200, "a/b", "a_b", "a b", "ünï/题", "../up", "q000"]


def test_awkward_ids_get_distinct_short_transcripts_that_read_back(scripted, tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", AWKWARD_IDS)
    server = scripted(script({qid: [RIGHT] for qid in AWKWARD_IDS}))
    config = run_config(server.base_url, data, tmp_path / "out")
    assert run(config)["n"] == len(AWKWARD_IDS)
    paths = [config.paths.transcript(qid) for qid in AWKWARD_IDS]
    assert len(set(paths)) == len(AWKWARD_IDS)
    assert sorted(config.paths.transcripts.iterdir()) == sorted(paths)  # no stray files
    for qid, path in zip(AWKWARD_IDS, paths, strict=True):
        assert len(path.name.encode("utf-8")) <= 150
        assert read_transcript(path)["id"] == qid
    assert config.paths.transcript("q000").name == "q000.json.gz"
    again = run(run_config(server.base_url, data, tmp_path / "out", resume=True))
    assert (again["n_pending_at_start"], again["complete"]) == (0, True)


def test_a_300_character_id_round_trips_through_its_transcript(tmp_path):
    paths = RunPaths.choose(out=None, out_dir=tmp_path, default_dir=tmp_path)
    qid = "题" * 300
    path = paths.transcript(qid)
    write_transcript(path, {"id": qid})
    assert len(path.name.encode("utf-8")) <= 150 and read_transcript(path) == {"id": qid}
    assert paths.transcript(qid + "x") != path
