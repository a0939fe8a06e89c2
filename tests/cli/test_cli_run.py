"""`lcb run` and the seed entry points: messages, exit codes, Ctrl-C and resuming."""

import json
import os
import shlex
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from lcb.cli import app
from lcb.cli.run_cmd import _Entry, _entry_app
from lcb.runs.records import read_records
from lcb.teams.solving import TEAMS
from tests.helpers_runner import (
    MODEL,
    REPO,
    RIGHT,
    entry_argv,
    kill_group,
    marker,
    problem_ids,
    script,
    solvable_batch,
    start_batch,
    subprocess_env,
    wait_for_records,
    write_problems,
)
from tests.scripted_server import failures, message_text, scripted_fixture  # noqa: F401


def invoke(*args: str, base_url: str = "http://127.0.0.1:9/v1", target=app, env_extra=None,
           **kw):
    env = {"VLLM_BASE_URL": base_url, "MODEL_ID": MODEL, **(env_extra or {})}
    return CliRunner().invoke(target, list(args), env=env, **kw)


def test_cli_batch_prints_the_summary_table(scripted, tmp_path):
    ids = problem_ids(3)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [RIGHT], ids[1]: [RIGHT], ids[2]: ["no code"]}))
    out = tmp_path / "out"
    result = invoke("run", "--data", str(data), "--out-dir", str(out), base_url=server.base_url)
    assert result.exit_code == 0, result.output
    for text in ("pass@1", "with extracted code", "difficulty: easy", "platform: atcoder",
                 "prompt tokens", "wall time"):
        assert text in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["n"], summary["solved"], summary["n_extracted"]) == (3, 2, 2)
    assert summary["by_difficulty"]["hard"]["n"] == 1


def test_cli_refuses_to_overwrite_with_a_clear_message(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.jsonl").write_text('{"id": "a", "em": 0}\n')
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    result = invoke("run", "--data", str(data), "--out-dir", str(out))
    assert result.exit_code == 2
    assert "pass --resume" in result.output.lower() and "--out-dir" in result.output


def test_cli_endpoint_down_is_one_message_and_writes_nothing(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    result = invoke("run", "--data", str(data), "--out-dir", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "http://127.0.0.1:9/v1" in result.output and "VLLM_BASE_URL" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_cli_stops_after_consecutive_errors_and_says_how_to_rerun_them(scripted, tmp_path):
    ids = problem_ids(4)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: failures(50, status=400) for qid in ids}))  # no retries
    result = invoke("run", "--data", str(data), "--out-dir", str(tmp_path / "out"),
                    "--concurrency", "1", "--max-consecutive-errors", "2",
                    base_url=server.base_url)
    assert result.exit_code == 1
    assert "2 problems in a row ended in an error" in result.output
    assert f"--out-dir {tmp_path / 'out'} --resume --retry-errors" in result.output


@pytest.mark.parametrize("topology", ["independent", "sequential", "centralized",
                                      "decentralized"])
