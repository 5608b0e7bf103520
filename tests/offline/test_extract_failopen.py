"""Fail-open classes a red team found (rt-failopen, sections A and B): import-time code whose effect the
name tracking could not follow, so an extraction returned without ``ExtractError`` and behaved
differently from the module. Each case runs the module and its extraction in two fresh interpreters
(the effects here are process-wide: a patched builtin, ``os.environ``, a seed), and the extraction must
behave as the module does or be refused naming ``file:line``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_REAL = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
m = importlib.import_module("m")
try:
    out = repr(eval(sys.argv[2]))
except Exception as exc:
    out = "raises " + type(exc).__name__
print(json.dumps(out))
"""

_EXTRACTED = """
import json, sys
sys.path.insert(0, sys.argv[3])
from materialize.offline import ExtractError, extract
from materialize.tree import DirTree
try:
    m = extract(DirTree(sys.argv[1], "demo"), "m.py", *json.loads(sys.argv[4]))
    try:
        out = repr(eval(sys.argv[2]))
    except ExtractError as exc:
        out = "refused " + str(exc)
    except Exception as exc:
        out = "raises " + type(exc).__name__
except ExtractError as exc:
    out = "refused " + str(exc)
print(json.dumps(out))
"""


def _isolated(tmp_path: Path, source: str, names: list[str], probe: str) -> str:
    """'same' or 'refused' (naming m.py:LINE); fails the test when the extraction behaves differently."""
    root = tmp_path / "src"
    root.mkdir()
    (root / "m.py").write_text(textwrap.dedent(source))
    run = lambda code, *args: json.loads(  # noqa: E731
        subprocess.check_output([sys.executable, "-c", code, str(root), probe, *args], cwd=tmp_path, text=True)
    )
    real = run(_REAL)
    got = run(_EXTRACTED, str(REPO), json.dumps(names))
    if got.startswith("refused "):
        assert "m.py:" in got, f"refusal does not name file:line: {got}"
        return "refused"
    assert got == real, f"FAIL-OPEN: extracted {names} gives {got}, the module {real}"
    return "same"


# A1: a change to an imported module's state at import, read by a function through a local import
# (or a module-level one), or through a function of the file the import-time code calls.
MODULE_STATE_CASES = {
    "os.environ, local import": (
        "import os\nos.environ['RT_FLAG'] = '1'\ndef f():\n    import os\n    return os.environ.get('RT_FLAG', '0')\n"
    ),
    "random.seed, local import": (
        "import random\nrandom.seed(0)\ndef f():\n    import random\n    return random.random()\n"
    ),
    "decimal context through a call, local import": (
        "from decimal import getcontext\ngetcontext().prec = 3\n"
        "def f():\n    from decimal import Decimal\n    return str(Decimal(1) / Decimal(7))\n"
    ),
    "decimal context through a call, module-level import": (
        "from decimal import getcontext, Decimal\ngetcontext().prec = 3\n"
        "def f():\n    return str(Decimal(1) / Decimal(7))\n"
    ),
    "a seed set by a function the file calls at import": (
        "import random\ndef setup():\n    random.seed(0)\nsetup()\ndef f():\n    return random.random()\n"
    ),
    "os.environ set by a function the file calls at import, local import": (
        "import os\ndef setup():\n    os.environ['RT_FLAG'] = '2'\nsetup()\n"
        "def f():\n    import os\n    return os.environ.get('RT_FLAG', '0')\n"
    ),
    "the module imported under the function's own alias": (
        "import random\nrandom.seed(3)\ndef f():\n    import random as r\n    return r.random()\n"
    ),
    "a from-import inside the function": (
        "import random\nrandom.seed(3)\ndef f():\n    from random import random as rnd\n    return rnd()\n"
    ),
}


@pytest.mark.parametrize("case", sorted(MODULE_STATE_CASES))
def test_module_state_changed_at_import_is_never_silently_dropped(tmp_path, case):
    assert _isolated(tmp_path, MODULE_STATE_CASES[case], ["f"], "m.f()") == "refused"


