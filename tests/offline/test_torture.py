"""Torture: the extractor over every top-level function and class of modules chosen by a rule.

Rule (not hand-picked): of each pinned tree's Python modules under its package roots, the
``MODULES_PER_TREE`` whose ``sha256(path)`` sort first; in each, every top-level ``def`` and
``class`` name. Each definition is extracted on its own, with no stubs, and must be either

- **extracted and not silently wrong**: every global name its code (and its methods' code, nested
  functions included) loads is bound in the extracted namespace or is a builtin, so no call can
  hit a ``NameError`` from a missing binding; a function is the file's (last) definition of that
  name, at its real file and line; a dataclass has exactly the fields its body declares
  (``ClassVar`` / ``InitVar`` excluded); or
- **refused** with an ``ExtractError`` whose message starts with ``<file>:<line>:`` and says why.

Anything else (another exception type, a message without file and line) is a crash. The counts
are printed in the test report (``offline torture`` section) and written to
``build/offline/torture.json``.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import dis
import hashlib
import inspect
import json
import re
import types
from collections import Counter
from pathlib import Path

import pytest

from materialize.offline import extract
from materialize.offline.errors import ExtractError
from materialize.tree import read_text

MODULES_PER_TREE = 20
ROOTS = {"tt-metal": ("ttnn/", "tracy/"), "plugin": ("vllm/",)}
REPO = Path(__file__).resolve().parents[2]
RESULTS: dict[str, dict] = {}


def chosen_modules(tree, target: str) -> list[str]:
    """The rule: the MODULES_PER_TREE .py files under the target's roots with the smallest sha256(path)."""
    paths = [p for p in tree.store.list_tree(tree.tree) if p.endswith(".py") and p.startswith(ROOTS[target])]
    return sorted(paths, key=lambda p: hashlib.sha256(p.encode()).hexdigest())[:MODULES_PER_TREE]


def definitions(text: str) -> list[tuple[str, int, str]]:
    """(name, line, kind) of every top-level def/class, last definition of a name wins."""
    found: dict[str, tuple[str, int, str]] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            found[node.name] = (node.name, node.lineno, kind)
    return list(found.values())


def _functions(obj, seen: set[int]) -> list[types.FunctionType]:
    """The functions of ``obj``: itself (unwrapped) or every method-like attribute of a class."""
    out: list[types.FunctionType] = []
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if isinstance(obj, type):
        for value in vars(obj).values():
            out += _functions(value, seen)
        return out
    if isinstance(obj, types.FunctionType):
        out.append(obj)
        inner = getattr(obj, "__wrapped__", None)
        return out + (_functions(inner, seen) if inner is not None else [])
    for attr in ("__func__", "fget", "fset", "fdel", "func", "__wrapped__"):
        inner = getattr(obj, attr, None)
        if inner is not None and inner is not obj:
            out += _functions(inner, seen)
    return out


def _global_loads(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_loads(const)
    return names


def _declared_fields(text: str, name: str) -> list[str]:
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            fields = []
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    annotation = ast.unparse(stmt.annotation)
                    if not re.match(r"^[\"']?(typing\.|dataclasses\.)?(ClassVar|InitVar)\b", annotation):
                        fields.append(stmt.target.id)
            return fields
    return []


def _silently_wrong(ns, name: str, line: int, kind: str, text: str, display: str) -> str | None:
    obj = vars(ns).get(name)
    if obj is None:
        return f"{name} is not in the extracted namespace"
    if kind == "def":
        fn = inspect.unwrap(obj) if callable(obj) else obj
        code = getattr(fn, "__code__", None)
        if code is not None and (code.co_filename, code.co_firstlineno) != (display, line) and fn.__name__ == name:
            return f"{name} is {code.co_filename}:{code.co_firstlineno}, not the file's definition at line {line}"
    elif isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == ns.__name__:
        fields = [f.name for f in dataclasses.fields(obj) if f.name in vars(obj).get("__annotations__", {})]
        declared = _declared_fields(text, name)
        if fields != declared:
            return f"dataclass {name} has fields {fields}, the file declares {declared}"
    missing = set()
    for fn in _functions(obj, set()):
        if fn.__code__.co_filename != display:
            continue  # inherited or generated (enum, dataclasses): not the file's code
        missing |= {g for g in _global_loads(fn.__code__) if g not in fn.__globals__ and not hasattr(builtins, g)}
    if missing:
        return f"{name} loads globals nothing binds: {sorted(missing)}"
    return None


def torture(tree, target: str) -> dict:
    counts: Counter[str] = Counter()
    problems: list[str] = []
    reasons: Counter[str] = Counter()
    refusals: list[str] = []
    for path in chosen_modules(tree, target):
        display = tree.display_path(path)
        try:
            text = read_text(tree, path)
            defs = definitions(text)
        except (SyntaxError, UnicodeDecodeError):
            continue  # not Python 3.11 source: nothing to extract
        for name, line, kind in defs:
            try:
                ns = extract(tree, path, name)
            except ExtractError as exc:
                message = str(exc)
                if not re.match(rf"^{re.escape(display)}:\d+: \S", message):
                    problems.append(f"refusal without file:line: {display} {name}: {message[:300]}")
                    continue
                counts["refused"] += 1
                reasons[_reason(message)] += 1
                refusals.append(f"{name}: {message[:400]}")
                continue
            except Exception as exc:  # noqa: BLE001 - a crash is exactly what this test looks for
                problems.append(f"CRASH {display}:{line} {name}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            wrong = _silently_wrong(ns, name, line, kind, text, display)
            if wrong is not None:
                problems.append(f"SILENTLY WRONG {display}:{line}: {wrong}")
            else:
                counts["extracted"] += 1
        counts["modules"] += 1
    counts["definitions"] = counts["extracted"] + counts["refused"] + len(problems)
    return {"counts": dict(counts), "reasons": dict(reasons.most_common()), "problems": problems, "refusals": refusals}


def _reason(message: str) -> str:
    body = message.split(": ", 1)[1] if ": " in message else message
    for pattern, label in [
        (r"heavy import", "heavy import (ttnn/torch/vllm)"),
        (r"neither stdlib nor in the allowed list", "third-party import not allowed"),
        (r"relative import", "relative import into the tree"),
        (r"only imported under `if TYPE_CHECKING:`", "TYPE_CHECKING-only name used at run time"),
        (r"star import", "star import"),
        (r"nothing in the file binds it", "unbound name"),
        (r"reads '.*' from its instance", "self.attr nothing provides"),
        (r"cannot keep both", "import rebinding order"),
    ]:
        if re.search(pattern, body):
            return label
    return body[:60]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Module-level code of the trees may create directories (tracy's mkdir): keep them in tmp."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TT_METAL_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("target", ["tt-metal", "plugin"])
def test_every_definition_is_extracted_correctly_or_refused_with_a_reason(upstream, sandbox, target, request):
    result = torture(upstream[target], target)
    RESULTS[target] = result
    out = REPO / "build" / "offline" / "torture.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps({**previous, target: result}, indent=2) + "\n")
    counts = result["counts"]
    assert not result["problems"], "\n".join(result["problems"])
    assert counts["definitions"] >= 100, counts
    # useful, not refusing everything (most of vLLM needs torch or vllm itself: refused, by design)
    assert counts["extracted"] >= counts["definitions"] // 10, counts


