"""0002: the SDPA q/k chunk rule never selects 32 at a resume offset (asserted over the input space)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from materialize.offline import extract

GOLDEN = "ttnn/operations/transformer_golden.py"
MAX_TOKENS = 1 << 20  # 1M-token contexts bound the space the model can see


K_CHUNK_MIN = 128  # the resume branch's k chunk is never below the smallest mask bucket


def _largest_dividing(offset: int, max_chunk: int) -> int:
    """The reference: the largest power of two in [64, max_chunk] dividing ``offset``."""
    return max(c for c in (64, 128, 256, 512, 1024, 2048, 4096) if c <= max_chunk and offset % c == 0)


def _check_resume(rule, offset: int, length: int, max_chunk: int) -> None:
    q_chunk, k_chunk = rule(offset, length, max_chunk=max_chunk)
    where = f"offset={offset} length={length} max_chunk={max_chunk} -> ({q_chunk}, {k_chunk})"
    assert q_chunk != 32 and k_chunk != 32, f"32-token chunk at a resume offset: {where}"
    assert offset % q_chunk == 0, f"q chunk does not divide the resume offset: {where}"
    for chunk in (q_chunk, k_chunk):
        assert chunk & (chunk - 1) == 0 and 64 <= chunk <= max_chunk, f"chunk out of range: {where}"
    assert q_chunk == _largest_dividing(offset, max_chunk), f"not the largest dividing q chunk: {where}"
    assert k_chunk >= K_CHUNK_MIN and k_chunk == max(q_chunk, K_CHUNK_MIN), f"k chunk below {K_CHUNK_MIN}: {where}"


def test_never_32_at_resume_exhaustive(tree):
    """Every page-aligned resume offset up to 16k against every tile-padded segment length up to 4k."""
    rule = extract(tree, GOLDEN, "sdpa_qk_chunk").sdpa_qk_chunk
    for page in (64, 128):
        for offset in range(page, 16384 + 1, page):
            for length in range(32, 4096 + 1, 32):
                _check_resume(rule, offset, length, 512)


def test_never_32_at_resume_property(tree):
    """The same rule over the whole space: any 64-aligned offset, any length, any chunk budget."""
    rule = extract(tree, GOLDEN, "sdpa_qk_chunk").sdpa_qk_chunk

    @given(
        offset=st.integers(1, MAX_TOKENS // 64).map(lambda n: n * 64),
        length=st.integers(1, MAX_TOKENS),
        max_chunk=st.sampled_from([128, 256, 512, 1024, 2048]),
    )
    def resume(offset, length, max_chunk):
        _check_resume(rule, offset, length, max_chunk)

    resume()


def test_unresumable_offsets_are_refused(tree):
    """Offsets only a 32-token chunk divides cannot be served correctly: refuse, do not compute."""
    rule = extract(tree, GOLDEN, "sdpa_qk_chunk").sdpa_qk_chunk

    @given(offset=st.integers(0, MAX_TOKENS // 32).map(lambda n: n * 64 + 32), length=st.integers(1, 8192))
    def refused(offset, length):
        with pytest.raises(ValueError, match="32"):
            rule(offset, length, max_chunk=512)

    refused()


def test_plan_segments_follow_the_rule(tree):
    """prefill_chunk_plan's lead and tail at a resume carry rule-conform chunks (e.g. a 32-token tail)."""
    golden = extract(tree, GOLDEN, "prefill_chunk_plan")
    for start, end in [(4096, 4128), (2112, 2144), (2112, 8224), (64, 96), (6144, 6176)]:
        plan = golden.prefill_chunk_plan(start, end, chunk=2048, page=64)
        for seg_start, seg_end, q_chunk, k_chunk in plan.segments():
            if seg_start > 0:
                assert 32 not in (q_chunk, k_chunk), f"segment [{seg_start}, {seg_end}) got ({q_chunk}, {k_chunk})"
                assert seg_start % q_chunk == 0


@pytest.mark.parametrize("max_chunk", [0, 32, 64, 96, 100, 192, 384, 1000])
def test_max_chunk_must_be_a_power_of_two_of_at_least_128(tree, max_chunk):
    """A chunk budget the kernels cannot honour is refused for every offset, cold or resumed."""
    rule = extract(tree, GOLDEN, "sdpa_qk_chunk").sdpa_qk_chunk
    for offset in (0, 64, 4096):
        with pytest.raises(ValueError, match="power of two"):
            rule(offset, 256, max_chunk=max_chunk)
