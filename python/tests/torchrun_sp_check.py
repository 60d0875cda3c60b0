"""Sequence-parallel attention from Python under torchrun: every process is a rank on GPU
LOCAL_RANK (tessera.cuda_context reads torchrun's variables), runs every method on its shards
of one causal GQA sequence with joint tokens, and checks its rows against torch's SDPA over the
whole sequence (FlashAttention-3's rule: within twice torch's own bf16 error plus the output
rounding). Not a pytest file: scripts/gpu_python.sh runs it on machines with several GPUs.

    torchrun --standalone --nproc-per-node 4 python/tests/torchrun_sp_check.py

Exits 1 when any rank's rows are off, after every method ran.
"""
import os
import sys

import torch

import tessera

METHODS = ["ring", "ulysses", "usp", "tas", "torus", "mesh", "auto"]


def sdpa(q, k, v, dtype):
    group = q.shape[2] // k.shape[2]
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k.repeat_interleave(group, 2),
                                                     v.repeat_interleave(group, 2)))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    J, L, H, Hkv, D = 77, 4093, 8, 2, 128
    g = torch.Generator(device="cuda").manual_seed(0)  # the same sequence on every rank
    q, k, v = (torch.randn(1, J + L, h, D, generator=g, device="cuda").bfloat16()
               for h in (H, Hkv, Hkv))
    want = sdpa(q, k, v, torch.float32)
    own = (sdpa(q, k, v, torch.bfloat16).float() - want).abs()
    failures = 0
    with tessera.cuda_context() as ctx:
        assert ctx.size == int(os.environ["WORLD_SIZE"]), (ctx.size, os.environ["WORLD_SIZE"])
        for method in METHODS:
            try:
                layer = tessera.sp.Attention(ctx, seq_len=L, heads=H, kv_heads=Hkv, head_dim=D,
                                             dtype="bfloat16", joint_tokens=J, causal=True,
                                             method=method)
            except tessera.UnsupportedError as e:
                print(f"rank {ctx.rank} {method}: not applicable: {e}", flush=True)
                continue
            rows = torch.from_numpy(layer.local_tokens).cuda() + J
            out, joint_out = layer(q[:, rows], k[:, rows], v[:, rows],
                                   joint_q=q[:, :J].contiguous(), joint_k=k[:, :J].contiguous(),
                                   joint_v=v[:, :J].contiguous())
            torch.cuda.synchronize()
            mine = torch.cat([rows.new_tensor(range(J)), rows])
            got = torch.cat([joint_out, out], dim=1).float()
            ref = want[:, mine]
            err = (got - ref).abs().max().item()
            bound = (2 * own[:, mine].max() + (ref.bfloat16().float() - ref).abs().max()).item()
            ok = err <= bound + 1e-6
            failures += not ok
            print(f"rank {ctx.rank}/{ctx.size} {method} [{layer.summary}]: max error {err:.3g} "
                  f"(bound {bound:.3g}) {'ok' if ok else 'WRONG'}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
