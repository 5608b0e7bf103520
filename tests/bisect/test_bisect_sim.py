"""bench/bisect_sim.py's A/B tooling: ``--set`` overrides a bisect constant, ``--dump``/``--compare``
give paired per-trial differences (the simulations themselves are not run here: they take minutes)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from materialize.bisect import posterior, session

SIM = Path(__file__).resolve().parents[2] / "bench" / "bisect_sim.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("bisect_sim_under_test", SIM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_set_overrides_a_constant_and_refuses_anything_else(sim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "CONFIRM_FACTOR", session.CONFIRM_FACTOR)
    monkeypatch.setattr(posterior, "LEADER_FOCUS", posterior.LEADER_FOCUS)
    sim.apply_settings(["session.CONFIRM_FACTOR=2", "posterior.LEADER_FOCUS=0.5"])
    assert session.CONFIRM_FACTOR == 2 and posterior.LEADER_FOCUS == 0.5
    for bad in ("session.decide=1", "os.sep=1", "posterior.NO_SUCH=1", "session.CONFIRM_FACTOR="):
        with pytest.raises(SystemExit):
            sim.apply_settings([bad])


def test_compare_prints_paired_differences(sim, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = {"gate: x": [[True, False, 10], [True, False, 20], [False, True, 30]]}
    b = {"gate: x": [[True, False, 8], [True, False, 20], [True, False, 26]]}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    sim.compare(str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    out = capsys.readouterr().out
    assert "gate: x (3 trials)" in out
    assert "A 20.0 runs, 66.7% right, 1 confident wrong" in out
    assert "B 18.0 runs, 100.0% right, 0 confident wrong" in out
    assert "B - A -2.0 +- 1.2 runs" in out


def test_same_knowledge_note_gives_ours_the_rates_the_tuned_rule_has(sim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The note reruns ours with ``known=(P0, p1)`` (what ``--baseline-rate``/``--culprit-rate`` give) and
    prints the tuned rule beside it at ours' accuracy."""
    seen = []

    def trial(args):
        sc, seed = args
        seen.append(sc.known)
        return True, False, 40, 8, {}

    monkeypatch.setattr(sim, "gate_trial", trial)
    pool = type("Pool", (), {"map": staticmethod(lambda f, xs, chunksize=1: list(map(f, xs)))})()
    sc = sim.GateScenario("gate: culprit at start (2)", 2)
    note = sim.same_knowledge_note(pool, [(sc, [None] * 3)], 1)
    assert seen == [(sim.P0, sim.P1)] * 3
    assert note.startswith("ours given both rates") and "40.0 (100.0% right, 0 confident wrong) at 2" in note
    assert "the tuned rule at that accuracy: " in note and " (x" in note


@pytest.mark.parametrize("no_notes", [False, True])
def test_no_notes_prints_the_rows_without_the_notes(
    sim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, no_notes: bool
) -> None:
    """``--no-notes`` (for A/B runs) prints and dumps the rows but none of the notes below the table,
    which rerun ours and tune the retry rules for minutes."""

    class Pool:  # in-process: the faked trial is not importable by a worker
        def __init__(self, max_workers=None, initializer=None, initargs=()) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> bool:
            return False

        def map(self, f, xs, chunksize=1):
            return list(map(f, xs))

    monkeypatch.setattr(sim, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(sim, "gate_trial", lambda args: (True, False, 40, 8, {"confirm": 3}))
    monkeypatch.setattr(sim, "best_rule", lambda *a, **k: ("x1 >=1", 1.0, 1.0, 1.0))
    monkeypatch.setattr(sim, "one_rule_for_all", lambda *a, **k: "ONE-RULE")
    monkeypatch.setattr(sim, "ends_checked_note", lambda *a, **k: "ENDS-CHECKED")
    monkeypatch.setattr(sim, "same_knowledge_note", lambda *a, **k: "SAME-KNOWLEDGE")
    dump = tmp_path / "a.json"
    argv = ["bisect_sim.py", "--trials", "2", "--workers", "1", "--only", "gate: culprit", "--dump", str(dump)]
    monkeypatch.setattr(sys, "argv", argv + (["--no-notes"] if no_notes else []))
    sim.main()
    out = capsys.readouterr().out
    assert out.count("| gate: culprit") == 4
    assert len(json.loads(dump.read_text())) == 4
    for note in ("ONE-RULE", "ENDS-CHECKED", "SAME-KNOWLEDGE", "retry rule tuned per position"):
        assert (note in out) is not no_notes
    assert "where the runs went" in out  # the rows' own notes stay
