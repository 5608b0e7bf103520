"""Serving rules, checked before anything starts: "X requires Y", as data, with named violations.

Every rule here is one the seeds paid for on hardware: prefix caching with async scheduling, device-
resident decode without device argmax, a flag-gated patch whose sources never reached the container,
GDN/attention block sizes the hybrid coordinator rejects, a tool-call parser that does not match what
the model emits. A violation names the profile, the rule and the line to edit. Pure: no I/O except
reading the parser registry from a tree the caller hands in.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from materialize.errors import SeriesError
from materialize.series import PatchEntry, Series
from materialize.serve.profile import Profile, ProfileError, parse_rate, rule_of_three
from materialize.tree import Tree, read_text

_FLAG_SHAPE = str.isupper


@dataclass(frozen=True)
class Rule:
    """A declarative rule: when every ``when`` fact holds, every ``require`` fact must hold."""

    id: str
    when: Mapping[str, Any]
    require: Mapping[str, Any]
    why: str


# Facts are dotted paths into the profile's canonical data, plus ``env.NAME`` for the environment the
# server will really get (flags of enabled patches merged with the profile's extra env).
RULES: tuple[Rule, ...] = (
    Rule(
        id="prefix-caching-needs-sync-scheduling",
        when={"vllm.enable_prefix_caching": True},
        require={"vllm.async_scheduling": False},
        why="prefix sidecars require synchronous local execution (qwen36_vllm.py:242); pass --no-async-scheduling",
    ),
    Rule(
        id="device-resident-needs-device-argmax",
        when={"env.QWEN36_DEVICE_RESIDENT": "1"},
        require={"tt.device_argmax": True},
        why="device-resident decode consumes tokens sampled on device (deviceResident -> deviceArgmax)",
    ),
    Rule(
        id="mamba-block-size-needs-prefix-caching",
        when={"vllm.enable_prefix_caching": False},
        require={"vllm.mamba_block_size": None},
        why="vLLM refuses --mamba-block-size without --enable-prefix-caching (vllm/config/vllm.py)",
    ),
)

# What each parser class in vLLM's registry parses. A parser whose class is not listed cannot be
# proven to match the model, and is refused rather than assumed.
PARSER_CLASS_FORMAT: dict[str, str] = {
    "Hermes2ProToolParser": "hermes_json",
    "Qwen3EngineToolParser": "qwen3_xml",
}
# The registry of vllm==0.33.0 (vllm/tool_parsers/__init__.py) for the names Qwen deployments use;
# used only when no plugin tree is given. With a tree, the tree's own registry is read instead.
FALLBACK_REGISTRY: dict[str, str] = {
    "hermes": "Hermes2ProToolParser",
    "qwen3_json": "Hermes2ProToolParser",
    "qwen3_xml": "Qwen3EngineToolParser",
    "qwen3_coder": "Qwen3EngineToolParser",
}
# Patches that re-route a parser name when their flag is on (the reference series' 0006: with
# QWEN36_HERMES_AS_QWEN3_XML=1 the name 'hermes' is served by the qwen3_xml parser class).
PARSER_ROUTES_BY_FLAG: dict[str, dict[str, str]] = {
    "QWEN36_HERMES_AS_QWEN3_XML": {"hermes": "Qwen3EngineToolParser"},
}
REGISTRY_FILE = "vllm/tool_parsers/__init__.py"
BANNER_NONE = "none"
# Every vLLM option the plan renders from the profile's typed fields. ``vllm.extra_args`` may not name
# any of them (argparse lets the last value win, so ``extra_args: [--tool-call-parser, hermes]`` would
# override the value the rules checked), nor ``--config`` (a YAML file of options nobody checks).
MANAGED_VLLM_OPTIONS = frozenset({
    "--model", "--served-model-name", "--host", "--port", "--max-model-len", "--tensor-parallel-size",
    "--block-size", "--max-num-seqs", "--enable-prefix-caching", "--mamba-cache-mode", "--mamba-block-size",
    "--async-scheduling", "--enable-auto-tool-choice", "--tool-call-parser", "--override-tt-config",
    "--config", "--tool-parser-plugin",
})
# vLLM options (pinned vllm/engine/arg_utils.py, entrypoints/common/cli_args.py) that import code by name
# or run code the model repo ships: in extra_args they would run around the patches the plan delivers,
# as PYTHONPATH would (env-does-not-select-code). The chat template and tokenizer decide the tool-call
# format the model emits, which the rules derive from the model (tool-call-format-from-model).
CODE_SELECTING_VLLM_OPTIONS: dict[str, str] = {
    **{o: "imports a class or module by its qualified name" for o in (
        "--worker-cls", "--worker-extension-cls", "--scheduler-cls", "--logits-processors", "--middleware",
        "--io-processor-plugin", "--reasoning-parser-plugin")},
    "--trust-remote-code": "runs the Python code the model repository ships",
    **{o: "names a connector module to import (kv_connector_module_path)" for o in (
        "--kv-transfer-config", "--ec-transfer-config")},
    **{o: "replaces the chat template the tool-call format was derived from" for o in (
        "--chat-template", "--tokenizer", "--hf-config-path")},
    # The model's own code: Transformers' modeling code instead of vLLM's (the patched tree's), or another
    # model class through the config's ``architectures``; the tokenizer's (mistral_common's chat handling).
    "--model-impl": "runs another implementation of the model (e.g. Transformers' modeling code) than vLLM's",
    "--hf-overrides": "overrides the model's config, whose `architectures` picks the model class that runs",
    "--tokenizer-mode": "replaces the tokenizer and chat handling the tool-call format was derived from",
    # A second model (a draft model, or a method's own weights) runs beside the served one (red team 17).
    "--speculative-config": "runs a second (draft) model or method beside the served one: weights and code the "
                            "profile does not name",
    # Another revision of the model repository than the one the format was derived from: its chat template
    # (``--revision`` also the tokenizer's when ``--tokenizer`` is not set; ``--code-revision`` its code).
    **{o: "serves another revision of the model repository, whose chat template the tool-call format was not "
          "derived from" for o in ("--revision", "--tokenizer-revision", "--code-revision")},
}
# --distributed-executor-backend takes one of these, or a class by its qualified name (imported).
EXECUTOR_BACKENDS = frozenset({"mp", "ray", "uni", "external_launcher"})
# Short aliases the pinned vLLM (0.33.0, vllm/engine/arg_utils.py) declares for managed options; used
# only without the source: a plan resolves every extra word through the materialized argparse.
MANAGED_VLLM_ALIASES = {"-tp": "--tensor-parallel-size"}
# ``docker run``'s options (docker CLI 27, ``docker run --help`` plus its hidden aliases): long name ->
# (shorthand, takes a value). docker_args are parsed with this grammar, as docker's pflag does: ``--x=v``,
# ``--x v``, shorthand flags bundled with a value-taking last one (``-ie K=V`` is ``-i -e K=V``, ``-vA:B``
# is ``-v A:B``). An option not in the table, and a bare word (docker would run it as the image), are refused.
DOCKER_RUN_OPTIONS: dict[str, tuple[str | None, bool]] = {
    **{name: (None, False) for name in (
        "init", "privileged", "rm", "read-only", "no-healthcheck", "oom-kill-disable", "sig-proxy",
        "disable-content-trust", "help", "use-api-socket")},
    "detach": ("d", False), "interactive": ("i", False), "tty": ("t", False), "publish-all": ("P", False),
    "quiet": ("q", False),
    **{name: (None, True) for name in (
        "add-host", "annotation", "blkio-weight", "blkio-weight-device", "cap-add", "cap-drop", "cgroup-parent",
        "cgroupns", "cidfile", "cpu-count", "cpu-percent", "cpu-period", "cpu-quota", "cpu-rt-period",
        "cpu-rt-runtime", "cpus", "cpuset-cpus", "cpuset-mems", "detach-keys", "device", "device-cgroup-rule",
        "device-read-bps", "device-read-iops", "device-write-bps", "device-write-iops", "dns", "dns-opt",
        "dns-option", "dns-search", "domainname", "entrypoint", "env-file", "expose", "gpus", "group-add",
        "health-cmd", "health-interval", "health-retries", "health-start-interval", "health-start-period",
        "health-timeout", "io-maxbandwidth", "io-maxiops", "ip", "ip6", "ipc", "isolation", "kernel-memory",
        "label-file", "link", "link-local-ip", "log-driver", "log-opt", "mac-address", "memory-reservation",
        "memory-swap", "memory-swappiness", "mount", "name", "net", "net-alias", "network", "network-alias",
        "oom-score-adj", "pid", "pids-limit", "platform", "pull", "restart", "runtime", "security-opt",
        "shm-size", "stop-signal", "stop-timeout", "storage-opt", "sysctl", "tmpfs", "ulimit", "userns", "uts",
        "volume-driver", "volumes-from")},
    "attach": ("a", True), "cpu-shares": ("c", True), "env": ("e", True), "hostname": ("h", True),
    "label": ("l", True), "memory": ("m", True), "publish": ("p", True), "user": ("u", True),
    "volume": ("v", True), "workdir": ("w", True),
}
DOCKER_SHORT = {short: long for long, (short, _) in DOCKER_RUN_OPTIONS.items() if short}
# The ``docker run`` options the plan owns: the environment, mounts (``--tmpfs`` too), devices, name,
# lifetime and the entrypoint; ``--workdir`` (``python -m`` puts the working directory first on sys.path,
# ahead of the mounted patches) and ``--platform`` (another image than the one the plan names).
MANAGED_DOCKER_OPTIONS = frozenset({
    "--env", "--env-file", "--volume", "--mount", "--tmpfs", "--volumes-from", "--device", "--device-cgroup-rule",
    "--gpus", "--privileged", "--name", "--rm", "--init", "--entrypoint", "--detach", "--workdir", "--platform",
})


@dataclass(frozen=True)
class DockerWord:
    """One option of ``docker_args`` as docker parses it (``option`` is its long name), or a problem."""

    index: int
    word: str
    option: str | None
    problem: str | None = None


def parse_docker_args(words: list[str]) -> list[DockerWord]:
    """``docker_args`` read with docker run's option grammar (pflag, interspersed off: the first word that
    is not an option is the image). A value-taking option takes the next word whatever it looks like."""
    out: list[DockerWord] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--" or not word.startswith("-") or word == "-":
            out.append(DockerWord(i - 1, word, None, f"{word!r} is not an option: docker run's options end at the "
                                                     f"first word that is not one, so docker would run it as the "
                                                     f"image (and the plan's image as the command)"))
            continue
        if word.startswith("--"):
            name, eq, _ = word[2:].partition("=")
            spec = DOCKER_RUN_OPTIONS.get(name)
            if spec is None:
                out.append(DockerWord(i - 1, word, None, f"--{name} is not a docker run option"))
                continue
            if spec[1] and not eq:
                if i >= len(words):
                    out.append(DockerWord(i - 1, word, "--" + name, f"--{name} needs a value; last in docker_args "
                                                                     f"it would take the image as its value"))
                    continue
                i += 1
            out.append(DockerWord(i - 1 - (spec[1] and not eq), word, "--" + name))
            continue
        shorts = word[1:]
        for j, char in enumerate(shorts):
            long = DOCKER_SHORT.get(char)
            if long is None:
                out.append(DockerWord(i - 1, word, None, f"-{char} is not a docker run option (in {word!r})"))
                break
            out.append(DockerWord(i - 1, word, "--" + long))
            rest = shorts[j + 1:]
            if rest.startswith("="):  # -t=false, -e=K=V: the rest is the value
                break
            if DOCKER_RUN_OPTIONS[long][1]:
                if not rest:
                    if i >= len(words):
                        out[-1] = DockerWord(i - 1, word, "--" + long, f"-{char} needs a value; last in docker_args "
                                                                       f"it would take the image as its value")
                    i += 1
                break
    return out


# Environment variables that change which code runs: what the interpreter imports, the loader preloads,
# vLLM loads as plugins or frontend, or tt-metal compiles as device kernels. Set in a profile (or as a
# patch's flag) they would run other code than the patches the plan delivers, and nothing checks it. Only
# the plan sets PYTHONPATH (sources: pythonpath). Any LD_* / DYLD_* / TT_METAL_JIT_SERVER_* counts. The
# profile's ``env`` is the only way a variable reaches the server: docker_args may not carry -e /
# --env-file, and launcher.command may not be ``env`` or an assignment (launcher-command-known).
CODE_SELECTING_ENV: dict[str, str] = {
    "PYTHONPATH": "puts folders first on sys.path, ahead of the install path the patches are mounted over",
    "PYTHONHOME": "moves the standard library and site-packages",
    "PYTHONPLATLIBDIR": "moves the platform library directory (site-packages)",
    "PYTHONEXECUTABLE": "changes sys.executable, which site uses to find the environment",
    "VIRTUAL_ENV": "names another environment to tools that pick their interpreter or packages from it",
    "PYTHONUSERBASE": "moves the user site-packages, which are searched before the install path",
    "PYTHONNOUSERSITE": "switches the user site-packages on or off",
    "PYTHONSAFEPATH": "changes whether the working directory is put first on sys.path",
    "PYTHONSTARTUP": "runs a file of code at interpreter start",
    "PYTHONWARNINGS": "imports the module of every warning category it names",
    "PYTHONBREAKPOINT": "imports the callable it names",
    "PYTHONPYCACHEPREFIX": "reads bytecode from another tree",
    "PYTHONOPTIMIZE": "strips the asserts a patch adds and reads other bytecode",
    "PYTHONCASEOK": "matches module names case-insensitively",
    "PATH": "decides which python3 (or server command) runs",
    "HOME": "moves the user site-packages (~/.local/lib/pythonX.Y/site-packages), searched before the install path",
    "GCONV_PATH": "makes glibc load iconv modules (shared objects) from another folder",
    # OpenSSL reads its configuration when Python's ssl module initializes it (vLLM's server imports ssl);
    # an engine (dynamic_path) or provider section there loads a shared object into the server.
    "OPENSSL_CONF": "makes OpenSSL read another configuration, whose engine / provider sections load shared objects",
    "OPENSSL_ENGINES": "makes OpenSSL load engine shared objects from another folder",
    "OPENSSL_MODULES": "makes OpenSSL load provider shared objects from another folder",
    # tt-metal (libtt_metal.so of the pinned ttnn wheel, its rtoptions): device kernels and firmware are
    # JIT-compiled from sources found through these, so the patches' mounted .cpp kernels would not be
    # what the device runs. TT_METAL_CACHE stays allowed: the JIT cache is keyed by a hash of each
    # kernel's sources and dependencies (write_dependency_hashes / .dephash), so a changed kernel is rebuilt.
    "TT_METAL_HOME": "moves the root tt-metal JIT-compiles device kernels and firmware from",
    "TT_METAL_RUNTIME_ROOT": "moves the root tt-metal JIT-compiles device kernels and firmware from",
    "TT_METAL_KERNEL_PATH": "adds a folder tt-metal searches for kernel sources",
    "TT_METAL_FW_SRC_BRISC": "builds the BRISC firmware from another source",
    "TT_METAL_FW_HEADER_BRISC": "builds the BRISC firmware from another header",
    "TT_METAL_DISABLE_PRECOMPILED_FW": "builds firmware from the source root instead of the precompiled firmware",
    "TT_METAL_SKIP_LOADING_FW": "runs whatever firmware the device holds instead of loading the build's",
    "TT_METAL_NULL_KERNELS": "replaces every device kernel with an empty one",
    "TT_METAL_KERNELS_EARLY_RETURN": "makes every device kernel return before its body runs",
    "TT_METAL_SIMULATOR": "loads a simulator library in place of the device",
    "TT_UMD_SIMULATOR_PATH": "loads a simulator library in place of the device",
    "TT_METAL_MOCK_CLUSTER_DESC_PATH": "replaces the devices with a mock cluster (no kernel runs)",
    # vLLM (vllm/envs.py of the pinned sdist).
    "VLLM_PLUGINS": "selects which installed vLLM plugins (entry points: platform, general, parser plugins) are "
                    "loaded; the plan never needs it (by default every installed plugin loads)",
    "VLLM_USE_RUST_FRONTEND": "serves the API from the vllm-rs binary instead of the Python frontend where the "
                              "patched tool parsers run",
    "VLLM_RUST_FRONTEND_PATH": "names the binary that serves the API in place of the Python frontend",
    "VLLM_LOGGING_CONFIG_PATH": "loads a logging dictConfig, whose '()' factories import code by name (and whose "
                                "filters can drop the banners)",
    "VLLM_NCCL_SO_PATH": "loads another NCCL shared library",
    "VLLM_CUDART_SO_PATH": "loads another CUDA runtime shared library",
    "VLLM_MODEL_REDIRECT_PATH": "serves another folder or repo under the model name the tool-call format was "
                                "derived from",
    "VLLM_USE_MODELSCOPE": "resolves the model name on ModelScope, another repository (and chat template) than "
                           "the one the tool-call format was derived from",
    # huggingface_hub (the image's): where a model name is downloaded from
    "HF_ENDPOINT": "downloads the model name from another hub, whose repository (and chat template) is not the one "
                   "the tool-call format was derived from",
}
CODE_SELECTING_PREFIXES = {"LD_": "the dynamic loader's preloads and library search path",
                           "DYLD_": "the dynamic loader's preloads and library search path",
                           "TT_METAL_JIT_SERVER_": "compiles device kernels (and uploads firmware) on a remote JIT "
                                                   "server, from its sources"}


def code_selecting(name: str) -> str | None:
    """Why ``name`` changes which code runs, if it does."""
    if name in CODE_SELECTING_ENV:
        return CODE_SELECTING_ENV[name]
    return next((why for prefix, why in CODE_SELECTING_PREFIXES.items() if name.startswith(prefix)), None)


# The server commands whose meaning the rules know: the plan appends every vLLM option to the command,
# and the environment, flags and argv the rules checked must be what the server gets. So the command is
# the interpreter running vLLM's OpenAI server module, or vLLM's own ``vllm serve``, and nothing else: no
# interpreter options (``-c`` runs other code, ``-I``/``-E`` drop the plan's PYTHON* env, ``-S`` skips
# site, ``-X`` changes the import system), no words of its own after the entry point (they would be
# vLLM options the rules never saw), no wrapper. The interpreter is ``python``, ``python3`` or
# ``python3.N``, by name (the image's PATH, or a process's absolute path) or as an absolute path to one.
SERVER_MODULES = ("vllm.entrypoints.openai.api_server",)
VLLM_CLI = ("vllm", ("serve",))
_INTERPRETER = re.compile(r"python(3(\.[0-9]+)?)?")
ALLOWED_COMMANDS = ("python3 -m vllm.entrypoints.openai.api_server", "vllm serve")
# Why a wrapper is refused even when it "only" schedules: each runs its arguments under its own option
# grammar (so the words after it mean what that grammar says), and the ones that change the environment
# or argv do it after every check here. Scheduling belongs in docker_args (--cpuset-cpus, --cpuset-mems,
# --cpu-shares, --ulimit), which are parsed with docker's grammar; the image's init is docker's --init.
_REINTERPRETS = "runs its arguments as another command under its own option grammar"
COMMAND_WRAPPERS: dict[str, str] = {
    "env": "sets and unsets environment variables (and PATH lookup) before it runs the rest: the environment "
           "the rules checked (flags, env-does-not-select-code) would not be the server's",
    **{sh: "runs a shell script: with -c the script is one word and every word after it, including each "
           "option the plan renders, becomes a positional parameter it may drop or replace"
       for sh in ("sh", "bash", "dash", "zsh", "ksh", "ash", "busybox", "fish")},
    "exec": "is a shell builtin; as a command it is a wrapper around another command line",
    **{w: f"{_REINTERPRETS} (scheduling goes in docker_args: --cpuset-cpus, --cpuset-mems, --cpu-shares)"
       for w in ("nice", "ionice", "chrt", "taskset", "numactl", "stdbuf", "timeout", "nohup", "setsid")},
    **{w: f"{_REINTERPRETS}, and can change the user, environment, namespaces or argv the server gets"
       for w in ("sudo", "su", "runuser", "doas", "chroot", "unshare", "nsenter", "xargs", "tini", "dumb-init",
                 "strace", "ltrace", "gdb", "valgrind", "time", "catchsegv", "setpriv", "capsh", "prlimit")},
}


def _command(profile: Profile) -> list[Violation]:
    """``launcher.command`` is one of ALLOWED_COMMANDS (findings D1, D2: ``env PYTHONPATH=... -u FLAG``
    re-set the environment the rules checked; ``sh -c '... --tool-call-parser hermes'`` dropped every
    option the plan renders while the plan still showed the checked values)."""
    launcher = profile.spec.launcher
    command = list(launcher.command)
    forms = " or ".join(f"`{c}`" for c in ALLOWED_COMMANDS)

    def bad(index: int, why: str) -> list[Violation]:
        word = command[index] if index < len(command) else None
        shown = f"launcher.command[{index}] {word!r}" if word is not None else f"launcher.command ends at {index} words"
        return [_v(profile, "launcher-command-known", profile.where("launcher", "command", min(index, len(command) - 1)),
                   f"{shown} {why}; the server command must be {forms} (the interpreter by name or as an absolute "
                   f"path; the plan appends every vLLM option, from fields the rules check)")]

    first = command[0]
    name = first.rsplit("/", 1)[-1]
    base = name if (first == name or first.startswith("/")) else None
    if base is None:
        return bad(0, "is a relative path, resolved against whatever the working directory is")
    if base in COMMAND_WRAPPERS:
        return bad(0, COMMAND_WRAPPERS[base])
    if "=" in first:
        return bad(0, "is an environment assignment: a shell would set it, docker and systemd would run it as the "
                      "program; the environment comes from enable / env")
    if launcher.kind == "process" and not first.startswith("/"):
        return bad(0, "is looked up on the host's PATH, which the process launcher passes through from the "
                      "caller (and env may not set): name the virtualenv's interpreter or vllm by its absolute path")
    if _INTERPRETER.fullmatch(base):
        want: tuple[str, ...] = ("-m",)
        if len(command) < 2 or command[1] != "-m":
            return bad(1, "is not -m: interpreter options change what runs (-c, a script path) or drop the plan's "
                          "environment (-I, -E, -S, -X)")
        if len(command) < 3 or command[2] not in SERVER_MODULES:
            return bad(2, f"is not vLLM's server module ({', '.join(SERVER_MODULES)})")
        want = ("-m", command[2])
    elif base == VLLM_CLI[0]:
        want = VLLM_CLI[1]
        if len(command) < 2 or command[1] != want[0]:
            return bad(1, "is not `serve`: only vLLM's server subcommand takes the options the plan renders")
    else:
        return bad(0, "is not an interpreter or server the rules know (a wrapper, a script or another program "
                      "would decide for itself what the rendered options and environment mean)")
    if len(command) > 1 + len(want):
        return bad(1 + len(want), "follows the entry point: every vLLM option comes from the profile's typed fields "
                                  "(or vllm.extra_args, resolved through the pinned argparse), never the command")
    return []


STABLE_DEVICE_MARKERS = ("/by-id/", "/by-path/")


@dataclass(frozen=True)
class Violation:
    """One broken rule, worded for the person who has to edit the profile."""

    profile: str
    rule: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: profile {self.profile!r} breaks rule {self.rule}: {self.message}"


def resolve_enabled(profile: Profile, series: Series) -> tuple[list[PatchEntry], list[Violation]]:
    """Map the profile's ``enable`` list (patch names or flags) to flag-gated series entries."""
    by_flag = {p.flag: p for p in series.patches if p.flag}
    found: list[PatchEntry] = []
    problems: list[Violation] = []
    for index, ref in enumerate(profile.spec.enable):
        where = profile.where("enable", index)
        if _FLAG_SHAPE(ref) and "-" not in ref:
            patch = by_flag.get(ref)
            if patch is None:
                problems.append(_v(profile, "enabled-flag-is-declared", where,
                                   f"flag {ref} is not declared by any patch in {series.path}"))
                continue
        else:
            try:
                patch = series.find(ref)
            except SeriesError as exc:  # unknown or ambiguous name
                problems.append(_v(profile, "enabled-patch-exists", where, str(exc)))
                continue
            if ref.isdigit() and ref not in (patch.name, Path(patch.spec.patch).name):
                # a position means another patch once the series is reordered or grows
                problems.append(_v(profile, "enabled-patch-exists", where,
                                   f"{ref!r} is a position; name the patch ({patch.name!r}) or its flag"))
                continue
            if not patch.flag:
                problems.append(_v(profile, "enabled-patch-has-flag", where,
                                   f"patch {patch.name} declares no flag, so there is nothing to enable "
                                   f"(it is always on once applied)"))
                continue
        if patch in found:
            problems.append(_v(profile, "enabled-once", where, f"patch {patch.name} is enabled twice"))
            continue
        found.append(patch)
    found.sort(key=lambda p: p.position)
    return found, problems


