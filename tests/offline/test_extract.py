"""The extractor on real modules of the pinned trees, and on small files for the tricky cases."""

from __future__ import annotations

import linecache
import sys
import traceback
from concurrent.futures import Future

import pytest

from materialize.offline import MissingDefinition, RefusedImport, StarImportRefused, extract
from materialize.offline.errors import ExtractError
from materialize.tree import DirTree, read_text

GOLDEN = "ttnn/operations/transformer_golden.py"
TRANSFORMER = "ttnn/operations/transformer.py"
HERMES = "vllm/tool_parsers/hermes_tool_parser.py"
REQUEST = "vllm/v1/structured_output/request.py"
POOLER = "vllm/model_executor/layers/pooler/__init__.py"
HEAVY = ("ttnn", "torch", "vllm")


def _line_of(tree, path: str, text: str) -> int:
    lines = read_text(tree, path).splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def _no_heavy_modules():
    return [m for m in sys.modules if m.split(".")[0] in HEAVY]


# -- real modules -------------------------------------------------------------------------------


def test_golden_function_takes_exactly_its_transitive_helpers(upstream):
    ns = extract(upstream["tt-metal"], GOLDEN, "chunked_scaled_dot_product_attention_golden")
    defined = {k for k in vars(ns) if not k.startswith("__")}
    assert defined == {
        "chunked_scaled_dot_product_attention_golden",
        "_chunked_paged_attention",
        "_paged_cache_view",
        "_paged_to_contiguous",
        "_scalar",
        "_scaled_attention",
        "_repeat_kv_heads",
        "_window_mask",
        "_cu_window_mask",
    }
    # the module-level `from ttnn.decorators import ...` is not needed by any of them: not refused
    assert "set_golden_comparison_config" not in defined
    assert _no_heavy_modules() == []


def test_heavy_import_is_refused_naming_import_line_and_definition(upstream):
    tree = upstream["tt-metal"]
    with pytest.raises(RefusedImport) as info:
        extract(tree, GOLDEN, "_ring_stats_scratch")
    message = str(info.value)
    import_line = _line_of(tree, GOLDEN, "from ttnn.decorators import set_golden_comparison_config")
    assert f"{tree.display_path(GOLDEN)}:{import_line}:" in message
    assert "from ttnn.decorators import set_golden_comparison_config" in message
    assert "_ring_stats_scratch" in message and "ttnn" in message
    assert _no_heavy_modules() == []


def test_a_stub_replaces_the_heavy_import(upstream):
    calls = []

    def fake_config(tensor, **kwargs):
        calls.append(kwargs)
        return tensor

    ns = extract(upstream["tt-metal"], GOLDEN, "_ring_stats_scratch", stubs={"set_golden_comparison_config": fake_config})
    assert ns.math.ceil(1.5) == 2  # the stdlib import it needs was bound for real
    assert ns.set_golden_comparison_config is fake_config


def test_module_level_heavy_value_is_refused(upstream):
    """``SDPAProgramConfig = ttnn._ttnn...`` needs `import ttnn` at definition time."""
    with pytest.raises(RefusedImport, match=r"transformer\.py:\d+: `import ttnn` is refused.*SDPAProgramConfig"):
        extract(upstream["tt-metal"], TRANSFORMER, "SDPAProgramConfig")


def test_function_local_heavy_import_is_refused_at_call_time_with_real_line(upstream):
    tree = upstream["tt-metal"]
    ns = extract(tree, GOLDEN, "_scalar")  # `import torch` inside the body: extraction itself is fine
    with pytest.raises(RefusedImport) as info:
        ns._scalar(3)
    line = _line_of(tree, GOLDEN, "    import torch")
    assert f"{tree.display_path(GOLDEN)}:{line}: `import torch` in _scalar()" in str(info.value)
    assert _no_heavy_modules() == []


