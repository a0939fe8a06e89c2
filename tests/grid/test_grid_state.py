"""The state the grid keeps beside its jobs: how a status is read from it, and how `run_job`
guards a job (its lock, the grid's stop, an error of its own) and an executor its start."""

import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time

import pytest

from lcb.grid import jobrun
from lcb.grid.executors import ExecutorUnavailable, RunOptions, run_ray
from lcb.grid.jobrun import run_job
from lcb.grid.plan import plan
from lcb.grid.spec import parse_spec
from lcb.grid.state import (
    STALE_S,
    interrupted,
    is_done,
    job_lock,
    job_status,
    log_path,
    read_state,
    state_path,
    write_state,
)
from tests.helpers_grid import small_grid

URL = "http://127.0.0.1:9/v1"


def one_job(tmp_path, **overrides):
    fields = {"methods": ["identity"], "topologies": ["single"], "seeds": [0], **overrides}
    spec = parse_spec(small_grid(URL, **fields), base=tmp_path)
    return plan(spec)[0]


def run_grid_job(tmp_path):
    return one_job(tmp_path, kind="run", methods=[], settings={"data": "sample", "limit": 2})


def test_a_job_is_done_by_its_own_result_whatever_the_state_says(tmp_path):
    job = one_job(tmp_path)
    assert job_status(job) == "pending" and not interrupted(job)
    write_state(job, state="failed", rc=1)
    assert job_status(job) == "failed"
    job.out.mkdir(parents=True)
    (job.out / "job.json").write_text("{}")
    write_state(job, state="running", pid=os.getpid(), host=socket.gethostname())
    assert job_status(job) == "running"  # this process is alive
    write_state(job, state="running", pid=2**22 + 12345, host=socket.gethostname())
    assert job_status(job) == "pending" and interrupted(job)  # its process is gone
    (job.out / "result.json").write_text("{}")
    assert job_status(job) == "done"


@pytest.mark.parametrize("text", ["", '{"baseline": 0.5, "deplo', "[]", "null"])
def test_an_empty_or_truncated_result_is_not_done(tmp_path, text):
    job = one_job(tmp_path)
    job.out.mkdir(parents=True)
    (job.out / "result.json").write_text(text)
    assert not is_done(job) and job_status(job) == "pending"


def test_a_run_batch_cut_short_is_pending_until_its_summary_says_complete(tmp_path):
    job = run_grid_job(tmp_path)
    job.out.mkdir(parents=True)
    summary = job.out / "summary.json"
    summary.write_text(json.dumps({"n": 1, "em": 0.0, "complete": False}))  # lcb run on Ctrl-C
    write_state(job, state="interrupted", rc=-15)
    assert job_status(job) == "pending" and interrupted(job)
    summary.write_text('{"n": 2, "complete": tr')
    assert job_status(job) == "pending"
    summary.write_text(json.dumps({"n": 2, "em": 0.5, "complete": True}))
    assert job_status(job) == "done"


def test_a_job_running_on_another_host_is_gone_once_its_heartbeat_is_stale(tmp_path):
    job = one_job(tmp_path)
    write_state(job, state="running", pid=1, host="another-node", attempts=3)
    assert job_status(job) == "running"
    old = time.time() - STALE_S - 1
    os.utime(state_path(job), (old, old))
    assert job_status(job) == "pending"
    assert write_state(job, state="failed")["attempts"] == 3  # attempts carried over


def test_a_job_whose_lock_is_taken_is_skipped_without_a_launch(tmp_path):
    job = one_job(tmp_path)
    with job_lock(job) as mine:
        assert mine
        outcome = run_job(job)  # another grid on the same folder would get this
    assert outcome.status == "skipped" and "running elsewhere" in outcome.reason
    assert not job.out.exists() and not log_path(job).exists() and read_state(job) == {}
    with job_lock(job) as mine:
        assert mine  # released


def passing_check(monkeypatch):
    monkeypatch.setattr(jobrun, "usable_endpoints", lambda job, key, **_: ([URL], {}))


def test_a_stopped_grid_starts_no_job_past_its_check(tmp_path, monkeypatch):
    passing_check(monkeypatch)
    job = one_job(tmp_path)
    stop = threading.Event()
    stop.set()  # the grid stopped while this job's endpoints were being checked
    outcome = run_job(job, stop)
    assert outcome.status == "skipped" and outcome.reason == "the grid was stopped"
    assert not job.out.exists() and read_state(job).get("state") != "running"


def test_an_error_starting_a_job_is_that_job_failing(tmp_path, monkeypatch):
    passing_check(monkeypatch)
    job = one_job(tmp_path)
    job = dataclasses.replace(job, argv=(str(tmp_path / "no-such-program"),))
    outcome = run_job(job)  # Popen raises FileNotFoundError: recorded, not raised
    assert outcome.status == "failed" and "FileNotFoundError" in outcome.reason
    assert read_state(job)["state"] == "failed" and job_status(job) == "failed"


def test_a_ray_that_cannot_start_is_an_unavailable_executor(tmp_path, monkeypatch):
    class NoRay:
        def init(self, **kwargs):
            raise ConnectionError("could not reach ray://head:10001\nTimed out")

    from lcb.grid import ray_tasks

    monkeypatch.setattr(ray_tasks, "_ray", NoRay)
    job = one_job(tmp_path)
    spec = parse_spec(small_grid(URL), base=tmp_path)
    with pytest.raises(ExecutorUnavailable, match="cannot start or reach Ray: Timed out"):
        run_ray([job], spec, RunOptions(address="ray://head:10001"))


def test_a_job_deaf_to_sigterm_is_killed_after_the_grace_and_is_interrupted(tmp_path,
                                                                            monkeypatch):
    passing_check(monkeypatch)
    ready = tmp_path / "ready"
    code = ("import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")
    job = dataclasses.replace(one_job(tmp_path), argv=(sys.executable, "-c", code))
    ended = []
    worker = threading.Thread(target=lambda: ended.append(run_job(job)))
    worker.start()
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert jobrun.stop_running(0.3) == 1
    worker.join(timeout=10)
    (outcome,) = ended
    assert outcome.status == "interrupted" and outcome.rc == -signal.SIGKILL
    assert read_state(job)["state"] == "interrupted" and job_status(job) == "pending"
