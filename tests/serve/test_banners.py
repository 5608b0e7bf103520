"""Every flag has a banner (or banner: none with a reason), and flag and banner occur in the patch they
belong to, so a typo in the series is caught offline, not on hardware (issue 14.3)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from materialize.series import load_series
from materialize.serve.constraints import check_profile
from materialize.serve.profile import load_profile
from materialize.serve.up import prepare, serve_up

from .conftest import base_profile, free_port, process_profile


@pytest.fixture
def variant(series_root, tmp_path):
    """A copy of the fixture project whose series entries are edited by ``edit(patches)``."""

    def make(edit):
        root = tmp_path / "project"
        shutil.copytree(series_root, root, symlinks=True)
        path = root / "series/default.yaml"
        data = yaml.safe_load(path.read_text())
        edit({p["patch"].split("/")[-1].split("-", 1)[0] + p["target"][0]: p for p in data["patches"]})
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return root

    return make


def rules_for(root, profile_data):
    profile_path = root / "serve/profiles/b.yaml"
    profile_path.write_text(yaml.safe_dump(profile_data, sort_keys=False))
    profile = load_profile(profile_path)
    return {v.rule: str(v) for v in check_profile(profile, load_series(profile.series_path))}


def test_flag_without_banner_is_refused_not_noted(variant):
    root = variant(lambda p: p["0002t"].pop("banner"))
    found = rules_for(root, base_profile())
    assert "flag-needs-banner" in found
    assert "QWEN36_PREFIX_PREFILL_TRACE has no banner" in found["flag-needs-banner"]
    assert "series/default.yaml:" in found["flag-needs-banner"]


def test_banner_none_needs_a_reason(variant):
    root = variant(lambda p: p["0002t"].update(banner="none"))
    assert "banner_none_why" in rules_for(root, base_profile())["flag-needs-banner"]


def test_flag_typo_in_the_series_is_caught_offline(variant):
    root = variant(lambda p: p["0001t"].update(flag="QWEN36_SDPA_STREAMNIG"))
    found = rules_for(root, base_profile(enable=["QWEN36_SDPA_STREAMNIG"]))
    assert "flag QWEN36_SDPA_STREAMNIG occurs in none of the lines it adds" in found["flag-and-banner-in-patch"]


def test_banner_typo_in_the_series_is_caught_offline(variant):
    root = variant(lambda p: p["0001t"].update(banner="QWEN36_SDPA_STREAMING engagd"))
    found = rules_for(root, base_profile())
    assert "banner 'QWEN36_SDPA_STREAMING engagd' occurs in none of the lines it adds" in found["flag-and-banner-in-patch"]


def test_banner_none_with_reason_is_recorded_as_unobservable(variant, tmp_path):
    why = "the flag only changes a kernel's tiling; nothing prints on the host"
    root = variant(lambda p: p["0002t"].update(banner="none", banner_none_why=why))
    data = process_profile(free_port(), enable=["0001-sdpa-streaming", "0002-prefix-prefill-trace"])
    profile_path = root / "serve/profiles/u.yaml"
    profile_path.write_text(yaml.safe_dump(data, sort_keys=False))
    prep = prepare(profile_path, sources_dir=tmp_path / "out")
    assert prep.plan.unobservable == [{"flag": "QWEN36_PREFIX_PREFILL_TRACE", "patch": "0002-prefix-prefill-trace",
                                       "reason": why}]
    assert [b.flag for b in prep.plan.banners] == ["QWEN36_SDPA_STREAMING"]
    result = serve_up(prep, log_dir=tmp_path / "logs", ledger_dir=tmp_path / "runs", echo=lambda _: None)
    assert result.exit_code == 0, result.reason
    (record,) = [json.loads(line) for line in (tmp_path / "runs/u.jsonl").read_text().splitlines()]
    assert record["x_unobservable"] == ["QWEN36_PREFIX_PREFILL_TRACE"]
    assert "engagement of QWEN36_PREFIX_PREFILL_TRACE (0002-prefix-prefill-trace) cannot be observed" in record["notes"]
