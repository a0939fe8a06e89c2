"""pass@k over several programs per problem, and a bootstrap interval of pass@1.

Contract:
- `estimate_pass_at_k(n, c, k)` is the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al.,
  2021) for one problem with `n` programs of which `c` passed: the chance that at least one of
  `k` programs drawn without replacement passes. It is computed on exact integers and rounded
  once, so it neither overflows nor cancels; for k = 1 it is exactly the float c / n.
- `pass_at_k(outcomes)` averages the estimator over problems for each k in `KS` that every
  problem has enough programs for (k <= the smallest count); pass@1 is always there (0.0 over
  no outcomes). `problem_rates` gives the per-problem pass@1 that it and the interval use.
- `bootstrap_ci(rates)` is the percentile bootstrap interval of the mean of per-problem rates:
  `RESAMPLES` resamples of the problems with replacement, drawn by a `random.Random(CI_SEED)`
  through `random()` alone (a sequence Python keeps stable across versions), so the interval
  is the same on every machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from math import comb
from random import Random
from typing import Any

KS = (1, 5, 10)
CI_LEVEL = 0.95
RESAMPLES = 1000
CI_SEED = 0


def estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that one of `k` of the `n` programs passes.

    >>> estimate_pass_at_k(10, 3, 5)  # 1 - C(7, 5) / C(10, 5) = 1 - 21 / 252
    0.9166666666666666
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}")
    if n - c < k:  # every draw of k holds a passing program
        return 1.0
    total = comb(n, k)
    return float(Fraction(total - comb(n - c, k), total))


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


def bootstrap_ci(rates: Sequence[float], *, level: float = CI_LEVEL, resamples: int = RESAMPLES,
                 seed: int = CI_SEED) -> dict[str, Any]:
    """The percentile bootstrap interval of the mean of `rates` (one rate per problem).

    Returns `level`, `low`, `high` (None over no rates), `resamples` and `seed`; with B
    resamples sorted, `low` is the one at index round((1 - level) / 2 * B) and `high` its
    mirror from the top (indices 25 and 974 of 1000 at 95 %).
    """
    low = high = None
    if rates:
        m = len(rates)
        rng = Random(seed)
        means = sorted(sum(rates[int(rng.random() * m)] for _ in range(m)) / m
                       for _ in range(resamples))
        cut = round((1 - level) / 2 * resamples)
        low, high = means[cut], means[resamples - 1 - cut]
    return {"level": level, "low": low, "high": high, "resamples": resamples, "seed": seed}
