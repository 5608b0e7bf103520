"""The launcher command and the environment reach the server as they are: both must be something whose
meaning the rules know. Red-team findings D1-D3 (rt-failopen/FINDINGS.md, repro 11): a command that
wraps the server in ``env`` / ``sh -c`` re-set the environment and the argv the rules checked, and
``env: TT_METAL_HOME`` moved the root tt-metal compiles device kernels from."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from materialize.series import load_series
from materialize.serve.constraints import check_profile
from materialize.serve.profile import load_profile

from .conftest import base_profile

REPO = Path(__file__).resolve().parents[2]
SERVER = ["python3", "-m", "vllm.entrypoints.openai.api_server"]


@pytest.fixture
def series(series_root):
    return load_series(series_root / "series/default.yaml")


def violations(write_profile, series, data):
    return check_profile(load_profile(write_profile("p", data)), series)


def docker(command, **launcher):
    return base_profile(launcher={"kind": "docker", "image": "ghcr.io/example/vllm-tt:0.33.0", "command": command,
                                  **launcher})


def process(command):
    return base_profile(launcher={"kind": "process", "command": command, "sources": "pythonpath"}, devices=[])


def only(found, rule):
    assert {v.rule for v in found} == {rule}, [str(v) for v in found]
    return "\n".join(str(v) for v in found)


@pytest.fixture
def shipped(invoke, tmp_path, monkeypatch):
    """The shipped series and prod.yaml copied to a tmp dir; ``check(change)`` runs ``serve check
    --no-materialize`` on prod with ``change`` applied (as the red team's rt_* profiles are made)."""
    shutil.copytree(REPO / "series", tmp_path / "series")
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    (tmp_path / "serve/profiles").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)

    def check(change):
        data = yaml.safe_load((REPO / "serve/profiles/prod.yaml").read_text())
        change(data)
        (tmp_path / "serve/profiles/prod.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        return invoke("serve", "check", "--no-materialize")

    return check


# -- D1 / D2: the launcher command -------------------------------------------------------------------

@pytest.mark.parametrize(
    ("command", "word"),
    [
        # D1: PYTHONPATH (refused in env) set through the command, and the enabled flag unset.
        (["env", "PYTHONPATH=/opt/vllm-unpatched", "-u", "QWEN36_HERMES_AS_QWEN3_XML", *SERVER], "env"),
        # D2: every option the plan renders becomes a positional parameter of sh, dropped.
        (["sh", "-c", "exec python3 -m vllm.entrypoints.openai.api_server --tool-call-parser hermes"], "sh"),
    ],
)
def test_red_team_commands_are_refused_on_the_shipped_prod(shipped, command, word):
    def change(data):
        data["launcher"]["command"] = command

    result = shipped(change)
    assert result.return_value == 1, result.output
    assert "launcher-command-known" in result.output
    assert "prod.yaml:" in result.output and "launcher.command" in result.output and repr(word) in result.output


@pytest.mark.parametrize(
    ("command", "word"),
    [
        (["env", "PYTHONPATH=/x", *SERVER], "env"),
        (["/usr/bin/env", *SERVER], "/usr/bin/env"),
        (["sh", "-c", "python3 -m vllm.entrypoints.openai.api_server"], "sh"),
        (["bash", "-c", "exec python3 -m vllm.entrypoints.openai.api_server"], "bash"),
        (["/bin/bash", "-lc", "vllm serve"], "/bin/bash"),
        (["exec", *SERVER], "exec"),
        (["nice", "-n", "5", *SERVER], "nice"),
        (["numactl", "--cpunodebind=0", *SERVER], "numactl"),
        (["taskset", "-c", "0-7", *SERVER], "taskset"),
        (["sudo", "-E", *SERVER], "sudo"),
        (["PYTHONPATH=/x", *SERVER], "PYTHONPATH=/x"),
        # the interpreter's own options re-interpret what runs, or skip the environment the plan sets
        (["python3", "-c", "import runpy; runpy.run_module('vllm.entrypoints.openai.api_server')"], "-c"),
        (["python3", "-I", "-m", "vllm.entrypoints.openai.api_server"], "-I"),
        (["python3", "-E", "-m", "vllm.entrypoints.openai.api_server"], "-E"),
        (["python3", "-S", "-m", "vllm.entrypoints.openai.api_server"], "-S"),
        (["python3", "-X", "importtime", "-m", "vllm.entrypoints.openai.api_server"], "-X"),
        (["python3", "/opt/other_server.py"], "/opt/other_server.py"),
        (["python3", "-m", "other.server"], "other.server"),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--tool-call-parser", "hermes"], "--tool-call-parser"),
        (["python3", "-mvllm.entrypoints.openai.api_server"], "-mvllm.entrypoints.openai.api_server"),
        (["vllm", "serve", "--tool-call-parser", "hermes"], "--tool-call-parser"),
        (["vllm", "bench"], "bench"),
        (["./python3", "-m", "vllm.entrypoints.openai.api_server"], "./python3"),
        (["python3;", "-m", "vllm.entrypoints.openai.api_server"], "python3;"),
        (["/opt/venv/bin/python3-wrapper", "-m", "vllm.entrypoints.openai.api_server"], "/opt/venv/bin/python3-wrapper"),
    ],
)
def test_a_command_whose_meaning_the_rules_do_not_know_is_refused(write_profile, series, command, word):
    message = only(violations(write_profile, series, docker(command)), "launcher-command-known")
    assert "launcher.command[" in message and repr(word) in message and "p.yaml:" in message


@pytest.mark.parametrize(
    "command",
    [
        SERVER,
        ["python3.12", "-m", "vllm.entrypoints.openai.api_server"],
        ["python", "-m", "vllm.entrypoints.openai.api_server"],
        ["/usr/local/bin/python3", "-m", "vllm.entrypoints.openai.api_server"],
        ["vllm", "serve"],
        ["/usr/local/bin/vllm", "serve"],
    ],
)
def test_the_known_server_commands_pass_in_an_image(write_profile, series, command):
    assert violations(write_profile, series, docker(command)) == []


def test_a_process_runs_an_absolute_interpreter_not_whatever_the_hosts_path_finds(write_profile, series):
    """The process launcher keeps the host's PATH (launch.HOST_ENV_KEEP), which `env` may not set:
    a bare ``python3`` would be whichever one the caller's PATH finds first."""
    message = only(violations(write_profile, series, process(SERVER)), "launcher-command-known")
    assert "'python3'" in message and "absolute" in message
    assert violations(write_profile, series, process([sys.executable, "-m", "vllm.entrypoints.openai.api_server"])) == []


# -- D3: environment that selects which code or device kernels run -------------------------------------

@pytest.mark.parametrize("name", ["TT_METAL_HOME", "VLLM_PLUGINS"])
def test_red_team_env_is_refused_on_the_shipped_prod(shipped, name):
    def change(data):
        data["env"][name] = "/opt/tt-metal" if name == "TT_METAL_HOME" else "my_override_plugin"

    result = shipped(change)
    assert result.return_value == 1, result.output
    assert "env-does-not-select-code" in result.output and name in result.output and "prod.yaml:" in result.output


@pytest.mark.parametrize(
    "name",
    ["TT_METAL_HOME", "TT_METAL_RUNTIME_ROOT", "TT_METAL_KERNEL_PATH", "TT_METAL_SIMULATOR", "TT_UMD_SIMULATOR_PATH",
     "TT_METAL_JIT_SERVER_ENABLE", "TT_METAL_JIT_SERVER_ENDPOINT", "TT_METAL_JIT_SERVER_ENDPOINTS",
     "TT_METAL_NULL_KERNELS", "TT_METAL_KERNELS_EARLY_RETURN", "TT_METAL_FW_SRC_BRISC", "TT_METAL_FW_HEADER_BRISC",
     "TT_METAL_DISABLE_PRECOMPILED_FW", "TT_METAL_SKIP_LOADING_FW", "TT_METAL_MOCK_CLUSTER_DESC_PATH",
     "VLLM_PLUGINS", "VLLM_USE_RUST_FRONTEND", "VLLM_RUST_FRONTEND_PATH", "VLLM_LOGGING_CONFIG_PATH",
     "VLLM_NCCL_SO_PATH", "VLLM_CUDART_SO_PATH", "VLLM_MODEL_REDIRECT_PATH", "GCONV_PATH",
     # OpenSSL loads its config when Python's ssl module initializes it (every vLLM server imports ssl):
     # an engine or provider section there loads a shared object, as LD_PRELOAD would
     "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
     # another hub serves the repo name (its chat template), as VLLM_MODEL_REDIRECT_PATH would
     "VLLM_USE_MODELSCOPE", "HF_ENDPOINT"],
)
def test_env_that_selects_which_code_or_kernels_run_is_refused(write_profile, series, name):
    message = only(violations(write_profile, series, base_profile(env={"TT_METAL_CACHE": "/c", name: "/x"})),
                   "env-does-not-select-code")
    assert f"{name} " in message and "p.yaml:" in message


def test_the_shipped_env_still_passes(write_profile, series):
    """TT_METAL_CACHE holds compiled kernels keyed by a hash of their sources and dependencies
    (libtt_metal: write_dependency_hashes / .dephash), so a mounted kernel is recompiled, not served stale."""
    data = base_profile(env={"TT_METAL_CACHE": "/var/cache/tt-metal", "HF_HOME": "/var/cache/huggingface"})
    assert violations(write_profile, series, data) == []


# -- siblings: other profile fields that reach the server's argv or environment ------------------------

@pytest.mark.parametrize(
    ("env", "text"),
    [
        # docker -e K=V splits at the first '=': this key sets PYTHONPATH=/opt/vllm-unpatched:=x
        ({"PYTHONPATH=/opt/vllm-unpatched:": "x"}, "'PYTHONPATH=/opt/vllm-unpatched:'"),
        # the installed unit's EnvironmentFile is one KEY="value" per line: a newline starts another line
        ({'HF_HOME="/x"\nPYTHONPATH': "/opt/vllm-unpatched"}, "not an environment variable name"),
        ({"HF_HOME": "/x\nPYTHONPATH=/opt/vllm-unpatched"}, "newline"),
        ({"HF_HOME": "/x\0"}, "NUL"),
    ],
)
def test_env_names_and_values_cannot_smuggle_another_variable(write_profile, series, env, text):
    message = only(violations(write_profile, series, base_profile(env={"TT_METAL_CACHE": "/c", **env})),
                   "env-is-name-and-value")
    assert text in message and "p.yaml:" in message


@pytest.mark.parametrize(
    "device",
    ["/dev/tenstorrent/0:/dev/tenstorrent/by-id/p150a-0",  # a numeric node mapped under a stable-looking name
     "/dev/mem:/dev/tenstorrent/by-id/p150a-0:rwm",
     "/dev/tenstorrent/by-id/../0",
     "relative/by-id/p150a-0"],
)
def test_a_device_is_one_stable_path_not_a_mapping(write_profile, series, device):
    message = only(violations(write_profile, series, base_profile(devices=[device])), "devices-by-stable-id")
    assert repr(device) in message or device in message


@pytest.mark.parametrize("name", ["--privileged", "-t", "a b", "x/y", "_x"])
def test_container_name_is_a_docker_name(write_profile, series, name):
    """The name is a word of `docker run --name` and of ExecStop's `docker stop -t N NAME`, where
    `--help` or `-t` would be an option (the server never stopped)."""
    found = violations(write_profile, series, docker(SERVER, container_name=name))
    message = only(found, "container-name-is-a-name")
    assert repr(name) in message and "launcher.container_name" in message and "p.yaml:" in message


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--worker-cls", "mypkg.Worker"], "--worker-cls"),
        (["--worker_extension_cls=mypkg.Ext"], "--worker-extension-cls"),
        (["--logits-processors", "mypkg.LP"], "--logits-processors"),
        (["--middleware", "mypkg.mw"], "--middleware"),
        (["--reasoning-parser-plugin", "/tmp/p.py"], "--reasoning-parser-plugin"),
        (["--trust-remote-code"], "--trust-remote-code"),
        (["--kv-transfer-config", '{"kv_connector_module_path": "mypkg"}'], "--kv-transfer-config"),
        (["--chat-template", "/tmp/hermes.jinja"], "--chat-template"),
        (["--tokenizer=other/model"], "--tokenizer"),
        # another revision of the model repository: its chat template (and, with remote code, its code)
        # is not the one the tool-call format was derived from
        (["--revision", "refs/pr/7"], "--revision"),
        (["--tokenizer-revision=hermes-template"], "--tokenizer-revision"),
        (["--tokenizer_revision", "hermes-template"], "--tokenizer-revision"),
        (["--code-revision", "abc123"], "--code-revision"),
        (["--distributed-executor-backend", "mypkg.Executor"], "--distributed-executor-backend"),
        # fail-open red team 17: the model's code and tokenizer chosen by an option nobody checked
        (["--model-impl", "transformers"], "--model-impl"),  # Transformers' modeling code, not vLLM's
        (["--hf-overrides", '{"architectures": ["LlamaForCausalLM"]}'], "--hf-overrides"),  # another model class
        (["--tokenizer-mode", "mistral"], "--tokenizer-mode"),  # mistral_common's chat handling
        (["--speculative-config", '{"model": "other/draft", "num_speculative_tokens": 3}'], "--speculative-config"),
        (["--load-format", "dummy"], "--load-format"),  # random weights
        (["--load-format=dummy"], "--load-format"),
    ],
)
def test_extra_args_that_select_code_are_refused(write_profile, series, extra, option):
    message = only(violations(write_profile, series, base_profile(vllm={"extra_args": extra})),
                   "extra-args-do-not-select-code")
    assert f"sets {option}" in message and "p.yaml:" in message


def test_extra_args_that_pick_a_built_in_executor_pass(write_profile, series):
    data = base_profile(vllm={"extra_args": ["--distributed-executor-backend", "mp", "--chat-template-content-format",
                                             "string", "--load-format", "safetensors"]})
    assert violations(write_profile, series, data) == []
