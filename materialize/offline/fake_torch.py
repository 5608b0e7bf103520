"""A numpy-backed stand-in for the few torch calls the SDPA reference functions make.

Offline tests may not import torch. The reference prefill only needs tensors with ``shape``,
slicing, ``to``/``unsqueeze``, ``empty``/``arange`` and ``nn.functional.scaled_dot_product_attention``;
this module provides exactly those, with torch's semantics (a boolean mask marks the keys that
take part; ``is_causal`` is top-left aligned, as torch documents for L != S). Tests pass it as an
explicit stub: ``extract(..., stubs={"torch": fake_torch})``.
"""

from __future__ import annotations

import types

import numpy as np


class Tensor(np.ndarray):
    """numpy array with the torch methods the reference uses."""

    def to(self, dtype):  # noqa: ARG002 - one dtype here
        return self

    def unsqueeze(self, dim: int) -> Tensor:
        return np.expand_dims(self, dim).view(Tensor)


def tensor(data) -> Tensor:
    return np.asarray(data, dtype=np.float64).view(Tensor)


def empty(*shape, dtype=None) -> Tensor:  # noqa: ARG001
    return np.full(shape, np.nan).view(Tensor)


def arange(start, end=None) -> Tensor:
    values = np.arange(start) if end is None else np.arange(start, end)
    return values.view(Tensor)


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):  # noqa: ARG001
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    length, source = scores.shape[-2], scores.shape[-1]
    allowed = np.ones((length, source), dtype=bool)
    if is_causal:
        allowed &= np.tril(np.ones((length, source), dtype=bool))
    if attn_mask is not None:
        allowed = allowed & np.asarray(attn_mask, dtype=bool)
    scores = np.where(allowed, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ v).view(Tensor)


nn = types.SimpleNamespace(functional=types.SimpleNamespace(scaled_dot_product_attention=scaled_dot_product_attention))
float32 = np.float32
bfloat16 = np.float32


def resumed_causal_attention(q, k, v, scale):
    """Ground truth: Q rows are the LAST rows of the sequence (bottom-right causal alignment)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    rows, keys = q.shape[-2], k.shape[-2]
    start = keys - rows
    q_pos = np.arange(start, keys)[:, None]
    k_pos = np.arange(keys)[None, :]
    scores = q @ np.swapaxes(k, -1, -2) * scale
    scores = np.where(k_pos <= q_pos, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v
