"""Tessera's sequence-parallel attention inside diffusers' Flux transformer, as xDiT offers it.

Every rank runs the same diffusers model on its share of the image tokens (the rows
``layer.local_tokens`` of a :class:`tessera.sp.Attention` planned with the text tokens as joint
tokens) and on all of the text tokens; the processor replaces the model's attention (both the
double- and the single-stream blocks) with the sequence-parallel layer, so only attention
communicates::

    tessera.diffusers.use_sequence_parallel(transformer)          # once: set the processors
    layer = tessera.sp.Attention(ctx, seq_len=L, heads=H, head_dim=D, joint_tokens=J)
    rows = layer.local_tokens
    with tessera.diffusers.sequence_parallel(layer):              # each rank, each step
        out = transformer(hidden_states=latents[:, rows], img_ids=img_ids[rows], ...)

The layer is found per call in a context variable, so rank threads of one process
(tessera.run_cpu_ranks) can share one model. torch tensors; diffusers is imported only here.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

_layer: contextvars.ContextVar = contextvars.ContextVar("tessera_sp_layer", default=None)


@contextlib.contextmanager
def sequence_parallel(layer: Any) -> Iterator[None]:
    """Runs the processors of this thread (or task) on `layer` inside the block."""
    token = _layer.set(layer)
    try:
        yield
    finally:
        _layer.reset(token)


class FluxAttnProcessor:
    """diffusers' FluxAttnProcessor with tessera.sp.Attention in place of SDPA: q, k, v, the
    q/k norms and RoPE as diffusers computes them, then this rank's image rows and the replicated
    text rows through the sequence-parallel layer."""

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None,
                 attention_mask: Any = None, image_rotary_emb: Any = None) -> Any:
        import torch
        from diffusers.models.embeddings import apply_rotary_emb

        layer = _layer.get()
        if layer is None:
            raise RuntimeError("tessera.diffusers.FluxAttnProcessor: call the model inside "
                               "`with tessera.diffusers.sequence_parallel(layer):`")
        if attention_mask is not None:
            raise ValueError("attention_mask: Tessera's sequence-parallel attention takes none")

        def heads(x: Any) -> Any:
            return x.unflatten(-1, (-1, attn.head_dim))

        query = attn.norm_q(heads(attn.to_q(hidden_states)))
        key = attn.norm_k(heads(attn.to_k(hidden_states)))
        value = heads(attn.to_v(hidden_states))
        if encoder_hidden_states is not None:  # double-stream: text projected apart, in front
            query = torch.cat([attn.norm_added_q(heads(attn.add_q_proj(encoder_hidden_states))),
                               query], dim=1)
            key = torch.cat([attn.norm_added_k(heads(attn.add_k_proj(encoder_hidden_states))),
                             key], dim=1)
            value = torch.cat([heads(attn.add_v_proj(encoder_hidden_states)), value], dim=1)
        if image_rotary_emb is not None:
            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)
        j = layer.joint_tokens
        if j != query.shape[1] - layer.local_rows:
            raise ValueError(f"hidden_states: {query.shape[1]} tokens, expected the layer's "
                             f"{j} text + {layer.local_rows} local image tokens")
        parts = [x.contiguous() for x in (query[:, j:], key[:, j:], value[:, j:])]
        if j > 0:
            out, joint_out = layer(*parts, joint_q=query[:, :j].contiguous(),
                                   joint_k=key[:, :j].contiguous(),
                                   joint_v=value[:, :j].contiguous())
            out = torch.cat([joint_out, out], dim=1)
        else:
            out = layer(*parts)
        hidden = out.flatten(2, 3).to(query.dtype)
        if encoder_hidden_states is None:
            return hidden
        text, image = hidden.split_with_sizes([j, hidden.shape[1] - j], dim=1)
        image = attn.to_out[1](attn.to_out[0](image.contiguous()))
        return image, attn.to_add_out(text.contiguous())


def use_sequence_parallel(transformer: Any) -> int:
    """Sets FluxAttnProcessor on every Flux attention of `transformer`; returns how many."""
    count = 0
    for module in transformer.modules():
        if type(module).__name__ == "FluxAttention":
            module.set_processor(FluxAttnProcessor())
            count += 1
    return count
