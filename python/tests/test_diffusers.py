"""tessera.diffusers: diffusers' Flux and CogVideoX transformers (tiny, random weights) with
their attention through tessera.sp.Attention on 1, 2 and 4 rank threads: every rank's image rows
(Flux) and the video gathered from every rank's tokens (CogVideoX, with sincos positions and
with RoPE) equal the single-process diffusers forward with its own attention. Skipped without
torch and diffusers."""

import pytest

import tessera

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
import tessera.diffusers  # noqa: E402


def tiny_flux():
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=8, out_channels=8, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=4, joint_attention_dim=12,
        pooled_projection_dim=10, guidance_embeds=True, axes_dims_rope=(4, 6, 6)).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.3, 0.3)
    return model


@pytest.mark.parametrize("ranks,method", [(1, "ring"), (2, "ulysses"), (4, "usp"), (4, "auto")])
def test_flux_with_sequence_parallel_attention_matches_diffusers(ranks, method):
    model = tiny_flux()
    h, w, J = 4, 6, 5
    L = h * w
    g = torch.Generator().manual_seed(1)
    image = torch.randn(1, L, 8, generator=g)
    text = torch.randn(1, J, 12, generator=g)
    pooled = torch.randn(1, 10, generator=g)
    img_ids = torch.zeros(L, 3)
    img_ids[:, 1] = torch.arange(L) // w
    img_ids[:, 2] = torch.arange(L) % w
    args = dict(encoder_hidden_states=text, pooled_projections=pooled,
                timestep=torch.tensor([0.6]), txt_ids=torch.zeros(J, 3),
                guidance=torch.tensor([3.5]), return_dict=False)
    with torch.no_grad():
        want = model(hidden_states=image, img_ids=img_ids, **args)[0]
    assert tessera.diffusers.use_sequence_parallel(model) == 2  # one double, one single block

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=L, heads=4, head_dim=16, joint_tokens=J,
                                     method=method)
        rows = torch.from_numpy(layer.local_tokens)
        with torch.no_grad(), tessera.diffusers.sequence_parallel(layer):
            return rows, model(hidden_states=image[:, rows], img_ids=img_ids[rows], **args)[0]

    got = torch.full_like(want, float("nan"))
    for rows, out in tessera.run_cpu_ranks(ranks, rank):
        got[:, rows] = out
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()


def test_processor_outside_a_sequence_parallel_block_says_so():
    model = tiny_flux()
    tessera.diffusers.use_sequence_parallel(model)
    with pytest.raises(RuntimeError, match="sequence_parallel"):
        model(hidden_states=torch.randn(1, 4, 8), encoder_hidden_states=torch.randn(1, 2, 12),
              pooled_projections=torch.randn(1, 10), timestep=torch.tensor([0.5]),
              img_ids=torch.zeros(4, 3), txt_ids=torch.zeros(2, 3), guidance=torch.tensor([1.0]))


def tiny_cogvideox(rotary):
    torch.manual_seed(0)
    model = diffusers.CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        time_embed_dim=8, text_embed_dim=12, num_layers=2, sample_width=8, sample_height=8,
        sample_frames=5, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=5,
        use_rotary_positional_embeddings=rotary).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.3, 0.3)
    return model


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("ranks,method", [(1, "ring"), (2, "usp"), (4, "auto")])
def test_cogvideox_with_sequence_parallel_attention_matches_diffusers(rotary, ranks, method):
    model = tiny_cogvideox(rotary)
    g = torch.Generator().manual_seed(2)
    latent = torch.randn(1, 2, 4, 8, 8, generator=g)  # [B, F, C, H, W]: 2 x 4 x 4 tokens
    text = torch.randn(1, 5, 12, generator=g)
    L, J, D = 2 * 4 * 4, 5, 16
    rope = (torch.randn(L, D, generator=g), torch.randn(L, D, generator=g)) if rotary else None
    t = torch.tensor([500])
    with torch.no_grad():
        want = model(hidden_states=latent, encoder_hidden_states=text, timestep=t,
                     image_rotary_emb=rope, return_dict=False)[0]
    assert tessera.diffusers.use_sequence_parallel(model) == 2  # both blocks

    def rank(ctx):
        layer = tessera.sp.Attention(ctx, seq_len=L, heads=2, head_dim=D, joint_tokens=J,
                                     method=method)
        with torch.no_grad():
            return tessera.diffusers.cogvideox_forward(model, layer, latent, text, t,
                                                       image_rotary_emb=rope)

    tokens = None
    for rows, out in tessera.run_cpu_ranks(ranks, rank):
        if tokens is None:
            tokens = torch.full((1, L, out.shape[-1]), float("nan"))
        tokens[:, rows] = out
    got = tessera.diffusers.cogvideox_unpatchify(model, tokens, latent.shape)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()


def test_cogvideox_processor_outside_cogvideox_forward_says_so():
    model = tiny_cogvideox(False)
    tessera.diffusers.use_sequence_parallel(model)
    with pytest.raises(RuntimeError, match="cogvideox_forward"):
        model(hidden_states=torch.randn(1, 2, 4, 8, 8), encoder_hidden_states=torch.randn(1, 5, 12),
              timestep=torch.tensor([1]))
