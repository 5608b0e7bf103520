"""0003: the SDPA reader/writer kernels assert a Q-chunk-aligned resume offset before dividing by it.

Structural, no compiler: comments are stripped, brackets must balance, and in the same block as
the division ``chunk_start_idx / q_chunk_size`` there must be, after ``q_chunk_size`` is defined and
with no reassignment in between, ``ASSERT(chunk_start_idx % q_chunk_size == 0);``.
"""

from __future__ import annotations

import re

import pytest

from materialize.offline import cxx
from materialize.tree import read_text

KERNELS = "ttnn/ttnn/cpp/ttnn/operations/transformer/sdpa/device/kernels/dataflow/"
DIVISION = {
    "reader_interleaved.cpp": r"chunked_q_chunk_offset_phase_1_local\s*=\s*chunk_start_idx\s*/\s*q_chunk_size\s*;",
    "writer_interleaved.cpp": r"chunk_start_t_in_q_chunks_phase_1\s*=\s*chunk_start_idx\s*/\s*q_chunk_size\s*;",
}
GUARD = r"\bASSERT\s*\(\s*chunk_start_idx\s*%\s*q_chunk_size\s*==\s*0\s*\)\s*;"


@pytest.mark.parametrize("kernel", sorted(DIVISION))
def test_resume_offset_asserted_before_division(tree, kernel):
    source = read_text(tree, KERNELS + kernel)
    where = tree.display_path(KERNELS + kernel)
    assert not cxx.unbalanced(source), f"{where}: {cxx.unbalanced(source)}"
    code = cxx.strip_comments(source)
    division = re.search(DIVISION[kernel], code)
    assert division is not None, f"{where}: the chunk-index division is gone; re-check what 0003 guards"
    block = cxx.enclosing_block(code, division.start())
    before = code[block.start : division.start()]
    guards = list(re.finditer(GUARD, before))
    guard = guards[-1] if guards else None
    assert guard is not None, f"{where}:{cxx.line_of(code, division.start())}: division not guarded by the ASSERT"
    defined_first = guard is not None and re.search(r"\bq_chunk_size\s*=", before[: guard.start()])
    assert defined_first, f"{where}: the ASSERT comes before q_chunk_size is defined"
    between = before[guard.end() :] if guard is not None else ""
    assert not re.search(r"\b(chunk_start_idx|q_chunk_size)\s*(?:[-+*/%]?=)(?!=)", between), (
        f"{where}: the offset or chunk size changes between the ASSERT and the division"
    )
    # the ASSERT macro must be declared: api/debug/assert.h included at top level
    includes = re.findall(r'^\s*#\s*include\s+"([^"]+)"', cxx.strip_comments(source), flags=re.M)
    assert "api/debug/assert.h" in includes, f"{where}: uses ASSERT without including api/debug/assert.h"
