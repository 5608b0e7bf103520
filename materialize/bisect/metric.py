"""Bisecting a noisy metric: a Bayesian change-point model, the metric's twin of the gate posterior.

Model: the log of every sample is ``m + s * [position >= c] + noise``, with Gaussian noise of one
unknown spread shared by all positions. Hypotheses are pairs (culprit ``c``, log-shift ``s``);
``m`` (flat prior) and the spread (Jeffreys prior) are integrated out exactly, which leaves
``RSS(c, s) ** (-(n - 1) / 2)`` as the likelihood (a Student-t in disguise: few samples mean wide
doubt, so a verdict cannot rest on four lucky samples).

A *regression* is a shift beyond the declared noise band in the bad direction; a shift inside the
band, or in the good direction (an improvement), is "no regression", whatever its size. The prior
puts ``none_prior`` on "no regression" and spreads the rest over culprits and shift sizes.

Why Bayesian rather than repeated tests: the posterior is valid whatever the stopping rule, so
looking after every sample costs no error rate (the old 4 -> 8 -> 16 -> 32 looks at alpha = 0.01
each did). The bisect stops only when one culprit (with its shift beyond the band), or "no
regression", reaches the confidence; otherwise it says "inconclusive" and exits 1, never 0 on a
tie-break. Runs go to the ends while it is unclear whether there is a regression at all (the ends
are where a shift shows most), then to the position that splits the culprit posterior in half.

The decision is a pure function of the samples, so a crashed or replayed bisect makes the same
choices from the same data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import logsumexp

from materialize.bisect.stats import Comparison, compare

Direction = Literal["lower", "higher"]


@dataclass(frozen=True)
class MetricModel:
    good: int
    bad: int
    direction: Direction = "lower"  # which way is better
    threshold: float = 0.01  # declared noise band, as a fraction (1% = 0.01)
    confidence: float = 0.95
    none_prior: float = 0.25  # prior mass of "no regression beyond the band"
    min_samples: int = 5  # no verdict rests on fewer samples at either side of the boundary
    initial: int = 4  # samples at each end before anything else
    batch: int = 2  # samples per step at a midpoint
    max_samples: int = 400  # the whole bisect; then "inconclusive"
    max_per_position: int = 40  # a midpoint with this many samples is not sampled again


@dataclass
class MetricStep:
    """What the metric bisect knows and wants next."""

    status: Literal["run", "found", "no-regression", "inconclusive"]
    runs: list[tuple[int, int]] = field(default_factory=list)  # (position, extra samples)
    culprit: int | None = None
    probability: float | None = None  # P(culprit, regression) when found; P(no regression) when none
    p_regression: float = 0.0
    low: int = 0  # narrowest credible range of the culprit: (low, high]
    high: int = 0
    shift: float = 0.0  # posterior mean relative shift at the culprit (given a regression)
    verdicts: dict[int, str] = field(default_factory=dict)
    uncertain: list[int] = field(default_factory=list)
    ends: Comparison | None = None
    probs: dict[int, float] = field(default_factory=dict)  # P(culprit = k, regression)
    message: str = ""


@dataclass
class MetricPosterior:
    culprits: np.ndarray
    shifts: np.ndarray  # log-shift grid
    regression: np.ndarray  # bool mask over shifts
    weights: np.ndarray  # [culprit, shift], sums to 1

    @property
    def p_regression(self) -> float:
        return float(self.weights[:, self.regression].sum())

    @property
    def culprit_probs(self) -> np.ndarray:
        """P(culprit = c and the shift there is a regression)."""
        return self.weights[:, self.regression].sum(axis=1)

    def mean_shift(self, idx: int) -> float:
        w = self.weights[idx, self.regression]
        return float(np.expm1((w * self.shifts[self.regression]).sum() / w.sum())) if w.sum() > 0 else 0.0


def shift_grid(model: MetricModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-shifts, their prior weights, and which of them are regressions."""
    band = math.log1p(model.threshold)
    mags = np.unique(np.concatenate([np.geomspace(band / 20, math.log(2.0), 48), [band]]))
    shifts = np.concatenate([-mags[::-1], [0.0], mags])
    worse = 1.0 if model.direction == "lower" else -1.0  # the sign of a regression in log space
    regression = worse * shifts > band * (1 + 1e-9)
    prior = np.where(regression, (1 - model.none_prior) / regression.sum(), model.none_prior / (~regression).sum())
    return shifts, prior, regression