def test_every_seed_entry_module_parses_the_batch_flags(topology):
    proc = subprocess.run(entry_argv("--help", topology=topology), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--batch" in proc.stdout and "--out-dir" in proc.stdout


@pytest.mark.parametrize("flags", [
    ("--limit", "3"), ("--data", "sample"), ("--release", "release_v2"), ("--revision", "main"),
    ("--strict",), ("--grader", "official"), ("--sandbox", "bwrap"), ("--samples", "2"),
])
def test_entry_point_refuses_batch_flags_without_batch(flags):
    result = invoke(*flags, target=_entry_app, obj=_Entry(topology="single", prog="python -m x"))
    assert result.exit_code == 2 and "add --batch" in result.output
    assert flags[0] in result.output


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_finished_records_and_prints_the_resume_command(scripted, tmp_path,
                                                                        signum):
    ids, data, server, out = solvable_batch(scripted, tmp_path, 8, latency_s=0.4)
    proc = start_batch(server.base_url, data, out)
    try:
        wait_for_records(out / "predictions.jsonl", 2, proc)
        # Ctrl-C reaches the whole foreground group; a scheduler's SIGTERM the main process.
        os.killpg(proc.pid, signum) if signum == signal.SIGINT else proc.send_signal(signum)
        stderr = proc.communicate(timeout=60)[1]
    finally:
        kill_group(proc)
    assert proc.returncode == (130 if signum == signal.SIGINT else 143), stderr
    assert "Interrupted" in stderr and "Resume with:" in stderr
    command = stderr.strip().splitlines()[-1].strip()
    assert command.startswith("python -m topologies.single.lcb.langgraph_lcb --batch")
    assert f"--out-dir {out}" in command and command.endswith("--resume")
    kept = read_records(out / "predictions.jsonl")
    assert 2 <= len(kept) < len(ids)

    argv = shlex.split(command)
    resumed = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, capture_output=True,
                             text=True, env=subprocess_env(server.base_url), timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    records = read_records(out / "predictions.jsonl")
    assert sorted(r["id"] for r in records) == ids
    assert records[: len(kept)] == kept


def test_cli_runs_a_multi_agent_team_with_size_and_format(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"
    result = invoke("run", "--topology", "sequential", "--team-size", "2",
                    "--communication", "semi_structured", "--data", str(data),
                    "--out-dir", str(out), base_url=server.base_url)
    assert result.exit_code == 0, result.output
    records = read_records(out / "predictions.jsonl")
    assert [r["em"] for r in records] == [1, 1]
    assert {r["team_size"] for r in records} == {2}
    assert {r["communication"] for r in records} == {"semi_structured"}
    # coder -> debugger: two model calls per problem, and the manifest keeps the team options
    assert [r["n_llm_calls"] for r in records] == [2, 2]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["team"]["team_size"] == 2


def test_cli_masked_run_calls_only_the_active_agents(scripted, tmp_path):
    ids = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [RIGHT]}))
    result = invoke("run", "--topology", "independent", "--active", "coder_1,coder_3",
                    "--data", str(data), "--out", str(tmp_path / "p.jsonl"),
                    base_url=server.base_url)
    assert result.exit_code == 0, result.output
    (record,) = read_records(tmp_path / "p.jsonl")
    assert record["n_llm_calls"] == 2 and sorted(record["agents_ran"]) == ["coder_1", "coder_3"]


@pytest.mark.parametrize(("args", "message"), [
    (("--topology", "sequential", "--team-size", "3"), "3"),
    (("--topology", "independent", "--active", "nobody"), "nobody"),
    (("--topology", "single", "--team-size", "4"), "one agent"),
    (("--communication", "yaml"), "yaml"),
    (("--grader", "strict"), "'strict'"),
    (("--sandbox", "docker"), "'docker'"),
])
def test_cli_bad_team_options_stop_before_any_work(tmp_path, args, message):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    result = invoke("run", *args, "--data", str(data), "--out-dir", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_run_and_score_offer_the_same_grader_and_sandbox_choices():
    # ... and `lcb score` one more grader: `both` (the default and the official, compared)
    from lcb.grading.pool import GRADERS
    from lcb.sandbox.launch import SANDBOXES

    for command, extra in (("run", ()), ("score", ("both",))):
        result = invoke(command, "--help", terminal_width=200)
        assert result.exit_code == 0, result.output
        assert f"<{'|'.join((*GRADERS, *extra))}>" in result.output
        assert f"<{'|'.join(SANDBOXES)}>" in result.output


def test_the_cli_offers_exactly_the_registered_topologies():
    from lcb.cli.options import TOPOLOGIES
    from lcb.cli.run_cmd import ENTRY_MODULES
    from lcb.optimize.teamrun import TOPOLOGIES as JOB_TOPOLOGIES

    # As sets: another test deletes and restores a TEAMS entry, which moves it to the end.
    assert set(TOPOLOGIES) == set(TEAMS) == set(JOB_TOPOLOGIES) == set(ENTRY_MODULES)
    assert len(TOPOLOGIES) == len(TEAMS)


def test_entry_point_help_names_its_team_and_hides_topology():
    done = subprocess.run(entry_argv("--help", topology="centralized"), capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=subprocess_env("http://127.0.0.1:9/v1"))
    assert done.returncode == 0, done.stderr
    assert "Run the centralized team" in done.stdout and "--topology" not in done.stdout


GENERATION_FLAGS = ("--temperature", "0.5", "--top-p", "0.8", "--max-tokens", "333",
                    "--thinking", "--request-timeout", "7", "--queue-timeout", "70")
NO_GENERATION_ENV = dict.fromkeys(("LCB_TEMPERATURE", "LCB_TOP_P", "LCB_MAX_TOKENS",
                                   "LCB_THINKING", "LCB_REQUEST_TIMEOUT", "LCB_QUEUE_TIMEOUT"))


def problem_bodies(server, ids):
    """The chat requests about the problems `ids` (not the endpoint check's probe)."""
    return [body for body in server.chat_requests()
            if any(marker(qid) in message_text(body) for qid in ids)]


def generation_run(scripted, tmp_path, *args, env=None):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}))
    out = tmp_path / "out"
    result = invoke("run", "--data", str(data), "--out-dir", str(out), *args,
                    base_url=server.base_url, env_extra={**NO_GENERATION_ENV, **(env or {})})
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    return problem_bodies(server, ids), manifest["config"], read_records(out / "predictions.jsonl")


