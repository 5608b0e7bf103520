"""``bisect run --ledger``: a kill at any point between a run's two writes (the state that counts
it, the ledger line that keeps it) never leaves the state counting a run the ledger lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.bisect import runner
from materialize.bisect.state import StateStore
from materialize.ledger import read_ledger


class Killed(BaseException):
    """A ``kill -9`` at a chosen instant: nothing after it runs (not an Exception, so nothing catches it)."""


def _start(cli, gen_series, tmp_path: Path):
    series, hw = gen_series(6)
    work, ledger = tmp_path / "work", tmp_path / "runs" / "bisect.jsonl"
    common = ["--series", series, "--work-dir", work]
    assert cli("bisect", "start", *common, "--good", "0", "--bad", "6", "--requests", "32").exit_code == 0
    run = ["bisect", "run", *common, "--ledger", ledger, "--", *hw, "4", "0.001", "0.3", "32", "seed-k", "exit"]
    return work, ledger, run


def _ledger_ids(ledger: Path) -> list[str]:
    return [ln.record.identity for ln in read_ledger(ledger) if ln.record is not None] if ledger.exists() else []


def _assert_ledger_keeps_every_counted_run(work: Path, ledger: Path) -> None:
    state = StateStore(work).load()
    counted = [rid for o in state.observations if o.source == "run" for rid in o.records]
    ids = _ledger_ids(ledger)
    assert len(ids) == len(set(ids))  # no run written twice
    assert not set(counted) - set(ids), f"runs counted in state: {len(counted)}, records in ledger: {len(ids)}"
    assert len(counted) == state.run_count


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_kill_right_after_the_state_counted_a_run_keeps_it_in_the_ledger(
    invoke, gen_series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_at: int
) -> None:
    work, ledger, run = _start(invoke, gen_series, tmp_path)
    save = StateStore.save
    fired = []

    def save_then_die(self: StateStore, state) -> None:  # noqa: ANN001
        save(self, state)
        if state.run_count == kill_at and not fired:
            fired.append(True)
            raise Killed

    monkeypatch.setattr(StateStore, "save", save_then_die)
    with pytest.raises(Killed):
        invoke(*run)
    _assert_ledger_keeps_every_counted_run(work, ledger)  # the state's count is already on disk
    monkeypatch.setattr(StateStore, "save", save)
    res = invoke(*run)  # resumed
    assert res.exit_code == 0, (res.output, res.exception)
    _assert_ledger_keeps_every_counted_run(work, ledger)


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_kill_right_after_a_ledger_append_loses_nothing_either(
    invoke, gen_series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_at: int
) -> None:
    work, ledger, run = _start(invoke, gen_series, tmp_path)
    append = runner.append_record
    calls = []

    def append_then_die(path, record):  # noqa: ANN001, ANN202
        out = append(path, record)
        calls.append(True)
        if len(calls) == kill_at:
            raise Killed
        return out

    monkeypatch.setattr(runner, "append_record", append_then_die)
    with pytest.raises(Killed):
        invoke(*run)
    _assert_ledger_keeps_every_counted_run(work, ledger)
    monkeypatch.setattr(runner, "append_record", append)
    res = invoke(*run)
    assert res.exit_code == 0, (res.output, res.exception)
    _assert_ledger_keeps_every_counted_run(work, ledger)
    # The run the state never counted is still a run that happened: the ledger keeps it, and
    # 'bisect record' can add it later (it is not yet known to the state).
    assert len(_ledger_ids(ledger)) >= StateStore(work).load().run_count
