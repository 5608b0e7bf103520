"""``bisect record`` / ``infer``: one hardware run is one piece of evidence, however it is fed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from materialize.bisect.state import StateStore


@pytest.fixture
def six(invoke, gen_series, tmp_path: Path):
    """A 6-patch series, a bisect on it, and rec(position, failures, **over) -> one record line."""
    series, _ = gen_series(6)
    from materialize.bisect.candidates import SeriesIndex
    from materialize.engine import materialize
    from materialize.series import load_series

    s = load_series(series)
    index = SeriesIndex(s)
    common = ["--series", series, "--work-dir", tmp_path / "work"]

    def rec(pos: int, failures: int, **over) -> str:
        r = {
            "schema": 1,
            "materialization_id": materialize(s, upto=pos).id,
            "series_prefix": index.prefix_entries(pos),
            "host": "h",
            "time": "2026-09-19T11:20:00Z",
            "gates": [{"name": "stage3", "requests": 32, "failures": failures}],
        }
        r.update(over)
        return json.dumps(r)

    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "6", "--gate", "stage3", "--requests", "32").exit_code == 0
    return common, rec


def runs_at(tmp_path: Path, pos: int) -> list[tuple[int, int]]:
    return [(o.requests, o.failures) for o in StateStore(tmp_path / "work").load().observations if o.position == pos]


def test_one_run_fed_through_several_paths_counts_once(invoke, six, tmp_path: Path, monkeypatch) -> None:
    """The reproducer: one.jsonl one.jsonl ./one.jsonl $PWD/one.jsonl was 4 runs, 12/128."""
    common, rec = six
    monkeypatch.chdir(tmp_path)
    (tmp_path / "one.jsonl").write_text(rec(6, 3) + "\n")
    res = invoke("bisect", "record", *common, "one.jsonl", "one.jsonl", "./one.jsonl", str(tmp_path / "one.jsonl"))
    assert res.exit_code == 0, res.output
    assert "recorded 1 run(s)" in res.output and "skipped 3 already recorded" in res.output
    assert runs_at(tmp_path, 6) == [(32, 3)]
    # a later command, another path, a copy of the file, the same record re-serialized: still once
    (tmp_path / "copy.jsonl").write_text(json.dumps(json.loads(rec(6, 3)), indent=None, sort_keys=True) + "\n")
    res = invoke("bisect", "record", *common, str(tmp_path / "one.jsonl"), "copy.jsonl")
    assert res.exit_code == 0 and "recorded 0 run(s)" in res.output and "skipped 2 already recorded" in res.output
    assert runs_at(tmp_path, 6) == [(32, 3)]
    # a different run (another time) is another piece of evidence
    (tmp_path / "two.jsonl").write_text(rec(6, 3) + "\n" + rec(6, 3, time="2026-09-19T11:25:00Z") + "\n")
    res = invoke("bisect", "record", *common, "two.jsonl")
    assert "recorded 1 run(s)" in res.output and "skipped 1 already recorded" in res.output
    assert runs_at(tmp_path, 6) == [(32, 3), (32, 3)]


def test_records_fed_again_after_a_replay_still_count_once(invoke, six, tmp_path: Path) -> None:
    common, rec = six
    ledger = tmp_path / "runs.jsonl"
    ledger.write_text(rec(6, 3) + "\n")
    assert invoke("bisect", "record", *common, ledger).exit_code == 0
    log = tmp_path / "bisect.log"
    log.write_text(invoke("bisect", "log", *common).output)
    assert invoke("bisect", "replay", *common, log).exit_code == 0
    res = invoke("bisect", "record", *common, ledger)
    assert "recorded 0 run(s)" in res.output, res.output
    assert runs_at(tmp_path, 6) == [(32, 3)]


def test_infer_does_not_count_a_run_twice(invoke, six, tmp_path: Path) -> None:
    common, rec = six
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a.jsonl").write_text(rec(6, 3) + "\n" + rec(6, 3) + "\n")
    (runs / "b.jsonl").write_text(rec(6, 3) + "\n")
    res = invoke("bisect", "infer", *common, "--runs", runs, "--runs", runs / "a.jsonl")
    assert "used 1 past run(s)" in res.output and "skipped 4 already recorded" in res.output, res.output
    assert runs_at(tmp_path, 6) == [(32, 3)]


def test_a_ledger_written_by_bisect_run_is_not_counted_again(invoke, six, tmp_path: Path) -> None:
    common, _ = six
    h = tmp_path / "h.py"
    h.write_text(
        "import os, sys\n"
        "pos = int(os.environ['MATERIALIZE_BISECT_POSITION'])\n"
        "print('{\"gate\":\"stage3\",\"requests\":32,\"failures\":%d}' % (8 if pos >= 4 else 0))\n"
    )
    ledger = tmp_path / "bisect.jsonl"
    res = invoke("bisect", "run", *common, "--max-runs", "6", "--ledger", ledger, "--", sys.executable, h)
    before = StateStore(tmp_path / "work").load().observations
    assert len(before) == 6, res.output
    res = invoke("bisect", "record", *common, ledger)
    assert "recorded 0 run(s)" in res.output and "skipped 6 already recorded" in res.output, res.output
    assert len(StateStore(tmp_path / "work").load().observations) == 6


def test_a_key_given_twice_is_refused_by_runs_validate_and_record(invoke, six, tmp_path: Path) -> None:
    common, rec = six
    line = rec(6, 9)[:-1] + ', "gates": [{"name": "stage3", "requests": 32, "failures": 0}]}'
    ledger = tmp_path / "dup.jsonl"
    ledger.write_text(line + "\n")
    series = common[1]
    res = invoke("runs", "validate", "--series", series, ledger)
    assert res.exit_code == 1 and f"{ledger}:1: invalid: schema: invalid JSON: key 'gates' appears twice" in res.output
    res = invoke("bisect", "record", *common, ledger)
    assert res.exit_code == 1 and "recorded 0 run(s)" in res.output
    assert runs_at(tmp_path, 6) == []


def test_infer_exits_1_when_it_ignored_invalid_records(invoke, six, tmp_path: Path) -> None:
    common, rec = six
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a.jsonl").write_text(rec(6, 3) + "\n" + rec(6, 3, host=7) + "\n")
    res = invoke("bisect", "infer", *common, "--runs", runs)
    assert res.exit_code == 1, res.output
    assert "used 1 past run(s)" in res.output and "1 invalid record(s) ignored" in res.output
    (runs / "a.jsonl").write_text(rec(6, 3) + "\n")
    assert invoke("bisect", "infer", *common, "--runs", runs).exit_code == 0


def test_a_metric_in_another_unit_is_refused_never_merged(invoke, gen_series, tmp_path: Path) -> None:
    """The red team's repro: the good end in s, the bad end the same latency in ms -> 'culprit, +99900%'."""
    series, _ = gen_series(2)
    from materialize.bisect.candidates import SeriesIndex
    from materialize.engine import materialize
    from materialize.series import load_series

    s = load_series(series)
    index = SeriesIndex(s)

    def rec(pos: int, unit: str, value: float, i: int) -> str:
        return json.dumps({
            "schema": 1, "materialization_id": materialize(s, upto=pos).id, "series_prefix": index.prefix_entries(pos),
            "host": "h", "time": f"2026-01-01T0{pos}:{i:02d}:00Z",
            "metrics": [{"name": "latency", "unit": unit, "samples": [value + i * 1e-4 * (1000 if unit == "ms" else 1)]}],
        })  # fmt: skip

    common = ["--series", series, "--work-dir", tmp_path / "work"]
    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "2", "--metric", "latency").exit_code == 0
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(rec(0, "s", 0.3, i) + "\n" + rec(2, "ms", 300.0, i) + "\n" for i in range(10)))
    res = invoke("runs", "validate", "--series", series, mixed)
    assert res.exit_code == 1, res.output
    assert f"{mixed}:2: invalid: metric 'latency' is in unit 'ms' but in 's' at {mixed}:1" in res.output
    res = invoke("bisect", "record", *common, mixed)
    assert res.exit_code == 1 and "recorded 10 run(s)" in res.output and "10 invalid" in res.output, res.output
    state = StateStore(tmp_path / "work").load()
    assert (state.unit, state.unit_source) == ("s", f"record {mixed}:1")
    assert all(o.position == 0 for o in state.observations)
    # a later command: the bisect's unit holds across commands (and replays from its log)
    later = tmp_path / "later.jsonl"
    later.write_text(rec(2, "ms", 300.0, 30) + "\n")
    res = invoke("bisect", "record", *common, later)
    assert res.exit_code == 1 and f"{later}:1: invalid: metric 'latency' is in unit 'ms' but in 's' at record {mixed}:1" in (
        res.output
    ), res.output
    assert any("--unit s" in line for line in state.log)
    good = tmp_path / "good.jsonl"
    good.write_text(rec(2, "s", 0.3, 31) + "\n")
    assert invoke("bisect", "record", *common, good).exit_code == 0
    log = invoke("bisect", "log", *common)
    replayed = tmp_path / "replayed.log"
    replayed.write_text(log.output)
    res = invoke("bisect", "replay", *common, replayed)
    assert res.exit_code == 0, res.output
    assert StateStore(tmp_path / "work").load().unit == "s"


def test_a_sample_in_another_unit_is_refused_by_the_session() -> None:
    from materialize.bisect import session
    from materialize.bisect.state import BisectError

    state = session.start(series="s.yaml", n_patches=2, good=0, bad=2, metric="latency")
    session.observe(state, 0, source="record a.jsonl:1", samples=[0.3], unit="s")
    with pytest.raises(BisectError, match=r"record b.jsonl:4: metric 'latency' in unit 'ms', but this bisect's samples "
                                          r"are in 's' \(since record a.jsonl:1\)"):
        session.observe(state, 2, source="record b.jsonl:4", samples=[300.0], unit="ms")
    assert [o.position for o in state.observations] == [0]