def posterior(model: MetricModel, samples: Mapping[int, Sequence[float]]) -> MetricPosterior | None:
    """Joint posterior over (culprit, shift); None until there are three positive samples."""
    pos = sorted(k for k, v in samples.items() if len(v))
    values = [np.log(np.asarray(samples[k], float)) for k in pos]
    n_all = sum(len(v) for v in values)
    if n_all < 3:
        return None
    if any(np.any(~np.isfinite(v)) for v in values):
        from materialize.bisect.state import BisectError

        raise BisectError("metric samples must be positive numbers: the model compares relative shifts")
    centre = float(np.mean(np.concatenate(values)))
    top = max([model.bad, *pos])
    n = np.zeros(top + 2)
    s1 = np.zeros(top + 2)
    s2 = np.zeros(top + 2)
    for k, v in zip(pos, values, strict=True):
        z = v - centre
        n[k], s1[k], s2[k] = len(z), z.sum(), (z * z).sum()
    culprits = np.arange(model.good + 1, model.bad + 1)
    # right-hand sums: positions >= c
    n_r = np.cumsum(n[::-1])[::-1][culprits]
    s_r = np.cumsum(s1[::-1])[::-1][culprits]
    shifts, prior, regression = shift_grid(model)
    big_n, big_s, big_q = n.sum(), s1.sum(), s2.sum()
    sz = big_s - shifts[None, :] * n_r[:, None]
    szz = big_q - 2 * shifts[None, :] * s_r[:, None] + shifts[None, :] ** 2 * n_r[:, None]
    rss = np.maximum(szz - sz * sz / big_n, 1e-300)
    loglik = -(big_n - 1) / 2 * np.log(rss)
    logw = loglik + np.log(prior)[None, :] - math.log(len(culprits))
    weights = np.exp(logw - logsumexp(logw))
    return MetricPosterior(culprits, shifts, regression, weights)


def _credible_range(culprits: np.ndarray, probs: np.ndarray, mass: float, default: tuple[int, int]) -> tuple[int, int]:
    total = probs.sum()
    if total <= 0:
        return default
    p = probs / total
    csum = np.concatenate([[0.0], np.cumsum(p)])
    best, best_len = default, len(p) + 1
    for a in range(len(p)):
        for b in range(a + 1, len(p) + 1):
            if csum[b] - csum[a] >= mass - 1e-12:
                if b - a < best_len:
                    best_len, best = b - a, (int(culprits[a]) - 1, int(culprits[b - 1]))
                break
    return best