# What the plan itself sets for every server, last (the profile cannot re-set them): no bytecode written
# next to the mounted sources (seed 000); no user site-packages (``~/.local/lib/pythonX.Y/site-packages``
# of HOME, PYTHONUSERBASE or the passwd entry's home, and its ``.pth`` files, searched before the install
# path); and no working directory (or script folder) put first on sys.path (``python -m`` would import a
# ``vllm/`` there ahead of the patched tree; Python >= 3.11, and the plan's working directory covers older).
PLAN_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}


def server_env(profile: Profile, enabled: list[PatchEntry]) -> dict[str, str]:
    """The environment the server gets: flags of enabled patches, the profile's env, then PLAN_ENV."""
    env = {p.flag: "1" for p in enabled if p.flag}
    env.update(profile.spec.env)
    env.update(PLAN_ENV)
    return dict(sorted(env.items()))


def facts(profile: Profile, env: Mapping[str, str]) -> dict[str, Any]:
    """Flatten the canonical profile into dotted facts, plus ``env.NAME``."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and prefix != "env":
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else key, sub)
        else:
            out[prefix] = value

    walk("", profile.canonical())
    for key, value in env.items():
        out[f"env.{key}"] = value
    return out


def parser_registry(tree: Tree | None) -> tuple[dict[str, str], str]:
    """Parser name -> class, read from the plugin tree's registry when a tree is given."""
    if tree is None or not tree.exists(REGISTRY_FILE):
        return dict(FALLBACK_REGISTRY), "built-in table for vllm==0.33.0"
    module = ast.parse(read_text(tree, REGISTRY_FILE), filename=REGISTRY_FILE)
    registry: dict[str, str] = {}
    for node in module.body:
        targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if "_TOOL_PARSERS_TO_REGISTER" in targets and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Tuple) and len(value.elts) == 2:
                    cls = value.elts[1]
                    if isinstance(cls, ast.Constant):
                        registry[str(key.value)] = str(cls.value)
    return registry, tree.display_path(REGISTRY_FILE)


