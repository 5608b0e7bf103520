"""What `bisect status` prints: the posterior table with bounds, and runs still needed."""

from __future__ import annotations

from materialize.bisect import session
from materialize.bisect.report import render


def test_gate_status_has_posterior_bounds_and_runs_to_099() -> None:
    state = session.start(series="s", n_patches=4, good=0, bad=4, gate="stage3", requests=32)
    session.observe(state, 1, source="record a:1", requests=256, failures=0)
    session.observe(state, 3, source="record a:2", requests=64, failures=5)
    session.skip(state, 2)
    text = render(state, session.decide(state), {1: "0001-a", 2: "0002-b", 3: "0003-c", 4: "0004-d"})
    assert "P(culprit)" in text
    assert "0/256 => rate < 1.17% at 95% (rule of three)" in text
    assert "5/64 => rate in [" in text and "(Clopper-Pearson)" in text
    assert "skipped" in text
    assert "to 0.99 (Wald estimate)" in text or "runs to reach 0.99" in text
    assert "next: position" in text


def test_metric_status_lists_samples_and_the_end_comparison() -> None:
    state = session.start(series="s", n_patches=4, good=0, bad=4, metric="ttft", threshold_pct=1)
    session.observe(state, 0, source="run", samples=[100.0, 100.4, 99.7, 100.1])
    session.observe(state, 4, source="run", samples=[103.0, 103.4, 102.7, 103.1])
    text = render(state, session.decide(state))
    assert "good end" in text and "bad end" in text
    assert "+3.00%" in text
    assert "ends: need more runs" in text or "ends: different" in text


def test_bounds_count_every_failing_run_even_without_counts() -> None:
    # the case: 42 runs of 32 requests, 7 of them only "failed" (exit code), true rate 0.39%
    state = session.start(series="s", n_patches=4, good=0, bad=4, gate="exit", requests=32)
    for i in range(42):
        session.observe(state, 2, source="run", requests=32, failures=1 if i < 7 else 0, censored=i < 7)
    text = render(state, session.decide(state))
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("2 "))
    assert "7/42 runs of 32 failed => rate in [" in line and "(Clopper-Pearson on runs)" in line
    lo, hi = (float(x.rstrip("%")) for x in line.split("rate in [")[1].split("]")[0].split(", "))
    assert lo < 0.39 < hi  # the true rate is inside, not above a "< 0.22%" bound
    assert "rule of three" not in line
