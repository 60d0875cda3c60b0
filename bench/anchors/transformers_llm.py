#!/usr/bin/env python3
"""transformers' LlamaForCausalLM with a static KV cache: the peer of `tessera run llm`'s timing
(tools/tessera/run_llm.cc).

    python3 bench/anchors/transformers_llm.py --json $OUT/transformers_llm.json --compile
    python3 bench/anchors/transformers_llm.py --device cpu --config tiny --batch 2 \\
        --prompt-len 32 --gen 8                                   (a smoke test without a GPU)

Model: --config llama3-8b (Llama-3-8B's dimensions, Llama 3.1 RoPE scaling) or tiny (run_llm.cc's
tiny preset), --layers cuts the stack; random weights (transformers' initialisation, drawn on
the device in bf16 on cuda, float32 on the cpu), SDPA attention, a StaticCache sized to
prompt + gen tokens. Per batch size B of --batch: B random prompts of --prompt-len L tokens.
  prefill: one forward of B x L tokens filling the emptied cache (only the last position's
           logits, as generate() does), median of --iters after --warmup;
  decode:  after a prefill, gen - 1 steps of one token per sequence (forward + greedy argmax,
           as tessera's loop), median per step; --compile also times the step as
           torch.compile(mode="reduce-overhead") (CUDA graphs over the static cache), the usual
           fast path of a static cache, recorded as impl "transformers compiled".
Timing: CUDA events around each call (wall clock on the cpu). HBM read bandwidth is measured in
the same run by timed sums over a --read-gib GiB buffer; a decode step's bytes are the weights
it reads (every parameter but the embedding table, of which it gathers B rows) plus the K and V
cached for the mean context of the timed steps (L + gen/2 tokens), and roofline_fraction =
(bytes / bandwidth) / time per output token.

Under torch.compile transformers (5.24) expands K/V to every query head for the masked SDPA of
the static cache, where its eager decode packs the GQA group instead: at batch 16, context 4096
the compiled step was slower than the eager one on an H100.

Case names follow run_llm.cc: "<model> b<B> ctx<L> prefill|decode", model "llama3-8b" or
"llama3-8b-<N>l" when --layers differs from the preset's. Prints a table; --json FILE writes
the records as tools/tessera/bench_record.cc does (bench "llm"; decode extras tokens_per_s,
roofline_fraction, bytes, read_gbps). ok: the logits are finite. The cache goes to the forward
as `cache=` (transformers 5.24) or `past_key_values=` (earlier), whichever its signature has.
"""
import argparse
import datetime
import inspect
import json
import math
import os
import statistics
import subprocess
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

# run_llm.cc's presets; llama3-8b with Llama 3.1's RoPE scaling (cost-free at these lengths).
PRESETS = {
    "tiny": dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=4096, rope_theta=500000.0),
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, max_position_embeddings=131072, rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192,
                                    "rope_theta": 500000.0}),
}


def timed(fn, device):
    """(fn(), microseconds): CUDA events on the GPU, wall clock on the cpu."""
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        stop.record()
        stop.synchronize()
        return out, start.elapsed_time(stop) * 1e3
    start = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - start) * 1e6