def check_profile(profile: Profile, series: Series, plugin_tree: Tree | None = None) -> list[Violation]:
    """Every violation of every rule, in a stable order; an empty list means the profile may start."""
    enabled, problems = resolve_enabled(profile, series)
    spec = profile.spec
    env = server_env(profile, enabled)

    declared = {p.flag: p for p in series.patches if p.flag}
    for key in spec.env:
        if key in declared:
            problems.append(_v(profile, "flags-come-from-enable", profile.where("env", key),
                               f"{key} is the flag of patch {declared[key].name}; list the patch under "
                               f"'enable' instead of setting the variable by hand"))

    for key in sorted({p.flag for p in enabled if p.flag} | set(spec.env)):
        why = code_selecting(key)
        if why:
            where = profile.where("env", key) if key in spec.env else profile.where("enable")
            problems.append(_v(profile, "env-does-not-select-code", where,
                               f"{key} {why}: it changes which code runs (imported, preloaded, loaded as a plugin or "
                               f"compiled for the device), so the server could run other code than the patches the "
                               f"plan delivers; the plan's "
                               f"sources (mounts / pythonpath) are the only way code reaches the server"))
    if spec.launcher.sources == "none" and series.patches:
        by_target: dict[str, list[str]] = {}
        for patch in series.patches:
            by_target.setdefault(patch.spec.target, []).append(patch.name)
        missing = "; ".join(f"{target}: {', '.join(names)}" for target, names in sorted(by_target.items()))
        problems.append(_v(profile, "patches-need-sources", profile.where("launcher", "sources"),
                           f"sources: none serves the image's unpatched install, but the series changes files of "
                           f"its targets, so these patches would be missing ({missing}) while the plan and the "
                           f"run record name the materialization; use mounts (docker) or pythonpath (process)"))
    if enabled and spec.launcher.sources == "none":
        names = ", ".join(p.name for p in enabled)
        problems.append(_v(profile, "enabled-patches-need-sources", profile.where("launcher", "sources"),
                           f"{names} enabled but sources: none runs the unpatched install, so the flag "
                           f"would switch on code that is not there"))

    fact_map = facts(profile, env)
    for rule in RULES:
        if all(fact_map.get(k) == v for k, v in rule.when.items()):
            for key, want in rule.require.items():
                have = fact_map.get(key)
                if have != want:
                    trigger = ", ".join(f"{k}={v!r}" for k, v in rule.when.items())
                    problems.append(_v(profile, rule.id, _where_fact(profile, key),
                                       f"{trigger} requires {key}={want!r} (have {have!r}): {rule.why}"))

    problems.extend(_banners(profile, series))
    problems.extend(_format(profile))
    problems.extend(_command(profile))
    problems.extend(_unmanaged_args(profile))
    problems.extend(_block_sizes(profile))
    problems.extend(_parser(profile, plugin_tree, env))
    problems.extend(_gates(profile))
    for index, device in enumerate(spec.devices):
        if not any(marker in device for marker in STABLE_DEVICE_MARKERS):
            problems.append(_v(profile, "devices-by-stable-id", profile.where("devices", index),
                               f"{device} is not a stable path; numeric nodes are renumbered by a reset "
                               f"(tt-smi -r). Use /dev/tenstorrent/by-id/..."))
        elif ":" in device or not device.startswith("/dev/") or any(
                part in ("", ".", "..") for part in device[1:].split("/")):
            # docker's --device is HOST[:CONTAINER[:PERMS]]: a mapping names the stable path only on one side
            problems.append(_v(profile, "devices-by-stable-id", profile.where("devices", index),
                               f"{device!r} is not one stable path under /dev/ (docker reads ':' as "
                               f"host:container[:permissions], so the stable-looking side need not be the node "
                               f"passed through; '..' leaves by-id); name the by-id node itself"))
    problems.extend(_env_words(profile))
    if spec.launcher.container_name is not None and not _CONTAINER_NAME.fullmatch(spec.launcher.container_name):
        problems.append(_v(profile, "container-name-is-a-name", profile.where("launcher", "container_name"),
                           f"launcher.container_name {spec.launcher.container_name!r} is not a docker container "
                           f"name ([a-zA-Z0-9][a-zA-Z0-9_.-]+): it is a word of `docker run --name` and of the "
                           f"unit's `docker stop -t N NAME`, where a leading '-' would be read as an option"))
    return problems


