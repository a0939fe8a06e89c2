"""`lcb optimize --from DIR/job.json` (issue #25): a job rerun from what its job.json records,
in process through the real command against the scripted server."""

import json

import pytest
from typer.testing import CliRunner

from lcb.cli import app
from lcb.cli.rerun import expand_from, job_flags
from lcb.optimize.artifacts import JobSpec, read_model
from tests.helpers_agents import MODEL
from tests.helpers_methods import REFLECTION_ENV
from tests.helpers_optimize import TeamModel, sample_problems
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.slow  # whole optimizer jobs

FIRST = ["optimize", "--method", "gepa", "--topology", "single", "--seed", "2", "--data",
         "sample", "--budget", "10", "--temperature", "0.5", "--selection", "train",
         "--feedback", "verdict", "--set", "minibatch=2", "--concurrency", "2"]


def lcb(base_url, *args):
    env = {"VLLM_BASE_URL": base_url, "MODEL_ID": MODEL, **dict.fromkeys(REFLECTION_ENV)}
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def first_job(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))
    done = lcb(server.base_url, *FIRST, "--out", str(tmp_path / "first"))
    assert done.exit_code == 0, done.output
    return server, tmp_path / "first"


def test_a_job_rerun_from_its_job_json_has_the_same_settings_and_result(first_job, tmp_path):
    server, first = first_job
    done = lcb(server.base_url, "optimize", "--from", str(first / "job.json"), "--out",
               str(tmp_path / "again"))
    assert done.exit_code == 0, done.output
    was, now = (read_model(d / "job.json", JobSpec) for d in (first, tmp_path / "again"))
    assert now.settings() == was.settings()  # method, data, sampling, seeds, variants, settings
    assert (now.selection, now.feedback, now.seed, now.temperature) == ("train", "verdict", 2,
                                                                        0.5)
    assert now.method_settings["minibatch"] == 2
    results = [json.loads((d / "result.json").read_text()) for d in (first, tmp_path / "again")]
    assert results[0]["items"] == results[1]["items"]


def test_without_out_it_is_the_same_job_and_flags_given_win(first_job, tmp_path):
    server, first = first_job
    done = lcb(server.base_url, "optimize", "--from", str(first / "job.json"))
    assert done.exit_code == 0, done.output
    assert json.loads(done.output.splitlines()[-1])["phases_run"] == []  # it was done
    flags = expand_from(["--from", str(first / "job.json"), "--seed", "0"])
    assert flags[-2:] == ["--seed", "0"] and flags[flags.index("--out") + 1] == str(first)
    assert ["--splits", str(first / "splits.json")] == flags[flags.index("--splits"):][:2]


def test_a_file_that_is_not_a_job_or_another_reflection_model_is_refused(first_job, tmp_path,
                                                                          monkeypatch):
    server, first = first_job
    (tmp_path / "x.json").write_text("{}")
    done = lcb(server.base_url, "optimize", "--from", str(tmp_path / "x.json"))
    assert done.exit_code == 2 and "not a job's job.json" in done.output
    monkeypatch.setenv("REFLECTION_MODEL_ID", "another/model")
    with pytest.raises(ValueError, match="set REFLECTION_MODEL_ID=scripted-model"):
        job_flags(first / "job.json")
    with pytest.raises(ValueError, match="more than once"):
        expand_from(["--from", "a", "--from", "b"])


def test_the_jobs_folder_works_and_a_folder_without_one_is_named(first_job, tmp_path):
    server, first = first_job
    flags = expand_from(["--from", str(first)])
    assert flags[flags.index("--out") + 1] == str(first)
    (tmp_path / "empty").mkdir()
    done = lcb(server.base_url, "optimize", "--from", str(tmp_path / "empty"))
    assert done.exit_code == 2 and "not a job's job.json" in done.output
    assert "Traceback" not in done.output


def test_a_job_run_below_its_minimum_reruns_with_the_same_permission(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))
    args = [*FIRST, "--out", str(tmp_path / "small")]
    args[args.index("--budget") + 1] = "4"
    assert lcb(server.base_url, *args).exit_code == 2  # below gepa's minimum: refused
    done = lcb(server.base_url, *args, "--allow-small-budget")
    assert done.exit_code == 0, done.output
    assert read_model(tmp_path / "small" / "job.json", JobSpec).allow_small_budget
    assert "--allow-small-budget" in job_flags(tmp_path / "small" / "job.json")
