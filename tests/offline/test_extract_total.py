"""The extractor is total: each definition is extracted and behaves as in the file, or is refused
with file, line and reason. One test per case of issue 13 (real pinned code where it occurred)."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from materialize.offline import MissingDefinition, RefusedImport, extract
from materialize.offline.errors import ExtractError
from materialize.tree import DirTree

TRACY = "tracy/common.py"


def _tree(tmp_path: Path, text: str, name: str = "m.py") -> DirTree:
    root = tmp_path / "src"
    root.mkdir(exist_ok=True)
    (root / name).write_text(text)
    return DirTree(root, "demo")


# 1. conditional rebinding ---------------------------------------------------------------------


@pytest.mark.parametrize("override", [False, True], ids=["env-unset", "env-set"])
def test_conditional_rebinding_keeps_every_binding(upstream, tmp_path, monkeypatch, override):
    """ttnn's tracy/common.py: PROFILER_ARTIFACTS_DIR = …, then rebound under `if … in ENVS:`."""
    home = tmp_path / "home"
    monkeypatch.setenv("TT_METAL_HOME", str(home))
    artifacts = tmp_path / "elsewhere" if override else home / "generated" / "profiler"
    if override:
        monkeypatch.setenv("TT_METAL_PROFILER_DIR", str(artifacts))
    else:
        monkeypatch.delenv("TT_METAL_PROFILER_DIR", raising=False)
    tree = upstream["tt-metal"]
    assert artifacts / ".logs" == extract(tree, TRACY, "PROFILER_LOGS_DIR").PROFILER_LOGS_DIR
    (artifacts / "run").mkdir(parents=True)
    extract(tree, TRACY, "clear_profiler_runtime_artifacts").clear_profiler_runtime_artifacts()
    assert not artifacts.exists()


def test_conditional_rebinding_small(tmp_path):
    tree = _tree(tmp_path, "import os\nX = 1\nif os.environ.get('NO_SUCH_VAR_13'):\n    X = 2\n\n\ndef f():\n    return X\n")
    assert extract(tree, "m.py", "f").f() == 1


# 2. annotations that matter at run time ---------------------------------------------------------


def test_classvar_in_a_real_dataclass(upstream):
    """vLLM's VideoAsset (`_NAME_TO_FILE: ClassVar[...] = {...}`) and TierFilter (`ALL: ClassVar[...]`)."""
    video = extract(upstream["plugin"], "vllm/assets/video.py", "VideoAsset.filename")
    assert video.VideoAsset("baby_reading").filename == "sample_demo_1.mp4"
    base = extract(upstream["plugin"], "vllm/v1/kv_offload/base.py", "TierFilter")
    assert base.TierFilter.ALL.allows(None, None) is True  # `TierFilter.ALL = …` after the class is kept
    assert base.TierFilter().allows(None, None) is False


def test_file_future_imports_are_kept_and_nothing_is_forced(tmp_path):
    with_future = _tree(
        tmp_path,
        "from __future__ import annotations\nimport dataclasses\nfrom typing import ClassVar\n"
        "from dataclasses import InitVar\n\n\n@dataclasses.dataclass\nclass C:\n    a: Heavy\n"
        "    seed: InitVar[int]\n    REG: ClassVar[dict] = {}\n    b: int = 0\n\n"
        "    def __post_init__(self, seed):\n        self.b = seed\n",
    )
    c = extract(with_future, "m.py", "C").C
    assert [f.name for f in __import__("dataclasses").fields(c)] == ["a", "b"]
    assert c(1, 5).b == 5 and c.REG == {}
    without = _tree(tmp_path, "def f(x: Undefined) -> int:\n    return x\n", "n.py")
    with pytest.raises(ExtractError, match=r"n\.py:1: 'Undefined' is used by f but nothing in the file binds it"):
        extract(without, "n.py", "f")


# 3. asking for an imported name -----------------------------------------------------------------


def test_asking_for_an_imported_name(upstream, tmp_path):
    assert extract(upstream["tt-metal"], "ttnn/dot_access.py", "Union").Union is typing.Union
    tree = _tree(tmp_path, "import json\nfrom torch import nn\nfrom json import dumps as to_json\n__all__ = ['to_json']\n")
    assert extract(tree, "m.py").to_json is json.dumps
    with pytest.raises(RefusedImport, match=r"m\.py:2: `from torch import nn` is refused"):
        extract(tree, "m.py", "nn")


# 4. TYPE_CHECKING with an else branch ------------------------------------------------------------


def test_type_checking_else_branch_binds_at_run_time(tmp_path):
    tree = _tree(
        tmp_path,
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from torch import Decoder\nelse:\n"
        "    from json import JSONDecoder as Decoder\n\n\ndef make():\n    return Decoder()\n",
    )
    assert isinstance(extract(tree, "m.py", "make").make(), json.JSONDecoder)


# 5. methods follow self./cls. --------------------------------------------------------------------


def test_method_follows_self_to_the_methods_it_reaches(upstream):
    """vLLM's ScalarType.max calls self._raw_max(), which calls self._floating_point_max(), …"""
    ns = extract(upstream["plugin"], "vllm/scalar_type.py", "ScalarType.max")
    assert ns.ScalarType(8, 23, True, 0).max() == 3.4028234663852886e38  # float32
    assert ns.ScalarType(0, 7, True, 0).max() == 127  # int8


