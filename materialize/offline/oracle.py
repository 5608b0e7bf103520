"""Differential oracle for the extractor: real modules against their extractions.

For a module Python can import (the standard library, pure-Python packages that import nothing
heavy), every top-level ``def`` / ``class`` is extracted from the module's own file and compared
with the imported object: same kind of object (a decorator kept), same code, defaults, closure
and class members, and the same value for every global name its code reads (``LOAD_GLOBAL`` /
``LOAD_NAME`` of every code object in it, resolved in the module's namespace, then builtins),
recursively through the file's own functions, classes and containers. A difference that is not an
``ExtractError`` is a *fail-open*: the extraction silently behaves differently from the module.

    python -m materialize.offline.oracle                 # the stdlib sweep (each module in a child)
    python -m materialize.offline.oracle json shlex      # some modules
    python -m materialize.offline.oracle --site          # pure-Python site-packages too

``tests/offline/test_extract_oracle.py`` runs a fixed sample of it in ``make test``.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dis
import functools
import importlib
import importlib.util
import json
import re
import subprocess
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from materialize.offline.errors import ExtractError

SKIP_MODULES = frozenset(
    {
        "antigravity", "this", "__main__", "__hello__", "__phello__", "idlelib", "tkinter", "turtle",
        "turtledemo", "test", "ensurepip", "lib2to3", "pydoc_data", "venv", "xxsubtype", "_pydecimal",
        "pdb", "pydoc", "webbrowser", "site", "sitecustomize", "usercustomize", "msilib", "winreg",
        "_winapi", "nturl2path", "ntpath", "_osx_support", "_aix_support", "_bootsubprocess",
        "_pyrepl", "idle", "distutils", "_distutils_hack", "setuptools", "pip", "pkg_resources",
    }
)  # fmt: skip
"""Modules the sweep never imports: side effects at import (a browser, a GUI, output), or Windows-only."""

HEAVY = ("ttnn", "torch", "vllm")

_MISSING = object()
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass
class Result:
    module: str
    checked: int = 0
    refused: int = 0
    mismatches: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)  # extraction raised something other than ExtractError
    reasons: dict[str, int] = field(default_factory=dict)
    unstable: list[str] = field(default_factory=list)
    missing: bool = False  # no source file found: nothing was checked
    unimportable: str = ""  # the module itself cannot be imported here (win32 only, …): nothing was checked
    members_checked: int = 0  # `Class.method` extractions compared
    members_refused: int = 0
    state_changed: list[str] = field(default_factory=list)  # process state the real import changed


def _source_origin(spec: Any) -> str | None:
    """The source file of ``spec``: its origin, or for a module frozen into the interpreter (``os``,
    ``runpy``, ``zipimport`` since 3.11: origin ``"frozen"``) the file it was frozen from, which the
    extractor reads like any other."""
    if spec is None or not spec.origin:
        return None
    origin = spec.origin
    if origin == "frozen":
        origin = getattr(spec.loader_state, "filename", None) or ""
        if not origin:  # importlib._bootstrap: no filename recorded; the stdlib holds its source
            stdlib = Path(sysconfig.get_paths()["stdlib"])
            rel = (getattr(spec.loader_state, "origname", None) or spec.name).replace(".", "/")
            candidates = [stdlib / f"{rel}.py", stdlib / rel / "__init__.py"]
            origin = next((str(c) for c in candidates if c.is_file()), "")
    return origin if origin.endswith(".py") else None


def module_file(modname: str) -> tuple[Path, str] | None:
    """``(root, path)`` of ``modname``'s source: ``root / path`` is the file, ``path`` its dotted name as a path."""
    try:
        spec = importlib.util.find_spec(modname)
    except (ImportError, ValueError):
        return None
    found = _source_origin(spec)
    if found is None:
        return None
    origin = Path(found)
    parts = modname.split(".")
    rel = "/".join(parts) + ("/__init__.py" if origin.name == "__init__.py" else ".py")
    root = origin
    for _ in range(len(rel.split("/"))):
        root = root.parent
    if not (root / rel).is_file():
        return None
    return root, rel


