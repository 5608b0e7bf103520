"""Every option and environment variable a plan names exists in the materialized source, or the profile
says where it comes from instead (issue 14.9).

The seeds' plans named ``--override-tt-config`` with ``sample_on_device_mode`` / ``trace_mode`` and
``QWEN36_DEVICE_RESIDENT``, none of which exists in the pinned trees: they belong to the TT build of vLLM
and the team's plugin, which the series does not pin. A name nobody defines is silently ignored (an
environment variable) or only fails at boot on hardware (an option). So each name is looked up in what
the series pins:

  vLLM options      argparse definitions in the pinned vLLM tree: string literals passed to
                    ``add_argument(...)``, and the fields of ``*FrontendArgs`` classes (vLLM registers
                    each as ``--field-name``); a boolean's ``--no-x`` form counts as ``--x``
  environment       a ``.py`` file of any pinned tree that holds the name as a string its code uses
                    (not a comment, a docstring or a longer message) and reads ``os.environ`` /
                    ``os.getenv`` (vLLM's ``envs.py`` table, a patch's flag constant)
  config keys       (``--override-tt-config``) cannot be found in a pinned tree at all

A name the source does not have must be listed under the profile's ``unverified:`` with where it comes
from; ``serve check`` prints that list. Lookups use ``git grep`` on the store's trees, so nothing is
checked out.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from materialize.errors import MaterializeError
from materialize.store import Store

# Read by the Python interpreter itself, never by the served code.
INTERPRETER_ENV = frozenset({"PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED"})
VLLM_ROOT = "vllm/"


# The series names its targets; which one is vLLM is read from the trees (the one holding the
# ``vllm`` package), never from a target's name.
def find_vllm_target(targets: Iterable[str], has_vllm: Callable[[str], bool]) -> str | None:
    """The first target (by name) for which ``has_vllm`` says its tree holds the ``vllm/`` package."""
    return next((target for target in sorted(targets) if has_vllm(target)), None)


def store_has_vllm(store: Store, tree: str) -> bool:
    """Whether ``tree`` (in the store) has a ``vllm`` directory at its root."""
    try:
        store.subtree(tree, "vllm")
    except MaterializeError:
        return False
    return True


@dataclass
class SourceIndex:
    """The pinned trees of one materialization, searched in the store (no checkout)."""

    store: Store
    trees: dict[str, str]
    _options: set[str] | None = None
    _env: dict[str, str | None] = field(default_factory=dict)

    def grep_files(self, target: str, literal: str, pathspec: str = "*.py") -> list[str]:
        """Paths of ``target`` whose text contains ``literal``."""
        try:
            out = self.store.git("grep", "-l", "-F", "-e", literal, self.trees[target], "--", pathspec)
        except Exception:  # noqa: BLE001 - git grep exits 1 when nothing matches
            return []
        prefix = self.trees[target] + ":"
        return [line[len(prefix):] for line in out.decode().splitlines() if line.startswith(prefix)]

    def read(self, target: str, path: str) -> str:
        return self.store.read_blob(self.trees[target], path).decode("utf-8", "replace")

    @cached_property
    def vllm_target(self) -> str | None:
        """The target whose tree holds the pinned vLLM."""
        return find_vllm_target(self.trees, lambda t: store_has_vllm(self.store, self.trees[t]))

    def cli_options(self) -> set[str]:
        """Every ``--option`` the pinned vLLM's argparse defines."""
        if self._options is None:
            options: set[str] = set()
            target = self.vllm_target
            if target is not None:
                for path in self.grep_files(target, "add_argument", f"{VLLM_ROOT}*.py"):
                    try:
                        module = ast.parse(self.read(target, path))
                    except SyntaxError:
                        continue
                    options |= _argparse_options(module)
            self._options = options
        return self._options

    def env_reader(self, name: str) -> str | None:
        """``target:path`` of a pinned file that names ``name`` and reads the environment, if any."""
        if name not in self._env:
            found = None
            for target in sorted(self.trees):
                for path in self.grep_files(target, name):
                    if path.startswith("tests/") or "/tests/" in path:
                        continue
                    if names_env_var(self.read(target, path), name):
                        found = f"{target}:{path}"
                        break
                if found:
                    break
            self._env[name] = found
        return self._env[name]


