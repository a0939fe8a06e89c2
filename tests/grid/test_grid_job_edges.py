"""The corners of running one grid job: state that outlives an attempt, a runner that died, a pid
used again, a stop that arrives mid-retry, and a Slurm task whose result is slow to show.
Each is a real `run_job` (or `GridTask`) on a small Python program; no cluster is needed."""

import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from lcb.grid import jobrun, slurm
from lcb.grid.jobrun import run_job
from lcb.grid.limits import JobPolicy, grid_tokens, retry_wait
from lcb.grid.plan import plan
from lcb.grid.slurm_view import TaskState
from lcb.grid.spec import SpecError, parse_spec
from lcb.grid.state import job_status, log_path, process_start, read_state, write_state
from tests.helpers_grid import small_grid

URL = "http://127.0.0.1:9/v1"


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.setattr(jobrun, "usable_endpoints", lambda job, key, **_: ([URL], {}))
    spec = parse_spec(small_grid(URL, methods=["identity"], topologies=["single"], seeds=[0]),
                      base=tmp_path)
    return plan(spec)[0]


def _log(job) -> str:
    path = log_path(job)
    return path.read_text() if path.exists() else ""


def with_code(job, code: str):
    return dataclasses.replace(job, argv=(sys.executable, "-c", code))


def test_a_jobs_spend_outlives_each_attempts_state(job):
    write_state(job, state="failed", tokens=900, calls=3)
    write_state(job, state="requeued")  # a checkpoint's state
    assert read_state(job)["tokens"] == 900 and grid_tokens(job.root) == 900
    ready = job.root / "ready"
    seen = []

    def look_while_it_runs():
        while not ready.exists():
            time.sleep(0.02)
        seen.append((read_state(job)["state"], grid_tokens(job.root)))

    watcher = threading.Thread(target=look_while_it_runs, daemon=True)
    watcher.start()
    run_job(with_code(job, f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); "
                           "time.sleep(0.5)"))  # exits 0 without its done file: failed
    watcher.join(timeout=10)
    assert seen == [("running", 900)]  # the attempt's state keeps the spend
    assert read_state(job)["state"] == "failed" and read_state(job)["tokens"] == 900


def test_a_job_that_finished_while_its_dead_runner_stopped_is_not_run_again(job):
    done = job.out / job.done_file
    code = (f"import pathlib, time; time.sleep(0.5); p = pathlib.Path({str(done)!r}); "
            "p.parent.mkdir(parents=True, exist_ok=True); p.write_text('{}')")
    orphan = subprocess.Popen([sys.executable, "-c", code])
    write_state(job, state="running", pid=orphan.pid, host=os.uname().nodename,
                pid_start=process_start(orphan.pid), attempts=1)
    outcome = run_job(job)  # the lock is free: its runner died, its job is finishing
    orphan.wait()
    assert outcome.status == "skipped" and outcome.reason == "done"
    assert read_state(job)["attempts"] == 1  # never launched again


def test_a_pid_used_again_by_another_process_is_not_the_job(job):
    write_state(job, state="running", pid=1, host=os.uname().nodename, pid_start=-5)
    assert job_status(job) == "pending"  # pid 1 lives, but started at another time
    write_state(job, state="running", pid=1, host=os.uname().nodename,
                pid_start=process_start(1))
    assert job_status(job) == "running"


def test_a_stop_during_the_retry_wait_launches_nothing_more(job):
    job = with_code(job, "import sys; sys.exit(1)")
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    outcome = run_job(job, stop, JobPolicy(retries=3, retry_wait_s=30))
    assert time.monotonic() - started < 10
    assert outcome.status == "skipped" and read_state(job)["attempts"] == 1


def test_a_job_stopped_from_outside_while_the_grid_stops_is_interrupted_not_retried(job):
    ready = job.root / "ready"
    job = with_code(job, f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); "
                         "time.sleep(60)")
    stop = threading.Event()

    def stop_like_ctrl_c():  # the job gets the signal before the grid marks it stopped
        while not ready.exists():
            time.sleep(0.02)
        stop.set()
        os.kill(read_state(job)["pid"], signal.SIGTERM)

    threading.Thread(target=stop_like_ctrl_c, daemon=True).start()
    outcome = run_job(job, stop, JobPolicy(retries=3, retry_wait_s=0.01))
    assert outcome.status == "interrupted" and outcome.retries == 0
    assert read_state(job)["state"] == "interrupted" and read_state(job)["attempts"] == 1


def test_slurms_sigterm_during_a_retry_wait_stops_the_task(job, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.setattr(slurm, "ENDED_WAIT_S", 0.1)
    job = with_code(job, "import sys; sys.exit(1)")

    def sigterm_in_the_wait():
        deadline = time.monotonic() + 30
        while "retry 1 of 3" not in _log(job) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=sigterm_in_the_wait, daemon=True).start()
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    outcome = slurm.GridTask(JobPolicy(retries=3, retry_wait_s=2))(job)
    assert time.monotonic() - started < 10 and outcome.status == "skipped"
    assert read_state(job)["attempts"] == 1  # nothing launched after the SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_completed_task_gets_time_for_its_result_to_show(tmp_path, monkeypatch):
    states = {"7_0": TaskState("COMPLETED", ""), "7_1": TaskState("CANCELLED", "")}
    monkeypatch.setattr(slurm, "task_states", lambda ids: states)
    tasks = [SimpleNamespace(job_id=task, paths=SimpleNamespace(
        result_pickle=tmp_path / f"{task}.pkl", stderr=tmp_path / f"{task}.err"))
        for task in states]
    pairs = [(SimpleNamespace(key=f"k{i}"), task) for i, task in enumerate(tasks)]
    outcomes, ended_at = [], {}
    options = SimpleNamespace(on_outcome=lambda outcome: None)
    assert slurm._drop_dead(pairs, ended_at, outcomes, options) == pairs  # first look
    for task in ended_at:
        ended_at[task] -= slurm.POLL_S  # a poll later
    left = slurm._drop_dead(pairs, ended_at, outcomes, options)
    assert left == pairs[:1] and [o.key for o in outcomes] == ["k1"]
    assert "ended CANCELLED without a result" in outcomes[0].reason
    ended_at["7_0"] -= slurm.RESULT_GRACE_S
    (tasks[0].paths.result_pickle).write_bytes(b"")  # it shows up: waited for, not failed
    assert slurm._drop_dead(pairs[:1], ended_at, outcomes, options) == pairs[:1]


def test_limits_refuse_what_is_not_a_finite_amount(tmp_path):
    for bad in ({"time_limit_s": math.nan}, {"deadline": math.inf}, {"retry_wait_s": -1},
                {"token_budget": 0}):
        with pytest.raises(ValueError):
            JobPolicy(**bad)
    assert retry_wait(JobPolicy(retry_wait_s=1), 5000) == 1800  # no overflow, capped
    with pytest.raises(SpecError, match="limits.retries"):
        parse_spec(small_grid(URL, limits={"retries": True}), base=tmp_path)
