"""Two conditions paired problem by problem: which problems flipped, and the McNemar test.

Contract:
- `first_outcomes(condition)`: per problem id (first-seen order) the em of its first program
  (sample 0 of a run; the first valid line of a results file). With several samples per problem
  flips pair those first programs, so they stay 0/1 pairs that McNemar can test.
- `pair(baseline, other)`: over the problems both hold, one row per problem with `baseline`,
  `other` (0/1) and `change`: `improved` (only `other` passed), `regressed` (only the baseline
  passed), `both_right` or `both_wrong`; `counts` of each, `n_paired`, the problems only one
  side holds (`only_baseline`, `only_other`), the pass rate of those first programs on both
  sides over the paired problems (`baseline_pass`, `other_pass`: pass@1 when each problem has
  one program; `first_sample_only` is true when either side has several, so the rates are
  of sample 0 only), `delta` (other − baseline, points) and the exact McNemar p of
  (b = regressed, c = improved) from `lcb.stats`.
- `matrix(conditions)`: per problem id (sorted) its 0/1 per
  condition label (absent: the condition has no program for it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lcb import stats
from lcb.report.collect import Condition

CHANGES = ("improved", "regressed", "both_right", "both_wrong")


def first_outcomes(cond: Condition) -> dict[str, int]:
    """Problem id -> em of its first program (see the module contract)."""
    found: dict[str, tuple[int, int]] = {}
    for record in cond.graded:
        key, sample = str(record["id"]), int(record.get("sample") or 0)
        if key not in found or sample < found[key][0]:
            found[key] = (sample, int(record["em"]))
    return {key: em for key, (_, em) in found.items()}


def several_samples(cond: Condition) -> bool:
    """Whether some problem has more than one program in `cond`."""
    return max(Counter(str(r["id"]) for r in cond.graded).values(), default=0) > 1


def change(base: int, other: int) -> str:
    if base == other:
        return "both_right" if base else "both_wrong"
    return "improved" if other else "regressed"


def pair(baseline: Condition, other: Condition) -> dict[str, Any]:
    """The flips from `baseline` to `other` (module contract)."""
    a, b = first_outcomes(baseline), first_outcomes(other)
    ids = [key for key in a if key in b]
    rows = [{"id": key, "baseline": a[key], "other": b[key], "change": change(a[key], b[key])}
            for key in ids]
    counts = {name: sum(1 for row in rows if row["change"] == name) for name in CHANGES}
    base_rate = sum(a[key] for key in ids) / len(ids) if ids else 0.0
    other_rate = sum(b[key] for key in ids) / len(ids) if ids else 0.0
    return {"baseline": baseline.label, "other": other.label, "n_paired": len(ids),
            "counts": counts, "only_baseline": [k for k in a if k not in b],
            "only_other": [k for k in b if k not in a],
            "baseline_pass": base_rate, "other_pass": other_rate,
            "first_sample_only": several_samples(baseline) or several_samples(other),
            "delta": 100 * (other_rate - base_rate),
            "p_mcnemar": stats.mcnemar_exact(counts["regressed"], counts["improved"]),
            "rows": rows}


def matrix(conditions: list[Condition]) -> dict[str, dict[str, int]]:
    """Problem id -> {condition label: em of its first program}."""
    grid: dict[str, dict[str, int]] = {}
    for cond in conditions:
        for key, em in first_outcomes(cond).items():
            grid.setdefault(key, {})[cond.label] = em
    return {key: grid[key] for key in sorted(grid)}