# A5: builtins changed at import (all code reads them, no name needed).
BUILTINS_CASES = {
    "builtins.round = …": (
        "import builtins\n_orig = builtins.round\nbuiltins.round = lambda x, n=0: _orig(x, n + 1)\n"
        "def f():\n    return round(2.25)\n"
    ),
    "under an alias": "import builtins as b\nb.len = lambda x: 42\ndef f():\n    return len([1])\n",
    "setattr(builtins, …)": "import builtins\nsetattr(builtins, 'len', lambda x: 42)\ndef f():\n    return len([1])\n",
    "in a function called at import": (
        "import builtins\ndef install():\n    builtins.len = lambda x: 42\ninstall()\ndef f():\n    return len([1])\n"
    ),
    "through __builtins__": (
        "import builtins\nvars(builtins)['len'] = lambda x: 42\ndef f():\n    return len([1])\n"
    ),
}


@pytest.mark.parametrize("case", sorted(BUILTINS_CASES))
def test_a_builtin_patched_at_import_is_never_silently_dropped(tmp_path, case):
    assert _isolated(tmp_path, BUILTINS_CASES[case], ["f"], "m.f()") == "refused"


# A2: an object of the file changed through what a call returns; A3: an iterator consumed at import;
# A4: state kept by a callable bound by assignment (a closure, a mutable default) advanced at import.
KEPT_STATE_CASES = {
    "item set through a getter's result": (
        "TABLE = {}\ndef registry():\n    return TABLE\ndef lookup(k):\n    return TABLE.get(k)\nregistry()['a'] = 1\n",
        ["lookup"], "m.lookup('a')",
    ),
    "item set through a lambda's result": (
        "TABLE = {}\nget = lambda: TABLE\ndef lookup(k):\n    return TABLE.get(k)\nget()['b'] = 2\n",
        ["lookup"], "m.lookup('b')",
    ),
    "method called on a getter's result": (
        "TABLE = {}\ndef registry():\n    return TABLE\ndef lookup(k):\n    return TABLE.get(k)\nregistry().update(a=3)\n",
        ["lookup"], "m.lookup('a')",
    ),
    "attribute set through a getter's result": (
        "class Box:\n    v = 0\nB = Box()\ndef box():\n    return B\ndef f():\n    return B.v\nbox().v = 4\n",
        ["f"], "m.f()",
    ),
    "item set through next() of a generator": (
        "TABLE = {}\ndef gen():\n    yield TABLE\ndef lookup(k):\n    return TABLE.get(k)\nnext(gen())['c'] = 5\n",
        ["lookup"], "m.lookup('c')",
    ),
    "generator consumed by zip in a comprehension": (
        "G = (i for i in range(5))\nHEAD = [x for x, _ in zip(G, range(2))]\ndef rest():\n    return list(G)\n",
        ["rest"], "m.rest()",
    ),
    "iterator consumed by list()": (
        "IT = iter([1, 2, 3])\nFIRST = list(zip(IT, 'a'))\ndef rest():\n    return list(IT)\n",
        ["rest"], "m.rest()",
    ),
    "iterator consumed by a for loop": (
        "IT = iter([1, 2, 3])\nfor x in IT:\n    break\ndef rest():\n    return list(IT)\n",
        ["rest"], "m.rest()",
    ),
    "iterator consumed by sum()": (
        "IT = iter([1, 2, 3])\nS = sum(IT)\ndef rest():\n    return list(IT)\n",
        ["rest"], "m.rest()",
    ),
    "a closure's state advanced at import": (
        "def make():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n        return n\n    return inc\n"
        "inc = make()\ninc()\ndef f():\n    return inc()\n",
        ["f"], "m.f()",
    ),
    "a closure's state advanced through an alias": (
        "def make():\n    n = [0]\n    def inc():\n        n[0] += 1\n        return n[0]\n    return inc\n"
        "inc = make()\nh = inc\nh()\ndef f():\n    return inc()\n",
        ["f"], "m.f()",
    ),
    "a mutable default changed by a call at import": (
        "def counter(_c=[0]):\n    _c[0] += 1\n    return _c[0]\ncounter()\ndef f():\n    return counter()\n",
        ["f"], "m.f()",
    ),
    "a bound method of the file's object called at import": (
        "class Counter:\n    def __init__(self):\n        self.n = 0\n    def inc(self):\n        self.n += 1\n        return self.n\n"
        "C = Counter()\ninc = C.inc\ninc()\ndef f():\n    return C.n\n",
        ["f"], "m.f()",
    ),
}


