#!/usr/bin/env python3
"""Tessera's LlamaModel against transformers' LlamaForCausalLM on the same weights and prompt.

Makes a Llama-3-style model with transformers (GQA, Llama 3 RoPE scaling; every parameter
redrawn so logits are far from ties), saves it (config.json + safetensors), runs transformers'
forward and greedy generation, then `tessera run llm` on those files for each tensor-parallel
degree, and compares the prefill logits and validates the generated tokens:

    python3 bench/anchors/llama_reference.py --tessera build/tools/tessera/tessera
    python3 bench/anchors/llama_reference.py --tessera build/tools/tessera/tessera --device cuda

Prefill: every logit of tessera must be within the bound, --tol times the largest |logit| of
transformers' prefill. Tokens are validated teacher-forced: transformers runs one forward pass
over the prompt followed by tessera's generated tokens, so the logits at the position before
generated token i score tessera's choice with tessera's own history (comparing greedy sequences
checks nothing after they part, and nothing at all when the first step is a tie). Token i passes
when its logit is within the bound of that position's largest logit; its margin is the largest
logit minus its logit (0: transformers' argmax, counted as exact). ok when the prefill logits and
all generated tokens pass. How many tokens equal transformers' own greedy generation before the
first mismatch is printed as information.

--device cpu (default): a tiny model in float32 on the cpu, tessera's cpu backend, --tol 1e-4;
every token is expected to be transformers' argmax.
--device cuda: Llama-3-8B's dimensions cut to --layers (4) decoder layers, bfloat16 on the GPU
(weights saved in bf16, so both sides read the same values), SDPA attention, `tessera run llm
--backend cuda`. bf16 rounding differs between the two, so --tol is 0.02, and a token may be a
near-tie runner-up within the bound.

Needs torch, transformers and safetensors. Exit status 1 when a tp degree fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

# Model dimensions per device: a tiny model for the float32 cpu check, Llama-3-8B's for bf16.
DIMS = {
    "cpu": dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                original_max_position_embeddings=32),
    "cuda": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 max_position_embeddings=131072, original_max_position_embeddings=8192),
}
DEFAULTS = {"cpu": dict(layers=2, tp="1,2,4", tol=1e-4), "cuda": dict(layers=4, tp="1", tol=0.02)}


def build_model(args):
    """The model with every parameter redrawn, in float32 (cpu) or bfloat16 (cuda), eval mode."""
    dims = dict(DIMS[args.device])
    head_dim = dims.pop("head_dim")
    original_max = dims.pop("original_max_position_embeddings")
    common = dict(num_hidden_layers=args.layers, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  **dims)
    if args.device == "cuda":
        common["attn_implementation"] = "sdpa"
    if args.arch == "llama":
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": original_max,
                "rope_theta": 500000.0}
        config = LlamaConfig(head_dim=head_dim, rope_theta=500000.0, rope_scaling=rope, **common)
        model_class = LlamaForCausalLM
    else:
        config = Qwen2Config(rope_theta=1000000.0, use_sliding_window=False, **common)
        model_class = Qwen2ForCausalLM
    # Built on the target device: Llama-3-8B's embedding and head alone are 1G parameters.
    with torch.device(args.device):
        model = model_class(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.uniform_(0.9, 1.1)
            elif "embed_tokens" in name:
                p.uniform_(-1.0, 1.0)
            elif name.endswith(".bias"):
                p.uniform_(-0.1, 0.1)
            else:
                bound = p.shape[-1] ** -0.5
                p.uniform_(-bound, bound)
    # Cast before transformers runs and before saving, so both sides use the same bf16 values.
    return model.to(torch.bfloat16 if args.device == "cuda" else torch.float32)


def teacher_forced(model, prompt, tokens, bound):
    """(tokens that are transformers' argmax, tokens within bound, worst margin) for tessera's
    generated tokens, scored by transformers' logits over prompt + tokens in one forward pass."""
    # Scored up to the first token outside the vocabulary (it could not be fed back); the rest
    # count as neither exact nor within.
    vocab = model.config.vocab_size
    tokens = tokens[:next((i for i, t in enumerate(tokens) if not 0 <= t < vocab), len(tokens))]
    if not tokens:
        return 0, 0, float("nan")
    # The last token predicts nothing we check, so it is left out of the pass.
    seq = torch.cat([prompt[0], torch.tensor(tokens[:-1], dtype=prompt.dtype)])
    with torch.no_grad():
        logits = model(seq[None].to(model.device)).logits[0].float().cpu()
    # Position prompt_len - 1 + i predicts generated token i.
    rows = logits[prompt.shape[1] - 1:]
    margins = rows.max(dim=-1).values - rows[torch.arange(len(tokens)), torch.tensor(tokens)]
    exact = int((margins == 0).sum())
    within = int((margins <= bound).sum())
    return exact, within, margins.max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True, help="the tessera binary")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cpu: tiny model in float32; cuda: Llama-3-8B dimensions in bf16")
    ap.add_argument("--layers", type=int, help="decoder layers (default: cpu 2, cuda 4)")
    ap.add_argument("--prompt-len", type=int, default=12)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--tp", help="tensor-parallel degrees to run (default: cpu 1,2,4, cuda 1)")
    ap.add_argument("--tol", type=float,
                    help="logit tolerance relative to the largest logit (default: cpu 1e-4, "
                         "cuda 0.02)")
    ap.add_argument("--arch", default="llama", choices=["llama", "qwen2"],
                    help="qwen2: q/k/v biases, no RoPE scaling")
    args = ap.parse_args()
    for key, value in DEFAULTS[args.device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    torch.manual_seed(0)
    model = build_model(args)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt_len))
    with torch.no_grad():
        logits = model(prompt.to(args.device)).logits[0].float().cpu()
        result = model.generate(prompt.to(args.device), max_new_tokens=args.gen,
                                do_sample=False, min_new_tokens=args.gen,
                                return_dict_in_generate=True)
    # Transformers' own greedy tokens: only for the information line, not the verdict.
    generated = result.sequences[0, args.prompt_len:].tolist()

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        backend = ["--backend", "cuda"] if args.device == "cuda" else []
        for tp in args.tp.split(","):
            out = os.path.join(tmp, f"logits_tp{tp}.safetensors")
            cmd = [args.tessera, "run", "llm", *backend, "--config", tmp, "--weights", tmp,
                   "--tp", tp, "--prompt-tokens", ",".join(str(t) for t in prompt[0].tolist()),
                   "--gen", str(args.gen), "--logits-out", out]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            got = load_file(out)
            tokens = got["generated"].tolist()
            diff = (got["prefill_logits"] - logits).abs().max().item()
            scale = logits.abs().max().item()
            bound = args.tol * scale
            same = next((i for i, (a, b) in enumerate(zip(tokens, generated)) if a != b),
                        min(len(tokens), len(generated)))
            exact, within, worst = teacher_forced(model, prompt, tokens, bound)
            # A short generation fails: its missing tokens count as neither exact nor within.
            ok = diff <= bound and within == args.gen
            failed += not ok
            print(f"tp {tp}: prefill logits max |tessera - transformers| {diff:.3g}, "
                  f"{diff / scale:.3g} of the largest {scale:.3g}; {exact}/{args.gen} tessera "
                  f"tokens are transformers' argmax (exact), {within}/{args.gen} within the "
                  f"bound {bound:.3g}; worst margin {worst:.3g}; {same}/{args.gen} equal to "
                  f"transformers' greedy tokens before the first mismatch "
                  f"{'ok' if ok else 'FAILED'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
