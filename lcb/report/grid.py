"""An optimizer grid as the report shows it: the aggregate's groups, a heatmap layout, and per
cell the detail of each seed (learning curve, lineage, prompt diffs).

Contract:
- `groups(jobs)` is `lcb.optimize.aggregate`'s per-group rows for these jobs (its grouping,
  statistics and Holm correction, reused as they are) with every cell split by settings
  fingerprint and conformance (`split_mixed`): a non-conformant seed is never pooled with
  conformant ones. Each row gains `slug` (the cell page's file name: the cell's settings,
  readable, then a hash of the group's identity, so two groups never share a page), `row`
  (the method, with "*" for a non-conformant group), `column` (the topology, with the team
  size and message format when set: `sequential ×3 · text`), `holm_significant` (every
  seed's Holm-adjusted McNemar p < `ALPHA`) and `n_significant`.
- `heatmap(groups)`: one panel per (dataset, model), the family Holm corrects over, in sorted
  order: `dataset`, `model`, `rows` (method labels), `columns` (topology labels) and `cells`,
  per `row|column` the slug of the group drawn there; a (row, column) holding several groups
  (seeds with other settings) draws the one with most seeds and lists the others under `also`.
- `seed_detail(job)`: `why` the deployed bundle is deployed (from `selection.json`; a missing
  file says so, a malformed one raises `ReportError` naming it, as does a malformed
  `seed_bundle.json`), `wall_s`
  (the span of the history's time stamps: the optimize phase), the learning `curve` (each
  candidate's validation score against rollouts charged so far; rejected proposals apart), the
  `lineage` (candidates and proposals with their parent hash) and `prompt_diff`: per role, the
  word-level edit from the seed bundle to the deployed one as (op, text) segments, op in
  equal | delete | insert.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from difflib import SequenceMatcher
from typing import Any

from lcb.optimize.aggregate import FinishedJob, group_rows
from lcb.optimize.artifacts import (
    Artifact,
    ArtifactError,
    SelectionDecision,
    read_history,
    read_selection,
)
from lcb.report.collect import ReportError
from lcb.stats import CI_LEVEL, PAIRED_RESAMPLES, PAIRED_SEED

ALPHA = 0.05
SCORE_KEYS = ("val", "validation", "valset", "minibatch", "train")
_WORDS = re.compile(r"^\s+|\S+\s*")  # a word with the space after it
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def slug(*parts: Any) -> str:
    """A file name from `parts`: readable, then 8 hex digits of their hash, so two different
    parts lists never give the same name however the readable text is cut or cleaned.

    >>> slug("gepa", "lcb", None, "q/1")
    'gepa-lcb-q_1-e6a7ec62'
    """
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:8]
    readable = _UNSAFE.sub("_", "-".join(str(p) for p in parts if p not in (None, "")))
    return f"{readable[:100]}-{digest}"


def column(row: dict[str, Any]) -> str:
    """A group's heatmap column: topology, team size and message format.

    >>> column({"topology": "sequential", "team_size": 3, "communication": "text"})
    'sequential ×3 · text'
    """
    text = str(row["topology"])
    if row.get("team_size") is not None:
        text += f" ×{row['team_size']}"
    if row.get("communication"):
        text += f" · {row['communication']}"
    return text


def groups(jobs: list[FinishedJob], *, resamples: int = PAIRED_RESAMPLES) -> list[dict[str, Any]]:
    """The aggregate's rows for `jobs`, split mixed, with the report's fields (contract)."""
    rows = group_rows(jobs, resamples=resamples, rng_seed=PAIRED_SEED, level=CI_LEVEL,
                      split_mixed=True)
    for row in rows:
        significant = [s for s in row["seeds"] if s["p_holm"] < ALPHA]
        row["n_significant"] = len(significant)
        row["holm_significant"] = bool(row["seeds"]) and len(significant) == len(row["seeds"])
        row["row"] = row["label"] + ("" if row["conformant"] else "*")
        row["column"] = column(row)
        row["slug"] = slug(row["method"], row["dataset"], row["topology"], row["team_size"],
                           row["communication"], row["model"],
                           "" if row["conformant"] else "nonconformant",
                           row["fingerprint"] if row["differs"] else "")
    return rows


def heatmap(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One panel per (dataset, model), each placing its groups by (method row, column)."""
    families: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        families.setdefault((str(r["dataset"]), str(r["model"])), []).append(r)
    panels = []
    for (dataset, model), members in sorted(families.items()):
        cells: dict[str, dict[str, Any]] = {}
        for r in sorted(members, key=lambda r: -r["n_seeds"]):
            key = f"{r['row']}|{r['column']}"
            if key in cells:
                cells[key]["also"].append(r["slug"])
            else:
                cells[key] = {"slug": r["slug"], "also": []}
        panels.append({
            "dataset": dataset, "model": model,
            "rows": sorted({r["row"] for r in members},
                           key=lambda name: (name.rstrip("*"), name)),
            "columns": sorted({r["column"] for r in members}), "cells": cells})
    return panels


def _score(scores: Mapping[str, float]) -> float | None:
    for key in SCORE_KEYS:
        if key in scores:
            return float(scores[key])
    return float(next(iter(scores.values()))) if scores else None


