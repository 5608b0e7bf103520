"""``serve up`` end to end with the process launcher and a real subprocess (tests/serve/fake_vllm.py).

The fake takes vLLM's options, prints the banner of each patch flag set in its environment and serves
the recordings for its --tool-call-parser on loopback. Nothing here is stubbed inside materialize.
"""

from __future__ import annotations

import dataclasses
import json
import os

import psutil
import pytest

from materialize.serve.launch import process_env
from materialize.serve.preflight import PreflightError
from materialize.serve.up import prepare, serve_up

from .conftest import free_port, process_profile


@pytest.fixture
def up(write_profile, tmp_path):
    def run(data, name="fake"):
        prep = prepare(write_profile(name, data), sources_dir=tmp_path / "out")
        result = serve_up(prep, log_dir=tmp_path / "logs", ledger_dir=tmp_path / "runs", echo=lambda _: None)
        return prep, result

    return run


def ledger(tmp_path, name="fake"):
    """The records as written (plain JSON lines)."""
    text = (tmp_path / "runs" / f"{name}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def gate_map(record):
    return {g["name"]: (g["requests"], g["failures"]) for g in record["gates"]}


def assert_stopped(result):
    assert result.pid is not None
    assert not psutil.pid_exists(result.pid), f"server pid {result.pid} still running"


def test_good_run_passes_and_is_recorded(up, tmp_path):
    prep, result = up(process_profile(free_port(), enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"]))
    assert result.exit_code == 0, result.reason
    log = result.log_path.read_text()
    assert "QWEN36_SDPA_STREAMING engaged" in log and "chunk trace captured" in log
    (record,) = ledger(tmp_path)
    assert record["schema"] == 1
    assert record["materialization_id"] == prep.plan.materialization_id == prep.manifest["id"]
    assert record["series_prefix"] == [{"name": p["name"], "sha256": p["sha256"]} for p in prep.manifest["patches"]]
    assert record["flags"] == {"QWEN36_PREFIX_PREFILL_TRACE": "1", "QWEN36_SDPA_STREAMING": "1"}
    assert record["profile"] == "fake" and record["profile_hash"] == prep.profile.hash()
    assert gate_map(record) == {
        "ready": (1, 0), "banners": (2, 0), "models": (1, 0), "tool_call_stream": (6, 0), "tool_call_nonstream": (6, 0)}
    assert record["banners_seen"] == ["QWEN36_SDPA_STREAMING engaged",
                                      "QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured"]
    metrics = {m["name"]: m for m in record["metrics"]}
    assert metrics["time_to_ready"]["unit"] == "s" and metrics["time_to_ready"]["samples"][0] > 0
    assert len(metrics["tool_call_stream_latency"]["samples"]) == 6
    # The server really ran from the materialized source and was stopped.
    assert prep.plan.env["PYTHONPATH"].startswith(str(tmp_path / "out"))
    assert result.record["x_plan_hash"] == prep.plan.hash()
    assert_stopped(result)


def test_missing_banner_stops_the_server_and_names_it(up, tmp_path):
    data = process_profile(free_port(), enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"])
    # The "deployed" code prints only the SDPA banner: the prefix-trace patch never engaged.
    data["env"] = {"FAKE_VLLM_BANNERS": json.dumps({"QWEN36_SDPA_STREAMING": "QWEN36_SDPA_STREAMING engaged"})}
    _, result = up(data)
    assert result.exit_code == 1
    assert "QWEN36_PREFIX_PREFILL_TRACE (0002-prefix-prefill-trace)" in result.reason
    assert "chunk trace captured" in result.reason
    assert result.gate_results == []  # gates never ran on a server whose patch did not engage
    (record,) = ledger(tmp_path)
    assert gate_map(record) == {"ready": (1, 0), "banners": (2, 1)}
    assert "did not appear" in record["notes"]
    assert_stopped(result)


def test_never_ready_times_out_and_stops(up, tmp_path):
    data = process_profile(free_port(), readiness={"timeout_s": 1.5, "poll_interval_s": 0.1})
    data["env"]["FAKE_VLLM_NEVER_READY"] = "1"
    _, result = up(data)
    assert result.exit_code == 1
    assert "not ready within 1.5s" in result.reason
    (record,) = ledger(tmp_path)
    assert gate_map(record) == {"ready": (1, 1)}
    assert "QWEN36_SDPA_STREAMING engaged" in result.log_path.read_text()
    assert_stopped(result)


def test_crash_during_boot_is_reported(up):
    data = process_profile(free_port())
    data["env"]["FAKE_VLLM_EXIT"] = "3"
    _, result = up(data)
    assert result.exit_code == 1 and "exited with code 3" in result.reason


def test_wrong_parser_fails_the_gates_end_to_end(write_profile, tmp_path):
    # The rules refuse hermes for this model, so the wrong parser arrives the way it did in the field:
    # the process runs another command line than the plan (an immutable unit baking in hermes). The
    # gates are the layer that catches it, whatever the plan said.
    prep = prepare(write_profile("fake", process_profile(free_port())), sources_dir=tmp_path / "out")
    hermes = [w if w != "qwen3_xml" else "hermes" for w in prep.plan.argv]
    prep.plan = dataclasses.replace(prep.plan, argv=hermes, server_argv=hermes)
    result = serve_up(prep, log_dir=tmp_path / "logs", ledger_dir=tmp_path / "runs", echo=lambda _: None)
    assert result.exit_code == 1
    failed = {g.name for g in result.gate_results if not g.passed}
    assert failed == {"tool_call_stream", "tool_call_nonstream"}
    assert "tool_call_stream 6/6" in result.reason
    (record,) = ledger(tmp_path)
    assert gate_map(record)["tool_call_stream"] == (6, 6)


def test_flags_in_the_callers_shell_never_reach_the_server(up, monkeypatch):
    monkeypatch.setenv("QWEN36_PREFIX_PREFILL_TRACE", "1")  # exported by hand, not enabled in the profile
    _, result = up(process_profile(free_port()))
    assert result.exit_code == 0, result.reason
    assert "chunk trace captured" not in result.log_path.read_text()


def test_process_env_is_the_callers_locale_plus_plan(write_profile, tmp_path):
    prep = prepare(write_profile("env", process_profile(free_port())), sources_dir=tmp_path / "out")
    env = process_env(prep.plan, {"PATH": "/bin", "HOME": "/home/u", "LANG": "C.UTF-8",
                                  "QWEN36_DEVICE_RESIDENT": "1", "SECRET": "x"})
    assert env == {"LANG": "C.UTF-8", **prep.plan.env} and env["PATH"] != "/bin" and "HOME" not in env


def test_mount_sources_are_checked_before_launch(write_profile, tmp_path):
    from materialize.serve.plan import Mount

    prep = prepare(write_profile("m", process_profile(free_port())), sources_dir=tmp_path / "out")
    prep.plan.mounts.append(Mount(source=str(tmp_path / "gone.py"), target="/x/gone.py"))
    with pytest.raises(PreflightError, match="mount source"):
        serve_up(prep, log_dir=tmp_path / "logs", ledger_dir=None, echo=lambda _: None)
    assert not (tmp_path / "logs").exists() or not os.listdir(tmp_path / "logs")


def test_records_validate_against_the_ledger_schema(up, tmp_path):
    ledger_mod = pytest.importorskip("materialize.ledger")
    up(process_profile(free_port()))
    data = process_profile(free_port())
    data["env"]["FAKE_VLLM_NEVER_READY"] = "1"
    data["readiness"] = {"timeout_s": 1.0, "poll_interval_s": 0.1}
    up(data)
    lines = ledger_mod.read_ledger(tmp_path / "runs" / "fake.jsonl")
    assert len(lines) == 2 and all(line.error is None for line in lines), [line.error for line in lines]
    good, never_ready = (line.record for line in lines)
    assert good.gate("tool_call_stream").failures == 0 and never_ready.gate("ready").failures == 1


def test_a_run_record_goes_through_the_ledger_and_its_schema(tmp_path):
    """One way to append a run record: the ledger's (its schema check and its lock), never a raw line."""
    from materialize.ledger import LedgerError
    from materialize.serve.up import append_run

    record = {"schema": 1, "profile": "p", "materialization_id": "ab" * 8, "series_prefix": []}
    with pytest.raises(LedgerError, match="refusing to append an invalid record"):
        append_run(tmp_path / "runs", record)
    assert not (tmp_path / "runs" / "p.jsonl").exists() or not (tmp_path / "runs" / "p.jsonl").read_text()


def test_a_banner_left_in_the_log_by_an_earlier_run_does_not_count(up, tmp_path):
    """Logs are named to the second and appended to: a run started in the same second as an earlier one
    (a quick retry) must not see that run's banners as its own."""
    from datetime import UTC, datetime, timedelta

    logs = tmp_path / "logs"
    logs.mkdir()
    now = datetime.now(UTC)
    for second in range(0, 120):
        stamp = (now + timedelta(seconds=second)).strftime("%Y%m%dT%H%M%SZ")
        (logs / f"fake-{stamp}.log").write_text("QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured\n")
    data = process_profile(free_port(), enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"])
    data["env"] = {"FAKE_VLLM_BANNERS": json.dumps({"QWEN36_SDPA_STREAMING": "QWEN36_SDPA_STREAMING engaged"})}
    _, result = up(data)
    assert result.exit_code == 1, result.reason
    assert "QWEN36_PREFIX_PREFILL_TRACE (0002-prefix-prefill-trace)" in result.reason
    assert_stopped(result)


def test_a_plan_that_does_not_deliver_the_materialized_code_is_never_launched_or_recorded(write_profile, tmp_path):
    """The run record names the materialization: whatever built the plan, a plan whose sources do not
    carry every changed file of that materialization is refused before launch and by run_record."""
    from materialize.serve.plan import PlanError
    from materialize.serve.up import run_record

    prep = prepare(write_profile("fake", process_profile(free_port())), sources_dir=tmp_path / "out")
    env = {k: v for k, v in prep.plan.env.items() if k != "PYTHONPATH"}
    stripped = dataclasses.replace(prep, plan=dataclasses.replace(prep.plan, env=env))
    with pytest.raises(PlanError, match="does not deliver"):
        serve_up(stripped, log_dir=tmp_path / "logs", ledger_dir=tmp_path / "runs", echo=lambda _: None)
    assert not (tmp_path / "logs").exists()
    with pytest.raises(PlanError, match="does not deliver"):
        run_record(stripped, ready=True, ready_s=1.0, banners=([], []), gate_results=[], notes=[],
                   log_path=tmp_path / "x.log")


def test_a_patch_the_profile_left_off_that_engages_stops_the_server(up, tmp_path):
    """The plan sets only the enabled flags, but a flag can still reach the server from outside it (an
    image's ENV, the service manager's environment): the patch the profile left off then runs, and its
    banner says so. A banner of a patch that is not enabled fails the run like a missing one."""
    data = process_profile(free_port())
    # The server's code engages 0001 (enabled) and also prints 0002's banner: its flag got in elsewhere.
    data["env"] = {"FAKE_VLLM_BANNERS": json.dumps({"QWEN36_SDPA_STREAMING": "QWEN36_SDPA_STREAMING engaged\n"
                                                    "INFO QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured"})}
    prep, result = up(data)
    assert [b.flag for b in prep.plan.disabled_banners] == ["QWEN36_PREFIX_PREFILL_TRACE", "QWEN36_DEVICE_RESIDENT"]
    assert result.exit_code == 1, result.reason
    assert "QWEN36_PREFIX_PREFILL_TRACE (0002-prefix-prefill-trace)" in result.reason and "left off" in result.reason
    assert result.gate_results == []
    assert_stopped(result)
