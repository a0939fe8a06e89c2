"""Every number a report shows, as one JSON-able object: what `report.json` holds.

Contract of `build(sources, title=..., baseline=...)`:
- `conditions`: per run or results file, in the order found: `label`, `provenance`, `scores`
  and `health` (`lcb.report.metrics`), and `pareto` (true when no other condition has at most
  its tokens per sample and at least its pass@1, the per-problem mean, one of them strictly;
  None, and compared with none, when its tokens per sample are unknown).
- `baseline`: the label flips compare against: the condition at `baseline` (a path, matched
  against each condition's folder or file), else the first `single` run, else the first
  condition. `flips`: `pairs` (`lcb.report.flips.pair` of the baseline and each other
  condition) and `matrix` (problem × condition, 0/1). Reference solutions graded by `lcb score
  --references` (`is_reference`) are no model's programs: never the default baseline, and in
  no pair unless named as `baseline`.
- `teams`: per multi-agent run (`lcb.registry.INTERACTING_TOPOLOGIES`), the `single` run and
  the `independent` run with as many agents (equal compute) of the same model beside it, when
  present.
- `grader_disagreements`: per two conditions that graded the same programs (the same
  predictions file, line by line) with different graders: the lines compared and the ids whose
  verdicts differ. A results summary names its predictions file as given to `lcb score`; a
  relative name is looked up beside the results file, then from the working directory.
- `grid`: `lcb.report.grid.groups` of the optimizer jobs (each with `details` per seed), the
  `heatmap` panels (one per dataset × model), `deploy_rates` per (method, gate)
  (`lcb.optimize.aggregate.deploy_rates`), the learning-curve axes (`curves`:
  `lcb.report.grid.curve_panels`), `incomplete` jobs, and the statistics' settings.
- Paths (a condition's, a seed's job folder, an incomplete job, a local dataset) are written
  as `Sources.shown` gives them: relative to the folder holding the inputs, never absolute.
- `notes`: the contamination note when a condition or job used release_v1.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from lcb import __version__
from lcb.optimize.aggregate import FinishedJob, deploy_rates
from lcb.registry import INTERACTING_TOPOLOGIES
from lcb.report import flips, grid, metrics
from lcb.report.collect import Condition, ReportError, Sources
from lcb.report.metrics import Shown
from lcb.runs.rundir import PREDICTIONS, now_iso
from lcb.runs.scoring import PROGRAMS, REFERENCE
from lcb.stats import CI_LEVEL, PAIRED_RESAMPLES, PAIRED_SEED


def is_reference(cond: Condition) -> bool:
    """A results file of the sample set's reference solutions (`lcb score --references`)."""
    return cond.kind == "score" and cond.summary.get(PROGRAMS) == REFERENCE


def choose_baseline(conditions: list[Condition], path: Path | None) -> Condition | None:
    """The condition flips compare against (module contract)."""
    if path is not None:
        wanted = Path(path).resolve()
        for cond in conditions:
            if wanted in (cond.path, cond.path / PREDICTIONS):
                return cond
        raise ReportError(f"--baseline {path} is not one of the reported runs or results")
    for cond in conditions:
        if cond.kind == "run" and metrics.provenance(cond)["topology"] == "single":
            return cond
    return next((cond for cond in conditions if not is_reference(cond)), None)


def _pareto(rows: list[dict[str, Any]]) -> None:
    known = [row for row in rows if row["scores"]["tokens_per_sample"] is not None]
    for row in rows:
        cost, gain = row["scores"]["tokens_per_sample"], row["scores"]["em"]
        row["pareto"] = None if cost is None else not any(
            o is not row and o["scores"]["tokens_per_sample"] <= cost
            and o["scores"]["em"] >= gain
            and (o["scores"]["tokens_per_sample"] < cost or o["scores"]["em"] > gain)
            for o in known)