def _resolve(namespace: dict, name: str) -> Any:
    if name in namespace:
        return namespace[name]
    builtins_ = namespace.get("__builtins__", {})
    if isinstance(builtins_, types.ModuleType):
        builtins_ = vars(builtins_)
    return builtins_.get(name, _MISSING)


def _global_reads(code: types.CodeType) -> set[str]:
    """Names ``code`` (and the code nested in it) reads as globals; a class body's own names excluded."""
    names: set[str] = set()
    stored: set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "DELETE_GLOBAL"):  # a `global x` store reads nothing
            names.add(ins.argval)
        elif ins.opname == "STORE_NAME":
            stored.add(ins.argval)
    names -= stored
    names.discard("__import__")  # the extraction's is the import policy's guard, on purpose
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_reads(const)
    return names


class Comparer:
    """Structural comparison of an imported object with its extracted twin."""

    def __init__(self, real_ns: dict, extracted_ns: dict, depth: int = 8, skip: set[str] = frozenset()) -> None:
        self.skip = skip
        self.real_ns = real_ns
        self.extracted_ns = extracted_ns
        self.depth = depth
        self._seen: set[tuple[int, int]] = set()

    def diff(self, real: Any, got: Any, where: str, depth: int = 0) -> str | None:
        """None when ``got`` stands for ``real``; else what differs, at ``where``."""
        if real is got or (real is builtins.__import__ and getattr(got, "__qualname__", "").startswith("ImportPolicy.")):
            return None  # the extraction's __import__ is the import policy's guard, on purpose
        key = (id(real), id(got))
        if key in self._seen or depth > self.depth:
            return None
        self._seen.add(key)
        if real is _MISSING or got is _MISSING:
            return (
                f"{where}: {'missing' if got is _MISSING else 'bound'} in the extraction, "
                + ("bound" if real is not _MISSING else "missing")
                + " in the module"
            )
        # two classes' metaclasses are compared with the classes; an instance of the file's own class
        # has the extraction's twin of that class
        if type(real) is not type(got) and not (isinstance(real, type) and isinstance(got, type)):
            if type(real).__module__ != real_ns_name(self.real_ns):
                return f"{where}: {type(got).__name__} in the extraction, {type(real).__name__} in the module"
            found = self.diff(type(real), type(got), f"{where} (type)", depth + 1)
            if found:
                return found
        if isinstance(real, types.ModuleType):
            return f"{where}: another module ({got.__name__} vs {real.__name__})"
        if isinstance(real, types.FunctionType):
            return self._function(real, got, where, depth)
        if isinstance(real, type):
            return self._class(real, got, where, depth)
        if isinstance(real, staticmethod | classmethod):
            return self.diff(real.__func__, got.__func__, where, depth + 1)
        if isinstance(real, property):
            for part in ("fget", "fset", "fdel"):
                found = self.diff(getattr(real, part), getattr(got, part), f"{where}.{part}", depth + 1)
                if found:
                    return found
            return None
        if isinstance(real, functools.partial):
            return (
                self.diff(real.func, got.func, f"{where}.func", depth + 1)
                or self.diff(list(real.args), list(got.args), f"{where}.args", depth + 1)
                or self.diff(dict(real.keywords), dict(got.keywords), f"{where}.keywords", depth + 1)
            )
        if isinstance(real, dict):
            if list(map(repr, real)) != list(map(repr, got)):
                if set(map(repr, real)) == set(map(repr, got)):
                    return f"{where}: keys in another order"
                return f"{where}: keys {sorted(set(map(repr, got)) ^ set(map(repr, real)))[:6]} differ"
            for (k, v), w in zip(real.items(), got.values(), strict=True):
                found = self.diff(v, w, f"{where}[{k!r}]", depth + 1)
                if found:
                    return found
            return None
        if isinstance(real, list | tuple):
            if len(real) != len(got):
                return f"{where}: length {len(got)} in the extraction, {len(real)} in the module"
            for i, (v, w) in enumerate(zip(real, got, strict=True)):
                found = self.diff(v, w, f"{where}[{i}]", depth + 1)
                if found:
                    return found
            return None
        if isinstance(real, set | frozenset):
            a, b = sorted(map(self._text, real)), sorted(map(self._text, got))
            return None if a == b else f"{where}: set {b[:4]} in the extraction, {a[:4]} in the module"
        if hasattr(real, "__wrapped__") and hasattr(got, "__wrapped__"):  # lru_cache, wraps
            found = self.diff(real.__wrapped__, got.__wrapped__, f"{where}.__wrapped__", depth + 1)
            if found:
                return found
        if isinstance(real, types.GeneratorType):  # by its state, not its repr (never advanced here)
            if (real.gi_frame is None) != (got.gi_frame is None):
                return f"{where}: generator {'exhausted' if got.gi_frame is None else 'running'} in the extraction"
            if real.gi_frame is None:
                return None
            if _code_key(real.gi_code) != _code_key(got.gi_code) or real.gi_frame.f_lasti != got.gi_frame.f_lasti:
                return f"{where}: generator at another point in the extraction"
            return self.diff(dict(real.gi_frame.f_locals), dict(got.gi_frame.f_locals), f"{where}.<locals>", depth + 1)
        if hasattr(type(real), "__next__") and type(real).__module__ == "builtins":
            try:  # a builtin iterator (list_iterator, zip, map, …) says where it is through __reduce__
                state_real, state_got = real.__reduce__(), got.__reduce__()
            except Exception:  # noqa: BLE001
                return f"{where}: an iterator whose position cannot be compared"
            return self.diff(list(state_real[1:]), list(state_got[1:]), f"{where}.<iterator state>", depth + 1)
        if type(real).__module__ == real_ns_name(self.real_ns):  # an instance of the file's own class
            return self.diff(
                getattr(real, "__dict__", {}), getattr(got, "__dict__", {}), f"{where}.__dict__", depth + 1
            )
        try:
            if real == got:
                return None
        except Exception:  # noqa: BLE001,S110 - incomparable: fall back to the text
            pass
        if self._text(real) == self._text(got):
            return None
        return f"{where}: {self._text(got)[:80]} in the extraction, {self._text(real)[:80]} in the module"

    @staticmethod
    def _text(value: Any) -> str:
        try:
            return _ADDRESS.sub("", repr(value))
        except Exception:  # noqa: BLE001
            return type(value).__name__

    def _function(
        self, real: types.FunctionType, got: types.FunctionType, where: str, depth: int
    ) -> str | None:
        rc, gc = real.__code__, got.__code__
        if _code_key(rc) != _code_key(gc):
            return f"{where}: another code object ({gc.co_qualname}:{gc.co_firstlineno} vs {rc.co_qualname}:{rc.co_firstlineno})"
        for part in ("__defaults__", "__kwdefaults__", "__name__", "__qualname__", "__doc__", "__module__"):
            found = self.diff(getattr(real, part), getattr(got, part), f"{where}.{part}", depth + 1)
            if found:
                return found
        if set(real.__dict__) != set(got.__dict__):
            return f"{where}: attributes {sorted(set(real.__dict__) ^ set(got.__dict__))} differ"
        for name, value in real.__dict__.items():
            found = self.diff(value, got.__dict__[name], f"{where}.{name}", depth + 1)
            if found:
                return found
        for i, (a, b) in enumerate(zip(real.__closure__ or (), got.__closure__ or (), strict=True)):
            try:
                va, vb = a.cell_contents, b.cell_contents
            except ValueError:
                continue
            found = self.diff(va, vb, f"{where}.<closure {rc.co_freevars[i]}>", depth + 1)
            if found:
                return found
        return self._globals(rc, real.__globals__, got.__globals__, where, depth)

    def _globals(self, code: types.CodeType, real_g: dict, got_g: dict, where: str, depth: int) -> str | None:
        for name in sorted(_global_reads(code) - self.skip if real_g is self.real_ns else _global_reads(code)):
            found = self.diff(
                _resolve(real_g, name), _resolve(got_g, name), f"{where} -> global {name}", depth + 1
            )
            if found:
                return found
        return None

    def _class(self, real: type, got: type, where: str, depth: int) -> str | None:
        if (real.__name__, real.__qualname__) != (got.__name__, got.__qualname__):
            return f"{where}: class {got.__qualname__} vs {real.__qualname__}"
        found = self.diff(type(real), type(got), f"{where} (metaclass)", depth + 1)
        if found:
            return found
        if len(real.__bases__) != len(got.__bases__):
            return (
                f"{where}: {len(got.__bases__)} bases in the extraction, {len(real.__bases__)} in the module"
            )
        for i, (a, b) in enumerate(zip(real.__bases__, got.__bases__, strict=True)):
            found = self.diff(a, b, f"{where}.__bases__[{i}]", depth + 1)
            if found:
                return found
        real_d, got_d = dict(vars(real)), dict(vars(got))
        for d in (real_d, got_d):
            for skip in ("__dict__", "__weakref__", "__module__"):
                d.pop(skip, None)
        if set(real_d) != set(got_d):
            return f"{where}: members {sorted(set(real_d) ^ set(got_d))[:6]} differ"
        for name, value in real_d.items():
            found = self.diff(value, got_d[name], f"{where}.{name}", depth + 1)
            if found:
                return found
        return None


