"""Wrong arguments raise tessera.Error subclasses whose message names the argument and says
what was expected."""

import numpy as np
import pytest

import tessera
from tessera._C import _testing

Q_SHAPE = (1, 6, 4, 8)


@pytest.fixture
def qkv(rng):
    return tuple(rng.uniform(-1, 1, Q_SHAPE).astype(np.float32) for _ in range(3))


def raises_invalid(match):
    return pytest.raises(tessera.InvalidArgumentError, match=match)


def test_error_classes_are_python_exceptions_with_codes():
    assert issubclass(tessera.InvalidArgumentError, tessera.Error)
    assert issubclass(tessera.InvalidArgumentError, ValueError)
    assert issubclass(tessera.UnsupportedError, NotImplementedError)
    assert issubclass(tessera.TimeoutError, TimeoutError)
    assert tessera.PeerFailureError.code == "peer_failure"
    assert set(tessera._C.error_code_keys) == set(tessera._errors.ERROR_CLASSES)


# ---- shapes ---------------------------------------------------------------------------------


def test_wrong_rank_names_the_argument_and_its_layout(qkv):
    q, k, v = qkv
    with raises_invalid(r"^tessera: invalid argument: q: 3 dimensions \[1, 6, 4\]: expected 4 \[B, Lq, Hq, D\]"):
        tessera.attention(q[..., 0], k, v)
    with raises_invalid(r"v: 5 dimensions .*expected 4 \[B, Lkv, Hkv, D\]"):
        tessera.attention(q, k, v[None])


def test_mismatched_shapes_name_the_argument(qkv):
    q, k, v = qkv
    with raises_invalid(r"k: shape \[1, 6, 4, 4\]: expected \[B=1, Lkv, Hkv, D=8\]"):
        tessera.attention(q, k[..., :4], v)
    with raises_invalid(r"v: shape \[1, 5, 4, 8\]: expected k's shape \[1, 6, 4, 8\]"):
        tessera.attention(q, k, v[:, :5])
    with raises_invalid(r"k: 3 heads: expected a divisor of q's 4 heads"):
        tessera.attention(q, k[:, :, :3], v[:, :, :3])
    with raises_invalid(r"out: shape \[1, 6, 4, 7\]: expected q's shape \[1, 6, 4, 8\]"):
        tessera.attention(q, k, v, out=np.zeros((1, 6, 4, 7), np.float32))


def test_sp_shards_of_the_wrong_size_name_the_argument(qkv):
    q, k, v = qkv

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=6, heads=4, head_dim=8, method="ring")
        rows = layer.local_tokens
        with raises_invalid(r"k: shape \[1, 6, 4, 8\]: expected \[B=1, L_r=3 \(local_rows\), Hkv=4, D=8\]"):
            layer(q[:, rows], k, v[:, rows])
        with raises_invalid(r"joint_q/k/v/out: given, but the layer was planned with joint_tokens = 0"):
            layer(q[:, rows], k[:, rows], v[:, rows], joint_q=q)
        # The other rank keeps step: both ran no collective after the refusals.
        return layer(q[:, rows], k[:, rows], v[:, rows]).shape

    assert tessera.run_cpu_ranks(2, rank) == [(1, 3, 4, 8)] * 2


def test_sp_joint_tokens_are_required_when_planned(qkv):
    q, k, v = qkv

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=6, heads=4, head_dim=8, joint_tokens=2)
        with raises_invalid(r"joint_q, joint_k, joint_v: the layer was planned with joint_tokens = 2"):
            layer(q, k, v)

    tessera.run_cpu_ranks(1, rank)


def test_sp_request_fields_are_named():
    def rank(ctx):
        with raises_invalid(r"seq_len = 0: expected >= 1"):
            tessera.sp.Attention(ctx, seq_len=0, heads=4, head_dim=8)
        with raises_invalid(r"kv_heads = 3: expected a divisor of heads = 4"):
            tessera.sp.Attention(ctx, seq_len=8, heads=4, kv_heads=3, head_dim=8)

    tessera.run_cpu_ranks(1, rank)


# ---- dtypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
def test_unsupported_dtypes_name_the_argument(qkv, dtype):
    q, k, v = qkv
    name = np.dtype(dtype).name
    with raises_invalid(rf"k: dtype {name}: expected float32, float16 or bfloat16"):
        tessera.attention(q, k.astype(dtype), v)


def test_mixed_dtypes_are_refused(qkv):
    q, k, v = qkv
    with raises_invalid(r"k, v: dtypes f16, f32: expected q's f32"):
        tessera.attention(q, k.astype(np.float16), v)
    with raises_invalid(r"out: dtype f16: expected q's f32"):
        tessera.attention(q, k, v, out=np.zeros(Q_SHAPE, np.float16))


def test_sp_dtype_is_checked_at_plan_and_call(qkv):
    q, k, v = qkv

    def rank(ctx):
        with raises_invalid(r"dtype = 'int8': expected float32, float16 or bfloat16"):
            tessera.sp.Attention(ctx, seq_len=6, heads=4, head_dim=8, dtype=np.int8)
        layer = tessera.sp.Attention(ctx, seq_len=6, heads=4, head_dim=8, dtype=np.float16)
        with raises_invalid(r"q: dtype f32: expected the layer's dtype f16"):
            layer(q, k, v)

    tessera.run_cpu_ranks(1, rank)


