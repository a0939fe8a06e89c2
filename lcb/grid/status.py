"""Where a grid stands: done / running / failed / pending, in total and per axis value.

Contract:
- `grid_status(spec, jobs, lines=N)` returns a JSON-able report: `total` (count per status),
  `axes` (for each axis with more than one value: value -> count per status), `interrupted`
  (pending jobs that had started or that the grid stopped, `lcb.grid.state.interrupted`: the
  next run resumes them; never counted as failed) and `failed` (per failed job: its
  key, reason, attempts and the last `N` lines of its log). Statuses are read from the job
  folders and the grid's state files (`lcb.grid.state.job_status`);
  a caller that has read them already (`lcb.grid.state.statuses`) passes them as `seen`, so
  that every view of one moment counts the same jobs.
- `scheduler` is the scheduler's own view of the jobs the grid submitted to Slurm
  (`lcb.grid.slurm_view.scheduler_report`: each task's Slurm state and reason, e.g. queued
  behind `JobArrayTaskLimit`, held `BeginTime` after a requeue), None when it submitted none.
- `render(report)` is the same as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lcb.grid.plan import GridJob
from lcb.grid.slurm_view import scheduler_report
from lcb.grid.spec import GridSpec
from lcb.grid.state import STATUSES, Status, interrupted, job_status, last_lines, read_state


def _counts() -> dict[str, int]:
    return dict.fromkeys(STATUSES, 0)


def grid_status(spec: GridSpec, jobs: Sequence[GridJob], *, lines: int = 5,
                seen: Mapping[str, Status] | None = None) -> dict[str, Any]:
    """The status report of `jobs` (module docstring); `seen`: their statuses, by key."""
    axes = {name: values for name, values in spec.axis_values().items() if len(values) > 1}
    total = _counts()
    per_axis: dict[str, dict[str, dict[str, int]]] = {name: {} for name in axes}
    failed, resumable = [], []
    for job in jobs:
        status = seen[job.key] if seen is not None else job_status(job)
        total[status] += 1
        for name in axes:
            value = str(job.axes[name])
            per_axis[name].setdefault(value, _counts())[status] += 1
        if status == "failed":
            state = read_state(job)
            failed.append({"key": job.key, "reason": state.get("reason", ""),
                           "attempts": state.get("attempts", 0), "log": last_lines(job, lines)})
        elif status == "pending" and interrupted(job):
            resumable.append(job.key)
    scheduler = scheduler_report(spec.root, [job.key for job in jobs])
    return {"jobs": len(jobs), "total": total, "axes": per_axis, "interrupted": resumable,
            "scheduler": scheduler, "failed": failed}


def _row(label: str, counts: dict[str, int], width: int) -> str:
    return f"  {label:<{width}} " + " ".join(f"{counts[s]:>8}" for s in STATUSES)


def render(report: dict[str, Any]) -> str:
    """The report as a few plain tables and the failed jobs' log tails."""
    labels = [v for values in report["axes"].values() for v in values] + ["all"]
    width = max(len(label) for label in labels)
    head = f"  {'':<{width}} " + " ".join(f"{s:>8}" for s in STATUSES)
    out = [f"{report['jobs']} job(s)", head, _row("all", report["total"], width)]
    for name, values in report["axes"].items():
        out.append(f"{name}:")
        out += [_row(value, counts, width) for value, counts in values.items()]
    if report["interrupted"]:
        out.append(f"{len(report['interrupted'])} interrupted (the next run resumes them): "
                   + ", ".join(report["interrupted"]))
    out += _scheduler_lines(report.get("scheduler"))
    for job in report["failed"]:
        out.append(f"failed: {job['key']}: {job['reason']}")
        out += [f"    | {line}" for line in job["log"]]
    return "\n".join(out)


def _scheduler_lines(view: dict[str, Any] | None) -> list[str]:
    """Slurm's view in a line or two: tasks per state, and why pending ones wait."""
    if view is None:
        return []
    if view["error"]:
        return [f"Slurm: {view['error']}"]
    states = ", ".join(f"{count} {state}" for state, count in sorted(view["states"].items()))
    waiting: dict[str, int] = {}
    for entry in view["jobs"].values():
        if entry["state"] == "PENDING" and entry["reason"]:
            waiting[entry["reason"]] = waiting.get(entry["reason"], 0) + 1
    why = "; pending because: " + ", ".join(f"{r} ({n})" for r, n in waiting.items()) \
        if waiting else ""
    return [f"Slurm tasks: {states}{why}"]