# docker's own pattern for container names (daemon/names: validContainerNamePattern, without the '/').
_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_words(profile: Profile) -> list[Violation]:
    """An ``env`` key is a variable name and a value one line: ``docker run -e K=V`` splits at the first
    '=' (so the key 'PYTHONPATH=/x:' sets PYTHONPATH past env-does-not-select-code), and the installed
    unit's EnvironmentFile is one KEY="value" per line (a newline would start another variable)."""
    problems = []
    for key, value in profile.spec.env.items():
        where = profile.where("env", key)
        if not _ENV_NAME.fullmatch(key):
            problems.append(_v(profile, "env-is-name-and-value", where,
                               f"env key {key!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*): "
                               f"docker -e and the unit's environment file would read another variable out of it"))
        bad = [what for what, char in (("a newline", "\n"), ("a carriage return", "\r"), ("a NUL", "\0"))
               if char in value]
        if bad:
            problems.append(_v(profile, "env-is-name-and-value", where,
                               f"env {key}: the value holds {' and '.join(bad)}; the unit's environment file is "
                               f"one variable per line, so it could set another variable"))
    return problems


def require_rules(profile: Profile, series: Series, plugin_tree: Tree | None = None) -> None:
    """Raise ProfileError listing every violation (what ``plan`` and ``up`` do before anything else)."""
    violations = check_profile(profile, series, plugin_tree)
    if violations:
        raise ProfileError("profile breaks serving rules:\n  " + "\n  ".join(str(v) for v in violations))


