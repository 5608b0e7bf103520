"""The public bisect API other commands use: the work directory and a position's bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.bisect import api, session


def test_position_evidence_counts_exit_code_failures() -> None:
    state = session.start(series="s", n_patches=4, good=0, bad=4, gate="g", requests=32)
    for failures in (0, 1, 0):
        session.observe(state, 2, source="run", requests=32, failures=failures, censored=failures > 0)
    session.observe(state, 3, source="run", requests=64, failures=2)
    assert api.position_evidence(state, 2).startswith("1/3 runs of 32 failed => rate in [")
    assert api.position_evidence(state, 3).startswith("2/64 => rate in [")
    assert api.position_evidence(state, 1) == ""


def test_work_dir_next_to_series_or_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    assert api.work_dir(None, str(tmp_path / "series/default.yaml")) == tmp_path.resolve() / "work"
    monkeypatch.setenv("MATERIALIZE_WORK", str(tmp_path / "elsewhere"))
    assert api.work_dir(None, "series/default.yaml") == tmp_path / "elsewhere"
    assert api.work_dir(tmp_path / "given") == tmp_path / "given"