def test_method_reading_an_attribute_nothing_provides_is_refused(tmp_path):
    tree = _tree(
        tmp_path,
        "class A:\n    def __init__(self):\n        self.n = 1\n\n    def f(self):\n        return self.n + self.missing\n",
    )
    with pytest.raises(ExtractError, match=r"m\.py:6: A\.f reads 'missing' .*no method, class attribute"):
        extract(tree, "m.py", "A.f")
    ok = _tree(tmp_path, "class B:\n    @classmethod\n    def f(cls):\n        return cls.g()\n\n    @staticmethod\n"
               "    def g():\n        return 3\n\n    def h(self):\n        return 0\n", "b.py")  # fmt: skip
    b = extract(ok, "b.py", "B.f").B
    assert b.f() == 3
    with pytest.raises(ExtractError, match=r"b\.py:10: B\.h was left out"):
        b().h()


# 6. unresolved names fail ------------------------------------------------------------------------


def test_unresolved_name_fails_naming_file_line_and_name(tmp_path):
    tree = _tree(tmp_path, "def f():\n    return helper() + 1\n\n\nY = Z + 1\nZ = 1\n")
    with pytest.raises(ExtractError, match=r"m\.py:2: 'helper' is used by f but nothing in the file binds it"):
        extract(tree, "m.py", "f")
    with pytest.raises(ExtractError, match=r"m\.py:5: 'Z' .* before line 5 \(it is bound later, at line 6\)"):
        extract(tree, "m.py", "Y")


# 7. stubs may replace only names the file binds --------------------------------------------------


def test_stub_for_a_name_the_file_never_binds_is_refused(tmp_path):
    text = "from vllm.x import parse\n\n\ndef f(s):\n    return parse(s)\n"
    good = _tree(tmp_path, text)
    assert extract(good, "m.py", "f", stubs={"parse": str.upper}).f("a") == "A"
    lost = _tree(tmp_path, text.replace("from vllm.x import parse\n", "\n"), "lost.py")
    with pytest.raises(ExtractError, match=r"lost\.py:5: f uses 'parse', which the file never binds.*hide a missing import"):
        extract(lost, "lost.py", "f", stubs={"parse": str.upper})
    with pytest.raises(ExtractError, match="never binds"):
        extract(lost, "lost.py", "parse", stubs={"parse": str.upper})
    # a stub nothing uses replaces nothing: allowed (the control tree of a patch that adds the import)
    assert extract(good, "m.py", "f", stubs={"parse": str.upper, "parse_xml": str.lower}).f("a") == "A"


def test_missing_is_still_missing(tmp_path):
    with pytest.raises(MissingDefinition):
        extract(_tree(tmp_path, "X = 1\n"), "m.py", "Y")


def test_names_bound_inside_the_same_statement_and_nested_comprehensions(tmp_path):
    """Found by the torture suite: vLLM's `try: import flashinfer.comm as c; ok = hasattr(c, …)` and
    tracy's `{key for row in rows for key in row}` were refused as unbound names."""
    tree = _tree(
        tmp_path,
        "try:\n    import not_installed_pkg.comm as comm\n\n    OK = hasattr(comm, 'x')\nexcept ImportError:\n"
        "    comm = None\n    OK = False\n\n\ndef keys(rows):\n    return sorted({k for r in rows for k in r if k})\n",
    )
    ns = extract(tree, "m.py", "OK", "keys")
    assert ns.OK is False and ns.comm is None  # the guarded import is refused like a missing package
    assert ns.keys([{"a": 1}, {"b": 2, "": 3}]) == ["a", "b"]


def test_the_effects_of_mutually_calling_functions_cost_linear_time(tmp_path):
    """`typing` timed out in the oracle: what calling a function may change was recomputed along every
    path of the call graph (cached only outside a cycle), n! visits for n functions that call each other.
    Now each function's body is read once and the effects are unions over the call graph's components."""
    import time

    n = 14
    text = "".join(
        f"def f{i}(x):\n    return " + " + ".join(f"f{j}(x)" for j in range(n) if j != i) + "\n" for i in range(n)
    )
    text += "HOOK = f1\nf0(0) if HOOK is None else None\n\ndef target():\n    return 1\n"
    start = time.perf_counter()
    assert extract(_tree(tmp_path, text), "m.py", "target").target() == 1
    assert time.perf_counter() - start < 30


def test_effects_reached_through_a_cycle_are_still_seen(tmp_path):
    """The same result as the path-by-path walk: a change made two calls away, through a cycle, is seen
    (`TABLE`, changed by `g`, which `f` calls back and forth, is kept with the call that changes it)."""
    text = (
        "TABLE = {}\n"
        "def f(k):\n    return g(k) if k else h(k)\n"
        "def h(k):\n    return f(k + 1)\n"
        "def g(k):\n    TABLE[k] = 1\n    return h(k - 1) if k > 5 else None\n"
        "f(0)\n"
        "def target():\n    return dict(TABLE)\n"
    )
    assert extract(_tree(tmp_path, text), "m.py", "target").target() == {1: 1}
