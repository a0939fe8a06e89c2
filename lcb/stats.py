"""The statistics lcb reports, in one place and in the standard library only: pass@k, bootstrap
intervals, McNemar's exact test and Holm's correction.

pass@k:
- `estimate_pass_at_k(n, c, k)` is the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al.,
  2021) for one problem with `n` programs of which `c` passed: the chance that at least one of
  `k` programs drawn without replacement passes. It is computed on exact integers and rounded
  once, so it neither overflows nor cancels; for k = 1 it is exactly the float c / n.
- `pass_at_k(outcomes)` averages the estimator over problems for each k in `KS` that every
  problem has enough programs for (k <= the smallest count); pass@1 is always there (0.0 over
  no outcomes). `problem_rates` gives the per-problem pass@1 that it and the interval use.

Bootstrap, one rule for every interval:
- A resample draws, from a pool of m values, m values with replacement: value
  `pool[int(random() * m)]` of one `random.Random(seed)` (what `Random.choices` does; Python
  keeps that sequence stable across versions), so an interval is the same on every machine.
- `percentile_interval(stats, level)`: with the R resampled statistics sorted and
  α = 1 - level (taken as the decimal it is written as, so 0.95 gives α = 1/20 exactly), the
  interval is [sorted[i], sorted[R - 1 - i]] for i = ⌊R·α/2⌋: indices 25 and 974 of 1,000 at
  95 %, 250 and 9,749 of 10,000.
- `bootstrap_ci(rates)`: the interval of the mean of per-problem rates (a run's pass@1),
  `PASS1_RESAMPLES` resamples of the problems from seed `PASS1_SEED`.
- `stratified_bootstrap_ci(strata)`: a seed-stratified paired interval of the mean Δ in points.
  `strata` holds, per optimizer seed, the paired per-item differences (deployed − baseline,
  each −1, 0 or 1). One resample draws within every stratum as many items as it has and takes
  the mean over strata of 100 × the stratum's mean difference (each seed weighs the same, like
  the mean of per-seed Δ); `PAIRED_RESAMPLES` resamples from seed `PAIRED_SEED`.

Tests:
- `mcnemar_exact(b, c)`: exact two-sided McNemar test on the discordant pairs: `b` items only
  the baseline passed, `c` only the deployed bundle passed. Under H0 each discordant pair goes
  either way with probability 1/2, so p = min(1, 2 · Σ_{i=0}^{min(b,c)} C(b+c, i) / 2^(b+c)),
  and p = 1 when there is no discordant pair. `paired_counts(pairs)` gives (b, c).
- `holm(pvalues)`: Holm–Bonferroni adjusted p-values, in input order. With the p-values sorted
  ascending p_(1) ≤ … ≤ p_(m): adj_(k) = min(1, max_{j ≤ k} (m − j + 1) · p_(j)).
- `mean_std(values)`: mean and sample standard deviation (n − 1); std is None below 2 values.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

KS = (1, 5, 10)
CI_LEVEL = 0.95
PASS1_RESAMPLES = 1000
PASS1_SEED = 0
PAIRED_RESAMPLES = 10_000
PAIRED_SEED = 12345


# pass@k

def estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that one of `k` of the `n` programs passes.

    >>> estimate_pass_at_k(10, 3, 5)  # 1 - C(7, 5) / C(10, 5) = 1 - 21 / 252
    0.9166666666666666
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}")
    if n - c < k:  # every draw of k holds a passing program
        return 1.0
    total = math.comb(n, k)
    return float(Fraction(total - math.comb(n - c, k), total))


def counts(outcomes: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """Per problem id (first-seen order): (programs, programs that passed)."""
    tally: dict[str, list[int]] = {}
    for problem_id, em in outcomes:
        entry = tally.setdefault(str(problem_id), [0, 0])
        entry[0] += 1
        entry[1] += int(em)
    return {key: (n, c) for key, (n, c) in tally.items()}


def problem_rates(outcomes: Iterable[tuple[str, int]]) -> list[float]:
    """Per problem (first-seen order), the share of its programs that passed."""
    return [estimate_pass_at_k(n, c, 1) for n, c in counts(outcomes).values()]


def pass_at_k(outcomes: Iterable[tuple[str, int]], ks: Sequence[int] = KS) -> dict[str, float]:
    """pass@k averaged over problems, keyed "1", "5", "10" (JSON keys) for each k in `ks` that is
    at most the smallest number of programs any problem has.

    >>> pass_at_k([("a", 1), ("a", 0), ("b", 0), ("b", 0)])
    {'1': 0.25}
    """
    per_problem = list(counts(outcomes).values())
    if not per_problem:
        return {"1": 0.0}
    fewest = min(n for n, _ in per_problem)
    result = {}
    for k in ks:
        if k <= fewest:
            rates = [estimate_pass_at_k(n, c, k) for n, c in per_problem]
            result[str(k)] = sum(rates) / len(rates)
    return result


# bootstrap

def percentile_interval(stats: Sequence[float], level: float) -> tuple[float, float]:
    """The percentile interval of the resampled `stats` at `level` (module contract).

    >>> percentile_interval(list(range(1000)), 0.95)
    (25, 974)
    """
    if not stats or not 0.0 < level < 1.0:
        raise ValueError(f"need resampled statistics and 0 < level < 1, got {len(stats)}, "
                         f"{level}")
    ordered = sorted(stats)
    cut = math.floor(len(ordered) * (1 - Fraction(str(level))) / 2)
    return ordered[cut], ordered[len(ordered) - 1 - cut]


def _resample(rng: random.Random, pool: Sequence[float]) -> list[float]:
    """len(pool) values of `pool` drawn with replacement (module contract)."""
    return rng.choices(pool, k=len(pool))


def bootstrap_ci(rates: Sequence[float], *, level: float = CI_LEVEL,
                 resamples: int = PASS1_RESAMPLES, seed: int = PASS1_SEED) -> dict[str, Any]:
    """The percentile bootstrap interval of the mean of `rates` (one rate per problem).

    Returns `level`, `low`, `high` (None over no rates), `resamples` and `seed`.
    """
    low = high = None
    if rates:
        rng = random.Random(seed)
        low, high = percentile_interval(
            [sum(_resample(rng, rates)) / len(rates) for _ in range(resamples)], level)
    return {"level": level, "low": low, "high": high, "resamples": resamples, "seed": seed}


def stratified_bootstrap_ci(strata: Sequence[Sequence[float]], *,
                            resamples: int = PAIRED_RESAMPLES, rng_seed: int = PAIRED_SEED,
                            level: float = CI_LEVEL) -> tuple[float, float]:
    """Percentile CI (in points) of the mean over strata of the per-stratum mean difference.

    Deterministic for a given `rng_seed`. Every stratum must hold at least one item.
    """
    if not strata or any(len(stratum) == 0 for stratum in strata):
        raise ValueError("every bootstrap stratum (seed) needs at least one paired item")
    if resamples < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1, got {resamples}, {level}")
    rng = random.Random(rng_seed)
    pools = [list(stratum) for stratum in strata]
    return percentile_interval([_paired_delta(rng, pools) for _ in range(resamples)], level)


def _paired_delta(rng: random.Random, pools: list[list[float]]) -> float:
    means = [math.fsum(_resample(rng, pool)) / len(pool) for pool in pools]
    return 100.0 * math.fsum(means) / len(means)


# tests

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


def paired_counts(pairs: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """McNemar's (b, c) of (baseline, deployed) 0/1 pairs: b = baseline only, c = deployed only."""
    b = sum(1 for base, dep in pairs if base and not dep)
    c = sum(1 for base, dep in pairs if dep and not base)
    return b, c


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
