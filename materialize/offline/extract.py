"""Extract named definitions from one file of a tree, with exactly the module-level code they need.

Offline tests must run the *real* patched functions without importing ttnn, torch or vLLM (compiled
extensions, hardware, slow noisy imports). ``extract`` parses the file with libcst, finds what each
requested definition needs through ``ScopeProvider`` (transitively: functions, classes, constants,
imports), and executes only that code in a fresh module-like namespace.

How the code is executed, and why:
- The kept statements are compiled from the *original* text with every other line blanked, so line
  and column numbers are the real ones; the real text is registered in ``linecache`` under
  ``tree.display_path(path)``, so a traceback shows the real file, line and source.
- Module-level imports are not executed as text: each needed alias is bound by the extractor, which
  refuses heavy packages (ttnn, torch, vllm by default) and anything that is neither stdlib nor in
  ``allow``, naming the import, its line and the definition that needed it. A stub given by the test
  for that name is bound instead. Imports that run later (inside functions, or inside a kept
  ``try``/``if`` block) go through a guarded ``__import__`` with the same policy.
- Compiled in memory with ``from __future__ import annotations``: annotations are never evaluated,
  so names used only in annotations (often ``if TYPE_CHECKING:`` imports) are not needed.
- Nothing is written: no module is imported from the tree and no bytecode is produced.

Dependency rule: a name used by code that runs at definition time (module level, class bodies,
decorators, default values) resolves to the last binding *before* that statement; a name used
inside a function body resolves to the module's final binding, as Python does at call time.
"""

from __future__ import annotations
import __future__

import bisect
import builtins
import importlib
import linecache
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import (
    BuiltinScope,
    ClassScope,
    ComprehensionScope,
    FunctionScope,
    GlobalScope,
    MetadataWrapper,
    PositionProvider,
    ScopeProvider,
)

from materialize.offline.errors import ExtractError, MissingDefinition, RefusedImport, StarImportRefused
from materialize.tree import Tree

DEFAULT_HEAVY: tuple[str, ...] = ("ttnn", "torch", "vllm")
"""Top-level packages refused unless stubbed: the whole point of offline tests is never to load them."""

DEFAULT_ALLOW: tuple[str, ...] = ()
"""Third-party packages allowed to be imported for real, beyond the standard library."""

_MODULE_DUNDERS = {"__name__", "__file__", "__package__", "__doc__", "__builtins__", "__spec__", "__loader__"}


@dataclass
class _Import:
    """One alias of a module-level import statement."""

    bound: str
    module: str  # absolute module name ("" until resolved for relative imports)
    attr: str | None  # for ``from module import attr``
    level: int
    text: str  # the import as written, for messages
    line: int = 0


@dataclass
class _Unit:
    """One top-level statement of the module."""

    index: int
    node: cst.CSTNode
    first: int
    last: int
    kind: str  # def | class | import | typing | star | other
    defines: set[str] = field(default_factory=set)
    imports: dict[str, _Import] = field(default_factory=dict)


@dataclass
class _Access:
    name: str
    line: int
    immediate: bool  # runs when the statement runs (not later, inside a function body)
    resolved: str  # global | builtin | unresolved


@dataclass
class _Need:
    """Why a unit is kept: the definition that needed it (for error messages)."""

    name: str
    line: int
    root: str