def managed_option(word: str, managed: frozenset[str]) -> str | None:
    """The managed option ``word`` would set, if any: ``--x=v``, ``--x_y``, ``--no-x`` and argparse's
    unambiguous abbreviations (``--tool-call-pars``) all count."""
    if not word.startswith("-"):
        return None
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    candidates = {name}
    if name.startswith("--no-"):
        candidates.add("--" + name[5:])
    for candidate in candidates:
        if candidate in managed:
            return candidate
        if candidate.startswith("--") and len(candidate) > 3:
            hits = [m for m in managed if m.startswith(candidate)]
            if hits:
                return sorted(hits)[0]
    if not name.startswith("--") and len(name) > 2:  # -eFOO=1, -v/a:/b
        short = name[:2]
        if short in managed:
            return short
    return None


def managed_vllm_option(word: str) -> str | None:
    """The managed vLLM option ``word`` reaches, judged without the source (``serve check
    --no-materialize``, and before the host preflight): what ``managed_option`` counts, plus the forms
    vLLM's FlexibleArgumentParser adds: ``--x.key v`` (turned into ``--x '{"key": v}'`` and appended
    last), ``--disable-x`` / ``--no-disable-x`` for a boolean ``--enable-x``, and the short aliases of
    the pinned vLLM (``-tp``). The plan resolves every word through the materialized argparse again."""
    if not word.startswith("-"):
        return None
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].split(".", 1)[0]
        hit = managed_option(name, MANAGED_VLLM_OPTIONS)
        if hit is None:
            base = "--" + name[2:].replace("_", "-").removeprefix("no-")
            if base.startswith("--disable-"):
                hit = managed_option("--enable-" + base[len("--disable-"):], MANAGED_VLLM_OPTIONS)
        return hit
    name = name.split(".", 1)[0]
    for alias, option in MANAGED_VLLM_ALIASES.items():
        # -tp, -tp8, and -t (argparse's abbreviation of -tp when nothing else starts with -t)
        if name.startswith(alias) or (len(name) >= 2 and alias.startswith(name)):
            return option
    return None


