"""Running the small grid for real (subprocess jobs against the scripted server on 127.0.0.1).

- submitit's local executor runs the whole grid (an array of real processes, no Slurm): the
  reference result. Its model lists a dead endpoint first: every job drops it after the check.
- The local executor's grid is killed mid-way (kill -9 of the grid's process group) and rerun:
  finished jobs are not run again (their result.json untouched, one attempt each), the
  interrupted ones resume (the records they had appended are kept), and the final aggregate
  equals the reference's.
- A job whose endpoints all fail their check is not started; status names it and its log.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lcb.cli import app
from lcb.grid.executors import GridInterrupted, RunOptions, run_local
from lcb.grid.jobrun import run_job
from lcb.grid.plan import plan
from lcb.grid.report import report
from lcb.grid.spec import load_spec
from lcb.grid.state import interrupted, job_status, read_state
from lcb.grid.status import grid_status, render
from tests.helpers_grid import (
    aggregate_view,
    dead_url,
    grid_env,
    journal,
    result_view,
    results,
    sleeper_job,
    small_grid,
    write_spec,
)

LCB = str(Path(sys.executable).parent / "lcb")


@pytest.mark.slow
def test_submitit_runs_the_grid_as_an_array_of_real_jobs(reference, server):
    spec = load_spec(reference)
    assert grid_status(spec, plan(spec))["total"] == {"done": 8, "running": 0, "failed": 0,
                                                      "pending": 0}
    assert sorted(p.name for p in (spec.root / ".grid/sub").iterdir())  # submitit's folders
    for job in plan(spec):
        log = (spec.root / ".grid/logs" / f"{job.slug}.log").read_text()
        assert "failed its check" in log and "left out" in log  # the dead endpoint, dropped
        assert read_state(job)["state"] == "done"
        assert json.loads((job.out / "job.json").read_text())["method"] == job.axes["method"]
    assert not server.script_errors


def _grid(path: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([LCB, "grid", "run", str(path), "--jobs", "2"], env=grid_env(),
                            stdout=subprocess.DEVNULL, text=True, **kw)


def _kill_mid_way(path: Path) -> None:
    jobs = plan(load_spec(path))
    grid = _grid(path, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    running = 0
    try:
        while True:
            assert grid.poll() is None, "the grid ended before the kill"
            assert time.monotonic() < deadline, "the grid made no progress"
            running = grid_status(load_spec(path), jobs)["total"]["running"]
            done = sum((job.out / "result.json").exists() for job in jobs)
            started = [job for job in jobs if (job.out / "job.json").exists()
                       and not (job.out / "result.json").exists()]
            if done >= 2 and any(journal(job) for job in started):  # cut in the middle
                break  # killed at once: the window for a job to finish first stays small
            time.sleep(0.05)
    finally:
        os.killpg(grid.pid, signal.SIGKILL)  # the grid and every job it started
        grid.wait()
    assert running >= 1  # status saw the jobs running just before the kill


@pytest.mark.slow
def test_a_killed_grid_reruns_only_what_is_left_and_ends_as_a_whole_one(reference, server,
                                                                        tmp_path):
    path = write_spec(tmp_path, small_grid(server.base_url))
    spec = load_spec(path)
    _kill_mid_way(path)
    jobs = plan(spec)
    finished = {job.key: (job.out / "result.json").stat().st_mtime_ns for job in jobs
                if (job.out / "result.json").exists()}
    time.sleep(0.1)  # let the killed jobs' processes go
    report = grid_status(spec, jobs)
    assert report["total"]["done"] == len(finished) and report["total"]["running"] == 0
    assert report["interrupted"] and "the next run resumes them" in render(report)
    cut = {job.key: journal(job) for job in jobs if job.key in report["interrupted"]}
    assert any(cut.values())
    rerun = _grid(path, stderr=subprocess.PIPE)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    assert (f"8 job(s): {len(finished)} done, 0 running elsewhere, {8 - len(finished)} to run "
            "(local executor)") in err.splitlines()
    for job in jobs:  # resumed, not started over: what they had written is still there
        for name, lines in cut.get(job.key, {}).items():
            assert Path(name).read_text(errors="replace").startswith(lines), name
    for job in jobs:
        attempts = read_state(job)["attempts"]
        if job.key in finished:  # not run again
            assert (job.out / "result.json").stat().st_mtime_ns == finished[job.key]
            assert attempts == 1
        elif job.key in report["interrupted"]:
            assert attempts == 2  # resumed by the rerun
    assert results(spec).keys() == results(load_spec(reference)).keys()
    assert aggregate_view(path) == aggregate_view(reference)
    assert not server.script_errors


def test_a_job_with_no_endpoint_passing_its_check_is_not_started(tmp_path):
    data = small_grid(dead_url(), methods=["identity"], topologies=["single"], seeds=[0])
    spec = load_spec(write_spec(tmp_path, data))
    (job,) = plan(spec)
    outcome = run_job(job)
    assert outcome.status == "failed" and "no endpoint passed its check" in outcome.reason
    assert not job.out.exists()  # never started
    report = grid_status(spec, [job])
    assert report["total"]["failed"] == 1
    (failed,) = report["failed"]
    assert "no answer from the server" in failed["reason"]
    assert any("left out" in line for line in failed["log"])
    assert f"failed: {job.key}: not started" in render(report)


@pytest.mark.slow
@pytest.mark.ray
def test_ray_runs_the_grid_as_tasks_on_a_local_instance(reference, server, tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
    data = small_grid(server.base_url, ray={"num_cpus": 2}, topologies=["single"], seeds=[0])
    path = write_spec(tmp_path, data)
    done = subprocess.run([LCB, "grid", "run", str(path), "--executor", "ray"], env=grid_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 finished or skipped, 0 failed" in done.stderr
    ran, whole = result_view(load_spec(path)), result_view(load_spec(reference))
    assert len(ran) == 2 and ran == {key: whole[key] for key in ran}
    assert not server.script_errors


def _when_running(job, then):
    """Call `then()` from a thread once `job`'s process runs."""
    def watch():
        deadline = time.monotonic() + 60
        while read_state(job).get("pid") in (None, os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.02)
        then()
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_sigterm_stops_the_local_grid_and_its_running_jobs(server, tmp_path):
    job = sleeper_job(tmp_path, server.base_url)
    spec = load_spec(write_spec(tmp_path, small_grid(server.base_url)))
    _when_running(job, lambda: os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    with pytest.raises(GridInterrupted) as caught:
        run_local([job], spec, RunOptions(workers=1))
    assert caught.value.signal == signal.SIGTERM and time.monotonic() - started < 30
    state = read_state(job)
    assert state["state"] == "interrupted" and state["rc"] == -signal.SIGTERM  # not failed
    assert job_status(job) == "pending" and interrupted(job)  # the next run resumes it
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back


def test_a_preempted_slurm_task_stops_its_job_and_requeues_with_the_same_job(server, tmp_path):
    pytest.importorskip("submitit")
    from lcb.grid.slurm import GridTask

    job = sleeper_job(tmp_path, server.base_url)
    task = GridTask()
    delayed = []
    watcher = _when_running(job, lambda: delayed.append(task.checkpoint(job)))
    outcome = task(job)  # returns once the checkpoint has stopped the job
    watcher.join(timeout=30)
    assert outcome.status == "interrupted" and outcome.rc == -signal.SIGTERM
    (again,) = delayed
    assert again.function is task and again.args == (job,)  # resubmitted as it was
    task.checkpoint(job)  # as submitit calls it, with the task's process about to exit:
    assert read_state(job)["state"] == "requeued"  # not running: a requeued task runs it


@pytest.mark.slow
def test_a_run_grid_runs_resumable_batches_and_reports_them(server, tmp_path):
    data = small_grid(server.base_url, kind="run", methods=[], topologies=["single"], seeds=[0],
                      settings={"data": "sample", "limit": 2})
    path = write_spec(tmp_path, data)
    runner = CliRunner()
    env = {name: None for name in set(os.environ) - set(grid_env())}
    ran = runner.invoke(app, ["grid", "run", str(path)], env=env)
    assert ran.exit_code == 0, ran.output
    assert "done    run/lcb/single/scripted/0" in ran.stderr
    again = runner.invoke(app, ["grid", "run", str(path)], env=env)
    assert again.exit_code == 0 and "1 done, 0 running elsewhere, 0 to run" in again.stderr
    reported = runner.invoke(app, ["grid", "report", str(path), "--out", str(tmp_path / "r")])
    assert reported.exit_code == 0, reported.output
    assert "run/lcb/single/scripted/0: n=2 em=" in reported.stdout
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    assert [row["key"] for row in summary["batches"]] == ["run/lcb/single/scripted/0"]


@pytest.mark.slow
def test_the_report_aggregates_the_grid_with_its_table(reference, tmp_path):
    summary, table = report(load_spec(reference), tmp_path)
    assert len(summary["groups"]) == 4 and not summary["incomplete"]
    groups_table = table.split("\ndeployed (incumbent")[0]
    assert groups_table.count("| gepa") == 2 and groups_table.count("| identity") == 2
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
