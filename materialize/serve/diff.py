"""Compare two plans field by field, so "what differs between prod and prefix" is one command.

A textual diff of the JSON works, but it buries the answer in brackets; what reviewers ask is "which
flags differ, which vLLM options, which files are mounted". Env and mounts are compared as maps, the
server argv as option -> value, everything else as values. Pure.
"""

from __future__ import annotations

import json
from typing import Any

_SKIP = {"argv", "server_argv", "profile_hash", "env", "mounts", "banners", "gates", "format"}


def argv_options(argv: list[str]) -> dict[str, str]:
    """``--opt value`` / ``--flag`` pairs of a server argv; positional words keyed by their index."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            if "=" in word:
                key, value = word.split("=", 1)
                out[key] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[word] = argv[i + 1]
                i += 1
            else:
                out[word] = ""
        else:
            out[f"argv[{i}]"] = word
        i += 1
    return out


def _map_diff(label: str, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    lines = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            lines.append(f"- {label} {key}={a[key]}")
        elif key not in a:
            lines.append(f"+ {label} {key}={b[key]}")
        elif a[key] != b[key]:
            lines.append(f"~ {label} {key}: {a[key]} -> {b[key]}")
    return lines


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def diff_plans(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Lines prefixed ``-`` (only in a), ``+`` (only in b), ``~`` (changed). Empty means identical."""
    lines: list[str] = []
    for key in sorted((set(a) | set(b)) - _SKIP):
        if a.get(key) != b.get(key):
            lines.append(f"~ {key}: {_scalar(a.get(key))} -> {_scalar(b.get(key))}")
    lines += _map_diff("env", a.get("env", {}), b.get("env", {}))
    lines += _map_diff("option", argv_options(a.get("server_argv", [])), argv_options(b.get("server_argv", [])))
    mounts_a = {m["target"]: m["source"] for m in a.get("mounts", [])}
    mounts_b = {m["target"]: m["source"] for m in b.get("mounts", [])}
    lines += _map_diff("mount", mounts_a, mounts_b)
    banners_a = {x["flag"]: x["banner"] for x in a.get("banners", [])}
    banners_b = {x["flag"]: x["banner"] for x in b.get("banners", [])}
    lines += _map_diff("banner", banners_a, banners_b)
    gates_a = {g["name"]: f"requests={g.get('requests')} timeout_s={g.get('timeout_s')}" for g in a.get("gates", [])}
    gates_b = {g["name"]: f"requests={g.get('requests')} timeout_s={g.get('timeout_s')}" for g in b.get("gates", [])}
    lines += _map_diff("gate", gates_a, gates_b)
    if not lines and a.get("argv") != b.get("argv"):
        lines.append("~ argv differs only in order or launcher details")
    return lines
