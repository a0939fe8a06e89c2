"""Scheduling overhead of `lcb grid` per job and jobs per minute, for each engine, side by side in
one run: the local pool, submitit's local executor, a real single-node Slurm cluster, a local
Ray instance and a two-node Ray cluster.

Run from the repository root (the Slurm engine needs root and Debian's slurm-wlm and munge;
it is left out, saying why, where it cannot start):
  .venv/bin/python bench/grid.py [--jobs 12] [--job-s 1.0] [--slots 2] [--engines local,...]

Every job is the same stand-in command (a Python process that sleeps `--job-s` seconds and
writes its done file with its start and end times), so the job's own work is known exactly
and what is left is the grid's: `lcb.grid.jobrun.run_job` (state files, the log, the endpoint
check against a scripted server on 127.0.0.1), the engine's dispatch and its start-up. Per
engine it prints the wall time (submission to the last outcome), the start-up (first job
start - call), the overhead per job, ((last end - first start) x slots - jobs x job-s) / jobs,
and jobs per minute over the wall time. Slots: `--slots` jobs at once everywhere (a Slurm
node of that many CPUs with `array_parallelism` equal to it; Ray clusters of that many CPUs,
split over two nodes), except submitit's local executor, which starts every job at once.
Cluster start-up (slurmctld, raylets) is not counted: a user's cluster is already up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lcb.grid.executors import EXECUTORS, RunOptions  # noqa: E402
from lcb.grid.plan import GridJob  # noqa: E402
from lcb.grid.spec import parse_spec  # noqa: E402
from tests.scripted_server import scripted_server  # noqa: E402

JOB = ("import json, sys, time; start = time.time(); time.sleep(float(sys.argv[1])); "
       "open(sys.argv[2], 'w').write(json.dumps({'start': start, 'end': time.time()}))")
ENGINES = ("local", "submitit-local", "slurm", "ray-local", "ray-cluster")


def _jobs(root: Path, count: int, job_s: float, url: str) -> list[GridJob]:
    jobs = []
    for i in range(count):
        out = root / f"job{i}"
        out.mkdir(parents=True)
        jobs.append(GridJob(key=f"bench/lcb/single/m/{i}", axes={"model": "m"},
                            argv=(sys.executable, "-c", JOB, str(job_s),
                                  str(out / "result.json")),
                            cwd=root, out=out, done_file="result.json", root=root,
                            env={"VLLM_BASE_URL": url, "MODEL_ID": "scripted-model"}))
    return jobs


@contextlib.contextmanager
def engine(name: str, slots: int, folder: Path) -> Iterator[tuple[str, dict, str | None]]:
    """(executor, spec fields, Ray address) for `name`, with its cluster up meanwhile."""
    if name == "local":
        yield "local", {}, None
    elif name == "submitit-local":
        yield "slurm", {"slurm": {"cluster": "local"}}, None
    elif name == "slurm":
        from tests.slurm_cluster import slurm_cluster, unavailable

        why = unavailable()
        if why:
            raise RuntimeError(why)
        with slurm_cluster(folder / "slurm", cpus=slots) as cluster:
            os.environ.update(cluster.env)
            try:
                yield "slurm", {"slurm": {"partition": "lcb", "cpus_per_task": 1,
                                          "array_parallelism": slots}}, None
            finally:
                os.environ.pop("SLURM_CONF", None)
    elif name == "ray-local":
        yield "ray", {"ray": {"num_cpus": slots}}, None
    else:
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
            "num_cpus": slots - slots // 2, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=slots // 2)
            cluster.wait_for_nodes()
            yield "ray", {}, cluster.address
        finally:
            cluster.shutdown()


def measure(name: str, *, count: int, job_s: float, slots: int, url: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"grid-bench-{name}-"))
    with engine(name, slots, root) as (executor, fields, address):
        spec = parse_spec({"methods": ["identity"], "topologies": ["single"],
                           "models": {"m": {"id": "scripted-model", "endpoints": [url]}},
                           **fields}, base=root)
        jobs = _jobs(root / "jobs", count, job_s, url)
        started = time.time()
        outcomes = EXECUTORS[executor](jobs, spec, RunOptions(workers=slots, address=address))
        wall = time.time() - started
    assert [o.status for o in outcomes] == ["done"] * count, outcomes
    times = [json.loads((job.out / "result.json").read_text()) for job in jobs]
    first, last = min(t["start"] for t in times), max(t["end"] for t in times)
    used = count if name == "submitit-local" else slots
    overhead = ((last - first) * used - count * job_s) / count
    return {"engine": name, "wall_s": wall, "startup_s": first - started,
            "overhead_per_job_s": overhead, "slots": used, "jobs_per_min": count / wall * 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--job-s", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"a comma-separated subset of {', '.join(ENGINES)}")
    args = parser.parse_args()
    names = [name for name in args.engines.split(",") if name]
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s): {', '.join(unknown)}")
    for name in ("REFLECTION_MODEL_BASE_URL", "VLLM_BASE_URL"):
        os.environ.pop(name, None)
    rows = []
    with scripted_server(["ok"]) as server:
        for name in names:
            try:
                rows.append(measure(name, count=args.jobs, job_s=args.job_s, slots=args.slots,
                                    url=server.base_url))
            except (RuntimeError, ImportError) as exc:
                print(f"{name}: left out ({exc})", file=sys.stderr)
    print(f"{args.jobs} jobs of {args.job_s:.2f} s each")
    print(f"{'engine':<16}{'slots':>6}{'wall s':>9}{'start-up s':>12}{'overhead/job s':>16}"
          f"{'jobs/min':>10}")
    for row in rows:
        print(f"{row['engine']:<16}{row['slots']:>6}{row['wall_s']:>9.2f}"
              f"{row['startup_s']:>12.2f}{row['overhead_per_job_s']:>16.2f}"
              f"{row['jobs_per_min']:>10.1f}")
    base = rows[0]["overhead_per_job_s"] if rows else 0
    for row in rows[1:]:
        ratio = row["overhead_per_job_s"] / base if base > 0 else float("nan")
        print(f"{row['engine']} / {rows[0]['engine']} overhead per job: {ratio:.1f}x")


if __name__ == "__main__":
    main()
