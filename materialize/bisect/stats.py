"""Small, checkable statistics for noisy hardware runs.

* Bounds on a failure rate from a gate's counts: exact Clopper-Pearson, and the rule of three that
  the team quotes ("0 failures in 256 requests bounds the rate below 1.17% at 95%").
* Pinpoint-style comparison of two sample sets: Mann-Whitney U (scipy) answers "different",
  "same" or "need more runs"; a shift inside the declared noise band is never "different".
* A percentile bootstrap interval for the relative shift of medians, used in reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import betaincinv, stdtrit

# scipy.special's inverses, not scipy.stats' distributions: the same functions (``beta.ppf(q, a, b)``
# is ``betaincinv(a, b, q)``, ``t.ppf(p, df)`` is ``stdtrit(df, p)``) without the ~1 s that importing
# scipy.stats costs every ``bisect status``; only the Mann-Whitney test imports it.

Verdict = Literal["different", "same", "need more runs"]


def rule_of_three(requests: int, confidence: float = 0.95) -> float:
    """Upper bound on the rate after 0 failures in ``requests``: -ln(1-confidence)/n (3/n at 95%)."""
    if requests <= 0:
        return 1.0
    return min(1.0, -math.log(1.0 - confidence) / requests)


def clopper_pearson(failures: int, requests: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval for a binomial rate."""
    if requests <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    lo = 0.0 if failures == 0 else float(betaincinv(failures, requests - failures + 1, alpha / 2))
    hi = (
        1.0 if failures == requests else float(betaincinv(failures + 1, requests - failures, 1 - alpha / 2))
    )
    return lo, hi


def clopper_pearson_lower(failures: int, trials: int, confidence: float = 0.95) -> float:
    """Exact one-sided lower bound of a binomial rate (0 without failures; (1-confidence)^(1/n) for n/n)."""
    if failures <= 0 or trials <= 0:
        return 0.0
    return float(betaincinv(failures, trials - failures + 1, 1 - confidence))


def upper_bound(failures: int, requests: int, confidence: float = 0.95) -> float:
    """Exact one-sided upper bound (for 0 failures: 1 - (1-confidence)^(1/n), close to the rule of three)."""
    if requests <= 0:
        return 1.0
    if failures >= requests:
        return 1.0
    return float(betaincinv(failures + 1, requests - failures, confidence))


def describe_rate(failures: int, requests: int, confidence: float = 0.95) -> str:
    """The sentence a report prints, e.g. ``0/256 => rate < 1.17% at 95%``."""
    pct = f"{confidence * 100:.0f}%"
    if requests <= 0:
        return "no requests"
    if failures == 0:
        return f"0/{requests} => rate < {rule_of_three(requests, confidence) * 100:.2f}% at {pct} (rule of three)"
    lo, hi = clopper_pearson(failures, requests, confidence)
    return f"{failures}/{requests} => rate in [{lo * 100:.2f}%, {hi * 100:.2f}%] at {pct} (Clopper-Pearson)"


def describe_runs(run_requests: Sequence[int], failed: int, confidence: float = 0.95) -> str:
    """The bound a report prints when some runs only said "failed" (an exit code, not a count).

    Every run counts, failing ones included: ``failed`` of ``len(run_requests)`` runs failed gives an
    exact (Clopper-Pearson) interval for the per-run failure probability q, and since
    q = 1 - (1 - p)^R is monotone in the per-request rate p, the interval maps to p exactly when all
    runs had the same R. With mixed R no per-request bound is claimed.
    """
    n = len(run_requests)
    pct = f"{confidence * 100:.0f}%"
    if n == 0:
        return "no runs"
    lo, hi = clopper_pearson(failed, n, confidence)
    if len(set(run_requests)) != 1:
        return (f"{failed}/{n} runs failed => per-run failure rate in [{lo * 100:.2f}%, {hi * 100:.2f}%] "
                f"at {pct} (Clopper-Pearson; runs of different sizes, no per-request bound)")
    r = run_requests[0]

    def per_request(q: float) -> float:
        return 1.0 - (1.0 - q) ** (1.0 / r)

    return (f"{failed}/{n} runs of {r} failed => rate in [{per_request(lo) * 100:.2f}%, {per_request(hi) * 100:.2f}%] "
            f"per request at {pct} (Clopper-Pearson on runs)")


