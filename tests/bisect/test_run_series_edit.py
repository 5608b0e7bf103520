"""``bisect run`` and a series edited while it runs: a refreshed patch changes the code later
candidates would be built from, so the run stops (exit 2, naming the patch) instead of bisecting two
codes under one set of positions; the results recorded before the edit stay."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from materialize.bisect import cli as bisect_cli
from materialize.bisect.state import BisectError, StateStore

# The "hardware": the first run refreshes a patch (daily work going on meanwhile), every run fails
# once step_4 is in the candidate.
HARNESS = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path

    marker = Path(os.environ["EDIT_MARKER"])
    if not marker.exists():
        marker.touch()
        patch = Path(os.environ["EDIT_PATCH"])
        patch.write_bytes(patch.read_bytes().replace(b"+step_6 = True", b"+step_6 = True  # edited"))
    model = Path(os.environ["MATERIALIZED_DIR"]) / "plugin" / "src" / "model.py"
    sys.exit(1 if model.exists() and "step_4 = True" in model.read_text() else 0)
    """
)


def _setup(invoke, gen_series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    series, _ = gen_series(6)
    patch = tmp_path / "project" / "patches" / "0006-step-6.patch"
    assert b"+step_6 = True" in patch.read_bytes()
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    monkeypatch.setenv("EDIT_MARKER", str(tmp_path / "edited"))
    monkeypatch.setenv("EDIT_PATCH", str(patch))
    work = tmp_path / "work"
    common = ["--series", series, "--work-dir", work]
    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "6", "--deterministic").exit_code == 0
    return work, common, harness, patch


def test_a_patch_refreshed_during_the_run_stops_it_naming_the_patch(
    invoke, gen_series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, common, harness, _ = _setup(invoke, gen_series, tmp_path, monkeypatch)
    res = invoke("bisect", "run", *common, "--", sys.executable, harness)
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, BisectError)
    message = str(res.exception)
    assert "changed during 'bisect run'" in message and "0006-step-6" in message, message
    assert "first bad patch" not in res.output
    state = StateStore(work).load()
    assert state.run_count >= 1  # the run in flight was of a candidate built before the edit: it stays
    assert state.run_count == len([o for o in state.observations if o.source == "run"])
    # and the bisect refuses to go on with the edited series, as before
    again = invoke("bisect", "run", *common, "--", sys.executable, harness)
    assert again.exit_code == 2 and "changed since 'bisect start'" in str(again.exception)


def test_a_patch_edited_while_a_candidate_is_built_is_not_used_nor_skipped(
    invoke, gen_series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit during the build itself: the candidate may hold the edited code, or fail to apply
    (a half-written patch); neither is tested nor marked skipped."""
    work, common, harness, patch = _setup(invoke, gen_series, tmp_path, monkeypatch)
    (tmp_path / "edited").touch()  # the harness leaves the series alone
    real = bisect_cli.PREPARE_FACTORY

    def editing_factory(series, root, overlay):  # noqa: ANN001, ANN202
        prep = real(series, root, overlay)

        def _prep(position: int):  # noqa: ANN202
            if position == 6:
                patch.write_bytes(patch.read_bytes()[:-20])  # a refresh caught halfway
            return prep(position)

        return _prep

    monkeypatch.setattr(bisect_cli, "PREPARE_FACTORY", editing_factory)
    res = invoke("bisect", "run", *common, "--", sys.executable, harness)
    assert res.exit_code == 2, res.output
    assert "0006-step-6" in str(res.exception) and "skipping" not in res.output
    state = StateStore(work).load()
    assert 6 not in state.skipped and all(o.position != 6 for o in state.observations)