def names_env_var(text: str, name: str) -> bool:
    """Whether Python source ``text`` reads the environment (``os.environ``, ``getenv``) in its code and
    holds ``name`` as a string in its code: a comment, a docstring or a longer message that mentions
    the name does not count (a typo'd variable named in a comment would otherwise pass as read)."""
    if name not in text or not ("environ" in text or "getenv" in text):
        return False
    try:
        module = ast.parse(text)
    except SyntaxError:
        return False
    prose = {
        id(stmt.value)
        for node in ast.walk(module)
        for field in ("body", "orelse", "finalbody")
        if isinstance(getattr(node, field, None), list)  # a lambda's or an `x if c else y`'s body is one node
        for stmt in getattr(node, field)
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    }  # docstrings and other bare strings: never evaluated
    reads = any(
        (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"))
        or (isinstance(node, ast.Name) and node.id in ("environ", "getenv"))
        for node in ast.walk(module)
    )
    return reads and any(
        isinstance(node, ast.Constant) and node.value == name and id(node) not in prose for node in ast.walk(module)
    )


def _argparse_options(module: ast.Module) -> set[str]:
    options: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    options.add(arg.value)
        elif isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    options.add("--" + item.target.id.replace("_", "-"))
    return options


@dataclass(frozen=True)
class Name:
    """One name a plan uses, what kind it is, and where the pinned source defines it (or not)."""

    name: str
    kind: str            # option | env | config-key
    found: str | None    # where it was found in the pinned source
    declared: str | None  # the profile's unverified: entry


def plan_names(server_argv: list[str], env: dict[str, str]) -> list[tuple[str, str]]:
    """(name, kind) of every option, ``--override-tt-config`` key and environment variable in a plan."""
    names: list[tuple[str, str]] = []
    for i, word in enumerate(server_argv):
        if word.startswith("--"):
            names.append((word.split("=", 1)[0], "option"))
            if word == "--override-tt-config" and i + 1 < len(server_argv):
                import json

                try:
                    keys = json.loads(server_argv[i + 1])
                except ValueError:
                    keys = {}
                names += [(key, "config-key") for key in sorted(keys)]
    names += [(key, "env") for key in sorted(env) if key not in INTERPRETER_ENV]
    return names


def look_up(names: list[tuple[str, str]], index: SourceIndex, declared: dict[str, str]) -> list[Name]:
    options = index.cli_options()
    out = []
    for name, kind in names:
        found: str | None = None
        if kind == "option":
            base = "--" + name[5:] if name.startswith("--no-") else name
            if name in options or base in options:
                found = f"argparse of the pinned vLLM ({index.vllm_target})"
        elif kind == "env":
            found = index.env_reader(name)
        out.append(Name(name, kind, found, declared.get(name)))
    return out


def index_for(store: Store, manifest: dict[str, Any]) -> SourceIndex | None:
    """An index over the manifest's result trees, if the store holds them."""
    trees = {t: info["tree"] for t, info in manifest.get("targets", {}).items() if info.get("tree")}
    if not trees or not all(store.has_object(sha) for sha in trees.values()):
        return None
    return SourceIndex(store, trees)


def check_names(profile: Any, server_argv: list[str], env: dict[str, str], index: SourceIndex,
                rule_env: dict[str, str]) -> tuple[list[str], list[dict[str, str]]]:
    """(problems, unverified): a name neither in the pinned source nor declared is a problem; declared
    ones, and names rules use that the source never reads, are listed as unverified."""
    declared = dict(profile.spec.unverified)
    problems: list[str] = []
    unverified: list[dict[str, str]] = []
    for n in look_up(plan_names(server_argv, env), index, declared):
        if n.found:
            continue
        if n.declared:
            unverified.append({"name": n.name, "kind": n.kind, "source": n.declared})
            continue
        if n.kind == "env" and n.name in profile.spec.env:
            where = profile.where("env", n.name)
        elif n.kind in ("option", "config-key"):
            where = profile.where("tt") if n.kind == "config-key" or n.name == "--override-tt-config" else profile.where("vllm")
        else:
            where = profile.where("enable")
        problems.append(f"{where}: {n.kind} {n.name} exists nowhere in the pinned source "
                        f"({_how(n.kind)}); fix the name, or declare it under 'unverified:' with where it comes from")
    for name, rule in sorted(rule_env.items()):
        if name in declared:
            unverified.append({"name": name, "kind": "env", "source": declared[name]})
        elif index.env_reader(name) is None:
            unverified.append({"name": name, "kind": "env",
                               "source": f"named by rule {rule}; the pinned source never reads it"})
    return problems, unverified


def _how(kind: str) -> str:
    return {"option": "not defined by the pinned vLLM's argparse",
            "env": "no pinned .py file reads it from the environment",
            "config-key": "a --override-tt-config key belongs to the TT build of vLLM, which is not pinned"}[kind]