def test_redefined_function_resolves_to_the_last_definition(upstream):
    """ttnn's transformer.py defines `_golden_function` several times; Python keeps the last one."""
    tree = upstream["tt-metal"]
    lines = read_text(tree, TRANSFORMER).splitlines()
    defs = [i for i, line in enumerate(lines, start=1) if line.startswith("def _golden_function(")]
    assert len(defs) > 1
    ns = extract(tree, TRANSFORMER, "_golden_function")
    assert ns._golden_function.__code__.co_firstlineno == defs[-1]


def test_traceback_points_at_the_real_file_and_line(upstream):
    tree = upstream["tt-metal"]
    ns = extract(tree, GOLDEN, "_repeat_kv_heads")

    class Shape:
        shape = (1, 3, 4, 8)

    with pytest.raises(ValueError) as info:
        ns._repeat_kv_heads(Shape(), 4)
    frame = traceback.extract_tb(info.tb)[-1]
    expected = _line_of(tree, GOLDEN, 'raise ValueError(f"Q heads ({num_query_heads}) must be divisible')
    assert (frame.filename, frame.lineno, frame.name) == (tree.display_path(GOLDEN), expected, "_repeat_kv_heads")
    assert "must be divisible by KV heads" in linecache.getline(frame.filename, frame.lineno)


def test_method_extraction_with_stubs_never_imports_vllm(upstream):
    with pytest.raises(RefusedImport, match=r"from vllm\.logger import init_logger.*Hermes2ProToolParser"):
        extract(upstream["plugin"], HERMES, "Hermes2ProToolParser.extract_tool_calls", stubs={"ToolParser": object})
    assert _no_heavy_modules() == []


def test_dataclass_properties_setter_and_type_checking_block(upstream):
    """A real dataclass with @property, a setter, a cached_property and an `if TYPE_CHECKING:` import."""
    ns = extract(
        upstream["plugin"],
        REQUEST,
        "StructuredOutputRequest.grammar",
        "StructuredOutputRequest.is_grammar_ready",
        "StructuredOutputRequest._check_grammar_completion",
        # no `from __future__ import annotations` in that file: the field annotations run at class creation
        stubs={"StructuredOutputGrammar": object, "StructuredOutputsParams": object},
    )
    cls = ns.StructuredOutputRequest
    # not requested, not kept: a use of it is refused loudly (never silently absent, never AttributeError)
    with pytest.raises(ExtractError, match=r"request\.py:\d+: StructuredOutputRequest\.from_sampling_params was left out"):
        cls.from_sampling_params(None)
    request = cls(params=None)
    future: Future = Future()
    request.grammar = future
    assert request.is_grammar_ready is False and request.grammar is None
    future.set_result("compiled")
    assert request.is_grammar_ready is True and request.grammar == "compiled"
    assert _no_heavy_modules() == []


def test_star_import_is_refused_clearly(upstream):
    with pytest.raises(StarImportRefused, match=r"pooler/__init__\.py:\d+: 'Pooler' .*from \.abstract import \*"):
        extract(upstream["plugin"], POOLER, "Pooler")


def test_missing_definition_and_missing_file(upstream):
    with pytest.raises(MissingDefinition, match="prefill_chunk_plan"):
        extract(upstream["tt-metal"], GOLDEN, "prefill_chunk_plan")
    with pytest.raises(MissingDefinition, match="does not exist"):
        extract(upstream["plugin"], "vllm/tool_parsers/qwen_xml_call.py", "parse_qwen_xml_function")
    with pytest.raises(MissingDefinition, match="no member 'nope'"):
        extract(upstream["plugin"], HERMES, "Hermes2ProToolParser.nope")


# -- tricky constructs, one small file each -----------------------------------------------------

TRICKY = '''\
"""tricky module"""
from __future__ import annotations

import functools
import os.path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heavy_typing_only import Thing

__all__ = ["public", "Box"]
__all__ += ["shadow"]

LIMIT = 4
DOUBLE = LIMIT * 2
LIMIT = 10  # rebinding: functions see 10, DOUBLE was computed from 4


def deco(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return ("decorated", fn(*args))
    return wrapper


@deco
def public(x: Thing) -> Thing:
    def inner(y):
        return y + LIMIT
    return inner(x) + DOUBLE


def shadow(LIMIT=1):
    return LIMIT  # the parameter, not the global


def uses_typing_only():
    return Thing()


def uses_path():
    return os.path.join("a", "b")


class Box:
    size = DOUBLE

    def __init__(self, n):
        self.n = n

    @property
    def area(self):
        return self.n * self.size

    def grow(self):
        return Box(self.n + 1)


def broken():
    return 1 / 0


_CACHE = None


def cached():
    global _CACHE
    if _CACHE is None:
        _CACHE = LIMIT
    return _CACHE
'''


