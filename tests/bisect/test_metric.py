"""Pinpoint-style metric bisection on simulated noisy samples (seeded, so results are exact)."""

from __future__ import annotations

import numpy as np

from materialize.bisect.metric import MetricModel, decide


def _bisect(model: MetricModel, culprit: int, shift: float, noise: float, seed: int, skipped=()):
    rng = np.random.default_rng(seed)
    samples: dict[int, list[float]] = {}
    runs = 0
    while runs < 3000:
        step = decide(model, samples, skipped)
        if step.status != "run":
            return step, runs
        for pos, n in step.runs:
            better = 1 if model.direction == "lower" else -1
            mean = 100 * (1 + better * shift) if pos >= culprit else 100.0
            samples.setdefault(pos, []).extend(rng.normal(mean, noise * 100, n))
            runs += n
    raise AssertionError("did not terminate")


def test_two_percent_shift_under_one_percent_noise_is_found() -> None:
    found = 0
    for seed in range(10):
        culprit = 1 + seed * 3
        step, runs = _bisect(MetricModel(good=0, bad=32, threshold=0.01), culprit, 0.02, 0.01, seed)
        found += step.status == "found" and step.culprit == culprit
        assert runs < 400
    assert found >= 9


def test_higher_is_better_metrics_regress_downwards() -> None:
    step, _ = _bisect(MetricModel(good=0, bad=16, direction="higher", threshold=0.01), 11, 0.03, 0.01, 1)
    assert (step.status, step.culprit) == ("found", 11)


def test_a_shift_inside_the_noise_band_is_never_a_regression() -> None:
    for seed in range(10):
        step, _ = _bisect(MetricModel(good=0, bad=32, threshold=0.01), 7, 0.004, 0.01, seed)
        assert step.status in ("no-regression", "inconclusive")
        assert step.culprit is None


def test_an_improvement_is_not_a_regression() -> None:
    model = MetricModel(good=0, bad=8, threshold=0.01)
    samples = {0: [100.0, 100.5, 99.5, 100.2] * 2, 8: [90.0, 90.5, 89.5, 90.2] * 2}
    step = decide(model, samples)
    assert step.status == "no-regression"
    assert "not a regression" in step.message


def test_skipped_neighbours_leave_a_range() -> None:
    step, _ = _bisect(MetricModel(good=0, bad=8, threshold=0.01), 5, 0.05, 0.01, 3, skipped=(4, 5))
    assert step.status == "inconclusive"
    assert (step.low, step.high) == (3, 6)
    assert "3" in step.message or "4..6" in step.message


def test_decisions_are_a_pure_function_of_the_samples() -> None:
    rng = np.random.default_rng(9)
    samples = {0: list(rng.normal(100, 1, 8)), 16: list(rng.normal(103, 1, 8)), 8: list(rng.normal(100, 1, 3))}
    model = MetricModel(good=0, bad=16)
    a, b = decide(model, samples, jobs=3), decide(model, dict(samples), jobs=3)
    assert a.runs == b.runs and a.status == "run"
    assert len({p for p, _ in a.runs}) == len(a.runs) >= 3  # k-ary: more positions for more hosts


def test_no_verdict_rests_on_four_samples() -> None:
    model = MetricModel(good=0, bad=8, threshold=0.01)
    samples = {0: [100.0, 100.2, 99.8, 100.1], 3: [100.1, 99.9, 100.0, 100.2],
               4: [110.0, 110.2, 109.8, 110.1], 8: [110.1, 109.9, 110.0, 110.2]}
    step = decide(model, samples)
    assert step.status == "run" and step.culprit is None  # P(4) is high, but 4 samples are not a verdict
    more = {k: v + [v[0], v[1]] for k, v in samples.items()}
    step = decide(model, more)
    assert (step.status, step.culprit) == ("found", 4)
    assert step.probability is not None and step.probability >= 0.95
    assert "P=1.000" in step.message and ("shift +9." in step.message or "shift +10." in step.message)
