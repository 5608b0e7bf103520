"""Serving rules, checked before anything starts: "X requires Y", as data, with named violations.

Every rule here is one the seeds paid for on hardware: prefix caching with async scheduling, device-
resident decode without device argmax, a flag-gated patch whose sources never reached the container,
GDN/attention block sizes the hybrid coordinator rejects, a tool-call parser that does not match what
the model emits. A violation names the profile, the rule and the line to edit. Pure: no I/O except
reading the parser registry from a tree the caller hands in.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from materialize.errors import SeriesError
from materialize.series import PatchEntry, Series
from materialize.serve.profile import Profile
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


def server_env(profile: Profile, enabled: list[PatchEntry]) -> dict[str, str]:
    """The environment the server gets: flags of enabled patches, the profile's env, no bytecode."""
    env = {p.flag: "1" for p in enabled if p.flag}
    env.update(profile.spec.env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
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

    problems.extend(_block_sizes(profile))
    problems.extend(_parser(profile, plugin_tree, env))
    problems.extend(_gates(profile))
    for index, device in enumerate(spec.devices):
        if not any(marker in device for marker in STABLE_DEVICE_MARKERS):
            problems.append(_v(profile, "devices-by-stable-id", profile.where("devices", index),
                               f"{device} is not a stable path; numeric nodes are renumbered by a reset "
                               f"(tt-smi -r). Use /dev/tenstorrent/by-id/..."))
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


def _parser(profile: Profile, plugin_tree: Tree | None, env: Mapping[str, str]) -> list[Violation]:
    model, vllm = profile.spec.model, profile.spec.vllm
    where = profile.where("vllm", "tool_call_parser") if vllm.tool_call_parser else profile.where("vllm")
    if model.tool_call_format == "none":
        return []
    if not vllm.tool_call_parser:
        return [_v(profile, "tool-call-parser-matches-model", where,
                   f"model {model.path} emits {model.tool_call_format} tool calls but no tool_call_parser is set")]
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
                   f"parser {vllm.tool_call_parser!r} ({cls}) has no known format; cannot show it parses "
                   f"{model.tool_call_format}")]
    if parses != model.tool_call_format:
        return [_v(profile, "tool-call-parser-matches-model", where,
                   f"parser {vllm.tool_call_parser!r} ({cls}) parses {parses} but model {model.path} emits "
                   f"{model.tool_call_format}: tool calls would come back empty when streamed")]
    return []


def _gates(profile: Profile) -> list[Violation]:
    """A model that emits tool calls must be gated on them, streamed and not (seed 000)."""
    if profile.spec.model.tool_call_format == "none":
        return []
    names = {g.name for g in profile.spec.gates}
    missing = [g for g in ("models", "tool_call_stream", "tool_call_nonstream") if g not in names]
    if missing:
        return [_v(profile, "tool-call-gates-required", profile.where("gates"),
                   f"gates {', '.join(missing)} missing: a healthy server can still return empty tool calls")]
    return []


def _where_fact(profile: Profile, key: str) -> str:
    if key.startswith("env."):
        return profile.where("env", key[4:]) if key[4:] in profile.spec.env else profile.where("enable")
    return profile.where(*key.split("."))


def _v(profile: Profile, rule: str, where: str, message: str) -> Violation:
    return Violation(profile=profile.name, rule=rule, where=where, message=message)
