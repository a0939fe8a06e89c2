"""Run hygiene: resume refusals, selection errors, the start banner and log-file progress, the
manifest's provenance, and an output that cannot be written. Offline, against the scripted
server."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import time
import types

import pytest
from typer.testing import CliRunner

from lcb.agents import prompts
from lcb.cli import app
from lcb.data.datasets import Loaded, Selection, Skipped, load_problems
from lcb.runs import progress as progress_module
from lcb.runs.checkout import git_state
from lcb.runs.progress import BatchProgress
from lcb.runs.records import RecordLog, read_records
from lcb.runs.rundir import OutputError
from lcb.runs.runner import run_batch
from lcb.runs.start import banner
from lcb.teams.options import TeamOptions
from tests.helpers_data import FAKE_SHA, make_hub_cache, stdin_row
from tests.helpers_runner import (
    MODEL,
    REPO,
    RIGHT,
    entry_argv,
    kill_group,
    model_config,
    problem_ids,
    read_lines,
    run_config,
    script,
    solvable_batch,
    subprocess_env,
    write_problems,
)
from tests.scripted_server import scripted_fixture  # noqa: F401

CLOSED = "http://127.0.0.1:9/v1"  # nothing listens there: any model call fails at once


def run(config, stream: io.StringIO | None = None) -> dict:
    return asyncio.run(run_batch(config, stream=stream or io.StringIO(), plain=True))


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def invoke(*args: str, base_url: str = CLOSED):
    return CliRunner().invoke(app, list(args), env={"VLLM_BASE_URL": base_url, "MODEL_ID": MODEL})


# --- resume refusals ---------------------------------------------------------------------------
TEAM = {"topology": "independent", "team": TeamOptions(team_size=2)}
CHANGES = [  # (setting, overrides of the resumed run given the server URL, before, after)
    ("seed", lambda url: {"seed": 1}, 0, 1),
    ("grader", lambda url: {"grader": "official"}, "default", "official"),
    ("sandbox", lambda url: {"sandbox": "bwrap"}, "process", "bwrap"),
    ("team_size", lambda url: {"team": TeamOptions(team_size=3)}, 2, 3),
    ("communication", lambda url: {"team": TeamOptions(team_size=2,
                                                       communication="structured_soft")},
     "freeform", "structured_soft"),
    ("active", lambda url: {"team": TeamOptions(team_size=2, active=frozenset({"coder_0"}))},
     None, ["coder_0"]),
    ("temperature", lambda url: {"model": model_config(url, temperature=0.7)}, 0.2, 0.7),
    ("top_p", lambda url: {"model": model_config(url, top_p=0.5)}, 0.9, 0.5),
    ("max_tokens", lambda url: {"model": model_config(url, max_tokens=77)},
     model_config(CLOSED).max_tokens, 77),
    ("thinking", lambda url: {"model": model_config(url, thinking=True)}, None, True),
    ("vllm_extras", lambda url: {"model": model_config(url, vllm_extras=False)}, True, False),
]


@pytest.fixture
def finished(scripted, tmp_path):
    """A finished two-problem run of a two-coder team: (ids, data, server, out)."""
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"
    run(run_config(server.base_url, data, out, **TEAM))
    return ids, data, server, out


@pytest.mark.parametrize(("key", "change", "before", "after"), CHANGES,
                         ids=[change[0] for change in CHANGES])
@pytest.mark.slow
def test_a_resume_with_another_setting_is_refused_and_changes_nothing(finished, key, change,
                                                                      before, after):
    ids, data, server, out = finished
    with (out / "predictions.jsonl").open("a") as handle:
        handle.write('{"id": "cut sho')  # a line a kill cut short: a refusal must not repair it
    kept, calls = snapshot(out), len(server.chat_requests())
    config = run_config(server.base_url, data, out, resume=True, **{**TEAM, **change(
        server.base_url)})
    with pytest.raises(OutputError) as info:
        run(config)
    assert f"it was run with {key} = {before!r}, this run has {after!r}" in str(info.value)
    assert snapshot(out) == kept and len(server.chat_requests()) == calls


def test_the_same_settings_resume_and_a_longer_selection_runs_only_the_new_problems(scripted,
                                                                                    tmp_path):
    ids = problem_ids(3)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"
    run(run_config(server.base_url, data, out, selection=Selection(limit=2), **TEAM))
    summary = run(run_config(server.base_url, data, out, resume=True, **TEAM))
    assert (summary["n"], summary["n_pending_at_start"], summary["complete"]) == (3, 1, True)


def test_a_resume_on_changed_data_or_another_file_is_refused(finished, tmp_path):
    ids, data, server, out = finished
    kept = snapshot(out)
    copy = tmp_path / "copy.jsonl"
    shutil.copy(data, copy)
    with pytest.raises(OutputError, match=f"data = {re.escape(repr(str(data)))}, this run has "
                                          f"{re.escape(repr(str(copy)))}"):
        run(run_config(server.base_url, copy, out, resume=True, **TEAM))
    before = hashlib.sha256(data.read_bytes()).hexdigest()
    data.write_text(data.read_text().replace("[[q000]]", "[[q000]] (edited)"))
    after = hashlib.sha256(data.read_bytes()).hexdigest()
    with pytest.raises(OutputError, match=f"data_checksum = '{before}', this run has '{after}'"):
        run(run_config(server.base_url, data, out, resume=True, **TEAM))
    assert snapshot(out) == kept


def test_a_resume_after_a_prompt_file_changed_is_refused(scripted, tmp_path, monkeypatch):
    root = tmp_path / "prompts"
    shutil.copytree(prompts.PROMPTS_ROOT, root)
    monkeypatch.setattr(prompts, "PROMPTS_ROOT", root)
    ids, data, server, out = solvable_batch(scripted, tmp_path, 2)
    run(run_config(server.base_url, data, out))
    solver = root / "single" / "lcb" / "solver.txt"
    old = hashlib.sha256(prompts.load_role_prompt("single", "solver").encode()).hexdigest()
    solver.write_text(solver.read_text() + "\nThink twice.\n")
    new = hashlib.sha256(prompts.load_role_prompt("single", "solver").encode()).hexdigest()
    with pytest.raises(OutputError, match=f"prompts.solver = '{old}', this run has '{new}'.*"
                                          f"{re.escape(str(solver))}"):
        run(run_config(server.base_url, data, out, resume=True))


def test_an_out_file_without_a_manifest_is_checked_against_its_records(scripted, tmp_path):
    ids, data, server, _ = solvable_batch(scripted, tmp_path, 2)
    out = tmp_path / "preds.jsonl"
    run(run_config(server.base_url, data, out=out, selection=Selection(limit=1)))
    with pytest.raises(OutputError, match="seed = 0, this run has 5.*--out"):
        run(run_config(server.base_url, data, out=out, resume=True, seed=5))
    hotter = model_config(server.base_url, temperature=1.5)  # sampling lives in `generation`
    with pytest.raises(OutputError, match="temperature = 0.2, this run has 1.5"):
        run(run_config(server.base_url, data, out=out, resume=True, model=hotter))
    assert [r["id"] for r in read_records(out)] == ids[:1]


def test_a_hub_resume_follows_the_commit_not_the_branch_name(scripted, tmp_path, hub_cache):
    ids = problem_ids(2)
    rows = read_lines(write_problems(tmp_path / "rows.jsonl", ids))
    make_hub_cache(hub_cache, {"test.jsonl": rows})
    make_hub_cache(hub_cache, {"test.jsonl": rows}, sha="f" * 40, ref="old")
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"

    def hub(**overrides):
        config = run_config(server.base_url, tmp_path / "rows.jsonl", out, **overrides)
        return run(dataclasses.replace(config, data=None))

    with pytest.warns(UserWarning):  # these rows are not the eval IDs
        hub()
        with pytest.raises(OutputError, match=f"data_checksum = '{FAKE_SHA}', this run has "
                                              f"'{'f' * 40}'.*--revision"):
            hub(resume=True, revision="old")
        with pytest.raises(OutputError, match="release = 'release_v1', this run has 'v1'"):
            hub(resume=True, release="v1")
        assert hub(resume=True, revision=FAKE_SHA)["n_pending_at_start"] == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["data_checksum"] == FAKE_SHA


def test_cli_resume_with_another_seed_exits_2_naming_both_values(finished):
    ids, data, server, out = finished
    result = invoke("run", "--topology", "independent", "--team-size", "2", "--data", str(data),
                    "--out-dir", str(out), "--resume", "--seed", "3", base_url=server.base_url)
    assert result.exit_code == 2, result.output
    assert "seed = 0, this run has 3" in result.output and "Traceback" not in result.output


# --- selection errors --------------------------------------------------------------------------
def test_an_unknown_only_id_is_named_before_any_model_call(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(2))
    result = invoke("run", "--data", str(data), "--only", "q001,nope", "--out-dir",
                    str(tmp_path / "out"))
    assert result.exit_code == 1  # the endpoint check failed: no model answered anything
    assert "--only: 1 ID(s) not in the source (or excluded by another filter): nope" \
        in result.output


@pytest.mark.parametrize(("args", "rows", "why"), [
    (("--only", "nope,gone"), 2, "none of the --only IDs is in the source (nope, gone)"),
    (("--limit", "0"), 2, "--limit 0 selects no problem"),
    ((), 0, "the data source holds no rows"),
    (("--difficulty", "hard", "--limit", "1"), 2, "no row of the source passes the filters"),
])
def test_an_empty_selection_exits_2_and_creates_nothing(tmp_path, args, rows, why):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(rows))
    out = tmp_path / "results" / "out"
    result = invoke("run", "--data", str(data), *args, "--out-dir", str(out))
    assert result.exit_code == 2, result.output
    assert f"error: nothing to run: {why}" in result.output
    assert not (tmp_path / "results").exists()


def test_malformed_rows_are_listed_before_any_model_call_and_kept_in_the_manifest(scripted,
                                                                                  tmp_path):
    bad = stdin_row("broken")
    bad["public_test_cases"] = "[{"
    rows = read_lines(write_problems(tmp_path / "good.jsonl", problem_ids(2)))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in [rows[0], bad, rows[1]]))
    refused = invoke("run", "--data", str(data), "--out-dir", str(tmp_path / "first"))
    assert refused.exit_code == 1  # the endpoint is down, and the rows were listed already
    assert "1 selected row(s) left out" in refused.output
    assert "'broken'" in refused.output and "public_test_cases" in refused.output
    server = scripted(script({qid: [RIGHT] for qid in problem_ids(2)}))
    out = tmp_path / "out"
    result = invoke("run", "--data", str(data), "--out-dir", str(out), base_url=server.base_url)
    assert result.exit_code == 0, result.output
    [session] = json.loads((out / "manifest.json").read_text())["sessions"]
    [left_out] = session["skipped_rows"]
    assert (left_out["id"], left_out["kind"]) == ("broken", "malformed")
    assert "public_test_cases" in left_out["reason"]


# --- banner and progress -----------------------------------------------------------------------
def test_the_banner_names_team_model_redacted_url_data_size_and_output(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(3))
    model = model_config("http://user:secret@10.0.0.1:8000/v1")
    config = run_config("http://x:1/v1", data, tmp_path / "out", model=model,
                        topology="sequential", team=TeamOptions(team_size=2), samples=2)
    text = banner(config, load_problems(str(data)))
    assert "secret" not in text and "user" not in text
    assert text.splitlines() == [
        "lcb batch",
        "  team      sequential (2 agents, freeform messages)",
        f"  model     {MODEL} at http://10.0.0.1:8000/v1",
        f"  data      {data} (1 file)",
        "  problems  3 (2 samples each)",
        f"  output    {tmp_path / 'out'}",
    ]


def test_plain_progress_prints_at_start_then_after_10_s_and_5_percent(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    stream = io.StringIO()
    lines = lambda: [line.split()[1] for line in stream.getvalue().splitlines()]  # noqa: E731
    bar = BatchProgress(total=100, stream=stream, plain=True, label="t")
    with bar:
        assert lines() == ["0/100"]
        for when, done in ((1, 1), (11, 4), (12, 5), (13, 10), (22, 11), (40, 12)):
            clock[0] = when
            while bar.done < done:
                bar.update({"em": 1})
        assert lines() == ["0/100", "5/100", "11/100"]
    assert lines() == ["0/100", "5/100", "11/100", "12/100"]


@pytest.mark.slow
def test_a_batch_under_a_log_file_shows_its_banner_and_progress_within_seconds(scripted,
                                                                             tmp_path):
    ids, data, server, out = solvable_batch(scripted, tmp_path, 4, latency_s=3.0)
    log = (tmp_path / "batch.log").open("w")
    argv = entry_argv("--batch", "--data", str(data), "--out-dir", str(out), "--concurrency", "1")
    proc = subprocess.Popen(argv, cwd=REPO, env=subprocess_env(server.base_url), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "[single] 0/4" not in (tmp_path / "batch.log").read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        assert not (out / "predictions.jsonl").exists() or \
            not (out / "predictions.jsonl").read_text()  # life shows before the first record
        text = (tmp_path / "batch.log").read_text()
        assert "lcb batch" in text and "problems  4 (1 sample each)" in text
    finally:
        kill_group(proc)
        log.close()


# --- the manifest ------------------------------------------------------------------------------
def test_the_manifest_records_git_state_prompt_hashes_and_the_data_checksum(scripted, tmp_path):
    ids, data, server, out = solvable_batch(scripted, tmp_path, 2)
    run(run_config(server.base_url, data, out))
    manifest = json.loads((out / "manifest.json").read_text())
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    assert manifest["sessions"][0]["git"] == git_state()
    assert re.fullmatch(r"[0-9a-f]{40}", manifest["sessions"][0]["git"]["commit"])
    assert manifest["data_source"]["sha256"] == {str(data): digest}
    solver = hashlib.sha256(prompts.load_role_prompt("single", "solver").encode()).hexdigest()
    assert manifest["settings"]["prompts.solver"] == solver
    assert manifest["settings"]["data_checksum"] == digest


# --- an unusable output ------------------------------------------------------------------------
def test_an_out_dir_under_a_file_is_one_line_naming_it(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    (tmp_path / "file").write_text("in the way")
    result = invoke("run", "--data", str(data), "--out-dir", str(tmp_path / "file" / "out"))
    assert result.exit_code == 2, result.output
    assert "Not a directory" in result.output and str(tmp_path / "file") in result.output
    assert "Traceback" not in result.output


def test_a_full_disk_mid_batch_is_one_line_and_keeps_what_was_written(scripted, tmp_path,
                                                                     monkeypatch):
    ids, data, server, out = solvable_batch(scripted, tmp_path, 4)
    real = RecordLog.append
    calls = itertools.count()  # next() is atomic: two appends at once cannot both go first

    def append(self, record):
        if next(calls):  # the disk fills after the first record, whoever writes next
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, record)

    monkeypatch.setattr(RecordLog, "append", append)
    result = invoke("run", "--data", str(data), "--out-dir", str(out), "--concurrency", "1",
                    base_url=server.base_url)
    assert result.exit_code == 2, result.output
    assert f"error: cannot write {out}: No space left on device" in result.output
    assert "--resume" in result.output and "Traceback" not in result.output
    [first] = read_records(out / "predictions.jsonl")
    monkeypatch.setattr(RecordLog, "append", real)
    again = invoke("run", "--data", str(data), "--out-dir", str(out), "--resume",
                   base_url=server.base_url)
    assert again.exit_code == 0, again.output
    records = read_records(out / "predictions.jsonl")
    assert records[0] == first and sorted(r["id"] for r in records) == ids


def test_a_full_disk_while_writing_the_manifest_leaves_no_temporary_file(scripted, tmp_path,
                                                                        monkeypatch):
    ids, data, server, out = solvable_batch(scripted, tmp_path, 1)
    real = os.fsync

    def fsync(fd):
        if re.search(r"/manifest\.json\.\w+\.tmp$", os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    result = invoke("run", "--data", str(data), "--out-dir", str(out), base_url=server.base_url)
    assert result.exit_code == 2, result.output
    assert f"cannot write {out / 'manifest.json'}: No space left on device" in result.output
    assert not list(out.glob("manifest.json.*.tmp")) and "Traceback" not in result.output


def test_loaded_not_found_lists_only_unknown_ids():
    loaded = Loaded(problems=[], skipped=[Skipped("a", "r", "not_found"), Skipped("b", "r")])
    assert loaded.not_found == ["a"]
