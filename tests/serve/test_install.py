"""``serve install --systemd``: durable unit + env file, rendered from the plan, round-trippable."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from materialize.serve.install import (
    InstallError,
    exec_argv,
    install_systemd,
    parse_env,
    render_env,
    render_unit,
    systemd_quote,
    systemd_unquote,
    unit_fields,
)
from materialize.serve.up import prepare

from .conftest import UNPINNED, base_profile


@pytest.fixture
def plan(write_profile, tmp_path):
    data = base_profile(tt={"trace_mode": "all", "device_argmax": False},
                        env={"TT_METAL_CACHE": "/var/cache/tt metal", "ODD": 'a"b$c%d\\e'},
                        unverified={**UNPINNED, "ODD": "a quoting test, read by nothing"})
    return prepare(write_profile("prod", data), sources_dir=tmp_path / "out").plan


def test_execstart_round_trips_to_the_plan_argv(plan):
    fields = unit_fields(render_unit(plan))
    assert systemd_unquote(fields["ExecStart"]) == exec_argv(plan)
    assert exec_argv(plan)[-len(plan.argv) + 1:] == plan.argv[1:]
    assert fields["X-Materialize-Plan-Hash"] == plan.hash()
    assert fields["X-Materialize-Materialization"] == plan.materialization_id
    docker = exec_argv(plan)[: len(exec_argv(plan)) - len(plan.argv) + 1]
    assert systemd_unquote(fields["ExecStop"]) == [*docker, "stop", "-t", "60", "materialize-serve-prod"]
    assert fields["EnvironmentFile"] == "/etc/materialize/serve/prod.env"
    assert '{"trace_mode":"all"}' in systemd_unquote(fields["ExecStart"])


@pytest.mark.parametrize("word", ["plain", "with space", 'q"uote', "100%", "$HOME", "a\\b", '{"k":"v"}', ""])
def test_quote_unquote(word):
    assert systemd_unquote(systemd_quote(word)) == [word]


def test_env_file_round_trips(plan):
    assert parse_env(render_env(plan)) == plan.env
    assert plan.env["ODD"] == 'a"b$c%d\\e'


def test_install_writes_under_root_and_refuses_run(plan, tmp_path):
    unit, env, *_ = install_systemd(plan, tmp_path / "root")
    assert unit == tmp_path / "root/etc/systemd/system/materialize-serve-prod.service"
    assert env == tmp_path / "root/etc/materialize/serve/prod.env"
    assert unit.read_text() == render_unit(plan) and env.read_text() == render_env(plan)
    with pytest.raises(InstallError, match="reboot empties"):
        install_systemd(plan, Path("/run/materialize-test-root"))
    assert not Path("/run/materialize-test-root").exists()


def test_unit_needs_a_materialization(plan):
    with pytest.raises(InstallError, match="no materialization"):
        render_unit(dataclasses.replace(plan, materialization_id=None))


def test_rendering_is_deterministic(write_profile, tmp_path, plan):
    again = prepare(write_profile("prod", base_profile(tt={"trace_mode": "all", "device_argmax": False},
                                                       env={"TT_METAL_CACHE": "/var/cache/tt metal",
                                                            "ODD": 'a"b$c%d\\e'},
                                                       unverified={**UNPINNED, "ODD": "a quoting test, read by nothing"})),
                    sources_dir=tmp_path / "out").plan
    assert render_unit(again) == render_unit(plan)
    assert json.loads(again.to_json()) == json.loads(plan.to_json())


def test_execstop_and_execstart_run_the_same_docker(plan, tmp_path, monkeypatch):
    """ExecStop once hardcoded /usr/bin/docker while ExecStart went through PATH (issue 14.10)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "docker"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    fields = unit_fields(render_unit(plan))
    start, stop = systemd_unquote(fields["ExecStart"]), systemd_unquote(fields["ExecStop"])
    assert start[0] == stop[0] == str(fake)
    monkeypatch.setenv("PATH", "/nonexistent")
    fields = unit_fields(render_unit(plan))
    start, stop = systemd_unquote(fields["ExecStart"]), systemd_unquote(fields["ExecStop"])
    assert start[:2] == stop[:2] == ["/usr/bin/env", "docker"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_finds_nothing_wrong_with_the_unit(plan, tmp_path):
    """systemd's own checker on the rendered unit: every command it names is executable here."""
    unit, *_ = install_systemd(plan, tmp_path / "root")
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    ours = [line for line in (out.stdout + out.stderr).splitlines() if unit.name in line]
    assert ours == [], ours
