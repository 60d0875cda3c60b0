"""FP8 (e4m3) attention on the cpu backend: per-head quantization against its error bound, and
attention of the quantized inputs against a float64 NumPy reference of the dequantized ones."""

import numpy as np
import pytest

import tessera
from reference import attention_f64, from_bf16_bits, random_qkv


def e4m3_to_float(bits) -> np.ndarray:
    """OCP E4M3FN bit patterns (uint8) -> float64: 1 sign, 4 exponent (bias 7), 3 mantissa
    bits; exponent 0 is subnormal (m / 8 * 2^-6); 0x7F / 0xFF are NaN."""
    b = np.asarray(bits, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 0x7
    value = np.where(e == 0, m / 8.0 * 2.0**-6, (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.where((b & 0x7F) == 0x7F, np.nan, sign * value)


def quantized_qkv(rng, *shape_args, kv_seq=None):
    q, k, v = random_qkv(rng, *shape_args, kv_seq=kv_seq)
    return [tessera.quantize_fp8(x) for x in (q, k, v)], (q, k, v)


def dequantized(x8, descales):
    return e4m3_to_float(x8) * descales[None, None, :, None]


def test_quantize_fp8_uses_each_heads_range_within_half_a_step(rng):
    x = rng.uniform(-1, 1, (2, 9, 4, 16)).astype(np.float32)
    x[:, :, 1] *= 1e-3  # a small head keeps its own scale
    x[:, :, 3] = 0  # a head of zeros: descale 1
    x8, d = tessera.quantize_fp8(x)
    assert x8.dtype == np.uint8 and x8.shape == x.shape and d.dtype == np.float32
    amax = np.abs(x).max(axis=(0, 1, 3))
    np.testing.assert_allclose(d[:3], amax[:3] / 448, rtol=1e-6)
    assert d[3] == 1
    back = dequantized(x8, d)
    bound = 2.0**-4 * np.abs(x) + 2.0**-10 * d[None, None, :, None]
    assert (np.abs(back - x) <= bound).all()
    assert np.abs(back).max(axis=(0, 1, 3))[0] == pytest.approx(amax[0], rel=2**-4)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_matches_numpy_on_the_dequantized_inputs(rng, causal):
    (q, k, v), _ = quantized_qkv(rng, 2, 17, 4, 2, 16, kv_seq=23)
    o, lse = tessera.attention_fp8(q[0], k[0], v[0], q[1], k[1], v[1], causal=causal,
                                   out_dtype="float32", kv_start=-6, return_lse=True)
    want_o, want_lse = attention_f64(dequantized(*q), dequantized(*k), dequantized(*v),
                                     causal=causal, kv_start=-6)
    assert o.dtype == np.float32 and o.shape == (2, 17, 4, 16) and lse.shape == (2, 4, 17)
    np.testing.assert_allclose(o, want_o, atol=2e-5, rtol=0)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5, rtol=0)


def test_attention_fp8_stays_within_the_fp8_bound_of_the_original(rng):
    (q, k, v), originals = quantized_qkv(rng, 1, 32, 2, 2, 32)
    o = tessera.attention_fp8(q[0], k[0], v[0], q[1], k[1], v[1])  # bfloat16 bits by default
    assert o.dtype == np.uint16
    want, _ = attention_f64(*originals)
    err = np.abs(from_bf16_bits(o) - want).max()
    assert err <= 0.05 * np.abs(want).max(), err  # e4m3 keeps 3 mantissa bits


def test_attention_fp8_names_bad_arguments(rng):
    (q, k, v), originals = quantized_qkv(rng, 1, 8, 4, 2, 16)
    with pytest.raises(tessera.InvalidArgumentError, match=r"q: dtype float32: expected float8_e4m3fn"):
        tessera.attention_fp8(originals[0], k[0], v[0], q[1], k[1], v[1])
    with pytest.raises(tessera.InvalidArgumentError, match=r"descale_k: 4 values: expected 2"):
        tessera.attention_fp8(q[0], k[0], v[0], q[1], q[1], v[1])
    with pytest.raises(tessera.InvalidArgumentError, match=r"descale_v: dtype float64: expected float32"):
        tessera.attention_fp8(q[0], k[0], v[0], q[1], k[1], v[1].astype(np.float64))
    with pytest.raises(tessera.InvalidArgumentError, match=r"out_dtype = 'int8'"):
        tessera.attention_fp8(q[0], k[0], v[0], q[1], k[1], v[1], out_dtype="int8")
