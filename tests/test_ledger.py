"""The run ledger: schema v1 validation with file:line errors, and safe concurrent appends."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from materialize.ledger import LedgerError, append_record, iter_ledger, parse_record, read_ledger

SHA = "a" * 64


def record(**over) -> dict:
    rec = {
        "schema": 1,
        "materialization_id": "0123456789abcdef",
        "series_prefix": [{"name": "0001-prefill-plan", "sha256": SHA}],
        "flags": {"QWEN36_SDPA_STREAMING": "1", "QWEN36_PREFILLED_SLOTS_FIX": "0"},
        "profile": "prod",
        "profile_hash": "beef",
        "host": "cfx-llm2",
        "time": "2026-09-19T11:20:00Z",
        "gates": [{"name": "stage3", "requests": 32, "failures": 1}],
        "metrics": [{"name": "makespan_conc8", "unit": "s", "samples": [294.74, 295.1]}],
        "banners_seen": ["QWEN36_SDPA_STREAMING engaged"],
        "notes": "hugepages2 control",
    }
    rec.update(over)
    return rec


def test_a_serve_style_record_parses_with_its_accessors() -> None:
    rec = parse_record(record(x_log="/tmp/log", x_gate_details={"stage3": ["q17 wrong"]}))
    assert rec.position == 1
    assert rec.enabled_flags() == {"QWEN36_SDPA_STREAMING"}
    assert rec.gate("stage3").failures == 1 and rec.gate("stage2") is None
    assert rec.metric("makespan_conc8").samples == [294.74, 295.1]


def test_repeated_gate_entries_add_up_and_list_flags_work() -> None:
    rec = parse_record(
        record(
            flags=["A_FLAG"],
            gates=[{"name": "g", "requests": 32, "failures": 0}, {"name": "g", "requests": 32, "failures": 2}],
        )
    )
    assert rec.enabled_flags() == {"A_FLAG"}
    g = rec.gate("g")
    assert (g.requests, g.failures) == (64, 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": 2}, "schema must be 1"),
        ({"gates": [{"name": "g", "requests": 4, "failures": 5}]}, "failures (5) > requests (4)"),
        ({"time": "yesterday"}, "ISO 8601"),
        ({"materialization_id": "XYZ"}, "materialization_id"),
        ({"series_prefix": [{"name": "p", "sha256": "short"}]}, "series_prefix.0.sha256"),
        ({"metrics": [{"name": "m", "unit": "s", "samples": []}]}, "metrics.0.samples"),
        ({"gatez": []}, "unknown key(s) gatez"),
    ],
)
def test_schema_errors_say_which_field(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_record(record(**change))


def test_missing_key_is_named() -> None:
    rec = record()
    del rec["host"]
    with pytest.raises(ValueError, match="host: required key is missing"):
        parse_record(rec)


def test_read_ledger_reports_every_bad_line_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(
        json.dumps(record()) + "\n\n" + "{not json\n" + json.dumps(record(schema=7)) + "\n" + json.dumps([1]) + "\n"
    )
    lines = read_ledger(path)
    assert [ln.line for ln in lines] == [1, 3, 4, 5]
    assert lines[0].record is not None and lines[0].error is None
    assert lines[1].record is None and "invalid JSON" in lines[1].error
    assert lines[1].where == f"{path}:3"
    assert "schema must be 1" in lines[2].error
    assert "JSON object" in lines[3].error


def test_missing_ledger_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="no such ledger file"):
        read_ledger(tmp_path / "nope.jsonl")


def test_append_validates_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "runs.jsonl"
    append_record(path, record())
    append_record(path, record(host="cfx-llm3"))
    with pytest.raises(LedgerError, match="refusing to append an invalid record"):
        append_record(path, record(gates=[{"name": "g", "requests": 0, "failures": 0}]))
    recs = [ln.record for ln in iter_ledger([tmp_path / "sub"])]
    assert [r.host for r in recs] == ["cfx-llm2", "cfx-llm3"]
    assert recs[0].model_dump(by_alias=True)["schema"] == 1


def test_append_after_a_torn_last_line_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record()) + "\n" + '{"schema": 1, "materiali')  # a writer killed mid-line
    append_record(path, record(host="after"))
    lines = read_ledger(path)
    assert lines[1].record is None  # the torn line stays visible as invalid, never glued to ours
    assert lines[2].record is not None and lines[2].record.host == "after"


def _writer(path: str, n: int, tag: int) -> None:
    for i in range(n):
        append_record(path, record(host=f"h{tag}", notes="x" * 5000 + str(i)))


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), 25, t)) for t in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    lines = read_ledger(path)
    assert len(lines) == 100
    assert all(ln.record is not None for ln in lines)
    assert sorted({ln.record.host for ln in lines}) == ["h0", "h1", "h2", "h3"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # json.loads keeps the last of two keys: 9 failures would be read as 0
        (
            json.dumps(record())[:-1]
            + ', "gates": [{"name": "stage3", "requests": 32, "failures": 9}]'
            + ', "gates": [{"name": "stage3", "requests": 32, "failures": 0}]}',
            "key 'gates' appears twice",
        ),
        (json.dumps(record(gates=[{"name": "g", "requests": 32, "failures": 1}])).replace(
            '"failures": 1', '"failures": 1, "failures": 0'), "key 'failures' appears twice"),
        (json.dumps(record(metrics=[{"name": "m", "unit": "s", "samples": [float("nan")]}])), "NaN"),
        (json.dumps(record(metrics=[{"name": "m", "unit": "s", "samples": [float("inf")]}])), "Infinity"),
    ],
)
def test_duplicate_keys_and_non_numbers_are_refused_with_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record()) + "\n" + line + "\n")
    lines = read_ledger(path)
    assert lines[0].record is not None
    assert lines[1].record is None and message in lines[1].error, lines[1].error
    assert lines[1].where == f"{path}:2"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": True}, "schema must be 1"),
        ({"schema": 1.0}, "schema must be 1"),
        ({"gates": [{"name": "g", "requests": True, "failures": 0}]}, "gates.0.requests"),
        ({"gates": [{"name": "g", "requests": "32", "failures": 0}]}, "gates.0.requests"),
        ({"gates": [{"name": "g", "requests": 32.0, "failures": 0}]}, "gates.0.requests"),
        ({"gates": [{"name": "g", "requests": 32, "failures": False}]}, "gates.0.failures"),
        ({"gates": [{"name": "g", "requests": 32, "failures": "1"}]}, "gates.0.failures"),
        ({"gates": [{"name": "g", "requests": 32, "failures": 1, "censored": "false"}]}, "gates.0.censored"),
        ({"gates": [{"name": "g", "requests": 32, "failures": 1, "censored": 0}]}, "gates.0.censored"),
        ({"metrics": [{"name": "m", "unit": "s", "samples": [True]}]}, "metrics.0.samples.0"),
        ({"metrics": [{"name": "m", "unit": "s", "samples": ["294.7"]}]}, "metrics.0.samples.0"),
        ({"metrics": [{"name": "m", "unit": "s", "samples": [float("nan")]}]}, "metrics.0.samples.0"),
    ],
)
def test_numbers_are_numbers_not_bools_or_strings(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_record(record(**change))


def test_integral_samples_are_numbers() -> None:
    assert parse_record(record(metrics=[{"name": "m", "unit": "s", "samples": [295, 294.5]}])).metric("m").samples == [
        295.0,
        294.5,
    ]


def test_one_metric_in_two_units_in_one_record_is_refused() -> None:
    """0.3 s and 300 ms of one metric were merged into one sample list under the first unit."""
    mixed = [{"name": "latency", "unit": "s", "samples": [0.3]}, {"name": "latency", "unit": "ms", "samples": [300.0]}]
    with pytest.raises(ValueError, match=r"metrics.1: metric 'latency' is in unit 'ms' here and 's'"):
        parse_record(record(metrics=mixed))
    same = [{"name": "latency", "unit": "s", "samples": [0.3]}, {"name": "latency", "unit": "s", "samples": [0.4]}]
    assert parse_record(record(metrics=same)).metric("latency").samples == [0.3, 0.4]
