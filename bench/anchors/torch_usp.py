#!/usr/bin/env python3
"""USP (unified sequence parallelism) in plain torch.distributed: the peer of `tessera bench sp`.

Run under torchrun, one process per GPU:
    torchrun --standalone --nproc_per_node 4 bench/anchors/torch_usp.py \
        --seq 36864 --joint 512 --heads 24 --head-dim 128 --ulysses-degree 2 --json out/usp.json
    (--device cpu runs the same on gloo with the SDPA math path, for testing without a GPU)

What it implements (the design of yunchang's LongContextAttention / xDiT's USP, written here
from that design, not copied):
  * P = ulysses_degree U x ring_degree R ranks. Rank r = g*U + u: the U ranks of ring group g
    (consecutive ranks, yunchang's default "ulysses low" placement, so Ulysses stays inside a
    machine) form one Ulysses group; ranks with the same u form one ring group.
  * The image sequence (L tokens) is split contiguously: rank r holds tokens [r L/P, (r+1) L/P)
    of q, k, v as [B, L/P, H, D].
  * Ulysses (yunchang's SeqAllToAll4D, scatter heads / gather sequence): one all_to_all_single
    each for q, k, v over the Ulysses group turns [B, L/P, H, D] into [B, L/R, H/U, D]: the
    group's L/R tokens for the H/U heads this rank owns.
  * Joint (text) tokens, Flux/MMDiT style: every rank holds all J joint tokens' q, k, v
    [B, J, H, D]. After the all-to-all each rank slices the heads it owns and puts them in front
    of its image tokens (xDiT's joint_strategy "front").
  * Attention: torch SDPA (cuDNN, else flash) over the J + L/R tokens when R = 1. When R > 1,
    ring attention over the ring group (yunchang's "basic" ring): K and V go round the ring with
    batch_isend_irecv while the current chunk is attended; each chunk's attention returns its
    log-sum-exp (aten._scaled_dot_product_cudnn_attention / _flash_attention) and the partial
    outputs are merged in fp32. Joint K/V take part once, on the first ring step.
  * All-to-all back (scatter sequence / gather heads) gives this rank's [B, L/P, H, D] output;
    the joint output of its H/U heads is all-gathered over the Ulysses group so every rank has
    the full [B, J, H, D] joint output.

Measurement, as `tessera bench sp` (tools/tessera/bench_sp.cc): CUDA events around each whole
layer call (all-to-alls, attention, all-to-all back, joint gather), median per rank, slowest
rank reported; TFLOP/s/GPU = 4 B H D (L + J)^2 / P / time (non-causal). Check (--check, on by
default): every rank computes single-GPU SDPA of its own query rows (and the joint queries)
against the whole sequence's K and V from the same seeded inputs; ok when max |diff| <= 2^-6.

Prints on rank 0, per sequence length:
    RESULT usp <case> <median_us> <tflops> <ok> <max_diff>
where <case> is bench_sp's shape label ("B1 L36864 J512 H24 D128 bf16", it has spaces: the
last four fields are the numbers), and writes JSON records (DESIGN.md section 5) with --json.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOLERANCE = 2.0 ** -6  # bench_sp's bound: four bf16 ulps at 1.0
DTYPES = {"bf16": (torch.bfloat16, "bf16"), "fp16": (torch.float16, "f16"),
          "f16": (torch.float16, "f16")}


# ---------------------------------------------------------------------------------------------
# Attention on one rank. Tensors are [B, S, h, D] ("BSHD"); SDPA wants [B, h, S, D] views.

def bhsd(x):
    return x.transpose(1, 2)


def sdpa(q, k, v, backend):
    """Attention without log-sum-exp (the R = 1 path): [B, Sq, h, D] out."""
    with sdpa_kernel([backend]):
        return bhsd(F.scaled_dot_product_attention(bhsd(q), bhsd(k), bhsd(v)))


def _cudnn_takes_compute_lse():
    try:
        schema = torch.ops.aten._scaled_dot_product_cudnn_attention.default._schema
    except (AttributeError, RuntimeError):  # a torch without the op: the probe falls back
        return False
    return "compute_log_sumexp" in [a.name for a in schema.arguments]


_CUDNN_LSE_ARG = _cudnn_takes_compute_lse()


def attention_with_lse(q, k, v, backend):
    """Attention of q over one K/V chunk: (out [B, Sq, h, D] in q's dtype, lse [B, Sq, h] fp32).

    lse is the natural-log log-sum-exp of each query row's scaled scores, what merging partial
    results needs. The aten ops are the kernels F.scaled_dot_product_attention dispatches to.
    """
    qt, kt, vt = bhsd(q), bhsd(k), bhsd(v)
    sq = q.shape[1]
    if backend == SDPBackend.CUDNN_ATTENTION:
        op = torch.ops.aten._scaled_dot_product_cudnn_attention
        # torch >= 2.5: (q, k, v, attn_bias, compute_log_sumexp, ...); older: (q, k, v, ...).
        res = op(qt, kt, vt, None, True) if _CUDNN_LSE_ARG else op(qt, kt, vt)
    elif backend == SDPBackend.FLASH_ATTENTION:
        res = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt)
    else:
        return _math_attention_with_lse(q, k, v)
    out, lse = res[0], res[1]
    if lse.numel() < out.shape[0] * out.shape[1] * sq:
        raise RuntimeError(f"{backend} returned no log-sum-exp (shape {tuple(lse.shape)})")
    # cuDNN gives [B, h, Sq, 1], flash [B, h, Sq]; the slice only guards against padding.
    lse = lse.reshape(out.shape[0], out.shape[1], -1)[:, :, :sq]
    return bhsd(out), lse.float().transpose(1, 2)


def _math_attention_with_lse(q, k, v):
    """Plain torch in fp32: the --device cpu path (the cuDNN and flash ops are cuda-only)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * scale
    lse = torch.logsumexp(scores, dim=-1)                          # [B, h, Sq]
    out = torch.einsum("bhqk,bkhd->bqhd", torch.exp(scores - lse.unsqueeze(-1)), v.float())
    return out.to(q.dtype), lse.transpose(1, 2)


def merge_partial(acc_out, acc_lse, out, lse):
    """Folds one chunk's (out, lse) into the running fp32 (acc_out, acc_lse); returns both."""
    if acc_out is None:
        return out.float(), lse
    new_lse = torch.logaddexp(acc_lse, lse)
    acc_out.mul_(torch.exp(acc_lse - new_lse).unsqueeze(-1))
    acc_out.add_(out.float().mul_(torch.exp(lse - new_lse).unsqueeze(-1)))
    return acc_out, new_lse


# ---------------------------------------------------------------------------------------------
# The USP layer.

class Mesh:
    """This rank's Ulysses and ring groups (rank = ring_index * U + ulysses_index)."""

    def __init__(self, ulysses_degree, ring_degree):
        rank, world = dist.get_rank(), dist.get_world_size()
        assert ulysses_degree * ring_degree == world
        self.U, self.R = ulysses_degree, ring_degree
        self.ring_index, self.ulysses_index = divmod(rank, ulysses_degree)
        # Every rank creates every group, in the same order (new_group is collective).
        self.ulysses_group = self.ring_group = None
        for g in range(ring_degree):
            group = dist.new_group([g * ulysses_degree + u for u in range(ulysses_degree)])
            if g == self.ring_index:
                self.ulysses_group = group
        for u in range(ulysses_degree):
            group = dist.new_group([g * ulysses_degree + u for g in range(ring_degree)])
            if u == self.ulysses_index:
                self.ring_group = group
        ring_ranks = [g * ulysses_degree + self.ulysses_index for g in range(ring_degree)]
        self.ring_next = ring_ranks[(self.ring_index + 1) % ring_degree]
        self.ring_prev = ring_ranks[(self.ring_index - 1) % ring_degree]


def seq_to_heads(x, mesh, front=None):
    """Ulysses all-to-all: [B, S, H, D] (S tokens, all heads) -> [B, F + U*S, H/U, D] (the
    group's U*S tokens, this rank's heads), with `front` [B, F, H/U, D] placed before them.

    Both are written into one buffer, which saves the copy a torch.cat would make."""
    B, S, H, D = x.shape
    U, h = mesh.U, H // mesh.U
    nf = 0 if front is None else front.shape[1]
    if U == 1 and not nf:
        return x
    out = torch.empty(B, nf + U * S, h, D, dtype=x.dtype, device=x.device)
    if nf:
        out[:, :nf].copy_(front)
    if U == 1:
        out[:, nf:].copy_(x)
        return out
    send = x.reshape(B, S, U, h, D).permute(2, 0, 1, 3, 4).contiguous()  # head chunk u -> rank u
    recv = torch.empty_like(send)                                       # [U (source), B, S, h, D]
    dist.all_to_all_single(recv, send, group=mesh.ulysses_group)
    out[:, nf:].view(B, U, S, h, D).copy_(recv.permute(1, 0, 2, 3, 4))
    return out


def heads_to_seq(x, mesh):
    """The inverse all-to-all: [B, U*S, H/U, D] -> [B, S, H, D] (this rank's tokens)."""
    B, US, h, D = x.shape
    U, S = mesh.U, US // mesh.U
    if U == 1:
        return x.contiguous()
    send = x.reshape(B, U, S, h, D).permute(1, 0, 2, 3, 4).contiguous()  # token chunk u -> rank u
    recv = torch.empty_like(send)                                       # [U (head chunk), B, S, h, D]
    dist.all_to_all_single(recv, send, group=mesh.ulysses_group)
    return recv.permute(1, 2, 0, 3, 4).reshape(B, S, U * h, D)


def gather_heads(x, mesh):
    """All-gather over the Ulysses group along heads: [B, J, H/U, D] -> [B, J, H, D]."""
    if mesh.U == 1:
        return x.contiguous()
    B, J, h, D = x.shape
    recv = torch.empty(mesh.U * B, J, h, D, dtype=x.dtype, device=x.device)  # gloo wants dim 0
    dist.all_gather_into_tensor(recv, x.contiguous(), group=mesh.ulysses_group)
    return recv.view(mesh.U, B, J, h, D).permute(1, 2, 0, 3, 4).reshape(B, J, mesh.U * h, D)


def ring_attention(q, k, v, joint_k, joint_v, mesh, backend):
    """q [B, Sq, h, D] over the ring group's K/V chunks [B, Sk, h, D] (and the joint K/V once).

    While chunk i is attended, chunk i+1 is already on its way (batch_isend_irecv)."""
    acc_out = acc_lse = None
    for step in range(mesh.R):
        if step + 1 < mesh.R:
            k_next, v_next = torch.empty_like(k), torch.empty_like(v)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, k, mesh.ring_next, mesh.ring_group),
                dist.P2POp(dist.isend, v, mesh.ring_next, mesh.ring_group),
                dist.P2POp(dist.irecv, k_next, mesh.ring_prev, mesh.ring_group),
                dist.P2POp(dist.irecv, v_next, mesh.ring_prev, mesh.ring_group)])
        kk, vv = k, v
        if step == 0 and joint_k is not None:  # joint tokens attended once
            kk, vv = torch.cat([joint_k, k], dim=1), torch.cat([joint_v, v], dim=1)
        out, lse = attention_with_lse(q, kk, vv, backend)
        acc_out, acc_lse = merge_partial(acc_out, acc_lse, out, lse)
        if step + 1 < mesh.R:
            for r in reqs:
                r.wait()  # NCCL: the current stream waits for the transfers, not the host
            k, v = k_next, v_next
    return acc_out.to(q.dtype)


