"""Aggregate a grid of optimizer jobs: seeds paired per cell, Δ statistics, McNemar with Holm.

Contract of `aggregate(root, split_mixed=False)`:
- Every directory under `root` holding `job.json` is a job; one that also holds `result.json`
  is complete, the others are listed under `incomplete` (with the reason). A malformed artifact
  raises `ArtifactError` naming the file.
- A cell is (method, dataset, topology, team size, communication, model): what a row shows.
  Seeds are pooled only when their settings agree: job.json less the seed, provenance and
  conformance fields, with its `fingerprint` (`lcb.optimize.fingerprint`). A group is one
  cell, one fingerprint and one `conformant` value: conformant and non-conformant jobs are
  never pooled. A cell that holds more than one group is refused with `AggregateError` naming
  each differing field (dotted path), its values and the job directories holding them; with
  `split_mixed=True` each group gets its own row instead, `differs` holding its values of those
  fields (None: absent). Two complete jobs of one group with one seed raise `AggregateError`.
  Provenance never splits a group, but `provenance_differs` names what differs between its
  seeds (lcb commit, library or grader version, endpoint), and the table says so.
- Per seed: baseline and deployed pass@1 in points, Δ, the discordant counts (b: only the
  baseline passed, c: only the deployed bundle passed), the exact McNemar p-value and `cost`
  (`lcb.optimize.jobcost.read_cost`). Per group: mean and sample std of Δ over seeds, the
  seed-stratified paired bootstrap CI (`lcb.stats`) and `cost`: the budget, and the
  means per seed (over seeds that record them) of charged rollouts, proposals, accepted ones,
  infrastructure failures (`infra_failures_mean`: rollout attempts lost to an endpoint, a
  timeout or grading, never charged) and uncharged tokens (prompt + completion) per kind
  (`tokens_mean`), with `calls_without_usage` per kind: calls whose server reported no usage
  (`lcb.agents.usage`), summed over seeds. A kind with any is unknown: its `tokens_mean` is
  None and the table says "unknown", since a mean of partial sums would understate it.
  Beside Δ, the whole job's compute: `total_tokens_mean` and `total_calls_mean` (every phase,
  task and reflection model, `lcb.optimize.phasecost`; None when a seed's is unknown), and
  `gates`: how many seeds met a held-out gate and how many a reused one.
- `deploy_rates`: per (method, gate), the seeds and how many deployed their incumbent: the
  gate is a held-out test only for a method that ran no validation row while optimizing
  (`--selection train` makes it so for all), so deploy rates compare within a gate only.
  Holm's correction runs over every per-seed McNemar p-value of a (dataset × model) family,
  across methods and cells (`p_holm`).
- Each group's `label` names the method as tables show it: tavo with its `update_mode`
  (`tavo (rewrite)`, TAVO's own update; `tavo (truce_overlay)`, TRUCE's shared rules).
- The summary is JSON-able; `markdown_table(summary)` renders one row per group.
- `group_rows(jobs)` is the summary's `groups` for jobs gathered from anywhere (`find_jobs`
  over several folders, as `lcb report` does).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcb import stats
from lcb.agents.usage import WITHOUT_USAGE
from lcb.io import write_json
from lcb.optimize.artifacts import Artifact, ArtifactError, JobResult, JobSpec, read_model
from lcb.optimize.fingerprint import (
    ABSENT,
    NOT_SETTINGS,
    describe,
    differing,
    dotted,
    fingerprint_of,
    provenance_differs,
    settings_of,
    show,
    value_at,
)
from lcb.optimize.jobcost import KINDS, read_cost

CELL_KEYS = ("method", "dataset", "topology", "team_size", "communication", "model")
# The method setting that picks which published algorithm ran, shown in every label.
VARIANTS = {"tavo": "update_mode"}


def method_label(method: str, settings: dict[str, Any]) -> str:
    """The method as tables name it: `tavo (rewrite)` or `tavo (truce_overlay)`, so a reader
    sees which update ran; other methods by their key."""
    name = VARIANTS.get(method)
    value = (settings.get("method_settings") or {}).get(name) if name else None
    return f"{method} ({value})" if value else method


class AggregateError(ValueError):
    """The grid cannot be aggregated as it stands (the message names the directories)."""


@dataclass(frozen=True)
class FinishedJob:
    """One complete job: its settings, its result, its spend and where it lives."""

    path: Path
    spec: JobSpec
    settings: dict[str, Any]
    conformant: bool
    result: JobResult
    cost: dict[str, Any]
    provenance: dict[str, Any]

    @property
    def cell(self) -> tuple:
        return tuple(self.settings.get(key) for key in CELL_KEYS)

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.settings)

    @property
    def view(self) -> dict[str, Any]:
        """What must agree for two seeds to be pooled: the settings and `conformant`."""
        return {**self.settings, "conformant": self.conformant}


def _read_job(folder: Path, spec: JobSpec) -> FinishedJob:
    raw = json.loads((folder / Artifact.JOB).read_text(encoding="utf-8"))
    settings = settings_of(raw, defaults=spec.model_dump(mode="json"))
    conformant = bool(raw.get("conformant", getattr(spec, "conformant", False)))
    return FinishedJob(folder, spec, settings, conformant,
                       read_model(folder / Artifact.RESULT, JobResult),
                       read_cost(folder, budget=settings.get("budget")),
                       dict(raw.get("provenance") or {}))


def find_jobs(root: Path) -> tuple[list[FinishedJob], list[dict[str, str]]]:
    """Complete jobs under `root` (sorted by path) and the incomplete ones with a reason."""
    root = Path(root)
    if not root.is_dir():
        raise AggregateError(f"{root} is not a directory of optimizer jobs")
    jobs, incomplete = [], []
    for job_file in sorted(root.rglob(Artifact.JOB.value)):
        folder = job_file.parent
        spec = read_model(job_file, JobSpec)
        if not (folder / Artifact.RESULT).exists():
            incomplete.append({"path": str(folder), "reason": "no result.json yet"})
            continue
        jobs.append(_read_job(folder, spec))
    return jobs, incomplete


# --- grouping ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Group:
    """The seeds of one cell that share their settings."""

    cell: tuple
    fingerprint: str
    conformant: bool
    differs: dict[str, Any]
    jobs: list[FinishedJob]


def _cell_label(cell: tuple) -> str:
    method, *where = cell
    return f"{method} on " + "/".join(str(part) for part in where if part is not None)


def _groups(jobs: Iterable[FinishedJob], *, split_mixed: bool) -> list[Group]:
    cells: dict[tuple, list[FinishedJob]] = defaultdict(list)
    for job in jobs:
        cells[job.cell].append(job)
    groups = []
    for cell, members in cells.items():
        parts: dict[tuple, list[FinishedJob]] = defaultdict(list)
        for job in members:
            parts[(job.fingerprint, job.conformant)].append(job)
        paths = differing([job.view for job in members]) if len(parts) > 1 else []
        if paths and not split_mixed:
            raise AggregateError(
                f"{_cell_label(cell)} mixes seeds with different settings ("
                f"{describe([(str(job.path), job.view) for job in members], paths)}); "
                "aggregate them apart (--split-mixed, split_mixed=True) or rerun the odd ones")
        for (fingerprint, conformant), part in parts.items():
            values = {dotted(path): value_at(part[0].view, path) for path in paths}
            differs = {path: None if value is ABSENT else value for path, value in values.items()}
            groups.append(Group(cell, fingerprint, conformant, differs, _by_seed(part)))
    return sorted(groups, key=lambda g: (repr(g.cell), g.fingerprint, g.conformant))


def _by_seed(jobs: list[FinishedJob]) -> list[FinishedJob]:
    """The jobs in seed order (the bootstrap draws in that order); a seed twice raises."""
    seen: dict[int, FinishedJob] = {}
    for job in jobs:
        if job.spec.seed in seen:
            raise AggregateError(f"two results for the same group and seed {job.spec.seed}: "
                                 f"{seen[job.spec.seed].path} and {job.path}")
        seen[job.spec.seed] = job
    return [seen[seed] for seed in sorted(seen)]


# --- statistics ----------------------------------------------------------------------------
def _seed_row(job: FinishedJob) -> dict[str, Any]:
    pairs = [(item.baseline, item.deployed) for item in job.result.items]
    b, c = stats.paired_counts(pairs)
    return {"seed": job.spec.seed, "path": str(job.path), "n_items": len(pairs),
            "baseline": 100 * job.result.baseline, "deployed": 100 * job.result.deployed,
            "delta": job.result.delta_points, "deployed_label": job.result.deployed_label,
            "b": b, "c": c, "p_mcnemar": stats.mcnemar_exact(b, c), "cost": job.cost}


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.fmean(known) if known else None


def _total(cost: dict[str, Any], key: str) -> float | None:
    """A seed's whole-job total (`phases.total`: every phase, both models) of `key`."""
    return ((cost.get("phases") or {}).get("total") or {}).get(key)


