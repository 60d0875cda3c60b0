#!/usr/bin/env python3
"""Tensor-parallel GEMMs in PyTorch: the peer of `tessera bench tp` (tools/tessera/bench_tp.cc).

    torchrun --standalone --nproc_per_node 4 bench/anchors/torch_tp.py \
        --model llama3-70b --tokens 128,1024,4096 --json out/torch_tp.json

Shapes and semantics as src/tp/model_shapes.cc and include/tessera/tp/request.h (bf16, P ranks):
  ag_gemm (qkv, mlp_up):        a [M/P, K] rows, w [N/P, K] -> [M, N/P] = allgather_rows(a) @ w^T
  gemm_rs (attn_out, mlp_down): a [M, K/P], w [N, K/P] -> [M/P, N], its rows of sum_ranks(a @ w^T)
Impls: "torch matmul+nccl" (NCCL all-gather / reduce-scatter and F.linear), "torch symm-mem fused"
(torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter, what async TP lowers
to), "torch symm-mem native" (that AG op with TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP, i.e. the
_async_input_mm kernel, only where torch takes it) and "torch matmul" (the GEMM alone on this
rank's shapes; effective_comm_us = median_us - its time). Inputs are seeded by (case, operand,
rank), so every rank rebuilds all shards for a float32 reference: ok when max |diff| / max |ref|
<= 2e-2. Event pair per iteration after barrier + synchronize, median per rank, slowest rank
reported; TFLOP/s = 2 M N K / P / time. A symm-mem impl that fails gets ok false and "error".
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import warnings
import zlib

# Multicast (NVLS) must stay off on these machines: set before torch.distributed reads it.
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ["NCCL_NVLS_ENABLE"] = "0"
# "fused" is symm-mem's pipelined decomposition; the native kernel is measured on its own.
NATIVE_ENV = "TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP"
os.environ.pop(NATIVE_ENV, None)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:  # registers the torch.ops.symm_mem ops
    import torch.distributed._symmetric_memory as symm_mem
    SYMM_MEM_ERROR = None
except Exception as e:  # noqa: BLE001  (a torch without it: fused impls record the error)
    symm_mem, SYMM_MEM_ERROR = None, f"import torch.distributed._symmetric_memory: {e}"

TOLERANCE = 2e-2
LAYERS = {  # src/tp/model_shapes.cc: (layer, op, N, K)
    "llama3-70b": [("qkv", "ag_gemm", (64 + 2 * 8) * 128, 8192), ("attn_out", "gemm_rs", 8192, 8192),
                   ("mlp_up", "ag_gemm", 2 * 28672, 8192), ("mlp_down", "gemm_rs", 8192, 28672)],
    "gpt3-175b": [("qkv", "ag_gemm", 3 * 12288, 12288), ("attn_out", "gemm_rs", 12288, 12288),
                  ("mlp_up", "ag_gemm", 49152, 12288), ("mlp_down", "gemm_rs", 12288, 49152)],
}
UNFUSED, FUSED = "torch matmul+nccl", "torch symm-mem fused"
NATIVE, GEMM = "torch symm-mem native", "torch matmul"
IMPLS = {"unfused": UNFUSED, "fused": FUSED, "native": NATIVE, "gemm": GEMM}


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        # As tessera bench tp: every iteration starts together after a barrier, so neither
        # side hides launch latency or rank skew behind the previous iteration.
        dist.barrier()
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))
    return us[len(us) // 2]


def max_over_ranks(value, dev):
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def measure(fn, want, args, dev):
    """(slowest rank's median us, max relative diff over ranks, error text or None)."""
    err = None
    try:  # probe: a missing op or an unsupported shape fails here, before any timing
        fn()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    flag = torch.tensor([0 if err else 1], device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # all ranks skip together, or none does
    if not flag.item():
        return None, None, err or "failed on another rank"
    us = max_over_ranks(timed(fn, args.warmup, args.iters), dev)
    diff = ((fn().float() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    return us, max_over_ranks(diff if math.isfinite(diff) else math.inf, dev), None


def native_applies(a, b, group_name):
    """Whether the op would take the native kernel here: elsewhere it silently runs the
    decomposition (the predicate is private; a torch without it gets no native record)."""
    pred = getattr(symm_mem, "_should_use_fused_all_gather_matmul_native", None)
    os.environ[NATIVE_ENV] = "1"
    try:
        return bool(pred and pred(a, [b], 0, group_name))
    except Exception:  # noqa: BLE001
        return False
    finally:
        os.environ.pop(NATIVE_ENV, None)


def symmetric_copy(t, group_name):
    """t in symmetric memory (else the native path copies it into its workspace, with a
    warning per call); t itself where this torch cannot allocate it."""
    try:
        s = symm_mem.empty(t.shape, dtype=t.dtype, device=t.device)
        s.copy_(t)
        symm_mem.rendezvous(s, group_name)
        return s
    except Exception:  # noqa: BLE001
        return t


def bench_case(model, layer, op, n, k, m, args, dev, group_name, symm_error):
    P, rank = dist.get_world_size(), dist.get_rank()
    ag, rows = op == "ag_gemm", m // P

    def operand(tag, r, shape):
        g = torch.Generator(device=dev)
        g.manual_seed(zlib.crc32(f"{model} {layer} M{m} {tag} rank{r}".encode()))
        return (torch.rand(shape, generator=g, device=dev) * 2 - 1).to(torch.bfloat16)

    a_shape, w_shape = ((rows, k), (n // P, k)) if ag else ((m, k // P), (n, k // P))
    a, w = operand("A", rank, a_shape), operand("W", rank, w_shape)
    # References: float32 products of every rank's shards, rebuilt here (no communication).
    if ag:
        a_full = torch.cat([operand("A", r, a_shape) for r in range(P)])
        want = gemm_want = a_full.float() @ w.float().t()
        gemm_a, gathered = a_full, torch.empty(m, k, dtype=a.dtype, device=dev)

        def unfused():
            dist.all_gather_into_tensor(gathered, a)
            return F.linear(gathered, w)

        def fused():  # returns (gathered A, [A @ B for B in Bs])
            return torch.ops.symm_mem.fused_all_gather_matmul(
                a, [w.t()], gather_dim=0, group_name=group_name)[1][0]
    else:
        mine = slice(rank * rows, (rank + 1) * rows)
        want = sum(operand("A", r, a_shape)[mine].float() @ operand("W", r, w_shape).float().t()
                   for r in range(P))
        gemm_a, gemm_want = a, a.float() @ w.float().t()
        out = torch.empty(rows, n, dtype=a.dtype, device=dev)

        def unfused():
            dist.reduce_scatter_tensor(out, F.linear(a, w))
            return out

        def fused():
            return torch.ops.symm_mem.fused_matmul_reduce_scatter(
                a, w.t(), "sum", scatter_dim=0, group_name=group_name)

    results = {}
    if "unfused" in args.impls:
        results[UNFUSED] = measure(unfused, want, args, dev)
    if "gemm" in args.impls:
        results[GEMM] = measure(lambda: F.linear(gemm_a, w), gemm_want, args, dev)
    if "fused" in args.impls:
        results[FUSED] = (None, None, symm_error) if symm_error else measure(fused, want, args, dev)
    if "native" in args.impls and ag and not symm_error and native_applies(a, w.t(), group_name):
        a = symmetric_copy(a, group_name)  # the native kernel reads A_shard in place from peers
        os.environ[NATIVE_ENV] = "1"  # read by the op at every call
        try:
            results[NATIVE] = measure(fused, want, args, dev)
        finally:
            os.environ.pop(NATIVE_ENV, None)

    name = f"{op} {model} {layer} tp{P} M{m}"
    gemm_us, unfused_us = results.get(GEMM, (None,))[0], results.get(UNFUSED, (None,))[0]
    records = []
    for impl in (UNFUSED, FUSED, NATIVE, GEMM):
        if impl not in results:
            continue
        us, diff, err = results[impl]
        rec = {"bench": "tp", "case": name, "impl": impl, "gpu": torch.cuda.get_device_name(dev),
               "num_gpus": P, "topology": f"1x{P}",
               # 0 rather than null for a failed impl: bench/report.py formats these numbers.
               "median_us": us or 0.0, "tflops": 2.0 * m * n * k / P / (us * 1e-6) / 1e12 if us else 0.0,
               "ok": err is None and diff <= TOLERANCE,
               "max_rel_diff": diff if diff is not None and math.isfinite(diff) else None,
               "op": op, "m": m, "n": n, "k": k}
        if impl == GEMM:
            rec["gemm_only"] = True  # no communication: not an anchor for the TP op
        elif us and gemm_us:
            rec["gemm_alone_us"] = gemm_us
            rec["effective_comm_us"] = us - gemm_us
            if impl != UNFUSED and unfused_us and unfused_us > gemm_us:
                rec["overlap_efficiency"] = (unfused_us - us) / (unfused_us - gemm_us)
        if err:
            rec["error"] = err
        rec.update({"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                    "commit": commit(),
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")})
        records.append(rec)
        if rank == 0:
            comm, ovl = rec.get("effective_comm_us"), rec.get("overlap_efficiency")
            comm, ovl = "-" if comm is None else f"{comm:.1f}", "-" if ovl is None else f"{ovl:.2f}"
            print(f"  {name:40s} {impl:22s} {m:6d} {us or math.nan:11.1f} {rec['tflops']:9.2f} "
                  f"{comm:>9s} {ovl:>8s} {'yes' if rec['ok'] else 'NO'}{'  ' + err if err else ''}",
                  flush=True)
    return records


def commit():
    c = os.environ.get("TESSERA_COMMIT")
    if c:
        return c
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL).strip() or "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def parse_args(world):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-70b", choices=["llama3-70b", "gpt3-175b", "all"])
    ap.add_argument("--layers", default="", help="comma list of qkv, attn_out, mlp_up, mlp_down")
    # --tokens: torchrun's own parser rejects "--m" after the script as an ambiguous prefix.
    ap.add_argument("--tokens", "--m", dest="m", default="128,1024,4096",
                    help="comma list of token counts M, multiples of P (tessera's --m)")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ", ".join(IMPLS))
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations per impl")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations per impl (median)")
    ap.add_argument("--json", default="", help="write the records to this JSON file (rank 0)")
    args = ap.parse_args()
    args.ms = [int(s) for s in args.m.split(",") if s.strip().isdigit()]
    if len(args.ms) != len(args.m.split(",")) or any(m < 1 or m % world for m in args.ms):
        ap.error(f"argument --tokens: '{args.m}': expected positive multiples of the world size {world} "
                 f"(every rank holds M/P rows; uneven shares are not supported here)")
    args.impls = [s for s in args.impls.split(",") if s]
    if set(args.impls) - set(IMPLS):
        ap.error(f"argument --impls: '{','.join(args.impls)}': expected " + ", ".join(IMPLS))
    models = list(LAYERS) if args.model == "all" else [args.model]
    wanted = [s for s in args.layers.split(",") if s]
    if set(wanted) - {"qkv", "attn_out", "mlp_up", "mlp_down"}:
        ap.error(f"argument --layers: '{args.layers}': expected qkv, attn_out, mlp_up or mlp_down")
    args.cases = [(model, *shape) for model in models for shape in LAYERS[model]
                  if not wanted or shape[0] in wanted]
    for model, layer, op, n, k in args.cases:
        if (n if op == "ag_gemm" else k) % world:
            ap.error(f"{model} {layer}: {'N' if op == 'ag_gemm' else 'K'} is not a multiple of "
                     f"{world} ranks")
    if args.iters < 1 or args.warmup < 0:
        ap.error("expected --iters >= 1 and --warmup >= 0")
    return args


def main():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = parse_args(world)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    group_name = dist.group.WORLD.group_name
    symm_error = SYMM_MEM_ERROR
    if symm_mem is not None and hasattr(symm_mem, "enable_symm_mem_for_group"):
        try:  # older torch needs it; newer torch deprecates it as unneeded
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(group_name)
        except Exception as e:  # noqa: BLE001
            symm_error = f"enable_symm_mem_for_group: {e}"
    if dist.get_rank() == 0:
        print(f"# torch_tp.py: {world} ranks, 1x{world}, torch {torch.__version__}, "
              f"{torch.cuda.get_device_name(dev)}\n# {'case':40s} {'impl':22s} {'M':>6s} "
              f"{'median_us':>11s} {'TFLOP/s':>9s} {'comm_us':>9s} {'overlap':>8s} ok", flush=True)
    records = []
    for model, layer, op, n, k in args.cases:
        for m in args.ms:
            records += bench_case(model, layer, op, n, k, m, args, dev, group_name, symm_error)
            torch.cuda.empty_cache()
    failed = sum(1 for r in records if not r["ok"])
    if dist.get_rank() == 0:
        print(f"# {len(records)} cases, #failed {failed}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
