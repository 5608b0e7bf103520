"""The plan is derived (flags, mounts, banners come from the series and the manifest) and deterministic."""

from __future__ import annotations

import copy
import json

import pytest

from materialize.engine import materialize
from materialize.output import write_output
from materialize.series import load_series
from materialize.serve.diff import argv_options
from materialize.serve.plan import PlanError, build_plan, mounts_for
from materialize.serve.profile import ProfileError, load_profile

from .conftest import base_profile


@pytest.fixture(scope="module")
def outputs(series_root, tmp_path_factory):
    """Real materializations of the fixture series: overlay, full, and one without patch 0001."""
    series = load_series(series_root / "series/default.yaml")
    out = tmp_path_factory.mktemp("outputs")
    m = materialize(series)
    overlay = write_output(m, out / "overlay", overlay=True)
    full = write_output(m, out / "full", overlay=False)
    without = write_output(materialize(series, without=["0001-sdpa-streaming"]), out / "without", overlay=True)
    return {name: (json.loads((d / "manifest.json").read_text()), d)
            for name, d in (("overlay", overlay), ("full", full), ("without", without))}


def plan_for(write_profile, series_root, data, output):
    series = load_series(series_root / "series/default.yaml")
    manifest, out_dir = output
    return build_plan(load_profile(write_profile("prod", data)), series, manifest, out_dir)