# ---- devices --------------------------------------------------------------------------------


def test_arrays_on_another_device_are_named(qkv):
    q, k, v = qkv
    cuda_k = _testing.foreign_device_array(list(Q_SHAPE), "cuda")
    with raises_invalid(r"k: on cuda:0: expected cpu like q \(every tensor of a call on one device\)"):
        tessera.attention(q, cuda_k, v)
    rocm_q = _testing.foreign_device_array(list(Q_SHAPE), "rocm")
    with raises_invalid(r"q: on DLPack device type 10 \(id 0\): expected cpu or cuda memory"):
        tessera.attention(rocm_q, k, v)


def test_cuda_arrays_need_an_output_array():
    cuda = [_testing.foreign_device_array(list(Q_SHAPE), "cuda") for _ in range(3)]
    with raises_invalid(r"out: None with q on cuda:0: expected an output array"):
        tessera.attention(*cuda)


def test_sp_shards_on_another_device_are_named(qkv):
    q, k, v = qkv
    cuda_v = _testing.foreign_device_array([1, 6, 4, 8], "cuda")

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=6, heads=4, head_dim=8)
        with raises_invalid(r"v: on cuda:0: expected cpu like q"):
            layer(q, k, cuda_v)

    tessera.run_cpu_ranks(1, rank)


def test_a_stream_on_the_cpu_backend_is_refused(qkv):
    with raises_invalid(r"stream = 7: the tensors are on the cpu, whose backend runs inline: expected 0"):
        tessera.attention(*qkv, stream=7)


# ---- layouts --------------------------------------------------------------------------------


def test_non_contiguous_head_dim_is_named(rng):
    wide = rng.uniform(-1, 1, (1, 6, 4, 16)).astype(np.float32)
    q = wide[..., ::2]  # stride 2 in D
    k = v = np.ascontiguousarray(q)
    with raises_invalid(r"q: not contiguous in its last dimension \(stride 2 of \[B, Lq, Hq, D\] \[1, 6, 4, 8\]\): expected stride 1"):
        tessera.attention(q, k, v)
    transposed = np.ascontiguousarray(q.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    with raises_invalid(r"v: not contiguous in its last dimension \(stride 4 of"):
        tessera.attention(k, k, transposed)


def test_reversed_and_broadcast_views_are_named(qkv):
    q, k, v = qkv
    with raises_invalid(r"k: stride -32 in dimension 1 of \[B, Lkv, Hkv, D\]: expected strides >= 0"):
        tessera.attention(q, k[:, ::-1], v)
    # A writable view whose 6 rows share memory (NumPy's broadcast_to would be read-only).
    row = np.zeros((1, 1, 4, 8), np.float32)
    shared_rows = np.lib.stride_tricks.as_strided(row, Q_SHAPE, (0, 0, 32, 4))
    with raises_invalid(r"out: stride 0 in dimension 1 of \[B, Lq, Hq, D\] \(a broadcast view\)"):
        tessera.attention(q, k, v, out=shared_rows)
    read_only = np.broadcast_to(row, Q_SHAPE)
    with raises_invalid(r"out: a numpy.ndarray object \(read-only, or no array\): expected a writable array"):
        tessera.attention(q, k, v, out=read_only)


def test_out_must_be_an_array(qkv):
    with raises_invalid(r"out: a list object \(read-only, or no array\): expected a writable array"):
        tessera.attention(*qkv, out=[1, 2])


# ---- plan options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option,match",
    [
        ({"method": "ringg"}, r"method = 'ringg': expected auto, ring, ulysses, usp, tas, torus"),
        ({"comm": "three-sided"}, r"comm = 'three-sided'"),
        ({"layout": "spiral"}, r"layout = 'spiral'"),
    ],
)
def test_bad_plan_options_name_the_option(option, match):
    def rank(ctx):
        tessera.sp.Attention(ctx, seq_len=8, heads=4, head_dim=8, **option)

    with pytest.raises(tessera.RankError, match=match) as info:
        tessera.run_cpu_ranks(2, rank)
    assert isinstance(info.value.__cause__, tessera.InvalidArgumentError)
    assert "rank 0 of 2 raised InvalidArgumentError" in str(info.value)


@pytest.mark.skipif("cuda" in tessera.info()["backends"], reason="a cuda build takes the stream")
def test_cuda_arrays_on_a_cpu_only_build_are_unsupported():
    # Every check passes (one device, shapes, an output): the stream handle is where a build
    # without the cuda backend stops.
    q, k, v, out = (_testing.foreign_device_array(list(Q_SHAPE), "cuda") for _ in range(4))
    with pytest.raises(tessera.UnsupportedError, match="wrap_cuda: this build of Tessera has no cuda backend"):
        tessera.attention(q, k, v, out=out, stream=123)