def gate_pass_probability(rate: float, requests: int) -> float:
    """Chance that a gate of ``requests`` passes at a per-request ``rate`` (a 32-request gate at 1/128: ~78%)."""
    return (1.0 - rate) ** requests


@dataclass(frozen=True)
class Comparison:
    """The answer to "are these two sample sets different?" with the numbers behind it."""

    verdict: Verdict
    p_value: float
    shift: float  # relative shift of medians, (median(b) - median(a)) / |median(a)|
    n_a: int
    n_b: int


def relative_shift(a: Sequence[float], b: Sequence[float]) -> float:
    ma, mb = float(np.median(a)), float(np.median(b))
    return (mb - ma) / abs(ma) if ma else float("inf") if mb != ma else 0.0


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value (1.0 when either side is too small to test)."""
    if len(a) < 2 or len(b) < 2:
        return 1.0
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0
    from scipy import stats as sps  # noqa: PLC0415 - ~1 s of import, only where samples are compared

    return float(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def shift_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Welch t interval for the relative shift of means from ``a`` to ``b`` (two-sided)."""
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    if len(xa) < 2 or len(xb) < 2 or xa.mean() == 0:
        return -math.inf, math.inf
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = math.sqrt(va + vb)
    diff = xb.mean() - xa.mean()
    if se == 0:
        return diff / abs(xa.mean()), diff / abs(xa.mean())
    df = (va + vb) ** 2 / ((va**2 / (len(xa) - 1) if va else 0) + (vb**2 / (len(xb) - 1) if vb else 0))
    t = float(stdtrit(df, 1 - (1 - confidence) / 2))
    scale = abs(xa.mean())
    return (diff - t * se) / scale, (diff + t * se) / scale


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    noise_band: float,
    alpha: float = 0.01,
    min_samples: int = 4,
    strict: bool = False,
) -> Comparison:
    """Pinpoint-style comparison of ``a`` (reference) and ``b``.

    * ``different``: Mann-Whitney rejects at ``alpha`` and the medians differ by more than the band;
      with ``strict``, also the one-sided 95% Welch bound of the shift lies beyond the band (the
      shift is *shown* to exceed the noise, not just observed to).
    * ``same``: an equivalence test: the (1 - 2*alpha) Welch interval of the relative shift lies inside
      the band, so any real difference is within the declared noise.
    * ``need more runs``: neither yet. Callers add repeats and ask again.
    """
    p = mann_whitney(a, b)
    n_a, n_b = len(a), len(b)
    shift = relative_shift(a, b) if n_a and n_b else 0.0
    if min(n_a, n_b) < min_samples:
        return Comparison("need more runs", p, shift, n_a, n_b)
    lo, hi = shift_interval(a, b, confidence=1 - 2 * alpha)
    if p < alpha and abs(shift) > noise_band:
        if not strict:
            return Comparison("different", p, shift, n_a, n_b)
        slo, shi = shift_interval(a, b, confidence=0.90)
        if slo > noise_band or shi < -noise_band:
            return Comparison("different", p, shift, n_a, n_b)
    if -noise_band <= lo and hi <= noise_band:
        return Comparison("same", p, shift, n_a, n_b)
    return Comparison("need more runs", p, shift, n_a, n_b)


def bootstrap_shift(
    a: Sequence[float],
    b: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the relative shift of medians from ``a`` to ``b``."""
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    if len(xa) == 0 or len(xb) == 0:
        return -math.inf, math.inf
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(xa, size=(resamples, len(xa)), replace=True), axis=1)
    mb = np.median(rng.choice(xb, size=(resamples, len(xb)), replace=True), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        shifts = (mb - ma) / np.abs(ma)
    tail = (1.0 - confidence) / 2
    return float(np.quantile(shifts, tail)), float(np.quantile(shifts, 1 - tail))