class _Analysis:
    """libcst parse + scope analysis of one file, reusable across extract calls."""

    def __init__(self, source: str, display: str) -> None:
        self.source = source
        self.display = display
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError as exc:
            raise ExtractError(f"{display}:{exc.raw_line}: cannot parse: {exc.message}") from None
        wrapper = MetadataWrapper(module)
        self.module = wrapper.module
        self.scopes = wrapper.resolve(ScopeProvider)
        self.positions = wrapper.resolve(PositionProvider)
        self.units = [self._unit(i, stmt) for i, stmt in enumerate(self.module.body)]
        self._starts = [u.first for u in self.units]
        self.accesses: dict[int, list[_Access]] = {u.index: [] for u in self.units}
        self.global_scope = self._global_scope()
        self._collect_defines()
        self._collect_accesses()
        self.has_future_annotations = any(
            u.kind == "import" and any(i.module == "__future__" for i in u.imports.values())
            for u in self.units
        )

    # -- structure ---------------------------------------------------------------------------
    def _global_scope(self) -> GlobalScope:
        for scope in self.scopes.values():
            if isinstance(scope, GlobalScope):
                return scope
        raise ExtractError(f"{self.display}: no module scope (empty file?)")

    def _first_line(self, stmt: cst.CSTNode) -> int:
        line = self.positions[stmt].start.line
        for deco in getattr(stmt, "decorators", ()) or ():
            line = min(line, self.positions[deco].start.line)
        return line

    def _unit(self, index: int, stmt: cst.CSTNode) -> _Unit:
        first, last = self._first_line(stmt), self.positions[stmt].end.line
        kind = "other"
        if isinstance(stmt, cst.FunctionDef):
            kind = "def"
        elif isinstance(stmt, cst.ClassDef):
            kind = "class"
        elif isinstance(stmt, cst.If) and _is_type_checking(stmt.test):
            kind = "typing"
        elif isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body
        ):
            kind = "import"
        unit = _Unit(index, stmt, first, last, kind)
        if kind == "import":
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                    unit.kind = "star"
                    break
                for imp in _imports_of(small, self.module):
                    imp.line = first
                    unit.imports[imp.bound] = imp
        return unit

    def unit_at(self, line: int) -> _Unit | None:
        i = bisect.bisect_right(self._starts, line) - 1
        if i >= 0 and self.units[i].first <= line <= self.units[i].last:
            return self.units[i]
        return None

    def _collect_defines(self) -> None:
        for assignment in self.global_scope.assignments:
            node = getattr(assignment, "node", None)
            if node is None or node not in self.positions:
                continue
            unit = self.unit_at(self.positions[node].start.line)
            if unit is not None and unit.kind not in ("def", "class"):
                unit.defines.add(assignment.name)
        for unit in self.units:
            if unit.kind in ("def", "class"):
                # only its own name: a `global x` assignment inside the body does not define x here
                unit.defines.add(unit.node.name.value)  # type: ignore[attr-defined]
        for unit in self.units:
            unit.defines.update(unit.imports)

    def _collect_accesses(self) -> None:
        seen: set[int] = set()
        for scope in set(self.scopes.values()):
            if scope is None or id(scope) in seen:
                continue
            seen.add(id(scope))
            for access in scope.accesses:
                if access.is_annotation:
                    continue  # never evaluated: compiled with `from __future__ import annotations`
                name = _access_name(access.node)
                if name is None or access.node not in self.positions:
                    continue
                scopes = {type(r.scope) for r in access.referents if getattr(r, "scope", None) is not None}
                if GlobalScope in scopes or any(
                    isinstance(getattr(r, "scope", None), GlobalScope) for r in access.referents
                ):
                    resolved = "global"
                elif access.referents and scopes <= {BuiltinScope}:
                    resolved = "builtin"
                elif access.referents:
                    continue  # a local, enclosing or class binding: not module level
                else:
                    resolved = "builtin" if hasattr(builtins, name) else "unresolved"
                if resolved == "builtin" and not self._shadowed_global(name):
                    continue
                if resolved == "builtin":
                    resolved = "global"
                line = self.positions[access.node].start.line
                unit = self.unit_at(line)
                if unit is not None:
                    self.accesses[unit.index].append(_Access(name, line, _runs_immediately(scope), resolved))

    def _shadowed_global(self, name: str) -> bool:
        return any(name in u.defines for u in self.units)

    # -- lookup --------------------------------------------------------------------------------
    def binding(self, name: str, before: int | None) -> _Unit | None:
        """The unit that binds ``name`` last (before unit index ``before`` when given)."""
        candidates = [u for u in self.units if name in u.defines and u.kind != "typing"]
        if before is not None:
            candidates = [u for u in candidates if u.index < before]
        return candidates[-1] if candidates else None

    def typing_only(self, name: str) -> _Unit | None:
        return next((u for u in self.units if u.kind == "typing" and name in u.defines), None)

    def star_units(self) -> list[_Unit]:
        return [u for u in self.units if u.kind == "star"]

    def all_names(self) -> list[str]:
        """Names in a literal ``__all__`` (assignments and ``+=``), in order."""
        names: list[str] = []
        for unit in self.units:
            if not isinstance(unit.node, cst.SimpleStatementLine):
                continue
            for small in unit.node.body:
                target, value = None, None
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target, value = small.targets[0].target, small.value
                elif isinstance(small, cst.AugAssign | cst.AnnAssign):
                    target, value = small.target, small.value
                if isinstance(target, cst.Name) and target.value == "__all__" and value is not None:
                    if not isinstance(value, cst.List | cst.Tuple):
                        raise ExtractError(f"{self.display}:{unit.first}: __all__ is not a literal list")
                    for element in value.elements:
                        if not isinstance(element.value, cst.SimpleString):
                            raise ExtractError(f"{self.display}:{unit.first}: __all__ holds a non-literal")
                        names.append(element.value.evaluated_value)
        return names