def _code_key(code: types.CodeType) -> tuple:
    """What identifies the source a code object was compiled from (not its bytecode: the compiler's
    choices, LOAD_METHOD or LOAD_ATTR, depend on the lines around it)."""
    return (
        code.co_qualname,
        code.co_firstlineno,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        tuple(_const_key(c) for c in code.co_consts),
    )


def _const_key(const: Any) -> Any:
    if isinstance(const, types.CodeType):
        return _code_key(const)
    if isinstance(const, frozenset):  # `x in {"a", "b"}`: its order is the order it was built in (.pyc or not)
        return ("frozenset", tuple(sorted(map(repr, const))))
    if isinstance(const, tuple):
        return tuple(_const_key(c) for c in const)
    return repr(const)


def real_ns_name(namespace: dict) -> str:
    return namespace.get("__name__", "")


def fresh_module(modname: str) -> types.ModuleType:
    """``modname`` executed anew from its file: the file's own doing, not what other modules (or
    calls since) changed in the imported one (``re`` registering with ``copyreg``, caches filled)."""
    importlib.import_module(modname)  # its package and its imports, as usual
    spec = importlib.util.find_spec(modname)
    assert spec is not None and spec.loader is not None
    if spec.origin == "frozen":  # executed from the file the extractor reads, not the interpreter's frozen copy
        source = _source_origin(spec)
        assert source is not None
        spec = importlib.util.spec_from_file_location(
            modname, source, submodule_search_locations=spec.submodule_search_locations
        )
        assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(modname)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if previous is not None:
            sys.modules[modname] = previous
    return module