@pytest.mark.parametrize("case", sorted(KEPT_STATE_CASES))
def test_state_reached_through_calls_and_iterators_is_kept_or_refused(tmp_path, case):
    _isolated(tmp_path, *KEPT_STATE_CASES[case])


def test_the_iterator_case_is_kept_not_refused(tmp_path):
    """Keeping is cheap and exact here: the consuming statement comes along."""
    source, names, probe = KEPT_STATE_CASES["generator consumed by zip in a comprehension"]
    assert _isolated(tmp_path, source, names, probe) == "same"


def test_the_getter_case_is_kept_not_refused(tmp_path):
    source, names, probe = KEPT_STATE_CASES["item set through a getter's result"]
    assert _isolated(tmp_path, source, names, probe) == "same"


# A6: a partial class's left-out method must look like what it stands for to introspection.
INTROSPECTION_CASES = {
    "inspect.getmembers isfunction": (
        "import inspect\nclass C:\n    def h(self):\n        return 'h'\n"
        "    def g(self):\n        return [n for n, v in inspect.getmembers(type(self), inspect.isfunction)]\n",
        "m.C().g()",
    ),
    "callable members of the class dict": (
        "class C:\n    def h(self):\n        return 'h'\n"
        "    def g(self):\n        return sorted(k for k, v in vars(type(self)).items() if callable(v))\n",
        "m.C().g()",
    ),
    "a left-out staticmethod": (
        "import inspect\nclass C:\n    @staticmethod\n    def h():\n        return 'h'\n"
        "    def g(self):\n        return [n for n, v in inspect.getmembers(C, inspect.isfunction)]\n",
        "m.C().g()",
    ),
    "a left-out method's name": (
        "class C:\n    def h(self):\n        return 'h'\n    def g(self):\n        return C.h.__name__, C.h.__qualname__\n",
        "m.C().g()",
    ),
}


@pytest.mark.parametrize("case", sorted(INTROSPECTION_CASES))
def test_a_left_out_method_does_not_change_what_introspection_sees(tmp_path, case):
    source, probe = INTROSPECTION_CASES[case]
    _isolated(tmp_path, source, ["C.g"], probe)


def test_a_left_out_method_still_refuses_when_called(tmp_path):
    source = "class C:\n    def h(self):\n        return 'h'\n    def g(self):\n        return getattr(self, 'h')\n"
    assert _isolated(tmp_path, source, ["C.g"], "m.C().g()()") == "refused"


# A7: what the import system gives a module, which an extraction does not have.
@pytest.mark.parametrize("name", ["__spec__", "__loader__", "__cached__"])
def test_import_system_attributes_are_refused(tmp_path, name):
    source = f"def f():\n    return repr({name})[:20]\n"
    assert _isolated(tmp_path, source, ["f"], "m.f()") == "refused"


def test_a_left_out_first_method_keeps_its_decorator(tmp_path):
    """Found while fixing A6: the decorator lines of a class's first method were taken for the class
    header, so a left-out `@staticmethod def h` had its decorator applied to the next kept method."""
    source = "class C:\n    @staticmethod\n    def h():\n        return 1\n    def g(self):\n        return 2\n"
    assert _isolated(tmp_path, source, ["C.g"], "m.C().g()") == "same"


