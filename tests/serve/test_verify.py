"""``serve verify``: plan vs unit vs the running process (real subprocess) vs live gates."""

from __future__ import annotations

import dataclasses
import json

import pytest

from materialize.serve.install import install_prepared, install_systemd, log_path
from materialize.serve.launch import launch, wait_ready
from materialize.serve.up import prepare, publish_sources
from materialize.serve.verify import container_view, verify, verify_container_data

from .conftest import free_port, process_profile


@pytest.fixture
def prepared(write_profile, tmp_path):
    def make(name="v", **overrides):
        prep = prepare(write_profile(name, process_profile(free_port(), **overrides)), sources_dir=tmp_path / "out")
        publish_sources(prep)  # as `serve up` does before launch: the server runs vLLM's module from them
        return prep

    return make


@pytest.fixture
def running(tmp_path):
    started = []

    def start(plan):
        server = launch(plan, tmp_path / "logs" / f"{plan.profile}.log")
        started.append(server)
        assert wait_ready(server, 20, 0.1).ready, server.log_text()
        return server

    yield start
    for server in started:
        server.stop()


def ran(root, plan):
    """What the unit's start leaves behind: its log (StandardOutput=truncate:) with the banners."""
    log = root / log_path(plan).lstrip("/")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"INFO {b.banner}\n" for b in plan.banners))


def failed(checks):
    return {(c.layer, c.name): c.detail for c in checks if not c.ok}


def test_all_three_layers_agree(prepared, running, tmp_path):
    prep = prepared()
    plan = prep.plan
    server = running(plan)
    install_prepared(prep, tmp_path / "root")
    checks = verify(plan, url=plan.url, pid=server.pid, unit_root=tmp_path / "root")
    assert failed(checks) == {}
    assert {c.layer for c in checks} == {"unit", "process", "live"}


def test_running_process_that_differs_from_the_plan_is_caught(prepared, running):
    old = prepared("v").plan
    server = running(old)
    new = prepared("v", vllm={"max_model_len": 65536}, enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"]).plan
    bad = failed(verify(new, url=None, pid=server.pid))
    assert "--max-model-len: plan '65536', running '131072'" in bad[("process", "argv")]
    assert "QWEN36_PREFIX_PREFILL_TRACE: plan '1', running '<unset>'" in bad[("process", "env")]


def test_flag_set_by_hand_on_the_process_is_caught(prepared, running):
    plan = prepared().plan
    tampered = dataclasses.replace(plan, env={**plan.env, "QWEN36_DEVICE_RESIDENT": "1"})
    server = running(tampered)
    bad = failed(verify(plan, url=None, pid=server.pid))
    assert bad[("process", "flags")] == "set but not enabled by the profile: QWEN36_DEVICE_RESIDENT"


def test_live_layer_fails_on_the_wrong_parser(prepared, running):
    plan = prepared().plan
    hermes = [w if w != "qwen3_xml" else "hermes" for w in plan.argv]
    running(dataclasses.replace(plan, argv=hermes, server_argv=hermes))
    bad = failed(verify(plan, url=plan.url))
    assert set(bad) == {("live", "tool_call_stream"), ("live", "tool_call_nonstream")}


def test_stale_unit_hand_edits_and_run_overrides(prepared, tmp_path):
    root = tmp_path / "root"
    old = prepared("u").plan
    install_systemd(old, root)
    new_prep = prepared("u", vllm={"max_model_len": 65536})
    new = new_prep.plan
    bad = failed(verify(new, url=None, unit_root=root))
    assert "stale unit" in bad[("unit", "plan-hash")]
    assert "--max-model-len" in bad[("unit", "argv")]

    install_prepared(new_prep, root)
    ran(root, new)
    assert failed(verify(new, url=None, unit_root=root)) == {}
    env_file = root / "etc/materialize/serve/u.env"
    env_file.write_text(env_file.read_text() + 'QWEN36_DEVICE_RESIDENT="1"\n')
    dropin = root / "run/systemd/system/materialize-serve-u.service.d/override.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nExecStart=\nExecStart=/bin/false\n")
    bad = failed(verify(new, url=None, unit_root=root))
    assert "edited by hand" in bad[("unit", "env-file")]
    assert bad[("unit", "flags")] == "set but not enabled by the profile: QWEN36_DEVICE_RESIDENT"
    assert "in /run: lost on reboot" in bad[("unit", "drop-ins")]


def test_nothing_to_verify_is_not_a_pass(prepared):
    assert failed(verify(prepared().plan, url=None))


def test_container_inspect_layer(prepared):
    plan = prepared().plan
    inspect = {
        "Config": {"Entrypoint": None, "Cmd": plan.server_argv, "WorkingDir": plan.workdir,
                   "Env": [f"{k}={v}" for k, v in plan.env.items()] + ["LANG=C.UTF-8"]},
        "Mounts": [{"Source": m.source, "Destination": m.target} for m in plan.mounts],
    }
    assert container_view(json.loads(json.dumps(inspect)))[0] == plan.server_argv
    assert failed(verify_container_data(plan, inspect)) == {}
    inspect["Config"]["Cmd"] = [w if w != "qwen3_xml" else "hermes" for w in plan.server_argv]
    inspect["Config"]["Env"] = [e for e in inspect["Config"]["Env"] if not e.startswith("QWEN36_SDPA")]
    bad = failed(verify_container_data(plan, inspect))
    assert "--tool-call-parser: plan 'qwen3_xml', running 'hermes'" in bad[("process", "argv")]
    assert "QWEN36_SDPA_STREAMING" in bad[("process", "env")]


def test_a_running_server_whose_sources_were_edited_is_caught(prepared, running):
    """`verify --pid`: the process's argv and environment can match the plan while the files on its
    PYTHONPATH (or mounted into its container) are not what the materialization wrote: a hand edit in the
    sources folder after publishing runs under the id. The process layer compares the plan's digests."""
    from pathlib import Path

    plan = prepared().plan
    server = running(plan)
    assert failed(verify(plan, url=None, pid=server.pid)) == {}
    edited = Path(sorted(plan.digests)[0])
    text = edited.read_text()
    edited.parent.chmod(0o755)
    edited.unlink()  # a new file, not a write through the hard link into the shared file cache
    edited.write_text(text + "# hot fix\n")
    bad = failed(verify(plan, url=None, pid=server.pid))
    assert "edited since materialization" in bad[("process", "sources")], bad


def test_a_banner_of_a_patch_the_profile_left_off_fails_verify(prepared, tmp_path):
    """The server's output shows a patch engaged that the profile did not enable (its flag reached the
    server from the image's ENV or the manager's environment): the banner layer fails."""
    plan = prepared().plan
    log = tmp_path / "server.log"
    log.write_text("".join(f"INFO {b.banner}\n" for b in plan.banners))
    assert failed(verify(plan, url=None, log=log)) == {}
    left_off = plan.disabled_banners[0]
    log.write_text(log.read_text() + f"INFO {left_off.banner}\n")
    bad = failed(verify(plan, url=None, log=log))
    assert f"{left_off.flag} ({left_off.patch})" in bad[("process", "left-off")], bad