@pytest.fixture
def tricky(tmp_path):
    root = tmp_path / "t"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "tricky.py").write_text(TRICKY)
    return DirTree(root, "demo")


def test_decorators_nested_functions_and_constants_from_constants(tricky):
    ns = extract(tricky, "pkg/tricky.py", "public")
    assert ns.public(1) == ("decorated", 1 + 10 + 8)
    assert ns.__name__ == "pkg.tricky"
    assert "Thing" not in vars(ns)  # only used in annotations: never needed


def test_shadowed_names_resolve_like_python(tricky):
    ns = extract(tricky, "pkg/tricky.py", "shadow")
    assert ns.shadow() == 1 and "LIMIT" not in vars(ns)


def test_type_checking_only_name_used_at_run_time_is_an_error(tricky):
    with pytest.raises(ExtractError, match=r"'Thing' is only imported under `if TYPE_CHECKING:` \(line 8\)"):
        extract(tricky, "pkg/tricky.py", "uses_typing_only")


def test_global_statement_does_not_hide_the_module_binding(tricky):
    ns = extract(tricky, "pkg/tricky.py", "cached")
    assert ns._CACHE is None and ns.cached() == 10 and ns._CACHE == 10


def test_dotted_stdlib_import(tricky):
    assert extract(tricky, "pkg/tricky.py", "uses_path").uses_path() == "a/b"


def test_all_is_the_default_selection(tricky):
    ns = extract(tricky, "pkg/tricky.py")
    assert ns.__extracted__ == ("public", "Box", "shadow")
    assert ns.Box(3).area == 3 * 8 and ns.Box(1).grow().n == 2


def test_class_member_selection_keeps_class_attributes_only(tricky):
    ns = extract(tricky, "pkg/tricky.py", "Box.area", "Box.__init__")
    assert ns.Box(2).area == 16
    with pytest.raises(ExtractError, match=r"tricky\.py:\d+: Box\.grow was left out of this extraction"):
        ns.Box(2).grow()


def test_relative_imports_are_refused_unless_stubbed(tmp_path):
    root = tmp_path / "r"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("from .sibling import helper\n\n\ndef f():\n    return helper()\n")
    tree = DirTree(root)
    with pytest.raises(RefusedImport, match=r"mod\.py:1: `from \.sibling import helper` is a relative import"):
        extract(tree, "pkg/mod.py", "f")
    assert extract(tree, "pkg/mod.py", "f", stubs={"helper": lambda: 7}).f() == 7


def test_unknown_third_party_needs_allow(tmp_path):
    root = tmp_path / "u"
    root.mkdir()
    (root / "m.py").write_text("import numpy as np\n\n\ndef f():\n    return int(np.int64(3))\n")
    tree = DirTree(root)
    with pytest.raises(RefusedImport, match="numpy is neither stdlib nor in the allowed list"):
        extract(tree, "m.py", "f")
    assert extract(tree, "m.py", "f", allow=["numpy"]).f() == 3


def test_no_bytecode_and_no_module_registration(tricky):
    before = set(sys.modules)
    ns = extract(tricky, "pkg/tricky.py", "public", "Box")
    with pytest.raises(ZeroDivisionError):
        extract(tricky, "pkg/tricky.py", "broken").broken()
    assert ns.public(0)
    assert not list(tricky.root.rglob("__pycache__")) and not list(tricky.root.rglob("*.pyc"))
    assert "pkg.tricky" not in sys.modules and "pkg" not in sys.modules
    assert not {m for m in set(sys.modules) - before if m.startswith("pkg")}
