#!/usr/bin/env python3
"""Tessera's LlamaModel against transformers' LlamaForCausalLM on the same weights and prompt.

Makes a small Llama-3-style model with transformers (GQA, Llama 3 RoPE scaling; every parameter
redrawn so logits are far from ties), saves it (config.json + safetensors), runs transformers'
forward and greedy generation in float32 on the cpu, then `tessera run llm` on those files for
each tensor-parallel degree, and compares the prefill logits and the generated tokens:

    python3 bench/anchors/llama_reference.py --tessera build/tools/tessera/tessera

Needs torch, transformers and safetensors. Exit status 1 when a logit differs by more than --tol
times the largest logit or a generated token differs.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True, help="the tessera binary")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=12)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--tp", default="1,2,4", help="tensor-parallel degrees to run")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--arch", default="llama", choices=["llama", "qwen2"],
                    help="qwen2: q/k/v biases, no RoPE scaling")
    args = ap.parse_args()

    torch.manual_seed(0)
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False)
    if args.arch == "llama":
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                "rope_theta": 500000.0}
        config = LlamaConfig(head_dim=16, rope_theta=500000.0, rope_scaling=rope, **common)
        model_class = LlamaForCausalLM
    else:
        config = Qwen2Config(rope_theta=1000000.0, use_sliding_window=False, **common)
        model_class = Qwen2ForCausalLM
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
    prompt = torch.randint(0, 97, (1, args.prompt_len))
    with torch.no_grad():
        logits = model(prompt).logits[0]
        generated = model.generate(prompt, max_new_tokens=args.gen, do_sample=False,
                                   min_new_tokens=args.gen)[0, args.prompt_len:].tolist()

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        for tp in args.tp.split(","):
            out = os.path.join(tmp, f"logits_tp{tp}.safetensors")
            cmd = [args.tessera, "run", "llm", "--config", tmp, "--weights", tmp, "--tp", tp,
                   "--prompt-tokens", ",".join(str(t) for t in prompt[0].tolist()),
                   "--gen", str(args.gen), "--logits-out", out]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            got = load_file(out)
            diff = (got["prefill_logits"] - logits).abs().max().item()
            scale = logits.abs().max().item()
            tokens = got["generated"].tolist()
            ok = diff <= args.tol * scale and tokens == generated
            failed += not ok
            print(f"tp {tp}: prefill logits max |tessera - transformers| {diff:.3g} (largest "
                  f"{scale:.3g}); {sum(a == b for a, b in zip(tokens, generated))}/{args.gen} "
                  f"greedy tokens equal {'ok' if ok else 'FAILED'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
