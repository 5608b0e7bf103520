"""Profile loading: typed, unknown keys refused, every error names file:line."""

from __future__ import annotations

import pytest

from materialize.serve.profile import ProfileError, find_profile, load_profile

from .conftest import base_profile


def test_valid_profile_loads_with_defaults(write_profile):
    profile = load_profile(write_profile("ok", base_profile()))
    assert profile.name == "ok"
    assert profile.spec.readiness.timeout_s == 1800.0
    assert [g.name for g in profile.spec.gates] == ["models", "tool_call_stream", "tool_call_nonstream"]
    assert profile.series_path.name == "default.yaml"


def test_hash_ignores_comments_and_order_but_not_values(write_profile, series_root):
    a = load_profile(write_profile("a", base_profile()))
    path = series_root / "serve/profiles/b.yaml"
    path.write_text("# a comment\n" + write_profile("b", base_profile()).read_text())
    b = load_profile(path)
    c = load_profile(write_profile("c", base_profile(vllm={"max_model_len": 65536})))
    assert a.hash() == b.hash() != c.hash()


def test_typo_names_file_line_and_field(series_root):
    path = series_root / "serve/profiles/typo.yaml"
    path.write_text(
        "version: 1\nseries: ../../series/default.yaml\nlauncher:\n  kind: docker\n  image: x\n"
        "model:\n  path: m\n  served_name: s\n  tool_call_format: qwen3_xml\n"
        "vllm:\n  max_model_len: 10\n  tool_call_parsr: hermes\n"
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert f"{path}:12: vllm.tool_call_parsr: unknown field" in str(exc.value)


def test_launcher_kind_mismatches_are_refused(write_profile):
    bad = base_profile(launcher={"kind": "process", "image": "x", "sources": "pythonpath"})
    with pytest.raises(ProfileError, match="only apply to the docker launcher"):
        load_profile(write_profile("bad", bad))
    with pytest.raises(ProfileError, match="needs 'image'"):
        load_profile(write_profile("bad2", base_profile(launcher={"kind": "docker", "image": None})))


def test_find_profile_by_name_and_unknown(series_root, write_profile):
    write_profile("prod", base_profile())
    profiles = series_root / "serve/profiles"
    assert find_profile("prod", profiles) == profiles / "prod.yaml"
    with pytest.raises(ProfileError, match="no profile 'nope'"):
        find_profile("nope", profiles)
