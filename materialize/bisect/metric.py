"""Bisecting a noisy metric, the way Chromium's Pinpoint does it.

Each candidate collects repeated samples; a Mann-Whitney U test against the good end and against the
bad end answers "same as good", "same as bad" or "need more runs", and repeats double until it can
answer (up to ``max_samples``). The ends must first differ by more than the declared noise band in
the regression direction: a change inside the band is never called a regression.

The decision is a pure function of the samples collected so far, so a crashed or replayed bisect
makes exactly the same choices from the same data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from materialize.bisect.stats import Comparison, compare

Direction = Literal["lower", "higher"]


@dataclass(frozen=True)
class MetricModel:
    good: int
    bad: int
    direction: Direction = "lower"  # which way is better
    threshold: float = 0.01  # declared noise band, as a fraction (1% = 0.01)
    alpha: float = 0.01
    initial: int = 4
    max_samples: int = 32


@dataclass
class MetricStep:
    """What the metric bisect knows and wants next."""

    status: Literal["run", "found", "no-regression", "inconclusive"]
    runs: list[tuple[int, int]] = field(default_factory=list)  # (position, extra samples)
    culprit: int | None = None
    low: int = 0  # last position judged good
    high: int = 0  # first position judged bad
    verdicts: dict[int, str] = field(default_factory=dict)
    uncertain: list[int] = field(default_factory=list)
    ends: Comparison | None = None
    message: str = ""


def _regressed(model: MetricModel, shift: float) -> bool:
    return shift > model.threshold if model.direction == "lower" else shift < -model.threshold


def _grow(n: int, model: MetricModel) -> int:
    """How many more samples: reach ``initial``, then double (Pinpoint's escalation)."""
    if n < model.initial:
        return model.initial - n
    return min(n, model.max_samples - n)


def classify(
    model: MetricModel, good: Sequence[float], bad: Sequence[float], cand: Sequence[float]
) -> tuple[str, Comparison, Comparison]:
    """'good', 'bad' or 'need more runs' for a candidate's samples, by comparison with both ends."""
    to_good = compare(good, cand, noise_band=model.threshold / 2, alpha=model.alpha)
    to_bad = compare(bad, cand, noise_band=model.threshold / 2, alpha=model.alpha)
    if to_good.verdict == "different" and to_bad.verdict != "different":
        return "bad", to_good, to_bad
    if to_bad.verdict == "different" and to_good.verdict != "different":
        return "good", to_good, to_bad
    return "need more runs", to_good, to_bad


def _nearest(model: MetricModel, good: Sequence[float], bad: Sequence[float], cand: Sequence[float]) -> str:
    import numpy as np

    m = float(np.median(cand))
    return "good" if abs(m - float(np.median(good))) <= abs(m - float(np.median(bad))) else "bad"


def decide(
    model: MetricModel, samples: Mapping[int, Sequence[float]], skipped: Iterable[int] = (), jobs: int = 1
) -> MetricStep:
    """The next runs, or the answer, from the samples collected so far."""
    skip = set(skipped)
    g, b = model.good, model.bad
    sg, sb = list(samples.get(g, ())), list(samples.get(b, ()))
    step = MetricStep("run", low=g, high=b)
    if len(sg) < model.initial or len(sb) < model.initial:
        step.runs = [(p, model.initial - len(s)) for p, s in ((g, sg), (b, sb)) if len(s) < model.initial]
        step.message = "sampling the good and bad ends"
        return step
    ends = compare(sg, sb, noise_band=model.threshold, alpha=model.alpha, strict=True)
    step.ends = ends
    if ends.verdict == "same" or (ends.verdict == "different" and not _regressed(model, ends.shift)):
        step.status = "no-regression"
        step.message = (
            f"bad end differs from good end by {ends.shift * 100:+.2f}% (p={ends.p_value:.3g}): "
            f"not a regression beyond the {model.threshold * 100:.2f}% noise band"
        )
        return step
    if ends.verdict == "need more runs":
        n = min(len(sg), len(sb))
        if n >= model.max_samples:
            step.status = "inconclusive"
            step.message = f"ends still undecided after {n} samples each (p={ends.p_value:.3g})"
            return step
        step.runs = [(p, _grow(len(s), model)) for p, s in ((g, sg), (b, sb)) if len(s) < model.max_samples]
        step.message = "ends not yet distinguishable: more samples at both ends"
        return step

    lo, hi = g, b
    while True:
        inner = [k for k in range(lo + 1, hi) if k not in skip]
        if not inner:
            step.low, step.high = lo, hi
            if hi - lo == 1:
                step.status, step.culprit = "found", hi
                step.message = f"first bad position {hi}"
            else:
                step.status = "inconclusive"
                step.message = f"culprit is one of positions {lo + 1}..{hi} (the others were skipped)"
            return step
        mid = min(inner, key=lambda k: (abs(2 * k - (lo + hi)), k))
        sm = list(samples.get(mid, ()))
        verdict = "need more runs"
        if len(sm) >= model.initial:
            verdict, _, _ = classify(model, sg, sb, sm)
            if verdict == "need more runs" and len(sm) >= model.max_samples:
                verdict = _nearest(model, sg, sb, sm)
                step.uncertain.append(mid)
        if verdict == "need more runs":
            step.low, step.high = lo, hi
            step.runs = [(mid, _grow(len(sm), model))]
            # The candidate's power is capped by the ends' sample count: grow them alongside.
            for p, s in ((g, sg), (b, sb)):
                if len(s) < len(sm) + step.runs[0][1] and len(s) < model.max_samples:
                    step.runs.append((p, min(len(sm) + step.runs[0][1], model.max_samples) - len(s)))
            step.runs.extend(_speculative(model, samples, skip, lo, mid, hi, jobs - len(step.runs)))
            step.message = f"position {mid}: need more runs"
            return step
        step.verdicts[mid] = verdict
        if verdict == "good":
            lo = mid
        else:
            hi = mid


def _speculative(
    model: MetricModel,
    samples: Mapping[int, Sequence[float]],
    skip: set[int],
    lo: int,
    mid: int,
    hi: int,
    free: int,
) -> list[tuple[int, int]]:
    """k-ary search: with spare hosts, also sample the next midpoints on both sides of ``mid``."""
    out: list[tuple[int, int]] = []
    frontier = [(lo, mid), (mid, hi)]
    while free > 0 and frontier:
        a, z = frontier.pop(0)
        inner = [k for k in range(a + 1, z) if k not in skip]
        if not inner:
            continue
        m = min(inner, key=lambda k: (abs(2 * k - (a + z)), k))
        have = len(samples.get(m, ()))
        if have < model.initial:
            out.append((m, model.initial - have))
            free -= 1
        frontier.extend([(a, m), (m, z)])
    return out