def _known_mean(values: list[float | None]) -> float | None:
    """The mean, or None when any value is unknown (a mean of the known ones would
    understate the rest)."""
    return None if not values or None in values else statistics.fmean(values)


def _group_cost(costs: list[dict[str, Any]]) -> dict[str, Any]:
    budgets = {cost["budget"] for cost in costs}
    gates = [cost.get("gate") for cost in costs]
    usage = [cost["uncharged"] for cost in costs if cost["uncharged"] is not None]
    unknown = {kind: sum(u[kind].get(WITHOUT_USAGE) or 0 for u in usage) for kind in KINDS}
    return {"budget": budgets.pop() if len(budgets) == 1 else None,
            **{f"{key}_mean": _mean(cost[key] for cost in costs)
               for key in ("charged", "proposals", "accepted", "infra_failures")},
            "tokens_mean": {kind: None if unknown[kind] else _mean(
                u[kind]["prompt_tokens"] + u[kind]["completion_tokens"] for u in usage)
                for kind in KINDS},
            "calls_without_usage": unknown,
            "total_tokens_mean": _known_mean([_total(cost, "tokens") for cost in costs]),
            "total_calls_mean": _known_mean([_total(cost, "calls") for cost in costs]),
            "gates": {gate: gates.count(gate) for gate in ("held_out", "reused")
                      if gate in gates}}


