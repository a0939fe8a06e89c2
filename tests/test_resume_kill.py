"""Kill -9 an optimizer job at a random point of its optimize phase, rerun the same command:
the final `result.json` equals an uninterrupted run's and no rollout is charged twice.

The jobs are the real command (`python -m optimizers.protocol.run`) in subprocesses against
the scripted server of this test process; the script is a pure function of each request, so an
uninterrupted run and a killed-and-resumed one see the same answers whatever the order.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers_agents import MODEL
from tests.helpers_methods import FIX, REFLECTION_ENV
from tests.helpers_optimize import TeamModel, sample_problems
from tests.helpers_planted import RESPONDERS, WRONG, PlantedModel
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(600)
BUDGET = 30


def command(method: str, out) -> list[str]:
    return [sys.executable, "-m", "optimizers.protocol.run", "--method", method, "--topology",
            "sequential", "--team-size", "2", "--data", "sample", "--budget", str(BUDGET),
            "--seed", "1", "--concurrency", "3", "--out", str(out)]


def environment(base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in REFLECTION_ENV}
    return {**env, "VLLM_BASE_URL": base_url, "MODEL_ID": MODEL}


def run_to_end(method, out, env) -> dict:
    done = subprocess.run(command(method, out), env=env, capture_output=True, text=True,
                          timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def charged_lines(out) -> list[dict]:
    path = out / "rollouts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def kill_after(method, out, env, *, rollouts: int) -> None:
    process = subprocess.Popen(command(method, out), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while len(charged_lines(out)) < rollouts:
            assert process.poll() is None, "the job ended before the kill"
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the job and every process it started
        process.wait()


@pytest.mark.parametrize("method", ["gepa", "mipro"])
def test_a_killed_job_resumes_to_the_uninterrupted_result(scripted, tmp_path, method):
    team = TeamModel(sample_problems(), wrong=WRONG, fixed_by=FIX)
    server = scripted(PlantedModel(team, RESPONDERS))
    env = environment(server.base_url)
    whole = run_to_end(method, tmp_path / "whole", env)
    total = whole["charged"]
    assert total >= 12  # enough to kill somewhere in the middle
    at = random.Random(f"kill-{method}").randint(3, total - 3)
    kill_after(method, tmp_path / "killed", env, rollouts=at)
    assert not (tmp_path / "killed" / "result.json").exists()
    resumed = run_to_end(method, tmp_path / "killed", env)

    def result(name):
        return json.loads((tmp_path / name / "result.json").read_text())

    assert result("killed") == result("whole")
    assert resumed["charged"] == whole["charged"]
    keys = [line["key"] for line in charged_lines(tmp_path / "killed")]
    assert len(keys) == len(set(keys)) == total  # every rollout charged once
    history = [json.loads(line) for line in
               (tmp_path / "killed" / "history.jsonl").read_text().splitlines()]
    whole_history = [json.loads(line) for line in
                     (tmp_path / "whole" / "history.jsonl").read_text().splitlines()]
    assert [(h["kind"], h["bundle_hash"], h["charged"]) for h in history] == [
        (h["kind"], h["bundle_hash"], h["charged"]) for h in whole_history]