def test_generation_flags_reach_every_request_and_the_manifest(scripted, tmp_path):
    bodies, config, records = generation_run(scripted, tmp_path, *GENERATION_FLAGS)
    assert len(bodies) == 2
    for body in bodies:
        assert (body["temperature"], body["top_p"]) == (0.5, 0.8)
        assert (body["max_completion_tokens"], body["max_tokens"]) == (333, 333)
        assert body["chat_template_kwargs"] == {"enable_thinking": True}
    model = config["model"]
    assert (model["temperature"], model["top_p"], model["max_tokens"]) == (0.5, 0.8, 333)
    assert (model["thinking"], model["timeout_s"], model["queue_timeout_s"]) == (True, 7.0, 70.0)
    assert [r["generation"] for r in records] == [{
        "temperature": 0.5, "top_p": 0.8, "max_tokens": 333, "thinking": True,
        "timeout_s": 7.0, "queue_timeout_s": 70.0}] * 2


def test_generation_env_vars_are_read_and_flags_beat_them(scripted, tmp_path):
    env = {"LCB_TEMPERATURE": "0.6", "LCB_TOP_P": "0.7", "LCB_MAX_TOKENS": "222",
           "LCB_THINKING": "no", "LCB_REQUEST_TIMEOUT": "9"}
    bodies, config, _ = generation_run(scripted, tmp_path, "--temperature", "0.1", env=env)
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (
            0.1, 0.7, 222)
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (config["model"]["temperature"], config["model"]["timeout_s"]) == (0.1, 9.0)
    assert config["model"]["thinking"] is False


def test_without_generation_settings_requests_are_as_before(scripted, tmp_path):
    bodies, config, _ = generation_run(scripted, tmp_path)
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (
            0.2, 0.9, 4096)
        assert body["chat_template_kwargs"] == {"enable_thinking": False}  # vLLM's extras
    assert (config["model"]["thinking"], config["model"]["timeout_s"]) == (None, 120.0)


@pytest.mark.parametrize(("env", "named"), [
    ({"LCB_MAX_TOKENS": "lots"}, "LCB_MAX_TOKENS='lots': expected a whole number"),
    ({"LCB_TOP_P": "1.5"}, "LCB_TOP_P='1.5': top_p must be in (0, 1]"),
    ({"LCB_THINKING": "maybe"}, "LCB_THINKING='maybe'"),
    ({"LCB_REQUEST_TIMEOUT": "0"}, "LCB_REQUEST_TIMEOUT='0': timeout_s must be > 0"),
])
def test_a_bad_generation_env_var_is_named_and_nothing_is_created(tmp_path, env, named):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    result = invoke("run", "--data", str(data), "--out-dir", str(tmp_path / "out"),
                    env_extra={**NO_GENERATION_ENV, **env})
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "named"), [
    (("--top-p", "0"), "--top-p"), (("--temperature", "-1"), "--temperature"),
    (("--max-tokens", "0"), "--max-tokens"), (("--request-timeout", "0"), "--request-timeout"),
    (("--samples", "0"), "--samples"),
    (("--thinking", "--no-vllm-extras"), "--no-vllm-extras switches off"),
])
def test_bad_generation_flags_stop_before_any_work(tmp_path, args, named):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    result = invoke("run", *args, "--data", str(data), "--out-dir", str(tmp_path / "out"),
                    env_extra=NO_GENERATION_ENV)
    assert result.exit_code == 2, result.output
    assert named in result.output and not (tmp_path / "out").exists()


def test_samples_flag_reaches_the_run(scripted, tmp_path):
    _, config, records = generation_run(scripted, tmp_path, "--samples", "3")
    assert config["samples"] == 3
    assert sorted((r["id"], r["sample"]) for r in records) == [
        (qid, s) for qid in problem_ids(2) for s in range(3)]


def test_the_recorded_command_repeats_the_generation_flags(scripted, tmp_path):
    ids = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [RIGHT]}))
    out = tmp_path / "out"
    result = invoke("run", "--data", str(data), "--out-dir", str(out), "--no-thinking",
                    "--top-p", "0.5", base_url=server.base_url, env_extra=NO_GENERATION_ENV)
    assert result.exit_code == 0, result.output
    command = json.loads((out / "manifest.json").read_text())["sessions"][-1]["command"]
    assert "--no-thinking" in command and "--thinking" not in command
    assert command[command.index("--top-p") + 1] == "0.5"
