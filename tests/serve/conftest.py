"""A small but real series (two targets, flag-gated patches with banners) and profiles around it.

The trees are directories pinned with ``kind: path``; the patches are real unified diffs applied by
the real engine into a store in a tmp cache. Profiles are written per test so each can break one rule.
"""

from __future__ import annotations

import difflib
import socket
import sys
import textwrap
from pathlib import Path

import git
import pytest
import yaml

HERE = Path(__file__).resolve().parent
FAKE_VLLM = HERE / "fake_vllm.py"
SERVED = "qwen3.8-27b-tt"

ATTENTION = textwrap.dedent('''\
    import os


    def sdpa_program(chunk):
        """Pick the SDPA compute kernel for a prefill chunk."""
        return "legacy"


    def prefill(start, end):
        return [(start, end)]
''')
ATTENTION_STREAMING = ATTENTION.replace(
    '    return "legacy"\n',
    '    if os.environ.get("QWEN36_SDPA_STREAMING") == "1":\n'
    '        print("QWEN36_SDPA_STREAMING engaged", flush=True)\n'
    '        return "streaming"\n'
    '    return "legacy"\n',
)
ATTENTION_BOTH = ATTENTION_STREAMING.replace(
    "    return [(start, end)]\n",
    '    if os.environ.get("QWEN36_PREFIX_PREFILL_TRACE") == "1":\n'
    '        print("QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured", flush=True)\n'
    "    return [(start, end)]\n",
)
CHUNK_PLAN = "def prefill_chunk_plan(start, end, chunk=2048):\n    return {'lead': 0, 'replays': (end - start) // chunk}\n"
REGISTRY = textwrap.dedent('''\
    _TOOL_PARSERS_TO_REGISTER = {
        "hermes": (
            "hermes_tool_parser",
            "Hermes2ProToolParser",
        ),
        "qwen3_xml": (
            "qwen3_engine_tool_parser",
            "Qwen3EngineToolParser",
        ),
    }
''')
# The argparse definitions the pinned vLLM has, in its styles: add_argument literals (with a short
# alias, as vLLM's -tp), explicit actions, ``**kwargs`` derived by ``get_kwargs`` from a config dataclass
# (a bool field becomes a BooleanOptionalAction, so --no-x exists only for it) and the fields of a
# *FrontendArgs class (registered as --field-name). serve resolves plan options through these.
CLI_ARGS = textwrap.dedent('''\
    import argparse

    from vllm.config import ModelConfig, SchedulerConfig


    class FrontendArgs:
        host: str | None = None
        port: int = 8000
        tool_call_parser: str | None = None
        enable_auto_tool_choice: bool = False


    def add_cli_args(parser):
        model_kwargs = get_kwargs(ModelConfig)
        scheduler_kwargs = get_kwargs(SchedulerConfig)
        parser.add_argument("--model", type=str)
        parser.add_argument("--served-model-name", nargs="+")
        parser.add_argument("--max-model-len", type=int)
        parser.add_argument("--tensor-parallel-size", "-tp", type=int)
        parser.add_argument("--block-size", type=int)
        parser.add_argument("--max-num-seqs", "-mns", type=int)  # an alias no built-in table knows
        parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
        parser.add_argument("--mamba-cache-mode", type=str)
        parser.add_argument("--mamba-block-size", type=int)
        parser.add_argument("--async-scheduling", **scheduler_kwargs["async_scheduling"])
        parser.add_argument("--seed", **model_kwargs["seed"])
        parser.add_argument("--enforce-eager", **{**model_kwargs["enforce_eager"], "default": None})
        parser.add_argument("--max-num-batched-tokens", type=int)
''')
CONFIG = textwrap.dedent('''\
    class ModelConfig:
        seed: int | None = None
        enforce_eager: bool = False


    class SchedulerConfig:
        async_scheduling: bool | None = None
''')
API_SERVER = (
    '"""Test stand-in for vLLM\'s OpenAI server module: runs tests/serve/fake_vllm.py."""\n'
    "import runpy\n\n"
    f"runpy.run_path({str(FAKE_VLLM)!r}, run_name='__main__')\n"
)
SCHEDULER = "def allow_async(prefix_caching):\n    return not prefix_caching\n"
SCHEDULER_PATCHED = SCHEDULER.replace(
    "    return not prefix_caching\n",
    "    import os\n"
    '    if os.environ.get("QWEN36_DEVICE_RESIDENT") == "1":\n'
    '        print("QWEN36_DEVICE_RESIDENT engaged", flush=True)\n'
    "    return not prefix_caching\n",
)