def code_selecting_vllm_option(word: str, following: str | None = None) -> tuple[str, str] | None:
    """(option, why) when ``word`` sets a vLLM option that selects code (spelled as managed_option
    reads it: ``--x=v``, ``--x_y``, ``--no-x``, abbreviations, ``--x.key``); ``following`` is the next
    word, the value of ``--distributed-executor-backend`` when not given with '='."""
    if not word.startswith("--"):
        return None
    name, eq, value = word.partition("=")
    name = name.split(".", 1)[0]
    hit = managed_option(name, frozenset(CODE_SELECTING_VLLM_OPTIONS))
    if hit:
        return hit, CODE_SELECTING_VLLM_OPTIONS[hit]
    if managed_option(name, frozenset({"--load-format"})) and (value if eq else (following or "")) == "dummy":
        return "--load-format", "serves random weights instead of the model's (load format 'dummy')"
    if managed_option(name, frozenset({"--distributed-executor-backend"})):
        value = value if eq else (following or "")
        if value not in EXECUTOR_BACKENDS:
            return ("--distributed-executor-backend",
                    f"imports {value!r} by its qualified name (only {', '.join(sorted(EXECUTOR_BACKENDS))} are "
                    f"built in)")
    return None


def _unmanaged_args(profile: Profile) -> list[Violation]:
    """extra_args / docker_args may add options, never re-set one the plan renders from checked fields."""
    problems = []
    for index, word in enumerate(profile.spec.vllm.extra_args):
        hit = managed_vllm_option(word)
        if hit:
            problems.append(_v(profile, "extra-args-not-managed", profile.where("vllm", "extra_args", index),
                               f"{word!r} sets {hit}, which the plan renders from the profile's fields (and the "
                               f"rules check); argparse lets the last value win, so set it there instead"))
    extra = profile.spec.vllm.extra_args
    for index, word in enumerate(extra):
        hit = code_selecting_vllm_option(word, extra[index + 1] if index + 1 < len(extra) else None)
        if hit:
            problems.append(_v(profile, "extra-args-do-not-select-code", profile.where("vllm", "extra_args", index),
                               f"{word!r} sets {hit[0]}, which {hit[1]}: the server would run code the plan does "
                               f"not deliver or the rules did not check"))
    image = profile.spec.launcher.image or ""
    if profile.spec.launcher.kind == "docker" and (image.startswith("-") or not image.strip() or image != image.strip()
                                                   or any(c.isspace() for c in image)):
        problems.append(_v(profile, "docker-args-parsed", profile.where("launcher", "image"),
                           f"image {image!r} is not an image reference: docker would read it as an option or "
                           f"another word, and run something the plan does not name"))
    for parsed in parse_docker_args(profile.spec.launcher.docker_args):
        where = profile.where("launcher", "docker_args", parsed.index)
        if parsed.option in MANAGED_DOCKER_OPTIONS:
            problems.append(_v(profile, "docker-args-not-managed", where,
                               f"{parsed.word!r} is docker's {parsed.option}: the environment, mounts, devices, the "
                               f"working directory, the image and the container's name and lifetime come from the "
                               f"plan (enable / env / devices / image), never by hand"))
        elif parsed.problem:
            problems.append(_v(profile, "docker-args-parsed", where,
                               f"{parsed.problem}; the plan's image, env and mounts would not be what docker runs"))
    return problems


