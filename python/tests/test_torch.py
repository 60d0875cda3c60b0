"""PyTorch tensors in and out on the cpu backend, against torch's own SDPA: local attention
(float32, float16, bfloat16, GQA, causal) and sequence-parallel attention on rank threads return
torch tensors of the input dtype; bad torch input raises the same clear errors. Skipped where
torch is not installed (CI has NumPy only; the GPU machine and developers with torch run it)."""

import numpy as np
import pytest

import tessera

torch = pytest.importorskip("torch")


def sdpa(q, k, v, causal=False):
    group = q.shape[2] // k.shape[2]
    q, k, v = (x.double().transpose(1, 2) for x in (q, k.repeat_interleave(group, 2),
                                                     v.repeat_interleave(group, 2)))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)


TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_returns_torch_tensors_matching_sdpa(dtype, causal):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 19, 4, 16, generator=g).to(dtype)
    k, v = (torch.randn(2, 19, 2, 16, generator=g).to(dtype) for _ in range(2))
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True)
    assert isinstance(o, torch.Tensor) and o.dtype == dtype and o.shape == q.shape
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32
    assert (o.double() - sdpa(q, k, v, causal)).abs().max().item() <= TOL[dtype]


def test_out_given_is_filled_and_returned():
    q = k = v = torch.randn(1, 8, 2, 8)
    out = torch.full_like(q, float("nan"))
    assert tessera.attention(q, k, v, out=out) is out
    assert (out.double() - sdpa(q, k, v)).abs().max().item() <= 2e-5


def test_sequence_parallel_attention_with_torch_tensors():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 37, 4, 16, generator=g) for _ in range(3))

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=37, heads=4, head_dim=16, method="usp")
        rows = torch.from_numpy(layer.local_tokens)
        return rows, layer(q[:, rows].contiguous(), k[:, rows].contiguous(), v[:, rows].contiguous())

    full = torch.full_like(q, float("nan"))
    for rows, out in tessera.run_cpu_ranks(4, rank):
        assert isinstance(out, torch.Tensor)
        full[:, rows] = out
    assert (full.double() - sdpa(q, k, v)).abs().max().item() <= 2e-5


def test_bad_torch_input_names_the_argument():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(tessera.InvalidArgumentError, match="k"):
        tessera.attention(q, q[..., ::2], q)  # k: D not unit-stride
    with pytest.raises(tessera.InvalidArgumentError, match="dtype"):
        tessera.attention(q, q.double(), q)
