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

# Read by the Python interpreter itself, never by the served code: not looked up in the source. A profile
# may not set the ones that select code (constraints.CODE_SELECTING_ENV); PYTHONPATH, PYTHONNOUSERSITE,
# PYTHONSAFEPATH and a process's PATH come from the plan.
INTERPRETER_ENV = frozenset({"PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED",
                             "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PATH"})
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
    """The pinned trees of one materialization, searched in the store (no checkout).

    Why the memos: building ``cli_table`` asks for the annotation of every config field an
    ``add_argument`` unpacks (~460 of them in vLLM 0.11), and each used to ``git grep`` the whole
    vLLM tree for its class and parse the file it found: ~0.3 s a field, 50 s of CPU per ``serve
    plan``. Each grep, each parsed file and each class's definitions are now asked for once; what
    the trees yield (the option table, each environment variable's reader) is a pure function of
    their ids and of this module's code, so it is also kept in ``<cache>/serve-names/`` and an
    unchanged materialization is planned without reading its source again."""

    store: Store
    trees: dict[str, str]
    _options: dict[str, CliOption] | None = None
    _env: dict[str, str | None] = field(default_factory=dict)
    _greps: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    _modules: dict[tuple[str, str], ast.Module | None] = field(default_factory=dict)
    _classes: dict[str, list[ast.ClassDef]] = field(default_factory=dict)
    _kept: dict[str, Any] | None = None

    def grep_files(self, target: str, literal: str, pathspec: str = "*.py") -> list[str]:
        """Paths of ``target`` whose text contains ``literal``."""
        key = (target, literal, pathspec)
        if key not in self._greps:
            try:
                out = self.store.git("grep", "-l", "-F", "-e", literal, self.trees[target], "--", pathspec)
            except Exception:  # noqa: BLE001 - git grep exits 1 when nothing matches
                out = b""
            prefix = self.trees[target] + ":"
            self._greps[key] = [line[len(prefix):] for line in out.decode().splitlines() if line.startswith(prefix)]
        return self._greps[key]

    def read(self, target: str, path: str) -> str:
        return self.store.read_blob(self.trees[target], path).decode("utf-8", "replace")

    def module(self, target: str, path: str) -> ast.Module | None:
        """``path`` of ``target`` parsed once (None: not Python this interpreter reads)."""
        key = (target, path)
        if key not in self._modules:
            try:
                self._modules[key] = ast.parse(self.read(target, path))
            except SyntaxError:
                self._modules[key] = None
        return self._modules[key]

    @cached_property
    def vllm_target(self) -> str | None:
        """The target whose tree holds the pinned vLLM."""
        return find_vllm_target(self.trees, lambda t: store_has_vllm(self.store, self.trees[t]))

    def cli_options(self) -> set[str]:
        """Every option string the pinned vLLM's argparse defines (aliases and ``--no-x`` included)."""
        return set(self.cli_table())

    def cli_table(self) -> dict[str, CliOption]:
        """Option string -> the option it sets, for every option string the pinned vLLM's argparse
        defines: each ``add_argument`` literal (aliases such as ``-tp``), ``*FrontendArgs`` fields, and
        for a BooleanOptionalAction the ``--no-x`` (and, for ``--enable-x``, the ``--disable-x``) forms."""
        if self._options is None:
            try:
                self._options = {string: CliOption(name, tuple(strings), arity)
                                 for string, (name, strings, arity) in self._kept_results()["options"]}
                return self._options
            except (KeyError, TypeError, ValueError):  # nothing kept, or not in the shape written below
                pass
            options: dict[str, CliOption] = {}
            target = self.vllm_target
            if target is not None:
                for path in self.grep_files(target, "add_argument", f"{VLLM_ROOT}*.py"):
                    module = self.module(target, path)
                    if module is None:
                        continue
                    for option in _argparse_options(module, lambda cls: self.field_annotation(cls)):
                        for string in option.strings:
                            options.setdefault(string, option)
            self._options = options
            self._keep("options", [[string, [o.name, list(o.strings), o.arity]] for string, o in options.items()])
        return self._options

    def class_defs(self, name: str) -> list[ast.ClassDef]:
        """Every ``class name`` statement of the pinned vLLM, in the order ``git grep`` lists its files."""
        if name not in self._classes:
            found: list[ast.ClassDef] = []
            target = self.vllm_target
            if target is not None:
                for path in self.grep_files(target, f"class {name}", f"{VLLM_ROOT}*.py"):
                    module = self.module(target, path)
                    if module is not None:
                        found += [n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == name]
            self._classes[name] = found
        return self._classes[name]

    def field_annotation(self, cls_field: tuple[str, str]) -> ast.expr | None:
        """The annotation of ``field`` in the pinned vLLM's class ``cls`` (or a base class it names)."""
        cls, name = cls_field
        seen: set[str] = set()
        todo = [cls]
        while todo:
            current = todo.pop(0)
            if current in seen:
                continue
            seen.add(current)
            for node in self.class_defs(current):
                for item in node.body:
                    if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and item.target.id == name):
                        return item.annotation
                todo += [b.id for b in node.bases if isinstance(b, ast.Name)]
        return None

    def env_reader(self, name: str) -> str | None:
        """``target:path`` of a pinned file that names ``name`` and reads the environment, if any."""
        if name not in self._env:
            kept = self._kept_results().get("env", {})
            if isinstance(kept, dict) and isinstance(kept.get(name), str | None) and name in kept:
                self._env[name] = kept[name]
                return self._env[name]
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
            self._keep("env", {**(kept if isinstance(kept, dict) else {}), **self._env})
        return self._env[name]

    @cached_property
    def _kept_file(self):
        """``<cache>/serve-names/<key>.json``: the key hashes the trees and this module's own bytes,
        so a change to how names are found never reads an older result (computed once: each newly
        found environment reader rewrites the file)."""
        import json
        from pathlib import Path

        from materialize import digest

        code = Path(__file__).read_bytes()
        key = digest.sha256(json.dumps(sorted(self.trees.items())).encode() + b"\0" + code).hexdigest()[:40]
        return self.store.root / "serve-names" / f"{key}.json"

    def _kept_results(self) -> dict[str, Any]:
        """What an earlier plan of these trees found ({} when nothing, or nothing readable, is kept)."""
        if self._kept is None:
            import json

            try:
                kept = json.loads(self._kept_file.read_text("utf-8"))
            except (OSError, ValueError):
                kept = {}
            self._kept = kept if isinstance(kept, dict) else {}
        return self._kept

    def _keep(self, part: str, value: Any) -> None:
        """Best effort: a cache that cannot be written only means the next plan reads the source again."""
        import contextlib
        import json

        from materialize.atomic import atomic_write

        kept = {**self._kept_results(), part: value}
        self._kept = kept
        path = self._kept_file
        with contextlib.suppress(OSError):
            path.parent.mkdir(exist_ok=True)
            atomic_write(path, json.dumps(kept, sort_keys=True).encode())


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


