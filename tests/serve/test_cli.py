"""The ``serve`` commands: plan/diff/check/install/up through the CLI, in a tmp working dir."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from materialize.errors import MaterializeError

from .conftest import base_profile

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli(invoke, series_root, write_profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outputs, logs and ledgers land here, never in the repo
    write_profile("prod", base_profile())
    write_profile("prefix", base_profile(enable=["0001-sdpa-streaming", "QWEN36_PREFIX_PREFILL_TRACE"],
                                         vllm={"enable_prefix_caching": True, "async_scheduling": False,
                                               "block_size": 2048}))
    profiles = series_root / "serve/profiles"

    def run(*args):
        return invoke("serve", "--profiles", profiles, "--sources-dir", tmp_path / "sources", *args)

    yield run
    for extra in profiles.glob("*.yaml"):
        if extra.stem not in ("prod", "prefix"):
            extra.unlink()


def test_plan_json_is_deterministic_and_derived(cli):
    first, second = cli("plan", "prod", "--json"), cli("plan", "prod", "--json")
    assert first.return_value == 0 and first.output == second.output
    plan = json.loads(first.output)
    assert plan["env"]["QWEN36_SDPA_STREAMING"] == "1"
    assert [b["banner"] for b in plan["banners"]] == ["QWEN36_SDPA_STREAMING engaged"]
    assert Path(plan["mounts"][0]["source"]).is_relative_to(Path.cwd())


def test_plan_text_lists_flags_banners_mounts(cli):
    result = cli("plan", "prod")
    assert "QWEN36_SDPA_STREAMING=1" in result.output
    assert "banners that must appear:\n  QWEN36_SDPA_STREAMING (0001-sdpa-streaming)" in result.output
    assert "flags left off: QWEN36_DEVICE_RESIDENT, QWEN36_PREFIX_PREFILL_TRACE" in result.output
    # what the image or the caller would otherwise decide is stated (tests/serve/test_launch_env.py)
    assert "working directory: /var/empty/materialize-serve (--workdir; not the image's WORKDIR)" in result.output
    assert "entrypoint: python3 (--entrypoint; not the image's ENTRYPOINT)" in result.output
    assert "set by the plan: PYTHONDONTWRITEBYTECODE, PYTHONNOUSERSITE, PYTHONSAFEPATH)" in result.output


def test_diff_between_profiles(cli):
    result = cli("diff", "prod", "prefix")
    assert result.return_value == 1
    assert "+ env QWEN36_PREFIX_PREFILL_TRACE=1" in result.output
    assert "+ option --no-async-scheduling=" in result.output
    assert cli("diff", "prod", "prod").return_value == 0


def test_check_rejects_a_profile_that_breaks_a_rule(cli, write_profile):
    assert cli("check").return_value == 0
    write_profile("broken", base_profile(vllm={"enable_prefix_caching": True}))
    result = cli("check", "--no-materialize")
    assert result.return_value == 1
    assert "FAIL" in result.output and "prefix-caching-needs-sync-scheduling" in result.output
    assert "broken.yaml:" in result.output
    assert "ok   prod" in result.output


def test_install_then_verify_unit(cli, tmp_path):
    root = tmp_path / "root"
    assert cli("install", "prod", "--systemd", "--root", str(root)).return_value == 0
    result = cli("verify", "--profile", "prod", "--root", str(root))
    # Installed but never started: the banners cannot have been seen, and verify says so.
    assert result.return_value == 1
    assert [line for line in result.output.splitlines() if "FAIL" in line] == [
        "[FAIL] process banners: 1 banner(s) expected but the server's output cannot be read: give --log "
        "(or --pid, --container, --root)"]
    log = root / "var/log/materialize-serve-prod.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("INFO QWEN36_SDPA_STREAMING engaged\n")
    result = cli("verify", "--profile", "prod", "--root", str(root))
    assert result.return_value == 0, result.output
    assert "banners: 1 banner(s) seen in " + str(log) in result.output


def test_up_without_hardware_fails_closed(cli):
    result = cli("up", "prod", "--once")
    assert isinstance(result.exception, MaterializeError) and result.exception.exit_code == 1
    assert "preflight failed" in str(result.exception)
    assert not Path("bench/runs").exists()  # nothing ran, so nothing is recorded


def test_shipped_profiles_pass_the_rules(invoke, tmp_path, monkeypatch):
    """CI's `serve check` materializes; this is the rules-only half, against the shipped series."""
    monkeypatch.chdir(tmp_path)
    result = invoke("serve", "--profiles", REPO / "serve/profiles", "check", "--no-materialize")
    assert result.return_value == 0, result.output
    assert "ok   prod" in result.output and "ok   prefix" in result.output