def _block_sizes(profile: Profile) -> list[Violation]:
    """GDN (mamba) and attention block sizes the hybrid KV-cache coordinator accepts."""
    vllm = profile.spec.vllm
    if not (profile.spec.model.hybrid and vllm.enable_prefix_caching):
        return []
    where = profile.where("vllm", "mamba_block_size") if vllm.mamba_block_size else profile.where("vllm")
    if vllm.block_size is None:
        return [_v(profile, "hybrid-block-sizes", profile.where("vllm"),
                   "a hybrid model with prefix caching needs an explicit vllm.block_size (the attention block): "
                   "a default nobody set is a default nobody booted")]
    mamba = vllm.mamba_block_size or vllm.block_size
    if mamba != vllm.block_size:
        return [_v(profile, "hybrid-block-sizes", where,
                   f"GDN block {mamba} against attention block {vllm.block_size}: the hybrid coordinator "
                   f"caches in align mode at one block granularity and rejects unequal sizes")]
    return []


def derived_format(profile: Profile) -> tuple[str | None, str]:
    """The tool-call format the model emits (from the model or the pinned table), never the profile's say."""
    from materialize.serve.models import model_format

    found = model_format(profile.spec.model.path)
    return found.format, found.source


def _format(profile: Profile) -> list[Violation]:
    """The format must be known, and a declared one must agree with it (issue 14.5)."""
    model = profile.spec.model
    fmt, source = derived_format(profile)
    where = profile.where("model", "tool_call_format") if model.tool_call_format else profile.where("model", "path")
    if fmt is None:
        return [_v(profile, "tool-call-format-from-model", where,
                   f"cannot tell which tool-call format {model.path} emits: {source}; serve a local model "
                   f"directory with its chat template, or add the model with evidence to the pinned table")]
    if model.tool_call_format is not None and model.tool_call_format != fmt:
        return [_v(profile, "tool-call-format-from-model", where,
                   f"the profile declares {model.tool_call_format} but {model.path} emits {fmt} ({source}); "
                   f"the format comes from the model, not the profile")]
    return []


def _parser(profile: Profile, plugin_tree: Tree | None, env: Mapping[str, str]) -> list[Violation]:
    model, vllm = profile.spec.model, profile.spec.vllm
    where = profile.where("vllm", "tool_call_parser") if vllm.tool_call_parser else profile.where("vllm")
    fmt, _ = derived_format(profile)
    if fmt in (None, "none"):
        return []
    if not vllm.tool_call_parser:
        return [_v(profile, "tool-call-parser-matches-model", where,
                   f"model {model.path} emits {fmt} tool calls but no tool_call_parser is set")]
    registry, source = parser_registry(plugin_tree)
    for flag, routes in PARSER_ROUTES_BY_FLAG.items():
        if env.get(flag) == "1" and any(name in registry for name in routes):
            registry.update(routes)
            source += f" with {flag}=1"
    cls = registry.get(vllm.tool_call_parser)
    if cls is None:
        return [_v(profile, "tool-call-parser-registered", where,
                   f"parser {vllm.tool_call_parser!r} is not registered in {source} "
                   f"(known: {', '.join(sorted(registry))})")]
    parses = PARSER_CLASS_FORMAT.get(cls)
    if parses is None:
        return [_v(profile, "tool-call-parser-matches-model", where,
                   f"parser {vllm.tool_call_parser!r} ({cls}) has no known format; cannot show it parses {fmt}")]
    if parses != fmt:
        return [_v(profile, "tool-call-parser-matches-model", where,
                   f"parser {vllm.tool_call_parser!r} ({cls}) parses {parses} but model {model.path} emits "
                   f"{fmt}: tool calls would come back empty when streamed")]
    return []


