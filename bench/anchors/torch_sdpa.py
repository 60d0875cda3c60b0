#!/usr/bin/env python3
"""torch SDPA (cuDNN and flash backends) on the inputs `tessera bench attn` uses.

Case names and the input generator follow tools/tessera/bench_attn.cc (keep them in step):
  b<B>_h<Hq>[_kv<Hkv>]_d<D>_l<L>[_causal][_fp16]; element e of q/k/v (contiguous [B, L, H, D])
  is mix32(e + seed*0x9E3779B1 + tensor*0x85EBCA77) >> 8, scaled to [-1, 1) and rounded to the
  dtype, so both sides see the same bits (each prints a checksum of the first 4096 elements).
Inputs are transposed to SDPA's [B, H, L, D] (contiguous) outside the timed region. Timing:
CUDA events around each call, median; FLOPs = 4 B Hq D L^2, halved for causal. Correctness:
sampled query rows (batch 0, first and last head) against a float32 computation.

Prints one line per (case, backend):  RESULT <case> <cudnn|flash> <median_us> <tflops> <ok> <checksum>
and writes the same as JSON records (DESIGN.md section 5) with --json.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

MASK32 = 0xFFFFFFFF


def parse_case(name):
    case = {"name": name, "b": 1, "hq": 1, "hkv": None, "d": 128, "l": 1, "causal": False,
            "dtype": torch.bfloat16, "fold": 0}
    for part in name.split("_"):
        if part == "causal":
            case["causal"] = True
        elif part in ("fp16", "f16"):
            case["dtype"] = torch.float16
        elif part == "bf16":
            case["dtype"] = torch.bfloat16
        elif part.startswith("fold"):
            case["fold"] = int(part[4:])
        elif part.startswith("kv"):
            case["hkv"] = int(part[2:])
        elif part[0] in "bhdl":
            case[{"b": "b", "h": "hq", "d": "d", "l": "l"}[part[0]]] = int(part[1:])
        else:
            raise SystemExit(f"torch_sdpa.py: unknown case part '{part}' in '{name}'")
    if case["hkv"] is None:
        case["hkv"] = case["hq"]
    return case


def mix32(x):
    # x: int64 tensor holding values < 2**32; every product stays below 2**59.
    x = x ^ (x >> 16)
    x = (x * 0x045D9F3B) & MASK32
    x = x ^ (x >> 16)
    x = (x * 0x045D9F3B) & MASK32
    return x ^ (x >> 16)


def make_input(shape, dtype, seed, tensor, device):
    n = math.prod(shape)
    offset = (seed * 0x9E3779B1 + tensor * 0x85EBCA77) & MASK32
    out = torch.empty(n, dtype=dtype, device=device)
    step = 1 << 26
    for start in range(0, n, step):
        idx = torch.arange(start, min(n, start + step), dtype=torch.int64, device=device)
        h = mix32((idx + offset) & MASK32)
        out[start:start + idx.numel()] = ((h >> 8).to(torch.float32) * (1.0 / 8388608.0) - 1.0).to(dtype)
    return out.view(shape)


def checksum(*tensors):
    return sum(float(t.reshape(-1)[:4096].double().sum()) for t in tensors)


def time_us(fn, warmup, min_iters, target_ms):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        fn()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    once = max(1e-3, start.elapsed_time(stop))
    iters = min(500, max(min_iters, int(target_ms / once)))
    samples = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0)
    samples.sort()
    mid = len(samples) // 2
    return samples[mid] if len(samples) % 2 else 0.5 * (samples[mid - 1] + samples[mid])


def check_rows(case, q, k, v, out, rows):
    """max |out - f32| over sampled rows of batch 0, heads 0 and Hq-1; out is [B, H, L, D]."""
    L, D = case["l"], case["d"]
    group = case["hq"] // case["hkv"]
    worst = 0.0
    for s in range(rows):
        row = L - 1 if rows == 1 else (L - 1) * s // (rows - 1)
        for h in (0, case["hq"] - 1):
            keys = row + 1 if case["causal"] else L
            qf = q[0, row, h].float()
            kf = k[0, :keys, h // group].float()
            vf = v[0, :keys, h // group].float()
            p = torch.softmax((kf @ qf) / math.sqrt(D), dim=0)
            ref = p @ vf
            worst = max(worst, float((out[0, h, row].float() - ref).abs().max()))
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-iters", type=int, default=10)
    ap.add_argument("--target-ms", type=float, default=400.0)
    ap.add_argument("--check-rows", type=int, default=4)
    ap.add_argument("--backends", default="cudnn,flash")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    device = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    commit = os.environ.get("TESSERA_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print(f"# torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {gpu}", flush=True)
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    records = []
    for name in args.cases.split(","):
        case = parse_case(name)
        if case["fold"]:
            continue
        B, Hq, Hkv, D, L = case["b"], case["hq"], case["hkv"], case["d"], case["l"]
        q = make_input((B, L, Hq, D), case["dtype"], args.seed, 0, device)
        k = make_input((B, L, Hkv, D), case["dtype"], args.seed, 1, device)
        v = make_input((B, L, Hkv, D), case["dtype"], args.seed, 2, device)
        sums = checksum(q, k, v)
        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        flops = 4.0 * B * Hq * D * L * L / (2 if case["causal"] else 1)
        for bname in args.backends.split(","):
            note = ""
            kk, vv, gqa = kt, vt, Hq != Hkv

            def call():
                return F.scaled_dot_product_attention(qt, kk, vv, is_causal=case["causal"], enable_gqa=gqa)

            try:
                with sdpa_kernel([backends[bname]]):
                    out = call()
                    torch.cuda.synchronize()
            except RuntimeError as e:
                if not gqa:
                    print(f"# {name} {bname}: not available: {str(e).splitlines()[0]}", flush=True)
                    continue
                # This backend takes no GQA: give it K/V repeated per query head (not timed).
                kk = kt.repeat_interleave(Hq // Hkv, dim=1)
                vv = vt.repeat_interleave(Hq // Hkv, dim=1)
                gqa = False
                note = "kv expanded"
                try:
                    with sdpa_kernel([backends[bname]]):
                        out = call()
                        torch.cuda.synchronize()
                except RuntimeError as e2:
                    print(f"# {name} {bname}: not available: {str(e2).splitlines()[0]}", flush=True)
                    continue
            with sdpa_kernel([backends[bname]]):
                us = time_us(call, args.warmup, args.min_iters, args.target_ms)
            err = check_rows(case, q, k, v, out, args.check_rows)
            ok = err <= 2e-2
            tflops = flops / (us * 1e-6) / 1e12
            print(f"RESULT {name} {bname} {us:.2f} {tflops:.2f} {int(ok)} {sums:.9g}", flush=True)
            if note:
                print(f"# {name} {bname}: {note}", flush=True)
            records.append({"bench": "attn", "case": name, "impl": f"torch sdpa {bname}", "gpu": gpu,
                            "num_gpus": 1, "topology": "1x1", "median_us": us, "tflops": tflops,
                            "ok": ok, "max_err": err, "input_checksum": sums, "note": note,
                            "commit": commit, "date": date})
            del out
        del q, k, v, qt, kt, vt
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
