"""The installed unit fails closed by itself (issue 14.1, 14.7): ExecStartPre refuses missing sources,
ExecStartPost requires the banners and passes the gates, or the service is failed.

There is no running systemd here, so each test does what systemd does with the unit's own lines: run
ExecStart with the environment file, its output in the StandardOutput file, then run the ExecStartPre /
ExecStartPost commands as real subprocesses. The unit's host paths (/etc, /var) live under the staging
root, so they are looked up there (what a chroot would do).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from materialize.serve.install import install_prepared, log_path, parse_env, systemd_unquote, unit_fields
from materialize.serve.up import prepare

from .conftest import free_port, process_profile

REPO = Path(__file__).resolve().parents[2]
HOST_DIRS = ("/etc/", "/var/")


def staged(root: Path, word: str) -> str:
    return str(root / word.lstrip("/")) if word.startswith(HOST_DIRS) else word


@pytest.fixture
def installed(write_profile, tmp_path):
    def make(data):
        prep = prepare(write_profile("boot", data), sources_dir=tmp_path / "sources")
        root = tmp_path / "root"
        install_prepared(prep, root)
        # The plan names the sources by host path; make that path the staged copy (as on the host).
        (tmp_path / "sources").symlink_to(root / str(tmp_path / "sources").lstrip("/"))
        fields = unit_fields((root / "etc/systemd/system/materialize-serve-boot.service").read_text())
        return prep.plan, root, fields

    return make


def run_unit_command(line: str, root: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [staged(root, w) for w in systemd_unquote(line)]
    env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1",
           "MATERIALIZE_CACHE": os.environ.get("MATERIALIZE_CACHE", "")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env, check=False)


@pytest.fixture
def start_unit():
    started = []

    def start(plan, root: Path, fields: dict, extra_env: dict | None = None) -> Path:
        env = parse_env((root / fields["EnvironmentFile"].lstrip("/")).read_text())
        env.update(extra_env or {})
        log = root / log_path(plan).lstrip("/")
        assert fields["StandardOutput"] == f"truncate:{log_path(plan)}"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:  # truncate: as systemd does on every start
            proc = subprocess.Popen(systemd_unquote(fields["ExecStart"]), env={"PATH": os.environ["PATH"], **env},
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return log

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)


def test_unit_runs_the_checks_around_its_server(installed):
    plan, root, fields = installed(process_profile(free_port()))
    pre, post = systemd_unquote(fields["ExecStartPre"]), systemd_unquote(fields["ExecStartPost"])
    assert pre[:5] == [sys.executable, "-m", "materialize", "serve", "boot-check"] and "--pre" in pre
    assert post[:5] == pre[:5] and post[-2:] == ["--log", log_path(plan)]
    installed_plan = root / post[5].lstrip("/")
    assert json.loads(installed_plan.read_text())["materialization_id"] == plan.materialization_id
    assert int(fields["TimeoutStartSec"]) > plan.readiness["timeout_s"]


def test_post_check_fails_the_service_when_a_banner_is_missing(installed, start_unit):
    """Seed 002/#49: after a reboot the unit starts, the server is healthy, and the patch never engaged."""
    data = process_profile(free_port(), enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"])
    plan, root, fields = installed(data)
    # The server's code prints only one of the two banners: 0002 did not engage in this start.
    start_unit(plan, root, fields, {"FAKE_VLLM_BANNERS": json.dumps(
        {"QWEN36_SDPA_STREAMING": "QWEN36_SDPA_STREAMING engaged"})})
    post = run_unit_command(fields["ExecStartPost"], root)
    assert post.returncode == 1, post.stdout + post.stderr
    assert "QWEN36_PREFIX_PREFILL_TRACE (0002-prefix-prefill-trace)" in post.stdout
    assert "did not appear" in post.stdout


def test_post_check_passes_banners_and_gates(installed, start_unit):
    plan, root, fields = installed(process_profile(free_port()))
    start_unit(plan, root, fields)
    post = run_unit_command(fields["ExecStartPost"], root)
    assert post.returncode == 0, post.stdout + post.stderr
    assert "banner seen: QWEN36_SDPA_STREAMING engaged" in post.stdout
    assert "gate tool_call_stream: 6/6 passed at concurrency 1; failure rate < 50.00% at 95%" in post.stdout


def test_post_check_fails_on_a_gate(installed, start_unit):
    plan, root, fields = installed(process_profile(free_port()))
    env_file = root / fields["EnvironmentFile"].lstrip("/")
    start = systemd_unquote(fields["ExecStart"])
    fields = {**fields, "ExecStart": " ".join(w if w != "qwen3_xml" else "hermes" for w in start)}
    start_unit(plan, root, fields)
    assert env_file.exists()
    post = run_unit_command(fields["ExecStartPost"], root)
    assert post.returncode == 1 and "gate(s) failed: tool_call_stream 6/6" in post.stdout, post.stdout


def test_pre_check_refuses_a_start_whose_sources_are_gone(installed):
    plan, root, fields = installed(process_profile(free_port()))
    assert run_unit_command(fields["ExecStartPre"], root).returncode == 0
    assert fields["AssertPathExists"]  # systemd itself also refuses (last AssertPathExists shown)
    sources = Path(plan.sources).resolve()
    assert sources.is_dir() and sources.is_relative_to(root)
    os.rename(sources, sources.with_name("gone"))
    pre = run_unit_command(fields["ExecStartPre"], root)
    assert pre.returncode == 1 and "source(s) missing" in pre.stdout



@pytest.mark.parametrize(("override", "said"), [
    ({"preflight": {"min_mem_available_gb": 1e9}}, "MemAvailable"),
    ({"devices": ["/dev/tenstorrent/by-id/no-such-card"]}, "no-such-card"),
])
def test_pre_check_refuses_a_start_the_host_preflight_would_refuse(installed, override, said):
    """Seed 002: a boot below ~4 GB MemAvailable hard-froze the host. `serve up` checks the profile's
    threshold and devices first; the installed unit starts without `serve up` (every reboot, every
    restart), so its ExecStartPre checks the same, carried in the plan."""
    plan, root, fields = installed(process_profile(free_port(), **override))
    assert plan.preflight["min_mem_available_gb"] == process_profile(0, **override)["preflight"]["min_mem_available_gb"]
    pre = run_unit_command(fields["ExecStartPre"], root)
    assert pre.returncode == 1 and said in pre.stdout, pre.stdout


def test_pre_check_refuses_a_start_whose_sources_were_edited(installed):
    """The sources folder is named by the materialization id, and the unit serves whatever is in it: a
    changed file edited there after installing (a hot fix by hand) would run under that id. The plan
    carries the git blob id of every changed file; ExecStartPre and `serve verify --root` compare."""
    from materialize.serve.verify import verify

    plan, root, fields = installed(process_profile(free_port()))
    assert plan.digests and all(len(sha) == 40 for sha in plan.digests.values())
    assert run_unit_command(fields["ExecStartPre"], root).returncode == 0
    edited = Path(sorted(plan.digests)[0])
    text = edited.read_text()
    edited.parent.chmod(0o755)
    edited.unlink()  # a new file, not a write through the hard link into the shared file cache
    edited.write_text(text + "# hot fix\n")
    pre = run_unit_command(fields["ExecStartPre"], root)
    assert pre.returncode == 1 and "edited" in pre.stdout and str(edited) in pre.stdout, pre.stdout
    bad = [c for c in verify(plan, url=None, unit_root=root) if not c.ok and c.name == "sources"]
    assert bad and "edited" in bad[0].detail, bad


@pytest.mark.parametrize("edit", ["banners", "digests"])
def test_an_installed_plan_edited_by_hand_fails_both_checks(installed, start_unit, edit):
    """The unit names its plan by content (``plans/<sha256>.json``) and the boot checks read nothing
    else: a plan edited there (its banners emptied: a patch that never engages passes; its digests
    emptied of a source: an edited source runs) was trusted at every boot. Its bytes must hash to its name."""
    data = process_profile(free_port(), enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"])
    plan, root, fields = installed(data)
    installed_plan = root / systemd_unquote(fields["ExecStartPost"])[5].lstrip("/")
    doc = json.loads(installed_plan.read_text())
    if edit == "banners":
        doc["banners"] = [b for b in doc["banners"] if b["flag"] != "QWEN36_PREFIX_PREFILL_TRACE"]
    else:
        doc["digests"] = dict(list(doc["digests"].items())[:1])
    installed_plan.write_text(json.dumps(doc))
    pre = run_unit_command(fields["ExecStartPre"], root)
    assert pre.returncode == 1 and "is not the plan it names" in pre.stdout, pre.stdout
    start_unit(plan, root, fields, {"FAKE_VLLM_BANNERS": json.dumps(
        {"QWEN36_SDPA_STREAMING": "QWEN36_SDPA_STREAMING engaged"})})
    post = run_unit_command(fields["ExecStartPost"], root)
    assert post.returncode == 1 and "is not the plan it names" in post.stdout, post.stdout
