"""JSON that someone else wrote: run records (bench/runs/*.jsonl, often from other people's machines),
an index's PEP 691 page, a manifest.json in a folder named by ``--out``.

Nested 100k arrays deep, ``json.loads`` raised RecursionError, which no handler took for bad input: a
traceback (exit 1) from ``runs list``, ``apply --out``, a pypi pin. A ledger file that is a link to
/dev/zero (a symlink is a file git keeps) was read whole into memory, and one that is a fifo never
returned. Each is now one line naming the file (and line), or "not ours" where that is the answer.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from materialize.errors import UpstreamError
from materialize.ledger import LedgerError, loads, read_ledger
from materialize.output import replaceable
from materialize.upstream import pypi

DEEP = "[" * 100_000 + "]" * 100_000
RECORD = {"schema": 1}


def _run(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _series(tmp_path: Path) -> Path:
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "a.txt").write_text("a\n")
    path = tmp_path / "series.yaml"
    path.write_text("version: 1\ntargets:\n  t:\n    pin: {kind: path, path: up}\npatches: []\n")
    return path


@pytest.mark.parametrize("text", [DEEP, '{"a": ' * 50_000 + "1" + "}" * 50_000])
def test_a_record_nested_past_the_recursion_limit_is_a_value_error(text):
    with pytest.raises(ValueError, match="nested"):
        loads(text)


def test_a_ledger_line_nested_too_deep_is_that_line_s_error(tmp_path):
    ledger = tmp_path / "runs.jsonl"
    ledger.write_text("\n" + DEEP + "\n")
    [line] = read_ledger(ledger)
    assert line.record is None and line.line == 2 and "nested" in line.error


def test_runs_list_of_a_deep_record_is_no_traceback(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.jsonl").write_text(DEEP + "\n")
    proc = _run("runs", "list", str(tmp_path / "runs"))
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr, proc.stderr
    assert "a.jsonl:1" in proc.stdout + proc.stderr and "nested too deeply" in proc.stdout + proc.stderr, proc


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder-link"])
def test_a_ledger_file_that_is_not_a_regular_file_is_refused_naming_it(tmp_path, kind):
    ledger = tmp_path / "a.jsonl"
    if kind == "dev-zero":
        ledger.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(ledger)
    else:
        (tmp_path / "d").mkdir()
        ledger.symlink_to(tmp_path / "d")
    with pytest.raises(LedgerError, match=rf"{ledger}: (not a regular file|Is a directory)"):
        read_ledger(ledger)


def test_a_ledger_file_past_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import materialize.ledger as ledger_module

    monkeypatch.setattr(ledger_module, "MAX_LEDGER_BYTES", 1000)
    ledger = tmp_path / "a.jsonl"
    ledger.write_text((json.dumps(RECORD) + "\n") * 100)
    with pytest.raises(LedgerError, match=rf"{ledger}: larger than 1000 bytes"):
        read_ledger(ledger)


@pytest.mark.timeout(60)
def test_runs_list_over_a_link_to_dev_zero_is_one_line_in_bounded_memory(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.jsonl").symlink_to("/dev/zero")
    proc = subprocess.run(["bash", "-c", 'ulimit -v 3000000; exec "$@"', "-", sys.executable, "-m", "materialize",
                           "runs", "list", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert "a.jsonl: not a regular file" in proc.stderr


def test_a_foreign_manifest_nested_too_deep_is_not_ours(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text(DEEP)
    assert replaceable(tmp_path / "out") is False


def test_apply_out_at_a_folder_with_a_deep_manifest_is_refused_not_a_traceback(tmp_path):
    series = _series(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text(DEEP)
    proc = _run("apply", "--series", str(series), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and "is not a materialize output" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "out" / "manifest.json").read_text() == DEEP


@pytest.fixture
def deep_index():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = ('{"files": ' + DEEP + "}").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(60)
def test_an_index_json_page_nested_too_deep_is_exit_3_naming_the_index(deep_index, monkeypatch):
    monkeypatch.setenv("MATERIALIZE_RETRIES", "0")
    with pytest.raises(UpstreamError, match=r"cannot read demo from index .*malformed JSON page.*nested") as info:
        pypi.find_file("demo", "1.0", None, index=f"{deep_index}/simple/")
    assert info.value.exit_code == 3


def test_a_result_line_with_a_huge_integer_stops_the_bisect_naming_the_run(tmp_path):
    from materialize.bisect import session
    from materialize.bisect.candidates import Candidate
    from materialize.bisect.runner import HarnessError, Task, TaskResult, interpret

    state = session.start(series="s.yaml", n_patches=6, good=0, bad=6, gate="stage3", requests=32)
    task = Task(0, Candidate(3, "0123456789abcdef", tmp_path), ["h.sh"], {}, tmp_path / "own.jsonl")
    stdout = '{"gate": "stage3", "requests": 32, "failures": ' + "1" * 5000 + "}\n"
    with pytest.raises(HarnessError, match="position 3"):
        interpret(state, TaskResult(task, 0, stdout, ""))


def test_a_result_line_nested_too_deep_is_no_traceback(tmp_path):
    """ledger.loads says "malformed JSON" for it, which the runner reads as a log line."""
    from materialize.bisect import session
    from materialize.bisect.candidates import Candidate
    from materialize.bisect.runner import Task, TaskResult, interpret

    state = session.start(series="s.yaml", n_patches=6, good=0, bad=6, gate="stage3", requests=32)
    task = Task(0, Candidate(3, "0123456789abcdef", tmp_path), ["h.sh"], {}, tmp_path / "own.jsonl")
    out = interpret(state, TaskResult(task, 0, "{" + '"a": {' * 50_000 + "\n", ""))
    assert (out.kind, out.failures) == ("gate", 0)  # exit code only


ESCAPES = ["\x1b[2J", "\x1b]52;c;ZXZpbA==\x07", "a\nb", "\x9b31m", "\x00"]


def _record(**fields: object) -> dict:
    return {"schema": 1, "materialization_id": "0123456789abcdef", "series_prefix": [], "host": "h",
            "time": "2026-09-19T11:20:00Z", **fields}


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("field", ["host", "profile", "gate", "metric", "unit", "output", "flag", "prefix"])
def test_a_control_character_in_a_one_line_field_of_a_record_is_refused(escape, field):
    """`runs list` printed a record's host and gate names as they were: a record (other people's text)
    with ESC]52 wrote the reader's clipboard, ESC[2J cleared the screen over the rows above."""
    from materialize.ledger import parse_record

    value = f"x{escape}y"
    fields = {"host": {"host": value}, "profile": {"profile": value},
              "gate": {"gates": [{"name": value, "requests": 1, "failures": 0}]},
              "metric": {"metrics": [{"name": value, "unit": "s", "samples": [1.0]}]},
              "unit": {"metrics": [{"name": "m", "unit": value, "samples": [1.0]}]},
              "output": {"outputs": [{"name": value}]}, "flag": {"flags": {value: "1"}},
              "prefix": {"series_prefix": [{"name": value, "sha256": "0" * 64}]}}[field]
    with pytest.raises(ValueError, match="control character"):
        parse_record(_record(**fields))


