#!/usr/bin/env python3
"""Tessera's FluxDit against diffusers' FluxTransformer2DModel on the same weights and inputs.

Makes a small Flux transformer with diffusers (random weights, every parameter redrawn so no
zero-initialised gate hides a block), saves it (config.json + safetensors), writes the inputs,
runs diffusers' forward in float32 on the cpu, runs `tessera run dit` on those files for each
sequence-parallel method, and compares the predictions:

    python3 bench/anchors/flux_dit_reference.py --tessera build/tools/tessera/tessera

Needs torch, diffusers and safetensors (on the GPU machine: diffusers carried as a wheel).
Exit status 1 when any method's largest difference exceeds --tol times the largest value.

With --device cuda the model is saved in bf16 and Tessera runs it on the GPU in bf16
(`tessera run dit --backend cuda`); diffusers runs the same bf16 weights twice on the GPU, in
float32 (the truth) and in bf16. Tessera passes when its largest error against the float32 run is
at most twice diffusers' own bf16 error or --tol times the largest value (FlashAttention-3's
rule). --flux-dims takes Flux.1's widths (24 heads of 128, 64 channels, 4096 text features, 768
pooled, RoPE axes 16/56/56):

    python3 bench/anchors/flux_dit_reference.py --tessera build/tools/tessera/tessera \
        --device cuda --flux-dims --grid 32x32 --text 64 --sp auto --nranks 1 --tol 0.02
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from diffusers import FluxTransformer2DModel
from safetensors.torch import load_file, save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True, help="the tessera binary")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=16, help="axes 1/4, 3/8, 3/8 of it")
    ap.add_argument("--double", type=int, default=1, help="double-stream blocks")
    ap.add_argument("--single", type=int, default=1, help="single-stream blocks")
    ap.add_argument("--grid", default="4x6", help="latent grid HxW (image tokens H*W)")
    ap.add_argument("--text", type=int, default=5, help="text tokens")
    ap.add_argument("--sp", default="ring,ulysses,usp,auto")
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--flux-dims", action="store_true", help="Flux.1's widths (see above)")
    args = ap.parse_args()
    cuda = args.device == "cuda"

    torch.manual_seed(0)
    if args.flux_dims:
        args.heads, d, axes, channels, joint, pooled_dim = 24, 128, (16, 56, 56), 64, 4096, 768
    else:
        d = args.head_dim
        axes = (d // 4, 3 * d // 8, d - d // 4 - 3 * d // 8)
        channels, joint, pooled_dim = 8, 12, 10
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=channels, out_channels=channels, num_layers=args.double,
        num_single_layers=args.single, attention_head_dim=d, num_attention_heads=args.heads,
        joint_attention_dim=joint, pooled_projection_dim=pooled_dim, guidance_embeds=True,
        axes_dims_rope=axes).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm_q.weight", "norm_k.weight", "norm_added_q.weight",
                              "norm_added_k.weight")):
                p.uniform_(0.9, 1.1)
            elif cuda:  # widths of thousands: keep activations of order one
                bound = 0.1 if p.dim() == 1 else 1.0 / p.shape[1] ** 0.5
                p.uniform_(-bound, bound)
            else:
                p.uniform_(-0.3, 0.3)
    h, w = (int(x) for x in args.grid.split("x"))
    L, J = h * w, args.text
    image = torch.randn(1, L, channels)
    text = torch.randn(1, J, joint)
    pooled = torch.randn(1, pooled_dim)
    timestep = torch.tensor([0.625])
    guidance = torch.tensor([3.5])
    img_ids = torch.zeros(L, 3)
    img_ids[:, 1] = torch.arange(L) // w
    img_ids[:, 2] = torch.arange(L) % w

    def run(m, dtype, device):
        with torch.no_grad():
            return m(hidden_states=image.to(device, dtype),
                     encoder_hidden_states=text.to(device, dtype),
                     pooled_projections=pooled.to(device, dtype), timestep=timestep.to(device, dtype),
                     img_ids=img_ids.to(device), txt_ids=torch.zeros(J, 3, device=device),
                     guidance=guidance.to(device, dtype), return_dict=False)[0][0].float().cpu()

    torch_error = 0.0
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = model.to(torch.bfloat16)  # the weights both sides run
        want = run(model.to("cuda", torch.float32), torch.float32, "cuda")
        bf16 = run(model.to("cuda", torch.bfloat16), torch.bfloat16, "cuda")
        torch_error = (bf16 - want).abs().max().item()
        print(f"diffusers bf16 against diffusers float32: max error {torch_error:.3g}")
    else:
        want = run(model, torch.float32, "cpu")

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        inputs = os.path.join(tmp, "inputs.safetensors")
        save_file({"image": image[0].contiguous(), "text": text[0].contiguous(),
                   "pooled": pooled[0].contiguous(), "timestep": timestep,
                   "guidance": guidance}, inputs)
        failed = 0
        for method in args.sp.split(","):
            out = os.path.join(tmp, f"prediction_{method}.safetensors")
            cmd = [args.tessera, "run", "dit", "--model", os.path.join(tmp, "config.json"),
                   "--weights", os.path.join(tmp, "diffusion_pytorch_model.safetensors"),
                   "--inputs", inputs, "--output", out, "--grid-width", str(w), "--sp", method,
                   "--nranks", str(args.nranks), "--backend", args.device]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            got = load_file(out)["prediction"]
            diff = (got - want).abs().max().item()
            scale = want.abs().max().item()
            ok = diff <= max(args.tol * scale, 2 * torch_error)
            failed += not ok
            print(f"{method:10s} max |tessera - diffusers| {diff:.3g} (largest value {scale:.3g})"
                  f" {'ok' if ok else 'FAILED'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
