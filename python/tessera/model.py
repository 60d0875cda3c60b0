"""The model runtime: Llama-family decoders (Llama 2/3, Qwen2.5) on one rank.

    m = tessera.model.Llama("tiny")                        # or a config.json, weights=DIR
    seq = m.add_sequence()
    logits = m.forward([(seq, [1, 2, 3])], rows="last")    # NumPy float32 [1, vocab]
    tokens = m.generate([1, 2, 3], steps=8)                # greedy

The cpu backend runs the float32 reference layers; backend="cuda" runs bf16 on one GPU with
CUDA graphs for decode steps.
"""

from . import _C

Llama = _C.model.Llama

__all__ = ["Llama"]
