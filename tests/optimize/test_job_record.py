"""What a job records and keeps (job.json, the pinned seed bundle, provenance across sessions,
`opt_tests`) and how the entry point stops on SIGTERM; against the scripted server."""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from lcb.agents import prompts
from lcb.agents.prompts import bundle_hashes, seed_bundle
from lcb.optimize import methods, provenance
from lcb.optimize.artifacts import ArtifactError, JobSpec
from lcb.optimize.conformance import load_prompt_manifest
from lcb.optimize.job import JobPhase, run_job
from lcb.optimize.jobdir import open_job_dir
from lcb.optimize.journal import ROLLOUT_LOG
from lcb.optimize.methods import resolve_settings
from lcb.optimize.settings import SettingsError
from tests.helpers_agents import MODEL, model_config
from tests.helpers_optimize import Probe, TeamModel, job_config, sample_problems
from tests.scripted_server import Reply, scripted_fixture  # noqa: F401

SAMPLE_UNMET = {"budget", "reflection_model", "data_source", "revision", "test_split_rule",
                "split_sizes", "split_contents"}


def run(config):
    return asyncio.run(run_job(config))


def job_json(out):
    return json.loads((out / "job.json").read_text())


@pytest.fixture
def prompt_copy(tmp_path, monkeypatch):
    """The shipped prompts copied to a folder the test may edit."""
    root = tmp_path / "prompts"
    shutil.copytree(prompts.PROMPTS_ROOT, root)
    monkeypatch.setattr(prompts, "PROMPTS_ROOT", root)
    return root


def test_job_json_records_the_job_and_its_judgement(scripted, tmp_path):
    out = tmp_path / "job"
    server = scripted(TeamModel(sample_problems()))
    run(job_config(server.base_url, out, model=model_config(server.base_url,
                                                            api_key="sk-do-not-write")))
    data = job_json(out)
    unmet = {req["name"] for req in data["conformance"] if not req["met"]}
    assert unmet == SAMPLE_UNMET and data["conformant"] is False
    assert {req["name"]: req["seen"] for req in data["conformance"]}["test_split_rule"] == (
        "first_rows")  # a local set whose test split is its first rows
    assert len(data["deviations"]) == len(SAMPLE_UNMET)
    assert (data["reflection_model"], data["grader"], data["sandbox"]) == (MODEL, "default",
                                                                          "process")
    assert (data["data"], data["release"], data["revision"]) == ("sample", "release_v1", None)
    assert (data["opt_tests"], data["method_settings"]) == (None, {})
    assert data["reflection_sampling"] == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 4096}
    seed = seed_bundle("single", ("solver",))
    assert json.loads((out / "seed_bundle.json").read_text()) == seed
    assert data["seed_prompts"] == bundle_hashes(seed) == load_prompt_manifest()["single"]
    assert set(data["provenance"]) == {"lcb", "versions", "grader", "sandbox", "endpoints",
                                       "sampling", "requests", "time"}
    assert data["provenance"]["requests"] == {"max_in_flight": 16, "request_timeout_s": 5.0,
                                              "queue_timeout_s": 1800.0}
    assert data["provenance"]["endpoints"]["task"] == {"base_url": server.base_url,
                                                       "model_id": MODEL}
    assert "sk-do-not-write" not in (out / "job.json").read_text()


def test_a_rerun_after_a_commit_resumes_and_records_the_session(scripted, tmp_path,
                                                                monkeypatch):
    out = tmp_path / "job"
    server = scripted(TeamModel(sample_problems()))
    run(job_config(server.base_url, out, phase=JobPhase.OPTIMIZE))
    first = job_json(out)["provenance"]
    later = {"commit": "f" * 40, "dirty": False}
    monkeypatch.setattr(provenance, "git_state", lambda: later)
    fewer = model_config(server.base_url, max_concurrent_requests=1)  # not a setting: resumes
    summary = run(job_config(server.base_url, out, model=fewer))
    assert summary["status"] == "complete" and summary["phases_run"] == ["validate", "test"]
    kept = job_json(out)["provenance"]
    assert kept["lcb"] == first["lcb"] and kept["time"] == first["time"]
    assert [session["lcb"] for session in kept["resumes"]] == [later]
    assert [session["requests"]["max_in_flight"] for session in kept["resumes"]] == [1]


