"""The C++ structural helpers, on a real SDPA kernel from the pinned ttnn wheel."""

from __future__ import annotations

import re

from materialize.offline import cxx
from materialize.tree import read_text

WRITER = "ttnn/ttnn/cpp/ttnn/operations/transformer/sdpa/device/kernels/dataflow/writer_interleaved.cpp"


def test_real_kernel_balances_and_keeps_line_numbers(upstream):
    source = read_text(upstream["tt-metal"], WRITER)
    stripped = cxx.strip_comments(source)
    assert len(stripped) == len(source) and stripped.count("\n") == source.count("\n")
    assert "SPDX-License-Identifier" not in stripped  # comments gone
    assert cxx.unbalanced(source) == []


def test_enclosing_block_of_the_chunk_division(upstream):
    source = read_text(upstream["tt-metal"], WRITER)
    code = cxx.strip_comments(source)
    division = re.search(r"chunk_start_idx\s*/\s*q_chunk_size", code)
    block = cxx.enclosing_block(code, division.start())
    body = code[block.start : block.end]
    assert "cb_chunk_start.pop_front(1);" in body  # the `if (use_chunk_start_idx_tensor != 0) {` block
    assert code[: block.start].rstrip().endswith("if (use_chunk_start_idx_tensor != 0) {")


def test_unbalanced_and_comment_edge_cases():
    assert cxx.unbalanced("int f() {\n return g(1; }") == [
        "line 2: unmatched '}'",
        "line 1: '{' never closed",
        "line 2: '(' never closed",
    ]
    text = 'const char* s = "} // not a comment"; /* { */ int x = 1; // }\n'
    assert cxx.unbalanced(text) == []
    assert "not a comment" in cxx.strip_comments(text)
    assert "not a comment" not in cxx.strip_comments(text, strings=True)