_STATE_MODULES = ("os", "sys", "random", "decimal", "builtins", "warnings", "locale", "codecs")


def process_state() -> dict[str, Any]:
    """What an import can change in the process that an extraction never replays: builtins, the
    environment, the path, the random generator, the decimal context, warning filters, the locale.
    Keyed ``module`` or ``builtins.NAME``."""
    import decimal
    import locale
    import os
    import random
    import warnings

    state: dict[str, Any] = {f"builtins.{k}": id(v) for k, v in vars(builtins).items()}
    state["os"] = dict(os.environ)
    state["sys"] = list(sys.path)
    state["random"] = random.getstate()
    state["decimal"] = repr(decimal.getcontext())
    state["warnings"] = repr(warnings.filters)
    state["locale"] = repr(locale.setlocale(locale.LC_ALL))
    state["codecs"] = repr(sorted(getattr(__import__("encodings"), "_cache", {})))
    return state


def _state_diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if k != "codecs" and before.get(k, _MISSING) != after.get(k, _MISSING))


def _uses_state(obj: Any, namespace: dict, changed: list[str]) -> str | None:
    """The changed process state ``obj``'s code may read (a patched builtin it names, a module whose
    state changed that it reads through a global or imports locally), or None."""
    codes: list[types.CodeType] = []
    todo: list[Any] = [obj]
    seen: set[int] = set()
    while todo:
        item = todo.pop()
        if id(item) in seen:  # a class attribute holding its class, a method shared by two classes
            continue
        seen.add(id(item))
        if isinstance(item, staticmethod | classmethod):
            item = item.__func__
        if isinstance(item, property):
            todo += [f for f in (item.fget, item.fset, item.fdel) if f is not None]
        elif isinstance(item, types.FunctionType):
            codes.append(item.__code__)
        elif isinstance(item, type):
            todo += list(vars(item).values())
    names: set[str] = set()
    imports: set[str] = set()

    def walk(code: types.CodeType) -> None:
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names.add(ins.argval)
            elif ins.opname == "IMPORT_NAME":
                imports.add(str(ins.argval).split(".")[0])
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    for code in codes:
        walk(code)
    for key in changed:
        if key.startswith("builtins."):
            if key.split(".", 1)[1] in names:
                return key
            continue
        if key in imports:
            return key
        for name in names:
            value = namespace.get(name)
            origin = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else getattr(value, "__module__", "")
            if isinstance(origin, str) and origin.split(".")[0] == key:
                return key
    return None