def test_other_method_settings_are_another_job(tmp_path):
    base = dict(method="gepa", topology="single", model="m", seed=0)
    open_job_dir(tmp_path, JobSpec(**base, method_settings=resolve_settings("gepa")))
    changed = resolve_settings("gepa", {"minibatch": 4})
    with pytest.raises(ArtifactError, match="method_settings"):
        open_job_dir(tmp_path, JobSpec(**base, method_settings=changed))
    other_session = JobSpec(**base, method_settings=resolve_settings("gepa"),
                            provenance={"lcb": {"commit": "abc", "dirty": True}})
    assert open_job_dir(tmp_path, other_session) == tmp_path  # provenance is not a setting


def test_a_bad_method_setting_stops_the_job_before_any_work(tmp_path):
    config = job_config("http://127.0.0.1:9/v1", tmp_path / "job", method="gepa",
                        method_settings={"reflection.nope": 1})
    with pytest.raises(SettingsError, match="unknown setting 'reflection.nope'"):
        run(config)
    assert not (tmp_path / "job").exists()


def test_a_changed_seed_prompt_is_refused_after_the_first_phase(scripted, tmp_path,
                                                                prompt_copy):
    out = tmp_path / "job"
    server = scripted(TeamModel(sample_problems()))
    run(job_config(server.base_url, out, phase=JobPhase.OPTIMIZE))
    solver = prompt_copy / "single" / "lcb" / "solver.txt"
    shipped = solver.read_text()
    solver.write_text(shipped + "\nAlways answer in French.\n")
    with pytest.raises(ArtifactError) as caught:
        run(job_config(server.base_url, out, phase=JobPhase.VALIDATE))
    assert "role 'solver'" in str(caught.value) and str(solver) in str(caught.value)
    assert not (out / "selection.json").exists()
    solver.write_text(shipped + "\n\n")  # the same text again (surrounding whitespace aside)
    assert run(job_config(server.base_url, out))["status"] == "complete"


def test_an_edited_prompt_makes_a_new_job_non_conformant(scripted, tmp_path, prompt_copy):
    solver = prompt_copy / "single" / "lcb" / "solver.txt"
    solver.write_text(solver.read_text() + "\nThink in small steps.")
    out = tmp_path / "job"
    server = scripted(TeamModel(sample_problems()))
    run(job_config(server.base_url, out, phase=JobPhase.OPTIMIZE))
    unmet = {req["name"]: req for req in job_json(out)["conformance"] if not req["met"]}
    assert set(unmet) == SAMPLE_UNMET | {"seed_prompts"}
    assert list(unmet["seed_prompts"]["seen"]) == ["solver"]


def test_opt_tests_limit_the_optimize_rollouts_only(scripted, tmp_path, monkeypatch):
    out = tmp_path / "job"
    probe = Probe(passes=1)
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", lambda: probe)
    server = scripted(TeamModel(sample_problems()))
    run(job_config(server.base_url, out, method="probe", budget=3, opt_tests=1))
    assert job_json(out)["opt_tests"] == 1
    rollouts = [json.loads(line) for line in (out / ROLLOUT_LOG).read_text().splitlines()]
    assert len(rollouts) == 3 and {r["tests_run"] for r in rollouts} == {1}
    evals = [json.loads(line) for line in (out / "evals" / "validate_seed.jsonl").read_text()
             .splitlines()]
    assert all(r["tests_run"] == r["total"] > 1 for r in evals)  # validation: every test


@pytest.mark.slow
def test_sigterm_stops_the_entry_point_like_ctrl_c(scripted, tmp_path):
    stalled = {"on": True}
    model = TeamModel(sample_problems())

    def script(request):
        if stalled["on"] and model.problem_of(request) is not None:
            return Reply.stall(30)
        return model(request)

    server = scripted(script)
    out = tmp_path / "job"
    env = {**os.environ, "VLLM_BASE_URL": server.base_url, "MODEL_ID": MODEL}
    argv = [sys.executable, "-m", "optimizers.protocol.run", "--method", "identity",
            "--topology", "single", "--out", str(out), "--data", "sample", "--budget", "3"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not any(model.problem_of(r) for r in server.chat_requests()):
        assert proc.poll() is None and time.monotonic() < deadline, "no team request was sent"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    (line,) = stdout.splitlines()
    stopped = json.loads(line)
    assert (stopped["status"], stopped["signal"], stopped["out"]) == ("interrupted", "SIGTERM",
                                                                      str(out))
    assert "rerun the same command" in stopped["resume"]
    assert "Traceback" not in stderr
    stalled["on"] = False
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "complete"