# C1 (rt-failopen, session 14): the module namespace written at import through a door the `globals()` /
# `exec` / `sys.modules[__name__]` check did not know: a frame's or a function's globals, `globals` taken
# as a value, the module fetched by a computed name, `eval` of code that binds. Each gave the file's
# earlier value silently.
NAMESPACE_CASES = {
    "a frame's f_globals": "X = 0\nimport sys\nsys._getframe().f_globals['X'] = 1\ndef f():\n    return X\n",
    "inspect.currentframe().f_globals": (
        "X = 0\nimport inspect\ninspect.currentframe().f_globals['X'] = 1\ndef f():\n    return X\n"
    ),
    "a caller's frame, from a function called at import": (
        "X = 0\nimport sys\ndef setx():\n    sys._getframe(1).f_globals['X'] = 1\nsetx()\ndef f():\n    return X\n"
    ),
    "getattr(frame, 'f_globals')": (
        "X = 0\nimport sys\ngetattr(sys._getframe(), 'f_globals')['X'] = 1\ndef f():\n    return X\n"
    ),
    "a function's __globals__": "X = 0\ndef h(): pass\nh.__globals__['X'] = 1\ndef f():\n    return X\n",
    "a lambda's __globals__": "X = 0\n(lambda: 0).__globals__['X'] = 1\ndef f():\n    return X\n",
    "globals aliased": "X = 0\ng = globals\ng()['X'] = 1\ndef f():\n    return X\n",
    "vars aliased": "X = 0\nv = vars\nv()['X'] = 1\ndef f():\n    return X\n",
    "globals passed to a call": (
        "X = 0\nfor d in map(lambda g: g(), [globals]):\n    d['X'] = 1\ndef f():\n    return X\n"
    ),
    "sys.modules.get(__name__)": "X = 0\nimport sys\nsys.modules.get(__name__).X = 1\ndef f():\n    return X\n",
    "sys.modules[fn.__module__]": (
        "X = 0\nimport sys\ndef h(): pass\nsys.modules[h.__module__].X = 1\ndef f():\n    return X\n"
    ),
    "importlib.import_module(__name__)": (
        "X = 0\nimport importlib\nimportlib.import_module(__name__).X = 1\ndef f():\n    return X\n"
    ),
    "__import__(__name__)": "X = 0\n__import__(__name__).X = 1\ndef f():\n    return X\n",
    "inspect.getmodule(fn)": (
        "X = 0\nimport inspect\ndef h(): pass\ninspect.getmodule(h).X = 1\ndef f():\n    return X\n"
    ),
    "eval of a walrus": "X = 0\neval('(X := 1)')\ndef f():\n    return X\n",
    "eval of a call": "X = 0\ndef setx():\n    global X\n    X = 1\neval('setx()')\ndef f():\n    return X\n",
}


@pytest.mark.parametrize("case", sorted(NAMESPACE_CASES))
def test_the_module_namespace_written_through_any_door_is_refused(tmp_path, case):
    assert _isolated(tmp_path, NAMESPACE_CASES[case], ["f"], "m.f()") == "refused"


def test_a_function_reading_its_module_by_a_computed_name_is_refused(tmp_path):
    """The extraction is not in `sys.modules`: `sys.modules.get(__name__)` is None there."""
    source = "import sys\nX = 3\ndef f():\n    return sys.modules.get(__name__).X\n"
    assert _isolated(tmp_path, source, ["f"], "m.f()") == "refused"


def test_an_eval_that_only_reads_still_extracts(tmp_path):
    source = "X = 2\nY = eval('X + 1')\ndef f():\n    return X\n"
    assert _isolated(tmp_path, source, ["f"], "m.f()") == "same"


