#!/usr/bin/env python3
"""CogVideoX-2B's transformer blocks in torch: the peer of `tessera run dit --model cogvideox`.

diffusers' CogVideoXBlock (CogVideoX-2B's dimensions unless --blocks cuts them: 30 blocks, 30
heads of 64, time embedding 512), random bf16 weights made on the GPU, eager (attention through
torch's SDPA), and with --compile also under torch.compile. Like Tessera's step it runs the
blocks only, on embedded video tokens, text tokens and a time embedding. For each --seq (video
tokens L) and --text J: the median of --iters steps after --warmup, timed as Tessera times its
own (host clock around the step and a synchronize):

    python3 bench/anchors/torch_cogvideox_step.py --seq 4096,17550 --text 226 --json out/torch_cogvideox.json

Records: bench "dit", case "cogvideox L<seq>", impl "torch" / "torch compiled".
"""
import argparse

import torch
from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXBlock

from torch_flux_step import time_step, write_json

HEADS, HEAD_DIM, TIME_EMBED = 30, 64, 512


def cogvideox_blocks(count, device="cuda"):
    """`count` CogVideoX-2B blocks, random bf16 weights from seed 1."""
    torch.manual_seed(1)
    with torch.device(device):
        blocks = torch.nn.ModuleList(
            CogVideoXBlock(dim=HEADS * HEAD_DIM, num_attention_heads=HEADS,
                           attention_head_dim=HEAD_DIM, time_embed_dim=TIME_EMBED)
            for _ in range(count))
    return blocks.to(torch.bfloat16).eval()


def step(blocks, hidden, encoder, temb):
    for block in blocks:
        hidden, encoder = block(hidden, encoder, temb)
    return hidden


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", default="4096,17550", help="comma list of video token counts")
    ap.add_argument("--text", type=int, default=226)
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    blocks = cogvideox_blocks(args.blocks)
    params = sum(p.numel() for p in blocks.parameters())
    gpu = torch.cuda.get_device_name()
    print(f"# torch {torch.__version__}, {gpu}, CogVideoX {args.blocks} blocks, "
          f"{params / 1e9:.2f} G parameters (bf16)", flush=True)
    fns = {"torch": lambda *a: step(blocks, *a)}
    if args.compile:
        fns["torch compiled"] = torch.compile(fns["torch"])
    records = []
    g = torch.Generator(device="cuda").manual_seed(7)
    for seq in (int(s) for s in args.seq.split(",")):
        inputs = (torch.randn(1, seq, HEADS * HEAD_DIM, device="cuda", generator=g).bfloat16(),
                  torch.randn(1, args.text, HEADS * HEAD_DIM, device="cuda",
                              generator=g).bfloat16(),
                  torch.randn(1, TIME_EMBED, device="cuda", generator=g).bfloat16())
        for impl, fn in fns.items():
            records.append(time_step(lambda: fn(*inputs), args, f"cogvideox L{seq}", impl,
                                     args.text, gpu))
    if args.json:
        write_json(args.json, records)


if __name__ == "__main__":
    main()
