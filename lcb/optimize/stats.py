"""Statistics for paired optimizer results, in the standard library only (no scipy/numpy).

- `mcnemar_exact(b, c)`: exact two-sided McNemar test on the discordant pairs: `b` items only
  the baseline passed, `c` only the deployed bundle passed. Under H0 each discordant pair goes
  either way with probability 1/2, so p = min(1, 2 · Σ_{i=0}^{min(b,c)} C(b+c, i) / 2^(b+c)),
  and p = 1 when there is no discordant pair.
- `holm(pvalues)`: Holm–Bonferroni adjusted p-values, in input order. With the p-values sorted
  ascending p_(1) ≤ … ≤ p_(m): adj_(k) = min(1, max_{j ≤ k} (m − j + 1) · p_(j)).
- `mean_std(values)`: mean and sample standard deviation (n − 1); std is None below 2 values.
- `stratified_bootstrap_ci(strata, ...)`: seed-stratified paired bootstrap percentile CI of
  the mean Δ in points. `strata` holds, per optimizer seed, the paired per-item differences
  (deployed − baseline, each −1, 0 or 1). One resample draws, within every stratum, as many
  items as it has, with replacement (`random.Random(rng_seed).choices`), and computes the mean
  over strata of 100 × the stratum's mean difference (each seed weighs the same, like the mean
  of per-seed Δ). The CI is [sorted[⌊R·α/2⌋], sorted[⌈R·(1 − α/2)⌉ − 1]] for R resamples and
  α = 1 − level: with R = 10,000 and level 0.95, the 251st and 9,750th smallest values.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 12345
CI_LEVEL = 0.95


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for `b` and `c` discordant pairs.

    Example:
        >>> mcnemar_exact(0, 6)   # 2 * C(6,0) / 2**6 = 2/64
        0.03125
    """
    for name, value in (("b", b), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"McNemar counts must be integers >= 0, got {name}={value!r}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given.

    Example:
        >>> holm([0.01, 0.04, 0.03])   # sorted 0.01, 0.03, 0.04 -> 0.03, 0.06, max(0.06, 0.04)
        [0.03, 0.06, 0.06]
    """
    for p in pvalues:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must lie in [0, 1], got {p!r}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, sample std); std is None for fewer than two values. Raises on no values."""
    if not values:
        raise ValueError("mean_std needs at least one value")
    std = statistics.stdev(values) if len(values) > 1 else None
    return statistics.fmean(values), std


def stratified_bootstrap_ci(
    strata: Sequence[Sequence[float]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    rng_seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float, float]:
    """Percentile CI (in points) of the mean over strata of the per-stratum mean difference.

    Deterministic for a given `rng_seed`. Every stratum must hold at least one item.
    """
    if not strata or any(len(stratum) == 0 for stratum in strata):
        raise ValueError("every bootstrap stratum (seed) needs at least one paired item")
    if resamples < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1, got {resamples}, {level}")
    rng = random.Random(rng_seed)
    pools = [list(stratum) for stratum in strata]
    stats = sorted(_resample(rng, pools) for _ in range(resamples))
    alpha = 1.0 - level
    low = math.floor(resamples * alpha / 2)
    high = max(low, math.ceil(resamples * (1.0 - alpha / 2)) - 1)
    return stats[low], stats[high]


def _resample(rng: random.Random, pools: list[list[float]]) -> float:
    means = [math.fsum(rng.choices(pool, k=len(pool))) / len(pool) for pool in pools]
    return 100.0 * math.fsum(means) / len(means)


def paired_counts(pairs: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """McNemar's (b, c) of (baseline, deployed) 0/1 pairs: b = baseline only, c = deployed only."""
    b = sum(1 for base, dep in pairs if base and not dep)
    c = sum(1 for base, dep in pairs if dep and not base)
    return b, c