def _selection(job: FinishedJob) -> SelectionDecision | None:
    """The job's selection.json; None when there is none, `ReportError` when malformed."""
    if not (job.path / Artifact.SELECTION).is_file():
        return None
    try:
        return read_selection(job.path)
    except (ArtifactError, OSError, ValueError) as exc:
        raise ReportError(f"{job.path / Artifact.SELECTION}: {exc}") from None


def _why(job: FinishedJob) -> str:
    sel = _selection(job)
    if sel is None:
        return "no selection.json"
    scores = f"validation {sel.incumbent_score:.3f} vs seed {sel.seed_score:.3f}"
    if sel.deployed == "incumbent":
        return f"deployed: the incumbent scored strictly higher ({scores})"
    if sel.incumbent_hash == sel.seed_hash:
        return "not deployed: the optimizer returned the seed bundle"
    return f"not deployed: the incumbent was not strictly better ({scores})"


def _span(times: list[str]) -> float | None:
    stamps = sorted(datetime.fromisoformat(t) for t in times if t)
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else None


def word_diff(old: str, new: str) -> list[tuple[str, str]]:
    """The word-level edit from `old` to `new` as (equal|delete|insert, text) segments.

    >>> word_diff("a b c", "a x c")
    [('equal', 'a '), ('delete', 'b '), ('insert', 'x '), ('equal', 'c')]
    """
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("equal", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("delete", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("insert", "".join(b[j1:j2])))
    return out


def _seed_bundle(job: FinishedJob, history: list) -> dict[str, str]:
    path = job.path / Artifact.SEED
    if not path.is_file():
        return dict(history[0].bundle) if history else {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not readable JSON ({exc})") from None
    if not (isinstance(found, dict) and all(isinstance(v, str) for v in found.values())):
        raise ReportError(f"{path}: expected an object of role name -> prompt text")
    return found


def _bundles(job: FinishedJob, history: list) -> tuple[dict[str, str], dict[str, str]]:
    seed = _seed_bundle(job, history)
    sel = _selection(job)
    if sel is not None:
        return seed, dict(sel.deployed_bundle)
    return seed, dict(history[-1].bundle) if history else dict(seed)


def _curve_file(job: FinishedJob) -> dict[str, Any] | None:
    """The job's `curve.json` (`--curve`); None without one, `ReportError` when malformed."""
    path = job.path / Artifact.CURVE
    if not path.is_file():
        return None
    try:
        curve = json.loads(path.read_text(encoding="utf-8"))
        points = [(float(p["fraction"]), float(p["score"])) for p in curve["points"]]
        return {"seed": float(curve["seed"]), "points": points}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportError(f"{path}: not a learning curve ({exc})") from None


def curve_panels(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One axis per (dataset, model, column) whose jobs hold a learning curve: per method the
    mean validation score over its seeds at each budget fraction, and the seed's mean score
    (the baseline). Only seeds with `curve.json` count."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        curves = [d["budget_curve"] for d in row.get("details", []) if d.get("budget_curve")]
        if not curves:
            continue
        key = (str(row["dataset"]), str(row["model"]), row["column"])
        panel = found.setdefault(key, {"seeds": [], "methods": {}})
        points = panel["methods"].setdefault(row["row"], {})
        for curve in curves:
            panel["seeds"].append(curve["seed"])
            for fraction, value in curve["points"]:
                points.setdefault(fraction, []).append(value)
    return [{"dataset": dataset, "model": model, "column": column,
             "seed": sum(panel["seeds"]) / len(panel["seeds"]),
             "methods": {label: [[f, sum(v) / len(v)] for f, v in sorted(points.items())]
                         for label, points in panel["methods"].items()}}
            for (dataset, model, column), panel in sorted(found.items())]


def seed_detail(job: FinishedJob) -> dict[str, Any]:
    """One seed's page data (module contract)."""
    history = read_history(job.path)
    curve = [{"charged": e.charged, "score": _score(e.scores), "hash": e.bundle_hash,
              "iteration": e.iteration}
             for e in history if e.kind == "candidate" and _score(e.scores) is not None]
    rejected = [{"charged": e.charged, "score": _score(e.scores), "reason": e.reason,
                 "rejected_by": e.rejected_by}
                for e in history if e.kind == "proposal" and e.accepted is False]
    lineage = [{"kind": e.kind, "hash": e.bundle_hash, "parent": e.parent,
                "iteration": e.iteration, "score": _score(e.scores), "accepted": e.accepted,
                "roles": list(e.roles), "note": e.note or e.reason}
               for e in history if e.kind in ("candidate", "proposal")]
    seed, deployed = _bundles(job, history)
    roles = list(dict.fromkeys([*seed, *deployed]))
    return {"seed": job.spec.seed, "why": _why(job),
            "wall_s": _span([e.time for e in history]),
            "deviations": list(job.spec.deviations),
            "curve": curve, "rejected": rejected, "lineage": lineage,
            "budget_curve": _curve_file(job),
            "prompt_diff": {role: word_diff(seed.get(role, ""), deployed.get(role, ""))
                            for role in roles}}