def _is_type_checking(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Name):
        return test.value == "TYPE_CHECKING"
    return isinstance(test, cst.Attribute) and test.attr.value == "TYPE_CHECKING"


def _access_name(node: cst.CSTNode) -> str | None:
    """The module-level name an access reads (``os`` for libcst's dotted access ``os.path``)."""
    while isinstance(node, cst.Attribute):
        node = node.value
    if isinstance(node, cst.Name):
        return node.value
    return None


def _runs_immediately(scope: Any) -> bool:
    """True when code in ``scope`` runs as the statement runs (module level, class bodies)."""
    while scope is not None and not isinstance(scope, GlobalScope):
        if isinstance(scope, FunctionScope):
            return False
        if not isinstance(scope, ClassScope | ComprehensionScope):
            return False
        scope = scope.parent
    return True


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    raise ExtractError(f"unexpected import target {node!r}")


def _imports_of(small: cst.BaseSmallStatement, module: cst.Module) -> list[_Import]:
    text = module.code_for_node(small).strip()
    out: list[_Import] = []
    if isinstance(small, cst.Import):
        for alias in small.names:
            full = _dotted(alias.name)
            if alias.asname is not None:
                bound = _dotted(alias.asname.name)  # type: ignore[arg-type]
                out.append(_Import(bound, full, None, 0, text))
            else:
                root = full.split(".")[0]
                out.append(_Import(root, full, None, 0, text))
    elif isinstance(small, cst.ImportFrom):
        level = len(small.relative)
        base = _dotted(small.module) if small.module is not None else ""
        assert not isinstance(small.names, cst.ImportStar)
        for alias in small.names:
            attr = _dotted(alias.name)
            bound = _dotted(alias.asname.name) if alias.asname is not None else attr  # type: ignore[arg-type]
            out.append(_Import(bound, base, attr, level, text))
    return out


class ImportPolicy:
    """Which modules extracted code may import for real, and which stubs replace the rest."""

    def __init__(
        self,
        *,
        refuse: Iterable[str] = DEFAULT_HEAVY,
        allow: Iterable[str] = DEFAULT_ALLOW,
        stubs: Mapping[str, Any],
    ) -> None:
        self.refuse = set(refuse)
        self.allow = set(allow)
        self.stubs = dict(stubs)

    def verdict(self, module: str) -> str | None:
        """None if ``module`` may be imported, else the reason it is refused."""
        root = module.split(".")[0]
        if root in self.refuse:
            return f"{root} is a heavy import (refused by default: {', '.join(sorted(self.refuse))})"
        if root in sys.stdlib_module_names or root in self.allow or root == "__future__":
            return None
        return (
            f"{root} is neither stdlib nor in the allowed list ({', '.join(sorted(self.allow)) or 'empty'})"
        )

    def guarded_import(self, display: str):
        """An ``__import__`` for the extracted namespace: same policy for imports that run later."""

        def _import(name, globals=None, locals=None, fromlist=(), level=0):
            if level:
                frame = sys._getframe(1)
                raise RefusedImport(
                    f"{frame.f_code.co_filename}:{frame.f_lineno}: relative import (level {level}) of {name!r} "
                    f"in {frame.f_code.co_name}() is refused: extracted code has no package; stub it"
                )
            for key in (name, name.split(".")[0]):
                if key in self.stubs:
                    return self.stubs[key]
            reason = self.verdict(name)
            if reason is not None:
                frame = sys._getframe(1)
                raise RefusedImport(
                    f"{frame.f_code.co_filename}:{frame.f_lineno}: `import {name}` in {frame.f_code.co_name}() "
                    f"is refused: {reason}; pass stubs={{{name.split('.')[0]!r}: ...}} to supply a stub"
                )
            return builtins.__import__(name, globals, locals, fromlist, level)

        return _import