TOOL_GATES = ("tool_call_stream", "tool_call_nonstream")


def resolved_gates(profile: Profile) -> list[dict[str, Any]]:
    """Each gate with its request count and concurrency made concrete (what the plan runs).

    A tool-call gate sends ceil(3/r) requests for the profile's ``max_failure_rate`` r (0 failures in
    that many bound the rate below r at ~95%), at the profile's concurrency (``vllm.max_num_seqs``):
    the seeds' stale-slot defect failed 1 of 32 *concurrent* requests and no serial one."""
    spec = profile.spec
    rate = parse_rate(spec.max_failure_rate) if spec.max_failure_rate is not None else None
    out = []
    for gate in spec.gates:
        tool = gate.name in TOOL_GATES
        needed = rule_of_three(rate) if (tool and rate is not None) else 1
        concurrency = gate.concurrency or (spec.vllm.max_num_seqs if tool else None) or 1
        out.append({"name": gate.name, "requests": max(gate.requests or 0, needed), "concurrency": concurrency,
                    "timeout_s": gate.timeout_s,
                    "max_failure_rate": str(spec.max_failure_rate) if (tool and rate is not None) else None})
    return out


def _gates(profile: Profile) -> list[Violation]:
    """A model that emits tool calls is gated on them, streamed and not (seed 000), with enough requests
    to rule out the declared failure rate, at the profile's concurrency (seed 001, issue 14.4)."""
    fmt, _ = derived_format(profile)
    spec = profile.spec
    names = {g.name for g in spec.gates}
    if "models" not in names and fmt in (None, "none"):  # a tool-calling model: tool-call-gates-required says it
        # Readiness is any 200 from /v1/models; without this gate a server listing another model (or
        # answering 200 with anything) would pass serve up and the unit's boot check on readiness alone.
        return [_v(profile, "models-gate-required", profile.where("gates"),
                   "no models gate: nothing would check that the server answers well-formed and lists "
                   f"{spec.model.served_name!r}; readiness alone is any HTTP 200")]
    if fmt in (None, "none"):
        return []
    missing = [g for g in ("models", *TOOL_GATES) if g not in names]
    problems = []
    if missing:
        problems.append(_v(profile, "tool-call-gates-required", profile.where("gates"),
                           f"gates {', '.join(missing)} missing: a healthy server can still return empty tool calls"))
    if spec.max_failure_rate is None:
        problems.append(_v(profile, "gates-sized-by-failure-rate", profile.where("gates"),
                           "no max_failure_rate: say which intermittent failure rate the gates must rule out "
                           "(e.g. 1/128, the seeds' argmax+prefix defect); the request count follows from it"))
        return problems
    rate = parse_rate(spec.max_failure_rate)
    needed = rule_of_three(rate)
    for index, gate in enumerate(spec.gates):
        if gate.name not in TOOL_GATES:
            continue
        if gate.requests is not None and gate.requests < needed:
            problems.append(_v(profile, "gates-sized-by-failure-rate", profile.where("gates", index, "requests"),
                               f"gate {gate.name}: {gate.requests} requests bound the rate only below "
                               f"{3 / gate.requests:.2%}; max_failure_rate {spec.max_failure_rate} needs "
                               f"ceil(3/r) = {needed}"))
        seqs = spec.vllm.max_num_seqs or 1
        if gate.concurrency is not None and gate.concurrency < seqs:
            problems.append(_v(profile, "gates-at-profile-concurrency", profile.where("gates", index, "concurrency"),
                               f"gate {gate.name}: concurrency {gate.concurrency} below max_num_seqs {seqs}; "
                               f"a defect that shows only under concurrency would pass"))
    return problems


def _banners(profile: Profile, series: Series) -> list[Violation]:
    """Every flag has a banner, or ``banner: none`` with a reason; flag and banner occur in the patch's
    added lines, so a typo in the series is caught offline rather than on hardware (issue 14.3)."""
    problems = []
    for patch in series.patches:
        if not patch.flag:
            continue
        where = f"{series.path}:{patch.line}"
        if patch.banner is None:
            problems.append(_v(profile, "flag-needs-banner", where,
                               f"patch {patch.name}: flag {patch.flag} has no banner, so nothing can show it "
                               f"engaged; add the log line it prints, or banner: none with banner_none_why"))
            continue
        if patch.banner == BANNER_NONE and not (patch.spec.banner_none_why or "").strip():
            problems.append(_v(profile, "flag-needs-banner", where,
                               f"patch {patch.name}: banner: none needs banner_none_why (why no log line can "
                               f"show {patch.flag} engaged)"))
        try:
            added = added_text(patch.read())
        except SeriesError as exc:
            problems.append(_v(profile, "flag-and-banner-in-patch", where, str(exc)))
            continue
        if patch.flag not in added:
            problems.append(_v(profile, "flag-and-banner-in-patch", where,
                               f"patch {patch.name}: flag {patch.flag} occurs in none of the lines it adds "
                               f"({patch.path}); the code reads another name"))
        if patch.banner != BANNER_NONE and patch.banner not in added:
            problems.append(_v(profile, "flag-and-banner-in-patch", where,
                               f"patch {patch.name}: banner {patch.banner!r} occurs in none of the lines it "
                               f"adds ({patch.path}); the log would never show it"))
    return problems


def added_text(patch_bytes: bytes) -> str:
    """The lines a unified diff adds (without the leading ``+``), joined by newlines."""
    lines = patch_bytes.decode("utf-8", "replace").splitlines()
    return "\n".join(line[1:] for line in lines if line.startswith("+") and not line.startswith("+++"))


def _where_fact(profile: Profile, key: str) -> str:
    if key.startswith("env."):
        return profile.where("env", key[4:]) if key[4:] in profile.spec.env else profile.where("enable")
    return profile.where(*key.split("."))


def _v(profile: Profile, rule: str, where: str, message: str) -> Violation:
    return Violation(profile=profile.name, rule=rule, where=where, message=message)
