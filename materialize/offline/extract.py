"""Extract named definitions from one file of a tree, with exactly the module-level code they need.

Offline tests must run the *real* patched functions without importing ttnn, torch or vLLM (compiled
extensions, hardware, slow noisy imports). ``extract`` parses the file with libcst, finds what each
requested definition needs through ``ScopeProvider`` (transitively: functions, classes, constants,
imports), and executes only that code in a fresh module-like namespace.

How the code is executed, and why:
- The kept statements are compiled from the *original* text with every other line blanked, so line
  and column numbers are the real ones; the real text is registered in ``linecache`` under
  ``tree.display_path(path)``, so a traceback shows the real file, line and source.
- Module-level imports are not executed as text: each needed alias is loaded by the extractor and
  bound by a line that stands where the import does (so a later import or statement rebinding the
  name, and import-time code between them, see what the file sees). The extractor
  refuses heavy packages (ttnn, torch, vllm by default) and anything that is neither stdlib nor in
  ``allow``, naming the import, its line and the definition that needed it. A stub given by the test
  for that name is bound instead. Imports that run later (inside functions, or inside a kept
  ``try``/``if`` block) go through a guarded ``__import__`` with the same policy.
- Compiled in memory with the file's *own* ``__future__`` imports, nothing more: without
  ``from __future__ import annotations`` the annotations of module-level code, class bodies and
  function signatures are evaluated as Python does, so the names they use are needed; with it,
  only the class-body annotations dataclasses inspect (``ClassVar``, ``InitVar`` from
  typing/dataclasses) are bound.
- Nothing is written: no module is imported from the tree and no bytecode is produced.

Dependency rule: a name used by code that runs at definition time (module level, class bodies,
decorators, default values) resolves to the bindings *before* that statement; a name used inside a
function body resolves to the module's final bindings, as Python does at call time. Every binding
back to the last unconditional one is kept (``X = a`` then ``if c: X = b`` keeps both, with the
``if`` that controls the second). A star import binds what it exports where it stands: followed
for the standard library (``try: from _heapq import *`` replaces the pure-Python definitions),
refused when it cannot be known (relative, third-party) and may rebind a needed name.

``materialize/offline/oracle.py`` checks all this against Python: every definition of a stdlib
module, extracted, against the module executed from the same file.

The extractor is total: it returns code that behaves as the file does, or raises an
``ExtractError`` naming file, line and reason (a name nothing binds, a heavy import, a stub for a
name the file does not bind, a ``self.attr`` the class does not have).
"""

from __future__ import annotations
import __future__

import ast
import bisect
import builtins
import importlib
import importlib.util
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

from materialize.offline.errors import (
    ExtractError,
    MissingDefinition,
    RefusedImport,
    StarImportRefused,
    observed,
)
from materialize.tree import Tree

DEFAULT_HEAVY: tuple[str, ...] = ("ttnn", "torch", "vllm")
"""Top-level packages refused unless stubbed: the whole point of offline tests is never to load them."""

DEFAULT_ALLOW: tuple[str, ...] = ()
"""Third-party packages allowed to be imported for real, beyond the standard library."""

_IMPLICIT_NAMES = {
    "__name__", "__file__", "__package__", "__doc__", "__builtins__", "__spec__", "__loader__", "__path__",
    "__cached__", "__annotations__", "__dict__", "__module__", "__qualname__", "__class__",
}  # fmt: skip
"""Names every module (or class body, or method with ``super()``) has without binding them."""

_RUN_WHEN_CALLED = frozenset({"__init__", "__new__", "__post_init__", "__call__"})
"""The methods calling a class (or its instance) runs."""

_IMPORT_SYSTEM_NAMES = frozenset({"__spec__", "__loader__", "__cached__"})
"""What the import system gives a module: an extraction is executed, not imported, and cannot have them."""

_DATACLASS_TYPING = ("typing", "typing_extensions", "dataclasses")
"""Where ``ClassVar`` / ``InitVar`` come from: bound even when annotations are strings."""


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
    defines: set[str] = field(default_factory=set)  # names bound when the unit runs
    imports: dict[str, _Import] = field(default_factory=dict)
    unconditional: set[str] = field(default_factory=set)  # names always bound when the unit runs
    typing_defines: set[str] = field(default_factory=set)  # bound only under `if TYPE_CHECKING:`
    dead_lines: set[int] = field(default_factory=set)  # the TYPE_CHECKING branch: never runs
    mutates: set[str] = field(
        default_factory=set
    )  # names whose object or binding running the unit may change
    rebinds: set[str] = field(default_factory=set)  # names a function it calls rebinds (`global X`)
    stores: set[str] = field(default_factory=set)  # names changed through an attribute or item, at import
    # the roots of the calls it makes as statements, for their effect (`random.seed(1)`,
    # `logging.getLogger("x").setLevel(10)`, `warm_cache()`): whatever they return is dropped
    side_calls: dict[str, set[str]] = field(default_factory=dict)  # root -> the callees as written
    passes: set[str] = field(default_factory=set)  # names whose object it passes to a call that may change it
    passed_to: dict[str, set[str]] = field(default_factory=dict)  # ... and the calls, as written, it passes them to
    refs: set[str] = field(default_factory=set)  # names its import-time code reads
    consumes: set[str] = field(default_factory=set)  # names whose iterator it may advance (`for x in IT`)
    # what the functions of the file it calls do to imported modules (`def setup(): random.seed(0)`)
    body_side_calls: dict[str, set[str]] = field(default_factory=dict)
    body_stores: set[str] = field(default_factory=set)
    dynamic: list[tuple[int, str]] = field(default_factory=list)  # (line, how) it writes the namespace unseen
    star_unknown: str | None = None  # a `from m import *` it runs whose names extract cannot know


_BodyEffects = tuple[frozenset[str], frozenset[str], frozenset[str], tuple[tuple[int, str], ...], frozenset[str]]
"""What calling a function may do: (objects changed, objects handed to calls, names rebound, dynamic uses,
iterators advanced)."""