def _group_row(group: Group, *, resamples: int, rng_seed: int, level: float) -> dict[str, Any]:
    seeds = [_seed_row(job) for job in group.jobs]
    mean, std = stats.mean_std([row["delta"] for row in seeds])
    strata = [[item.deployed - item.baseline for item in job.result.items]
              for job in group.jobs if job.result.items]
    ci = (stats.stratified_bootstrap_ci(strata, resamples=resamples, rng_seed=rng_seed,
                                        level=level) if strata else None)
    return {**dict(zip(CELL_KEYS, group.cell, strict=True)),
            "label": method_label(group.cell[0], group.jobs[0].settings),
            "conformant": group.conformant,
            "fingerprint": group.fingerprint, "differs": group.differs,
            "provenance_differs": provenance_differs([job.provenance for job in group.jobs]),
            "settings": group.jobs[0].settings, "n_seeds": len(seeds),
            "baseline_mean": stats.mean_std([row["baseline"] for row in seeds])[0],
            "deployed_mean": stats.mean_std([row["deployed"] for row in seeds])[0],
            "delta_mean": mean, "delta_std": std, "ci": list(ci) if ci else None,
            "deployed_n": sum(row["deployed_label"] == "incumbent" for row in seeds),
            "cost": _group_cost([row["cost"] for row in seeds]), "seeds": seeds}


def _apply_holm(groups: list[dict[str, Any]]) -> None:
    """Fill `p_holm` of every seed row, one family per (dataset, model)."""
    families: dict[tuple, list[dict]] = defaultdict(list)
    for group in groups:
        families[(group["dataset"], group["model"])].extend(group["seeds"])
    for rows in families.values():
        for row, adjusted in zip(rows, stats.holm([r["p_mcnemar"] for r in rows]), strict=True):
            row["p_holm"] = adjusted


