"""``bisect run``'s reading of one finished run: records > JSON result lines > exit code, and a run
whose result contradicts its exit code is never evidence (it stops the bisect, naming the run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from materialize.bisect import session
from materialize.bisect.candidates import Candidate
from materialize.bisect.runner import HarnessError, Task, TaskResult, interpret
from materialize.bisect.state import BisectError, StateStore

MID = "0123456789abcdef"


def gate_state(**kw):
    return session.start(series="s.yaml", n_patches=6, good=0, bad=6, gate="stage3", requests=32, **kw)


def metric_state():
    return session.start(series="s.yaml", n_patches=6, good=0, bad=6, metric="makespan")


def result(tmp_path: Path, rc: int, stdout: str = "", stderr: str = "", records: list[dict] | None = None) -> TaskResult:
    ledger = tmp_path / "own.jsonl"
    if records is not None:
        ledger.write_text("".join(json.dumps(r) + "\n" for r in records))
    task = Task(0, Candidate(3, MID, tmp_path), ["h.sh"], {}, ledger)
    return TaskResult(task, rc, stdout, stderr)


def line(**kw) -> str:
    return json.dumps({"gate": "stage3", **kw}) + "\n"


def own_record(failures: int) -> dict:
    return {
        "schema": 1, "materialization_id": MID, "series_prefix": [], "host": "h", "time": "2026-09-19T11:20:00Z",
        "gates": [{"name": "stage3", "requests": 32, "failures": failures}],
    }


def test_exit_code_only_harness_keeps_git_bisect_semantics(tmp_path: Path) -> None:
    st = gate_state()
    ok = interpret(st, result(tmp_path, 0, "booting...\n"))
    assert (ok.kind, ok.requests, ok.failures, ok.censored) == ("gate", 32, 0, False)
    bad = interpret(st, result(tmp_path, 1, "{not json, a log line}\n"))
    assert (bad.kind, bad.failures, bad.censored) == ("gate", 1, True)
    assert interpret(st, result(tmp_path, 125, line(requests=32))).kind == "skip"
    with pytest.raises(BisectError, match="exited 127"):
        interpret(st, result(tmp_path, 127))


def test_a_json_result_with_a_consistent_exit_code_counts(tmp_path: Path) -> None:
    st = gate_state()
    out = interpret(st, result(tmp_path, 0, line(requests=32, failures=0)))
    assert (out.kind, out.requests, out.failures, out.censored) == ("gate", 32, 0, False)
    out = interpret(st, result(tmp_path, 1, line(requests=32, failures=3)))  # a failing gate may exit 1
    assert (out.requests, out.failures, out.censored) == (32, 3, False)
    out = interpret(st, result(tmp_path, 0, line(requests=32, failures=2)))
    assert out.failures == 2
    # other gates' lines are not this bisect's business; several lines of this gate add up
    two = line(requests=16, failures=0) + json.dumps({"gate": "stage2", "requests": "x"}) + "\n" + line(
        requests=16, failures=1, x_conc=8
    )
    out = interpret(st, result(tmp_path, 0, two))
    assert (out.requests, out.failures) == (32, 1)


def test_a_crashed_harness_is_never_a_pass(tmp_path: Path) -> None:
    """The reproducer: a JSON line without 'failures' and exit 3 was read as 0/32, a pass."""
    st = gate_state()
    with pytest.raises(HarnessError, match=r"position 3.*exit 3.*failures: required key is missing.*Traceback"):
        interpret(st, result(tmp_path, 3, line(requests=32), "Traceback (most recent call last)\n"))
    with pytest.raises(HarnessError, match=r"position 3.*exited 3.*0 failures.*Traceback"):
        interpret(st, result(tmp_path, 3, line(requests=32, failures=0), "Traceback\n"))
    with pytest.raises(HarnessError, match=r"exited 1.*0 failures"):
        interpret(st, result(tmp_path, 1, records=[own_record(0)]))
    assert interpret(st, result(tmp_path, 1, records=[own_record(2)])).failures == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (line(requests=32), "failures: required key is missing"),
        (line(failures=0), "requests: required key is missing"),
        (line(requests=32, failures=True), "failures"),
        (line(requests=True, failures=0), "requests"),
        (line(requests="32", failures=0), "requests"),
        (line(requests=32, failures="0"), "failures"),
        (line(requests=32.0, failures=0), "requests"),
        (line(requests=0, failures=0), "requests"),
        (line(requests=4, failures=5), r"failures \(5\) > requests \(4\)"),
        (line(requests=32, failures=-1), "failures"),
        (line(requests=32, failures=1, censored="yes"), "censored"),
        (line(requests=32, failures=0, failure=3), "unknown key"),
        ('{"gate": "stage3", "requests": 32, "failures": 9, "failures": 0}\n', "appears twice"),
        ('{"gate": "stage3", "requests": 32, "failures": NaN}\n', "NaN"),
    ],
)
def test_an_invalid_result_line_stops_the_bisect_even_with_exit_0(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        interpret(gate_state(), result(tmp_path, 0, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"metric": "makespan", "value": true}\n', "value"),
        ('{"metric": "makespan", "value": "301.2"}\n', "value"),
        ('{"metric": "makespan", "value": NaN}\n', "NaN"),
        ('{"metric": "makespan"}\n', "value: required key is missing"),
        ('{"name": "makespan", "samples": [1.0, "2"]}\n', "samples"),
        ('{"name": "makespan", "samples": []}\n', "samples"),
        ('{"metric": "makespan", "value": 1.0, "value": 2.0}\n', "appears twice"),
    ],
)
def test_an_invalid_metric_line_stops_the_bisect(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        interpret(metric_state(), result(tmp_path, 0, text))


def test_metric_lines_and_a_failing_exit(tmp_path: Path) -> None:
    st = metric_state()
    out = interpret(st, result(tmp_path, 0, '{"metric": "makespan", "value": 301}\n{"name": "makespan", "samples": [1.5]}\n'))
    assert (out.kind, out.samples) == ("metric", [301.0, 1.5])
    with pytest.raises(HarnessError, match="exited 2"):  # a crash's leftover sample is not a measurement
        interpret(st, result(tmp_path, 2, '{"metric": "makespan", "value": 301}\n'))
    assert interpret(st, result(tmp_path, 2, "")).kind == "skip"


def test_once_a_harness_reported_results_a_run_without_one_is_not_an_exit_code(tmp_path: Path) -> None:
    st = gate_state()
    st.run_results = "reported"
    with pytest.raises(HarnessError, match=r"position 3.*exited 1.*no 'stage3' result"):
        interpret(st, result(tmp_path, 1, "", "Segfault\n"))
    with pytest.raises(HarnessError, match=r"exited 0.*no 'stage3' result"):
        interpret(st, result(tmp_path, 0, ""))


def test_the_reproducer_end_to_end_stops_instead_of_naming_a_culprit(invoke, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(6)
    work = tmp_path / "work"
    common = ["--series", series, "--work-dir", work]
    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "6", "--gate", "stage3", "--requests", "32").exit_code == 0
    h = tmp_path / "h.py"
    h.write_text(
        "import os, sys\n"
        "if int(os.environ['MATERIALIZE_BISECT_POSITION']) >= 4:\n"
        "    print('{\"gate\":\"stage3\",\"requests\":32,\"failures\":8}'); sys.exit(0)\n"
        "print('{\"gate\":\"stage3\",\"requests\":32}'); print('Traceback', file=sys.stderr); sys.exit(3)\n"
    )
    res = invoke("bisect", "run", *common, "--", sys.executable, h)
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, HarnessError) and "position 0" in str(res.exception)
    assert "exit 3" in str(res.exception) and "Traceback" in str(res.exception)
    state = StateStore(work).load()
    assert all(o.failures > 0 for o in state.observations if o.position < 4)  # no pass was recorded below 4
    assert "first bad patch" not in res.output


def test_a_harness_that_reported_counts_and_then_crashes_silently_stops_the_bisect(invoke, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(6)
    work = tmp_path / "work"
    common = ["--series", series, "--work-dir", work]
    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "6", "--gate", "stage3", "--requests", "32").exit_code == 0
    h = tmp_path / "h.py"
    h.write_text(
        "import os, sys\n"
        "pos = int(os.environ['MATERIALIZE_BISECT_POSITION'])\n"
        "if pos in (0, 6):\n"
        "    print('{\"gate\":\"stage3\",\"requests\":32,\"failures\":%d}' % (8 if pos == 6 else 0)); sys.exit(0)\n"
        "print('killed by the OOM killer', file=sys.stderr); sys.exit(1)\n"
    )
    res = invoke("bisect", "run", *common, "--", sys.executable, h)
    assert res.exit_code == 1 and isinstance(res.exception, HarnessError), res.output
    assert "no 'stage3' result" in str(res.exception) and "OOM" in str(res.exception)
    state = StateStore(work).load()
    assert state.run_results == "reported"
    assert {o.position for o in state.observations} == {0, 6}  # the silent crash was not recorded


def test_a_run_that_gives_its_metric_in_two_units_stops_the_bisect(tmp_path: Path) -> None:
    """Result lines (or a run's own records) of one metric in s and in ms were merged as one sample list."""
    st = metric_state()
    with pytest.raises(HarnessError, match=r"gives 'makespan' in 'ms', an earlier line in 's'"):
        interpret(st, result(tmp_path, 0, '{"metric": "makespan", "value": 0.3, "unit": "s"}\n'
                                          '{"metric": "makespan", "value": 300, "unit": "ms"}\n'))
    rec = {"schema": 1, "materialization_id": MID, "series_prefix": [], "host": "h", "time": "2026-01-01T00:00:00Z"}
    records = [{**rec, "metrics": [{"name": "makespan", "unit": u, "samples": [v]}]} for u, v in (("s", 0.3), ("ms", 300))]
    with pytest.raises(HarnessError, match=r"give 'makespan' in 's' and in 'ms'"):
        interpret(st, result(tmp_path, 0, records=records))
    (tmp_path / "own.jsonl").unlink()
    out = interpret(st, result(tmp_path, 0, '{"metric": "makespan", "value": 0.3, "unit": "s"}\n'))
    assert (out.samples, out.unit) == ([0.3], "s")


def test_a_keeper_killed_by_a_signal_does_not_leave_its_gate_running_or_the_run_hanging(tmp_path: Path) -> None:
    # The keeper (leader of the run's process group) ends the group when the command ends; killed
    # itself (the OOM killer, a `kill -9` of the wrong pid), it could not: the gate and its children
    # kept running, holding the output pipes, and `bisect run` waited on them (here 60 s) before it
    # read "exit -9". The runner ends the group as soon as the keeper is gone.
    import os
    import signal
    import time

    from materialize.bisect.runner import run_task

    sleeper = tmp_path / "sleeper.pid"
    gate = tmp_path / "gate.py"
    gate.write_text(
        "import os, signal, subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '60'])\nopen({str(sleeper)!r}, 'w').write(str(p.pid))\n"
        "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(60)\n"
    )
    task = Task(0, Candidate(3, MID, tmp_path), [sys.executable, str(gate)], {}, tmp_path / "own.jsonl", timeout=120)
    began = time.monotonic()
    done = run_task(task)
    assert time.monotonic() - began < 20
    assert done.returncode == -signal.SIGKILL
    pid = int(sleeper.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the gate's child outlived its killed keeper")


def test_a_broken_command_says_what_its_stderr_ended_with_or_that_it_was_empty(tmp_path: Path) -> None:
    st = gate_state()
    with pytest.raises(BisectError, match=r"exited 137 at position 3; .*broken\); stderr was empty$"):
        interpret(st, result(tmp_path, 137))
    with pytest.raises(BisectError, match=r"exited 126 .*; stderr ends: not executable$"):
        interpret(st, result(tmp_path, 126, stderr="not executable\n"))