def test_shipped_prod_with_the_wrong_parser_is_rejected(invoke, tmp_path, monkeypatch):
    shutil.copytree(REPO / "series", tmp_path / "series")
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    (tmp_path / "serve/profiles").mkdir(parents=True)
    data = yaml.safe_load((REPO / "serve/profiles/prod.yaml").read_text())
    data["vllm"]["tool_call_parser"] = "hermes"
    data["enable"] = []
    (tmp_path / "serve/profiles/prod.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    result = invoke("serve", "check", "--no-materialize")
    assert result.return_value == 1
    assert "tool-call-parser-matches-model" in result.output and "parses hermes_json" in result.output
    # Patch 0006's flag routes 'hermes' to the qwen3_xml parser class, so enabling it makes hermes correct.
    data["enable"] = ["QWEN36_HERMES_AS_QWEN3_XML"]
    (tmp_path / "serve/profiles/prod.yaml").write_text(yaml.safe_dump(data))
    result = invoke("serve", "check", "--no-materialize")
    assert result.return_value == 0, result.output


def test_plan_diff_check_verify_write_nothing_and_never_repoint_latest(cli, tmp_path):
    """Serve reads a manifest; it never publishes an output or moves `latest` (issue 14.8)."""
    outputs = tmp_path / "build/materialized"
    (outputs / "cafe").mkdir(parents=True)
    (outputs / "cafe/manifest.json").write_text("{}")
    (outputs / "latest").symlink_to("cafe")
    before = sorted(p.name for p in outputs.iterdir())
    assert cli("plan", "prod").return_value == 0
    assert cli("plan", "prod", "--json").return_value == 0
    assert cli("diff", "prod", "prefix").return_value == 1
    assert cli("check").return_value == 0
    cli("verify", "--profile", "prod", "--root", str(tmp_path / "nothing-installed"))
    assert sorted(p.name for p in outputs.iterdir()) == before
    assert (outputs / "latest").readlink() == Path("cafe")
    assert not (tmp_path / "sources").exists()  # planned there, written only by up/install


def test_up_runs_the_rules_before_the_host_preflight(cli, write_profile):
    """README: rules first, then preflight. A broken profile is the answer on any host (issue 14.10)."""
    write_profile("broken", base_profile(vllm={"enable_prefix_caching": True}))
    result = cli("up", "broken", "--once")
    assert isinstance(result.exception, MaterializeError)
    assert "prefix-caching-needs-sync-scheduling" in str(result.exception)
    assert "preflight" not in str(result.exception) and "preflight" not in result.output


def test_diff_shows_docker_args_next_to_other_changes(cli, write_profile):
    write_profile("wide", base_profile(server={"host": "0.0.0.0", "port": 8001},
                                       launcher={"kind": "docker", "image": "ghcr.io/example/vllm-tt:0.33.0",
                                                 "docker_args": ["--shm-size", "64g"]}))
    result = cli("diff", "prod", "wide")
    assert result.return_value == 1
    assert "~ option --port: 8000 -> 8001" in result.output
    assert '~ docker_args: [] -> ["--shm-size", "64g"]' in result.output, result.output