_ANALYSIS_CACHE: dict[tuple[str, int, str], _Analysis] = {}


def _analysis(source: str, display: str) -> _Analysis:
    key = (display, hash(source), source[:64])
    cached = _ANALYSIS_CACHE.get(key)
    if cached is None or cached.source != source:
        if len(_ANALYSIS_CACHE) > 64:
            _ANALYSIS_CACHE.clear()
        cached = _ANALYSIS_CACHE[key] = _Analysis(source, display)
    return cached


def _module_name(tree: Tree, path: str) -> tuple[str, str]:
    """The dotted module name and package ``path`` has inside its tree (walking ``__init__.py`` files)."""
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
        package_parts = list(parts)
    else:
        package_parts = parts[:-1]
    # Drop leading directories that are not packages (e.g. a sdist's top folder).
    start = len(package_parts)
    while start > 0 and tree.exists("/".join(package_parts[:start]) + "/__init__.py"):
        start -= 1
    name = ".".join(parts[start:]) or parts[-1]
    package = ".".join(package_parts[start:])
    return name, package


def _resolve_relative(imp: _Import, package: str) -> str:
    if not imp.level:
        return imp.module
    base = package.split(".") if package else []
    if imp.level - 1 > len(base):
        return imp.module or ""
    base = base[: len(base) - (imp.level - 1)]
    return ".".join([*base, imp.module] if imp.module else base)


def extract(
    tree: Tree,
    path: str,
    *names: str,
    stubs: Mapping[str, Any] | None = None,
    allow: Iterable[str] = DEFAULT_ALLOW,
    refuse: Iterable[str] = DEFAULT_HEAVY,
) -> types.ModuleType:
    """Return a module-like namespace holding ``names`` from ``path`` and what they need.

    ``names`` are top-level names or ``"Class.member"`` (the class is kept with only the requested
    members plus its non-function body statements). With no names, the literal ``__all__`` is used.
    ``stubs`` maps a name (an import's bound name, a module name, or any module-level name) to the
    object to use instead; ``allow`` lists third-party packages that may be imported for real.
    Raises ``MissingDefinition`` when the file or a requested name is absent, ``RefusedImport`` for
    a heavy or unknown import without a stub, ``StarImportRefused`` when a needed name could only
    come from a star import.
    """
    display = tree.display_path(path)
    try:
        source = tree.read_bytes(path).decode("utf-8")
    except KeyError:
        raise MissingDefinition(
            f"{display}: file does not exist in this tree (target {tree.target or '?'})",
            name=names[0] if names else "*",
            path=path,
        ) from None
    analysis = _analysis(source, display)
    policy = ImportPolicy(refuse=refuse, allow=allow, stubs=stubs or {})
    modname, package = _module_name(tree, path)
    if not names:
        names = tuple(analysis.all_names())
        if not names:
            raise ExtractError(f"{display}: no names requested and the module has no literal __all__")
    plan = _Plan(analysis, policy, display, package)
    for requested in names:
        plan.request(requested)
    return plan.execute(modname, package, names)


