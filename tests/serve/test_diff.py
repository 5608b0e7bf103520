"""``serve diff``: what differs between two plans, by env, option, mount and banner."""

from __future__ import annotations

from materialize.serve.diff import argv_options, diff_plans


def plan(**kw):
    base = {
        "profile": "prod", "launcher": "docker", "materialization_id": "abc",
        "server_argv": ["python3", "-m", "x", "--port", "8000", "--async-scheduling", "--tool-call-parser", "qwen3_xml"],
        "argv": ["docker", "run"],
        "env": {"PYTHONDONTWRITEBYTECODE": "1", "QWEN36_SDPA_STREAMING": "1"},
        "mounts": [{"source": "/o/a.py", "target": "/i/a.py", "read_only": True}],
        "banners": [{"patch": "0001", "flag": "QWEN36_SDPA_STREAMING", "banner": "engaged"}],
        "gates": [{"name": "tool_call_stream", "requests": 8, "timeout_s": 300.0}],
    }
    base.update(kw)
    return base


def test_identical_plans_have_no_diff():
    assert diff_plans(plan(), plan()) == []


def test_diff_names_env_options_mounts_banners_and_fields():
    b = plan(
        profile="prefix",
        server_argv=["python3", "-m", "x", "--port", "8000", "--no-async-scheduling", "--enable-prefix-caching",
                     "--tool-call-parser", "qwen3_xml"],
        env={"PYTHONDONTWRITEBYTECODE": "1", "QWEN36_SDPA_STREAMING": "1", "QWEN36_PREFIX_PREFILL_TRACE": "1"},
        mounts=[{"source": "/o2/a.py", "target": "/i/a.py", "read_only": True}],
        banners=[{"patch": "0001", "flag": "QWEN36_SDPA_STREAMING", "banner": "engaged"},
                 {"patch": "0002", "flag": "QWEN36_PREFIX_PREFILL_TRACE", "banner": "trace"}],
        gates=[{"name": "tool_call_stream", "requests": 256, "timeout_s": 300.0}],
    )
    lines = diff_plans(plan(), b)
    assert "~ profile: prod -> prefix" in lines
    assert "+ env QWEN36_PREFIX_PREFILL_TRACE=1" in lines
    assert "- option --async-scheduling=" in lines
    assert "+ option --no-async-scheduling=" in lines
    assert "+ option --enable-prefix-caching=" in lines
    assert "~ mount /i/a.py: /o/a.py -> /o2/a.py" in lines
    assert "+ banner QWEN36_PREFIX_PREFILL_TRACE=trace" in lines
    assert "~ gate tool_call_stream: requests=8 timeout_s=300.0 -> requests=256 timeout_s=300.0" in lines
    assert not any("QWEN36_SDPA_STREAMING" in line for line in lines)


def test_argv_options_pairs():
    assert argv_options(["vllm", "--a", "1", "--b", "--c=3"]) == {"argv[0]": "vllm", "--a": "1", "--b": "", "--c": "3"}


def test_docker_args_change_is_shown_next_to_other_changes():
    a = plan(docker_args=["--network", "host", "--shm-size", "32g"])
    b = plan(profile="prefix", docker_args=["--network", "host", "--shm-size", "64g"])
    lines = diff_plans(a, b)
    assert "~ profile: prod -> prefix" in lines
    assert any(line.startswith("~ docker_args:") and "64g" in line for line in lines), lines
