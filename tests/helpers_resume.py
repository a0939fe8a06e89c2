"""Stop an optimizer job in the middle of its optimize phase and rerun it: the rerun must end
where an uninterrupted run ends.

Two checks, one per depth:
- `assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, method)`: in-process.
  The job runs once to the end, then again with the rollout journal raising `Interrupted` (not an
  `Exception`: nothing in lcb catches it) right after its k-th charged line, then a third time
  on that folder. It checks a method's own save and restore (retrace or fast-forward) without
  starting Python three times; the methods' test files use it.
- `assert_resumes_to_whole(scripted, tmp_path, method)`: the real kill -9, described below; one
  test per resume mechanism (retrace: gepa, fast-forward: tavo) runs it.

`assert_resumes_to_whole(scripted, tmp_path, method)`: the real command
(`python -m optimizers.protocol.run`) runs in subprocesses against the scripted server of the
calling test, once to the end and, side by side with it, once killed after a seeded random
number (3 to 9) of charged rollouts and rerun. The rerun's `result.json` must equal the
uninterrupted run's, every rollout key must be charged once, and the history must hold the same
entries (kind, bundle, charged). The script is a pure function of each request, so both runs
see the same answers whatever the order.
"""

from __future__ import annotations

import asyncio
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

from lcb.optimize.job import run_job
from lcb.optimize.journal import RolloutJournal
from lcb.optimize.settings import parse_assignments
from tests.helpers_agents import MODEL
from tests.helpers_methods import FIX, REFLECTION_ENV
from tests.helpers_optimize import TeamModel, job_config, sample_problems
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


def journal_lines(out: Path) -> list[dict]:
    """The complete lines of the job's rollout journal: charged rollouts and free coalitions."""
    path = out / "rollouts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def kill_after(argv: list[str], out: Path, env: dict[str, str], *, rollouts: int) -> None:
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while len(journal_lines(out)) < rollouts:
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

    assert resumed["charged"] == whole["charged"]
    _assert_same_job(tmp_path / "killed", tmp_path / "whole", total)
    assert not server.script_errors, server.script_errors[0]


class Interrupted(BaseException):
    """The in-process stand-in for a kill: a BaseException, so no handler in lcb swallows it."""


def _interrupt_after(monkeypatch: Any, rollouts: int) -> None:
    """Make the rollout journal raise `Interrupted` once it holds `rollouts` lines; a
    rollout finishing after that is never written (as after a kill)."""
    append = RolloutJournal.append

    def appending(journal: RolloutJournal, rollout: Any, *, charged: int) -> dict[str, Any]:
        if len(journal) >= rollouts:
            raise Interrupted(f"stopped after {rollouts} charged rollouts")
        line = append(journal, rollout, charged=charged)
        if len(journal) >= rollouts:
            raise Interrupted(f"stopped after {rollouts} charged rollouts")
        return line

    monkeypatch.setattr(RolloutJournal, "append", appending)


def assert_interrupted_resumes_to_whole(scripted: Callable[..., Any], tmp_path: Path,
                                        monkeypatch: Any, method: str, *, budget: int = 30,
                                        topology: str = "sequential", team_size: int = 2,
                                        settings: Sequence[str] = (),
                                        responders: Sequence[Responder] = (),
                                        kill_at: int | None = None) -> None:
    """The in-process check (module docstring) for `method` on the planted scenario, with the
    same job as `assert_resumes_to_whole` (seed 1, concurrency 3, `settings` as `--set`)."""
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    team = TeamModel(sample_problems(), wrong=WRONG, fixed_by=FIX)
    server = scripted(PlantedModel(team, [*responders, *RESPONDERS]))

    def job(name: str) -> dict:
        config = job_config(server.base_url, tmp_path / name, method=method, budget=budget,
                            topology=topology, team_size=team_size, seed=1, concurrency=3,
                            method_settings=parse_assignments(settings))
        return asyncio.run(run_job(config))

    whole = job("whole")
    total, lines = whole["charged"], len(journal_lines(tmp_path / "whole"))
    at = kill_at or random.Random(f"kill-{method}").randint(3, 9)
    assert total >= 12 and at <= lines - 3, (total, lines, at)  # stopped in the middle
    with monkeypatch.context() as patch:
        _interrupt_after(patch, at)
        try:
            job("killed")
        except Interrupted:
            pass
        else:
            raise AssertionError(f"the job ended before its {at}th charged rollout")
    assert len(journal_lines(tmp_path / "killed")) == at
    assert not (tmp_path / "killed" / "result.json").exists()
    resumed = job("killed")
    assert resumed["charged"] == total
    _assert_same_job(tmp_path / "killed", tmp_path / "whole", total)
    assert not server.script_errors, server.script_errors[0]


def _assert_same_job(resumed: Path, whole: Path, total: int) -> None:
    """The resumed folder ends as the whole one: result.json, history, each key charged once."""
    assert (json.loads((resumed / "result.json").read_text())
            == json.loads((whole / "result.json").read_text()))
    lines = journal_lines(resumed)
    keys = [line["key"] for line in lines]
    assert len(keys) == len(set(keys))  # every rollout run once
    assert sum(not line["free"] for line in lines) == total  # and charged once
    assert sorted(keys) == sorted(line["key"] for line in journal_lines(whole))
    assert _history(resumed) == _history(whole)
