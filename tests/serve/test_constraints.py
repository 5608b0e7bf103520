"""Every serving rule rejects the profile that breaks it, naming profile, rule and line."""

from __future__ import annotations

import pytest

from materialize.series import load_series
from materialize.serve.constraints import check_profile, parser_registry, resolve_enabled
from materialize.serve.profile import load_profile
from materialize.tree import DirTree

from .conftest import base_profile


@pytest.fixture
def series(series_root):
    return load_series(series_root / "series/default.yaml")


def violations(write_profile, series, data, tree=None):
    profile = load_profile(write_profile("p", data))
    return check_profile(profile, series, tree)


def rules(found):
    return sorted({v.rule for v in found})


def test_base_profile_passes(write_profile, series):
    assert violations(write_profile, series, base_profile()) == []


def test_enable_accepts_names_and_flags(write_profile, series):
    profile = load_profile(write_profile("p", base_profile(enable=["QWEN36_PREFIX_PREFILL_TRACE", "0001-sdpa"])))
    enabled, problems = resolve_enabled(profile, series)
    assert problems == []
    assert [p.name for p in enabled] == ["0001-sdpa-streaming", "0002-prefix-prefill-trace"]


@pytest.mark.parametrize(
    ("data", "rule", "text"),
    [
        (base_profile(enable=["0003-chunk-plan"]), "enabled-patch-has-flag", "declares no flag"),
        (base_profile(enable=["QWEN36_NOT_A_FLAG"]), "enabled-flag-is-declared", "not declared by any patch"),
        (base_profile(enable=["9999-nope"]), "enabled-patch-exists", "no patch named"),
        (base_profile(enable=["1"]), "enabled-patch-exists", "is a position; name the patch"),
        (base_profile(env={"QWEN36_SDPA_STREAMING": "1"}), "flags-come-from-enable", "list the patch under 'enable'"),
        (base_profile(launcher={"kind": "docker", "image": "x", "sources": "none"}), "enabled-patches-need-sources",
         "unpatched install"),
        (base_profile(vllm={"enable_prefix_caching": True}), "prefix-caching-needs-sync-scheduling",
         "--no-async-scheduling"),
        (base_profile(enable=["QWEN36_DEVICE_RESIDENT"]), "device-resident-needs-device-argmax",
         "tt.device_argmax=True"),
        (base_profile(vllm={"mamba_block_size": 64}), "mamba-block-size-needs-prefix-caching",
         "--enable-prefix-caching"),
        (base_profile(vllm={"enable_prefix_caching": True, "async_scheduling": False, "block_size": 2048,
                            "mamba_block_size": 16384}), "hybrid-block-sizes", "GDN block 16384 against attention block 2048"),
        (base_profile(vllm={"enable_prefix_caching": True, "async_scheduling": False, "block_size": None}),
         "hybrid-block-sizes", "explicit vllm.block_size"),
        (base_profile(vllm={"tool_call_parser": "hermes"}), "tool-call-parser-matches-model",
         "parses hermes_json but model Qwen/Qwen3.8-27B-FP8 emits qwen3_xml"),
        (base_profile(vllm={"tool_call_parser": None}), "tool-call-parser-matches-model", "no tool_call_parser"),
        (base_profile(vllm={"tool_call_parser": "qwen4_magic"}), "tool-call-parser-registered", "not registered"),
        (base_profile(gates=[{"name": "models"}]), "tool-call-gates-required", "tool_call_stream"),
        (base_profile(devices=["/dev/tenstorrent/0"]), "devices-by-stable-id", "not a stable path"),
        # issue 14.2: extra_args / docker_args cannot re-set what the plan renders from checked fields.
        (base_profile(vllm={"extra_args": ["--tool-call-parser", "hermes"]}), "extra-args-not-managed",
         "sets --tool-call-parser"),
        (base_profile(vllm={"extra_args": ["--enable-prefix-caching"]}), "extra-args-not-managed",
         "sets --enable-prefix-caching"),
        (base_profile(vllm={"extra_args": ["--tool_call_parser=hermes"]}), "extra-args-not-managed",
         "sets --tool-call-parser"),
        (base_profile(vllm={"extra_args": ["--tool-call-pars", "hermes"]}), "extra-args-not-managed",
         "sets --tool-call-parser"),
        (base_profile(vllm={"extra_args": ["--no-async-scheduling"]}), "extra-args-not-managed",
         "sets --async-scheduling"),
        (base_profile(vllm={"extra_args": ["--config", "more.yaml"]}), "extra-args-not-managed", "sets --config"),
        (base_profile(launcher={"kind": "docker", "image": "x", "docker_args": ["-e", "QWEN36_DEVICE_RESIDENT=1"]}),
         "docker-args-not-managed", "docker's --env"),
        (base_profile(launcher={"kind": "docker", "image": "x", "docker_args": ["-v/tmp/x.py:/opt/x.py"]}),
         "docker-args-not-managed", "docker's --volume"),
    ],
)
def test_each_rule_rejects(write_profile, series, data, rule, text):
    found = violations(write_profile, series, data)
    assert rule in rules(found), [str(v) for v in found]
    message = next(str(v) for v in found if v.rule == rule)
    assert text in message
    assert "profile 'p' breaks rule " + rule in message
    assert "p.yaml:" in message


