"""Tessera's sequence-parallel attention inside diffusers' Flux and CogVideoX transformers, as xDiT
offers it.

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

CogVideoX's transformer takes the whole latent video, so its step runs through
:func:`cogvideox_forward`: every rank embeds the whole latent (the patch embedding is cheap) and
keeps its image tokens, the blocks run on them with the text tokens replicated and attention
through the layer, and each rank returns its rows of the final projection; gathered over the
ranks, :func:`cogvideox_unpatchify` makes the video of diffusers' forward::

    tessera.diffusers.use_sequence_parallel(transformer)          # once
    rows, tokens = tessera.diffusers.cogvideox_forward(transformer, layer, latents, text, t)
    # all ranks' tokens in place (rows), then
    video = tessera.diffusers.cogvideox_unpatchify(transformer, all_tokens, latents.shape)

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


def _active_layer(attention_mask: Any, outside: str) -> Any:
    """The layer of the enclosing sequence_parallel block; `outside` says what to do without."""
    layer = _layer.get()
    if layer is None:
        raise RuntimeError(f"tessera.diffusers.{outside}")
    if attention_mask is not None:
        raise ValueError("attention_mask: Tessera's sequence-parallel attention takes none")
    return layer


def _sequence_parallel_attention(layer: Any, query: Any, key: Any, value: Any) -> Any:
    """Attention of the [text; image rows] q, k, v [B, J + L_r, H, D] through `layer` (the text
    tokens as its joint tokens); returns [B, J + L_r, H * D] in the same order."""
    import torch

    j = layer.joint_tokens
    if j != query.shape[1] - layer.local_rows:
        raise ValueError(f"hidden_states: {query.shape[1]} tokens, expected the layer's "
                         f"{j} text + {layer.local_rows} local image tokens")
    parts = [x.contiguous() for x in (query[:, j:], key[:, j:], value[:, j:])]
    if j > 0:
        out, joint_out = layer(*parts, joint_q=query[:, :j].contiguous(),
                               joint_k=key[:, :j].contiguous(), joint_v=value[:, :j].contiguous())
        out = torch.cat([joint_out, out], dim=1)
    else:
        out = layer(*parts)
    return out.flatten(2, 3).to(query.dtype)


class FluxAttnProcessor:
    """diffusers' FluxAttnProcessor with tessera.sp.Attention in place of SDPA: q, k, v, the
    q/k norms and RoPE as diffusers computes them, then this rank's image rows and the replicated
    text rows through the sequence-parallel layer."""

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None,
                 attention_mask: Any = None, image_rotary_emb: Any = None) -> Any:
        import torch
        from diffusers.models.embeddings import apply_rotary_emb

        layer = _active_layer(attention_mask, "FluxAttnProcessor: call the model inside "
                                              "`with tessera.diffusers.sequence_parallel(layer):`")

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
        hidden = _sequence_parallel_attention(layer, query, key, value)
        if encoder_hidden_states is None:
            return hidden
        text, image = hidden.split_with_sizes([j, hidden.shape[1] - j], dim=1)
        image = attn.to_out[1](attn.to_out[0](image.contiguous()))
        return image, attn.to_add_out(text.contiguous())


class CogVideoXAttnProcessor:
    """diffusers' CogVideoXAttnProcessor2_0 with tessera.sp.Attention in place of SDPA: the text
    tokens in front of this rank's image rows, q/k norms and RoPE (on the image rows, with
    their rows of the rotary embedding) as diffusers computes them."""

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any,
                 attention_mask: Any = None, image_rotary_emb: Any = None) -> Any:
        import torch
        from diffusers.models.embeddings import apply_rotary_emb

        layer = _active_layer(attention_mask, "CogVideoXAttnProcessor: run the model through "
                                              "tessera.diffusers.cogvideox_forward")
        j = encoder_hidden_states.size(1)
        h = torch.cat([encoder_hidden_states, hidden_states], dim=1)

        def heads(x: Any) -> Any:
            return x.unflatten(-1, (attn.heads, -1))  # [B, T, H, D]

        query, key, value = heads(attn.to_q(h)), heads(attn.to_k(h)), heads(attn.to_v(h))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if image_rotary_emb is not None:
            query = torch.cat([query[:, :j], apply_rotary_emb(query[:, j:], image_rotary_emb,
                                                              sequence_dim=1)], dim=1)
            if not attn.is_cross_attention:
                key = torch.cat([key[:, :j], apply_rotary_emb(key[:, j:], image_rotary_emb,
                                                              sequence_dim=1)], dim=1)
        out = attn.to_out[1](attn.to_out[0](_sequence_parallel_attention(layer, query, key, value)))
        text, image = out.split_with_sizes([j, out.shape[1] - j], dim=1)
        return image, text


def use_sequence_parallel(transformer: Any) -> int:
    """Sets Tessera's processor on every Flux attention and every CogVideoX block's attention
    of `transformer`; returns how many."""
    count = 0
    for module in transformer.modules():
        if type(module).__name__ == "FluxAttention":
            module.set_processor(FluxAttnProcessor())
            count += 1
        elif type(module).__name__ == "CogVideoXBlock":
            module.attn1.set_processor(CogVideoXAttnProcessor())
            count += 1
    return count


def cogvideox_forward(transformer: Any, layer: Any, hidden_states: Any,
                      encoder_hidden_states: Any, timestep: Any, *, timestep_cond: Any = None,
                      ofs: Any = None, image_rotary_emb: Any = None) -> tuple[Any, Any]:
    """One step of diffusers' CogVideoXTransformer3DModel on this rank's image tokens.

    hidden_states: the latent video [B, F, C, H, W]; encoder_hidden_states: the text [B, J, C];
    image_rotary_emb: (cos, sin) [L, D] of every image token, as the pipeline computes them.
    `layer` is a tessera.sp.Attention planned with seq_len = L image tokens, joint_tokens = J,
    heads and head_dim of the model. Returns (rows, tokens): the image tokens this rank holds
    (layer.local_tokens, as a tensor) and their rows of the final projection [B, L_r, C_out].
    """
    import torch

    t = transformer
    emb = t.time_embedding(t.time_proj(timestep).to(dtype=hidden_states.dtype), timestep_cond)
    if t.ofs_embedding is not None:
        emb = emb + t.ofs_embedding(t.ofs_proj(ofs).to(dtype=hidden_states.dtype))
    tokens = t.embedding_dropout(t.patch_embed(encoder_hidden_states, hidden_states))
    j = encoder_hidden_states.shape[1]
    rows = torch.from_numpy(layer.local_tokens).to(tokens.device)
    text, image = tokens[:, :j], tokens[:, j:][:, rows]
    rope = None if image_rotary_emb is None else tuple(x[rows] for x in image_rotary_emb)
    with sequence_parallel(layer):
        for block in t.transformer_blocks:
            image, text = block(hidden_states=image, encoder_hidden_states=text, temb=emb,
                                image_rotary_emb=rope)
    image = t.norm_out(t.norm_final(image), temb=emb)
    return rows, t.proj_out(image)


def cogvideox_unpatchify(transformer: Any, tokens: Any, shape: Any) -> Any:
    """The video [B, F, C_out, H, W] from every image token's final projection [B, L, C_out'] in
    token order (all ranks' cogvideox_forward rows put in place); `shape` is the latent's."""
    batch, frames, _, height, width = shape
    p, p_t = transformer.config.patch_size, transformer.config.patch_size_t
    if p_t is None:
        out = tokens.reshape(batch, frames, height // p, width // p, -1, p, p)
        return out.permute(0, 1, 4, 2, 5, 3, 6).flatten(5, 6).flatten(3, 4)
    out = tokens.reshape(batch, (frames + p_t - 1) // p_t, height // p, width // p, -1, p_t, p, p)
    return out.permute(0, 1, 5, 4, 2, 6, 3, 7).flatten(6, 7).flatten(4, 5).flatten(1, 2)
