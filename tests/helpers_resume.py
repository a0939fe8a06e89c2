"""Kill -9 an optimizer job at a seeded random point of its optimize phase and rerun it.

`assert_resumes_to_whole(scripted, tmp_path, method)`: the real command
(`python -m optimizers.protocol.run`) runs in subprocesses against the scripted server of the
calling test, once to the end and, side by side with it, once killed after a seeded random
number (3 to 9) of charged rollouts and rerun. The rerun's `result.json` must equal the
uninterrupted run's, every rollout key must be charged once, and the history must hold the same
entries (kind, bundle, charged). The script is a pure function of each request, so both runs
see the same answers whatever the order.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.helpers_agents import MODEL
from tests.helpers_methods import FIX, REFLECTION_ENV
from tests.helpers_optimize import TeamModel, sample_problems
from tests.helpers_planted import RESPONDERS, WRONG, PlantedModel, Responder


def command(method: str, out: Path, *, budget: int, topology: str = "sequential",
            team_size: int = 2, settings: Sequence[str] = ()) -> list[str]:
    sets = [arg for pair in settings for arg in ("--set", pair)]
    return [sys.executable, "-m", "optimizers.protocol.run", "--method", method, "--topology",
            topology, "--team-size", str(team_size), "--data", "sample", "--budget", str(budget),
            "--seed", "1", "--concurrency", "3", "--out", str(out), *sets]


def environment(base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in REFLECTION_ENV}
    return {**env, "VLLM_BASE_URL": base_url, "MODEL_ID": MODEL}


def run_to_end(argv: list[str], env: dict[str, str]) -> dict:
    return finish(start(argv, env))


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=400)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def charged_lines(out: Path) -> list[dict]:
    path = out / "rollouts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def kill_after(argv: list[str], out: Path, env: dict[str, str], *, rollouts: int) -> None:
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
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


def _history(out: Path) -> list[tuple[Any, ...]]:
    lines = (out / "history.jsonl").read_text().splitlines()
    return [(h["kind"], h["bundle_hash"], h["charged"]) for h in map(json.loads, lines)]


def assert_resumes_to_whole(scripted: Callable[..., Any], tmp_path: Path, method: str, *,
                            budget: int = 30, topology: str = "sequential", team_size: int = 2,
                            settings: Sequence[str] = (),
                            responders: Sequence[Responder] = (),
                            kill_at: int | None = None) -> None:
    """The kill-and-rerun check (module docstring) for `method` on the planted scenario;
    `kill_at` charged rollouts instead of the seeded random point."""
    team = TeamModel(sample_problems(), wrong=WRONG, fixed_by=FIX)
    server = scripted(PlantedModel(team, [*responders, *RESPONDERS]))
    env = environment(server.base_url)

    def argv(name: str) -> list[str]:
        return command(method, tmp_path / name, budget=budget, topology=topology,
                       team_size=team_size, settings=settings)

    whole_run = start(argv("whole"), env)  # beside the killed one: their answers are the same
    at = kill_at or random.Random(f"kill-{method}").randint(3, 9)  # each job charges >= 12
    kill_after(argv("killed"), tmp_path / "killed", env, rollouts=at)
    whole = finish(whole_run)
    total = whole["charged"]
    assert total >= 12 and at <= total - 3, (total, at)  # killed somewhere in the middle
    assert not (tmp_path / "killed" / "result.json").exists()
    resumed = run_to_end(argv("killed"), env)

    def result(name: str) -> dict:
        return json.loads((tmp_path / name / "result.json").read_text())

    assert result("killed") == result("whole")
    assert resumed["charged"] == whole["charged"]
    keys = [line["key"] for line in charged_lines(tmp_path / "killed")]
    assert len(keys) == len(set(keys)) == total  # every rollout charged once
    assert _history(tmp_path / "killed") == _history(tmp_path / "whole")
    assert not server.script_errors, server.script_errors[0]