@dataclass(frozen=True)
class CliOption:
    """One argparse action of the pinned vLLM: its option strings and how many words it takes.

    ``arity``: ``flag`` (no value: store_true/const, count), ``bool`` (BooleanOptionalAction, no value,
    also spelled ``--no-x``), ``optional`` (nargs='?'), ``many`` (nargs '+' / '*'), ``value`` (one)."""

    name: str
    strings: tuple[str, ...]
    arity: str


_FLAG_ACTIONS = frozenset({"store_true", "store_false", "store_const", "append_const", "count", "help", "version"})


def _annotation_members(node: ast.expr | None) -> set[str]:
    """Top-level members of a type annotation: ``bool | None`` -> {bool, None}."""
    if node is None:
        return set()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _annotation_members(node.left) | _annotation_members(node.right)
    if isinstance(node, ast.Subscript):
        head = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
        if head in ("Optional", "Union"):
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return set().union(*(_annotation_members(e) for e in inner)) | ({"None"} if head == "Optional" else set())
        return {head}
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            try:
                return _annotation_members(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                return {"?"}
        return {"None"} if node.value is None else {"?"}
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return {"?"}


def _field_arity(annotation: ast.expr | None) -> str:
    """What vLLM's ``get_kwargs`` makes of a config field: a bool becomes a BooleanOptionalAction,
    ``bool | str | None`` an optional value; anything else takes a value. Unknown: a value."""
    members = _annotation_members(annotation)
    if "bool" not in members:
        return "value"
    if members <= {"bool", "str", "None"} and "str" in members:
        return "optional"
    return "bool"


def _call_arity(call: ast.Call, kwargs_of: dict[str, str], annotation) -> str:
    """The arity of one ``add_argument`` call, from its keywords or the config field it unpacks."""
    explicit: dict[str, ast.expr] = {k.arg: k.value for k in call.keywords if k.arg}
    for unpacked in (k.value for k in call.keywords if k.arg is None):
        parts = unpacked.values if isinstance(unpacked, ast.Dict) else [unpacked]
        keys = unpacked.keys if isinstance(unpacked, ast.Dict) else [None]
        for key, part in zip(keys, parts, strict=True):
            if key is None and isinstance(part, ast.Subscript) and isinstance(part.value, ast.Name):
                cls, field_name = kwargs_of.get(part.value.id), part.slice
                if cls and isinstance(field_name, ast.Constant) and isinstance(field_name.value, str):
                    explicit.setdefault("__field__", ast.Constant((cls, field_name.value)))
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                explicit[key.value] = part
    action = explicit.get("action")
    if action is not None:
        name = action.value if isinstance(action, ast.Constant) else getattr(action, "attr", getattr(action, "id", ""))
        if name == "BooleanOptionalAction":
            return "bool"
        if name in _FLAG_ACTIONS:
            return "flag"
    nargs = explicit.get("nargs")
    if isinstance(nargs, ast.Constant):
        return {"?": "optional", "+": "many", "*": "many", 0: "flag"}.get(nargs.value, "value")
    found = explicit.get("__field__")
    if found is not None and action is None:
        return _field_arity(annotation(found.value))
    return "value"


def _with_negations(name: str, strings: list[str], arity: str) -> CliOption:
    """vLLM registers BooleanOptionalAction as EnableDisableAction: ``--x`` and ``--no-x``, and for
    ``--enable-x`` / ``--disable-x`` also the inverse and its ``--no-`` form."""
    strings = list(strings)
    if arity == "bool":
        for s in list(strings):
            if s.startswith("--"):
                strings.append("--no-" + s[2:])
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if s.startswith(prefix):
                        strings += [inverse + s[len(prefix):], "--no-" + inverse[2:] + s[len(prefix):]]
    return CliOption(name, tuple(dict.fromkeys(strings)), arity)


def _argparse_options(module: ast.Module, annotation=lambda cls_field: None) -> list[CliOption]:
    """The argparse options a module defines: ``add_argument`` literals and ``*FrontendArgs`` fields.
    ``annotation((cls, field))`` gives a config field's annotation (for ``**get_kwargs(Cls)[field]``)."""
    kwargs_of: dict[str, str] = {}
    for node in ast.walk(module):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", getattr(node.value.func, "attr", None)) == "get_kwargs"
                and node.value.args and isinstance(node.value.args[0], ast.Name)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    kwargs_of[target.id] = node.value.args[0].id
    options: list[CliOption] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            strings = [a.value for a in node.args
                       if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
            if strings:
                name = next((s for s in strings if s.startswith("--")), strings[0])
                options.append(_with_negations(name, strings, _call_arity(node, kwargs_of, annotation)))
        elif isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = "--" + item.target.id.replace("_", "-")
                    options.append(_with_negations(name, [name], _field_arity(item.annotation)))
    return options


@dataclass(frozen=True)
class ArgWord:
    """One word of a vLLM command line, resolved: the option it sets (``None``: a value, or unknown)."""

    index: int
    word: str
    option: CliOption | None
    spelled: str          # the option string as argparse will see it (``--x``), or the word
    problem: str | None = None


def resolve_vllm_args(words: list[str], table: dict[str, CliOption]) -> list[ArgWord]:
    """Every option word of ``words``, resolved as vLLM's FlexibleArgumentParser reads it (``--x_y`` is
    ``--x-y``, ``--x.key v`` sets ``--x``, ``-O3`` is ``--optimization-level 3``) and then argparse
    (exact option strings, ``--x=v``, a short option with its value attached: ``-q8``). argparse's
    abbreviations are not resolved: a word that is not an option string is a problem. A word no
    option takes as its value would be a positional (``model_tag``): a problem too."""
    out: list[ArgWord] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or not word.startswith("-") or len(word) == 1 or _is_number(word):
            out.append(ArgWord(i, word, None, word, f"{word!r} is a bare word that no option before it takes as "
                                                     f"its value: argparse would read it as a positional"))
            i += 1
            continue
        attached = "=" in word
        key = word.split("=", 1)[0]
        if key.startswith("--"):
            head, dot, _ = key[2:].partition(".")
            spelled, dotted = "--" + head.replace("_", "-"), bool(dot)
        elif key.startswith("-O") and key != "-O":
            spelled, dotted, attached = "--optimization-level", False, True
        else:
            head, dot, _ = key.partition(".")
            spelled, dotted = head, bool(dot)
        option = table.get(spelled)
        if option is None and not key.startswith("--") and not dotted and len(key) > 2 and key[:2] in table:
            spelled, option, attached = key[:2], table[key[:2]], True
        if option is None:
            out.append(ArgWord(i, word, None, spelled, _unknown(spelled, table)))
            i += 1
            continue
        takes = "value" if dotted else option.arity
        if attached and takes in ("flag", "bool"):
            out.append(ArgWord(i, word, option, spelled, f"{word}: {spelled} takes no value"))
            i += 1
            continue
        out.append(ArgWord(i, word, option, spelled))
        i += 1
        if attached or takes in ("flag", "bool"):
            continue
        values = 0
        while i < len(words) and (not words[i].startswith("-") or _is_number(words[i])):
            values += 1
            i += 1
            if takes != "many":
                break
        if values == 0 and takes in ("value", "many"):
            out[-1] = ArgWord(out[-1].index, word, option, spelled, f"{word}: {spelled} needs a value")
    return out


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _unknown(spelled: str, table: dict[str, CliOption]) -> str:
    if spelled.startswith("--no-") and ("--" + spelled[5:]) in table:
        return (f"{spelled} is not an option of the pinned vLLM: --{spelled[5:]} is not a boolean "
                f"(BooleanOptionalAction), so it has no --no- form")
    return (f"{spelled} is not an option of the pinned vLLM's argparse (nor an alias of one; abbreviations "
            f"are not accepted: write the option in full)")


@dataclass(frozen=True)
class Name:
    """One name a plan uses, what kind it is, and where the pinned source defines it (or not)."""

    name: str
    kind: str            # option | env | config-key
    found: str | None    # where it was found in the pinned source
    declared: str | None  # the profile's unverified: entry


def plan_names(server_argv: list[str], env: dict[str, str]) -> list[tuple[str, str]]:
    """(name, kind) of every ``--override-tt-config`` key and environment variable in a plan (options
    are resolved by ``resolve_vllm_args``)."""
    names: list[tuple[str, str]] = []
    for i, word in enumerate(server_argv):
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
    out = []
    for name, kind in names:
        found = index.env_reader(name) if kind == "env" else None
        out.append(Name(name, kind, found, declared.get(name)))
    return out


def index_for(store: Store, manifest: dict[str, Any]) -> SourceIndex | None:
    """An index over the manifest's result trees, if the store holds them."""
    trees = {t: info["tree"] for t, info in manifest.get("targets", {}).items() if info.get("tree")}
    if not trees or not all(store.has_object(sha) for sha in trees.values()):
        return None
    return SourceIndex(store, trees)


def check_options(profile: Any, server_argv: list[str], index: SourceIndex, declared: dict[str, str],
                  extra_from: int) -> tuple[list[str], list[dict[str, str]]]:
    """Every option the plan renders (``server_argv[:extra_from]``) exists in the pinned argparse; every
    word of ``extra_args`` (``server_argv[extra_from:]``) resolves through it (aliases included) to an
    option, or is the value of one, or names an option the profile declares unverified. An extra word
    that reaches a managed option, through any alias, is refused: argparse lets the last value win over
    the one the plan rendered and the rules checked."""
    from materialize.serve.constraints import CODE_SELECTING_VLLM_OPTIONS, MANAGED_VLLM_OPTIONS

    table = index.cli_table()
    stand_ins = {n: CliOption(n, (n,), "value") for n in declared if n.startswith("-") and n not in table}
    problems: list[str] = []
    unverified: list[dict[str, str]] = []
    # The words the plan renders, read as vLLM will read them (as extra_args below): each option an option
    # string of the pinned argparse (``--no-x`` only where ``--x`` is a BooleanOptionalAction: a store_true
    # has no negation, and vLLM would refuse the argv at boot, on hardware), taking the values rendered.
    after_unknown = False
    for w in resolve_vllm_args(server_argv[:extra_from], {**table, **stand_ins}):
        where = profile.where("tt") if w.spelled == "--override-tt-config" else profile.where("vllm")
        if w.option is not None and w.spelled in stand_ins:
            unverified.append({"name": w.spelled, "kind": "option", "source": declared[w.spelled]})
        if w.option is None and w.word.startswith("-") and not _is_number(w.word):
            problems.append(f"{where}: option {w.spelled} exists nowhere in the pinned source ({w.problem}); "
                            f"fix the name, or declare it under 'unverified:' with where it comes from")
        elif w.problem and not (after_unknown and w.option is None):  # an unknown option's value: said above
            problems.append(f"{where}: {w.problem} (rendered from the profile's fields)")
        after_unknown = w.option is None and w.word.startswith("-")
    # The words of extra_args: each resolved as vLLM will read it, or refused.
    for w in resolve_vllm_args(server_argv[extra_from:], {**table, **stand_ins}):
        where = profile.where("vllm", "extra_args", w.index)
        if w.option is not None and w.spelled in stand_ins:
            unverified.append({"name": w.spelled, "kind": "option", "source": declared[w.spelled]})
        elif w.option is None and w.problem and w.word.startswith("-") and not _is_number(w.word):
            problems.append(f"{where}: option {w.spelled} exists nowhere in the pinned source ({w.problem}); "
                            f"fix the name, or declare it under 'unverified:' with where it comes from")
            continue
        if w.problem:
            problems.append(f"{where}: {w.problem}")
            continue
        managed = sorted(set(w.option.strings if w.option else ()) & MANAGED_VLLM_OPTIONS)
        if managed:
            problems.append(f"{where}: {w.word} reaches {managed[0]} ({', '.join(w.option.strings)} in the pinned "
                            f"vLLM's argparse), which the plan renders from the profile's fields and the rules "
                            f"check; argparse lets the last value win, so set it there (rule extra-args-not-managed)")
        selecting = sorted(set(w.option.strings if w.option else ()) & set(CODE_SELECTING_VLLM_OPTIONS))
        if selecting:
            problems.append(f"{where}: {w.word} reaches {selecting[0]} ({', '.join(w.option.strings)} in the pinned "
                            f"vLLM's argparse), which {CODE_SELECTING_VLLM_OPTIONS[selecting[0]]} "
                            f"(rule extra-args-do-not-select-code)")
    return problems, unverified


def check_names(profile: Any, server_argv: list[str], env: dict[str, str], index: SourceIndex,
                rule_env: dict[str, str], extra_from: int | None = None) -> tuple[list[str], list[dict[str, str]]]:
    """(problems, unverified): a name neither in the pinned source nor declared is a problem; declared
    ones, and names rules use that the source never reads, are listed as unverified. ``server_argv`` is
    the vLLM options the plan renders followed by ``vllm.extra_args`` (which start at ``extra_from``)."""
    declared = dict(profile.spec.unverified)
    if extra_from is None:
        extra_from = len(server_argv) - len(profile.spec.vllm.extra_args)
    problems, unverified = check_options(profile, server_argv, index, declared, extra_from)
    for n in look_up(plan_names(server_argv, env), index, declared):
        if n.found:
            continue
        if n.declared:
            unverified.append({"name": n.name, "kind": n.kind, "source": n.declared})
            continue
        if n.kind == "env" and n.name in profile.spec.env:
            where = profile.where("env", n.name)
        elif n.kind == "config-key":
            where = profile.where("tt")
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
