"""What reaches the server besides the plan: the working directory, the image's entrypoint, the caller's
environment. Each is fixed by the plan, rendered where it runs (process, ``docker run``, the unit) and
compared by ``serve verify``; nothing of the caller's shell or checkout decides which code runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import psutil
import pytest

from materialize.serve.constraints import check_profile, parse_docker_args
from materialize.serve.install import render_env, render_unit, unit_fields
from materialize.serve.launch import launch, process_env, wait_ready
from materialize.serve.profile import load_profile
from materialize.serve.up import prepare, publish_sources, serve_up
from materialize.serve.verify import verify, verify_container_data

from .conftest import base_profile, free_port, process_profile

SHADOW = "UNPATCHED vllm from the caller's working directory"


def shadow_checkout(where: Path) -> Path:
    """An unpatched ``vllm/`` in a folder, as a checkout next to the series would hold one."""
    server = where / "vllm/entrypoints/openai"
    server.mkdir(parents=True)
    for pkg in (where / "vllm", where / "vllm/entrypoints"):
        (pkg / "__init__.py").write_text("")
    (server / "__init__.py").write_text("")
    (server / "api_server.py").write_text(f"import sys\nprint({SHADOW!r}, flush=True)\nsys.exit(7)\n")
    return where


def rules(write_profile, data, name="p"):
    from materialize.series import load_series

    profile = load_profile(write_profile(name, data))
    return {v.rule for v in check_profile(profile, load_series(profile.series_path))}


# --- 1. the working directory ------------------------------------------------------------------------------


def test_the_callers_working_directory_never_shadows_the_patched_code(write_profile, tmp_path, monkeypatch):
    """``python -m`` puts the working directory first on sys.path, ahead of PYTHONPATH: launched from a
    checkout holding an unpatched ``vllm/``, the server ran that instead of the materialized tree."""
    monkeypatch.chdir(shadow_checkout(tmp_path / "checkout"))
    prep = prepare(write_profile("cwd", process_profile(free_port())), sources_dir=tmp_path / "out")
    result = serve_up(prep, log_dir=tmp_path / "logs", ledger_dir=None, echo=lambda _: None)
    log = result.log_path.read_text()
    assert SHADOW not in log
    assert result.exit_code == 0, result.reason


def test_the_process_runs_in_the_plans_working_directory(write_profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prep = prepare(write_profile("cwd", process_profile(free_port())), sources_dir=tmp_path / "out")
    publish_sources(prep)
    plan = prep.plan
    assert plan.workdir == "/"
    server = launch(plan, tmp_path / "logs/cwd.log")
    try:
        assert wait_ready(server, 20, 0.1).ready, server.log_text()
        assert psutil.Process(server.pid).cwd() == plan.workdir
        assert {(c.layer, c.name): c.ok for c in verify(plan, url=None, pid=server.pid)}[("process", "cwd")]
        elsewhere = dataclasses.replace(plan, workdir=str(tmp_path))
        bad = {(c.layer, c.name): c.detail for c in verify(elsewhere, url=None, pid=server.pid) if not c.ok}
        assert "cwd" in " ".join(name for _, name in bad)
    finally:
        server.stop()


def test_docker_gets_the_plans_working_directory_and_entrypoint(write_profile, tmp_path):
    """The image's WORKDIR (an unpatched checkout in many vLLM images) and ENTRYPOINT (a wrapper that
    would run the checked argv as its arguments) do not decide: both are rendered from the plan."""
    data = base_profile(launcher={"kind": "docker", "image": "img:1", "docker_args": ["--network", "host"]})
    plan = prepare(write_profile("d", data), sources_dir=tmp_path / "out").plan
    image_at = plan.argv.index("img:1")
    parsed = parse_docker_args(plan.argv[2:image_at])
    assert all(p.problem is None for p in parsed)
    values = {}
    for p in parsed:
        if p.option in ("--workdir", "--entrypoint"):
            values[p.option] = plan.argv[2 + p.index + 1]
    assert values == {"--workdir": plan.workdir, "--entrypoint": plan.server_argv[0]}
    assert plan.workdir.startswith("/") and plan.workdir != "/"
    # what docker runs is Entrypoint + Cmd: exactly the checked server argv
    assert [values["--entrypoint"], *plan.argv[image_at + 1:]] == plan.server_argv


def test_verify_compares_the_containers_working_directory_and_entrypoint(write_profile, tmp_path):
    data = base_profile(launcher={"kind": "docker", "image": "img:1"})
    plan = prepare(write_profile("d", data), sources_dir=tmp_path / "out").plan
    good = {"Config": {"Entrypoint": plan.server_argv[:1], "Cmd": plan.server_argv[1:], "WorkingDir": plan.workdir,
                       "Env": [f"{k}={v}" for k, v in plan.env.items()] + ["PATH=/usr/bin"]},
            "Mounts": [{"Source": m.source, "Destination": m.target, "RW": False} for m in plan.mounts],
            "HostConfig": {"Devices": [{"PathOnHost": d, "PathInContainer": d} for d in plan.devices]},
            "Image": "img:1"}
    ok = {(c.layer, c.name): c.ok for c in verify_container_data(plan, good)}
    assert ok[("process", "cwd")]
    moved = {**good, "Config": {**good["Config"], "WorkingDir": "/vllm-workspace"}}
    assert not {(c.layer, c.name): c.ok for c in verify_container_data(plan, moved)}[("process", "cwd")]
    wrapped = {**good, "Config": {**good["Config"], "Entrypoint": ["/bin/wrapper"], "Cmd": plan.server_argv}}
    assert not {(c.layer, c.name): c.ok for c in verify_container_data(plan, wrapped)}[("process", "argv")]


@pytest.mark.parametrize("args", [["-w", "/src"], ["--workdir=/src"], ["-itw", "/src"], ["--workdir", "/src"],
                                  ["--entrypoint", "/bin/sh"], ["--entrypoint="], ["--entrypoint", ""]])
def test_docker_args_may_not_set_the_working_directory_or_entrypoint(write_profile, args):
    data = base_profile(launcher={"kind": "docker", "image": "img:1", "docker_args": args})
    assert "docker-args-not-managed" in rules(write_profile, data)


def test_a_profile_cannot_name_a_working_directory(write_profile):
    from materialize.serve.profile import ProfileError

    data = base_profile(launcher={"kind": "docker", "image": "img:1", "workdir": "/src"})
    with pytest.raises(ProfileError):
        load_profile(write_profile("w", data))


def test_the_unit_sets_the_working_directory(write_profile, tmp_path):
    proc = prepare(write_profile("u", process_profile(free_port())), sources_dir=tmp_path / "out").plan
    assert unit_fields(render_unit(proc))["WorkingDirectory"] == proc.workdir == "/"
    dock = prepare(write_profile("u", base_profile()), sources_dir=tmp_path / "out").plan
    # the unit runs the docker client (its directory is "/"); the server's is the rendered --workdir
    assert unit_fields(render_unit(dock))["WorkingDirectory"] == "/"
    assert "--workdir" in dock.argv


# --- 3. the caller's environment ---------------------------------------------------------------------------


CALLER = {"PATH": "/home/u/bin:/usr/bin", "HOME": "/home/u", "PYTHONSTARTUP": "/home/u/startup.py",
          "PYTHONUSERBASE": "/home/u/ub", "PYTHONPATH": "/home/u/src", "LD_PRELOAD": "/home/u/x.so",
          "TMPDIR": "/home/u/tmp", "VIRTUAL_ENV": "/home/u/venv", "TT_METAL_HOME": "/home/u/tt-metal",
          "LANG": "C.UTF-8", "USER": "u"}


def test_the_process_environment_is_the_plan_not_the_callers(write_profile, tmp_path):
    plan = prepare(write_profile("e", process_profile(free_port())), sources_dir=tmp_path / "out").plan
    env = process_env(plan, CALLER)
    assert env == {**plan.env, "LANG": "C.UTF-8"}
    interpreter = Path(sys.executable)
    assert env["PATH"].split(":")[0] == str(interpreter.parent)
    assert "/home/u" not in env["PATH"] and "HOME" not in env
    # no user site-packages (HOME / PYTHONUSERBASE / the passwd entry's home), whatever the interpreter
    assert env["PYTHONNOUSERSITE"] == "1" and env["PYTHONSAFEPATH"] == "1"
    assert env["PYTHONPATH"] == plan.env["PYTHONPATH"] != CALLER["PYTHONPATH"]


def test_the_server_sees_only_the_plans_environment(write_profile, tmp_path, monkeypatch):
    for key, value in CALLER.items():
        if key not in ("PATH", "HOME"):
            monkeypatch.setenv(key, value)
    prep = prepare(write_profile("e", process_profile(free_port())), sources_dir=tmp_path / "out")
    publish_sources(prep)
    server = launch(prep.plan, tmp_path / "logs/e.log")
    try:
        assert wait_ready(server, 20, 0.1).ready, server.log_text()
        environ = psutil.Process(server.pid).environ()
        assert {k: v for k, v in environ.items() if k != "LANG"} == {
            k: v for k, v in prep.plan.env.items()}
    finally:
        server.stop()


def test_the_plan_says_what_the_server_process_gets(write_profile, tmp_path):
    proc = prepare(write_profile("e", process_profile(free_port())), sources_dir=tmp_path / "out").plan
    assert proc.env["PATH"] == f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert "HOME" not in proc.env
    dock = prepare(write_profile("e", base_profile()), sources_dir=tmp_path / "out").plan
    # the image decides PATH and HOME for its own interpreter; no user site, no working directory on sys.path
    assert "PATH" not in dock.env and "HOME" not in dock.env
    assert dock.env["PYTHONNOUSERSITE"] == "1" and dock.env["PYTHONSAFEPATH"] == "1"
    env_file = render_env(proc)
    assert "PYTHONNOUSERSITE=\"1\"" in env_file and f'PATH="{proc.env["PATH"]}"' in env_file


@pytest.mark.parametrize("key", ["PYTHONNOUSERSITE", "PYTHONSAFEPATH"])
def test_the_profile_cannot_undo_what_the_plan_fixes(write_profile, key):
    data = process_profile(free_port(), env={"FAKE_VLLM_BANNERS": "{}", key: ""})
    assert "env-does-not-select-code" in rules(write_profile, data)


def test_verify_catches_code_selecting_variables_the_plan_did_not_set(write_profile, tmp_path):
    prep = prepare(write_profile("v", process_profile(free_port())), sources_dir=tmp_path / "out")
    publish_sources(prep)
    plan = prep.plan
    tampered = dataclasses.replace(plan, env={**plan.env, "PYTHONSTARTUP": "/dev/null", "HOME": "/root"})
    server = launch(tampered, tmp_path / "logs/v.log")
    try:
        assert wait_ready(server, 20, 0.1).ready, server.log_text()
        bad = {(c.layer, c.name): c.detail for c in verify(plan, url=None, pid=server.pid) if not c.ok}
        detail = " ".join(bad.values())
        assert "PYTHONSTARTUP" in detail and "HOME" in detail
    finally:
        server.stop()


def test_os_environ_is_untouched(write_profile, tmp_path):
    before = dict(os.environ)
    prepare(write_profile("e", process_profile(free_port())), sources_dir=tmp_path / "out")
    assert dict(os.environ) == before


def test_a_working_directory_that_would_shadow_the_plans_code_is_refused(write_profile, tmp_path, invoke):
    """An interpreter older than 3.11 ignores PYTHONSAFEPATH and still puts the working directory first:
    ``serve up`` and the unit's ExecStartPre refuse to start while it holds a package the plan serves."""
    from materialize.serve.preflight import PreflightError, check_sources

    prep = prepare(write_profile("sh", process_profile(free_port())), sources_dir=tmp_path / "out")
    publish_sources(prep)
    assert [c for c in check_sources(prep.plan) if not c.ok] == []
    plan = dataclasses.replace(prep.plan, workdir=str(shadow_checkout(tmp_path / "root")))
    bad = [c for c in check_sources(plan) if not c.ok]
    assert [c.name for c in bad] == ["workdir"] and f"{tmp_path}/root/vllm" in bad[0].detail
    (tmp_path / "root/vllm.txt").write_text("not importable")
    with pytest.raises(PreflightError, match="workdir"):
        serve_up(dataclasses.replace(prep, plan=plan), log_dir=tmp_path / "logs", ledger_dir=None,
                 echo=lambda _: None)
    assert not (tmp_path / "logs").exists()  # nothing was started
    plan_file = tmp_path / f"{plan.hash()}.json"  # named by its content, as the unit names it
    plan_file.write_text(plan.to_json())
    result = invoke("serve", "boot-check", "--pre", plan_file)
    assert result.return_value == 1 and "would shadow" in result.output
    plan_file = tmp_path / f"{prep.plan.hash()}.json"
    plan_file.write_text(prep.plan.to_json())
    assert invoke("serve", "boot-check", "--pre", plan_file).return_value == 0


def test_the_process_unit_unsets_what_the_managers_environment_could_add(write_profile, tmp_path):
    """systemd passes its manager's environment (DefaultEnvironment=, ``systemctl set-environment``) to
    every service; the unit of a process removes each variable that selects code and the plan did not set."""
    import subprocess

    from materialize.serve.constraints import CODE_SELECTING_ENV
    from materialize.serve.install import install_systemd

    plan = prepare(write_profile("un", process_profile(free_port())), sources_dir=tmp_path / "out").plan
    unset = unit_fields(render_unit(plan))["UnsetEnvironment"].split()
    assert {"PYTHONSTARTUP", "PYTHONUSERBASE", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "TT_METAL_HOME",
            "VLLM_PLUGINS"} <= set(unset)
    assert set(unset).isdisjoint(plan.env) and set(CODE_SELECTING_ENV) - set(plan.env) <= set(unset)
    # a flag of a patch the profile left off, set in the manager's environment, would switch that patch on
    assert plan.disabled_flags and set(plan.disabled_flags) <= set(unset)
    unit, *_ = install_systemd(plan, tmp_path / "root")
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert [line for line in (out.stdout + out.stderr).splitlines() if unit.name in line] == []