def decide(
    model: MetricModel, samples: Mapping[int, Sequence[float]], skipped: Iterable[int] = (), jobs: int = 1
) -> MetricStep:
    """The next samples to take, or the verdict, from the samples collected so far."""
    skip = set(skipped)
    g, b = model.good, model.bad
    count = {k: len(v) for k, v in samples.items()}
    sg, sb = list(samples.get(g, ())), list(samples.get(b, ()))
    step = MetricStep("run", low=g, high=b)
    if len(sg) >= 2 and len(sb) >= 2:
        step.ends = compare(sg, sb, noise_band=model.threshold)
    ends_short = [(p, model.initial - count.get(p, 0)) for p in (g, b) if count.get(p, 0) < model.initial]
    if ends_short:
        step.runs = ends_short
        step.message = "sampling the good and bad ends first"
        return step
    post = posterior(model, samples)
    assert post is not None  # both ends have samples
    probs = post.culprit_probs
    step.p_regression = p_reg = post.p_regression
    step.probs = {int(c): float(p) for c, p in zip(post.culprits, probs, strict=True)}
    step.low, step.high = _credible_range(post.culprits, probs, model.confidence, (g, b))
    idx = int(np.argmax(probs))
    best, p_best = int(post.culprits[idx]), float(probs[idx])
    step.culprit, step.probability = best, p_best
    step.shift = post.mean_shift(idx)
    total = sum(count.values())
    sampled_below = [k for k in count if k < best and count[k]]
    left = max(sampled_below) if sampled_below else None
    enough = (
        left is not None and count.get(best, 0) >= model.min_samples and count[left] >= model.min_samples
    )
    if 1 - p_reg >= model.confidence and min(count[g], count[b]) >= model.min_samples:
        step.status, step.culprit, step.probability = "no-regression", None, 1 - p_reg
        step.message = (
            f"no regression in {g + 1}..{b}: P(no shift beyond the {model.threshold * 100:g}% band in the "
            f"bad direction)={1 - p_reg:.3f} (ends {_ends_text(step.ends, model)})"
        )
        return step
    if p_best >= model.confidence and enough and left == best - 1:
        step.status = "found"
        step.message = (
            f"decided: position {best} is the first bad position (P={p_best:.3f} >= {model.confidence:g}; "
            f"shift {step.shift * 100:+.2f}% against a {model.threshold * 100:g}% band)"
        )
        return step
    if total >= model.max_samples:
        step.status = "inconclusive"
        step.message = (
            f"undecided after {total} samples: best position {best} P={p_best:.3f}, "
            f"P(regression)={p_reg:.3f}; not a verdict (exit 1)"
        )
        step.culprit = None
        return step
    step.culprit = None  # only a verdict names a culprit
    step.runs = _next_runs(model, post, probs, count, skip, p_reg, jobs)
    if not step.runs:
        step.status = "inconclusive"
        step.message = (
            f"the culprit is one of positions {step.low + 1}..{step.high} and the positions that would tell "
            f"them apart are skipped (best {best} P={p_best:.3f})"
        )
        return step
    step.message = f"P(regression)={p_reg:.3f}; best position {best} P={p_best:.3f}"
    return step


def _ends_text(ends: Comparison | None, model: MetricModel | None = None) -> str:
    if ends is None:
        return "-"
    text = f"{ends.shift * 100:+.2f}%, n={ends.n_a}/{ends.n_b}"
    if model is not None:
        worse = ends.shift if model.direction == "lower" else -ends.shift
        kind = "an improvement, not a regression" if worse < 0 else "inside the band: not a regression"
        if abs(ends.shift) > model.threshold and worse < 0 or abs(ends.shift) <= model.threshold:
            text += f": {kind}"
    return text


def _next_runs(
    model: MetricModel,
    post: MetricPosterior,
    probs: np.ndarray,
    count: dict[int, int],
    skip: set[int],
    p_reg: float,
    jobs: int,
) -> list[tuple[int, int]]:
    """Where the next samples go: the ends while a regression is in doubt, else the culprit median."""
    g, b = model.good, model.bad
    runs: list[tuple[int, int]] = []
    if p_reg < 0.9 or min(count.get(g, 0), count.get(b, 0)) < model.min_samples:
        runs = [(g, model.batch), (b, model.batch)]
        if p_reg < 0.5:
            return runs[:jobs] if jobs > 1 else runs
    total = probs.sum()
    if total <= 0:
        return runs
    cdf = np.cumsum(probs / total)
    inner = [k for k in range(g + 1, b) if k not in skip]
    picked: list[int] = []
    for q in ([0.5] if jobs <= 1 else list(np.linspace(0, 1, jobs + 2)[1:-1])):
        # the two positions that bracket the q-quantile of the culprit (a run at k splits c <= k / c > k)
        lo = [k for k in inner if cdf[k - g - 1] < q]
        hi = [k for k in inner if cdf[k - g - 1] >= q]
        options = ([max(lo)] if lo else []) + ([min(hi)] if hi else [])
        options = [k for k in options if k not in picked and count.get(k, 0) < model.max_per_position]
        if options:
            picked.append(min(options, key=lambda k: (count.get(k, 0), k)))
    runs += [(k, model.batch) for k in picked]
    if not picked and p_reg < 0.99 and count.get(g, 0) < model.max_per_position:
        runs = [(g, model.batch), (b, model.batch)]  # no midpoint can help; only the ends can
    return runs