def test_free_text_fields_of_a_record_keep_their_newlines_and_tabs():
    """A banner is the series' own text, recorded by `serve up` after a hardware run: a record refused
    then would lose the run. A TAB is harmless anywhere."""
    from materialize.ledger import parse_record

    record = parse_record(_record(notes="line 1\n\tline 2", outputs=[{"name": "o", "text": "a\nb\tc"}],
                                  banners_seen=["\x1b[32mSDPA engaged\x1b[0m"], host="a\tb"))
    assert record.notes == "line 1\n\tline 2" and record.host == "a\tb"


def test_runs_list_never_prints_a_record_s_escape_sequence(tmp_path):
    (tmp_path / "runs").mkdir()
    bad = _record(host="h\x1b]0;pwned\x07", gates=[{"name": "g\x1b[2J", "requests": 1, "failures": 0}])
    (tmp_path / "runs" / "a.jsonl").write_text(json.dumps(bad) + "\n")
    proc = _run("runs", "list", str(tmp_path / "runs"))
    assert "\x1b" not in proc.stdout + proc.stderr and "a.jsonl:1" in proc.stdout, proc


def test_apply_error_spells_out_an_escape_sequence_in_a_file_name(tmp_path):
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "x.txt").write_text("x\n")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "1.patch").write_text("--- a/a\x1b]0;pwned\x07b\n+++ b/a\x1b]0;pwned\x07b\n"
                                                  "@@ -1 +1 @@\n-zzz\n+b\n")
    series = tmp_path / "series.yaml"
    series.write_text("version: 1\npatches_dir: patches\ntargets:\n  t:\n    pin: {kind: path, path: up}\n"
                      "patches:\n  - {patch: 1.patch, target: t}\n")
    proc = _run("apply", "--series", str(series), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", ["nested 100k deep", "a link to /dev/zero", "a fifo", "a folder"])
def test_a_workspace_record_that_is_not_ours_is_a_damaged_record_at_once(tmp_path, kind):
    """state.json, journal.json and rebase.json are a checkout's files: a link to /dev/zero was read
    without end, a fifo waited forever, [[[... was a RecursionError traceback."""
    import os

    from materialize.workspace.journal import DamagedRecordError, load_record

    record = tmp_path / "state.json"
    if kind == "nested 100k deep":
        record.write_text("[" * 100_000)
    elif kind == "a link to /dev/zero":
        record.symlink_to("/dev/zero")
    elif kind == "a fifo":
        os.mkfifo(record)
    else:
        record.mkdir()
    with pytest.raises(DamagedRecordError, match="state.json"):
        load_record(record, ("series",), "run recover")


def test_the_report_s_offline_results_nested_too_deep_is_no_recorded_run(tmp_path):
    from materialize.site.collect import read_offline

    results = tmp_path / "results.json"
    results.write_text(DEEP)
    data, why = read_offline(results, None)  # type: ignore[arg-type]
    assert data is None and "not JSON" in why


@pytest.mark.parametrize("kind", ["nested 100k deep", "a link to /dev/zero"])
def test_the_report_from_an_output_whose_manifest_is_not_ours_is_one_error(tmp_path, kind):
    from materialize.errors import MaterializeError
    from materialize.site.collect import from_output

    (tmp_path / "out").mkdir()
    manifest = tmp_path / "out" / "manifest.json"
    if kind == "a link to /dev/zero":
        manifest.symlink_to("/dev/zero")
    else:
        manifest.write_text(DEEP)
    with pytest.raises(MaterializeError, match="not a manifest"):
        from_output(tmp_path / "out")


def test_serve_from_an_output_whose_manifest_is_not_ours_is_one_error(tmp_path):
    """`serve plan --from-output DIR` read DIR/manifest.json whole and unchecked (a link to /dev/zero,
    [[[... 100k deep: a traceback); the profile is never reached."""
    from materialize.errors import MaterializeError
    from materialize.serve.up import prepare

    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(DEEP)
    shipped = Path(__file__).resolve().parents[2] / "serve" / "profiles" / "prod.yaml"
    with pytest.raises(MaterializeError, match="not a manifest of an output"):
        prepare(shipped, manifest_dir=out)
