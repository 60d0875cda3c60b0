#!/usr/bin/env python3
"""torch.distributed (NCCL) measured the way `tessera bench comm` measures Tessera.

Run under torchrun, one process per GPU:
    torchrun --nproc_per_node 4 bench/anchors/torch_comm.py --json out/torch_comm.json

Same conventions as tessera: int32 inputs encoding (rank, index), sizes = each rank's larger
buffer (nccl-tests), an event pair around every iteration, median per rank, slowest rank
reported, every output element checked. busbw = algbw * (n-1)/n for the collectives.
"""
import argparse
import datetime
import json
import os
import subprocess

import torch
import torch.distributed as dist


def encode(rank, idx):
    # (rank << 26) ^ (idx * 2654435761) in uint32, viewed as int32; matches tessera.
    v = (idx.to(torch.int64) * 2654435761) & 0xFFFFFFFF
    v = v ^ ((rank << 26) & 0xFFFFFFFF)
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def summand(rank, idx):
    return ((rank + 1) * (idx % 1000 + 1)).to(torch.int32)


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    dist.barrier()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))
    return us[len(us) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1M,4M,16M,64M,256M")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)

    def parse(s):
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)

    records = []
    factor = (n - 1) / n
    for op in ["all_to_all", "all_gather", "reduce_scatter", "sendrecv"]:
        for size in [parse(s) for s in args.sizes.split(",")]:
            elems = size // 4 // n * n
            block = elems // n
            if op == "all_to_all":
                src = encode(rank, torch.arange(elems, device=dev))
                dst = torch.empty_like(src)
                fn = lambda: dist.all_to_all_single(dst, src)
                i = torch.arange(elems, device=dev)
                expect = encode_vec(i // block, rank * block + i % block)
                out, nbytes, bus = dst, elems * 4, factor
            elif op == "all_gather":
                src = encode(rank, torch.arange(block, device=dev))
                dst = torch.empty(elems, dtype=torch.int32, device=dev)
                fn = lambda: dist.all_gather_into_tensor(dst, src)
                i = torch.arange(elems, device=dev)
                expect = encode_vec(i // block, i % block)
                out, nbytes, bus = dst, elems * 4, factor
            elif op == "reduce_scatter":
                src = summand(rank, torch.arange(elems, device=dev))
                dst = torch.empty(block, dtype=torch.int32, device=dev)
                fn = lambda: dist.reduce_scatter_tensor(dst, src)
                i = torch.arange(block, device=dev)
                expect = (n * (n + 1) // 2 * ((rank * block + i) % 1000 + 1)).to(torch.int32)
                out, nbytes, bus = dst, elems * 4, factor
            else:
                to, frm = (rank + 1) % n, (rank - 1) % n
                e = size // 4
                src = encode(rank, torch.arange(e, device=dev))
                dst = torch.empty_like(src)

                def fn():
                    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, src, to), dist.P2POp(dist.irecv, dst, frm)])
                    for r in reqs:
                        r.wait()

                expect = encode(frm, torch.arange(e, device=dev))
                out, nbytes, bus = dst, e * 4, 1.0
            med = timed(fn, args.warmup, args.iters)
            wrong = torch.tensor([int((out != expect).sum().item())], device=dev, dtype=torch.int64)
            t = torch.tensor([med], device=dev, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            dist.all_reduce(wrong)
            med = t.item()
            algbw = nbytes / (med * 1e3)
            label = "ring" if op == "sendrecv" else "world"
            if rank == 0:
                print(f"  {op:15s} torch.distributed {label:6s} {fmt(nbytes):>6s} {med:12.1f} us "
                      f"algbw {algbw:8.2f} busbw {algbw * bus:8.2f} GB/s  #wrong {int(wrong.item())}", flush=True)
            records.append({
                "bench": "comm", "case": f"{op} {'intra' if op == 'sendrecv' else 'world'} {fmt(nbytes)}",
                "impl": "torch.distributed nccl", "gpu": torch.cuda.get_device_name(dev), "num_gpus": n,
                "topology": f"1x{n}", "median_us": med, "gbps": algbw, "ok": int(wrong.item()) == 0,
                "busbw_gbps": algbw * bus, "bytes": nbytes, "wrong": int(wrong.item()), "op": op,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())), "commit": commit(),
                "date": datetime.date.today().isoformat()})
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    dist.destroy_process_group()


def encode_vec(ranks, idx):
    v = (idx.to(torch.int64) * 2654435761) & 0xFFFFFFFF
    v = v ^ ((ranks.to(torch.int64) << 26) & 0xFFFFFFFF)
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def fmt(b):
    for unit, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b % s == 0:
            return f"{b // s}{unit}"
    return f"{b}B"


def commit():
    c = os.environ.get("TESSERA_COMMIT")
    if c:
        return c
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    except Exception:
        return "unknown"


if __name__ == "__main__":
    main()
