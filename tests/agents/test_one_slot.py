"""One server, one slot (issue #23, "busy is not down"): `--max-requests` caps an optimizer job's
requests at the endpoint, team runs and reflection calls together; a killed tavo job resumes
and a two-job grid ends against a one-slot scripted server with a queue.

The server answers each request only after a latency longer than the jobs'
`--request-timeout`, and one request at a time: a request that waits for its answer to begin
(in the server's queue, or while the server works) is bounded by the queue timeout, never the
idle one, so nothing times out and nothing is retried.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lcb.agents.llm import ModelGateway
from lcb.agents.usage import CallTag, UsageLedger
from lcb.cli import app
from lcb.grid.spec import load_spec
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.calls import (
    CallJournal,
    CallKind,
    ModelCalls,
    prompt_messages,
    reflection_config,
)
from tests.helpers_agents import model_config
from tests.helpers_grid import grid_env, grid_model, results, small_grid, write_spec
from tests.helpers_methods import FIX
from tests.helpers_optimize import TeamModel, sample_problems
from tests.helpers_planted import RESPONDERS, WRONG, PlantedModel
from tests.helpers_resume import command, environment, kill_after, run_to_end
from tests.optimize.test_tavo import tavo_responder
from tests.scripted_server import scripted_fixture  # noqa: F401

LCB = str(Path(sys.executable).parent / "lcb")
LATENCY_S = 0.1  # each answer's wait before its first byte ...
IDLE_S = "0.05"  # ... is longer than the jobs' --request-timeout


def test_the_optimizer_entry_points_take_max_requests():
    result = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--max-requests" in result.output
    seed = subprocess.run([sys.executable, "-m", "optimizers.protocol.run", "--help"],
                          capture_output=True, text=True, env={**environment("http://h/v1"),
                                                               "COLUMNS": "200"}, check=True)
    assert "--max-requests" in seed.stdout


def test_calls_of_every_kind_and_the_team_share_one_cap_per_endpoint(scripted, tmp_path):
    server = scripted(["fine"], latency_s=0.2)

    async def main() -> None:
        task = model_config(server.base_url, max_concurrent_requests=2)
        team = ModelGateway(task)
        calls = ModelCalls(reflection=reflection_config(task, environ={}), task=task,
                           ledger=BudgetLedger(10), optimizer_seed=0,
                           journal=CallJournal(tmp_path), slots={task.base_urls: team.slots})
        asks = [calls.ask(kind, prompt_messages(f"{kind} {i}"), purpose=f"p{i}")
                for i in range(2) for kind in CallKind]
        rollout = team.call(prompt_messages("team"), tag=CallTag("P", "t", "a", "a", 0),
                            ledger=UsageLedger())
        await asyncio.gather(*asks, rollout)
        await calls.aclose()
        await team.aclose()

    asyncio.run(main())
    assert len(server.chat_requests()) == 7 and server.peak_in_flight == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_tavo_job_resumes_to_the_end_on_one_slot(scripted, tmp_path):
    team = TeamModel(sample_problems(), wrong=WRONG, fixed_by=FIX)
    server = scripted(PlantedModel(team, [tavo_responder(), *RESPONDERS]), slots=1,
                      latency_s=LATENCY_S)
    out, env = tmp_path / "job", environment(server.base_url)
    argv = [*command("tavo", out, budget=9, settings=["train_batch=3"]),
            "--request-timeout", IDLE_S]
    kill_after([*argv, "--max-requests", "3"], out, env, rollouts=4)
    with server.lock:
        server.peak_in_flight = server.in_flight  # count the rerun's requests from here on
    summary = run_to_end([*argv, "--max-requests", "2"], env)
    assert summary["status"] == "complete" and summary["charged"] == 9
    assert server.peak_in_flight <= 2 and server.slots.peak_queued >= 1
    assert not server.script_errors
    sessions = json.loads((out / "job.json").read_text())["provenance"]
    assert [sessions["requests"]["max_in_flight"],
            *(s["requests"]["max_in_flight"] for s in sessions["resumes"])] == [3, 2]
    calls = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len({c["key"] for c in calls}) == len(calls) == 9  # every rollout charged once


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_two_job_grid_ends_on_one_slot_with_two_jobs_at_once(tmp_path):
    from tests.scripted_server import scripted_server

    with scripted_server(grid_model(), slots=1, latency_s=LATENCY_S) as server:
        data = small_grid(server.base_url, methods=["identity"], topologies=["single"])
        data["settings"]["sampling"] = {"request_timeout": float(IDLE_S)}
        path = write_spec(tmp_path, data)
        done = subprocess.run([LCB, "grid", "run", str(path), "--jobs", "2"], env=grid_env(),
                              capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(results(load_spec(path))) == 2
    assert server.slots.peak_queued >= 1 and not server.script_errors