def udiff(path: str, old: str | None, new: str) -> str:
    """A -p1 unified diff (``a/`` and ``b/`` prefixes, /dev/null for a new file)."""
    a = difflib.unified_diff(
        [] if old is None else old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        "/dev/null" if old is None else f"a/{path}",
        f"b/{path}",
    )
    return "".join(a)


def write_series(root: Path, targets: tuple[str, str] = ("tt-metal", "plugin")) -> Path:
    """The fixture series; ``targets`` names its two targets (the code may assume no names)."""
    kernels, vllm = targets
    (root / "upstream/tt-metal/models/qwen").mkdir(parents=True)
    (root / "upstream/tt-metal/models/qwen/attention.py").write_text(ATTENTION)
    (root / "upstream/plugin/vllm/tool_parsers").mkdir(parents=True)
    (root / "upstream/plugin/vllm/tool_parsers/__init__.py").write_text(REGISTRY)
    (root / "upstream/plugin/vllm/scheduler.py").write_text(SCHEDULER)
    (root / "upstream/plugin/vllm/entrypoints").mkdir()
    (root / "upstream/plugin/vllm/entrypoints/cli_args.py").write_text(CLI_ARGS)
    (root / "upstream/plugin/vllm/config.py").write_text(CONFIG)
    # vLLM's OpenAI server module, the entry point a profile's command must name: here it runs the stand-in
    # server, so the process launcher runs `python -m vllm.entrypoints.openai.api_server` from the
    # materialized tree on PYTHONPATH, as it would in production.
    (root / "upstream/plugin/vllm/__init__.py").write_text("")
    (root / "upstream/plugin/vllm/entrypoints/openai").mkdir()
    (root / "upstream/plugin/vllm/entrypoints/openai/api_server.py").write_text(API_SERVER)
    # The plugin upstream is a git repository (made with gitpython) pinned at a commit, as a real
    # plugin checkout would be; tt-metal stays a plain directory pin.
    repo = git.Repo.init(root / "upstream/plugin")
    with repo.config_writer() as config:
        config.set_value("user", "name", "fixture")
        config.set_value("user", "email", "fixture@localhost")
    repo.index.add(["vllm/tool_parsers/__init__.py", "vllm/scheduler.py", "vllm/entrypoints/cli_args.py",
                    "vllm/config.py", "vllm/__init__.py", "vllm/entrypoints/openai/api_server.py"])
    plugin_sha = repo.index.commit("vllm plugin fixture").hexsha
    patches = root / "patches"
    (patches / "tt-metal").mkdir(parents=True)
    (patches / "plugin").mkdir(parents=True)
    att = "models/qwen/attention.py"
    (patches / "tt-metal/0001-sdpa-streaming.patch").write_text(
        "SDPA streaming kernel for chunked prefill, behind QWEN36_SDPA_STREAMING.\n\n"
        + udiff(att, ATTENTION, ATTENTION_STREAMING))
    (patches / "tt-metal/0002-prefix-prefill-trace.patch").write_text(udiff(att, ATTENTION_STREAMING, ATTENTION_BOTH))
    (patches / "tt-metal/0003-chunk-plan.patch").write_text(udiff("models/qwen/chunk_plan.py", None, CHUNK_PLAN))
    (patches / "plugin/0001-device-resident.patch").write_text(udiff("vllm/scheduler.py", SCHEDULER, SCHEDULER_PATCHED))
    series = {
        "version": 1,
        "patches_dir": "../patches",
        "targets": {
            kernels: {"pin": {"kind": "path", "path": "../upstream/tt-metal"}, "install_path": "/opt/venv/site-packages"},
            vllm: {"pin": {"kind": "git", "url": "../upstream/plugin", "rev": plugin_sha, "sha": plugin_sha},
                       "install_path": "/opt/vllm"},
        },
        "patches": [
            {"patch": "tt-metal/0001-sdpa-streaming.patch", "target": kernels, "flag": "QWEN36_SDPA_STREAMING",
             "banner": "QWEN36_SDPA_STREAMING engaged"},
            {"patch": "tt-metal/0002-prefix-prefill-trace.patch", "target": kernels,
             "flag": "QWEN36_PREFIX_PREFILL_TRACE", "banner": "QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured"},
            {"patch": "tt-metal/0003-chunk-plan.patch", "target": kernels},
            {"patch": "plugin/0001-device-resident.patch", "target": vllm, "flag": "QWEN36_DEVICE_RESIDENT",
             "banner": "QWEN36_DEVICE_RESIDENT engaged"},
        ],
    }
    (root / "series").mkdir()
    path = root / "series/default.yaml"
    path.write_text(yaml.safe_dump(series, sort_keys=False))
    return path


