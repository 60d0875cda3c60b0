#!/usr/bin/env python3
"""What a Python call to Tessera costs over the C++ call it makes (issue 15's budget: 10 us).

    python3 bench/python_overhead.py --json $OUT/python_overhead.json

The same local attention call (torch bf16 tensors on cuda:0, B1 L128 H8 D128, non-causal) is
enqueued `--calls` times in a row, host time only (the launches are asynchronous; the GPU is
synchronized between rounds, and --calls stays below the launch queue's depth so the host
never waits for the GPU inside a round):
  cpp:             from C++, attn::forward on the same arrays (tessera._C._testing);
  python:          tessera.attention(q, k, v, out=out, stream=handle), out and stream given;
  python defaults: tessera.attention(q, k, v), out from torch.empty_like, torch's current
                   stream (what most callers write);
  _C __dlpack__:   tessera._C.attention(q, k, v, out=out, stream=handle), the extension called
                   with the tensors themselves: nanobind imports each through the protocol
                   method __dlpack__ (the package passes torch's C exporter's capsules instead);
  torch sdpa:      torch.nn.functional.scaled_dot_product_attention on the same tensors, for
                   scale (a framework call of the same kind).
Median over --rounds of the per-call mean. Records as bench `python` (case "attention b1 l128
h8 d128", impls above, median_us per call); overhead_us = python - cpp is printed last.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import time

import torch

import tessera


def per_call_us(fn, calls, rounds):
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(calls)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples), min(samples), max(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", help="write the records to this file")
    args = parser.parse_args()

    device = torch.device("cuda", 0)
    q, k, v = (torch.randn(1, 128, 8, 128, device=device, dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    stream = torch.cuda.current_stream(device).cuda_stream
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def cpp(n):
        tessera._C._testing.time_attention_calls(q, k, v, out, n, stream)

    def python(n):
        for _ in range(n):
            tessera.attention(q, k, v, out=out, stream=stream)

    def python_defaults(n):
        for _ in range(n):
            tessera.attention(q, k, v)

    def c_dlpack(n):
        for _ in range(n):
            tessera._C.attention(q, k, v, out=out, stream=stream)

    def sdpa(n):
        for _ in range(n):
            torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)

    impls = [("cpp", cpp), ("python", python), ("python defaults", python_defaults),
             ("_C __dlpack__", c_dlpack), ("torch sdpa", sdpa)]
    for _, fn in impls:  # warm up: kernels loaded, allocator primed
        per_call_us(fn, 50, 2)
    commit = os.environ.get("TESSERA_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    records, medians = [], {}
    print(f"{'impl':<18}{'median_us':>10}{'min_us':>9}{'max_us':>9}  per call, host")
    for name, fn in impls:
        median, low, high = per_call_us(fn, args.calls, args.rounds)
        medians[name] = median
        print(f"{name:<18}{median:>10.2f}{low:>9.2f}{high:>9.2f}")
        records.append({"bench": "python", "case": "attention b1 l128 h8 d128", "impl": name,
                        "gpu": torch.cuda.get_device_name(device), "num_gpus": 1,
                        "topology": "1", "median_us": round(median, 3), "min_us": round(low, 3),
                        "max_us": round(high, 3), "ok": True, "commit": commit or "unknown",
                        "date": datetime.date.today().isoformat(),
                        "note": f"host time per call, {args.calls} calls x {args.rounds} rounds"})
    print(f"overhead_us python - cpp: {medians['python'] - medians['cpp']:.2f} "
          f"(defaults: {medians['python defaults'] - medians['cpp']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