class _Plan:
    """Which units (and which lines of them) to keep, and which imports to bind."""

    def __init__(self, analysis: _Analysis, policy: ImportPolicy, display: str, package: str) -> None:
        self.a = analysis
        self.policy = policy
        self.display = display
        self.package = package
        self.keep_units: dict[int, set[str] | None] = {}  # unit index -> kept class members (None = all)
        self.bind: dict[str, tuple[_Import, _Need]] = {}
        self.stubbed: set[str] = set()
        self.unresolved: dict[str, list[int]] = {}
        self.requires: dict[str, set[str]] = {}
        self._done: set[tuple[int, frozenset[str] | None]] = set()

    def request(self, requested: str) -> None:
        top, _, member = requested.partition(".")
        if top in self.policy.stubs:
            self.stubbed.add(top)
            return
        unit = self.a.binding(top, None)
        if unit is None and self.a.star_units():
            star = self.a.star_units()[0]
            raise StarImportRefused(
                f"{self.display}:{star.first}: {top!r} is not defined in the file and may come from "
                f"`{self.a.module.code_for_node(star.node).strip()}`; extract refuses star imports: "
                "extract it from the module that defines it"
            )
        if unit is None:
            raise MissingDefinition(
                f"{self.display}: {top!r} is not defined at module level in this tree",
                name=requested,
                path=self.display,
            )
        members: set[str] | None = None
        if member:
            if unit.kind != "class" or not isinstance(unit.node.body, cst.IndentedBlock):  # type: ignore[attr-defined]
                raise ExtractError(
                    f"{self.display}:{unit.first}: {top!r} is not a class; cannot take {member!r}"
                )
            defined = {s.name.value for s in unit.node.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[attr-defined]
            if member not in defined and not _class_assigns(unit.node, member):
                raise MissingDefinition(
                    f"{self.display}:{unit.first}: class {top} has no member {member!r} in this tree",
                    name=requested,
                    path=self.display,
                )
            members = {member}
        self._keep(unit, members, _Need(requested, unit.first, requested))

    def _keep(self, unit: _Unit, members: set[str] | None, need: _Need) -> None:
        previous = self.keep_units.get(unit.index, set())
        if unit.index in self.keep_units and previous is None:
            return
        merged = None if members is None or previous is None else previous | members
        if unit.index in self.keep_units and merged == previous:
            return
        self.keep_units[unit.index] = merged
        if unit.kind == "import":
            raise AssertionError("imports are bound, not kept")
        lines = self.kept_lines(unit, merged)
        for access in self.a.accesses[unit.index]:
            if access.line not in lines:
                continue
            self._need_name(access, unit, need)

    def _need_name(self, access: _Access, unit: _Unit, need: _Need) -> None:
        name = access.name
        if name in _MODULE_DUNDERS:
            return
        self.requires.setdefault(need.root, set()).add(name)
        if name in self.policy.stubs:
            self.stubbed.add(name)
            return
        binder = self.a.binding(name, unit.index if access.immediate else None)
        if binder is None:
            typing_unit = self.a.typing_only(name)
            if typing_unit is not None:
                raise ExtractError(
                    f"{self.display}:{access.line}: {name!r} is only imported under `if TYPE_CHECKING:` "
                    f"(line {typing_unit.first}) but {need.root} uses it at run time; stub it"
                )
            stars = self.a.star_units()
            if stars and not hasattr(builtins, name):
                star = stars[0]
                raise StarImportRefused(
                    f"{self.display}:{access.line}: {name!r} (needed by {need.root}) is not defined in the file; "
                    f"it may come from the star import at line {star.first} "
                    f"(`{self.a.module.code_for_node(star.node).strip()}`), which extract refuses; stub it"
                )
            if not hasattr(builtins, name):
                self.unresolved.setdefault(name, []).append(access.line)
            return
        if binder is unit:
            return
        inner = _Need(name, access.line, need.root)
        if binder.kind in ("import", "star"):
            imp = binder.imports.get(name)
            if imp is None:
                return
            self.bind.setdefault(name, (imp, _Need(need.name, access.line, need.root)))
            return
        self._keep(binder, None, inner)

    def kept_lines(self, unit: _Unit, members: set[str] | None) -> set[int]:
        if members is None:
            return set(range(unit.first, unit.last + 1))
        node = unit.node
        body = node.body.body  # type: ignore[attr-defined]
        header_end = self.a.positions[body[0]].start.line - 1 if body else unit.last
        header_end = max(header_end, self.a.positions[node].start.line)
        lines = set(range(unit.first, header_end + 1))
        for stmt in body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value not in members:
                continue
            first = self.a.positions[stmt].start.line
            for deco in stmt.decorators if isinstance(stmt, cst.FunctionDef | cst.ClassDef) else ():
                first = min(first, self.a.positions[deco].start.line)
            lines.update(range(first, self.a.positions[stmt].end.line + 1))
        return lines

    def execute(self, modname: str, package: str, names: tuple[str, ...]) -> types.ModuleType:
        source_lines = self.a.source.splitlines(keepends=True)
        keep: set[int] = set()
        for index, members in self.keep_units.items():
            keep |= self.kept_lines(self.a.units[index], members)
        text = "".join(
            line if number in keep else ("\n" if line.endswith("\n") else "")
            for number, line in enumerate(source_lines, start=1)
        )
        namespace = types.ModuleType(modname)
        namespace.__file__ = self.display
        namespace.__package__ = package
        guarded = dict(vars(builtins))
        guarded["__import__"] = self.policy.guarded_import(self.display)
        namespace.__dict__["__builtins__"] = guarded
        for name in sorted(self.stubbed):
            namespace.__dict__[name] = self.policy.stubs[name]
        for name, (imp, need) in sorted(self.bind.items(), key=lambda kv: kv[1][1].line):
            namespace.__dict__[name] = self._bind_import(imp, need)
        linecache.cache[self.display] = (
            len(self.a.source),
            None,
            self.a.source.splitlines(True),
            self.display,
        )
        flags = __future__.annotations.compiler_flag
        try:
            code = compile(text, self.display, "exec", flags=flags, dont_inherit=True)
        except SyntaxError as exc:  # pragma: no cover - a bug in line selection, not a user error
            raise ExtractError(
                f"{self.display}:{exc.lineno}: extracted code does not compile: {exc.msg}"
            ) from exc
        # Class decorators such as @dataclass look the defining module up in sys.modules while the
        # class is created; register the namespace for the duration of exec only (never a real import).
        registered = modname not in sys.modules
        if registered:
            sys.modules[modname] = namespace
        try:
            exec(code, namespace.__dict__)
        finally:
            if registered:
                sys.modules.pop(modname, None)
        namespace.__extracted__ = names  # type: ignore[attr-defined]
        namespace.__requires__ = {k: frozenset(v) for k, v in self.requires.items()}  # type: ignore[attr-defined]
        namespace.__unresolved__ = {k: tuple(v) for k, v in self.unresolved.items()}  # type: ignore[attr-defined]
        namespace.__kept_lines__ = frozenset(keep)  # type: ignore[attr-defined]
        return namespace

    def _bind_import(self, imp: _Import, need: _Need) -> Any:
        module = _resolve_relative(imp, self.package)
        where = f"{self.display}:{imp.line}"
        if imp.module == "__future__":
            return getattr(__future__, imp.attr or "annotations")
        stub_keys = [imp.bound, module, module.split(".")[0]] if module else [imp.bound]
        for key in stub_keys:
            if key in self.policy.stubs:
                return self.policy.stubs[key]
        if imp.level:
            raise RefusedImport(
                f"{where}: `{imp.text}` is a relative import into the tree's own package ({module or '.'}), "
                f"needed by {need.root} (line {need.line}); extract never imports the tree; stub {imp.bound!r}"
            )
        reason = self.policy.verdict(module)
        if reason is not None:
            raise RefusedImport(
                f"{where}: `{imp.text}` is refused: {reason}; it is needed by {need.root} "
                f"(uses {imp.bound!r} at line {need.line}); pass stubs={{{imp.bound!r}: ...}} to supply a stub"
            )
        try:
            loaded = importlib.import_module(module)
            if imp.attr is None:
                if imp.bound != module and "." in module and imp.bound == module.split(".")[0]:
                    return importlib.import_module(imp.bound)
                return loaded
            try:
                return getattr(loaded, imp.attr)
            except AttributeError:
                return importlib.import_module(f"{module}.{imp.attr}")
        except ImportError as exc:
            raise ExtractError(f"{where}: `{imp.text}` failed: {exc}") from exc


def _class_assigns(node: cst.ClassDef, member: str) -> bool:
    for stmt in node.body.body:  # type: ignore[attr-defined]
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, cst.AnnAssign):
                    targets = [small.target]
                if any(isinstance(t, cst.Name) and t.value == member for t in targets):
                    return True
    return False
