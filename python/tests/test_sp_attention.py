"""tessera.sp.Attention on rank threads of the cpu backend: every rank's output shard, put
back at its tokens, equals attention over the whole sequence (NumPy, float64)."""

import numpy as np
import pytest

import tessera
from reference import attention_f64, from_bf16_bits, random_qkv, to_bf16_bits

F32_TOL = 2e-5


def run_layer(world_size, q, k, v, *, machines=1, joint=None, dtype="float32", runs=1, **plan):
    """Plans tessera.sp.Attention on world_size ranks, runs it `runs` times on every rank's
    shards (poisoned outputs), and returns the full output [B, L, H, D] put together from the
    shards, the joint output of every rank, and what each rank reported."""
    B, L, H, D = q.shape
    poison = np.nan if q.dtype.kind == "f" else 0x7FC0  # bfloat16 bits: a NaN
    J = 0 if joint is None else joint[0].shape[1]

    def rank(ctx):
        layer = tessera.sp.Attention(
            ctx, seq_len=L, heads=H, head_dim=D, batch=B, kv_heads=k.shape[2], dtype=dtype,
            joint_tokens=J, **plan
        )
        rows = layer.local_tokens
        assert rows.dtype == np.int64 and len(rows) == layer.local_rows
        for _ in range(runs):
            out = np.full((B, len(rows), H, D), poison, dtype=q.dtype)
            args = (q[:, rows], k[:, rows], v[:, rows])
            if joint is None:
                result, joint_out = layer(*args, out=out), None
            else:
                result, joint_out = layer(*args, out=out, joint_q=joint[0], joint_k=joint[1],
                                          joint_v=joint[2])
            assert result is out
        return rows, out, joint_out, layer.method

    shards = tessera.run_cpu_ranks(world_size, rank, machines=machines)
    full = np.full_like(q, poison)
    covered = np.zeros(L, dtype=int)
    for rows, out, _, _ in shards:
        full[:, rows] = out
        covered[rows] += 1
    assert (covered == 1).all(), "every token on exactly one rank"
    return full, [s[2] for s in shards], {s[3] for s in shards}


CASES = [  # (world size, machines, method, extra plan options)
    *[(p, 1, m, {}) for p in (1, 2, 4) for m in ("ring", "ulysses", "usp", "mesh", "auto")],
    (4, 2, "usp", {}),
    (4, 2, "tas", {}),
    (4, 2, "torus", {}),
    (4, 2, "auto", {}),
    (2, 1, "ring", {"comm": "one-sided"}),
    (4, 1, "ulysses", {"comm": "one-sided"}),
    (4, 1, "ring", {"layout": "striped"}),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size,machines,method,options", CASES)
def test_methods_match_numpy(rng, world_size, machines, method, options, causal):
    # L = 23: no rank count divides it; 4 heads, so Ulysses can split them over 4 ranks.
    q, k, v = random_qkv(rng, 2, 23, 4, 4, 16)
    full, _, methods = run_layer(world_size, q, k, v, machines=machines, method=method,
                                 causal=causal, **options)
    assert not np.isnan(full).any(), "every output element written"
    np.testing.assert_allclose(full, attention_f64(q, k, v, causal=causal)[0], atol=F32_TOL,
                               rtol=0)
    assert len(methods) == 1
    if method != "auto":
        assert methods == {method}


@pytest.mark.parametrize("method", ["ring", "usp", "ulysses"])
def test_joint_tokens_and_gqa(rng, method):
    # 3 replicated joint (text) tokens in front of 18 image tokens; 8 query heads over 4 KV heads.
    J = 3
    q, k, v = random_qkv(rng, 1, J + 18, 8, 4, 8)
    joint = (q[:, :J], k[:, :J], v[:, :J])
    image = (q[:, J:], k[:, J:], v[:, J:])
    full, joint_outs, _ = run_layer(4, *image, joint=joint, method=method)
    ref = attention_f64(q, k, v)[0]
    np.testing.assert_allclose(full, ref[:, J:], atol=F32_TOL, rtol=0)
    for joint_out in joint_outs:  # every rank holds the whole joint output
        np.testing.assert_allclose(joint_out, ref[:, :J], atol=F32_TOL, rtol=0)


def test_runs_repeat_and_outputs_are_allocated_when_not_given(rng):
    q, k, v = random_qkv(rng, 1, 16, 4, 4, 8)

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=16, heads=4, head_dim=8, method="ring")
        rows = layer.local_tokens
        outs = [layer(q[:, rows], k[:, rows], v[:, rows]) for _ in range(3)]
        return rows, outs

    ref = attention_f64(q, k, v)[0]
    for rows, outs in tessera.run_cpu_ranks(2, rank):
        for out in outs:
            assert out.dtype == np.float32
            np.testing.assert_allclose(out, ref[:, rows], atol=F32_TOL, rtol=0)


def test_bfloat16_bits(rng):
    q, k, v = (to_bf16_bits(x) for x in random_qkv(rng, 1, 19, 4, 4, 16))
    full, _, _ = run_layer(2, q, k, v, dtype="bfloat16", method="usp", causal=True)
    ref = attention_f64(*(from_bf16_bits(x) for x in (q, k, v)), causal=True)[0]
    assert not np.isnan(from_bf16_bits(full)).any(), "every output element written"
    np.testing.assert_allclose(from_bf16_bits(full), ref, atol=1e-2, rtol=0)


def test_auto_reports_its_plan(rng):
    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=64, heads=8, head_dim=16, method="auto")
        return layer.method, layer.summary, layer.plan_json(), layer.softmax_scale

    for method, summary, plan_json, scale in tessera.run_cpu_ranks(4, rank, machines=2):
        assert method in ("ring", "ulysses", "usp", "tas", "torus", "mesh")
        assert method in summary and method in plan_json
        assert scale == pytest.approx(1 / 4)