def test_prefix_arm_that_follows_the_rules_passes(write_profile, series):
    data = base_profile(
        enable=["0001-sdpa-streaming", "QWEN36_PREFIX_PREFILL_TRACE", "QWEN36_DEVICE_RESIDENT"],
        vllm={"enable_prefix_caching": True, "async_scheduling": False, "block_size": 2048},
        tt={"device_argmax": True},
    )
    assert violations(write_profile, series, data) == []


def test_violation_points_at_the_offending_line(write_profile, series):
    found = violations(write_profile, series, base_profile(vllm={"tool_call_parser": "hermes"}))
    path = write_profile("p", base_profile(vllm={"tool_call_parser": "hermes"}))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "tool_call_parser" in text)
    assert found[0].where == f"{path}:{line}"


def test_parser_registry_is_read_from_the_tree(series_root, write_profile, series):
    tree = DirTree(series_root / "upstream/plugin", "plugin")
    registry, source = parser_registry(tree)
    assert registry == {"hermes": "Hermes2ProToolParser", "qwen3_xml": "Qwen3EngineToolParser"}
    assert source.endswith("vllm/tool_parsers/__init__.py")
    # qwen3_coder is in the built-in table but not in this tree's registry: the tree wins.
    found = violations(write_profile, series, base_profile(vllm={"tool_call_parser": "qwen3_coder"}), tree)
    assert rules(found) == ["tool-call-parser-registered"]


def test_extra_args_that_the_plan_does_not_manage_are_allowed(write_profile, series):
    data = base_profile(vllm={"extra_args": ["--seed", "0", "--max-num-batched-tokens=8192"]},
                        launcher={"kind": "docker", "image": "x", "docker_args": ["--network", "host", "--ipc=host"]})
    assert violations(write_profile, series, data) == []


@pytest.mark.parametrize(
    ("extra", "hit"),
    [
        (["-tp", "8"], "--tensor-parallel-size"),
        (["-tp8"], "--tensor-parallel-size"),
        (["--disable-prefix-caching"], "--enable-prefix-caching"),
        (["--no-disable-prefix-caching"], "--enable-prefix-caching"),
        # vLLM turns --x.key v into --x '{"key": v}' appended last
        (["--override-tt-config.trace_mode", "none"], "--override-tt-config"),
        (["--tool_call_parser.x=1"], "--tool-call-parser"),
    ],
)
def test_managed_options_reached_through_aliases_are_refused_without_the_source(write_profile, series, extra, hit):
    found = violations(write_profile, series, base_profile(vllm={"extra_args": extra}))
    assert rules(found) == ["extra-args-not-managed"], [str(v) for v in found]
    assert f"sets {hit}" in str(found[0])


def docker(*args):
    return base_profile(launcher={"kind": "docker", "image": "x", "docker_args": list(args)})


