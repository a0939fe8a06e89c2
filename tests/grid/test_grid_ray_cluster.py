"""`lcb grid run -e ray --address` on a Ray cluster of two nodes started on this machine (a head
and a second raylet, each its own processes: `ray.cluster_utils.Cluster`), with real
`lcb optimize` jobs against the scripted server.

- The grid spreads over both nodes (one CPU each, one CPU a job) and every job ends with its
  reference result.
- A node killed mid-grid (its raylet and every process under it SIGKILLed at once, as when a
  machine dies, while its job has a journal) has its job run again on a live node: the new
  attempt resumes the journal (what it had written is kept, nothing is charged twice), and
  every job ends exactly once with its reference result.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lcb.grid.plan import plan
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

pytestmark = [pytest.mark.slow, pytest.mark.ray_cluster]
LCB = str(Path(sys.executable).parent / "lcb")
FAST_FAILURE = {"health_check_period_ms": 1000, "health_check_failure_threshold": 10,
                "health_check_initial_delay_ms": 1000}


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
    from ray.cluster_utils import Cluster

    running = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE})
    try:
        running.add_node(num_cpus=1)
        running.wait_for_nodes()
        yield running
    finally:
        running.shutdown()


def _spec(folder: Path, base_url: str, **fields) -> Path:
    data = small_grid(base_url, topologies=["sequential"], ray={"cpus_per_job": 1}, **fields)
    return write_spec(folder, data)


def _grid(path: Path, cluster) -> subprocess.Popen:
    return subprocess.Popen([LCB, "grid", "run", str(path), "-e", "ray", "--address",
                             cluster.address], env=grid_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _node_of(job) -> str:
    return read_state(job).get("node", "").removeprefix("ray node ")


def _descendants(pid: int) -> list[int]:
    """Every process under `pid`, from /proc (the node's workers, their jobs and helpers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_node(cluster, node) -> None:
    """The node dies as a machine does: its raylet and every process under it at once."""
    from ray._private import ray_constants

    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    tree = _descendants(raylet)
    cluster.remove_node(node, allow_graceful=False)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_the_grid_spreads_over_both_nodes(cluster, server, reference, tmp_path):
    path = _spec(tmp_path, server.base_url)
    grid = _grid(path, cluster)
    _, err = grid.communicate(timeout=300)
    assert grid.returncode == 0, err[-3000:]
    assert "4 finished or skipped, 0 failed" in err
    nodes = {_node_of(job) for job in plan(load_spec(path))}
    alive = {node.node_id[:12] for node in cluster.list_all_nodes()}
    assert nodes == alive and len(nodes) == 2
    assert_same_as_reference(path, reference)


def test_a_killed_node_has_its_job_rerun_elsewhere_exactly_once(cluster, server, reference,
                                                                 tmp_path):
    path = _spec(tmp_path, server.base_url, methods=["gepa"])
    jobs = plan(load_spec(path))
    head = cluster.head_node.node_id[:12]
    server.latency_s = 0.5  # the jobs run long enough to be caught mid-way
    with acting_on(_grid(path, cluster), server) as grid:
        deadline = time.monotonic() + 120
        while not (victims := [job for job in jobs if _node_of(job) not in ("", head)
                                and read_state(job).get("state") == "running"
                                and journal(job)]):
            assert grid.poll() is None, grid.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no job with a journal on the second node"
            time.sleep(0.1)
        (victim,) = victims
        cut, node = journal(victim), _node_of(victim)
        (doomed,) = [n for n in cluster.list_all_nodes() if n.node_id.startswith(node)]
        _kill_node(cluster, doomed)
        server.latency_s = 0.0
        _, err = grid.communicate(timeout=300)
    assert grid.returncode == 0, err[-3000:]
    assert "2 finished or skipped, 0 failed" in err
    for job in jobs:  # each job ends exactly once
        assert err.count(f"done    {job.key} ") == 1, err
    assert read_state(victim)["attempts"] == 2 and _node_of(victim) == head
    log = (victim.root / ".grid/logs" / f"{victim.slug}.log").read_text()
    assert f"attempt 1 on ray node {node}" in log and f"attempt 2 on ray node {head}" in log
    for name, lines in cut.items():  # resumed, not started over
        assert Path(name).read_text(errors="replace").startswith(lines), name
    assert_same_as_reference(path, reference)
    assert not server.script_errors
