"""Aggregate a grid of optimizer jobs: seeds paired per cell, Δ statistics, McNemar with Holm.

Contract of `aggregate(root)`:
- Every directory under `root` holding `job.json` is a job; one that also holds `result.json`
  is complete, the others are listed under `incomplete` (with the reason). A malformed artifact
  raises `ArtifactError` naming the file; two complete jobs for the same group and seed raise
  `AggregateError` naming both directories.
- A group is (method, dataset, topology, team size, communication, model, conformant): the
  seeds of one method on one cell. Conformant and non-conformant jobs are never pooled.
- Per seed: baseline and deployed pass@1 in points, Δ, the discordant counts (b: only the
  baseline passed, c: only the deployed bundle passed) and the exact McNemar p-value. Per
  group: mean and sample std of Δ over seeds and the seed-stratified paired bootstrap CI
  (`lcb.optimize.stats`). Holm's correction runs over every per-seed McNemar p-value of a
  (dataset × model) family, across methods and cells, and is reported as `p_holm`.
- The summary is JSON-able; `markdown_table(summary)` renders one row per group.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcb.optimize import stats
from lcb.optimize.artifacts import Artifact, ArtifactError, JobResult, JobSpec, read_model
from lcb.runs.rundir import write_json

GROUP_KEYS = ("method", "dataset", "topology", "team_size", "communication", "model",
              "conformant")


class AggregateError(ValueError):
    """The grid cannot be aggregated as it stands (the message names the directories)."""


@dataclass(frozen=True)
class Job:
    """One complete job: its settings, its result and where it lives."""

    path: Path
    spec: JobSpec
    result: JobResult

    @property
    def group(self) -> tuple:
        return tuple(getattr(self.spec, key) for key in GROUP_KEYS)


def find_jobs(root: Path) -> tuple[list[Job], list[dict[str, str]]]:
    """Complete jobs under `root` (sorted by path) and the incomplete ones with a reason."""
    root = Path(root)
    if not root.is_dir():
        raise AggregateError(f"{root} is not a directory of optimizer jobs")
    jobs, incomplete = [], []
    for job_file in sorted(root.rglob(Artifact.JOB.value)):
        folder = job_file.parent
        spec = read_model(job_file, JobSpec)
        result_file = folder / Artifact.RESULT
        if not result_file.exists():
            incomplete.append({"path": str(folder), "reason": "no result.json yet"})
            continue
        jobs.append(Job(folder, spec, read_model(result_file, JobResult)))
    return jobs, incomplete


def _seed_row(job: Job) -> dict[str, Any]:
    pairs = [(item.baseline, item.deployed) for item in job.result.items]
    b, c = stats.paired_counts(pairs)
    return {"seed": job.spec.seed, "path": str(job.path), "n_items": len(pairs),
            "baseline": 100 * job.result.baseline, "deployed": 100 * job.result.deployed,
            "delta": job.result.delta_points, "deployed_label": job.result.deployed_label,
            "b": b, "c": c, "p_mcnemar": stats.mcnemar_exact(b, c)}


def _group_row(key: tuple, jobs: list[Job], *, resamples: int, rng_seed: int,
               level: float) -> dict[str, Any]:
    jobs = sorted(jobs, key=lambda job: job.spec.seed)  # the bootstrap draws in seed order
    seeds = [_seed_row(job) for job in jobs]
    deltas = [row["delta"] for row in seeds]
    mean, std = stats.mean_std(deltas)
    strata = [[item.deployed - item.baseline for item in job.result.items] for job in jobs
              if job.result.items]
    ci = (stats.stratified_bootstrap_ci(strata, resamples=resamples, rng_seed=rng_seed,
                                        level=level) if strata else None)
    return {**dict(zip(GROUP_KEYS, key, strict=True)), "n_seeds": len(seeds),
            "baseline_mean": stats.mean_std([row["baseline"] for row in seeds])[0],
            "deployed_mean": stats.mean_std([row["deployed"] for row in seeds])[0],
            "delta_mean": mean, "delta_std": std, "ci": list(ci) if ci else None,
            "seeds": seeds}


def _apply_holm(groups: list[dict[str, Any]]) -> None:
    """Fill `p_holm` of every seed row, one family per (dataset, model)."""
    families: dict[tuple, list[dict]] = defaultdict(list)
    for group in groups:
        families[(group["dataset"], group["model"])].extend(group["seeds"])
    for rows in families.values():
        for row, adjusted in zip(rows, stats.holm([r["p_mcnemar"] for r in rows]), strict=True):
            row["p_holm"] = adjusted


def _grouped(jobs: Iterable[Job]) -> dict[tuple, list[Job]]:
    groups: dict[tuple, dict[int, Job]] = defaultdict(dict)
    for job in jobs:
        seen = groups[job.group].get(job.spec.seed)
        if seen is not None:
            raise AggregateError(f"two results for the same group and seed {job.spec.seed}: "
                                 f"{seen.path} and {job.path}")
        groups[job.group][job.spec.seed] = job
    return {key: list(by_seed.values()) for key, by_seed in groups.items()}


def aggregate(root: Path, *, resamples: int = stats.BOOTSTRAP_RESAMPLES,
              rng_seed: int = stats.BOOTSTRAP_SEED, level: float = stats.CI_LEVEL
              ) -> dict[str, Any]:
    """The JSON-able summary of every job under `root` (see the module contract)."""
    jobs, incomplete = find_jobs(root)
    groups = [_group_row(key, members, resamples=resamples, rng_seed=rng_seed, level=level)
              for key, members in sorted(_grouped(jobs).items(), key=lambda kv: repr(kv[0]))]
    _apply_holm(groups)
    return {"root": str(root), "n_jobs": len(jobs), "groups": groups, "incomplete": incomplete,
            "settings": {"bootstrap_resamples": resamples, "bootstrap_rng_seed": rng_seed,
                         "ci_level": level, "holm_family": ["dataset", "model"],
                         "units": "pass@1 in points (0-100); delta = deployed - baseline"}}


def _num(value: float | None, *, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def markdown_table(summary: dict[str, Any]) -> str:
    """One markdown row per group; non-conformant groups are marked with `*`."""
    header = ("| method | dataset | topology | team | comm | model | seeds | baseline | deployed "
              "| Δ mean ± std | 95% CI | McNemar p (Holm) per seed |")
    lines = [header, "|" + "---|" * 12]
    for g in summary["groups"]:
        low, high = g["ci"] or (None, None)
        ci = f"[{_num(low, signed=True)}, {_num(high, signed=True)}]"
        tests = ", ".join(f"s{row['seed']}: {row['p_mcnemar']:.3g} ({row['p_holm']:.3g})"
                          for row in g["seeds"])
        method = g["method"] + ("" if g["conformant"] else "*")
        lines.append(
            f"| {method} | {g['dataset']} | {g['topology']} | {g['team_size'] or '—'} "
            f"| {g['communication'] or '—'} | {g['model']} | {g['n_seeds']} "
            f"| {_num(g['baseline_mean'])} | {_num(g['deployed_mean'])} "
            f"| {_num(g['delta_mean'], signed=True)} ± {_num(g['delta_std'])} | {ci} | {tests} |")
    if any(not g["conformant"] for g in summary["groups"]):
        lines.append("\n\\* non-conformant: settings differ from the standard protocol "
                     "(see each job.json's deviations)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m optimizers.protocol.aggregate RUNS --out summary.json`: JSON file, table."""
    parser = argparse.ArgumentParser(
        prog="python -m optimizers.protocol.aggregate",
        description="Pair seeds per cell and report Δ, a bootstrap CI and McNemar tests.")
    parser.add_argument("root", type=Path, help="directory holding job directories (any depth)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON summary here")
    parser.add_argument("--resamples", type=int, default=stats.BOOTSTRAP_RESAMPLES)
    parser.add_argument("--rng-seed", type=int, default=stats.BOOTSTRAP_SEED)
    args = parser.parse_args(argv)
    try:
        summary = aggregate(args.root, resamples=args.resamples, rng_seed=args.rng_seed)
    except (AggregateError, ArtifactError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        write_json(args.out, summary)
    print(markdown_table(summary))
    for job in summary["incomplete"]:
        print(f"incomplete: {job['path']}: {job['reason']}", file=sys.stderr)
    return 0
