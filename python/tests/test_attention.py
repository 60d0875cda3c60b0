"""Local attention on the cpu backend against a pure-NumPy float64 reference."""

import numpy as np
import pytest

import tessera
from reference import attention_f64, from_bf16_bits, random_qkv, to_bf16_bits

F32_TOL = 2e-5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "batch,lq,lkv,heads,kv_heads,head_dim",
    [(1, 1, 1, 1, 1, 1), (2, 17, 17, 4, 4, 16), (1, 9, 23, 8, 2, 32), (2, 33, 5, 6, 1, 8)],
)
def test_float32_matches_numpy(rng, causal, batch, lq, lkv, heads, kv_heads, head_dim):
    q, k, v = random_qkv(rng, batch, lq, heads, kv_heads, head_dim, kv_seq=lkv)
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True)
    ref_o, ref_lse = attention_f64(q, k, v, causal=causal)
    assert o.dtype == np.float32 and o.shape == q.shape
    assert lse.shape == (batch, heads, lq)
    np.testing.assert_allclose(o, ref_o, atol=F32_TOL, rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=F32_TOL, rtol=0)


def test_causal_positions_offset_the_mask(rng):
    # Queries at positions 10.., keys at 4..: rows see different numbers of keys; q_start below
    # kv_start leaves the first rows with no key (o = 0, lse = -inf).
    q, k, v = random_qkv(rng, 1, 8, 2, 2, 8, kv_seq=12)
    for q_start, kv_start in [(10, 4), (0, 3)]:
        o, lse = tessera.attention(
            q, k, v, causal=True, q_start=q_start, kv_start=kv_start, return_lse=True
        )
        ref_o, ref_lse = attention_f64(q, k, v, causal=True, q_start=q_start, kv_start=kv_start)
        np.testing.assert_allclose(o, ref_o, atol=F32_TOL, rtol=0)
        np.testing.assert_array_equal(np.isinf(lse), np.isinf(ref_lse))
        np.testing.assert_allclose(lse[np.isfinite(lse)], ref_lse[np.isfinite(ref_lse)], atol=F32_TOL)
    assert np.isinf(lse).any() and (o[:, :3] == 0).all()


def test_softmax_scale(rng):
    q, k, v = random_qkv(rng, 1, 7, 2, 2, 8)
    o = tessera.attention(q, k, v, softmax_scale=0.7)
    np.testing.assert_allclose(o, attention_f64(q, k, v, softmax_scale=0.7)[0], atol=F32_TOL)


def test_float16_matches_numpy_on_rounded_inputs(rng):
    q, k, v = (x.astype(np.float16) for x in random_qkv(rng, 2, 19, 4, 2, 16))
    o = tessera.attention(q, k, v, causal=True)
    assert o.dtype == np.float16
    # Inputs are exact in float16; the output is rounded to it (2^-11 relative).
    np.testing.assert_allclose(o.astype(np.float64), attention_f64(q, k, v, causal=True)[0],
                               atol=2e-3, rtol=0)


def test_bfloat16_as_uint16_bits_matches_numpy(rng):
    q, k, v = (to_bf16_bits(x) for x in random_qkv(rng, 1, 13, 4, 4, 16))
    o = tessera.attention(q, k, v)
    assert o.dtype == np.uint16  # bfloat16 bit patterns, like the inputs
    ref = attention_f64(*(from_bf16_bits(x) for x in (q, k, v)))[0]
    np.testing.assert_allclose(from_bf16_bits(o), ref, atol=1e-2, rtol=0)


def test_strided_inputs_and_out_are_used_in_place(rng):
    # Every other row of larger buffers: strided in L (allowed), unit stride in D.
    q, k, v = random_qkv(rng, 2, 22, 4, 4, 8)
    qs, ks, vs = q[:, ::2], k[:, ::2], v[:, ::2]
    assert not qs.flags.c_contiguous
    out_buffer = np.full((2, 11, 8, 8), np.nan, dtype=np.float32)
    out = out_buffer[:, :, ::2]  # strided output view
    result = tessera.attention(qs, ks, vs, out=out)
    assert result is out
    np.testing.assert_allclose(out, attention_f64(qs, ks, vs)[0], atol=F32_TOL, rtol=0)
    assert np.isnan(out_buffer[:, :, 1::2]).all()  # the rows between were not touched


def test_read_only_inputs_are_accepted(rng):
    q, k, v = random_qkv(rng, 1, 5, 2, 2, 4)
    for x in (q, k, v):
        x.setflags(write=False)
    np.testing.assert_allclose(tessera.attention(q, k, v), attention_f64(q, k, v)[0], atol=F32_TOL)


def test_reference_attention_is_the_float32_reference(rng):
    q, k, v = random_qkv(rng, 2, 9, 4, 2, 8, kv_seq=14)
    o, lse = tessera.reference_attention(q, k, v, causal=True, kv_start=0, q_start=5)
    ref_o, ref_lse = attention_f64(q, k, v, causal=True, q_start=5)
    np.testing.assert_allclose(o, ref_o, atol=F32_TOL, rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=F32_TOL, rtol=0)
    # The cpu backend's forward is that reference.
    np.testing.assert_array_equal(tessera.attention(q, k, v, causal=True, q_start=5), o)


def _packed(rng, lens, heads, head_dim):
    total = sum(lens)
    x = rng.standard_normal((total, heads, head_dim)).astype(np.float32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return x, cu


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_each_sequence(rng, causal):
    # Lengths 0 and 1 among others, queries fewer and more than keys (causal: bottom-right).
    lens_q, lens_k = [5, 0, 1, 7, 3], [5, 4, 1, 2, 9]
    q, cu_q = _packed(rng, lens_q, 4, 16)
    k, cu_k = _packed(rng, lens_k, 2, 16)
    v, _ = _packed(rng, lens_k, 2, 16)
    o, lse = tessera.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                      causal=causal, return_lse=True)
    assert o.shape == q.shape and lse.shape == (4, sum(lens_q))
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lq == 0:
            continue
        rows = slice(cu_q[b], cu_q[b + 1])
        keys = slice(cu_k[b], cu_k[b + 1])
        ref_o, ref_lse = attention_f64(q[None, rows], k[None, keys], v[None, keys], causal=causal,
                                       q_start=lk - lq, kv_start=0)
        np.testing.assert_allclose(o[rows], ref_o[0], atol=F32_TOL, rtol=0)
        seen = np.isfinite(ref_lse[0])
        np.testing.assert_array_equal(np.isfinite(lse[:, rows]), seen)
        np.testing.assert_allclose(lse[:, rows][seen], ref_lse[0][seen], atol=F32_TOL, rtol=0)


def test_varlen_refuses_bad_cu_seqlens_by_name(rng):
    q, cu = _packed(rng, [3, 4], 2, 8)
    with pytest.raises(tessera.Error, match="cu_seqlens_k: dtype int64: expected int32"):
        tessera.attention_varlen(q, q, q, cu, cu.astype(np.int64), 4, 4)
    with pytest.raises(tessera.Error, match=r"cu_seqlens_q\[2\] = 6: expected 7"):
        tessera.attention_varlen(q, q, q, np.array([0, 3, 6], np.int32), cu, 4, 4)
    with pytest.raises(tessera.Error, match="expected <= max_seqlen_q = 3"):
        tessera.attention_varlen(q, q, q, cu, cu, 3, 4)