@dataclass
class _Access:
    name: str
    line: int
    immediate: bool  # runs when the statement runs (not later, inside a function body)
    resolved: str  # global | builtin | unresolved
    soft: bool = False  # a class-body annotation under future annotations: bound only for dataclasses


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
        self.future_flags = 0
        for unit in self.units:
            for imp in unit.imports.values():
                if imp.module == "__future__" and imp.attr:
                    feature = getattr(__future__, imp.attr, None)
                    if feature is None:
                        raise ExtractError(f"{display}:{unit.first}: unknown future feature {imp.attr!r}")
                    self.future_flags |= feature.compiler_flag
        self.has_future_annotations = bool(self.future_flags & __future__.annotations.compiler_flag)
        self.global_scope = self._global_scope()
        self.var_annotations = _var_annotation_nodes(self.module)
        # `case Point(x=1)`: the keyword names an attribute of the subject, not a variable to look up
        self.match_keys = {id(n.key) for n in _nodes_of(self.module, cst.MatchKeywordElement)}
        self.runtime_globals: set[str] = set()  # bound only by `global x` inside a function
        self.import_names = _all_import_names(self.module)
        self.nested_imports = _all_imports(self.module)  # bound name -> what it names, imports at any depth
        self.bare_dynamic = self._bare_dynamic()
        self._collect_defines()
        self._collect_accesses()

    # -- structure ---------------------------------------------------------------------------
    def _bare_dynamic(self) -> frozenset[int]:
        """The Name nodes reading the builtin ``globals``/``locals``/``vars``/``exec``/``eval`` as a value
        rather than calling it (``g = globals``; ``map(vars, …)``): whoever calls it later reaches this
        module's namespace, out of sight of the name tracking."""
        called = {id(c.func) for c in _nodes_of(self.module, cst.Call)}
        out: set[int] = set()
        for scope in set(self.scopes.values()):
            if scope is None:
                continue
            for access in scope.accesses:
                node = access.node
                if not isinstance(node, cst.Name) or node.value not in _BARE_DYNAMIC or id(node) in called:
                    continue
                if all(isinstance(getattr(r, "scope", None), BuiltinScope) for r in access.referents):
                    out.add(id(node))
        return frozenset(out)

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
                    module, names = _star_names(small)
                    text = self.module.code_for_node(small).strip()
                    if names is None:
                        unit.kind = "star"
                        unit.star_unknown = text
                        continue
                    for name in names:  # followed: `from m import *` binds m's public names, as Python does
                        unit.imports[name] = _Import(name, module, name, 0, text, first)
                    continue
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
        for unit in self.units:
            if unit.kind == "typing":
                body = unit.node.body  # type: ignore[attr-defined]
                stmts = body.body if isinstance(body, cst.IndentedBlock) else [body]
                if stmts:
                    first, last = self.positions[stmts[0]].start.line, self.positions[stmts[-1]].end.line
                    unit.dead_lines = set(range(first, last + 1))
        for assignment in self.global_scope.assignments:
            node = getattr(assignment, "node", None)
            if node is None or node not in self.positions:
                continue
            line = self.positions[node].start.line
            unit = self.unit_at(line)
            if unit is None:
                continue
            if unit.kind in ("def", "class"):
                # a `global x` assignment inside a body binds x only when that code runs
                self.runtime_globals.add(assignment.name)
            elif line in unit.dead_lines:
                unit.typing_defines.add(assignment.name)
            else:
                unit.defines.add(assignment.name)
        for unit in self.units:
            if unit.kind in ("other", "typing"):  # `try: from _speedups import *` rebinds what it exports
                for node in _nodes_of(unit.node, cst.ImportFrom):
                    if not isinstance(node.names, cst.ImportStar) or self.positions[node].start.line in unit.dead_lines:
                        continue
                    _module, names = _star_names(node)
                    if names is None:
                        unit.star_unknown = self.module.code_for_node(node).strip()
                    else:
                        unit.defines.update(names)
            if unit.kind in ("def", "class"):
                name = unit.node.name.value  # type: ignore[attr-defined]
                unit.defines.add(name)
                unit.unconditional.add(name)
            unit.defines.update(unit.imports)
            unit.unconditional.update(unit.imports)
            if unit.kind == "other":  # names the scope analysis does not give the module (conditional here)
                unit.defines.update(_hidden_module_bindings(unit.node))
            if isinstance(unit.node, cst.SimpleStatementLine):
                for small in unit.node.body:
                    targets: list[cst.BaseExpression] = []
                    if isinstance(small, cst.Assign):
                        targets = [t.target for t in small.targets]
                    elif isinstance(small, cst.AnnAssign) and small.value is not None:
                        targets = [small.target]
                    for target in targets:
                        unit.unconditional.update(_target_names(target))
        self._collect_effects()

    def _collect_effects(self) -> None:
        """What each top-level statement may change when it runs (``_Effects``), through the file's
        own functions and classes it calls, decorates with or derives from, transitively."""
        self._body_cache: dict[int, _BodyEffects] = {}
        self._own_cache: dict[int, tuple[_BodyEffects, list[_Unit]]] = {}
        self._dynamic_cache: dict[int, list[tuple[int, str]]] = {}
        # Code that escaped at import time (a function or class stored, passed on or decorated, a lambda
        # made): any later call at import time may run it (`for hook in HOOKS: hook()`, `list(map(fn, x))`)
        escaped: list[_Unit] = []
        loose: list[_BodyEffects] = []  # the bodies of lambdas made at import time
        # names that may hold such code or an instance of such a class (`p = Plugin()`, `HOOKS.append(f)`):
        # using one in any way (`p + 1`, `with p:`, `for x in p:`, `p.attr`) may run its methods
        tainted: set[str] = set()
        for unit in self.units:
            if unit.kind in ("import", "star"):
                continue
            effects = _Effects(immediate=True, annotations_run=not self.has_future_annotations, bare=self.bare_dynamic)
            if _is_main_guard(unit.node):  # `if __name__ == "__main__":` never runs when imported
                orelse = unit.node.orelse  # type: ignore[attr-defined]
                if orelse is not None:
                    orelse.visit(effects)
            else:
                unit.node.visit(effects)
            unit.refs = effects.refs
            unit.mutates = set(effects.changed)
            unit.rebinds = set(effects.rebound)
            unit.passes = set(effects.passed)
            unit.passed_to = {name: set(callees) for name, callees in effects.passed_to.items()}
            unit.stores = set(effects.stores)
            unit.side_calls = effects.side_calls
            unit.consumes = set(effects.consumed)
            for name in effects.called:
                # `fib(20)` fills a decorated function's cache, `counter()` changes its mutable default: it
                # changes the function; a callable bound by an assignment (`inc = make()`, `inc = C.inc`, a
                # lambda) may keep state in a closure or its object: calling it changes it
                if any(
                    (c.kind == "def" and (c.node.decorators or _mutable_default(c.node)))  # type: ignore[attr-defined]
                    or c.kind not in ("def", "class", "import", "star")
                    for c in self.bindings(name, unit.index)
                ):
                    unit.mutates.add(name)
            for name in effects.call_results:  # `registry()['a'] = 1` changes what registry() may return
                unit.mutates |= self._reach(name, unit.index)
            side, stores = self._module_effects(effects.called, unit.index)
            unit.body_side_calls, unit.body_stores = side, stores
            # `eval(text)` at import time can read module names, not bind them: only kept code using it is refused
            unit.dynamic = [
                (self.positions[n].start.line, how) for n, how in effects.dynamic if how != "eval()"
            ]
            for name in effects.deleted:  # `del X` unbinds X: a later reader sees no binding
                unit.defines.add(name)
            callees = [callee for name in effects.refs | effects.lambda_refs for callee in self._callables(name, unit.index)]
            if unit.kind in ("def", "class") and unit.node.decorators:  # type: ignore[attr-defined]
                callees.append(unit)  # a decorator is handed the function (the class) and may call it now
            touches = bool(callees or effects.lambdas or effects.refs & tainted)
            if touches:
                tainted |= unit.defines | effects.changed | effects.passed
            runs_earlier = effects.calls or touches  # then it may run any code that escaped before it, too
            for callee in {c.index: c for c in [*callees, *(escaped if runs_earlier else ())]}.values():
                self._add_body(unit, callee)
            for body in [*effects.lambdas, *(loose if runs_earlier else ())]:
                self._add_effects(unit, body, "a lambda")
            escaped += {c.index: c for c in callees if all(c is not e for e in escaped)}.values()
            loose += effects.lambdas

    def _reach(self, name: str, before: int) -> set[str]:
        """``name`` and every module-level name whose object calling ``name`` may return: the names its
        code reads (its body; for a name bound by an assignment, the statement: `get = lambda: TABLE`),
        transitively through the callables among them."""
        out, todo = {name}, [name]
        while todo:
            current = todo.pop()
            for binder in self.bindings(current, None):
                if binder.kind in ("import", "star"):
                    continue
                for other in _names_in(binder.node) - out:
                    if self.binds_at_module_level(other):
                        out.add(other)
                        todo.append(other)
        return out

    def _module_effects(self, called: set[str], before: int) -> tuple[dict[str, set[str]], set[str]]:
        """The calls made for their effect and the attribute/item stores of the file's functions that
        code calling ``called`` runs, transitively (a class called runs its ``__init__`` / ``__new__`` /
        ``__post_init__``): a change to an imported module made from inside a function."""
        side: dict[str, set[str]] = {}
        stores: set[str] = set()
        seen: set[int] = set()
        todo = [c for name in called for c in self._callables(name, before)]
        while todo:
            callee = todo.pop()
            if callee.index in seen:
                continue
            seen.add(callee.index)
            effects = _Effects(immediate=False, bare=self.bare_dynamic)
            if callee.kind == "class":
                for stmt in callee.node.body.body:  # type: ignore[attr-defined]
                    if isinstance(stmt, cst.FunctionDef) and stmt.name.value in _RUN_WHEN_CALLED:
                        stmt.visit(effects)
            else:
                callee.node.visit(effects)
            for root, callees in effects.side_calls.items():
                side.setdefault(root, set()).update(callees)
            stores |= effects.stores
            todo += [c for name in effects.called for c in self._callables(name, len(self.units))]
        return side, stores

    def module_state_change(self, top: str) -> tuple[_Unit, str] | None:
        """A top-level statement that changes the state of the imported module ``top`` when the file is
        imported (`os.environ[k] = v`, `random.seed(0)`, `getcontext().prec = 3`, through a function of
        the file it calls), with the name it goes through; None if there is none."""
        family = self.family_of_top(top)
        if not family:
            return None
        for unit in self.units:
            if unit.kind in ("import", "star", "typing"):
                continue
            side = {root: set(callees) for root, callees in unit.side_calls.items()}
            for root, callees in unit.body_side_calls.items():
                side.setdefault(root, set()).update(callees)
            for root in sorted(side.keys() & family.keys()):
                if not all(_harmless_side_call(family[root], root, callee) for callee in side[root]):
                    return unit, root
            hit = (unit.stores | unit.body_stores) & family.keys()
            if hit:
                return unit, sorted(hit)[0]
        return None

    def family_of_top(self, top: str) -> dict[str, str]:
        """Every name an import anywhere in the file binds from package ``top``, with what it names."""
        out = {bound: origin for bound, origin in self.nested_imports.items() if origin.split(".")[0] == top}
        if top == "builtins":
            out["__builtins__"] = "builtins"
        return out

    def _add_body(self, unit: _Unit, callee: _Unit) -> None:
        """``unit`` may run ``callee``'s code (call the function, make the class or its instances)."""
        self._add_effects(unit, self._body_effects(callee), f"{callee.node.name.value}()")  # type: ignore[attr-defined]

    @staticmethod
    def _add_effects(unit: _Unit, effects: _BodyEffects, where: str) -> None:
        changed, passed, rebound, dynamic, consumed = effects
        unit.mutates |= changed
        unit.consumes |= consumed
        unit.passes |= passed
        unit.rebinds |= rebound
        unit.dynamic += [(line, f"{how} in {where}") for line, how in dynamic if how != "eval()"]

    def _callables(self, name: str, before: int) -> list[_Unit]:
        return [u for u in self.bindings(name, before) if u.kind in ("def", "class")]

    def _own_body_effects(self, unit: _Unit) -> tuple[_BodyEffects, list[_Unit]]:
        """What the unit's own code may change, and the file's functions and classes it names (read once)."""
        found = self._own_cache.get(unit.index)
        if found is None:
            effects = _Effects(
                immediate=False,
                class_name=unit.node.name.value if unit.kind == "class" else None,  # type: ignore[attr-defined]
                bare=self.bare_dynamic,
            )
            unit.node.visit(effects)
            own = (
                frozenset(effects.changed),
                frozenset(effects.passed),
                frozenset(effects.rebound),
                tuple((self.positions[n].start.line, how) for n, how in effects.dynamic),
                frozenset(effects.consumed),
            )
            callees = {
                callee.index: callee
                for name in sorted(effects.refs)
                for callee in self._callables(name, len(self.units))
                if callee is not unit
            }
            found = self._own_cache[unit.index] = (own, sorted(callees.values(), key=lambda u: u.index))
        return found

    def _body_effects(self, unit: _Unit) -> _BodyEffects:
        """What calling the function (or using the class: creating it, its instances, its subclasses) may
        change: its own effects and those of every function or class of the file it may reach.

        Computed once per strongly connected component of the call graph (Tarjan's algorithm, iterative):
        all the functions of a cycle reach the same code, so they share one union. Walking the graph path
        by path (caching only outside a cycle) cost n! body visits for n functions calling each other
        (``typing`` took more than ten minutes)."""
        cached = self._body_cache.get(unit.index)
        if cached is not None:
            return cached
        index: dict[int, int] = {}
        low: dict[int, int] = {}
        stack: list[_Unit] = []
        on_stack: set[int] = set()
        counter = 0
        work: list[tuple[_Unit, int]] = [(unit, 0)]
        while work:
            current, position = work.pop()
            if position == 0:
                index[current.index] = low[current.index] = counter
                counter += 1
                stack.append(current)
                on_stack.add(current.index)
            callees = self._own_body_effects(current)[1]
            for i in range(position, len(callees)):
                callee = callees[i]
                if callee.index in self._body_cache:
                    continue
                if callee.index not in index:
                    work.append((current, i + 1))
                    work.append((callee, 0))
                    break
                if callee.index in on_stack:
                    low[current.index] = min(low[current.index], index[callee.index])
            else:
                if low[current.index] == index[current.index]:  # the root of a component: pop it, union it
                    members: list[_Unit] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member.index)
                        members.append(member)
                        if member is current:
                            break
                    self._union_component(members)
                if work:
                    parent = work[-1][0]
                    low[parent.index] = min(low[parent.index], low[current.index])
        return self._body_cache[unit.index]

    def _union_component(self, members: list[_Unit]) -> None:
        """Cache, for each member of a component, the union of the members' own effects and of the
        (already cached) effects of every component they call into."""
        inside = {m.index for m in members}
        changed: set[str] = set()
        passed: set[str] = set()
        rebound: set[str] = set()
        consumed: set[str] = set()
        dynamic: list[tuple[int, str]] = []
        parts: list[_BodyEffects] = []
        for member in sorted(members, key=lambda u: u.index):
            own, callees = self._own_body_effects(member)
            parts.append(own)
            parts += [self._body_cache[c.index] for c in callees if c.index not in inside]
        for more, more_passed, more_rebound, more_dynamic, more_consumed in parts:
            changed |= more
            passed |= more_passed
            rebound |= more_rebound
            consumed |= more_consumed
            dynamic += [d for d in more_dynamic if d not in dynamic]
        result = (frozenset(changed), frozenset(passed), frozenset(rebound), tuple(dynamic), frozenset(consumed))
        for member in members:
            self._body_cache[member.index] = result

    def body_dynamic(self, unit: _Unit) -> list[tuple[int, str]]:
        """Dynamic namespace access anywhere in the unit's own code (function bodies included)."""
        found = self._dynamic_cache.get(unit.index)
        if found is None:
            effects = _Effects(immediate=False, bare=self.bare_dynamic)
            unit.node.visit(effects)
            found = self._dynamic_cache[unit.index] = [
                (self.positions[n].start.line, how) for n, how in effects.dynamic
            ]
        return found

    def mutators(self, name: str, after: int) -> list[_Unit]:
        """Top-level statements after unit ``after`` that may change the object ``name`` is bound to
        (directly, through a name bound from it: ``ALIAS = X``, ``for row in X:``, or through an object
        it was stored into: ``b.ref = X`` then ``b.ref[k] = v``), or rebind it
        through a function they call (``global X``). An immutable literal cannot be changed, only rebound."""
        binder = self.units[after]
        immutable = _binds_immutable_literal(binder, name)
        # an object handed to a call may be changed by it: `fill(REG)`, a class given to
        # `defproperty(Cls, "length")` or `Mapping.register(Cls)`, and a function too (`mark(fn)` setting
        # `fn.tag`, `update_wrapper(fn, g)`, a helper setting `fn.__defaults__`), unless the call is one of
        # the file's functions that changes none of its parameters (`atexit.register(fn)` is no pass at all)
        is_def = binder.kind == "def"
        names, out, todo = {name}, [], [name]
        if binder.kind == "other" and isinstance(binder.node, cst.SimpleStatementLine) and not immutable:
            # names bound by the same statement may be the same object: `d = D = {}`, `A, B = (x,) * 2`
            names |= binder.defines
            todo = sorted(names)
        while todo:
            current = todo.pop()
            for unit in self.units[after + 1 :]:
                if unit.kind in ("import", "star", "typing"):
                    continue
                changes = current in unit.mutates or (
                    current in unit.passes and (not is_def or self._may_change_function(unit, current))
                )
                # iterating it advances an iterator or generator (a list or dict display is not one)
                changes = changes or (current in unit.consumes and not (current == name and _container_display(binder, name)))
                if (current in unit.rebinds or (changes and not immutable)) and unit not in out:
                    out.append(unit)
                if immutable:
                    continue
                if current in unit.refs and unit.kind == "other":
                    # a name bound from it, or an object it is stored into or handed to (`b.ref = X`,
                    # `setattr(b, "ref", X)`, `reg[k] = X`): a change made through that one changes it
                    for alias in (unit.defines | unit.stores) - names:
                        names.add(alias)
                        todo.append(alias)
        return sorted(out, key=lambda u: u.index)

    def _may_change_function(self, unit: _Unit, name: str) -> bool:
        """Whether a call ``unit`` hands the function ``name`` to may change it (``fn.tag = …``,
        ``fn.__defaults__ = …``, ``update_wrapper(fn, g)``). The file's own code is read: a function of
        the file changes it when its body changes one of its parameters, a class, a method or a computed
        callee is taken as changing it, and so is a pass made inside a function the statement calls. An
        imported callee cannot be read: it is taken as leaving the function as it is
        (``ttnn.attach_golden_function(op, golden_function=fn)`` registers it), but for the standard
        library's wrappers that copy attributes onto it."""
        callees = unit.passed_to.get(name)
        if not callees:
            return True
        for callee in callees:
            root = callee.split(".")[0]
            if not root:
                return True
            binders = self.bindings(root, unit.index)
            if not binders:
                continue  # a builtin (`vars(fn)`), or nothing: raises as in the file
            for binder in binders:
                imp = binder.imports.get(root) if binder.kind in ("import", "star") else None
                if imp is not None:
                    origin = f"{imp.module}.{imp.attr}" if imp.attr else imp.module
                    if (origin + callee[len(root):]).rsplit(".", 1)[-1] in _FUNCTION_CHANGERS:
                        return True
                    continue
                if binder.kind != "def" or "." in callee or _changes_a_parameter(binder.node):  # type: ignore[arg-type]
                    return True
        return False

    def _collect_accesses(self) -> None:
        seen: set[int] = set()
        for scope in set(self.scopes.values()):
            if scope is None or id(scope) in seen:
                continue
            seen.add(id(scope))
            for access in scope.accesses:
                soft = False
                if access.is_annotation:
                    if isinstance(scope, FunctionScope) and id(access.node) in self.var_annotations:
                        continue  # a local variable's annotation is never evaluated
                    if self.has_future_annotations:
                        if not (isinstance(scope, ClassScope) and id(access.node) in self.var_annotations):
                            continue  # a string, never evaluated
                        soft = True  # dataclasses look for ClassVar / InitVar in the module
                name = _access_name(access.node)
                if name is None or access.node not in self.positions or id(access.node) in self.match_keys:
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
                    if _comprehension_target(scope, name):
                        continue  # libcst leaves `x` unresolved in `{x for r in rows for x in r}`
                    resolved = "builtin" if hasattr(builtins, name) else "unresolved"
                if resolved == "builtin" and not self._shadowed_global(name) and name not in _IMPORT_SYSTEM_NAMES:
                    continue
                if resolved == "builtin":
                    resolved = "global"
                line = self.positions[access.node].start.line
                unit = self.unit_at(line)
                if unit is not None:
                    self.accesses[unit.index].append(
                        _Access(name, line, _runs_immediately(scope), resolved, soft)
                    )

    def _shadowed_global(self, name: str) -> bool:
        return any(name in u.defines for u in self.units)

    # -- lookup --------------------------------------------------------------------------------
    def import_family(self, imp: _Import) -> dict[str, str]:
        """The names the file's imports bind from ``imp``'s top-level package (``import random`` and
        ``from random import seed``; ``import logging`` and ``from logging import getLogger``), each
        with what it names (``random.seed``): a call through any of them reaches the state the others read."""
        top = imp.module.split(".")[0]
        return {bound: f"{other.module}.{other.attr}" if other.attr else other.module
                for unit in self.units for bound, other in unit.imports.items()
                if other.module and other.module.split(".")[0] == top}

    def bindings(self, name: str, before: int | None) -> list[_Unit]:
        """The units whose bindings of ``name`` may be the live one (before unit ``before`` if given).

        Walks back from the last binding and stops at the first unconditional one: a conditional
        rebinding (``if c: X = b``) keeps the earlier ``X = a`` it may leave in place.
        """
        out: list[_Unit] = []
        for unit in reversed(self.units):
            if before is not None and unit.index >= before:
                continue
            # a statement calling a function of the file that rebinds the name (`global X`) may bind it too
            if name in unit.defines or name in unit.rebinds:
                out.append(unit)
                if name in unit.unconditional:
                    break
        return out

    def binding(self, name: str, before: int | None) -> _Unit | None:
        """The unit that binds ``name`` last (before unit index ``before`` when given)."""
        found = self.bindings(name, before)
        return found[0] if found else None

    def binds(self, name: str) -> bool:
        """Whether the file binds ``name`` anywhere (module level, TYPE_CHECKING, or any import)."""
        return (
            any(name in u.defines or name in u.typing_defines for u in self.units)
            or name in self.runtime_globals
            or name in self.import_names
        )

    def binds_at_module_level(self, name: str) -> bool:
        return any(name in u.defines for u in self.units)

    def docstring(self) -> str | None:
        """The module's docstring (its ``__doc__`` before any statement runs)."""
        first = self.module.body[0] if self.module.body else None
        if isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr):
            value = first.body[0].value
            if isinstance(value, cst.SimpleString | cst.ConcatenatedString):
                text = value.evaluated_value
                return text if isinstance(text, str) else None
        return None

    def typing_only(self, name: str) -> _Unit | None:
        return next((u for u in self.units if name in u.typing_defines), None)

    def star_units(self) -> list[_Unit]:
        """The statements running a star import whose names extract cannot know."""
        return [u for u in self.units if u.star_unknown is not None]

    def unknown_star_between(self, name: str, start: int, stop: int) -> _Unit | None:
        """A statement in ``units[start:stop]`` whose unknown star import may rebind ``name``."""
        if name in _IMPLICIT_NAMES or name.startswith("_"):
            return None  # `from m import *` never binds a private name unless __all__ lists it
        return next((u for u in self.units[start:stop] if u.star_unknown is not None), None)

    def all_names(self) -> list[str]:
        """Names in a literal ``__all__`` (assignments and ``+=``), in order."""
        names: list[str] = []
        for unit in self.units:
            literal = isinstance(unit.node, cst.SimpleStatementLine) and all(
                isinstance(small, cst.Assign | cst.AugAssign | cst.AnnAssign) for small in unit.node.body
            )
            if ("__all__" in unit.mutates or "__all__" in unit.defines) and not literal:
                raise ExtractError(
                    f"{self.display}:{unit.first}: __all__ is changed here by code extract does not evaluate "
                    "(a method call or a conditional): name the definitions to extract"
                )
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


