"""`serve verify` sees what systemd would run: every unit directory and kind of drop-in, a unit file
that shadows or masks ours, whether the unit is enabled, what a running systemd loaded; and
``--container`` compares every mount, the image and the devices (issue 14.6)."""

from __future__ import annotations

import os
import shutil

import pytest

from materialize.serve import systemd
from materialize.serve.install import exec_argv, install_prepared, unit_name
from materialize.serve.up import prepare
from materialize.serve.verify import verify_container_data, verify_loaded, verify_unit

from .conftest import base_profile

UNIT = "materialize-serve-s.service"


@pytest.fixture
def installed(write_profile, tmp_path):
    prep = prepare(write_profile("s", base_profile()), sources_dir=tmp_path / "sources")
    root = tmp_path / "root"
    install_prepared(prep, root)
    return prep.plan, root


def failed(checks):
    return {(c.layer, c.name): c.detail for c in checks if not c.ok}


def test_clean_install_passes(installed):
    plan, root = installed
    assert failed(verify_unit(plan, root)) == {}


@pytest.mark.parametrize("directory", [
    f"etc/systemd/system.control/{UNIT}.d",      # systemctl set-property
    f"run/systemd/system.control/{UNIT}.d",      # systemctl set-property --runtime
    f"run/systemd/transient/{UNIT}.d",
    f"run/systemd/system/{UNIT}.d",              # the seeds' /run override
    f"usr/lib/systemd/system/{UNIT}.d",          # a package's drop-in
    f"usr/local/lib/systemd/system/{UNIT}.d",
    f"run/systemd/generator.late/{UNIT}.d",
    "etc/systemd/system/service.d",              # applies to every service
    "run/systemd/system/materialize-serve-.service.d",  # dash prefix: every materialize-serve-*
    "etc/systemd/system/materialize-.service.d",
])
def test_a_drop_in_anywhere_systemd_looks_is_caught(installed, directory):
    plan, root = installed
    dropin = root / directory / "override.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/env docker run --tool-call-parser hermes\n")
    bad = failed(verify_unit(plan, root))
    assert str(dropin) in bad[("unit", "drop-ins")]
    assert ("(in /run: lost on reboot)" in bad[("unit", "drop-ins")]) == directory.startswith("run/")


def test_a_unit_file_earlier_in_the_search_path_replaces_ours(installed):
    plan, root = installed
    shadow = root / "run/systemd/transient" / UNIT
    shadow.parent.mkdir(parents=True)
    shutil.copy(root / "etc/systemd/system" / UNIT, shadow)
    bad = failed(verify_unit(plan, root))
    assert f"systemd loads {shadow}" in bad[("unit", "fragment")] and "lost on reboot" in bad[("unit", "fragment")]


def test_a_masked_unit_is_caught(installed):
    plan, root = installed
    mask = root / "etc/systemd/system.control" / UNIT
    mask.parent.mkdir(parents=True)
    os.symlink("/dev/null", mask)
    assert "masks the unit" in failed(verify_unit(plan, root))[("unit", "fragment")]


def test_a_unit_that_is_not_enabled_does_not_start_after_a_reboot(installed):
    plan, root = installed
    (root / "etc/systemd/system/multi-user.target.wants" / unit_name(plan)).unlink()
    bad = failed(verify_unit(plan, root))
    assert "it will not start after a reboot" in bad[("unit", "enabled")]


def test_dropin_dir_names_follow_systemd():
    assert systemd.dropin_dir_names("materialize-serve-prod.service") == [
        "service.d", "materialize-.service.d", "materialize-serve-.service.d", "materialize-serve-prod.service.d"]


def test_search_path_is_systemds_own_where_installed():
    paths = systemd.unit_paths()
    assert "/etc/systemd/system" in paths and "/run/systemd/transient" in paths
    assert paths.index("/etc/systemd/system.control") < paths.index("/etc/systemd/system")


def show_text(plan, dropins="", state="enabled", reload="no"):
    """`systemctl show -p ...` output in systemd 252's format."""
    argv = " ".join(exec_argv(plan))
    return (f"Id={UNIT}\nLoadState=loaded\nFragmentPath=/etc/systemd/system/{UNIT}\nDropInPaths={dropins}\n"
            f"UnitFileState={state}\nNeedDaemonReload={reload}\n"
            f"ExecStart={{ path={exec_argv(plan)[0]} ; argv[]={argv} ; ignore_errors=no ; start_time=[n/a] ; "
            f"stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }}\nActiveState=active\nSubState=running\n"
            f"Result=success\n")


def test_what_a_running_systemd_loaded_is_compared(installed):
    plan, _ = installed
    assert failed(verify_loaded(plan, systemd.parse_show(show_text(plan)))) == {}
    bad = failed(verify_loaded(plan, systemd.parse_show(show_text(
        plan, dropins=f"/run/systemd/system/{UNIT}.d/override.conf", state="disabled", reload="yes"))))
    assert "override.conf" in bad[("systemd", "drop-ins")]
    assert bad[("systemd", "enabled")] == "UnitFileState=disabled"
    assert "daemon-reload" in bad[("systemd", "daemon-reload")]
    hermes = show_text(plan).replace("qwen3_xml", "hermes")
    assert "loaded ExecStart differs" in failed(verify_loaded(plan, systemd.parse_show(hermes)))[("systemd", "exec-start")]


def inspect_of(plan):
    return {
        "Config": {"Entrypoint": plan.server_argv[:1], "Cmd": plan.server_argv[1:], "Image": plan.image,
                   "WorkingDir": plan.workdir,
                   "Env": [f"{k}={v}" for k, v in plan.env.items()] + ["PATH=/usr/bin"]},
        "Mounts": [{"Type": "bind", "Source": m.source, "Destination": m.target, "RW": not m.read_only}
                   for m in plan.mounts],
        "HostConfig": {"Devices": [{"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"}
                                   for d in plan.devices]},
    }


def test_container_mounts_image_and_devices_are_compared(installed):
    plan, _ = installed
    assert failed(verify_container_data(plan, inspect_of(plan))) == {}

    extra = inspect_of(plan)
    extra["Mounts"].append({"Source": "/home/me/hotfix/qwen.py", "Destination": "/opt/vllm/qwen.py", "RW": False})
    assert "/opt/vllm/qwen.py: mounted from /home/me/hotfix/qwen.py but not in the plan" in \
        failed(verify_container_data(plan, extra))[("process", "mounts")]

    writable = inspect_of(plan)
    writable["Mounts"][0]["RW"] = True
    assert "read-write, plan ro" in failed(verify_container_data(plan, writable))[("process", "mounts")]

    other = inspect_of(plan)
    other["Config"]["Image"] = "ghcr.io/example/vllm-tt:latest"
    other["HostConfig"]["Devices"] = other["HostConfig"]["Devices"][:1]
    bad = failed(verify_container_data(plan, other))
    assert "image ghcr.io/example/vllm-tt:latest" in bad[("process", "image")]
    assert "plan ['/dev/tenstorrent/by-id/p150a-0', '/dev/tenstorrent/by-id/p150a-1']" in bad[("process", "devices")]
