"""tessera.tp.Operation on rank threads of the cpu backend against NumPy: AllGather+GEMM,
GEMM+ReduceScatter and GEMM+AllToAll, fused, unfused and the planner's pick, both weight
layouts, with and without bias, M that P does not divide; the operand shapes it states; the
errors, naming the argument."""

import numpy as np
import pytest

import tessera

M, N, K = 37, 24, 16


def problem(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (M, K)).astype(np.float32),
            rng.uniform(-1, 1, (K, N)).astype(np.float32),
            rng.uniform(-1, 1, N).astype(np.float32))


def operands(op, rank, size, A, W, bias, layout, rows):
    """This rank's a, b, bias and the NumPy output it must return."""
    begin, count = rows
    full = A.astype(np.float64) @ W + bias
    cols = slice(rank * N // size, (rank + 1) * N // size)
    if op == "ag_gemm":
        a, w, b_ = A[begin:begin + count], W[:, cols], bias[cols]
        want = A.astype(np.float64) @ W[:, cols] + bias[cols]
    elif op == "gemm_rs":
        ks = slice(rank * K // size, (rank + 1) * K // size)
        a, w, b_ = A[:, ks], W[ks], bias
        want = full[begin:begin + count]
    else:  # gemm_a2a
        a, w, b_ = A[begin:begin + count], W, bias
        want = full[:, cols]
    b = w if layout == "kn" else w.T
    return np.ascontiguousarray(a), np.ascontiguousarray(b), np.ascontiguousarray(b_), want


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_a2a"])
@pytest.mark.parametrize("fuse", ["fused", "unfused", "auto"])
def test_operations_match_numpy(size, op, fuse):
    A, W, bias = problem()

    def rank(ctx):
        results = []
        for layout, with_bias in (("nk", True), ("kn", False)):
            layer = tessera.tp.Operation(ctx, op=op, m=M, n=N, k=K, dtype="float32",
                                         weight_layout=layout, bias=with_bias, fuse=fuse)
            assert layer.fused == (fuse == "fused") or fuse == "auto", layer.reason
            a, b, bias_r, want = operands(op, ctx.rank, size, A, W,
                                          bias if with_bias else np.zeros_like(bias), layout,
                                          layer.rows)
            s = layer.shapes
            assert (s["a"], s["b"], s["out"]) == (a.shape, b.shape, want.shape), s
            assert s["bias"] == (bias_r.shape[0] if with_bias else 0)
            out = layer(a, b, bias_r if with_bias else None)
            assert out.dtype == np.float32 and out.shape == want.shape
            given = np.full_like(out, np.nan)
            assert layer(a, b, bias_r if with_bias else None, out=given) is given
            results.append((np.abs(out - want).max(), np.abs(given - want).max(),
                            layer.summary))
        return results

    for errors in tessera.run_cpu_ranks(size, rank):
        for err, err_given, summary in errors:
            assert err <= 1e-4 and err_given <= 1e-4, f"{op} {fuse}: {err} ({summary})"


def test_bad_arguments_name_themselves():
    A, W, bias = problem()

    def rank(ctx):
        with pytest.raises(tessera.InvalidArgumentError, match="op = 'gemm'"):
            tessera.tp.Operation(ctx, op="gemm", m=M, n=N, k=K)
        with pytest.raises(tessera.InvalidArgumentError, match="weight_layout = 'nn'"):
            tessera.tp.Operation(ctx, op="ag_gemm", m=M, n=N, k=K, weight_layout="nn")
        with pytest.raises(tessera.InvalidArgumentError, match="fuse = 'always'"):
            tessera.tp.Operation(ctx, op="ag_gemm", m=M, n=N, k=K, fuse="always")
        with pytest.raises(tessera.InvalidArgumentError, match="out_dtype = 'int8'"):
            tessera.tp.Operation(ctx, op="ag_gemm", m=M, n=N, k=K, out_dtype="int8")
        with pytest.raises(tessera.InvalidArgumentError, match="n"):
            tessera.tp.Operation(ctx, op="ag_gemm", m=M, n=N + 1, k=K)  # N/P not whole
        layer = tessera.tp.Operation(ctx, op="ag_gemm", m=M, n=N, k=K, dtype="float32")
        a, b, _, _ = operands("ag_gemm", ctx.rank, 2, A, W, bias, "nk", layer.rows)
        with pytest.raises(tessera.InvalidArgumentError, match="^tessera rank .: invalid argument: a"):
            layer(a[:, :-1].copy(), b)
        with pytest.raises(tessera.InvalidArgumentError, match="b: dtype float64"):
            layer(a, b.astype(np.float64))
        with pytest.raises(tessera.InvalidArgumentError, match="bias"):
            layer(a, b, bias[:3])  # planned without bias
        with pytest.raises(tessera.InvalidArgumentError, match="out"):
            layer(a, b, out=np.empty((M, 5), np.float32))
        return True

    assert tessera.run_cpu_ranks(2, rank) == [True, True]


def test_an_operation_ends_with_its_context():
    kept = {}

    def rank(ctx):
        kept[ctx.rank] = tessera.tp.Operation(ctx, op="gemm_rs", m=8, n=8, k=8, dtype="float32")
        return kept[ctx.rank].shapes["out"]

    assert tessera.run_cpu_ranks(2, rank) == [(4, 8), (4, 8)]
    with pytest.raises(tessera.InvalidArgumentError, match="rank context has ended"):
        kept[0].shapes


@pytest.mark.skipif("cuda" in tessera.info()["backends"], reason="this build has cuda")
def test_loopback_needs_a_cuda_build():
    with pytest.raises(tessera.UnsupportedError, match="this build has no cuda backend"):
        tessera.tp.Loopback(m=128, n=1024, k=256, ranks=4)
    with pytest.raises(tessera.InvalidArgumentError, match="ranks = 0: expected >= 1"):
        tessera.tp.Loopback(m=128, n=1024, k=256, ranks=0)