def read_gbps(device, gib, iters):
    """Streaming read bandwidth (GB/s): the median of timed sums over a gib GiB bf16 buffer."""
    buf = torch.ones(int(gib * 2**30) // 2, dtype=torch.bfloat16, device=device)
    samples = [timed(buf.sum, device)[1] for _ in range(iters + 2)][2:]
    gbps = buf.numel() * 2 / statistics.median(samples) * 1e-3
    del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return gbps


def build_model(args, device):
    config = LlamaConfig(**{**PRESETS[args.config], "num_hidden_layers": args.layers},
                         rms_norm_eps=1e-5, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    # Allocated and initialised on the device: 8B parameters drawn on the cpu take minutes.
    with torch.device(device):
        return LlamaForCausalLM._from_config(config, dtype=dtype).eval()


def decode_bytes(model, batch, context):
    """Bytes one decode step must read: weights (B rows of the embedding) and K/V of context tokens."""
    c = model.config
    weights = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                  if "embed_tokens" not in name)
    elem = model.lm_head.weight.element_size()
    kv = c.num_hidden_layers * 2 * batch * context * c.num_key_value_heads * c.head_dim * elem
    return weights + batch * c.hidden_size * elem + kv


def cache_argument(model):
    """The name the model's forward takes its KV cache by: `cache` from transformers 5.24,
    `past_key_values` before (GPU images have carried both)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def run_batch(model, batch, args, device, decode_fns):
    """Prefill median (us), then {impl: (median us per step, finite)} for each decode forward."""
    cache = StaticCache(config=model.config, max_cache_len=args.prompt_len + args.gen)
    cache_name = cache_argument(model)
    with_cache = {cache_name: cache}
    prompt = torch.randint(0, model.config.vocab_size, (batch, args.prompt_len), device=device)

    def prefill():
        cache.reset()  # outside the timed region: zeroing the cache is no part of a prefill
        return timed(lambda: model(input_ids=prompt, use_cache=True, logits_to_keep=1,
                                   **with_cache).logits[:, -1], device)

    samples = [prefill()[1] for _ in range(args.warmup + args.iters)][args.warmup:]
    prefill_us, prefill_ok = statistics.median(samples), True
    decode = {}
    for impl, forward in decode_fns.items():
        # The first pass warms up (compiles and captures the CUDA graphs); the second is timed.
        for _ in range(2):
            logits, _ = prefill()
            prefill_ok = prefill_ok and bool(torch.isfinite(logits).all())
            # A forward that took the cache under another name would ignore it and run cacheless.
            if int(cache.get_seq_length()) != args.prompt_len:
                raise SystemExit("transformers_llm.py: the static cache was not filled (the "
                                 f"forward took it as `{cache_name}=`)")
            token = logits.argmax(-1, keepdim=True)
            steps = []
            for _ in range(args.gen - 1):
                if impl != "transformers":
                    torch.compiler.cudagraph_mark_step_begin()  # each step is a new graph replay

                def step():
                    out = forward(input_ids=token, use_cache=True, **with_cache).logits[:, -1]
                    return out, out.argmax(-1, keepdim=True)

                (logits, token), us = timed(step, device)
                steps.append(us)
        decode[impl] = (statistics.median(steps), bool(torch.isfinite(logits).all()))
    del cache
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return (prefill_us, prefill_ok), decode


def current_commit():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.environ.get("TESSERA_COMMIT"):
        return os.environ["TESSERA_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "unknown"


def write_json(path, records):
    """bench_record.cc's layout: one record per line, numbers to 6 digits, non-finite as null."""
    def number(v):
        return float(f"{v:.6g}") if math.isfinite(v) else None

    lines = []
    for r in records:
        lines.append("  " + json.dumps({k: number(v) if isinstance(v, float) else v
                                        for k, v in r.items()}))
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(lines) + "\n]\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="llama3-8b", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    ap.add_argument("--batch", default="1,16", help="comma list of batch sizes")
    ap.add_argument("--prompt-len", type=int, default=4096)
    ap.add_argument("--gen", type=int, default=64, help="greedy tokens per sequence (>= 2)")
    ap.add_argument("--iters", type=int, default=5, help="timed prefills")
    ap.add_argument("--warmup", type=int, default=2, help="untimed prefills before them")
    ap.add_argument("--compile", action="store_true",
                    help="also time the decode step under torch.compile(mode='reduce-overhead')")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--read-gib", type=float, help="bandwidth buffer (default: cuda 4, cpu 0.25)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.gen < 2:
        ap.error("--gen must be at least 2 (one prefill token, then decode steps)")
    preset_layers = PRESETS[args.config]["num_hidden_layers"]
    args.layers = args.layers or preset_layers
    device = torch.device(args.device)
    torch.manual_seed(args.seed)

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    gbps = read_gbps(device, args.read_gib or (4 if device.type == "cuda" else 0.25), 10)
    print(f"# torch {torch.__version__}, {gpu}, streaming read {gbps:.0f} GB/s", flush=True)
    model = build_model(args, device)
    decode_fns = {"transformers": model.forward}
    if args.compile:
        # Static shapes: one graph per batch size instead of a dynamic-batch recompile.
        decode_fns["transformers compiled"] = torch.compile(
            model.forward, mode="reduce-overhead", fullgraph=True, dynamic=False)
    name = args.config + (f"-{args.layers}l" if args.layers != preset_layers else "")
    base = {"gpu": gpu, "num_gpus": int(device.type == "cuda"),
            "topology": "tp1" if device.type == "cuda" else "tp1 cpu"}
    stamp = {"commit": current_commit(),
             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    records = []
    print(f"{'case':<36} {'impl':<22} {'median ms':>10} {'tokens/s':>10} {'roofline':>9}")
    with torch.no_grad():
        for batch in (int(b) for b in args.batch.split(",")):
            (prefill_us, prefill_ok), decode = run_batch(model, batch, args, device, decode_fns)
            case = f"{name} b{batch} ctx{args.prompt_len}"
            records.append({"bench": "llm", "case": f"{case} prefill", "impl": "transformers",
                            **base, "median_us": prefill_us, "ok": prefill_ok, **stamp})
            print(f"{case + ' prefill':<36} {'transformers':<22} {prefill_us / 1e3:>10.2f}",
                  flush=True)
            nbytes = decode_bytes(model, batch, args.prompt_len + args.gen / 2)
            for impl, (step_us, ok) in decode.items():
                roofline = nbytes / (gbps * 1e3) / step_us
                tokens_per_s = batch / step_us * 1e6
                # Extras in bench_record.cc's order: the numeric ones sorted by name.
                records.append({"bench": "llm", "case": f"{case} decode", "impl": impl, **base,
                                "median_us": step_us, "gbps": nbytes / step_us * 1e-3,
                                "ok": ok, "bytes": float(nbytes), "read_gbps": gbps,
                                "roofline_fraction": roofline, "tokens_per_s": tokens_per_s,
                                **stamp})
                print(f"{case + ' decode':<36} {impl:<22} {step_us / 1e3:>10.3f} "
                      f"{tokens_per_s:>10.1f} {roofline:>9.3f}", flush=True)
    if args.json:
        write_json(args.json, records)


if __name__ == "__main__":
    main()
