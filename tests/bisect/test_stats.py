"""Bounds and comparisons, checked against scipy and against the numbers the team quotes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from materialize.bisect.stats import (
    bootstrap_shift,
    clopper_pearson,
    compare,
    describe_rate,
    gate_pass_probability,
    mann_whitney,
    rule_of_three,
    shift_interval,
    upper_bound,
)


def test_rule_of_three_matches_the_seed_quote() -> None:
    # seed 003: "bounded at <1.17% by 256 requests"
    assert rule_of_three(256) == pytest.approx(-math.log(0.05) / 256)
    assert f"{rule_of_three(256) * 100:.2f}" == "1.17"
    assert describe_rate(0, 256) == "0/256 => rate < 1.17% at 95% (rule of three)"


def test_exact_upper_bound_for_zero_failures_is_hand_computable() -> None:
    # P(0 failures | p) = (1-p)^n = 0.05  =>  p = 1 - 0.05^(1/n)
    assert upper_bound(0, 256) == pytest.approx(1 - 0.05 ** (1 / 256), rel=1e-9)
    assert upper_bound(0, 256) < rule_of_three(256)


@pytest.mark.parametrize(("k", "n"), [(1, 32), (3, 256), (0, 10), (10, 10), (7, 100)])
def test_clopper_pearson_matches_scipy(k: int, n: int) -> None:
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    lo, hi = clopper_pearson(k, n)
    assert lo == pytest.approx(ci.low, abs=1e-12)
    assert hi == pytest.approx(ci.high, abs=1e-12)


def test_gate_pass_probability_matches_the_seed() -> None:
    # seed 003: a 32-request stage-3 pass "has a ~78% chance of passing even at ~1/128"
    assert gate_pass_probability(1 / 128, 32) == pytest.approx(0.778, abs=0.001)


def test_mann_whitney_is_scipys_two_sided_test() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 1, 12), rng.normal(101, 1, 9)
    assert mann_whitney(a, b) == pytest.approx(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert mann_whitney([1.0], [2.0, 3.0]) == 1.0  # too small to test
    assert mann_whitney([1.0, 1.0], [1.0, 1.0]) == 1.0  # all ties


def test_compare_says_different_same_or_need_more() -> None:
    rng = np.random.default_rng(2)
    base = rng.normal(100, 1, 16)
    shifted = rng.normal(102, 1, 16)
    assert compare(base, shifted, noise_band=0.01).verdict == "different"
    assert compare(base, rng.normal(100, 1, 16), noise_band=0.05).verdict == "same"
    assert compare(base[:3], shifted[:3], noise_band=0.01).verdict == "need more runs"
    # 2 samples of noise 1% cannot show a 0.3% band either way
    assert compare(base[:4], rng.normal(100.2, 1, 4), noise_band=0.003).verdict == "need more runs"


def test_a_real_shift_inside_the_noise_band_is_never_different() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(100, 0.05, 400), rng.normal(100.5, 0.05, 400)  # 0.5% shift, tiny noise, p ~ 0
    result = compare(a, b, noise_band=0.01)
    assert mann_whitney(a, b) < 1e-10
    assert result.verdict == "same"
    assert compare(a, b, noise_band=0.01, strict=True).verdict == "same"


def test_strict_comparison_needs_the_interval_beyond_the_band() -> None:
    # Observed median shift 1.36% > 1% band and p < 0.01, but the 90% interval starts at 0.68%:
    # not shown to exceed the noise band, so a strict comparison asks for more runs.
    rng = np.random.default_rng(2)
    a, b = rng.normal(100, 1, 10), rng.normal(101.5, 1, 10)
    assert compare(a, b, noise_band=0.01).verdict == "different"
    lo, _ = shift_interval(a, b, 0.90)
    assert lo < 0.01
    assert compare(a, b, noise_band=0.01, strict=True).verdict == "need more runs"


def test_shift_interval_is_welchs() -> None:
    a = [10.0, 11.0, 12.0, 13.0]
    b = [12.0, 14.0, 13.0, 15.0, 16.0]
    lo, hi = shift_interval(a, b, 0.95)
    res = sps.ttest_ind(b, a, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert lo == pytest.approx(ci.low / 11.5)
    assert hi == pytest.approx(ci.high / 11.5)


def test_bootstrap_interval_covers_the_true_shift() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(100, 1, 30), rng.normal(102, 1, 30)
    lo, hi = bootstrap_shift(a, b, seed=1)
    assert lo < 0.02 < hi
    assert lo > 0  # and excludes no change
