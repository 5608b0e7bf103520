"""`bisect run` through the real CLI: the run records the command writes are evidence only when
`runs validate` would call them valid for that candidate, and each counts once (its identity)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from materialize.bisect.runner import HarnessError
from materialize.bisect.state import StateStore

# mode: "unique" (a fresh x_run per run), "same" (one record every run: a stale copy), "twice" (the
# run's record appended twice), "degenerate" (an output the validator calls degenerate),
# "foreign-prefix" (the record names position 0's prefix whatever ran), "no-banner" (flag on, no banner)
GATE = r'''
import json, os, sys, uuid
mode = sys.argv[1]
pos = os.environ["MATERIALIZE_BISECT_POSITION"]
prefixes = json.loads(os.environ["HW_PREFIXES"])
rec = {"schema": 1, "materialization_id": os.environ["MATERIALIZATION_ID"],
       "series_prefix": prefixes[pos], "host": "sim", "time": "2026-11-29T12:00:00Z",
       "gates": [{"name": "stage3", "requests": 32, "failures": 0}]}
if mode != "same" and mode != "twice":
    rec["x_run"] = uuid.uuid4().hex
if mode == "degenerate":
    rec["outputs"] = [{"name": "chat", "text": "HT#3333333333333333333333333333333"}]
if mode == "foreign-prefix":
    rec["series_prefix"] = prefixes["0"]
if mode == "no-banner":
    rec["flags"] = {"STEP3": "1"}
lines = [json.dumps(rec)] * (2 if mode == "twice" else 1)
with open(os.environ["MATERIALIZE_LEDGER"], "a") as fh:
    fh.write("\n".join(lines) + "\n")
'''


def _bisect(invoke, gen_series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, *args: str):
    from materialize.bisect.candidates import SeriesIndex
    from materialize.series import load_series

    series, _ = gen_series(6, flagged={3: ("STEP3", "step 3 engaged")})
    index = SeriesIndex(load_series(series))
    monkeypatch.setenv("HW_PREFIXES", json.dumps({str(k): index.prefix_entries(k) for k in range(7)}))
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    started = invoke("bisect", "start", *common, "--good", "0", "--bad", "6", "--gate", "stage3", "--requests", "32")
    assert started.exit_code == 0, started.output
    gate = tmp_path / "gate.py"
    gate.write_text(GATE)
    ledger = tmp_path / "runs.jsonl"
    result = invoke("bisect", "run", *common, "--ledger", ledger, "--max-runs", "6", "--", sys.executable, gate, mode, *args)
    return result, StateStore(tmp_path / "work").load()


def test_records_with_their_own_identity_count(invoke, gen_series, tmp_path, monkeypatch) -> None:
    result, state = _bisect(invoke, gen_series, tmp_path, monkeypatch, "unique")
    assert result.exit_code == 1 and "--max-runs 6 reached" in result.output  # the budget, not a refusal
    assert len(state.observations) == 6


@pytest.mark.parametrize("mode", ["same", "twice"])
def test_a_record_already_counted_stops_the_run(invoke, gen_series, tmp_path, monkeypatch, mode) -> None:
    # was: the same record (same identity) counted once per run, 4 passes of the good end from one
    # record, while 'bisect record' and 'infer' of the --ledger copy count it once
    result, state = _bisect(invoke, gen_series, tmp_path, monkeypatch, mode)
    assert result.exit_code == 1 and isinstance(result.exception, HarnessError), result.output
    message = str(result.exception)
    assert "already has" in message and "x_run" in message and "run-" in message
    ids = [r for o in state.observations for r in o.records]
    assert len(ids) == len(set(ids)) <= 1


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("degenerate", "looks degenerate"),
        ("foreign-prefix", "series_prefix is position 0's, not the candidate's (position 6)"),
        ("no-banner", "flag STEP3 is enabled but patch"),
    ],
)
def test_a_record_runs_validate_rejects_is_not_counted(invoke, gen_series, tmp_path, monkeypatch, mode, why) -> None:
    # was: counted as a pass (the run checked only the materialization id of the command's records)
    result, state = _bisect(invoke, gen_series, tmp_path, monkeypatch, mode)
    assert result.exit_code == 1 and isinstance(result.exception, HarnessError), result.output
    assert why in str(result.exception) and "not evidence" in str(result.exception)
    assert all(o.position == 0 for o in state.observations) or not state.observations


@pytest.mark.parametrize("value", ["0", "-3.5"])
def test_a_metric_sample_that_is_not_positive_stops_the_run_and_is_not_kept(invoke, gen_series, tmp_path, value) -> None:
    # was: kept in the state, then every command (run, status) failed in the model with exit 2
    series, _ = gen_series(4)
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "4", "--metric", "mk").exit_code == 0
    gate = tmp_path / "gate.py"
    gate.write_text(f"print('{{\"metric\": \"mk\", \"value\": {value}}}')\n")
    result = invoke("bisect", "run", *common, "--", sys.executable, gate)
    assert result.exit_code == 1 and isinstance(result.exception, HarnessError), result.output
    assert f"sample {float(value)!r}" in str(result.exception) and "position " in str(result.exception)
    assert StateStore(tmp_path / "work").load().observations == []
    assert invoke("bisect", "status", *common).exit_code == 0


@pytest.mark.parametrize("printed", ["5", "0"])
def test_records_and_result_lines_of_one_run_must_agree(invoke, gen_series, tmp_path, monkeypatch, printed) -> None:
    # was: the records won and a JSON line saying 5 of 32 failed was ignored: a pass counted
    script = GATE.replace("lines = [", 'print(json.dumps({"gate": "stage3", "requests": 32, "failures": int(sys.argv[2])}))\nlines = [')
    monkeypatch.setattr(sys.modules[__name__], "GATE", script)
    result, state = _bisect(invoke, gen_series, tmp_path, monkeypatch, "unique", printed)
    if printed == "0":  # the same counts twice: the run counts (once)
        assert result.exit_code == 1 and "--max-runs 6 reached" in result.output
        assert len(state.observations) == 6
        return
    assert result.exit_code == 1 and isinstance(result.exception, HarnessError), result.output
    assert "0 failures of 32 requests but its JSON lines 5 failures of 32" in str(result.exception)
    assert state.observations == []