def definitions(source: str) -> list[str]:
    """The names of the file's top-level ``def`` and ``class`` statements, in order, once each."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name not in names:
            names.append(node.name)
    return names


def check_module(modname: str, names: list[str] | None = None, allow: tuple[str, ...] = ()) -> Result:
    """Extract each top-level definition of ``modname`` and compare it with the imported one."""
    from materialize.offline.extract import extract
    from materialize.tree import DirTree

    result = Result(modname)
    located = module_file(modname)
    if located is None:
        result.missing = True
        return result
    root, rel = located
    before = process_state()  # before the real module runs: what it changes, an extraction does not
    module = fresh_module(modname)
    tree = DirTree(root, "oracle")
    # globals that differ between two imports (a time, a random value, an id) are not compared
    again = vars(fresh_module(modname))
    result.state_changed = _state_diff(before, process_state())
    for global_name, value in vars(module).items():
        if (
            global_name not in ("__builtins__", "__loader__", "__spec__")
            and not callable(value)
            and Comparer(vars(module), again).diff(value, again.get(global_name, _MISSING), global_name)
        ):
            result.unstable.append(global_name)
    for name in names if names is not None else definitions((root / rel).read_text("utf-8")):
        real = getattr(module, name, _MISSING)
        if name in result.unstable:
            continue
        try:
            extracted = extract(tree, rel, name, allow=allow)
        except ExtractError as exc:
            result.refused += 1
            reason = _reason(str(exc))
            result.reasons[reason] = result.reasons.get(reason, 0) + 1
            continue
        except Exception as exc:  # noqa: BLE001 - the extracted import-time code raised: loud, not silent
            result.crashed.append(f"{modname}.{name}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        result.checked += 1
        comparer = Comparer(vars(module), vars(extracted), skip=set(result.unstable))
        try:
            found = comparer.diff(real, extracted.__dict__.get(name, _MISSING), f"{modname}.{name}")
        except ExtractError:
            found = None  # a left-out member refused when touched: loud
        state = _uses_state(real, vars(module), result.state_changed) if not found else None
        if state:
            found = f"{modname}.{name}: reads {state}, which importing the module changed; the extraction has it unchanged"
        if found:
            result.mismatches.append(found)
        if isinstance(real, type):
            _check_members(result, modname, tree, rel, name, real, vars(module), allow)
    return result


MEMBERS_PER_CLASS = 2
"""`Class.method` extractions checked per class (its first and last method): the rest cost sweep time."""


def _check_members(
    result: Result, modname: str, tree: Any, rel: str, name: str, real: type, real_ns: dict, allow: tuple[str, ...]
) -> None:
    """Extract ``Class.method`` for some methods of the class and compare the class's members: a kept
    one as any definition, a left-out one by its kind (function, staticmethod, classmethod), which
    introspection sees."""
    from materialize.offline.extract import extract

    methods = [k for k, v in vars(real).items() if isinstance(v, types.FunctionType | staticmethod | classmethod)]
    for member in dict.fromkeys([*methods[:1], *methods[-1:]][:MEMBERS_PER_CLASS]):
        try:
            extracted = extract(tree, rel, f"{name}.{member}", allow=allow)
        except ExtractError:
            result.members_refused += 1
            continue
        except Exception as exc:  # noqa: BLE001
            result.crashed.append(f"{modname}.{name}.{member}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        result.members_checked += 1
        got = extracted.__dict__.get(name, _MISSING)
        where = f"{modname}.{name}.{member}"
        if not isinstance(got, type):
            result.mismatches.append(f"{where}: the class is not a class in the extraction")
            continue
        real_d, got_d = dict(vars(real)), dict(vars(got))
        if set(real_d) - {"__dict__", "__weakref__"} != set(got_d) - {"__dict__", "__weakref__"}:
            result.mismatches.append(f"{where}: members {sorted(set(real_d) ^ set(got_d))[:6]} differ")
            continue
        found = None
        for key, value in real_d.items():
            other = got_d[key]
            if key == member:
                try:
                    # the class itself (partly kept, compared here) and globals unstable across imports are skipped
                    skip = {*result.unstable, name}
                    comparer = Comparer(real_ns, vars(extracted), skip=skip)
                    # the class reached again (the `__class__` cell `super()` gives a method) is the
                    # one compared here, member by member: its left-out members are placeholders,
                    # compared by their kind below, not as whole definitions
                    comparer._seen.add((id(real), id(got)))
                    found = comparer.diff(value, other, f"{where}")
                except ExtractError:
                    found = None
            elif (isinstance(value, types.FunctionType | staticmethod | classmethod) and type(value) is not type(other)
                  and type(other).__name__ != "_LeftOut"):  # a property-like placeholder refuses when fetched
                found = f"{where}: left-out {key} is a {type(other).__name__}, a {type(value).__name__} in the module"
            if found:
                break
        if found:
            result.mismatches.append(found)


def _reason(message: str) -> str:
    text = message.split(": ", 1)[-1]
    text = re.sub(r"'[^']*'|`[^`]*`|\(.*?\)|line \d+|\d+", "…", text)
    return text[:90]


def stdlib_modules() -> list[str]:
    """Every pure-Python stdlib module and package module (``urllib.parse``), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        if parts[0] in SKIP_MODULES or "site-packages" in parts or "test" in parts or "tests" in parts:
            continue
        if any(not p.isidentifier() for p in parts):
            continue
        if len(parts) > 1 and not (root / parts[0] / "__init__.py").is_file():
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] in ("__main__",) or any(p in SKIP_MODULES for p in parts):
            continue
        out.append(".".join(parts))
    return out


