"""End to end: bisect a generated series through the real engine, with a script as the "hardware"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from materialize.bisect.state import BisectError, StateStore
from materialize.ledger import LedgerError, read_ledger

# A fresh `python -m materialize` in another directory imports the package of this checkout (a
# worktree's), not whichever one the interpreter has installed.
ROOT = str(Path(__file__).resolve().parents[2])


def _this_checkout(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": ROOT + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")}


@pytest.fixture
def cli(invoke):
    """`materialize bisect ...` / `materialize runs ...` in-process."""
    return invoke


def ok(cli, *args: str) -> str:
    result = cli(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_manual_deterministic_bisect_materializes_each_candidate(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(12)
    work = tmp_path / "work"
    common = ["--series", series, "--work-dir", work]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "0012-step-12", "--deterministic")
    culprit, seen = 7, []
    for _ in range(8):
        out = ok(cli, "bisect", "next", *common)
        if "first bad patch" in out:
            break
        pos = int(re.search(r"^position (\d+)", out, re.M).group(1))
        mid = re.search(r"^id ([0-9a-f]+)", out, re.M).group(1)
        directory = Path(re.search(r"^dir (.+)$", out, re.M).group(1))
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["id"] == mid and manifest["position"] == pos
        assert directory.parent == work / "bisect" / "candidates" and directory.name.endswith("-overlay")
        changed = directory / "plugin" / "src" / "model.py"  # an overlay: only the files the prefix changed
        text = changed.read_text() if changed.exists() else ""
        assert text.count("= True") == pos  # the prefix of `pos` patches, really
        seen.append(pos)
        ok(cli, "bisect", "bad" if f"step_{culprit} = True" in text else "good", *common)
    assert "0007-step-7 at position 7 is the first bad patch" in out
    assert seen[:2] == [0, 12]  # the ends are checked before any midpoint
    assert len(seen) <= 6
    assert not (tmp_path / "build").exists()  # never published into the project's outputs, never `latest`

    log = ok(cli, "bisect", "log", *common)
    assert log.splitlines()[1].startswith("start --good 0 --bad 12")
    saved = tmp_path / "saved.log"
    saved.write_text(log)
    ok(cli, "bisect", "reset", *common)
    assert not StateStore(work).exists()
    assert "first bad position 7" in ok(cli, "bisect", "replay", *common, saved)
    status = ok(cli, "bisect", "status", *common, "--plot", tmp_path / "p.png")
    assert "first bad patch" in status
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_start_twice_and_verdict_without_candidate_are_user_errors(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(4)
    common = ["--series", series, "--work-dir", tmp_path / "w"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "4")
    again = cli("bisect", "start", *common, "--good", "0", "--bad", "4")
    assert isinstance(again.exception, BisectError) and "already in progress" in str(again.exception)
    good = cli("bisect", "good", *common)
    assert isinstance(good.exception, BisectError) and "bisect next" in str(good.exception)


def test_run_finds_a_flaky_culprit_and_writes_valid_records(cli, gen_series, tmp_path: Path) -> None:
    series, hw = gen_series(12)
    work, ledger = tmp_path / "work", tmp_path / "runs" / "bisect.jsonl"
    common = ["--series", series, "--work-dir", work]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "12", "--requests", "32")
    # 1/16 per request once patch 9 is in, 1/256 everywhere (present in every arm), exit code only
    cmd = [*hw, "9", str(1 / 256), str(1 / 16), "32", "seed-a", "exit"]
    result = cli("bisect", "run", *common, "--ledger", ledger, "--", *cmd)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "0009-step-9 at position 9 is the first bad patch" in result.output
    assert any(s in result.output for s in ("runs to reach 0.99", "would lift", ">= 0.99", "past 0.99"))
    lines = read_ledger(ledger)
    assert lines and all(ln.record is not None for ln in lines)
    state = StateStore(work).load()
    assert len(lines) == len([o for o in state.observations if o.source == "run"])
    assert ok(cli, "runs", "validate", "--series", series, ledger).strip().endswith("0 invalid record(s)")

    # The ledger alone reproduces the verdict: infer re-uses every past run, none is repeated.
    ok(cli, "bisect", "reset", *common)
    out = ok(cli, "bisect", "infer", *common, "--runs", ledger, "--gate", "exit", "--requests", "32")
    assert f"used {len(lines)} past run(s)" in out
    assert "narrowest range holding 0.95 of the posterior: good=8 bad=9" in out
    assert "first bad patch" in out and "position 9" in out


def test_run_metric_bisect_from_json_lines(cli, gen_series, tmp_path: Path) -> None:
    series, hw = gen_series(10)
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "10", "--metric", "makespan", "--threshold", "1")
    result = cli("bisect", "run", *common, "--jobs", "2", "--", *hw, "6", "0", "0", "1", "seed-c", "metric")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "position 6 is the first bad patch" in result.output
    assert "ends: different" in result.output


def test_run_uses_records_the_command_appends(cli, gen_series, tmp_path: Path, monkeypatch) -> None:
    series, hw = gen_series(6)
    from materialize.bisect.candidates import SeriesIndex
    from materialize.series import load_series

    index = SeriesIndex(load_series(series))
    monkeypatch.setenv("HW_PREFIXES", json.dumps({str(k): index.prefix_entries(k) for k in range(7)}))
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "6", "--gate", "stage3", "--requests", "32")
    ledger = tmp_path / "runs.jsonl"
    result = cli("bisect", "run", *common, "--ledger", ledger, "--", *hw, "4", "0.001", "0.2", "32", "s", "record")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "position 4 is the first bad patch" in result.output
    recs = [ln.record for ln in read_ledger(ledger)]
    assert recs and all(r.host == "sim" for r in recs)  # the command's own records, copied verbatim
    state = StateStore(tmp_path / "work").load()
    assert all(not o.censored for o in state.observations)  # exact counts, not exit codes


def test_skip_exit_code_and_broken_command(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(4)
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "4", "--deterministic")
    script = tmp_path / "skip2.py"
    script.write_text(
        "import os, sys\npos = int(os.environ['MATERIALIZE_BISECT_POSITION'])\n"
        "sys.exit(125 if pos == 2 else 1 if pos >= 3 else 0)\n"
    )
    import sys

    result = cli("bisect", "run", *common, "--max-runs", "3", "--", sys.executable, script)
    assert result.exit_code == 1
    state = StateStore(tmp_path / "work").load()
    assert state.skipped == [2]  # after the two ends, the midpoint 2 said "skip"
    broken = cli("bisect", "run", *common, "--", tmp_path / "does-not-exist")
    assert isinstance(broken.exception, BisectError) and "exited 127" in str(broken.exception)


def test_jobs_substitute_job_slots(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(8)
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "8", "--deterministic")
    seen = tmp_path / "slots"
    seen.mkdir()
    script = tmp_path / "slot.py"
    script.write_text(
        "import os, sys\nfrom pathlib import Path\n"
        "Path(sys.argv[2], sys.argv[1] + '-' + os.environ['MATERIALIZE_BISECT_POSITION']).touch()\n"
        "f = Path(os.environ['MATERIALIZED_DIR'], 'plugin/src/model.py')\n"
        "text = f.read_text() if f.exists() else ''\n"
        "sys.exit(1 if 'step_5 = True' in text else 0)\n"
    )
    import sys

    result = cli("bisect", "run", *common, "--jobs", "3", "--", sys.executable, script, "host{job}", seen)
    assert result.exit_code == 0, result.output
    assert "position 5 is the first bad patch" in result.output
    slots = {p.name.split("-")[0] for p in seen.iterdir()}
    assert slots == {"host0", "host1", "host2"}


def test_runs_list_show_validate_flag_invalid_records(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(3, flagged={2: ("STEP2_FLAG", "step 2 engaged")})
    from materialize.bisect.candidates import SeriesIndex
    from materialize.engine import materialize
    from materialize.series import load_series

    s = load_series(series)
    index = SeriesIndex(s)
    id2 = materialize(s, upto=2).id

    def rec(**over):
        r = {
            "schema": 1,
            "materialization_id": id2,
            "series_prefix": index.prefix_entries(2),
            "flags": {"STEP2_FLAG": "1"},
            "host": "h",
            "time": "2026-11-29T10:00:00Z",
            "banners_seen": ["INFO step 2 engaged (chunked)"],
            "gates": [{"name": "stage3", "requests": 32, "failures": 0}],
        }
        r.update(over)
        return json.dumps(r)

    edited = index.prefix_entries(2)
    edited[1] = {"name": edited[1]["name"], "sha256": "0" * 64}
    ledger = tmp_path / "runs.jsonl"
    ledger.write_text(
        "\n".join(
            [
                rec(),  # 1 valid
                rec(banners_seen=[]),  # 2 flag on, banner missing
                rec(flags={}),  # 3 banner without flag
                rec(outputs=[{"name": "q1", "text": "HT#" + "3" * 60}]),  # 4 degenerate
                rec(series_prefix=edited),  # 5 made before patch 2 was edited
                rec(materialization_id="feedfacefeedface"),  # 6 not prefix 2's code
                rec(outputs=[{"name": "q2", "text": "Paris.", "expect_sha256": "1" * 64}]),  # 7 not the baseline
                '{"schema": 1}',  # 8 schema
            ]
        )
        + "\n"
    )
    result = cli("runs", "validate", "--series", series, ledger)
    assert result.exit_code == 1
    out = result.output
    assert "1 valid, 7 invalid" in out
    for line, words in [
        (2, "banner 'step 2 engaged' was not seen"),
        (3, "was seen but flag STEP2_FLAG is not enabled"),
        (4, "looks degenerate: repeats one character"),
        (5, "is not a prefix of"),
        (6, "is not prefix 2's id"),
        (7, "is not the baseline"),
        (8, "schema: materialization_id: required key is missing"),
    ]:
        assert f"{ledger}:{line}: invalid: " in out and words in out, (line, words)
    listing = ok(cli, "runs", "list", ledger)
    assert f"{ledger}:8  INVALID" in listing and "stage3=0/32" in listing
    shown = ok(cli, "runs", "show", f"{ledger}:1")
    assert json.loads(shown.split("\n", 1)[1])["materialization_id"] == id2
    missing = cli("runs", "show", f"{ledger}:99")
    assert isinstance(missing.exception, LedgerError)

    # Invalid records never feed a bisection silently: `record` reports them and exits 1.
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "3", "--gate", "stage3", "--requests", "32")
    fed = cli("bisect", "record", *common, ledger)
    assert fed.exit_code == 1
    assert "recorded 1 run(s); skipped 0 already recorded; 7 invalid (not used)" in fed.output
    again = cli("bisect", "record", *common, ledger)
    assert "recorded 0 run(s); skipped 1 already recorded" in again.output  # a run is never counted twice
    state = StateStore(tmp_path / "work").load()
    assert [(o.position, o.requests) for o in state.observations] == [(2, 32)]


@pytest.mark.parametrize("verb", ["good", "bad"])
def test_verdicts_in_metric_mode_are_refused(cli, gen_series, tmp_path: Path, verb: str) -> None:
    series, _ = gen_series(3)
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "3", "--metric", "ttft")
    result = cli("bisect", verb, *common, "1")
    assert isinstance(result.exception, BisectError)


def test_a_prefix_that_does_not_materialize_is_skipped(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(4)
    broken = next(series.parent.glob("patches/0003-*.patch"))
    broken.write_text(broken.read_text().replace("step_2 = True", "step_2 = Nope"))  # context no longer matches
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "4", "--deterministic")
    import sys

    result = cli("bisect", "run", *common, "--", sys.executable, "-c", "raise SystemExit(0)")
    assert result.exit_code == 1, (result.output, result.exception)
    assert "position 3: cannot materialize" in result.output
    assert "inconclusive" in result.output
    assert 3 in StateStore(tmp_path / "work").load().skipped


def test_infer_metric_bisect_from_past_records_needs_no_new_runs(cli, gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(6)
    import numpy as np

    from materialize.bisect.candidates import SeriesIndex
    from materialize.engine import materialize
    from materialize.series import load_series

    s = load_series(series)
    index = SeriesIndex(s)
    rng = np.random.default_rng(4)
    ledger = tmp_path / "runs.jsonl"
    with ledger.open("w") as fh:
        for pos in range(7):
            samples = list(rng.normal(103.0 if pos >= 4 else 100.0, 0.5, 8))
            fh.write(
                json.dumps(
                    {
                        "schema": 1,
                        "materialization_id": materialize(s, upto=pos).id,
                        "series_prefix": index.prefix_entries(pos),
                        "host": "cfx-llm2",
                        "time": "2026-11-29T09:00:00Z",
                        "metrics": [{"name": "makespan", "unit": "s", "samples": samples}],
                    }
                )
                + "\n"
            )
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    out = ok(cli, "bisect", "infer", *common, "--runs", ledger, "--metric", "makespan", "--threshold", "1")
    assert "used 7 past run(s)" in out
    assert "narrowest range from past runs: good=3 bad=4" in out
    assert "0004-step-4 at position 4 is the first bad patch" in out


def test_a_running_bisect_holds_the_lock_and_its_gate_dies_with_it(cli, gen_series, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    series, _ = gen_series(4)
    work = tmp_path / "work"
    common = ["--series", series, "--work-dir", work]
    ok(cli, "bisect", "start", *common, "--good", "0", "--bad", "4")
    pids = tmp_path / "gate-pids"
    gate = tmp_path / "slow_gate.py"  # the gate starts a grandchild and waits: both must die with 'run'
    gate.write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'a').write(str(child.pid) + '\\n')\n"
        "time.sleep(120)\n"
    )
    runner = subprocess.Popen(
        [sys.executable, "-m", "materialize", "bisect", "run", *map(str, common), "--", sys.executable, str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_this_checkout(dict(os.environ)),
    )
    try:
        for _ in range(600):
            if pids.exists() and pids.read_text().endswith("\n"):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(runner.stderr.read1().decode() if runner.poll() is not None else "no gate started")
        grandchild = int(pids.read_text().split()[0])
        for verb in (["good", "0"], ["run", "--", "true"]):
            busy = cli("bisect", verb[0], *common, *verb[1:])
            assert busy.exit_code != 0 and "another bisect command is running" in str(busy.exception), verb
            assert getattr(busy.exception, "exit_code", None) == 5
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    for _ in range(100):  # the keeper sees its parent gone and ends the whole process group
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"gate grandchild {grandchild} outlived 'bisect run'")
    ok(cli, "bisect", "skip", *common, "2")  # the lock died with its holder
    leftovers = [p.name for p in (work / "bisect").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temp file, scratch dir or lock file left in work/bisect


def test_commands_use_the_series_the_bisect_started_on(cli, gen_series, tmp_path: Path, monkeypatch) -> None:
    series, _ = gen_series(4)
    monkeypatch.setenv("MATERIALIZE_WORK", str(tmp_path / "work"))
    ok(cli, "bisect", "start", "--series", series, "--good", "0", "--bad", "4")
    assert "good=0 bad=4" in ok(cli, "bisect", "status")  # no --series: the state's, not the default
    other = tmp_path / "other.yaml"
    other.write_text(Path(series).read_text())
    refused = cli("bisect", "status", "--series", other)
    assert isinstance(refused.exception, BisectError) and "was started on" in str(refused.exception)
    patch = next(Path(series).parent.glob("patches/0002-*.patch"))
    patch.write_text(patch.read_text() + "\n")
    changed = cli("bisect", "next")
    assert isinstance(changed.exception, BisectError) and "changed since 'bisect start'" in str(changed.exception)


def test_the_real_cli_keeps_to_the_state_its_budget_and_its_own_directory(gen_series, tmp_path: Path) -> None:
    """Issue 15 items 6, 8, 9 through the console entry point (a fresh process per command): the run
    uses the series in the state even when the default names another, --max-runs is the bisect's
    budget across commands, candidates stay in work/bisect, `latest` never moves, no stray files."""
    import os
    import subprocess
    import sys

    from tests.conftest import SeriesBuilder

    from .conftest import model_text

    series, hw = gen_series(8)
    shipped = SeriesBuilder(tmp_path / "shipped", {"src/model.py": model_text(0)})
    shipped.add_patch("0001-step-1", {"src/model.py": model_text(1)})
    env = _this_checkout({**os.environ, "MATERIALIZE_SERIES": str(shipped.write())})  # the default series: 1 patch
    latest = tmp_path / "build" / "materialized" / "latest"
    latest.parent.mkdir(parents=True)
    latest.symlink_to("somewhere-else")
    work = tmp_path / "work"

    def materialize(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "materialize", "bisect", *map(str, args)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, check=False)

    started = materialize("start", "--series", series, "--work-dir", work, "--good", "0", "--bad", "8",
                          "--requests", "32")
    assert started.returncode == 0, started.stderr
    cmd = ["--", *hw, "6", "0.001", "0.2", "32", "seed-r", "exit"]
    first = materialize("run", "--work-dir", work, "--max-runs", "4", *cmd)  # no --series: the state's
    assert first.returncode == 1 and "--max-runs 4 reached" in first.stdout, (first.stdout, first.stderr)
    again = materialize("run", "--work-dir", work, "--max-runs", "4", *cmd)
    assert again.returncode == 1 and "(4 runs in this bisect)" in again.stdout
    assert len(StateStore(work).load().observations) == 4
    done = materialize("run", "--work-dir", work, *cmd)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "0006-step-6 at position 6 is the first bad patch" in done.stdout
    state = StateStore(work).load()
    assert state.skipped == [] and max(o.position for o in state.observations) == 8, len(state.observations)
    assert os.readlink(latest) == "somewhere-else" and os.listdir(latest.parent) == ["latest"]
    assert all(p.parent == work / "bisect" / "candidates" for p in (work / "bisect" / "candidates").iterdir())
    assert [p.name for p in (work / "bisect").iterdir() if p.name.startswith(".")] == []