def test_env_is_the_enabled_flags_never_a_hand_list(write_profile, series_root, outputs):
    one = plan_for(write_profile, series_root, base_profile(), outputs["overlay"])
    assert one.env == {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1",
                       "QWEN36_SDPA_STREAMING": "1", "TT_METAL_CACHE": "/var/cache/tt-metal"}
    both = plan_for(write_profile, series_root, base_profile(enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"]),
                    outputs["overlay"])
    assert both.env["QWEN36_PREFIX_PREFILL_TRACE"] == "1"
    assert [b.banner for b in both.banners] == ["QWEN36_SDPA_STREAMING engaged",
                                                "QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured"]
    assert both.disabled_flags == ["QWEN36_DEVICE_RESIDENT"]
    # Every env entry reaches the container as an explicit -e.
    for key, value in both.env.items():
        assert f"{key}={value}" in both.argv[both.argv.index("-e") :]


def test_mounts_map_each_changed_file_to_its_install_path(write_profile, series_root, outputs):
    manifest, out_dir = outputs["overlay"]
    plan = plan_for(write_profile, series_root, base_profile(), outputs["overlay"])
    expected = sorted(
        (str(out_dir / t / f), f"{info['install_path']}/{f}")
        for t, info in manifest["targets"].items() for f in info["changed"])
    assert sorted((m.source, m.target) for m in plan.mounts) == expected
    assert ("/opt/venv/site-packages/models/qwen/chunk_plan.py" in {m.target for m in plan.mounts})
    assert all(m.read_only for m in plan.mounts)
    for m in plan.mounts:
        assert f"{m.source}:{m.target}:ro" in plan.argv


def test_plan_json_is_deterministic(write_profile, series_root, outputs):
    a = plan_for(write_profile, series_root, base_profile(), outputs["overlay"]).to_json()
    b = plan_for(write_profile, series_root, base_profile(), outputs["overlay"]).to_json()
    assert a == b and a.endswith("\n")
    data = json.loads(a)
    assert list(data) == sorted(data)
    assert data["materialization_id"] == outputs["overlay"][0]["id"]


def test_vllm_options_render_explicitly(write_profile, series_root, outputs):
    data = base_profile(vllm={"enable_prefix_caching": True, "async_scheduling": False, "block_size": 2048,
                              "max_num_seqs": 8, "extra_args": ["--seed", "0"]},
                        tt={"device_argmax": True, "trace_mode": "all"})
    opts = argv_options(plan_for(write_profile, series_root, data, outputs["overlay"]).server_argv)
    assert opts["--enable-prefix-caching"] == "" and opts["--mamba-cache-mode"] == "align"
    assert "--no-async-scheduling" in opts and "--async-scheduling" not in opts
    assert opts["--block-size"] == "2048" and opts["--max-num-seqs"] == "8" and opts["--seed"] == "0"
    assert json.loads(opts["--override-tt-config"]) == {"sample_on_device_mode": "all", "trace_mode": "all"}
    default = argv_options(plan_for(write_profile, series_root, base_profile(), outputs["overlay"]).server_argv)
    assert "--no-enable-prefix-caching" in default and default["--tool-call-parser"] == "qwen3_xml"


def test_enabled_patch_missing_from_materialization_is_refused(write_profile, series_root, outputs):
    with pytest.raises(PlanError, match="0001-sdpa-streaming is enabled but the materialization"):
        plan_for(write_profile, series_root, base_profile(), outputs["without"])


def test_patch_edited_since_materialization_is_refused(write_profile, series_root, outputs):
    manifest, out_dir = outputs["overlay"]
    stale = copy.deepcopy(manifest)
    stale["patches"][0]["sha256"] = "0" * 64
    with pytest.raises(PlanError, match="changed since materialization"):
        plan_for(write_profile, series_root, base_profile(), (stale, out_dir))


def test_overlay_cannot_delete(series_root, outputs):
    manifest, out_dir = outputs["overlay"]
    deleting = copy.deepcopy(manifest)
    deleting["targets"]["plugin"]["deleted"] = ["vllm/old.py"]
    with pytest.raises(PlanError, match="cannot delete a file from the image"):
        mounts_for(load_series(series_root / "series/default.yaml"), deleting, out_dir)


def test_pythonpath_needs_full_output(write_profile, series_root, outputs):
    data = base_profile(launcher={"kind": "process", "command": ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"],
                                  "sources": "pythonpath"})
    with pytest.raises(PlanError, match="needs a full output"):
        plan_for(write_profile, series_root, data, outputs["overlay"])
    manifest, out_dir = outputs["full"]
    plan = plan_for(write_profile, series_root, data, outputs["full"])
    assert plan.env["PYTHONPATH"] == f"{out_dir / 'plugin'}:{out_dir / 'tt-metal'}"
    assert plan.argv == plan.server_argv and plan.mounts == []


def test_rule_violation_refuses_to_plan(write_profile, series_root, outputs):
    with pytest.raises(ProfileError, match="tool-call-parser-matches-model"):
        plan_for(write_profile, series_root, base_profile(vllm={"tool_call_parser": "hermes"}), outputs["overlay"])


def test_docker_argv_shape(write_profile, series_root, outputs):
    data = base_profile(launcher={"kind": "docker", "image": "img:1", "container_name": "tt-serving",
                                  "docker_args": ["--network", "host"]})
    plan = plan_for(write_profile, series_root, data, outputs["overlay"])
    image_at = plan.argv.index("img:1")
    assert plan.argv[:10] == ["docker", "run", "--rm", "--name", "tt-serving", "--init", "--workdir", plan.workdir,
                              "--entrypoint", plan.server_argv[0]]
    # docker execs Entrypoint + Cmd: the server argv, whatever the image's ENTRYPOINT and WORKDIR are
    assert plan.argv[image_at + 1:] == plan.server_argv[1:]
    assert plan.argv[image_at - 2:image_at] == ["--network", "host"]
    head = plan.argv[10:image_at - 2]
    pairs = list(zip(head[::2], head[1::2], strict=True))
    assert [v for k, v in pairs if k == "--device"] == plan.devices
    assert [v for k, v in pairs if k == "-e"] == [f"{k}={v}" for k, v in plan.env.items()]
    assert [v for k, v in pairs if k == "-v"] == [f"{m.source}:{m.target}:ro" for m in plan.mounts]
    assert {k for k, _ in pairs} == {"--device", "-e", "-v"}
    assert plan.container_name == "tt-serving" and "rm -f" not in " ".join(plan.argv)


@pytest.mark.parametrize("rel", ["../../etc/passwd", "/etc/passwd", "vllm/../../x.py", "vllm//x.py"])
def test_a_changed_path_that_would_escape_the_install_path_is_refused(series_root, outputs, rel):
    manifest, out_dir = outputs["overlay"]
    bad = copy.deepcopy(manifest)
    bad["targets"]["plugin"]["changed"].append(rel)
    with pytest.raises(PlanError, match="not a plain relative path"):
        mounts_for(load_series(series_root / "series/default.yaml"), bad, out_dir)


def test_a_changed_file_that_is_a_link_out_of_the_output_is_refused(series_root, outputs, tmp_path):
    import shutil

    manifest, out_dir = outputs["overlay"]
    copy_dir = tmp_path / "out"
    shutil.copytree(out_dir, copy_dir, symlinks=True)
    rel = manifest["targets"]["plugin"]["changed"][0]
    (copy_dir / "plugin" / rel).unlink()
    (copy_dir / "plugin" / rel).symlink_to("/etc/hostname")
    with pytest.raises(PlanError, match="outside the output's plugin folder"):
        mounts_for(load_series(series_root / "series/default.yaml"), manifest, copy_dir)


def test_an_output_edited_after_materializing_is_refused(write_profile, series_root, tmp_path):
    """`--from-output DIR`: every changed file must hold the bytes the store has for it."""
    from materialize.serve.up import prepare

    series = load_series(series_root / "series/default.yaml")
    copy_dir = write_output(materialize(series), tmp_path / "out", overlay=True)
    manifest = json.loads((copy_dir / "manifest.json").read_text())
    profile = write_profile("prod", base_profile())
    assert prepare(profile, manifest_dir=copy_dir).plan.mounts  # untouched: plans
    rel = manifest["targets"]["tt-metal"]["changed"][0]
    edited = copy_dir / "tt-metal" / rel
    text = edited.read_bytes()
    edited.unlink()  # as an editor saves (a new file): appending in place, as root, would write
    edited.write_bytes(text + b"# hand fix\n")  # through the hard link into the session's file cache
    with pytest.raises(PlanError, match="differs from what materialization .* wrote"):
        prepare(profile, manifest_dir=copy_dir)


def _stale(manifest, change):
    stale = copy.deepcopy(manifest)
    change(stale)
    return stale


STALE_MANIFESTS = {
    # each is a materialization of something other than the series as it stands now
    "a patch that is not enabled was edited": lambda m: m["patches"][-1].update(sha256="0" * 64),
    "the series gained a patch since": lambda m: m["patches"].pop(),
    "a patch the series no longer has": lambda m: m["patches"].append({**m["patches"][-1], "name": "0099-gone"}),
    "patches in another order": lambda m: m["patches"].reverse(),
    "a prefix of the series": lambda m: m.update(position=m["position"] - 1),
    "a target the series does not have": lambda m: m["targets"].update(extra=m["targets"]["plugin"]),
}


@pytest.mark.parametrize("case", sorted(STALE_MANIFESTS))
def test_a_manifest_of_another_materialization_is_refused(write_profile, series_root, outputs, case):
    """`--from-output DIR` plans from DIR's manifest: it must be the series as it stands, patch for
    patch (name, order, sha256), not only the enabled ones, or the server runs other code."""
    manifest, out_dir = outputs["overlay"]
    stale = _stale(manifest, STALE_MANIFESTS[case])
    with pytest.raises(PlanError, match="is not the series as it stands"):
        plan_for(write_profile, series_root, base_profile(), (stale, out_dir))


def _edit_manifest(out_dir, change) -> None:
    """Edit an output's manifest.json in place, as a hand (or a stale copy) would after publishing."""
    path = out_dir / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.chmod(0o644)
    path.write_text(json.dumps(data))


def _retree(m: dict) -> None:
    """Point the tt-metal target at its unpatched base tree, with an id and changed list to match."""
    from materialize.engine import materialization_id

    info = m["targets"]["tt-metal"]
    info["tree"], info["changed"] = info["base_tree"], []
    m["id"] = materialization_id({t: i["tree"] for t, i in m["targets"].items()})


EDITED_MANIFESTS = {
    # each keeps the series' patches (name, order, sha256) but names other code than the series makes
    "the id of another materialization": lambda m: m.update(id="0" * len(m["id"])),
    "another install path (the mounts land beside the code that runs)":
        lambda m: m["targets"]["tt-metal"].update(install_path="/tmp/elsewhere"),
    "a changed file dropped from the list (it would run unpatched)":
        lambda m: m["targets"]["tt-metal"]["changed"].pop(),
    "the unpatched tree under a recomputed id": _retree,
}


@pytest.mark.parametrize("case", sorted(EDITED_MANIFESTS))
def test_a_manifest_edited_after_publishing_is_refused(write_profile, series_root, tmp_path, case):
    """`--from-output DIR`: the manifest is checked against what the series materializes to now (its
    id, every target's tree, install path and changed files), not only patch names and sha256s: an
    edited manifest would mount files at the wrong place, leave a patched file out, or name code that
    is not what runs."""
    from materialize.serve.up import prepare

    series = load_series(series_root / "series/default.yaml")
    out = write_output(materialize(series), tmp_path / "out", overlay=True)
    profile = write_profile("prod", base_profile())
    assert prepare(profile, manifest_dir=out).plan.mounts  # untouched: plans
    _edit_manifest(out, EDITED_MANIFESTS[case])
    with pytest.raises(PlanError, match="not what the series materializes to"):
        prepare(profile, manifest_dir=out)


def _process_profile() -> dict:
    return base_profile(launcher={"kind": "process", "command": ["/opt/venv/bin/python", "-m",
                                                                 "vllm.entrypoints.openai.api_server"],
                                  "sources": "pythonpath"})


def test_an_overlay_declared_full_is_refused(write_profile, series_root, tmp_path):
    """An overlay output whose manifest says `overlay: false`: on PYTHONPATH its `vllm/` has only the
    changed files (no `__init__.py`), a namespace portion the interpreter passes over for the installed
    package: the patched files would never be imported."""
    from materialize.serve.up import prepare

    series = load_series(series_root / "series/default.yaml")
    out = write_output(materialize(series), tmp_path / "out", overlay=True)
    _edit_manifest(out, lambda m: m.update(overlay=False))
    with pytest.raises(PlanError, match="missing"):
        prepare(write_profile("prod", _process_profile()), manifest_dir=out)


def test_a_full_output_missing_an_unchanged_file_is_refused(write_profile, series_root, tmp_path):
    """A full output served on PYTHONPATH must hold every file of its trees, not only the changed ones:
    without `vllm/__init__.py` the interpreter imports the installed (unpatched) vllm instead."""
    from materialize.serve.up import prepare

    series = load_series(series_root / "series/default.yaml")
    out = write_output(materialize(series), tmp_path / "out", overlay=False)
    profile = write_profile("prod", _process_profile())
    assert prepare(profile, manifest_dir=out).plan.env["PYTHONPATH"]  # untouched: plans
    (out / "plugin").chmod(0o755)
    (out / "plugin/vllm").chmod(0o755)
    (out / "plugin/vllm/__init__.py").unlink()
    with pytest.raises(PlanError, match=r"plugin/vllm/__init__\.py.*missing"):
        prepare(profile, manifest_dir=out)
