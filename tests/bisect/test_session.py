"""The bisect state machine: start checks, verdicts, replay gives the same state and the same decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.bisect import session
from materialize.bisect.state import BisectError, parse_log, render_log


def test_start_checks_its_arguments() -> None:
    with pytest.raises(BisectError, match="good < bad"):
        session.start(series="s", n_patches=4, good=3, bad=3)
    with pytest.raises(BisectError, match="not both"):
        session.start(series="s", n_patches=4, good=0, bad=4, gate="g", metric="m")
    with pytest.raises(BisectError, match="confidence"):
        session.start(series="s", n_patches=4, good=0, bad=4, confidence=1.0)


def test_verdicts_need_a_candidate_and_the_right_mode() -> None:
    state = session.start(series="s", n_patches=4, good=0, bad=4)
    with pytest.raises(BisectError, match="bisect next"):
        session.mark(state, "good")
    with pytest.raises(BisectError, match="outside the series"):
        session.mark(state, "bad", 9)
    metric = session.start(series="s", n_patches=4, good=0, bad=4, metric="makespan")
    with pytest.raises(BisectError, match="metric bisect takes samples"):
        session.mark(metric, "good", 2)


def test_deterministic_bisect_walks_like_git_bisect() -> None:
    state = session.start(series="s", n_patches=16, good=0, bad=16, deterministic=True)
    culprit, steps = 11, 0
    while True:
        step = session.decide(state)
        if step.status == "found":
            break
        for pos, repeats in step.runs:
            assert repeats == 1
            session.note_candidate(state, pos, None)
            session.mark(state, "bad" if pos >= culprit else "good")
            steps += 1
    assert step.culprit == culprit
    assert steps <= 2 + 5  # the two ends, then log2(16) + 1


def test_the_ends_come_first_and_a_failing_good_end_stops_the_bisect() -> None:
    state = session.start(series="s", n_patches=16, good=0, bad=16, gate="stage3", requests=32)
    step = session.decide(state)
    assert sorted(p for p, _ in step.runs) == [0, 16] and "ends" in step.message
    for _ in range(5):  # a harness that crashes: every run fails, the good end too
        session.observe(state, 0, source="t", requests=32, failures=1, censored=True)
    step = session.decide(state)
    assert step.status == "good-end-fails"
    assert "the good end (position 0) is not good: 5 of 5 run(s) failed" in step.message


def test_a_range_without_culprit_ends_with_no_regression() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    state = session.start(series="s", n_patches=32, good=0, bad=32, gate="stage3", requests=32)
    for _ in range(3000):  # seed 3 is a long one: 2233 runs (a 1.5x culprit must be ruled out)
        step = session.decide(state)
        if step.status != "run":
            break
        for pos, repeats in step.runs:
            for _ in range(repeats):
                fails = int(rng.binomial(32, 1 / 256))
                session.observe(state, pos, source="t", requests=32, failures=min(fails, 1), censored=fails > 0)
    assert step.status == "no-regression", step.message
    assert step.message.startswith("no regression in 1..32: every prefix is consistent with one failure rate <=")


def _flaky_state() -> session.BisectState:
    state = session.start(series="s", n_patches=8, good=0, bad=8, gate="stage3", requests=32)
    session.mark(state, "good", 2)
    session.mark(state, "bad", 6, failures=3)
    session.mark(state, "bad", 5)
    session.skip(state, 4)
    session.observe(state, 3, source="record runs.jsonl:7", materialization_id="ab" * 8, requests=256, failures=0)
    return state


def test_replaying_the_log_rebuilds_the_same_evidence_and_decision(tmp_path: Path) -> None:
    state = _flaky_state()
    log = tmp_path / "log"
    log.write_text(render_log(state))
    again = session.replay(parse_log(log.read_text(), str(log)), str(log), "s", 8)
    assert again.observations == state.observations
    assert again.skipped == state.skipped
    assert again.log == state.log
    a, b = session.decide(state), session.decide(again)
    assert (a.status, a.runs, a.culprit) == (b.status, b.runs, b.culprit)
    assert a.probability == pytest.approx(b.probability)


def test_metric_log_replays_samples() -> None:
    state = session.start(series="s", n_patches=8, good=0, bad=8, metric="ttft", direction="higher", threshold_pct=2)
    session.observe(state, 0, source="run", samples=[1.0, 2.5])
    again = session.replay(parse_log(render_log(state), "log"), "log", "s", 8)
    assert again.observations == state.observations and again.direction == "higher"
    assert again.threshold == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("good 3\n", r"log:1: 'good' before 'start'"),
        ("start --good 0 --bad 8\nfrobnicate 3\n", r"log:2: unknown bisect command"),
        ("start --good 0\n", r"log:1: 'start' is missing --bad"),
        ("start --good 0 --bad 8\nobserve 3 --requests x\n", r"log:2: 'observe'"),
        ("# only comments\n", "no 'start' line"),
    ],
)
def test_malformed_logs_name_the_line(text: str, message: str) -> None:
    with pytest.raises(BisectError, match=message):
        session.replay(parse_log(text, "log"), "log", "s", 8)