# Names the fixture's plans use that no pinned tree defines, and where they really come from.
UNPINNED = {
    "TT_METAL_CACHE": "tt-metal's C++ runtime (compiled; not in the pinned Python sources)",
    "--override-tt-config": "the TT build of vLLM (vllm-tt image), not the pinned vllm sdist",
    "trace_mode": "--override-tt-config key of the TT build of vLLM",
    "sample_on_device_mode": "--override-tt-config key of the TT build of vLLM",
    **{f"FAKE_VLLM_{k}": "tests/serve/fake_vllm.py, the stand-in server"
       for k in ("BANNERS", "NEVER_READY", "EXIT", "STALE_EVERY", "LATENCY_S")},
}


def base_profile(**overrides) -> dict:
    """A profile that passes every rule; tests override one thing to break one rule."""
    profile = {
        "version": 1,
        "series": "../../series/default.yaml",
        "launcher": {"kind": "docker", "image": "ghcr.io/example/vllm-tt:0.33.0"},
        "model": {"path": "Qwen/Qwen3.8-27B-FP8", "served_name": SERVED, "tool_call_format": "qwen3_xml",
                  "hybrid": True},
        "vllm": {"tool_call_parser": "qwen3_xml", "max_model_len": 131072, "block_size": 64,
                 "tensor_parallel_size": 2},
        "enable": ["0001-sdpa-streaming"],
        "env": {"TT_METAL_CACHE": "/var/cache/tt-metal"},
        "devices": ["/dev/tenstorrent/by-id/p150a-0", "/dev/tenstorrent/by-id/p150a-1"],
        "server": {"host": "0.0.0.0", "port": 8000},
        # Small on purpose: 0 failures in ceil(3/r) = 6 requests per tool gate keep the tests quick.
        "max_failure_rate": "1/2",
        "unverified": dict(UNPINNED),
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(profile.get(key), dict) and key not in ("launcher", "env"):
            profile[key] = {**profile[key], **value}
        else:
            profile[key] = value
    return profile


@pytest.fixture(scope="session")
def series_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve-series")
    write_series(root)
    (root / "serve/profiles").mkdir(parents=True)
    return root


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory):
    """Keep the engine's store out of the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MATERIALIZE_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture
def write_profile(series_root):
    def write(name: str, data: dict) -> Path:
        path = series_root / "serve/profiles" / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_profile(port: int, **overrides) -> dict:
    """A process-launcher profile whose server is tests/serve/fake_vllm.py on loopback."""
    banners = {"QWEN36_SDPA_STREAMING": "QWEN36_SDPA_STREAMING engaged",
               "QWEN36_PREFIX_PREFILL_TRACE": "QWEN36_PREFIX_PREFILL_TRACE engaged: chunk trace captured",
               "QWEN36_DEVICE_RESIDENT": "QWEN36_DEVICE_RESIDENT engaged"}
    import json

    data = base_profile(
        launcher={"kind": "process", "command": [sys.executable, "-m", "vllm.entrypoints.openai.api_server"], "sources": "pythonpath",
                  "stop_timeout_s": 5},
        devices=[],
        server={"host": "127.0.0.1", "port": port},
        env={"FAKE_VLLM_BANNERS": json.dumps(banners)},
        preflight={"min_mem_available_gb": 0},
        readiness={"timeout_s": 20, "poll_interval_s": 0.1},
        gates=[{"name": "models"}, {"name": "tool_call_stream"}, {"name": "tool_call_nonstream"}],
    )
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "env":
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data
