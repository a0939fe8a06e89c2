"""Scheduling overhead of `lcb grid` per job, for each executor, side by side in one run.

Run from the repository root:
  .venv/bin/python bench/grid.py [--jobs 12] [--job-s 1.0] [--slots 2] [--no-ray]

Every job is the same stand-in command (a Python process that sleeps `--job-s` seconds and
writes its done file with its start and end times), so the job's own work is known exactly
and what is left is the grid's: `lcb.grid.jobrun.run_job` (state files, the log, the endpoint
check against a scripted server on 127.0.0.1), the executor's dispatch and its start-up. Per
executor it prints the wall time, the start-up (first job start - call), and the overhead per
job: the job slots' busy time not spent in a job, ((last end - first start) x slots - jobs x
job-s) / jobs. Slots: `--slots` for local and Ray (num_cpus), every job at once for
submitit's local executor (it has no array parallelism; on Slurm `array_parallelism` does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lcb.grid.executors import EXECUTORS, RunOptions  # noqa: E402
from lcb.grid.plan import Job  # noqa: E402
from lcb.grid.spec import parse_spec  # noqa: E402
from tests.scripted_server import scripted_server  # noqa: E402

JOB = ("import json, sys, time; start = time.time(); time.sleep(float(sys.argv[1])); "
       "open(sys.argv[2], 'w').write(json.dumps({'start': start, 'end': time.time()}))")


def _jobs(root: Path, count: int, job_s: float, url: str) -> list[Job]:
    jobs = []
    for i in range(count):
        out = root / f"job{i}"
        out.mkdir(parents=True)
        jobs.append(Job(key=f"bench/lcb/single/m/{i}", axes={"model": "m"},
                        argv=(sys.executable, "-c", JOB, str(job_s), str(out / "result.json")),
                        cwd=root, out=out, done_file="result.json", root=root,
                        env={"VLLM_BASE_URL": url, "MODEL_ID": "scripted-model"}))
    return jobs


def measure(name: str, *, count: int, job_s: float, slots: int, url: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"grid-bench-{name}-"))
    spec = parse_spec({"methods": ["identity"], "topologies": ["single"],
                       "models": {"m": {"id": "scripted-model", "endpoints": [url]}},
                       "slurm": {"cluster": "local"}, "ray": {"num_cpus": slots}},
                      base=root)
    jobs = _jobs(root, count, job_s, url)
    started = time.time()
    outcomes = EXECUTORS[name](jobs, spec, RunOptions(workers=slots))
    wall = time.time() - started
    assert [o.status for o in outcomes] == ["done"] * count, outcomes
    times = [json.loads((job.out / "result.json").read_text()) for job in jobs]
    first, last = min(t["start"] for t in times), max(t["end"] for t in times)
    used = count if name == "slurm" else slots
    overhead = ((last - first) * used - count * job_s) / count
    return {"executor": name, "wall_s": wall, "startup_s": first - started,
            "overhead_per_job_s": overhead, "slots": used}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--job-s", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true", help="leave Ray out")
    args = parser.parse_args()
    names = ["local", "slurm"] + ([] if args.no_ray else ["ray"])
    for name in ("REFLECTION_MODEL_BASE_URL", "VLLM_BASE_URL"):
        os.environ.pop(name, None)
    with scripted_server(["ok"]) as server:
        rows = [measure(name, count=args.jobs, job_s=args.job_s, slots=args.slots,
                        url=server.base_url) for name in names]
    print(f"{args.jobs} jobs of {args.job_s:.2f} s each ('slurm' is submitit's local executor)")
    print(f"{'executor':<10}{'slots':>6}{'wall s':>9}{'start-up s':>12}{'overhead/job s':>16}")
    for row in rows:
        print(f"{row['executor']:<10}{row['slots']:>6}{row['wall_s']:>9.2f}"
              f"{row['startup_s']:>12.2f}{row['overhead_per_job_s']:>16.2f}")
    base = rows[0]["overhead_per_job_s"]
    for row in rows[1:]:
        ratio = row["overhead_per_job_s"] / base if base > 0 else float("nan")
        print(f"{row['executor']} / local overhead per job: {ratio:.1f}x")


if __name__ == "__main__":
    main()
