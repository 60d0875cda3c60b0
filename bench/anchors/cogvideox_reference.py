#!/usr/bin/env python3
"""Tessera's CogVideoXBlock stack against diffusers' CogVideoXBlock on the same weights and inputs.

Makes a small CogVideoXTransformer3DModel with diffusers (random weights, every parameter
redrawn), saves it (config.json + safetensors), runs its transformer blocks in float32 on the cpu
on random embedded video and text tokens and a timestep embedding, then `tessera run dit` on those
files for each sequence-parallel method, and compares the video tokens after the blocks:

    python3 bench/anchors/cogvideox_reference.py --tessera build/tools/tessera/tessera

Needs torch, diffusers and safetensors. Exit status 1 when any method's largest difference
exceeds --tol times the largest value.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from diffusers import CogVideoXTransformer3DModel
from safetensors.torch import load_file, save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True, help="the tessera binary")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--seq", type=int, default=40, help="video tokens")
    ap.add_argument("--text", type=int, default=6, help="text tokens")
    ap.add_argument("--sp", default="ring,ulysses,usp,auto")
    ap.add_argument("--nranks", type=int, default=4)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = CogVideoXTransformer3DModel(
        num_attention_heads=args.heads, attention_head_dim=args.head_dim, in_channels=16,
        out_channels=16, time_embed_dim=24, text_embed_dim=12, num_layers=args.blocks,
        sample_width=8, sample_height=8, sample_frames=5).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".norm" in name and "linear" not in name and name.endswith(".weight"):
                p.uniform_(0.9, 1.1)
            else:
                p.uniform_(-0.3, 0.3)
    c = args.heads * args.head_dim
    hidden = torch.randn(1, args.seq, c)
    encoder = torch.randn(1, args.text, c)
    temb = torch.randn(1, 24)
    with torch.no_grad():
        h, e = hidden, encoder
        for block in model.transformer_blocks:
            h, e = block(h, e, temb)
        want = h[0]

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        inputs = os.path.join(tmp, "inputs.safetensors")
        save_file({"hidden": hidden[0].contiguous(), "encoder": encoder[0].contiguous(),
                   "temb": temb[0].contiguous()}, inputs)
        for method in args.sp.split(","):
            out = os.path.join(tmp, f"out_{method}.safetensors")
            cmd = [args.tessera, "run", "dit", "--model", os.path.join(tmp, "config.json"),
                   "--weights", os.path.join(tmp, "diffusion_pytorch_model.safetensors"),
                   "--inputs", inputs, "--output", out, "--sp", method,
                   "--nranks", str(args.nranks)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            got = load_file(out)["prediction"]
            diff = (got - want).abs().max().item()
            scale = want.abs().max().item()
            ok = diff <= args.tol * scale
            failed += not ok
            print(f"{method:10s} max |tessera - diffusers| {diff:.3g} (largest value {scale:.3g})"
                  f" {'ok' if ok else 'FAILED'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