# C2 (rt-failopen, session 14): a function handed at import to code that changes it. Functions were taken as
# never changed by a call (`atexit.register(fn)`), so the file's own `mark(fn)` setting `fn.tag`, or a helper
# setting `fn.__defaults__`, was dropped and the extraction silently differed.
FUNCTION_CHANGE_CASES = {
    "an attribute set by the file's helper": (
        "def mark(fn):\n    fn.tag = 'x'\ndef f():\n    return f.tag\nmark(f)\n", "m.f()",
    ),
    "setattr in the file's helper": (
        "def mark(fn):\n    setattr(fn, 'tag', 'y')\ndef f():\n    return f.tag\nmark(f)\n", "m.f()",
    ),
    "defaults replaced by the file's helper": (
        "def setd(fn, v):\n    fn.__defaults__ = (v,)\ndef f(x=1):\n    return x\nsetd(f, 5)\n", "m.f()",
    ),
    "keyword defaults replaced through a setup function": (
        "def setd(fn):\n    fn.__kwdefaults__ = {'k': 9}\ndef setup():\n    setd(f)\ndef f(*, k=1):\n    return k\nsetup()\n",
        "m.f()",
    ),
    "functools.update_wrapper": (
        "import functools\ndef g(): pass\ng.scale = 3\ndef f(x):\n    return f.scale * x\nfunctools.update_wrapper(f, g)\n",
        "m.f(2)",
    ),
    "functools.wraps(g)(fn)": (
        "import functools\ndef g(): pass\ng.scale = 3\ndef f(x):\n    return f.scale * x\nfunctools.wraps(g)(f)\n",
        "m.f(2)",
    ),
}


@pytest.mark.parametrize("case", sorted(FUNCTION_CHANGE_CASES))
def test_a_function_changed_by_a_call_it_is_handed_to_is_kept_or_refused(tmp_path, case):
    source, probe = FUNCTION_CHANGE_CASES[case]
    _isolated(tmp_path, source, ["f"], probe)


@pytest.mark.parametrize(
    "source",
    [
        "import atexit\ndef f():\n    return 1\natexit.register(f)\n",
        "H = []\ndef register(fn):\n    H.append(fn)\n    return fn\ndef f():\n    return 1\nregister(f)\n",
    ],
    ids=["atexit.register", "a registry of the file"],
)
def test_a_function_handed_to_a_call_that_leaves_it_alone_still_extracts(tmp_path, source):
    assert _isolated(tmp_path, source, ["f"], "m.f()") == "same"


# Oracle sweep over vLLM (vllm/utils/hashing.py: `try: import xxhash … except ImportError: _xxhash = None`):
# an import the policy refuses while the file's import-time code runs raises RefusedImport, an
# ImportError, which the file's own `except ImportError` swallowed: the extraction went on with the
# fallback the real file takes only when the module is missing, though it is installed here.
def test_a_refused_import_the_file_catches_at_import_time_is_refused(tmp_path):
    from materialize.offline import extract
    from materialize.offline.errors import ExtractError
    from materialize.tree import DirTree

    (tmp_path / "m.py").write_text(
        "try:\n    import libcst as X\nexcept ImportError:\n    X = None\n\ndef f():\n    return X\n"
    )
    with pytest.raises(ExtractError, match=r"m.py:2: .*libcst.*caught"):
        extract(DirTree(tmp_path, "t"), "m.py", "f")
    # allowed, it is the real module; a module that is not installed takes the fallback, as the file does
    assert extract(DirTree(tmp_path, "t"), "m.py", "f", allow=("libcst",)).f() is not None
    (tmp_path / "n.py").write_text(
        "try:\n    import rt_not_installed_xyz as X\nexcept ImportError:\n    X = None\n\ndef f():\n    return X\n"
    )
    assert extract(DirTree(tmp_path, "t"), "n.py", "f").f() is None


