"""`lcb grid run -e slurm` on a real single-node Slurm cluster (`tests.slurm_cluster`), with real
`lcb optimize` jobs against the scripted server; skipped with the reason where no cluster can
start (not root, Debian's slurm-wlm or munge missing).

- The whole array: every job ends with its reference result, no more tasks run at once than
  `array_parallelism` allows (and that many do), each task's log lands in the spec's
  `log_folder`, and `lcb grid status` shows Slurm's view of the tasks.
- A task cancelled while it runs (`scancel`) is a `failed` outcome naming Slurm's state, and
  the waiting grid does not hang on it (no accounting: squeue's view decides).
- Two interruptions in one array: a task requeued by an administrator (`scontrol requeue`:
  SIGTERM, then a requeue) and a task whose time limit runs out (its limit cut to one minute
  while it runs: Slurm's warning signal, submitit's checkpoint and requeue; the job is frozen
  with SIGSTOP until the warning comes, since slurmctld checks time limits every 30 s). Both
  resume from their journals: what they had written is kept, no rollout is charged twice,
  and the results equal the reference's. (The test cluster lets a requeued task start again
  after 5 s, not Slurm's 120 s: `tests.slurm_cluster`.)
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lcb.grid.plan import plan
from lcb.grid.slurm_view import recorded_tasks
from lcb.grid.spec import load_spec
from lcb.grid.state import read_state
from tests.helpers_grid import (
    acting_on,
    assert_same_as_reference,
    grid_env,
    journal,
    small_grid,
    write_spec,
)
from tests.slurm_cluster import slurm_cluster, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
LCB = str(Path(sys.executable).parent / "lcb")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("submitit", reason="the grid extra: pip install -e '.[grid]'")
    why = unavailable()
    if why:
        pytest.skip(why)
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


def _spec(folder: Path, base_url: str, **fields) -> Path:
    slurm = {"partition": "lcb", "array_parallelism": 2, "cpus_per_task": 1,
             "time_limit_min": 10, "log_folder": "slurm-logs"}
    return write_spec(folder, small_grid(base_url, topologies=["sequential"], slurm=slurm,
                                         **fields))


def _start(path: Path, cluster) -> subprocess.Popen:
    return subprocess.Popen([LCB, "grid", "run", str(path), "-e", "slurm"],
                            env={**grid_env(), **cluster.env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _until(what: str, check, grid: subprocess.Popen, limit_s: float = 120.0):
    deadline = time.monotonic() + limit_s
    while not (found := check()):
        assert grid.poll() is None, f"the grid ended before {what}: {grid.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} in {limit_s:.0f} s"
        time.sleep(0.1)
    return found


def test_the_array_runs_every_job_within_its_parallelism(cluster, server, reference, tmp_path):
    path = _spec(tmp_path, server.base_url)
    grid = _start(path, cluster)
    peak = 0
    while grid.poll() is None:
        tasks = cluster.run("squeue", "-h", "-r", "-t", "running", "-o", "%i", check=False)
        peak = max(peak, len(tasks.split()))
        time.sleep(0.2)
    err = grid.stderr.read()
    assert grid.returncode == 0, err[-3000:]
    assert "4 finished or skipped, 0 failed" in err
    assert peak == 2  # array_parallelism, though the node has 4 CPUs
    assert_same_as_reference(path, reference)
    spec = load_spec(path)
    tasks = recorded_tasks(spec.root)
    assert sorted(tasks) == sorted(job.key for job in plan(spec))
    for entry in tasks.values():  # each task's submitit log, where the spec says
        folder = spec.root / "slurm-logs" / entry["task"]
        assert (folder / f"{entry['task']}_0_log.out").exists()
    status = subprocess.run([LCB, "grid", "status", str(path), "--json", "--html",
                             str(tmp_path / "status")], capture_output=True, text=True,
                            env={**grid_env(), **cluster.env}, check=True)
    report = json.loads(status.stdout)
    assert report["total"]["done"] == 4
    assert report["scheduler"]["states"] == {"COMPLETED": 4}  # squeue's view, no accounting
    page = (tmp_path / "status/index.html").read_text()
    assert "Slurm's view of the grid's tasks:\n4 COMPLETED." in page
    assert not server.script_errors


def test_a_cancelled_task_is_a_failed_job_not_a_hang(cluster, server, tmp_path, monkeypatch):
    from lcb.grid.executors import RunOptions
    from lcb.grid.slurm import run_array
    from tests.helpers_grid import sleeper_job

    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    job = sleeper_job(tmp_path, server.base_url)
    spec = load_spec(_spec(tmp_path, server.base_url))
    seen = []

    def cancel_when_running():
        deadline = time.monotonic() + 60
        while read_state(job).get("state") != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.run("scancel", recorded_tasks(spec.root)[job.key]["task"])

    import threading

    threading.Thread(target=cancel_when_running, daemon=True).start()
    started = time.monotonic()
    (outcome,) = run_array([job], spec, RunOptions(on_outcome=seen.append))
    assert time.monotonic() - started < 60  # the sleeper would take 60 s
    assert outcome.status == "failed" and "ended CANCELLED without a result" in outcome.reason
    assert read_state(job)["state"] == "interrupted"  # its runner stopped it: resumable
    assert seen == [outcome]


def test_a_requeued_task_and_one_out_of_time_resume_to_the_reference(cluster, server, reference,
                                                                       tmp_path):
    path = _spec(tmp_path, server.base_url, methods=["gepa"])  # jobs with a journal to keep
    spec = load_spec(path)
    requeued, timed = plan(spec)
    server.latency_s = 0.5  # both jobs run long enough to be caught mid-way
    with acting_on(_start(path, cluster), server) as grid:
        tasks = _until("task ids", lambda: recorded_tasks(spec.root), grid)
        timed_task = tasks[timed.key]["task"]
        cut = _until("the second job's journal", lambda: journal(timed), grid)
        # frozen until Slurm's warning: slurmctld checks time limits every 30 s, and the job
        # must still run then, whatever its speed
        frozen = read_state(timed)["pid"]
        os.kill(frozen, signal.SIGSTOP)
        cluster.run("scontrol", "update", f"JobId={timed_task}", "TimeLimit=1")
        cut |= _until("the first job's journal", lambda: journal(requeued), grid)
        cluster.run("scontrol", "requeue", tasks[requeued.key]["task"])
        server.latency_s = 0.0
        _until("the requeued job stopped",
               lambda: read_state(requeued).get("state") == "interrupted", grid)
        _until("Slurm's time-limit warning", lambda: _asked_to_stop(frozen), grid, 45)
        with contextlib.suppress(ProcessLookupError):  # gone if the checkpoint's grace ran out
            os.kill(frozen, signal.SIGCONT)  # it gets the checkpoint's SIGTERM and stops
        _until("the checkpoint", lambda: read_state(timed).get("state") == "requeued", grid, 30)
        cluster.run("scontrol", "update", f"JobId={timed_task}", "TimeLimit=10")
        _, err = grid.communicate(timeout=180)
    assert grid.returncode == 0, err[-3000:]
    assert "2 finished or skipped, 0 failed" in err
    for name, lines in cut.items():  # resumed, not started over
        assert Path(name).read_text(errors="replace").startswith(lines), name
    assert read_state(requeued)["attempts"] == 2 and read_state(timed)["attempts"] == 2
    assert "this job is timed-out" in _out(spec, timed_task)
    assert_same_as_reference(path, reference)
    assert not server.script_errors


def _asked_to_stop(pid: int) -> bool:
    """The frozen job has a SIGTERM pending (the checkpoint's), or is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & (1 << (signal.SIGTERM - 1)))


def _out(spec, task: str) -> str:
    """The submitit log of a task (every run of it, appended)."""
    return "".join(log.read_text(errors="replace")
                   for log in (spec.root / "slurm-logs" / task).glob("*_log.*"))