def usp_attention(q, k, v, joint, mesh, backend):
    """One USP attention layer. q, k, v: this rank's [B, L/P, H, D]; joint: None or the
    (q, k, v) of all J joint tokens [B, J, H, D]. Returns (out [B, L/P, H, D], joint out
    [B, J, H, D] or None)."""
    H = q.shape[2]
    h = H // mesh.U
    heads = slice(mesh.ulysses_index * h, (mesh.ulysses_index + 1) * h)
    J = 0 if joint is None else joint[0].shape[1]
    jq, jk, jv = (None, None, None) if joint is None else (t[:, :, heads] for t in joint)
    qh = seq_to_heads(q, mesh, front=jq)
    if mesh.R == 1:
        kh = seq_to_heads(k, mesh, front=jk)
        vh = seq_to_heads(v, mesh, front=jv)
        oh = sdpa(qh, kh, vh, backend)
    else:
        kh, vh = seq_to_heads(k, mesh), seq_to_heads(v, mesh)  # these circulate: image tokens only
        oh = ring_attention(qh, kh, vh, jk, jv, mesh, backend)
    out = heads_to_seq(oh[:, J:], mesh)
    joint_out = gather_heads(oh[:, :J], mesh) if J else None
    return out, joint_out


# ---------------------------------------------------------------------------------------------
# Benchmark driver.

