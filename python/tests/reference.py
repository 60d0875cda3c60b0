"""Pure-NumPy attention in float64, and bfloat16 bit conversions (NumPy has no bfloat16)."""

from __future__ import annotations

import numpy as np


def attention_f64(q, k, v, *, causal=False, softmax_scale=None, q_start=0, kv_start=0):
    """o [B, Lq, Hq, D] and lse [B, Hq, Lq] of softmax(scale q k^T) v, in float64.

    GQA: query head h reads kv head h // (Hq // Hkv). Causal: key position kv_start + j is
    masked for query position q_start + i when it is larger. Rows that see no key give o = 0
    and lse = -inf.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k = np.repeat(k, group, axis=2)
    v = np.repeat(v, group, axis=2)
    scale = 1.0 / np.sqrt(q.shape[3]) if softmax_scale is None else softmax_scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        q_pos = q_start + np.arange(q.shape[1])
        kv_pos = kv_start + np.arange(k.shape[1])
        s = np.where(kv_pos[None, :] > q_pos[:, None], -np.inf, s)
    m = s.max(axis=-1, keepdims=True)
    seen = np.isfinite(m)
    p = np.where(seen, np.exp(s - np.where(seen, m, 0.0)), 0.0)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhqk,bkhd->bqhd", p / np.where(seen, l, 1.0), v)
    lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)[..., 0]
    return o, lse


def to_bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def from_bf16_bits(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def random_qkv(rng, batch, seq, heads, kv_heads, head_dim, kv_seq=None):
    """float32 q [B, L, H, D] and k, v [B, Lkv, Hkv, D], uniform in [-1, 1)."""
    kv_seq = seq if kv_seq is None else kv_seq
    q = rng.uniform(-1, 1, (batch, seq, heads, head_dim)).astype(np.float32)
    k = rng.uniform(-1, 1, (batch, kv_seq, kv_heads, head_dim)).astype(np.float32)
    v = rng.uniform(-1, 1, (batch, kv_seq, kv_heads, head_dim)).astype(np.float32)
    return q, k, v