def _teams(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def find(topology: str, model: str, size: int | None = None) -> str | None:
        for row in rows:
            prov = row["provenance"]
            if (prov["topology"] == topology and prov["model"] == model
                    and (size is None or prov["team_size"] == size)):
                return row["label"]
        return None

    teams = []
    for row in rows:
        prov = row["provenance"]
        if prov["topology"] in INTERACTING_TOPOLOGIES:
            teams.append({"team": row["label"], "topology": prov["topology"],
                          "agents": prov["team_size"],
                          "single": find("single", prov["model"]),
                          "independent": find("independent", prov["model"],
                                              prov["team_size"])})
    return teams


def _graded_file(cond: Condition) -> tuple[Path | None, str | None]:
    """(the predictions file whose programs the condition graded, its grader)."""
    grader = metrics.provenance(cond)["grader"]
    if cond.kind == "run":
        return cond.path / PREDICTIONS, grader
    given = cond.summary.get("predictions")
    if not given:
        return None, grader
    if Path(given).is_absolute():
        return Path(given).resolve(), grader
    tried = [cond.path.parent / given, Path.cwd() / given]
    found = next((p for p in tried if p.is_file()), tried[0])
    return found.resolve(), grader


def _by_line(cond: Condition) -> dict[int, dict[str, Any]]:
    if cond.kind == "run":
        return dict(enumerate(cond.records, 1))
    # A results line's `line` is lcb score's; a hand-made file may hold anything there.
    return {r["line"]: r for r in cond.records if type(r.get("line")) is int}


def grader_disagreements(conditions: list[Condition]) -> list[dict[str, Any]]:
    """Conditions that graded one predictions file with different graders (module contract)."""
    by_file: dict[Path, list[Condition]] = defaultdict(list)
    for cond in conditions:
        graded, _ = _graded_file(cond)
        if graded is not None:
            by_file[graded].append(cond)
    found = []
    for members in by_file.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                ga, gb = _graded_file(a)[1], _graded_file(b)[1]
                if ga == gb:
                    continue
                la, lb = _by_line(a), _by_line(b)
                lines = [n for n in la if n in lb]
                differ = [str(la[n]["id"]) for n in lines if int(la[n]["em"]) != int(lb[n]["em"])]
                found.append({"a": a.label, "b": b.label, "graders": [ga, gb],
                              "n_compared": len(lines), "n_disagree": len(differ),
                              "ids": differ})
    return found


def _portable(row: dict[str, Any], shown: Shown) -> None:
    """A group's paths as a report shows them (module contract)."""
    for seed in row["seeds"]:
        seed["path"] = shown(seed["path"])
    if row["settings"].get("data"):
        row["settings"] = {**row["settings"], "data": shown(row["settings"]["data"])}
    if row["differs"].get("data"):
        row["differs"] = {**row["differs"], "data": shown(row["differs"]["data"])}


def _grid(jobs: list[FinishedJob], incomplete: list[dict[str, str]], resamples: int,
          shown: Shown) -> dict[str, Any]:
    rows = grid.groups(jobs, resamples=resamples) if jobs else []
    by_path = {str(job.path): job for job in jobs}
    for row in rows:
        row["details"] = [grid.seed_detail(by_path[s["path"]]) for s in row["seeds"]]
        _portable(row, shown)
    incomplete = [{**entry, "path": shown(entry["path"])} for entry in incomplete]
    return {"groups": rows, "heatmap": grid.heatmap(rows), "incomplete": incomplete,
            "deploy_rates": deploy_rates(rows), "curves": grid.curve_panels(rows),
            "settings": {"bootstrap_resamples": resamples, "bootstrap_rng_seed": PAIRED_SEED,
                         "ci_level": CI_LEVEL, "holm_family": ["dataset", "model"],
                         "alpha": grid.ALPHA,
                         "significant": "every seed's Holm-adjusted McNemar p < alpha",
                         "units": "pass@1 in points (0-100); delta = deployed - seed"}}


def build(sources: Sources, *, title: str = "lcb report", baseline: Path | None = None,
          resamples: int = PAIRED_RESAMPLES) -> dict[str, Any]:
    """The report's aggregates (module contract)."""
    conds = sources.conditions
    rows = [{"label": c.label, "provenance": metrics.provenance(c, shown=sources.shown),
             "scores": metrics.scores(c), "health": metrics.health(c),
             "reference": is_reference(c)} for c in conds]
    _pareto(rows)
    base = choose_baseline(conds, baseline)
    pairs = ([flips.pair(base, c) for c in conds if c is not base and not is_reference(c)]
             if base else [])
    release_v1 = (any(r["provenance"]["release"] == "release_v1" for r in rows)
                  or any(job.spec.release == "release_v1" and not job.spec.data
                         for job in sources.jobs))
    return {
        "title": title, "generated_at": now_iso(), "lcb_version": __version__,
        "conditions": rows, "baseline": base.label if base else None,
        "flips": {"pairs": pairs, "matrix": flips.matrix(conds)},
        "teams": _teams(rows), "grader_disagreements": grader_disagreements(conds),
        "grid": _grid(sources.jobs, sources.incomplete, resamples, sources.shown),
        "notes": {"contamination": metrics.CONTAMINATION_NOTE if release_v1 else None},
    }