def pick_backend(requested, device, args, L, mesh):
    """The SDPA backend for this case: cuDNN if it runs this rank's attention shapes, else
    flash; agreed by all ranks (a rank whose probe fails makes everyone use flash). The probe
    runs the kernel alone, so a failure cannot leave a collective half done."""
    if device.type == "cpu":
        return SDPBackend.MATH
    order = {"auto": [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION],
             "cudnn": [SDPBackend.CUDNN_ATTENTION], "flash": [SDPBackend.FLASH_ATTENTION]}[requested]
    dtype, B, h, D = DTYPES[args.dtype][0], args.batch, args.heads // mesh.U, args.head_dim
    q = torch.rand(B, args.joint + L // mesh.R, h, D, device=device).to(dtype)
    kv_rest = torch.rand(B, L // mesh.R, h, D, device=device).to(dtype)  # ring steps after the first
    for backend in order:
        try:
            if mesh.R == 1:
                sdpa(q, q, q, backend)
            else:
                attention_with_lse(q, q, q, backend)
                attention_with_lse(q, kv_rest, kv_rest, backend)
            torch.cuda.synchronize()
            works = 1
        except (RuntimeError, AttributeError, TypeError) as e:  # unsupported shape / op / schema
            print(f"# rank {dist.get_rank()}: {backend} not usable: {str(e).splitlines()[0]}",
                  flush=True)
            works = 0
        flag = torch.tensor([works], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if flag.item():
            return backend
    raise SystemExit(f"torch_usp.py: --attn-backend {requested}: no usable SDPA backend")


def time_us(fn, warmup, iters, device):
    """Median microseconds of fn() on this rank (CUDA events on cuda, wall clock on cpu)."""
    for _ in range(warmup):
        fn()
    dist.barrier()
    if device.type == "cpu":
        samples = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(samples)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))


def max_over_ranks(value, device):
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def make_inputs(args, L, dtype, device):
    """Full q, k, v [B, L, H, D] and joint q, k, v [B, J, H, D], the same on every rank."""
    gen = torch.Generator(device=device).manual_seed(args.seed)

    def uniform(n):
        shape = (args.batch, n, args.heads, args.head_dim)
        return (torch.rand(shape, generator=gen, device=device) * 2 - 1).to(dtype)

    full = [uniform(L) for _ in range(3)]
    joint = [uniform(args.joint) for _ in range(3)] if args.joint else None
    return full, joint


def reference(q_rows, full, joint):
    """Single-device SDPA of this rank's query rows (joint first) over the whole sequence."""
    if joint is not None:
        q_rows = torch.cat([joint[0], q_rows], dim=1)
        k, v = torch.cat([joint[1], full[1]], dim=1), torch.cat([joint[2], full[2]], dim=1)
    else:
        k, v = full[1], full[2]
    return bhsd(F.scaled_dot_product_attention(bhsd(q_rows), bhsd(k), bhsd(v)))


def max_abs_diff(got, want):
    d = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
    return d if math.isfinite(d) else math.inf


def case_label(args, L, dtype_name):
    """tools/tessera/bench_sp.cc's Shape::label() (non-causal, kv heads = heads)."""
    joint = f" J{args.joint}" if args.joint else ""
    return f"B{args.batch} L{L}{joint} H{args.heads} D{args.head_dim} {dtype_name}"


def bench_case(args, L, mesh, device):
    P, rank = dist.get_world_size(), dist.get_rank()
    dtype, dtype_name = DTYPES[args.dtype]
    full, joint = make_inputs(args, L, dtype, device)
    rows = slice(rank * (L // P), (rank + 1) * (L // P))
    q, k, v = (t[:, rows].contiguous() for t in full)
    want = reference(q, full, joint) if args.check else None
    del full  # the layer never sees the whole sequence
    backend = pick_backend(args.attn_backend, device, args, L, mesh)

    def layer():
        return usp_attention(q, k, v, joint, mesh, backend)

    us = max_over_ranks(time_us(layer, args.warmup, args.iters, device), device)
    tflops = 4.0 * args.batch * args.heads * args.head_dim * (L + args.joint) ** 2 / P / (us * 1e-6) / 1e12
    diff = math.nan
    if args.check:
        out, joint_out = layer()
        J = args.joint
        diff = max_abs_diff(out, want[:, J:])
        if J:
            diff = max(diff, max_abs_diff(joint_out, want[:, :J]))
        diff = max_over_ranks(diff, device)
    ok = args.check and diff <= TOLERANCE
    label = case_label(args, L, dtype_name)
    if rank == 0:
        ok_text, diff_text = (str(int(ok)), f"{diff:.3e}") if args.check else ("-", "-")
        print(f"RESULT usp {label} {us:.2f} {tflops:.2f} {ok_text} {diff_text}", flush=True)
    return {"bench": "sp", "case": label, "impl": f"torch-usp ulysses={mesh.U} ring={mesh.R}",
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "num_gpus": P if device.type == "cuda" else 0, "topology": f"1x{P}",
            "median_us": us, "tflops": tflops, "ok": bool(ok),
            "max_diff": diff if args.check else None,
            "attn_backend": {SDPBackend.CUDNN_ATTENTION: "cudnn", SDPBackend.FLASH_ATTENTION: "flash",
                             SDPBackend.MATH: "math"}[backend],
            "torch": torch.__version__, "commit": commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


def commit():
    c = os.environ.get("TESSERA_COMMIT")
    if c:
        return c
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL).strip() or "unknown"
    except Exception:
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Arguments.

def parse_args(world):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", default="16384", help="comma list of image sequence lengths L")
    ap.add_argument("--heads", type=int, default=24, help="heads H")
    ap.add_argument("--head-dim", type=int, default=128, help="head dim D")
    ap.add_argument("--joint", type=int, default=0, help="replicated joint (text) tokens J in front")
    ap.add_argument("--batch", type=int, default=1, help="batch B")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--warmup", type=int, default=3, help="untimed layer calls per case")
    ap.add_argument("--iters", type=int, default=10, help="timed layer calls per case (median)")
    ap.add_argument("--ulysses-degree", type=int, default=None, help="U (default: world / R)")
    ap.add_argument("--ring-degree", type=int, default=None, help="R (default: world / U)")
    ap.add_argument("--attn-backend", default="auto", choices=["auto", "cudnn", "flash"],
                    help="SDPA kernel on cuda (auto: cuDNN, else flash)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                    help="compare with single-device SDPA over the whole sequence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cuda (NCCL) or cpu (gloo, SDPA math path; for testing)")
    ap.add_argument("--json", default="", help="write the records to this JSON file (rank 0)")
    args = ap.parse_args()

    try:
        args.seqs = [int(s) for s in args.seq.split(",")]
    except ValueError:
        ap.error(f"argument --seq: '{args.seq}': expected a comma list of positive integers")
    for name in ("heads", "head_dim", "batch", "iters"):
        if getattr(args, name) < 1:
            ap.error(f"argument --{name.replace('_', '-')}: {getattr(args, name)}: expected >= 1")
    for name in ("joint", "warmup"):
        if getattr(args, name) < 0:
            ap.error(f"argument --{name}: {getattr(args, name)}: expected >= 0")
    U, R = args.ulysses_degree, args.ring_degree
    for name, d in (("--ulysses-degree", U), ("--ring-degree", R)):
        if d is not None and (d < 1 or world % d):
            ap.error(f"argument {name}: {d}: expected a divisor of the world size {world}")
    U = U if U is not None else (world // R if R is not None else world)
    R = R if R is not None else world // U
    if U * R != world:
        ap.error(f"arguments --ulysses-degree {U} x --ring-degree {R} = {U * R}: "
                 f"expected the world size {world}")
    if args.heads % U:
        ap.error(f"argument --heads: {args.heads}: expected a multiple of --ulysses-degree {U} "
                 f"(Ulysses splits the heads over its group)")
    for L in args.seqs:
        if L < 1 or L % world:
            ap.error(f"argument --seq: {L}: expected a positive multiple of the world size {world} "
                     f"(the image tokens are split contiguously and evenly over the ranks)")
    args.ulysses_degree, args.ring_degree = U, R
    return args


def main():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = parse_args(world)
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    mesh = Mesh(args.ulysses_degree, args.ring_degree)
    if dist.get_rank() == 0:
        where = (f"cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(device)}"
                 if device.type == "cuda" else "cpu (gloo)")
        print(f"# torch {torch.__version__}, {where}, {world} ranks, "
              f"ulysses={mesh.U} ring={mesh.R}", flush=True)
    records = []
    for L in args.seqs:
        records.append(bench_case(args, L, mesh, device))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    failed = sum(1 for r in records if args.check and not r["ok"])
    if dist.get_rank() == 0:
        print(f"# wrong cases: {failed}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
