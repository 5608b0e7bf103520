"""0001: prefill_chunk_plan (reset / lead / replays / tail) and the resumed prefill reference using it."""

from __future__ import annotations

import numpy as np
import pytest

from materialize.offline import extract, fake_torch

GOLDEN = "ttnn/operations/transformer_golden.py"

# (start, end, chunk, page) -> (reset, lead, replays, tail), segments as (seg_start, seg_end)
CASES = [
    ((0, 8364, 2048, 64), (True, None, [(0, 2048), (2048, 4096), (4096, 6144), (6144, 8192)], (8192, 8364))),
    ((0, 4096, 2048, 64), (True, None, [(0, 2048), (2048, 4096)], None)),
    ((0, 100, 2048, 64), (True, None, [], (0, 100))),
    ((2048, 6000, 2048, 64), (False, None, [(2048, 4096)], (4096, 6000))),
    # resumes that are page-aligned but not chunk-aligned: the lead runs up to the next boundary
    ((2112, 8364, 2048, 64), (False, (2112, 4096), [(4096, 6144), (6144, 8192)], (8192, 8364))),
    ((2112, 3000, 2048, 64), (False, (2112, 3000), [], None)),
    ((2112, 4096, 2048, 64), (False, (2112, 4096), [], None)),
    ((4032, 8200, 2048, 64), (False, (4032, 4096), [(4096, 6144), (6144, 8192)], (8192, 8200))),
    ((64, 2048, 2048, 64), (False, (64, 2048), [], None)),
    ((2176, 6400, 2048, 128), (False, (2176, 4096), [(4096, 6144)], (6144, 6400))),
    ((6016, 12288, 2048, 128), (False, (6016, 6144), [(6144, 8192), (8192, 10240), (10240, 12288)], None)),
    ((4096, 4096, 2048, 64), (False, None, [], None)),
]


def _bounds(segment):
    return None if segment is None else tuple(segment[:2])


@pytest.mark.weak_control("prefill_chunk_plan is new in 0001; its behaviour is pinned by test_resumed_prefill")
@pytest.mark.parametrize(("args", "expected"), CASES, ids=[f"{a[0]}-{a[1]}/{a[2]}p{a[3]}" for a, _ in CASES])
def test_plan_cases(tree, args, expected):
    plan = extract(tree, GOLDEN, "prefill_chunk_plan").prefill_chunk_plan
    start, end, chunk, page = args
    got = plan(start, end, chunk=chunk, page=page)
    reset, lead, replays, tail = expected
    assert got.reset is reset
    assert _bounds(got.lead) == lead
    assert [_bounds(r) for r in got.replays] == replays
    assert _bounds(got.tail) == tail
    # the segments tile [start, end) exactly, and every replay is a full, chunk-aligned chunk
    bounds = [_bounds(s) for s in got.segments()]
    assert [b for b in bounds for _ in (0,)] == sorted(bounds)
    covered = [p for s, e in bounds for p in (s, e)]
    assert (covered[0], covered[-1]) == (start, end) if bounds else start == end
    assert all(b[1] == n[0] for b, n in zip(bounds, bounds[1:], strict=False))
    assert all(s % chunk == 0 and e - s == chunk for s, e in map(_bounds, got.replays))


@pytest.mark.weak_control("prefill_chunk_plan is new in 0001")
def test_plan_refuses_unaligned_resumes(tree):
    plan = extract(tree, GOLDEN, "prefill_chunk_plan").prefill_chunk_plan
    with pytest.raises(ValueError, match="not aligned"):
        plan(2100, 4096, chunk=2048, page=64)
    with pytest.raises(ValueError, match="multiple of the page"):
        plan(0, 4096, chunk=100, page=64)
    with pytest.raises(ValueError):
        plan(4096, 2048, chunk=2048, page=64)


# (start, rows): start = Sk - S is where the resumed prefill begins; chunk 128, page 64 below.
# Every case is a resume (start > 0); cold prefills are checked inside the test as a regression guard.
RESUMES = [(192, 200), (128, 300), (64, 40), (320, 128), (448, 8)]


@pytest.mark.parametrize(("start", "rows"), RESUMES, ids=[f"start{s}-rows{r}" for s, r in RESUMES])
def test_resumed_prefill_matches_attention(tree, start, rows):
    """The existing chunked prefill reference, run on a resumed prefill, equals true causal attention.

    Exists before 0001 too, so the control is strong: upstream masks a resumed Q as if it began at 0.
    The chunk is stubbed to 128 so small tensors exercise lead, replays and tail.
    """
    golden = extract(
        tree,
        GOLDEN,
        "scaled_dot_product_attention_reference_prefill",
        stubs={"torch": fake_torch, "REFERENCE_PREFILL_SEQ_CHUNK": 128},
    )
    reference = golden.scaled_dot_product_attention_reference_prefill
    rng = np.random.default_rng(start * 1000 + rows)
    heads, kv_heads, dim = 4, 2, 8
    scale = dim**-0.5
    for resume in (0, start):  # the cold prefill must stay right; the resume is what 0001 fixes
        keys = resume + rows
        q = fake_torch.tensor(rng.standard_normal((1, heads, rows, dim)))
        k = fake_torch.tensor(rng.standard_normal((1, kv_heads, keys, dim)))
        v = fake_torch.tensor(rng.standard_normal((1, kv_heads, keys, dim)))
        got = np.asarray(reference(q, k, v, scale))
        expected = fake_torch.resumed_causal_attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), scale)
        assert got.shape == expected.shape
        assert not np.isnan(got).any(), f"resume at {resume}: some query rows were never computed"
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, err_msg=f"resume at {resume}")


def test_flash_mla_prefill_golden_on_a_resume(tree):
    """The registered golden of ttnn.transformer.flash_mla_prefill goes through the same reference."""
    golden = extract(
        tree, GOLDEN, "flash_mla_prefill_golden", stubs={"torch": fake_torch, "REFERENCE_PREFILL_SEQ_CHUNK": 128}
    )
    rng = np.random.default_rng(7)
    heads, dim, dim_v, start, rows = 2, 16, 8, 192, 100
    q = fake_torch.tensor(rng.standard_normal((1, heads, rows, dim)))
    k = fake_torch.tensor(rng.standard_normal((1, 1, start + rows, dim)))
    got = np.asarray(golden.flash_mla_prefill_golden(q, k, dim_v))
    value = np.repeat(np.asarray(k)[..., :dim_v], heads, axis=1)
    expected = fake_torch.resumed_causal_attention(q, np.repeat(k, heads, axis=1), value, dim**-0.5)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
