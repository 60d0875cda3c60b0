#!/usr/bin/env python3
"""One denoising step of a Flux.1-shaped transformer in torch: the peer of `tessera run dit`.

diffusers' FluxTransformer2DModel (Flux.1-dev's dimensions unless --blocks cuts them: 19
double- and 38 single-stream blocks, 24 heads of 128, 64 latent channels, 4096 text features,
768 pooled), random bf16 weights made on the GPU, eager (attention through torch's SDPA), and
with --compile also under torch.compile. For each --seq (image tokens L of a square-ish latent
grid) and --text J text tokens: the median of --iters steps after --warmup, timed as Tessera times
its own (host clock around the step and a synchronize):

    python3 bench/anchors/torch_flux_step.py --seq 4096,16384 --text 512 --json out/torch_flux.json

Records: bench "dit", case "flux L<seq>", impl "torch" / "torch compiled" (bench_record.cc's
layout).
"""
import argparse
import json
import math
import time

import torch
from diffusers import FluxTransformer2DModel


def write_json(path, records):
    def number(v):
        return float(f"{v:.6g}") if math.isfinite(v) else None

    lines = ["  " + json.dumps({k: number(v) if isinstance(v, float) else v for k, v in r.items()})
             for r in records]
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(lines) + "\n]\n")


def grid_width(seq):
    w = int(math.isqrt(seq))
    while seq % w:
        w -= 1
    return w


def flux_model(double, single, device="cuda"):
    """Flux.1-dev's transformer with `double` and `single` blocks, random bf16 weights from seed 1
    (every process that makes it gets the same model)."""
    torch.manual_seed(1)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = FluxTransformer2DModel(
            patch_size=1, in_channels=64, out_channels=64, num_layers=double,
            num_single_layers=single, attention_head_dim=128, num_attention_heads=24,
            joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
            axes_dims_rope=(16, 56, 56)).eval()
    torch.set_default_dtype(torch.float32)
    return model


def step_inputs(seq, text, device="cuda"):
    """The forward's arguments for one step: seq image tokens of a square-ish latent grid and
    `text` text tokens, random from seed 7 (the same on every process)."""
    g = torch.Generator(device=device).manual_seed(7)
    w = grid_width(seq)
    ids = torch.zeros(seq, 3, device=device)
    ids[:, 1] = torch.arange(seq, device=device) // w
    ids[:, 2] = torch.arange(seq, device=device) % w
    return dict(hidden_states=torch.randn(1, seq, 64, device=device, generator=g).bfloat16(),
                encoder_hidden_states=torch.randn(1, text, 4096, device=device,
                                                  generator=g).bfloat16(),
                pooled_projections=torch.randn(1, 768, device=device, generator=g).bfloat16(),
                timestep=torch.tensor([0.5], device=device, dtype=torch.bfloat16),
                img_ids=ids, txt_ids=torch.zeros(text, 3, device=device),
                guidance=torch.tensor([3.5], device=device, dtype=torch.bfloat16),
                return_dict=False)


def step_arguments(doc, seq_default):
    """The options every Flux step peer takes (this one's and torch_flux_usp_step.py's)."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", default=seq_default, help="comma list of image token counts")
    ap.add_argument("--text", type=int, default=512)
    ap.add_argument("--blocks", default="19,38", help="double,single blocks")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", default="")
    return ap


def time_step(step, args, case, impl, text, gpu):
    """Times `step()` (a torch step returning its output) as Tessera times its own: host clock
    around the call and a synchronize, --warmup untimed then --iters timed; prints the median and
    spread and returns the record (bench_record.cc's layout)."""
    times = []
    with torch.no_grad():
        for it in range(args.warmup + args.iters):
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = step()
            torch.cuda.synchronize()
            if it >= args.warmup:
                times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    print(f"{case:<18} J{text} {impl:<16} {1e3 * median:10.2f} ms"
          f" (min {1e3 * times[0]:.2f}, max {1e3 * times[-1]:.2f})", flush=True)
    return {"bench": "dit", "case": case, "impl": impl, "gpu": gpu, "num_gpus": 1,
            "topology": "1x1", "median_us": 1e6 * median,
            "ok": bool(torch.isfinite(out).all().item()), "min_us": 1e6 * times[0],
            "max_us": 1e6 * times[-1], "text_tokens": text}


def main():
    ap = step_arguments(__doc__, "4096,16384")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    double, single = (int(x) for x in args.blocks.split(","))
    model = flux_model(double, single)
    params = sum(p.numel() for p in model.parameters())
    gpu = torch.cuda.get_device_name()
    print(f"# torch {torch.__version__}, {gpu}, Flux {double} double + {single} single blocks, "
          f"{params / 1e9:.2f} G parameters (bf16)", flush=True)
    fns = {"torch": model}
    if args.compile:
        fns["torch compiled"] = torch.compile(model)
    records = []
    for seq in (int(s) for s in args.seq.split(",")):
        kwargs = step_inputs(seq, args.text)
        for impl, fn in fns.items():
            records.append(time_step(lambda: fn(**kwargs)[0], args, f"flux L{seq}", impl,
                                     args.text, gpu))
    if args.json:
        write_json(args.json, records)


if __name__ == "__main__":
    main()