def site_modules() -> list[str]:
    """Pure-Python top-level modules in site-packages whose package imports nothing heavy."""
    root = Path(sysconfig.get_paths()["purelib"])
    out = []
    for path in sorted(root.glob("*/*.py")) + sorted(root.glob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        if parts[0] in SKIP_MODULES or parts[0].startswith("_") or any(not p.isidentifier() for p in parts):
            continue
        if len(parts) > 1 and not (root / parts[0] / "__init__.py").is_file():
            continue
        text = path.read_text("utf-8", errors="replace")
        if any(re.search(rf"^\s*(from|import)\s+{h}\b", text, re.M) for h in HEAVY):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def _child(modules: list[str], allow: tuple[str, ...]) -> None:
    for modname in modules:
        try:
            result = check_module(modname, allow=allow)
        except BaseException as exc:  # noqa: BLE001 - the module itself cannot be imported here
            result = Result(modname, unimportable=f"{modname}: import: {type(exc).__name__}: {str(exc)[:100]}")
        print(json.dumps(result.__dict__), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m materialize.offline.oracle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("modules", nargs="*", help="modules to check (default: the whole stdlib)")
    parser.add_argument("--site", action="store_true", help="also pure-Python site-packages modules")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per module")
    parser.add_argument("--batch", type=int, default=20, help="modules per child process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write every result here")
    args = parser.parse_args(argv)
    allow: tuple[str, ...] = ()
    modules = args.modules or stdlib_modules()
    if args.site:
        site = site_modules()
        allow = tuple(sorted({m.split(".")[0] for m in site}))
        if not args.child and not args.modules:
            modules += site
    if args.child:
        _child(modules, allow)
        return 0
    results: list[dict] = []
    chunks = [modules[i : i + args.batch] for i in range(0, len(modules), args.batch)]
    while chunks:
        chunk = chunks.pop(0)
        command = [
            sys.executable,
            "-m",
            "materialize.offline.oracle",
            "--child",
            *(["--site"] if args.site else []),
            *chunk,
        ]
        try:
            done = subprocess.run(  # noqa: S603
                command, capture_output=True, text=True, timeout=args.timeout * len(chunk), check=False
            )
            found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"module"')]
            failure = None if len(found) == len(chunk) else f"child failed: {done.stderr.strip()[-200:]}"
        except subprocess.TimeoutExpired:
            found, failure = [], "timed out"
        if failure and len(chunk) > 1:
            chunks[:0] = [[m] for m in chunk]  # again one by one, to name the module
            continue
        if failure:
            found = [Result(chunk[0], crashed=[f"{chunk[0]}: {failure}"]).__dict__]
        for result in found:
            results.append(result)
            for line in result["mismatches"]:
                print(f"FAIL-OPEN {line}", flush=True)
            for line in result["crashed"]:
                print(f"crashed   {line}", flush=True)
            if result.get("missing"):
                print(f"missing   {result['module']}: no Python source found", flush=True)
            if result.get("unimportable"):
                print(f"skipped   {result['unimportable']}", flush=True)
    checked = sum(r["checked"] for r in results)
    refused = sum(r["refused"] for r in results)
    members = sum(r.get("members_checked", 0) for r in results)
    members_refused = sum(r.get("members_refused", 0) for r in results)
    mismatched = sum(len(r["mismatches"]) for r in results)
    crashed = sum(len(r["crashed"]) for r in results)
    # a module named on the command line must be checked; in the whole sweep one this platform cannot
    # import (win32 only) is listed as skipped
    unchecked = [r["module"] for r in results if r.get("missing") or (args.modules and r.get("unimportable"))]
    print(
        f"{len(results)} modules: {checked} definitions extracted and compared, {refused} refused, {mismatched} fail-open; "
        f"Class.method: {members} compared, {members_refused} refused; {crashed} crashed, {len(unchecked)} not checked"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    failed = []
    if mismatched:
        failed.append(f"{mismatched} fail-open")
    if crashed:
        failed.append(f"{crashed} crashed (an extraction raised something other than ExtractError, a child failed or timed out)")
    if unchecked:
        failed.append(f"not checked: {', '.join(unchecked)}")
    if checked + members == 0:
        failed.append("nothing was compared")
    if failed:
        print("FAILED: " + "; ".join(failed), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
