"""Paired statistics against values computed by hand (the arithmetic is in the comments)."""

import math
from random import Random

import pytest

from lcb.stats import (
    bootstrap_ci,
    holm,
    mcnemar_exact,
    mean_std,
    paired_counts,
    percentile_interval,
    stratified_bootstrap_ci,
)


@pytest.mark.parametrize("b, c, expected", [
    # n = 6, min = 1: 2 * (C(6,0) + C(6,1)) / 2^6 = 2 * 7 / 64 = 0.21875
    (1, 5, 0.21875),
    (5, 1, 0.21875),  # symmetric
    # n = 6, min = 0: 2 * 1 / 64 = 0.03125
    (0, 6, 0.03125),
    # n = 12, min = 2: 2 * (1 + 12 + 66) / 4096 = 158 / 4096
    (2, 10, 158 / 4096),
    # n = 6, min = 3: 2 * (1 + 6 + 15 + 20) / 64 = 84 / 64 > 1 -> capped at 1
    (3, 3, 1.0),
    # no discordant pair: no evidence either way
    (0, 0, 1.0),
    # n = 1: 2 * 1 / 2 = 1
    (0, 1, 1.0),
])
def test_exact_mcnemar_matches_hand_computation(b, c, expected):
    assert mcnemar_exact(b, c) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("b, c", [(-1, 2), (1.0, 2), (True, 1)])
def test_mcnemar_rejects_bad_counts(b, c):
    with pytest.raises(ValueError, match="integers >= 0"):
        mcnemar_exact(b, c)


def test_paired_counts():
    pairs = [(1, 0), (1, 1), (0, 1), (0, 1), (0, 0)]
    assert paired_counts(pairs) == (1, 2)  # b: baseline only; c: deployed only


def test_holm_matches_hand_computation():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> the
    # running maximum keeps 0.06); reported back in input order.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # 0.5 x 2 = 1.0 (capped), 0.6 x 1 = 0.6 -> raised to the running maximum 1.0
    assert holm([0.6, 0.5]) == [1.0, 1.0]
    assert holm([0.2]) == [0.2]  # a single test is not corrected
    assert holm([]) == []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.1, 1.5])


def test_mean_and_sample_std():
    mean, std = mean_std([2, 4, 9])
    # mean 5; squared deviations 9 + 1 + 16 = 26; / (3 - 1) = 13
    assert mean == 5 and std == pytest.approx(math.sqrt(13))
    assert mean_std([7.5]) == (7.5, None)
    with pytest.raises(ValueError):
        mean_std([])


STRATA = [[1, 1, 0, 0, -1, 1, 0, 1], [0, 1, 1, 0, 0, 0], [1, 0, -1, 1, 1, 0, 0]]


def test_bootstrap_is_deterministic_for_a_fixed_seed_and_moves_with_the_seed():
    first = stratified_bootstrap_ci(STRATA, resamples=2000, rng_seed=7)
    assert first == stratified_bootstrap_ci(STRATA, resamples=2000, rng_seed=7)
    assert first != stratified_bootstrap_ci(STRATA, resamples=2000, rng_seed=8)


def test_bootstrap_ci_contains_the_point_estimate_and_narrows_with_the_level():
    # point estimate: mean over strata of 100 x mean difference
    #   = 100 x (3/8 + 2/6 + 2/7) / 3 = 33.13 points
    point = 100 * (3 / 8 + 2 / 6 + 2 / 7) / 3
    low, high = stratified_bootstrap_ci(STRATA)  # 10,000 resamples, default seed
    assert low < point < high
    assert -100 <= low and high <= 100
    narrow = stratified_bootstrap_ci(STRATA, level=0.5)
    assert low <= narrow[0] <= narrow[1] <= high and narrow[1] - narrow[0] < high - low


@pytest.mark.parametrize("strata, value", [
    ([[1, 1, 1], [1, 1]], 100.0),     # every item improved in every seed
    ([[0, 0, 0, 0]], 0.0),            # nothing changed
    ([[1], [0], [-1], [0]], 0.0),     # one item per stratum: every resample is the same
])
def test_bootstrap_degenerate_case_has_zero_width(strata, value):
    assert stratified_bootstrap_ci(strata, resamples=500) == (value, value)


def test_bootstrap_refuses_empty_strata():
    with pytest.raises(ValueError, match="at least one paired item"):
        stratified_bootstrap_ci([[1, 0], []])
    with pytest.raises(ValueError, match="resamples"):
        stratified_bootstrap_ci([[1]], resamples=0)


@pytest.mark.parametrize("resamples, level, expected", [
    (1000, 0.95, (25, 974)),     # ⌊1000 · 0.05 / 2⌋ = 25 and its mirror 999 - 25
    (10_000, 0.95, (250, 9749)),
    (100, 0.9, (5, 94)),         # α = 1/10 exactly, not the float 0.09999…: 5, never 4
    (30, 0.95, (0, 29)),         # ⌊0.75⌋ = 0
    (1, 0.95, (0, 0)),
])
def test_one_percentile_rule_for_every_interval(resamples, level, expected):
    assert percentile_interval(list(range(resamples)), level) == expected


def test_the_pass_at_1_interval_reads_its_resamples_by_that_rule():
    rates = [0.25, 1.0, 0.0, 0.5, 0.75]
    rng = Random(0)  # the documented draw: index int(random() * m)
    means = [sum(rates[int(rng.random() * 5)] for _ in range(5)) / 5 for _ in range(30)]
    ci = bootstrap_ci(rates, resamples=30)
    assert (ci["low"], ci["high"]) == percentile_interval(means, 0.95)