@pytest.mark.parametrize(
    ("data", "rule", "text"),
    [
        # shorthand bundling: -ie is -i plus -e with the next word as its value
        (docker("-ie", "QWEN36_DEVICE_RESIDENT=1"), "docker-args-not-managed", "'-ie' is docker's --env"),
        (docker("-tv", "/tmp/evil:/opt/vllm:ro"), "docker-args-not-managed", "'-tv' is docker's --volume"),
        (docker("-itv/tmp/evil:/opt/vllm"), "docker-args-not-managed", "is docker's --volume"),
        (docker("-e=QWEN36_DEVICE_RESIDENT=1"), "docker-args-not-managed", "docker's --env"),
        (docker("--env=QWEN36_DEVICE_RESIDENT=1"), "docker-args-not-managed", "docker's --env"),
        (docker("--tmpfs", "/opt/vllm/vllm"), "docker-args-not-managed", "docker's --tmpfs"),
        (docker("-w", "/src"), "docker-args-not-managed", "docker's --workdir"),
        # a bare word ends docker run's options: it would be the image, and the plan's image a command
        (docker("--network", "host", "docker.io/x/stock:latest"), "docker-args-parsed",
         "'docker.io/x/stock:latest' is not an option"),
        (docker("--bogus", "1"), "docker-args-parsed", "--bogus is not a docker run option"),
        (docker("-Z"), "docker-args-parsed", "-Z is not a docker run option"),
        (docker("-iZ"), "docker-args-parsed", "-Z is not a docker run option"),
        (docker("--shm-size"), "docker-args-parsed", "would take the image as its value"),
        (docker("--init=false"), "docker-args-not-managed", "docker's --init"),
        (docker("--", "x"), "docker-args-parsed", "'--'"),
        (base_profile(launcher={"kind": "docker", "image": "--privileged"}), "docker-args-parsed",
         "is not an image reference"),
    ],
)
def test_docker_args_are_parsed_with_docker_runs_grammar(write_profile, series, data, rule, text):
    found = violations(write_profile, series, data)
    assert rule in rules(found), [str(v) for v in found]
    message = next(str(v) for v in found if v.rule == rule)
    assert text in message, message
    assert "p.yaml:" in message


def test_docker_args_that_parse_to_unmanaged_options_pass(write_profile, series):
    data = docker("--network", "host", "--ipc=host", "-it", "--shm-size", "32g", "--ulimit", "memlock=-1",
                  "--cap-add=SYS_PTRACE", "-u", "1000:1000", "--read-only=false", "-p8000:8000")
    assert violations(write_profile, series, data) == []


def test_sources_none_is_refused_while_the_series_changes_served_files(write_profile, series):
    """Without sources the always-on patches never reach the server, yet the plan would carry the
    materialization id: a run record would name code that did not run."""
    data = base_profile(enable=[], launcher={"kind": "docker", "image": "x", "sources": "none"})
    found = violations(write_profile, series, data)
    assert rules(found) == ["patches-need-sources"], [str(v) for v in found]
    message = str(found[0])
    for name in ("0001-sdpa-streaming", "0002-prefix-prefill-trace", "0003-chunk-plan", "0001-device-resident"):
        assert name in message
    assert "p.yaml:" in message and "sources: none" in message


@pytest.mark.parametrize(
    "name",
    ["PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH",
     "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE", "PYTHONPYCACHEPREFIX", "PYTHONWARNINGS", "PYTHONBREAKPOINT",
     "PYTHONOPTIMIZE", "VIRTUAL_ENV", "PATH", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"],
)
def test_env_that_selects_the_code_the_interpreter_runs_is_refused(write_profile, series, name):
    """The patches reach the server as files over the install path (or PYTHONPATH set by the plan); a
    variable that changes which code is imported or preloaded would run around them, unchecked."""
    found = violations(write_profile, series, base_profile(env={"TT_METAL_CACHE": "/c", name: "/opt/unpatched"}))
    assert rules(found) == ["env-does-not-select-code"], [str(v) for v in found]
    assert f"{name} " in str(found[0]) and "p.yaml:" in str(found[0])


def test_every_profile_runs_the_models_gate(write_profile, series, tmp_path):
    """A model that emits no tool calls needs no tool-call gates, but with no gate at all `serve up` and
    the unit's boot check passed on readiness alone: a server that lists another model (or answers 200
    with anything) was recorded as good. The `models` gate (the served model listed, in a well-formed
    answer) is required of every profile."""
    model = tmp_path / "plain-model"
    model.mkdir()
    (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    plain = {"path": str(model), "served_name": "plain", "hybrid": False, "tool_call_format": "none"}
    data = base_profile(model=plain, vllm={"tool_call_parser": None}, gates=[])
    found = violations(write_profile, series, data)
    assert rules(found) == ["models-gate-required"], [str(v) for v in found]
    assert violations(write_profile, series, base_profile(model=plain, vllm={"tool_call_parser": None},
                                                          gates=[{"name": "models"}])) == []