def _is_main_guard(node: cst.CSTNode) -> bool:
    """``if __name__ == "__main__":``, whose body runs only when the file is executed as a script."""
    if (
        not isinstance(node, cst.If)
        or not isinstance(node.test, cst.Comparison)
        or len(node.test.comparisons) != 1
    ):
        return False
    sides = [node.test.left, node.test.comparisons[0].comparator]
    names = [s.value for s in sides if isinstance(s, cst.Name)]
    strings = [s.evaluated_value for s in sides if isinstance(s, cst.SimpleString)]
    return (
        isinstance(node.test.comparisons[0].operator, cst.Equal)
        and names == ["__name__"]
        and strings == ["__main__"]
    )


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


def _star_names(node: cst.ImportFrom) -> tuple[str, frozenset[str] | None]:
    """The module a ``from m import *`` imports, and the names it binds (None when extract cannot know
    them without importing what it must not: a relative import, a module outside the standard library)."""
    module = _dotted(node.module) if node.module is not None else ""
    if node.relative or not module or module.split(".")[0] not in sys.stdlib_module_names:
        return module, None
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        return module, None
    exported = getattr(loaded, "__all__", None)
    if exported is None:
        exported = [name for name in vars(loaded) if not name.startswith("_")]
    return module, frozenset(exported)


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

    def guarded_import(self, display: str, refusals: list[tuple[str, RefusedImport]] | None = None):
        """An ``__import__`` for the extracted namespace: same policy for imports that run later.

        Each refusal is also appended to ``refusals`` (the module name and the error), while the caller
        keeps that list: the file's import-time code may catch it (``except ImportError``) and go on."""

        def _import(name, globals=None, locals=None, fromlist=(), level=0):
            try:
                return _checked(name, globals, locals, fromlist, level)
            except RefusedImport as exc:
                if refusals is not None:
                    refusals.append(("." * level + name, exc))  # a relative import keeps its dots
                raise

        def _checked(name, globals=None, locals=None, fromlist=(), level=0):
            if level:
                frame = sys._getframe(2)
                raise observed(
                    RefusedImport(
                        f"{frame.f_code.co_filename}:{frame.f_lineno}: relative import (level {level}) of {name!r} "
                        f"in {frame.f_code.co_name}() is refused: extracted code has no package; stub it"
                    )
                )
            for key in (name, name.split(".")[0]):
                if key in self.stubs:
                    return self.stubs[key]
            reason = self.verdict(name)
            if reason is not None:
                frame = sys._getframe(2)
                raise observed(
                    RefusedImport(
                        f"{frame.f_code.co_filename}:{frame.f_lineno}: `import {name}` in {frame.f_code.co_name}() "
                        f"is refused: {reason}; pass stubs={{{name.split('.')[0]!r}: ...}} to supply a stub"
                    )
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
    come from a star import. Every ExtractError it raises is ``observed`` on its way out.
    """
    try:
        return _extract(tree, path, *names, stubs=stubs, allow=allow, refuse=refuse)
    except ExtractError as exc:
        observed(exc)
        raise


def _extract(
    tree: Tree,
    path: str,
    *names: str,
    stubs: Mapping[str, Any] | None = None,
    allow: Iterable[str] = DEFAULT_ALLOW,
    refuse: Iterable[str] = DEFAULT_HEAVY,
) -> types.ModuleType:
    """``extract`` without the notice to observers."""
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
    for unit in analysis.units:
        if unit.dynamic:
            line, how = unit.dynamic[0]
            raise ExtractError(
                f"{display}:{line}: the module namespace is reached dynamically at import time ({how}, run by "
                f"the statement at line {unit.first}): names may be bound or rebound where no statement names "
                "them, so no extraction from this file can be shown to behave as the file does"
            )
    change = analysis.module_state_change("builtins")
    if change is not None:
        changer, through = change
        code = analysis.module.code_for_node(changer.node).strip().splitlines()[0]
        raise ExtractError(
            f"{display}:{changer.first}: `{code}` changes the builtins (through {through!r}) when the file is "
            "imported: every definition may read them, and extract does not replay the change (it would leak "
            "into the test process)"
        )
    plan = _Plan(analysis, policy, display, package)
    for requested in names:
        plan.request(requested)
    return plan.execute(modname, package, names, is_package=path.endswith("__init__.py"))


class _Plan:
    """Which units (and which lines of them) to keep, and which imports to bind."""

    def __init__(self, analysis: _Analysis, policy: ImportPolicy, display: str, package: str) -> None:
        self.a = analysis
        self.policy = policy
        self.display = display
        self.package = package
        self.keep_units: dict[int, set[str] | None] = {}  # unit index -> kept class members (None = all)
        self.bind: dict[tuple[str, int], tuple[_Import, _Need]] = {}  # (name, import unit) -> alias
        self.stubbed: set[str] = set()
        self.unresolved: dict[str, list[int]] = {}
        self.requires: dict[str, set[str]] = {}

    def _stub(self, name: str, line: int, need: _Need) -> None:
        """Use the test's stub for ``name``: only a name the file binds may be replaced."""
        if not self.a.binds(name):
            where = f"{self.display}:{line}" if line else self.display
            raise ExtractError(
                f"{where}: {need.root} uses {name!r}, which the file never binds (no import or definition of it), "
                f"but a stub was given for it: the stub would hide a missing import; a stub may only replace a "
                "name the file binds"
            )
        self.stubbed.add(name)

    def request(self, requested: str) -> None:
        top, _, member = requested.partition(".")
        if top in self.policy.stubs:
            self._stub(top, 0, _Need(requested, 0, requested))
            return
        units = self.a.bindings(top, None)
        if not units and self.a.star_units():
            star = self.a.star_units()[0]
            raise StarImportRefused(
                f"{self.display}:{star.first}: {top!r} is not defined in the file and may come from "
                f"`{star.star_unknown}`; extract follows star imports of the standard library only: "
                "extract it from the module that defines it"
            )
        if not units:
            typing_unit = self.a.typing_only(top)
            if typing_unit is not None:
                raise ExtractError(
                    f"{self.display}:{typing_unit.first}: {top!r} is only imported under `if TYPE_CHECKING:`; "
                    "it does not exist at run time"
                )
            dynamic = self.a.binding("__getattr__", None)
            if dynamic is not None:
                raise ExtractError(
                    f"{self.display}:{dynamic.first}: {top!r} is not bound at module level; the module's __getattr__ "
                    f"(PEP 562, line {dynamic.first}) may provide it when the module's attribute is read, which "
                    "extract does not evaluate: test it through the module, or extract __getattr__"
                )
            raise MissingDefinition(
                f"{self.display}: {top!r} is not defined at module level in this tree",
                name=requested,
                path=self.display,
            )
        self._star_may_rebind(top, units, len(self.a.units), 0, requested)
        need = _Need(requested, units[0].first, requested)
        if not member:
            for unit in units:
                self._use_binder(top, unit, unit.first, need)
            return
        unit = units[0]
        if unit.kind != "class" or not isinstance(unit.node.body, cst.IndentedBlock):  # type: ignore[attr-defined]
            raise ExtractError(f"{self.display}:{unit.first}: {top!r} is not a class; cannot take {member!r}")
        defined = {s.name.value for s in unit.node.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[attr-defined]
        if member not in defined and not _class_assigns(unit.node, member):
            raise MissingDefinition(
                f"{self.display}:{unit.first}: class {top} has no member {member!r} in this tree",
                name=requested,
                path=self.display,
            )
        self._keep(unit, {member}, need)
        for mutator in self.a.mutators(top, unit.index):
            self._keep(mutator, None, _Need(top, mutator.first, requested))
        for other in units[1:]:  # a conditional redefinition keeps the earlier class whole
            self._use_binder(top, other, other.first, need)

    def _use_binder(self, name: str, binder: _Unit, line: int, need: _Need) -> None:
        """Make ``binder``'s binding of ``name`` happen (bind its import, or keep the statement),
        and keep the later top-level statements that change that object (``X.ALL = X()``)."""
        if binder.kind in ("import", "star"):
            imp = binder.imports.get(name)
            if imp is not None:
                self.bind.setdefault((name, binder.index), (imp, _Need(need.name, line, need.root)))
            # an imported module's state (os.environ[...] = ...) is not the file's to replay: it would
            # leak into the test process; but code that reads it would see it unchanged, so refuse
            # (a module whose import is refused anyway, heavy or not allowed, is left to that refusal)
            family = self.a.import_family(imp) if imp is not None and not self.policy.verdict(imp.module) else {}
            for later in self.a.units[binder.index + 1 :]:
                side = {root: set(callees) for root, callees in later.side_calls.items()}
                for root, callees in later.body_side_calls.items():
                    side.setdefault(root, set()).update(callees)
                called = {root for root in side.keys() & family.keys()
                          if not all(_harmless_side_call(family[root], root, callee) for callee in side[root])}
                if called and name not in self.policy.stubs:
                    code = self.a.module.code_for_node(later.node).strip().splitlines()[0]
                    raise ExtractError(
                        f"{self.display}:{later.first}: `{code}` calls into the imported "
                        f"{sorted(called)[0]!r} for its effect when the file is imported (its module's state: a "
                        f"seed, a logger's level, a registry), and {need.root} uses {name!r} (line {line}); "
                        f"extract does not replay changes to imported modules (they would leak into the test "
                        f"process): stub {name!r}"
                    )
                changed = sorted((later.stores | later.body_stores) & ({name} | family.keys()))
                if changed and name not in self.policy.stubs:
                    code = self.a.module.code_for_node(later.node).strip().splitlines()[0]
                    through = "" if changed == [name] else f" (through {changed[0]!r})"
                    raise ExtractError(
                        f"{self.display}:{later.first}: `{code}` changes the imported {name!r}{through} when the file is "
                        f"imported, and {need.root} uses {name!r} (line {line}); extract does not replay changes "
                        f"to imported modules (they would leak into the test process): stub {name!r}"
                    )
            return
        self._keep(binder, None, _Need(name, line, need.root))
        for mutator in self.a.mutators(name, binder.index):
            self._keep(mutator, None, _Need(name, mutator.first, need.root))

    def _keep(self, unit: _Unit, members: set[str] | None, need: _Need) -> None:
        previous = self.keep_units.get(unit.index, set())
        if unit.index in self.keep_units and previous is None:
            return
        if members is not None:
            members = self._follow_self(unit, members | (previous or set()))
        merged = None if members is None or previous is None else previous | members
        if unit.index in self.keep_units and merged == previous:
            return
        self.keep_units[unit.index] = merged
        lines = self.kept_lines(unit, merged)
        for line, how in self.a.body_dynamic(unit):
            if line in lines:
                raise ExtractError(
                    f"{self.display}:{line}: {need.root} needs code that reaches the module namespace dynamically "
                    f"({how}): the names it reads or binds there cannot be followed; stub {need.name!r}"
                )
        for access in self.a.accesses[unit.index]:
            if access.line not in lines or access.line in unit.dead_lines:
                continue
            self._need_name(access, unit, need)
        self._import_time_reads(unit, lines, need)
        if unit.kind not in ("import", "star"):
            self._local_imports(unit, lines, need)
        if self.a.binds_at_module_level("__name__"):
            # a def or class (or lambda) made here takes its __module__ from the __name__ of the moment
            self._need_name(_Access("__name__", unit.first, True, "global"), unit, need)

    def _local_imports(self, unit: _Unit, lines: set[int], need: _Need) -> None:
        """An import inside kept code (a function body, a block) gets the module as the process has it:
        if the file changed that module's state at import (`os.environ[k] = v`, `random.seed(0)`), the
        extraction would not see the change (it is never replayed): refuse, naming both lines."""
        for node in [*_nodes_of(unit.node, cst.Import), *_nodes_of(unit.node, cst.ImportFrom)]:
            line = self.a.positions[node].start.line
            if line not in lines or line in unit.dead_lines:
                continue
            if isinstance(node, cst.Import):
                modules = [_dotted_or_none(alias.name) or "" for alias in node.names]
            elif node.relative or node.module is None:
                continue
            else:
                modules = [_dotted_or_none(node.module) or ""]
            for module in modules:
                top = module.split(".")[0]
                if not top or top in self.policy.stubs or module in self.policy.stubs or self.policy.verdict(module):
                    continue
                change = self.a.module_state_change(top)
                if change is not None:
                    changer, through = change
                    code = self.a.module.code_for_node(changer.node).strip().splitlines()[0]
                    raise ExtractError(
                        f"{self.display}:{changer.first}: `{code}` changes the state of the imported {top!r} "
                        f"(through {through!r}) when the file is imported, and {need.root} imports {module!r} "
                        f"at line {line}; extract does not replay changes to imported modules (they would leak "
                        f"into the test process): stub {top!r}"
                    )

    def _import_time_reads(self, unit: _Unit, lines: set[int], need: _Need) -> None:
        """A function of the file that kept import-time code calls (directly, as a decorator, a metaclass,
        through a base class) reads the bindings of that moment, not the file's last ones: enum's
        ``EnumType.__new__`` checks ``Enum is not None`` while ``class Enum`` is being made. Those
        earlier bindings are kept too (a name with none then is left to raise NameError, as it would)."""
        if unit.kind in ("import", "star", "typing"):
            return
        names = {a.name for a in self.a.accesses[unit.index] if a.immediate and a.line in lines}
        seen: set[int] = set()
        todo = sorted(names)
        while todo:
            name = todo.pop()
            for callee in self.a._callables(name, unit.index):
                if callee.index in seen or callee is unit:
                    continue
                seen.add(callee.index)
                for access in self.a.accesses[callee.index]:
                    if access.soft or access.name in _IMPLICIT_NAMES:
                        continue
                    for binder in self.a.bindings(access.name, unit.index):
                        if binder is not unit:
                            self._use_binder(access.name, binder, access.line, need)
                    todo.append(access.name)

    def _need_name(self, access: _Access, unit: _Unit, need: _Need) -> None:
        name = access.name
        if name in _IMPORT_SYSTEM_NAMES and not self.a.binds_at_module_level(name):
            raise ExtractError(
                f"{self.display}:{access.line}: {need.root} reads {name!r}, which the import system gives the "
                "module (its spec, loader, cached path); an extraction is not imported and has none"
            )
        if name in _IMPLICIT_NAMES and not self.a.binds_at_module_level(name):
            return  # what the module has without binding it (`__name__`, `__doc__`, …) unless the file rebinds it
        if access.soft:
            # `from __future__ import annotations`: dataclasses still look ClassVar/InitVar up by name
            for binder in self.a.bindings(name, unit.index):
                imp = binder.imports.get(name) if binder.kind == "import" else None
                if (
                    imp is not None
                    and imp.module.split(".")[0] in _DATACLASS_TYPING
                    and name not in self.policy.stubs
                ):
                    self.bind.setdefault((name, binder.index), (imp, _Need(need.name, access.line, need.root)))
            return
        self.requires.setdefault(need.root, set()).add(name)
        if name in self.policy.stubs:
            self._stub(name, access.line, need)
            return
        binders = self.a.bindings(name, unit.index if access.immediate else None)
        self._star_may_rebind(name, binders, unit.index if access.immediate else len(self.a.units), access.line, need.root)
        if not binders and (name in unit.defines or name in _IMPLICIT_NAMES):
            return  # bound inside the same statement (`try: import x as y` … `y.attr`), which is kept
        if not binders:
            self._unbound(access, need)
            return
        for binder in binders:
            if binder is not unit:
                self._use_binder(name, binder, access.line, need)

    def _star_may_rebind(self, name: str, binders: list[_Unit], stop: int, line: int, root: str) -> None:
        """Refuse when a star import extract cannot follow runs after ``name``'s last sure binding."""
        if not binders:
            return  # no binding at all: refused as unbound (naming the star import) where that is checked
        start = binders[-1].index + 1 if name in binders[-1].unconditional else 0
        star = self.a.unknown_star_between(name, start, stop)
        if star is not None:
            used = f" (line {line})" if line else ""
            raise StarImportRefused(
                f"{self.display}:{star.first}: `{star.star_unknown}` may rebind {name!r}, which {root} uses{used}; "
                "extract follows star imports of the standard library only: stub the name or extract from the "
                "module it comes from"
            )

    def _unbound(self, access: _Access, need: _Need) -> None:
        """``access.name`` has no module-level binding before it: refuse, naming file, line and name."""
        name = access.name
        if name in self.a.runtime_globals and not access.immediate:
            return  # bound by a function's `global` statement when that function runs, as in the file
        if hasattr(builtins, name):
            return
        typing_unit = self.a.typing_only(name)
        if typing_unit is not None:
            raise ExtractError(
                f"{self.display}:{access.line}: {name!r} is only imported under `if TYPE_CHECKING:` "
                f"(line {typing_unit.first}) but {need.root} uses it at run time; stub it"
            )
        stars = self.a.star_units()
        if stars:
            star = stars[0]
            raise StarImportRefused(
                f"{self.display}:{access.line}: {name!r} (needed by {need.root}) is not defined in the file; "
                f"it may come from the star import at line {star.first} "
                f"(`{star.star_unknown}`), which extract cannot follow; stub it"
            )
        self.unresolved.setdefault(name, []).append(access.line)
        later = self.a.binding(name, None) if access.immediate else None
        when = f" before line {access.line} (it is bound later, at line {later.first})" if later else ""
        raise ExtractError(
            f"{self.display}:{access.line}: {name!r} is used by {need.root} but nothing in the file binds it"
            f"{when} and it is not a builtin: the code would raise NameError"
        )

    def _follow_self(self, unit: _Unit, members: set[str]) -> set[str]:
        """``members`` plus every method their ``self.x`` / ``cls.x`` reads reach, transitively.

        Refuses (naming the attribute and line) a ``self.x`` the class cannot provide: no method,
        class attribute or ``self.x = ...`` of that name, and no base, decorator or ``__getattr__``
        that could supply it.
        """
        info = _class_info(unit.node)  # type: ignore[arg-type]
        # the class body's own statements (kept whole) may name a method: `h = g`, `x = property(k)`
        body_refs = _NameRefs()
        for stmt in unit.node.body.body:  # type: ignore[attr-defined]
            if not isinstance(stmt, cst.FunctionDef):
                stmt.visit(body_refs)
        result = set(members) | (body_refs.names & set(info.methods))
        # a method decorated through a kept one (`@g.register`, `@g.setter`) changes it when defined
        decorated_by = {
            name: {n for fn in fns for deco in fn.decorators for n in _names_in(deco)}
            for name, fns in info.methods.items()
        }
        todo = list(result)
        while todo:
            member = todo.pop()
            for other, refs in decorated_by.items():
                if member in refs and other not in result:
                    result.add(other)
                    todo.append(other)
            for fn in info.methods.get(member, []):
                deco_refs = _NameRefs()
                for deco in fn.decorators:
                    deco.visit(deco_refs)
                for attr in deco_refs.names & set(info.methods) - result:
                    result.add(attr)
                    todo.append(attr)
                for attr, node in _self_reads(fn, info.name):
                    if attr in info.methods:
                        if attr not in result:
                            result.add(attr)
                            todo.append(attr)
                    elif attr in info.attributes or self._provided_elsewhere(unit, info, attr):
                        continue
                    else:
                        line = self.a.positions[node].start.line
                        raise ExtractError(
                            f"{self.display}:{line}: {info.name}.{member} reads {attr!r} from its instance/class, "
                            f"but class {info.name} (line {unit.first}) has no method, class attribute or "
                            f"self.{attr} assignment named {attr!r}, and no base that could provide it"
                        )
        return result

    def _provided_elsewhere(self, unit: _Unit, info: _ClassInfo, attr: str, depth: int = 0) -> bool:
        if hasattr(object, attr) or hasattr(type, attr) or info.open or depth > 20:
            return True
        for base in info.bases:
            if base == "object":
                continue
            binder = self.a.binding(base, unit.index) if base else None
            if binder is None or binder.kind != "class":
                return True  # an imported, stubbed or computed base: it may define anything
            base_info = _class_info(binder.node)  # type: ignore[arg-type]
            if attr in base_info.methods or attr in base_info.attributes:
                return True
            if self._provided_elsewhere(binder, base_info, attr, depth + 1):
                return True
        return False

    def kept_lines(self, unit: _Unit, members: set[str] | None) -> set[int]:
        if members is None:
            return set(range(unit.first, unit.last + 1))
        node = unit.node
        body = node.body.body  # type: ignore[attr-defined]
        # the header ends before the first body statement, its decorators included (a left-out first
        # method's `@staticmethod` is its own, not the header's: kept, it would decorate the next kept def)
        first_body = (
            min([self.a.positions[body[0]].start.line]
                + [self.a.positions[d].start.line for d in getattr(body[0], "decorators", ()) or ()])
            if body else 0
        )
        header_end = first_body - 1 if body else unit.last
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

    def execute(
        self, modname: str, package: str, names: tuple[str, ...], *, is_package: bool = False
    ) -> types.ModuleType:
        source_lines = self.a.source.splitlines(keepends=True)
        keep: set[int] = set()
        for index, members in self.keep_units.items():
            keep |= self.kept_lines(self.a.units[index], members)
        left_out = self._left_out_lines(source_lines)
        by_unit: dict[int, list[str]] = {}
        for name, index in sorted(self.bind, key=lambda key: (key[1], key[0])):
            by_unit.setdefault(index, []).append(name)
        for index, bound in by_unit.items():
            first = self.a.units[index].first
            left_out[first] = "; ".join(f"{name} = {_IMPORTED}[{f'{name}@{index}'!r}]" for name in bound) + "\n"
        text = "".join(
            line if number in keep else left_out.get(number, "\n" if line.endswith("\n") else "")
            for number, line in enumerate(source_lines, start=1)
        )
        namespace = types.ModuleType(modname)
        namespace.__file__ = self.display
        namespace.__package__ = package
        namespace.__doc__ = self.a.docstring()
        if is_package:
            namespace.__path__ = [self.display.rsplit("/", 1)[0]]  # type: ignore[attr-defined]
        guarded = dict(vars(builtins))
        refused_at_import: list[tuple[str, RefusedImport]] = []
        guarded["__import__"] = self.policy.guarded_import(self.display, refused_at_import)
        namespace.__dict__["__builtins__"] = guarded
        for name in sorted(self.stubbed):
            namespace.__dict__[name] = self.policy.stubs[name]
        # each import binds its names where it stands in the file (a later import or statement may rebind
        # them, and code between them sees the binding of the moment): the module is loaded here, under
        # the import policy, and the statement's line binds the names from it
        imported: dict[str, Any] = {}
        for (name, index), (imp, need) in sorted(self.bind.items(), key=lambda kv: (kv[1][1].line, kv[0][1])):
            imported[f"{name}@{index}"] = self._bind_import(imp, need)
        linecache.cache[self.display] = (
            len(self.a.source),
            None,
            self.a.source.splitlines(True),
            self.display,
        )
        flags = self.a.future_flags  # the file's own future imports, nothing forced
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
        placeholders: list[_LeftOut] = []
        namespace.__dict__[_IMPORTED] = imported
        def left_out(qualname: str, line: int, kept: str, on_get: bool, wrap: str | None, doc: str | None) -> Any:
            placeholder = _LeftOut(self.display, qualname, line, kept, on_get)
            placeholders.append(placeholder)
            if on_get:
                return placeholder
            # a plain method (or static/class method) stands as a function, as the real one is, so that
            # introspection (`inspect.getmembers(C, inspect.isfunction)`, `callable`, `__name__`) sees
            # what the module has; calling it refuses
            return _left_out_function(placeholder, namespace.__name__, doc, wrap)

        namespace.__dict__[_LEFT_OUT] = left_out
        try:
            exec(code, namespace.__dict__)
        finally:
            namespace.__dict__.pop(_LEFT_OUT, None)
            namespace.__dict__.pop(_IMPORTED, None)
            if registered:
                sys.modules.pop(modname, None)
        refused = list(refused_at_import)
        refused_at_import.clear()  # refusals when the functions run later reach the caller themselves
        self._refused_and_caught(refused)
        for placeholder in placeholders:
            placeholder.armed = True
        namespace.__extracted__ = names  # type: ignore[attr-defined]
        namespace.__requires__ = {k: frozenset(v) for k, v in self.requires.items()}  # type: ignore[attr-defined]
        namespace.__unresolved__ = {k: tuple(v) for k, v in self.unresolved.items()}  # type: ignore[attr-defined]
        namespace.__kept_lines__ = frozenset(keep)  # type: ignore[attr-defined]
        return namespace

    def _refused_and_caught(self, refused: list[tuple[str, RefusedImport]]) -> None:
        """An import the policy refused while the file's import-time code ran, which that code caught
        (``try: import xxhash except ImportError: xxhash = None``): RefusedImport is an ImportError, so
        the file went on with the fallback it takes only when the module is missing. Refused when the
        real file would have imported it: the module is installed here; or it is of the file's own
        package (a relative import, or the package's top name: the tree under test holds it, as
        vllm/version.py's ``from ._version import`` beside its ``_version.py``), or a heavy one
        (ttnn, torch, vllm: never in the offline venv, always where the file is served). A missing
        third-party module: the file's fallback is what it does here too."""
        own = self.package.split(".")[0] if self.package else None
        for name, exc in refused:
            top = name.split(".")[0]
            if not top:
                why = "it is a relative import: the file's own package, which the tree it runs in holds"
            elif top == own:
                why = f"{top!r} is the file's own package, which the tree it runs in holds"
            elif top in self.policy.refuse:
                why = f"{top!r} is a heavy import, installed wherever the file is served"
            else:
                try:
                    installed = importlib.util.find_spec(top) is not None
                except (ImportError, ValueError):
                    installed = False
                why = f"{top!r} is installed" if installed else ""
            if why and top not in self.policy.stubs:
                raise observed(
                    ExtractError(
                        f"{exc}; the file's import-time code caught it (except ImportError) and went on "
                        f"with its fallback, but {why}: the file would have imported it"
                    )
                ) from exc

    def _left_out_lines(self, source_lines: list[str]) -> dict[int, str]:
        """For each method left out of a partly kept class, a line binding its name to a ``_LeftOut``
        placeholder (on the method's first line, so no line number moves): a left-out member is never
        silently absent (``getattr(self, "h", default)``, ``len(self)``, ``C.h()`` would not see it)."""
        out: dict[int, str] = {}
        for index, members in self.keep_units.items():
            if members is None:
                continue
            unit = self.a.units[index]
            kept = ", ".join(sorted(members)) or "none"
            for stmt in unit.node.body.body:  # type: ignore[attr-defined]
                if not isinstance(stmt, cst.FunctionDef) or stmt.name.value in members:
                    continue
                first = min(
                    [self.a.positions[stmt].start.line]
                    + [self.a.positions[d].start.line for d in stmt.decorators]
                )
                text = source_lines[first - 1]
                indent = text[: len(text) - len(text.lstrip())]
                qualname = f"{unit.node.name.value}.{stmt.name.value}"  # type: ignore[attr-defined]
                decorators = [_dotted_or_none(d.decorator) for d in stmt.decorators]
                on_get = any(d not in ("staticmethod", "classmethod") for d in decorators)
                wrap = decorators[0] if len(decorators) == 1 and not on_get else None
                if len(decorators) > 1:
                    on_get = True  # `@staticmethod @cache`: no plain function stands for it
                doc = stmt.get_docstring(clean=False)
                out[first] = (
                    f"{indent}{stmt.name.value} = {_LEFT_OUT}({qualname!r}, {first}, {kept!r}, {on_get}, "
                    f"{wrap!r}, {doc!r})\n"
                )
        return out

    def _bind_import(self, imp: _Import, need: _Need) -> Any:
        module = _resolve_relative(imp, self.package)
        where = f"{self.display}:{imp.line}"
        if imp.module == "__future__":  # `import __future__` binds the module (codeop reads all_feature_names)
            return getattr(__future__, imp.attr) if imp.attr else __future__
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


_LEFT_OUT = "__materialize_left_out__"
_IMPORTED = "__materialize_imported__"


class _LeftOut:
    """Stands for a method ``Class.member`` extraction left out: any use of it after extraction raises
    ``ExtractError`` naming the method's file and line (never ``AttributeError``, which ``hasattr`` and
    ``getattr(obj, name, default)`` would swallow). A plain method is fetched as this object and
    refuses when called (Python swallows errors raised while *looking up* ``__eq__`` and other
    comparison slots, not errors raised by calling them); a property-like member (any other
    decorator) refuses when fetched. While the class is being created (metaclasses, decorators,
    ``ABCMeta`` looking for abstract methods) it is inert."""

    def __init__(self, display: str, qualname: str, line: int, kept: str, on_get: bool) -> None:
        self.display, self.qualname, self.line, self.kept, self.on_get = display, qualname, line, kept, on_get
        self.armed = False

    def _refuse(self) -> BaseException:
        return observed(
            ExtractError(
                f"{self.display}:{self.line}: {self.qualname} was left out of this extraction (only {self.kept} "
                f"requested from its class) but is used: request {self.qualname!r} too"
            )
        )

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if self.armed and self.on_get:
            raise self._refuse()
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not self.armed:
            raise AttributeError(name)
        raise self._refuse()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse()

    def __bool__(self) -> bool:
        raise self._refuse()


class _NoSignature:
    """A left-out method's ``__signature__``: ``inspect.signature`` raises instead of showing ``(*args, **kwargs)``."""

    def __init__(self, qualname: str) -> None:
        self.qualname = qualname

    def __repr__(self) -> str:
        return f"<{self.qualname} was left out of this extraction: its signature is unknown>"


def _left_out_function(placeholder: _LeftOut, module: str, doc: str | None, wrap: str | None) -> Any:
    """A function standing for a left-out method: its name, qualified name, module and docstring are
    the method's; calling it raises the placeholder's ``ExtractError``; ``inspect.signature`` raises."""

    def left_out(*args: Any, **kwargs: Any) -> Any:
        raise placeholder._refuse()

    name = placeholder.qualname.rsplit(".", 1)[-1]
    left_out.__name__ = name
    left_out.__qualname__ = placeholder.qualname
    left_out.__module__ = module
    left_out.__doc__ = doc
    left_out.__signature__ = _NoSignature(placeholder.qualname)  # type: ignore[attr-defined]
    if wrap == "staticmethod":
        return staticmethod(left_out)
    if wrap == "classmethod":
        return classmethod(left_out)
    return left_out


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


def _target_names(target: cst.BaseExpression) -> set[str]:
    """Names an assignment target binds (``a``, ``a, (b, *c)``); attributes and subscripts bind none."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, cst.Tuple | cst.List):
        names: set[str] = set()
        for element in target.elements:
            names |= _target_names(element.value)
        return names
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return set()


class _Collector(cst.CSTVisitor):
    """One pass over the module: annotation nodes of variable annotations, and every name an import binds."""

    def __init__(self) -> None:
        self.annotation_nodes: set[int] = set()
        self.import_names: set[str] = set()
        self._in_annotation = 0

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        node.annotation.visit(_IdCollector(self.annotation_nodes))

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:  # `import a.b` binds a, `import a.b as c` binds c
            name = alias.asname.name if alias.asname is not None else alias.name
            self.import_names.add(_dotted(name).split(".")[0])  # type: ignore[arg-type]

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:  # `from a.b import c as d` binds d: never a, a.b or c
            self.import_names.add(_dotted(alias.asname.name if alias.asname is not None else alias.name))  # type: ignore[arg-type]


class _IdCollector(cst.CSTVisitor):
    def __init__(self, into: set[int]) -> None:
        self.into = into

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.into.add(id(node))
        return True


def _var_annotation_nodes(module: cst.Module) -> set[int]:
    collector = _Collector()
    module.visit(collector)
    return collector.annotation_nodes


class _NodesOf(cst.CSTVisitor):
    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.found: list[Any] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.kind):
            self.found.append(node)
        return True


def _nodes_of(module: cst.Module, kind: type) -> list[Any]:
    visitor = _NodesOf(kind)
    module.visit(visitor)
    return visitor.found


def _all_imports(module: cst.Module) -> dict[str, str]:
    """Every absolute import of the file, at any depth: bound name -> the module (or ``module.attr``) it names."""
    out: dict[str, str] = {}
    for node in _nodes_of(module, cst.Import):
        for alias in node.names:
            dotted = _dotted_or_none(alias.name) or ""
            bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else dotted.split(".")[0]
            out[bound] = dotted if alias.asname else dotted.split(".")[0]
    for node in _nodes_of(module, cst.ImportFrom):
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            continue
        base = _dotted_or_none(node.module) or ""
        for alias in node.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else ""
            bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            out[bound] = f"{base}.{name}"
    return out


def _all_import_names(module: cst.Module) -> set[str]:
    """Every name any import in the file binds (module level or not): the names a stub may replace."""
    collector = _Collector()
    module.visit(collector)
    return collector.import_names


@dataclass
class _ClassInfo:
    name: str
    methods: dict[str, list[cst.FunctionDef]]
    attributes: set[str]  # class-level assignments, nested classes, self.x = ... in any method
    bases: list[str]  # dotted names of the bases ("" for a computed base)
    open: bool  # decorated (other than @dataclass), a metaclass, __getattr__, __slots__ tricks: anything goes


def _class_info(node: cst.ClassDef) -> _ClassInfo:
    methods: dict[str, list[cst.FunctionDef]] = {}
    attributes: set[str] = set()
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef):
            methods.setdefault(stmt.name.value, []).append(stmt)
        elif isinstance(stmt, cst.ClassDef):
            attributes.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        attributes |= _target_names(t.target)
                elif isinstance(small, cst.AnnAssign | cst.AugAssign):
                    attributes |= _target_names(small.target)
        else:  # if/try/for at class level: whatever it binds
            collector = _StoreCollector()
            stmt.visit(collector)
            attributes |= collector.names
    for fns in methods.values():
        for fn in fns:
            first = _first_param(fn)
            if first is not None:
                collector = _StoreCollector(first)
                fn.body.visit(collector)
                attributes |= collector.attributes
    bases = []
    for arg in node.bases:
        try:
            bases.append(_dotted(arg.value))
        except ExtractError:
            bases.append("")
    decorators = []
    for deco in node.decorators:
        target = deco.decorator.func if isinstance(deco.decorator, cst.Call) else deco.decorator
        try:
            decorators.append(_dotted(target).rsplit(".", 1)[-1])
        except ExtractError:
            decorators.append("")
    open_ = (
        bool(node.keywords)
        or any(d != "dataclass" for d in decorators)
        or bool({"__getattr__", "__getattribute__"} & set(methods))
    )
    return _ClassInfo(node.name.value, methods, attributes, bases, open_)


class _StoreCollector(cst.CSTVisitor):
    """Names stored by assignments (class-level compound statements) and ``self.x`` stores."""

    def __init__(self, owner: str | None = None) -> None:
        self.owner = owner
        self.names: set[str] = set()
        self.attributes: set[str] = set()

    def _target(self, target: cst.BaseExpression) -> None:
        self.names |= _target_names(target)
        for element in _flatten_targets(target):
            if (
                self.owner is not None
                and isinstance(element, cst.Attribute)
                and isinstance(element.value, cst.Name)
                and element.value.value == self.owner
            ):
                self.attributes.add(element.attr.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        # setattr(self, "x", ...) / object.__setattr__(self, "x", ...) (frozen dataclasses)
        func = node.func
        name = (
            func.value
            if isinstance(func, cst.Name)
            else func.attr.value
            if isinstance(func, cst.Attribute)
            else ""
        )
        if name in ("setattr", "__setattr__") and self.owner is not None and len(node.args) >= 2:
            obj, attr = node.args[0].value, node.args[1].value
            if isinstance(obj, cst.Name) and obj.value == self.owner and isinstance(attr, cst.SimpleString):
                value = attr.evaluated_value
                if isinstance(value, str):
                    self.attributes.add(value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self.owner is None:
            self.names.add(node.name.value)
        return self.owner is not None  # nested functions may still set self.x

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if self.owner is None:
            self.names.add(node.name.value)
        return False


def _flatten_targets(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, cst.Tuple | cst.List):
        out: list[cst.BaseExpression] = []
        for element in target.elements:
            out += _flatten_targets(element.value)
        return out
    if isinstance(target, cst.StarredElement):
        return _flatten_targets(target.value)
    return [target]


def _first_param(fn: cst.FunctionDef) -> str | None:
    """The instance/class parameter (``self``, ``cls``), or None for a staticmethod."""
    for deco in fn.decorators:
        if isinstance(deco.decorator, cst.Name) and deco.decorator.value == "staticmethod":
            return None
    params = list(fn.params.posonly_params) + list(fn.params.params)
    return params[0].name.value if params else None


class _SelfReads(cst.CSTVisitor):
    def __init__(self, owners: set[str]) -> None:
        self.owners = owners
        self.reads: list[tuple[str, cst.CSTNode]] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value in self.owners:
            self.reads.append((node.attr.value, node))


class _SourceNames(cst.CSTVisitor):
    """Names whose objects an expression may evaluate to, or to a part of: not a called function's
    name (``Foo()`` makes a new object), nor code in a lambda; ``copied``: names it makes a shallow
    copy of (``dict(REG)``, ``sorted(ROWS)``)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.copied: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Call(self, node: cst.Call) -> bool:
        if not isinstance(node.func, cst.Name):
            node.func.visit(self)
        elif node.func.value in _COPIES:
            inner = _SourceNames()
            for arg in node.args:
                arg.visit(inner)
            self.copied |= inner.names | inner.copied
            return False
        for arg in node.args:
            arg.visit(self)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


class _NameRefs(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _names_in(node: cst.CSTNode) -> set[str]:
    visitor = _NameRefs()
    node.visit(visitor)
    return visitor.names


def _self_reads(fn: cst.FunctionDef, class_name: str) -> list[tuple[str, cst.CSTNode]]:
    """``(attr, node)`` for every ``self.attr`` / ``cls.attr`` / ``ClassName.attr`` in ``fn`` (reads and writes)."""
    owner = _first_param(fn)
    visitor = _SelfReads({class_name} | ({owner} if owner else set()))
    fn.body.visit(visitor)
    return visitor.reads


class _HiddenBindings(cst.CSTVisitor):
    """Module names bound by a top-level statement that the scope analysis leaves out: a ``:=`` inside
    a comprehension (it binds in the module) and the captures of a ``match`` case (``case [a, b]:``).
    Function, lambda and class bodies are not walked: their names are theirs."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if isinstance(node.target, cst.Name):
            self.names.add(node.target.value)

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self.names.add(node.name.value)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self.names.add(node.name.value)

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None:
            self.names.add(node.rest.value)


def _hidden_module_bindings(node: cst.CSTNode) -> set[str]:
    visitor = _HiddenBindings()
    node.visit(visitor)
    return visitor.names


def _root_name(node: cst.BaseExpression, *, through_calls: bool = False) -> str | None:
    """``X`` for ``X``, ``X.a.b``, ``X[k]``, ``X.a[k].b``; with ``through_calls`` also ``X.f(…).g``,
    the name a chain of calls starts from."""
    while isinstance(node, cst.Attribute | cst.Subscript) or (through_calls and isinstance(node, cst.Call)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else None


def _harmless_side_call(origin: str, root: str, callee: str) -> bool:
    """Whether ``callee`` (as written, from ``root``, the import of ``origin``) changes nothing code
    can read while the process runs: a hook for fork or exit, a warning printed."""
    return bool(callee) and origin + callee[len(root):] in _HARMLESS_SIDE_CALLS


_HARMLESS_SIDE_CALLS = frozenset({
    "os.register_at_fork", "atexit.register", "threading._register_atexit", "warnings.warn",
    "warnings._deprecated", "sys.audit",
})
"""Calls an import makes for an effect no code reads while the process runs (at fork, at exit, a warning
printed): ``logging``'s ``os.register_at_fork(...)`` does not make code that uses ``os`` refused."""

_READ_ONLY_METHODS = frozenset(
    [
        "get",
        "keys",
        "values",
        "items",
        "copy",
        "count",
        "index",
        "find",
        "rfind",
        "format",
        "format_map",
        "join",
        "split",
        "rsplit",
        "splitlines",
        "strip",
        "lstrip",
        "rstrip",
        "startswith",
        "endswith",
        "lower",
        "upper",
        "casefold",
        "replace",
        "encode",
        "decode",
        "isdigit",
        "isalpha",
        "isalnum",
        "isidentifier",
        "isspace",
        "partition",
        "rpartition",
        "zfill",
        "ljust",
        "rjust",
        "center",
        "fullmatch",
        "match",
        "search",
        "findall",
        "finditer",
        "sub",
        "subn",
        "group",
        "groups",
        "groupdict",
        "union",
        "intersection",
        "difference",
        "symmetric_difference",
        "issubset",
        "issuperset",
        "isdisjoint",
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "log",
        "getLogger",
        "getChild",
        "isEnabledFor",
        "bit_length",
        "to_bytes",
        "hex",
        "is_integer",
        "conjugate",
    ]
)
"""Methods that only read their object: calling one does not change what a definition sees."""

_PURE_BUILTINS = frozenset(
    [
        "abs",
        "all",
        "any",
        "ascii",
        "bin",
        "bool",
        "bytes",
        "callable",
        "chr",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "format",
        "frozenset",
        "hash",
        "hex",
        "id",
        "int",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "oct",
        "ord",
        "pow",
        "range",
        "repr",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "str",
        "sum",
        "tuple",
        "type",
        "zip",
        "getattr",
        "hasattr",
        "print",
        "super",
    ]
)
"""Builtins that never change an argument (``setattr``, ``delattr``, ``vars`` are not among them)."""

_MUTATING_METHODS = frozenset(
    {
        "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault", "add",
        "discard", "sort", "reverse", "difference_update", "intersection_update", "symmetric_difference_update",
        "__setitem__", "__delitem__", "__setattr__", "__delattr__",
    }
)  # fmt: skip
"""Container methods that change their object: how code changes an imported module's state in place
(``os.environ.setdefault``, ``sys.path.insert``); any other call on a module attribute is taken as a read."""

_CONSUMING_BUILTINS = frozenset({
    "all", "any", "bytearray", "bytes", "dict", "enumerate", "filter", "frozenset", "list", "map", "max", "min",
    "next", "set", "sorted", "sum", "tuple", "zip",
})  # fmt: skip
"""Builtins that iterate an argument (now or when their result is iterated): an iterator handed to one
is advanced, which a later reader sees."""

_RETURNS_FROM_ARGS = frozenset({"next", "iter", "getattr", "min", "max", "reversed", "vars", "type", "dict", "list"})
"""Builtins whose result may be (a part of) an argument: a change made through it changes the argument."""

_COPIES = frozenset({"dict", "list", "set", "frozenset", "tuple", "sorted"})
"""Builtins that return a new container holding the elements of their argument."""

_DYNAMIC_CALLS = frozenset({"globals", "locals", "exec", "eval"})
"""Calls through which code may read or bind module names that no statement names."""

_CLASS_PARAMS = frozenset({"cls", "mcs", "mcls", "metacls", "klass"})

_FUNCTION_CHANGERS = frozenset({"update_wrapper", "wraps", "setattr", "delattr"})
"""What imported calls handed a function may do to it that the file's own code cannot show: copy attributes
onto it (``functools.update_wrapper(fn, g)``, ``functools.wraps(g)(fn)``)."""

_NAMESPACE_ATTRIBUTES = frozenset({"f_globals", "f_locals", "f_builtins", "__globals__", "func_globals"})
"""Attributes that are a module's namespace (a frame's, a function's globals): a write through one binds
module names that no statement names."""

_BARE_DYNAMIC = frozenset({"globals", "locals", "vars", "exec", "eval"})
"""Builtins that reach the namespace of their caller: taken as a value (`g = globals`) they may be called
anywhere, with anything."""


def _literal_string(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal (``"x"``, ``"a" "b"``), else None."""
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _read_only_expression(text: str) -> bool:
    """Whether ``eval(text)`` can only read names: no ``:=`` (binds in the caller's namespace) and no call
    (which may run any code, `exec` or a function with `global` included)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return True  # raises when evaluated, as in the file
    return not any(isinstance(n, ast.NamedExpr | ast.Call) for n in ast.walk(tree))


class _Effects(cst.CSTVisitor):
    """What running some code may change at module level: the names whose object it may mutate or
    whose binding it may change, and whether it reaches the module namespace dynamically
    (``globals()``, ``vars()``, ``exec``, ``sys.modules[__name__]``).

    Conservative on purpose: any method call other than a known read-only one may mutate its object,
    and any object passed to a call (other than a pure builtin) may be mutated by the callee.
    ``immediate`` walks only the code that runs when a top-level statement runs (not function or
    lambda bodies; their decorators, defaults and class bodies do run). Walking a class's methods
    (``class_name``), a change through ``cls`` or through ``self.x`` (``self.x.append(…)``, which may
    be a class attribute shared by every instance) is a change of the class.
    """

    def __init__(
        self,
        immediate: bool,
        class_name: str | None = None,
        *,
        annotations_run: bool = False,
        bare: frozenset[int] = frozenset(),
    ) -> None:
        self.immediate = immediate
        self.bare = bare  # ids of the Name nodes that take `globals`/`vars`/`exec`/... as a value (`g = globals`)
        self.annotations_run = annotations_run  # a def's annotations are evaluated when it runs (no future import)
        self.class_name = class_name
        self.owners: list[tuple[str, bool]] = []  # (first parameter, whether it is the class)
        self.changed: set[str] = set()
        self.rebound: set[str] = set()
        self.passed: set[str] = set()
        self.passed_to: dict[str, set[str]] = {}  # name passed -> the callees it was passed to, as written
        self.stores: set[str] = set()  # changed through an attribute or item of it (`os.environ[k] = v`)
        # ``immediate``: the calls made as statements (for their effect), by the name they start from
        self.side_calls: dict[str, set[str]] = {}
        self.deleted: set[str] = set()
        self.refs: set[str] = set()
        self.dynamic: list[tuple[cst.CSTNode, str]] = []
        self._depth = 0
        self.derived: list[dict[str, set[str]]] = []  # per function being walked: local -> names it may alias
        self.copied: list[dict[str, set[str]]] = []  # ... local -> names it may be a shallow copy of
        self.calls = False  # ``immediate`` code calls something (which may run code that escaped earlier)
        self.lambdas: list[_BodyEffects] = []  # ``immediate``: what the lambdas made now may change when run
        self.lambda_refs: set[str] = set()  # ... and the names their bodies read (functions they may call)
        # names whose *call result* (or what a builtin returns from them: `next(gen())`) is changed:
        # `registry()['a'] = 1`, `getcontext().prec = 3`, `get().update(…)`
        self.call_results: set[str] = set()
        self.called: set[str] = set()  # names called as `name(…)`: a closure or bound method keeps state
        # names whose iterator may be advanced (`for x in IT`, `zip(IT, …)`, `list(G)`): a change unless
        # the object is a container display (decided where the binding is known)
        self.consumed: set[str] = set()

    def _changes(self, obj: cst.BaseExpression, into: set[str] | None = None) -> None:
        """``obj`` (an expression naming an object) may be changed."""
        into = self.changed if into is None else into
        root = _root_name(obj)
        if root is None:
            # the object is what a call returned: any object the callee can reach (`registry()['a'] = 1`)
            for name in _call_chain_names(obj):
                self.call_results.add(name)
                into.add(name)
            base = obj
            while isinstance(base, cst.Attribute | cst.Subscript | cst.Call):
                base = base.func if isinstance(base, cst.Call) else base.value
            if not isinstance(base, cst.Name | cst.Call):
                # or any object the expression holds: `(b := A).append(1)`, `(A or B).append(1)`, `[A][0]`
                for name in sorted(_names_in(base)):
                    self._changes(cst.Name(name), into)
            return
        # a local bound from module names (`for a, b in PAIRS:`, `r = REG`) may be one of their objects; a
        # copy of one (`m = dict(REG)`) is a new object whose elements are theirs (`m[k].append(x)`)
        aliased: set[str] = set()
        if self.derived:
            aliased = self.derived[-1].get(root, set())
            if not isinstance(obj, cst.Name):
                aliased = aliased | self.copied[-1].get(root, set())
        for name in (root, *sorted(aliased)):
            if self.owners and name == self.owners[-1][0] and name:
                if self.class_name is not None and (self.owners[-1][1] or not isinstance(obj, cst.Name)):
                    into.add(self.class_name)
                continue
            into.add(name)

    def _derive(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        """Inside a function, the names ``target`` binds may hold (parts of) the objects ``value`` names."""
        if not self.derived or value is None:
            return
        visitor = _SourceNames()
        value.visit(visitor)
        local, copies = self.derived[-1], self.copied[-1]
        sources, copied = set(visitor.names), set(visitor.copied)
        for name in visitor.names:
            sources |= local.get(name, set())
            copied |= copies.get(name, set())
        for name in visitor.copied:
            copied |= local.get(name, set()) | copies.get(name, set())
        for name in _target_names(target):
            local[name] = local.get(name, set()) | sources
            copies[name] = copies.get(name, set()) | copied

    def _bind_defaults(self, params: cst.Parameters) -> None:
        """In the function being walked, a parameter may hold the object its default names."""
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            if param.default is not None:
                self._derive(param.name, param.default)

    def _target(self, target: cst.BaseExpression, *, delete: bool = False) -> None:
        for element in _flatten_targets(target):
            if isinstance(element, cst.Attribute | cst.Subscript):
                self._changes(element.value)
                self._changes(element.value, self.stores)
            elif isinstance(element, cst.Name) and delete and self._depth == 0:
                self.deleted.add(element.value)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self.calls = True
        if isinstance(node.decorator, cst.Name):  # `@setup` calls setup
            self.called.add(node.decorator.value)
        if isinstance(node.decorator, cst.Attribute):  # `@f.register` calls f.register(the function)
            self._changes(node.decorator.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for deco in node.decorators:
            deco.visit(self)
        params = node.params
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            if param.default is not None:
                param.default.visit(self)
        if self.immediate:
            if self.annotations_run:  # `def f(x: make()) -> check():` calls both when the def runs
                star = [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
                for param in [*params.posonly_params, *params.params, *params.kwonly_params, *star]:
                    if param.annotation is not None:
                        param.annotation.visit(self)
                if node.returns is not None:
                    node.returns.visit(self)
            return False
        first = _first_param(node) or ""
        decorators = {_dotted_or_none(d.decorator) for d in node.decorators}
        classlike = (
            first in _CLASS_PARAMS
            or "classmethod" in decorators
            or node.name.value in ("__init_subclass__", "__new__", "__class_getitem__")
        )
        self.owners.append((first, classlike))
        self.derived.append({})
        self.copied.append({})
        self._bind_defaults(params)  # `def g(d=D): d['z'] = 1` changes D whenever g runs
        self._depth += 1
        node.body.visit(self)
        self._depth -= 1
        self.derived.pop()
        self.copied.pop()
        self.owners.pop()
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        if not self.immediate:
            return True
        for param in [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params]:
            if param.default is not None:  # defaults are evaluated now
                param.default.visit(self)
        body = _Effects(immediate=False, bare=self.bare)  # the body runs whenever the lambda is called: maybe now
        body.derived.append({})
        body.copied.append({})
        body._bind_defaults(node.params)  # `(lambda d=D: d.update(a=1))()` changes D
        node.body.visit(body)
        self.lambdas.append(
            (frozenset(body.changed), frozenset(body.passed), frozenset(body.rebound), (), frozenset(body.consumed))
        )
        self.lambda_refs |= body.refs
        self.dynamic += body.dynamic
        return False

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            root = _root_name(node.value.func, through_calls=True)
            if root is not None:
                self.side_calls.setdefault(root, set()).add(_dotted_or_none(node.value.func) or "")

    def visit_Global(self, node: cst.Global) -> None:
        self.rebound.update(n.name.value for n in node.names)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._target(target.target)
            self._derive(target.target, node.value)
            if isinstance(target.target, cst.Tuple | cst.List):  # `a, b = IT` iterates IT
                self._consumes(node.value)

    def visit_For(self, node: cst.For) -> None:
        self._derive(node.target, node.iter)
        self._consumes(node.iter)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._consumes(node.iter)

    def visit_StarredElement(self, node: cst.StarredElement) -> None:
        self._consumes(node.value)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.star:
            self._consumes(node.value)

    def visit_YieldFrom(self, node: cst.From) -> None:
        self._consumes(node.item)

    def _consumes(self, obj: cst.BaseExpression) -> None:
        """``obj`` is iterated: an iterator or generator it names is advanced."""
        if isinstance(obj, cst.Name | cst.Attribute | cst.Subscript):
            root = _root_name(obj)
            if root is not None:
                if self.derived:  # a local bound from module names
                    self.consumed |= self.derived[-1].get(root, set())
                self.consumed.add(root)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._derive(node.target, node.value)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._derive(node.asname.name, node.item)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target)
            self._derive(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)
        if isinstance(node.target, cst.Name) and self._depth == 0:
            self.changed.add(node.target.value)  # `X += [1]` extends the list X was bound to
        elif isinstance(node.target, cst.Name):
            self._changes(node.target)  # a local bound from a module object: `r = REG; r += [1]`

    def visit_Del(self, node: cst.Del) -> None:
        self._target(node.target, delete=True)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if _dotted_or_none(node.value) == "sys.modules":
            # `sys.modules[__name__]`, `sys.modules[fn.__module__]`, `sys.modules[name]`: any key but a
            # literal may be the module itself (which the extraction is not, in `sys.modules` or elsewhere)
            index = node.slice[0].slice if len(node.slice) == 1 else None
            if not (isinstance(index, cst.Index) and _literal_string(index.value) is not None):
                self.dynamic.append((node, "sys.modules[...]"))

    def visit_Name(self, node: cst.Name) -> None:
        self.refs.add(node.value)
        if id(node) in self.bare:  # `g = globals`, `map(vars, …)`: called later, out of sight
            self.dynamic.append((node, f"{node.value} passed or aliased"))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # a frame's or a function's globals are the module namespace: `sys._getframe().f_globals['X'] = 1`,
        # `fn.__globals__[k]`; `inspect.getmodule(fn)` is the module itself
        if node.attr.value in _NAMESPACE_ATTRIBUTES:
            self.dynamic.append((node, f".{node.attr.value}"))
        # a mutating method taken as a value is called out of sight: `map(D.append, xs)`, `f = D.update`
        if node.attr.value in _MUTATING_METHODS:
            self._changes(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls = True
        func = node.func
        callee = func.value if isinstance(func, cst.Name) else None
        if callee is not None:
            self.called.add(callee)
        if callee in _CONSUMING_BUILTINS:  # `zip(G, …)`, `list(G)`, `sum(G)` advance an iterator argument
            for arg in node.args:
                self._consumes(arg.value)
        if callee == "eval":
            # reading names is all `eval("X + 1")` can do; `eval("(X := 1)")` or one that calls code binds them
            text = _literal_string(node.args[0].value) if node.args else None
            self.dynamic.append((node, "eval()" if text is not None and _read_only_expression(text) else "eval() of code that may bind names"))
        elif callee in _DYNAMIC_CALLS or (callee == "vars" and not node.args):
            self.dynamic.append((node, f"{callee}()"))
        dotted = _dotted_or_none(func) or ""
        last = dotted.rsplit(".", 1)[-1]
        if last == "getmodule" and dotted.split(".")[0] in ("inspect", "getmodule"):
            self.dynamic.append((node, f"{dotted}()"))  # the module object (or its members) by way of a function
        # `__import__(__name__)`, `importlib.import_module(name)`, `sys.modules.get(fn.__module__)`: a name
        # computed at run time may be this module's own
        by_name = last in ("import_module", "__import__") or dotted == "sys.modules.get" or (
            dotted.startswith("sys.modules.") and last in ("setdefault", "pop", "__getitem__")
        )
        if by_name and not (node.args and _literal_string(node.args[0].value) is not None):
            self.dynamic.append((node, f"{dotted}() of a computed name"))
        attr = _literal_string(node.args[1].value) if len(node.args) >= 2 else None
        if callee in ("getattr", "setattr", "hasattr", "delattr") and attr in _NAMESPACE_ATTRIBUTES:
            self.dynamic.append((node, f"{callee}(…, {attr!r})"))
        if isinstance(func, cst.Attribute) and func.attr.value not in _READ_ONLY_METHODS:
            self._changes(func.value)
            name = func.attr.value
            if (name in _MUTATING_METHODS and not isinstance(func.value, cst.Name)) or name in (
                "putenv",
                "unsetenv",
            ):
                self._changes(func.value, self.stores)  # `os.environ.setdefault(…)`, `sys.path.insert(…)`
        if isinstance(func, cst.Call) and _dotted_or_none(func.func) == "getattr" and func.args:
            # `getattr(D, 'update')(k=1)` calls a method of D, as `D.update(k=1)` does
            got = _literal_string(func.args[1].value) if len(func.args) >= 2 else None
            if got not in _READ_ONLY_METHODS:
                self._changes(func.args[0].value)
        if callee == "getattr" and len(node.args) >= 2 and _literal_string(node.args[1].value) in _MUTATING_METHODS:
            self._changes(node.args[0].value)  # `m = getattr(D, 'append')`: called later
        if callee in ("setattr", "delattr") and node.args:
            self._changes(node.args[0].value)
            self._changes(node.args[0].value, self.stores)  # an attribute of it, as `b.ref = X` is
            return
        if callee in _PURE_BUILTINS or dotted in _HARMLESS_SIDE_CALLS:
            return
        for arg in node.args:
            if isinstance(arg.value, cst.Name | cst.Attribute | cst.Subscript):
                self._changes(arg.value, self.passed if isinstance(arg.value, cst.Name) else None)
                if isinstance(arg.value, cst.Name):
                    self.passed_to.setdefault(arg.value.value, set()).add(dotted)


class _ParameterChanges(cst.CSTVisitor):
    """Whether a function's body changes one of its parameters: stores an attribute or item of it,
    ``setattr``/``delattr``/``update_wrapper`` on it, or calls a method of it that is not read-only."""

    def __init__(self, params: set[str]) -> None:
        self.params = params
        self.found = False

    def _hit(self, node: cst.BaseExpression) -> None:
        if _root_name(node) in self.params:
            self.found = True

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        for element in _flatten_targets(node.target):
            if isinstance(element, cst.Attribute | cst.Subscript):
                self._hit(element.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Attribute | cst.Subscript):
            self._hit(node.target.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Attribute | cst.Subscript) and node.value is not None:
            self._hit(node.target.value)

    def visit_Del(self, node: cst.Del) -> None:
        for element in _flatten_targets(node.target):
            if isinstance(element, cst.Attribute | cst.Subscript):
                self._hit(element.value)

    def visit_Call(self, node: cst.Call) -> None:
        name = (_dotted_or_none(node.func) or "").rsplit(".", 1)[-1]
        if name in ("setattr", "delattr", "update_wrapper", "vars") and node.args:
            self._hit(node.args[0].value)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value not in _READ_ONLY_METHODS:
            self._hit(node.func.value)


def _changes_a_parameter(fn: cst.FunctionDef) -> bool:
    """Whether calling ``fn`` may change an object handed to it (see ``_ParameterChanges``)."""
    params = fn.params
    names = {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}
    names |= {p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}
    visitor = _ParameterChanges(names)
    fn.body.visit(visitor)
    return visitor.found


def _call_chain_names(node: cst.BaseExpression) -> set[str]:
    """The names whose call may have returned the object ``node`` names (``registry()[k]`` ->
    ``registry``; ``next(gen())`` -> ``next``, ``gen``; ``D.get(k)`` -> ``D``)."""
    out: set[str] = set()
    while isinstance(node, cst.Attribute | cst.Subscript | cst.Call):
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Name) and node.func.value in _RETURNS_FROM_ARGS:
                for arg in node.args:
                    out |= _call_chain_names(arg.value)
            node = node.func
        else:
            node = node.value
    if isinstance(node, cst.Name):
        out.add(node.value)
    return out


def _bound_value(unit: _Unit, name: str) -> cst.BaseExpression | None:
    """The value of ``unit`` when it is the one statement ``name = value`` (or ``name: T = value``)."""
    if not isinstance(unit.node, cst.SimpleStatementLine) or len(unit.node.body) != 1:
        return None
    small = unit.node.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target, value = small.targets[0].target, small.value
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        target, value = small.target, small.value
    else:
        return None
    return value if isinstance(target, cst.Name) and target.value == name else None


def _container_display(unit: _Unit, name: str) -> bool:
    """Whether ``unit`` is ``name = <list/dict/set/tuple display or comprehension>``: iterating it advances nothing."""
    displays = (cst.List, cst.Dict, cst.Set, cst.Tuple, cst.ListComp, cst.DictComp, cst.SetComp,
                cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)  # fmt: skip
    return isinstance(_bound_value(unit, name), displays)


def _mutable_default(fn: cst.FunctionDef) -> bool:
    """Whether a parameter default of ``fn`` may be an object a call changes (``def f(_c=[0]):``)."""
    params = fn.params
    return any(
        p.default is not None and not _immutable(p.default)
        for p in [*params.posonly_params, *params.params, *params.kwonly_params]
    )


def _binds_immutable_literal(unit: _Unit, name: str) -> bool:
    """Whether ``unit`` is ``name = <literal>`` with a value nothing can change in place."""
    value = _bound_value(unit, name)
    return value is not None and _immutable(value)


def _immutable(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.Integer | cst.Float | cst.Imaginary | cst.SimpleString | cst.ConcatenatedString):
        return True
    if isinstance(value, cst.Name):
        return value.value in ("True", "False", "None")
    if isinstance(value, cst.UnaryOperation):
        return _immutable(value.expression)
    if isinstance(value, cst.Tuple):
        return all(
            _immutable(e.value) for e in value.elements if not isinstance(e, cst.StarredElement)
        ) and not any(isinstance(e, cst.StarredElement) for e in value.elements)
    return False


def _dotted_or_none(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call):
        node = node.func
    try:
        return _dotted(node)
    except ExtractError:
        return None


def _comprehension_target(scope: Any, name: str) -> bool:
    """Whether ``name`` is a ``for`` target of the comprehension ``scope`` is in (or of an enclosing one)."""
    while isinstance(scope, ComprehensionScope):
        node = getattr(scope, "node", None)
        comp_for = getattr(node, "for_in", None)
        while comp_for is not None:
            if name in _target_names(comp_for.target):
                return True
            comp_for = comp_for.inner_for_in
        scope = scope.parent
    return False