# Oracle over the pinned vLLM tree (vllm/version.py: `try: from ._version import __version_tuple__
# except Exception: __version_tuple__ = (0, 0, "dev")`): the relative import is refused (extracted code
# has no package), the file catches it, and `_prev_minor_version_was` answered as a dev tree (True for
# any version) where the file, beside its `_version.py`, compares with 0.33. "Installed here" is the
# wrong question for the file's own package (the tree under test holds it) and for a heavy import
# (torch, ttnn, vllm: never installed in the offline venv, always where the file is served).
@pytest.mark.parametrize(
    "importer",
    [
        "from ._version import v",
        "from pkg._version import v",
        "from . import _version\n    v = _version.v",
        "import torch\n    v = (9, 9)",
    ],
    ids=["relative", "own package, absolute", "relative module", "heavy"],
)
def test_a_caught_import_of_the_files_own_package_or_a_heavy_one_is_refused(tmp_path, importer):
    from materialize.offline import extract
    from materialize.offline.errors import ExtractError
    from materialize.tree import DirTree

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("v = (0, 33)\n")
    (pkg / "version.py").write_text(
        f"try:\n    {importer}\nexcept Exception:\n    v = (0, 0)\n\n\ndef f():\n    return v\n"
    )
    with pytest.raises(ExtractError, match=r"pkg/version.py:2: .*caught"):
        extract(DirTree(tmp_path, "t"), "pkg/version.py", "f")


def test_a_caught_import_of_a_missing_third_party_module_still_takes_the_fallback(tmp_path):
    from materialize.offline import extract
    from materialize.tree import DirTree

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("try:\n    import rt_not_installed_xyz as X\nexcept ImportError:\n    X = None\n\ndef f():\n    return X\n")
    assert extract(DirTree(tmp_path, "t"), "pkg/m.py", "f").f() is None


# A module object changed at import time through a way of calling its method the effect tracking did
# not see: the extraction had the object unchanged (fail-open red team, round 17).
CALLED_OUT_OF_SIGHT = {
    "a lambda's default, called now": "D = {}\n(lambda d=D: d.update(a=1))()\ndef f(): return D\n",
    "a def's default, the def called from another's default": (
        "D = {}\ndef g(d=D): d['z'] = 1\ndef h(x=g()): pass\ndef f(): return D\n"
    ),
    "a bound method handed to map": "D = []\nlist(map(D.append, [1, 2]))\ndef f(): return D\n",
    "a bound method bound to a name": "D = []\nadd = D.append\nadd(3)\ndef f(): return D\n",
    "a method fetched by getattr": "D = {}\ngetattr(D, 'update')(k=1)\ndef f(): return D\n",
    "a method fetched by getattr, called later": "D = []\nput = getattr(D, 'append')\nput(1)\ndef f(): return D\n",
}


@pytest.mark.parametrize("source", CALLED_OUT_OF_SIGHT.values(), ids=CALLED_OUT_OF_SIGHT.keys())
def test_a_change_through_a_method_called_out_of_sight_is_kept_or_refused(tmp_path, source):
    _isolated(tmp_path, source, ["f"], "m.f()")


# ... or through a method of an object an expression holds, not a name: the object may be any the
# expression names (fail-open red team, round 17).
HELD_BY_AN_EXPRESSION = {
    "a walrus": "A = []\n(B := A).append(1)\ndef f(): return A\n",
    "a conditional expression": "A = []\n(A if True else None).append(1)\ndef f(): return A\n",
    "a boolean operation": "A = []\n(None or A).append(1)\ndef f(): return A\n",
    "a list display": "A = []\n[A][0].append(1)\ndef f(): return A\n",
    "a dict display": "A = []\n{'a': A}['a'].append(1)\ndef f(): return A\n",
}


@pytest.mark.parametrize("source", HELD_BY_AN_EXPRESSION.values(), ids=HELD_BY_AN_EXPRESSION.keys())
def test_a_change_through_an_object_an_expression_holds_is_kept_or_refused(tmp_path, source):
    _isolated(tmp_path, source, ["f"], "m.f()")


@pytest.mark.xfail(strict=True, reason="found, not fixed: a class attribute bound to a module object "
                   "(`class K: B = A`) changed through the class (`K.B.append(1)`) leaves A unchanged")
def test_a_change_through_a_class_attribute_that_aliases_a_module_object(tmp_path):
    _isolated(tmp_path, "A = []\nclass K:\n    B = A\nK.B.append(1)\ndef f(): return A\n", ["f"], "m.f()")