def deploy_rates(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How often each method deployed its incumbent, split by the gate its seeds met:
    `held_out` (the method never ran a validation row) or `reused` (it selected on them, so
    the gate's strict-improvement test is biased in its favour). One row per (method, gate)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for group in groups:
        for row in group["seeds"]:
            tally = counts[(group["method"], row["cost"].get("gate") or "unknown")]
            tally[0] += 1
            tally[1] += row["deployed_label"] == "incumbent"
    return [{"method": method, "gate": gate, "jobs": jobs, "deployed": deployed,
             "rate": deployed / jobs} for (method, gate), (jobs, deployed) in counts.items()]


def group_rows(jobs: Iterable[FinishedJob], *, resamples: int = stats.PAIRED_RESAMPLES,
               rng_seed: int = stats.PAIRED_SEED, level: float = stats.CI_LEVEL,
               split_mixed: bool = False) -> list[dict[str, Any]]:
    """One row per group of `jobs` (cell and settings), Holm-corrected within each
    (dataset × model) family: the summary's `groups`, for jobs gathered from anywhere."""
    groups = [_group_row(group, resamples=resamples, rng_seed=rng_seed, level=level)
              for group in _groups(jobs, split_mixed=split_mixed)]
    _apply_holm(groups)
    return groups


def aggregate(root: Path, *, resamples: int = stats.PAIRED_RESAMPLES,
              rng_seed: int = stats.PAIRED_SEED, level: float = stats.CI_LEVEL,
              split_mixed: bool = False) -> dict[str, Any]:
    """The JSON-able summary of every job under `root` (see the module contract)."""
    jobs, incomplete = find_jobs(root)
    groups = group_rows(jobs, resamples=resamples, rng_seed=rng_seed, level=level,
                        split_mixed=split_mixed)
    return {"root": str(root), "n_jobs": len(jobs), "groups": groups, "incomplete": incomplete,
            "deploy_rates": deploy_rates(groups),
            "settings": {"bootstrap_resamples": resamples, "bootstrap_rng_seed": rng_seed,
                         "ci_level": level, "holm_family": ["dataset", "model"],
                         "split_mixed": split_mixed,
                         "fingerprint": "job.json less " + ", ".join(sorted(NOT_SETTINGS)),
                         "units": "pass@1 in points (0-100); delta = deployed - baseline"}}


# --- rendering -----------------------------------------------------------------------------
def _num(value: float | None, *, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _amount(value: float | None) -> str:
    """A count or a mean of counts: whole numbers as such, others to one decimal."""
    if value is None:
        return "—"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _spend(cost: dict[str, Any]) -> str:
    unknown = cost.get("calls_without_usage") or {}
    tokens = " / ".join("unknown" if unknown.get(kind) else _amount(cost["tokens_mean"][kind])
                        for kind in KINDS)
    return (f"{_amount(cost['charged_mean'])} / {_amount(cost['budget'])} "
            f"| {_amount(cost['proposals_mean'])} ({_amount(cost['accepted_mean'])}) | {tokens}")


def markdown_table(summary: dict[str, Any]) -> str:
    """One markdown row per group; non-conformant groups are marked with `*`, split groups
    with their fingerprint (their differing settings are listed under the table)."""
    header = ("| method | dataset | topology | team | comm | model | seeds | baseline | deployed "
              "| Δ mean ± std | 95% CI | total tokens | total calls | McNemar p (Holm) per seed "
              "| charged / budget | proposals (accepted) | tokens reflect / judge / probe |")
    lines, notes = [header, "|" + "---|" * 17], []
    for g in summary["groups"]:
        low, high = g["ci"] or (None, None)
        ci = f"[{_num(low, signed=True)}, {_num(high, signed=True)}]"
        tests = ", ".join(f"s{row['seed']}: {row['p_mcnemar']:.3g} ({row['p_holm']:.3g})"
                          for row in g["seeds"])
        method = g.get("label", g["method"]) + ("" if g["conformant"] else "*")
        if g["provenance_differs"]:
            notes.append(f"{g['method']} on {g['topology']}/{g['model']}: seeds ran with "
                         f"another {', '.join(g['provenance_differs'])}")
        if g["differs"]:
            method += f" [{g['fingerprint']}]"
            notes.append(f"[{g['fingerprint']}] " + ", ".join(
                f"{path}={show(value)}" for path, value in g["differs"].items()))
        lines.append(
            f"| {method} | {g['dataset']} | {g['topology']} | {g['team_size'] or '—'} "
            f"| {g['communication'] or '—'} | {g['model']} | {g['n_seeds']} "
            f"| {_num(g['baseline_mean'])} | {_num(g['deployed_mean'])} "
            f"| {_num(g['delta_mean'], signed=True)} ± {_num(g['delta_std'])} | {ci} "
            f"| {_amount(g['cost'].get('total_tokens_mean'))} "
            f"| {_amount(g['cost'].get('total_calls_mean'))} | {tests} | {_spend(g['cost'])} |")
    if notes:
        lines.append("\nwithin a cell:\n" + "\n".join(notes))
    rates = summary.get("deploy_rates") or []
    if rates:
        lines.append("\ndeployed (incumbent strictly better on validation), by the gate it met:\n"
                     "\n| method | gate | jobs | deployed | rate |\n|---|---|---|---|---|")
        lines += [f"| {r['method']} | {r['gate']} | {r['jobs']} | {r['deployed']} "
                  f"| {100 * r['rate']:.0f} % |" for r in rates]
    if any(not g["conformant"] for g in summary["groups"]):
        lines.append("\n\\* non-conformant: settings differ from the standard protocol "
                     "(see each job.json's deviations)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m optimizers.protocol.aggregate RUNS --out summary.json`: JSON file, table."""
    parser = argparse.ArgumentParser(
        prog="python -m optimizers.protocol.aggregate",
        description="Pair seeds per cell and report Δ, a bootstrap CI, McNemar tests and spend.")
    parser.add_argument("root", type=Path, help="directory holding job directories (any depth)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON summary here")
    parser.add_argument("--resamples", type=int, default=stats.PAIRED_RESAMPLES)
    parser.add_argument("--rng-seed", type=int, default=stats.PAIRED_SEED)
    parser.add_argument("--split-mixed", action="store_true",
                        help="report each settings fingerprint of a cell as its own group "
                             "instead of refusing a cell whose seeds differ")
    args = parser.parse_args(argv)
    try:
        summary = aggregate(args.root, resamples=args.resamples, rng_seed=args.rng_seed,
                            split_mixed=args.split_mixed)
    except (AggregateError, ArtifactError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        write_json(args.out, summary)
    print(markdown_table(summary))
    for job in summary["incomplete"]:
        print(f"incomplete: {job['path']}: {job['reason']}", file=sys.stderr)
    return 0
