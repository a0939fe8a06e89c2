"""Learning curves every method draws on one axis: its incumbent at fixed fractions of the
budget, each scored on the whole validation split (`--curve`).

Contract:
- `snapshots(history, method=..., budget=...)`: at each of `FRACTIONS` (10, 25, 50, 100 % of
  the budget), the method's incumbent once `charged` reached no more than that fraction: the
  seed before any entry counts. 100 % is the history's final entry (what the method returned).
  Below it each method's own rule reads the incumbent from its history (`RULES`): `best` is the
  candidate with the highest full-validation mean so far, earliest on ties (gepa, mamut_gepa and
  mipro keep a pool and return that); `latest` is the last candidate (the others record one when
  they adopt a bundle; their accepted proposals may be pool entries, as mapro's); `gated`
  (maspob) is the last candidate or accepted proposal (its posterior incumbent), back to the
  seed when its final paired gate rejects that very bundle.
  A test pins, for every method's planted job, that the rule applied to the whole history gives
  the final incumbent.
- `run_curve(job, team, method=..., budget=...)`: only once the gate is sealed
  (`selection.json`), each snapshot is scored greedily on the whole validation split with the
  validate phase's seeds (paired with the seed's and the incumbent's validate records, which
  it reuses); a new bundle's records go to `evals/validate_curve_<hash12>.jsonl`, resumable per
  item, uncharged and counted apart from the method's compute (`lcb.optimize.phasecost`:
  phase `curve`). Writes `curve.json`: `{"method", "budget", "fractions", "seed": score,
  "points": [{"fraction", "charged", "bundle_hash", "score", "n"}]}` (scores are pass@1
  fractions of the validation split) and returns it. Without a sealed selection it raises
  `JobError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lcb.io import write_json
from lcb.optimize.artifacts import Artifact, HistoryEntry, read_history, read_selection
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.errors import JobError
from lcb.optimize.evaluation import evaluate, score
from lcb.optimize.phases import PhaseJob
from lcb.optimize.splits import load_validation_problems
from lcb.optimize.teamrun import TeamRunner

FRACTIONS = (0.1, 0.25, 0.5, 1.0)
CURVE_FILE = Artifact.CURVE.value
RULES: Mapping[str, tuple[str, str | None]] = {
    "identity": ("latest", None), "gepa": ("best", "val"), "mipro": ("best", "val"),
    "mamut_gepa": ("best", "val"), "tavo": ("latest", None), "maspo": ("latest", None),
    "hivemind": ("latest", None), "mapro": ("latest", None), "maspob": ("gated", None),
}


@dataclass(frozen=True)
class Snapshot:
    fraction: float
    charged: int  # the rollouts the method had charged when this was its incumbent
    bundle: dict[str, str]


def incumbent(entries: Sequence[HistoryEntry], *, method: str) -> HistoryEntry | None:
    """The method's incumbent among `entries` by its rule (module docstring); None: the seed."""
    rule, key = RULES.get(method, ("latest", None))
    if rule == "best":
        scored = [e for e in entries if e.kind == "candidate" and key in e.scores]
        return max(scored, key=lambda e: e.scores[key], default=None)  # earliest on ties
    current: HistoryEntry | None = None
    for entry in entries:
        adopted = rule == "gated" and entry.kind == "proposal" and entry.accepted
        if entry.kind == "candidate" or adopted:
            current = entry
        elif (rule == "gated" and entry.kind == "proposal" and entry.rejected_by == "gate"
              and current is not None and entry.bundle == current.bundle):
            current = None  # its final gate kept the seed
    return current


def snapshots(history: Sequence[HistoryEntry], *, method: str, budget: int) -> list[Snapshot]:
    """The incumbent at each of `FRACTIONS` (module docstring)."""
    if not history or history[-1].kind != "final":
        raise JobError("no finished optimization: the curve needs the optimize phase's history")
    seed, final = history[0], history[-1]
    points = []
    for fraction in FRACTIONS:
        if fraction >= 1.0:
            points.append(Snapshot(fraction, final.charged, dict(final.bundle)))
            continue
        limit = fraction * budget
        seen = [e for e in history[:-1] if e.charged <= limit]
        chosen = incumbent(seen, method=method) or seed
        points.append(Snapshot(fraction, max((e.charged for e in seen), default=0),
                               dict(chosen.bundle)))
    return points


async def run_curve(job: PhaseJob, team: TeamRunner, *, method: str,
                    budget: int) -> dict[str, Any]:
    """Score every snapshot on the validation split and write `curve.json` (module doc)."""
    read_selection(job.out)  # raises unless the gate is sealed
    points = snapshots(read_history(job.out), method=method, budget=budget)
    problems = load_validation_problems(job.splits, data=job.data, release=job.release)
    known = {bundle_hash(points[-1].bundle): "incumbent", bundle_hash(job.seed_bundle): "seed"}
    scores: dict[str, tuple[int, int]] = {}
    for point in points:
        digest = bundle_hash(point.bundle)
        if digest not in scores:
            label = known.get(digest, f"curve_{digest[:12]}")
            records = await evaluate(team, problems, job.evaluation("validate", label,
                                                                    point.bundle))
            scores[digest] = score(records)
    seed_passed, n = scores.get(bundle_hash(job.seed_bundle)) or score(await evaluate(
        team, problems, job.evaluation("validate", "seed", job.seed_bundle)))
    curve = {"method": method, "budget": budget, "fractions": list(FRACTIONS),
             "seed": seed_passed / max(n, 1),
             "points": [{"fraction": p.fraction, "charged": p.charged,
                         "bundle_hash": bundle_hash(p.bundle),
                         "score": scores[bundle_hash(p.bundle)][0] / max(n, 1), "n": n}
                        for p in points]}
    write_json(job.out / CURVE_FILE, curve)
    return curve

