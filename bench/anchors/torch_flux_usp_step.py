#!/usr/bin/env python3
"""One Flux.1-shaped denoising step under USP sequence parallelism in torch: the multi-GPU peer of
`tessera run dit --model flux --sp ...`.

Run under torchrun, one process per GPU:
    torchrun --standalone --nproc_per_node 4 bench/anchors/torch_flux_usp_step.py \
        --seq 16384 --text 512 --ulysses-degree 4 --json out/torch_flux_usp.json
    (--device cpu runs it on gloo with SDPA's math path, for checking the processor without a
    GPU: --blocks 1,1 --seq 64 --text 16)

diffusers' FluxTransformer2DModel (torch_flux_step.py's model: Flux.1-dev's dimensions unless
--blocks cuts them, random bf16 weights from one seed, so every rank holds the same model) with
an attention processor that runs torch_usp.py's USP layer (yunchang / xDiT's design: Ulysses
all-to-alls over ulysses-degree ranks, ring attention over the rest). Each rank holds its L/P
image tokens (a contiguous slice of the latent sequence, with their position ids) and all J text
tokens, as Tessera's sequence-parallel DiT does: every linear runs on the rank's own rows, the
text rows are the joint tokens of every attention (xDiT's joint strategy "front").

--check (on by default with --blocks of at most 2 in all) runs the whole sequence on rank 0 with
diffusers' own processor and compares the gathered prediction, ok within 2^-6 of the largest
value (two bf16 steps). It is a wiring check and a weak one: with random weights the attention
moves the prediction little (zeroing the image tokens' attention output measured 0.023 against
a bound of 0.033 on cpu at L 64), so torch_usp.py's own check, the attention against SDPA, is
what shows the attention right; on cpu the Ulysses and ring meshes matched within 0.0078.

Timing as torch_flux_step.py (host clock around the step and a synchronize, after a barrier),
median of --iters after --warmup; the slowest rank's median is reported. Records: bench "dit",
case "flux L<seq>", impl "torch usp U<u>xR<r>", num_gpus P.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from diffusers.models.transformers.transformer_flux import _get_qkv_projections
from diffusers.models.embeddings import apply_rotary_emb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_usp  # noqa: E402  (the USP attention layer)
from torch_flux_step import flux_model, step_arguments, step_inputs, write_json  # noqa: E402


class UspFluxAttnProcessor:
    """diffusers' FluxAttnProcessor with the attention itself through torch_usp.usp_attention:
    the first `joint` tokens of the (text, image) sequence are the joint tokens every rank
    holds, the rest are this rank's image tokens."""

    def __init__(self, mesh, joint, backend):
        self.mesh, self.joint, self.backend = mesh, joint, backend

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 image_rotary_emb=None):
        q, k, v, eq, ek, ev = _get_qkv_projections(attn, hidden_states, encoder_hidden_states)
        q, k, v = (t.unflatten(-1, (-1, attn.head_dim)) for t in (q, k, v))
        q, k = attn.norm_q(q), attn.norm_k(k)
        if attn.added_kv_proj_dim is not None:
            eq, ek, ev = (t.unflatten(-1, (-1, attn.head_dim)) for t in (eq, ek, ev))
            eq, ek = attn.norm_added_q(eq), attn.norm_added_k(ek)
            q, k, v = (torch.cat(pair, dim=1) for pair in ((eq, q), (ek, k), (ev, v)))
        if image_rotary_emb is not None:
            q = apply_rotary_emb(q, image_rotary_emb, sequence_dim=1)
            k = apply_rotary_emb(k, image_rotary_emb, sequence_dim=1)
        j = self.joint
        out, joint_out = torch_usp.usp_attention(
            q[:, j:], k[:, j:], v[:, j:], (q[:, :j], k[:, :j], v[:, :j]), self.mesh, self.backend)
        hidden = torch.cat([joint_out, out], dim=1).flatten(2, 3).to(q.dtype)
        if encoder_hidden_states is None:
            return hidden
        text, image = hidden.split_with_sizes([j, hidden.shape[1] - j], dim=1)
        image = attn.to_out[1](attn.to_out[0](image.contiguous()))
        return image, attn.to_add_out(text.contiguous())


def main():
    ap = step_arguments(__doc__, "16384")
    ap.add_argument("--ulysses-degree", type=int, default=0, help="default: every rank")
    ap.add_argument("--check", type=int, default=-1,
                    help="1: compare with the unparallel model on rank 0 (default: with --blocks "
                         "of at most 2 in all)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    u = args.ulysses_degree or world
    if world % u:
        sys.exit(f"--ulysses-degree {u}: expected a divisor of the {world} ranks")
    mesh = torch_usp.Mesh(u, world // u)
    double, single = (int(x) for x in args.blocks.split(","))
    check = args.check if args.check >= 0 else int(double + single <= 2)
    model = flux_model(double, single, device)
    reference = flux_model(double, single, device) if check and rank == 0 else None
    processor = UspFluxAttnProcessor(mesh, args.text, backend=None)  # one, set on every block
    model.set_attn_processor(processor)
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    records = []
    for seq in (int(s) for s in args.seq.split(",")):
        if seq % world:
            sys.exit(f"--seq {seq}: expected a multiple of the {world} ranks")
        full = step_inputs(seq, args.text, device)
        n = seq // world
        mine = dict(full, hidden_states=full["hidden_states"][:, rank * n:(rank + 1) * n],
                    img_ids=full["img_ids"][rank * n:(rank + 1) * n])
        probe = argparse.Namespace(dtype="bf16", batch=1, heads=24, head_dim=128, joint=args.text)
        processor.backend = torch_usp.pick_backend("auto", device, probe, seq, mesh)
        times = []
        with torch.no_grad():
            for it in range(args.warmup + args.iters):
                dist.barrier()
                sync()
                start = time.perf_counter()
                out = model(**mine)[0]
                sync()
                if it >= args.warmup:
                    times.append(time.perf_counter() - start)
        median = torch.tensor([statistics.median(times)], device=device)
        dist.all_reduce(median, op=dist.ReduceOp.MAX)
        ok, err = bool(torch.isfinite(out).all().item()), float("nan")
        if check:
            # [P*B, L/P, C]: gloo wants the ranks stacked along dim 0 (NCCL takes either)
            gathered = torch.empty(world * out.shape[0], *out.shape[1:], dtype=out.dtype,
                                   device=device)
            dist.all_gather_into_tensor(gathered, out.contiguous())
            gathered = gathered.view(world, *out.shape)
            if rank == 0:
                with torch.no_grad():
                    want = reference(**full)[0].float()
                got = gathered.transpose(0, 1).reshape(want.shape).float()
                err = (got - want).abs().max().item()
                ok = ok and err <= 2.0 ** -6 * max(1.0, want.abs().max().item())
        label = f"torch usp U{u}xR{world // u}"
        if rank == 0:
            print(f"flux L{seq:<6} J{args.text} {label:<18} {1e3 * median.item():10.2f} ms"
                  f" ok={ok} max_err={err:.4g} ({world} {'GPUs' if cuda else 'cpu ranks'})",
                  flush=True)
            records.append({"bench": "dit", "case": f"flux L{seq}", "impl": label, "gpu": gpu,
                            "num_gpus": world if cuda else 0, "topology": f"1x{world}",
                            "median_us": 1e6 * median.item(), "ok": ok, "max_err": err,
                            "text_tokens": args.text})
    if args.json and rank == 0:
        write_json(args.json, records)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
