"""Tessera on a GPU from PyTorch: local attention against torch's SDPA on torch's current stream
and on a named one, outputs from torch's allocator, packed sequences (varlen) against SDPA per
sequence; sequence-parallel attention on a world of
one (tessera.cuda_context) for every method; the tensor-parallel operations there against
torch's matmul; the fused decode block against the NumPy block; local and sequence-parallel
attention captured in torch.cuda.graph and replayed with new inputs; the Llama model runtime
on cuda against the NumPy Llama; diffusers' Flux and CogVideoX with Tessera's attention against
diffusers' own. Skipped without torch, a GPU or a cuda build (CI has none; the GPU machine runs
it: scripts/gpu_python.sh)."""

import itertools
import json

import numpy as np
import pytest

import tessera

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or "cuda" not in tessera.info()["backends"]:
    pytest.skip("needs a GPU and a cuda build of Tessera", allow_module_level=True)

DEVICE = torch.device("cuda", 0)


def sdpa(q, k, v, causal=False, dtype=None):
    """torch's SDPA on [B, L, H, D] tensors (GQA by repeating k and v), in `dtype`."""
    group = q.shape[2] // k.shape[2]
    dtype = dtype or q.dtype
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k.repeat_interleave(group, 2),
                                                     v.repeat_interleave(group, 2)))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)


def assert_fa3_close(got, q, k, v, causal, what):
    """FlashAttention-3's rule: the error against float32 within twice torch's own error in the
    input dtype, plus the output rounding."""
    want = sdpa(q, k, v, causal, torch.float32)
    own = (sdpa(q, k, v, causal).float() - want).abs().max().item()
    rounding = (want.to(q.dtype).float() - want).abs().max().item()
    err = (got.float() - want).abs().max().item()
    assert torch.isfinite(got).all(), f"{what}: non-finite output"
    assert err <= 2 * own + rounding + 1e-6, f"{what}: error {err} vs torch's own {own}"


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=DEVICE, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_sdpa_on_the_current_stream(dtype, head_dim, causal):
    q = randn(2, 333, 8, head_dim, dtype=dtype, seed=1)
    k, v = randn(2, 333, 2, head_dim, dtype=dtype, seed=2), randn(2, 333, 2, head_dim, dtype=dtype, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the call follows torch's current stream, here `side`
        o = tessera.attention(q, k, v, causal=causal)
    side.synchronize()
    assert isinstance(o, torch.Tensor) and o.device == DEVICE and o.dtype == dtype
    assert o.shape == q.shape
    assert_fa3_close(o, q, k, v, causal, f"{dtype} D{head_dim} causal={causal}")


def test_out_and_stream_given():
    q, k, v = (randn(1, 256, 4, 128, seed=s) for s in (4, 5, 6))
    out = torch.full_like(q, float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    assert tessera.attention(q, k, v, out=out, stream=stream.cuda_stream) is out
    stream.synchronize()
    assert_fa3_close(out, q, k, v, False, "out and stream given")


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_varlen_matches_sdpa_per_sequence(head_dim, causal):
    lens = [300, 1, 77, 0, 129]
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=DEVICE)
    total = sum(lens)
    q = randn(total, 8, head_dim, seed=7)
    k, v = randn(total, 2, head_dim, seed=8), randn(total, 2, head_dim, seed=9)
    o = tessera.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
    torch.cuda.synchronize()
    assert o.shape == q.shape and o.dtype == q.dtype
    for b, n in enumerate(lens):
        if n == 0:
            continue
        rows = slice(int(cu[b]), int(cu[b + 1]))
        assert_fa3_close(o[None, rows], q[None, rows], k[None, rows], v[None, rows], causal,
                         f"varlen D{head_dim} causal={causal} sequence {b}")


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_matches_sdpa_on_the_dequantized_inputs(head_dim, causal):
    # Per-head quantization in torch (as TransformerEngine keeps scale_inv), fp8 tensors in.
    def quantize(x):
        descale = (x.float().abs().amax(dim=(0, 1, 3)) / 448).clamp_min(1e-12)
        return (x.float() / descale[None, None, :, None]).to(torch.float8_e4m3fn), descale

    q, k, v = (quantize(randn(2, 640, h, head_dim, seed=s)) for s, h in ((30, 8), (31, 2), (32, 2)))
    o = tessera.attention_fp8(q[0], k[0], v[0], q[1], k[1], v[1], causal=causal)
    torch.cuda.synchronize()
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16 and o.shape == q[0].shape
    deq = [(x.float() * d[None, None, :, None]) for x, d in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(
        deq[0].transpose(1, 2), deq[1].transpose(1, 2), deq[2].transpose(1, 2),
        is_causal=causal, enable_gqa=True).transpose(1, 2)
    err = (o.float() - want).abs().max().item()
    # P is rounded to e4m3 before the PV product (as FlashAttention-3): 3 mantissa bits.
    assert err <= 0.05 * want.abs().max().item(), f"fp8 D{head_dim} causal={causal}: {err}"


def test_bad_cuda_input_names_the_argument():
    q = randn(1, 16, 2, 64)
    with pytest.raises(tessera.InvalidArgumentError, match="k: on cpu"):
        tessera.attention(q, q.cpu(), q)
    with pytest.raises(tessera.InvalidArgumentError, match="return_lse"):
        tessera.attention(q, q, q, return_lse=True)
    with pytest.raises(tessera.InvalidArgumentError, match="out: dtype"):
        tessera.attention(q, q, q, out=torch.empty_like(q, dtype=torch.float16))


@pytest.fixture(scope="module")
def ctx():
    with tessera.cuda_context(heap_bytes=256 << 20) as c:
        yield c
    assert not c.is_open


def whole_sequence(J, L, H, Hkv, D, seed):
    return (randn(1, J + L, H, D, seed=seed), randn(1, J + L, Hkv, D, seed=seed + 1),
            randn(1, J + L, Hkv, D, seed=seed + 2))


@pytest.mark.parametrize("method", ["ring", "ulysses", "usp", "tas", "torus", "mesh", "auto"])
def test_sequence_parallel_attention_on_a_world_of_one(ctx, method):
    assert (ctx.rank, ctx.size, ctx.backend, ctx.device) == (0, 1, "cuda", "cuda:0")
    J, L, H, Hkv, D = 77, 1021, 8, 2, 128
    q, k, v = whole_sequence(J, L, H, Hkv, D, seed=10)
    layer = tessera.sp.Attention(ctx, seq_len=L, heads=H, kv_heads=Hkv, head_dim=D,
                                 dtype="bfloat16", joint_tokens=J, causal=True, method=method)
    rows = torch.from_numpy(layer.local_tokens).to(DEVICE) + J
    out, joint_out = layer(q[:, rows], k[:, rows], v[:, rows], joint_q=q[:, :J].contiguous(),
                           joint_k=k[:, :J].contiguous(), joint_v=v[:, :J].contiguous())
    assert isinstance(out, torch.Tensor) and isinstance(joint_out, torch.Tensor)
    torch.cuda.current_stream().synchronize()
    got = torch.empty_like(q)
    got[:, rows], got[:, :J] = out, joint_out
    assert_fa3_close(got, q, k, v, True, f"sp {method} ({layer.summary})")


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_a2a"])
def test_tp_operation_on_a_world_of_one_matches_torch(ctx, op):
    M, N, K = 300, 256, 512
    a, w, bias = randn(M, K, seed=50), randn(N, K, seed=51), randn(N, seed=52)
    layer = tessera.tp.Operation(ctx, op=op, m=M, n=N, k=K, dtype="bfloat16", bias=True)
    out = layer(a, w, bias)  # w as nn.Linear holds it: [N, K]
    torch.cuda.current_stream().synchronize()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (M, N)
    want = a.float() @ w.float().T + bias.float()
    err = (out.float() - want).abs().max().item()
    assert err <= 1e-2 * want.abs().max().item(), f"{op} ({layer.summary}): error {err}"


def test_tp_loopback_matches_torch_on_the_gathered_rows():
    P, M, N, K = 4, 1000, 4 * 256, 512  # M not a multiple of P: shares of 250 rows
    layer = tessera.tp.Loopback(m=M, n=N, k=K, ranks=P, dtype="bfloat16", bias=True, comm_rows=96)
    a = [randn(*layer.shapes(r)["a"], seed=60 + r) for r in range(P)]
    w = [randn(*layer.shapes(r)["b"], seed=70 + r) for r in range(P)]
    bias = [randn(1, layer.shapes(r)["bias"], seed=80 + r) for r in range(P)]
    out = layer(a, w, bias)
    torch.cuda.current_stream().synchronize()
    gathered = torch.cat(a).float()
    for r in range(P):
        assert isinstance(out[r], torch.Tensor) and out[r].shape == (M, N // P)
        want = gathered @ w[r].float().T + bias[r].float()
        err = (out[r].float() - want).abs().max().item()
        assert err <= 1e-2 * want.abs().max().item(), f"rank {r} ({layer.gemm_config}): {err}"
    with pytest.raises(tessera.InvalidArgumentError, match=r"a holds 3 arrays: expected one per rank \(4\)"):
        layer(a[:3], w, bias)


def test_tp_loopback_owner_operations_match_torch():
    P, M, N, K = 4, 1000, 4 * 128, 512
    a2a = tessera.tp.Loopback(op="gemm_a2a", m=M, n=N, k=K, ranks=P)
    a = [randn(*a2a.shapes(r)["a"], seed=90 + r) for r in range(P)]
    w = randn(N, K, seed=95)  # every rank holds the whole weight
    out = a2a(a, [w] * P)
    torch.cuda.current_stream().synchronize()
    want = torch.cat(a).float() @ w.float().T
    for o in range(P):  # owner o: its heads (columns) of every token
        cols = want[:, o * N // P:(o + 1) * N // P]
        err = (out[o].float() - cols).abs().max().item()
        assert err <= 1e-2 * cols.abs().max().item(), f"gemm_a2a owner {o}: {err}"

    rs = tessera.tp.Loopback(op="gemm_rs", m=M, n=N, k=K, ranks=P)
    a = [randn(*rs.shapes(r)["a"], seed=100 + r) for r in range(P)]  # [M, K/P]
    w = [randn(*rs.shapes(r)["b"], seed=110 + r) for r in range(P)]  # [N, K/P]
    out = rs(a, w)
    torch.cuda.current_stream().synchronize()
    want = sum(a[r].float() @ w[r].float().T for r in range(P))
    for o in range(P):  # owner o: its rows of the sum
        rows = want[o * M // P:(o + 1) * M // P]
        err = (out[o].float() - rows).abs().max().item()
        assert err <= 2e-2 * rows.abs().max().item(), f"gemm_rs owner {o}: {err}"


def test_fused_decode_block_matches_numpy():
    from test_decode import FUSABLE, make_weights, reference_step

    rng = np.random.default_rng(5)
    B, ctx_len, G, D = 3, 64, FUSABLE["num_kv_heads"], FUSABLE["head_dim"]
    block = tessera.decode.AttentionBlock(FUSABLE, max_batch=B, max_context=ctx_len,
                                          dtype="bfloat16", device="cuda:0", impl="fused")
    assert block.impl == "fused", block.summary
    to_gpu = lambda a: torch.from_numpy(np.asarray(a, np.float32)).to(DEVICE, torch.bfloat16)
    w = {k: to_gpu(a) for k, a in make_weights(FUSABLE, rng).items()}
    w64 = {k: t.double().cpu().numpy() for k, t in w.items()}  # what the kernel reads
    positions = np.array([0, 9, 50], np.int32)
    k_cache = to_gpu(rng.uniform(-1, 1, (B, ctx_len, G, D)))
    v_cache = to_gpu(rng.uniform(-1, 1, (B, ctx_len, G, D)))
    keys = [k_cache[b, :p].double().cpu().numpy() for b, p in enumerate(positions)]
    values = [v_cache[b, :p].double().cpu().numpy() for b, p in enumerate(positions)]
    x = to_gpu(rng.uniform(-1, 1, (B, FUSABLE["hidden"])))
    out = block(x, torch.from_numpy(positions).to(DEVICE), w, k_cache, v_cache)
    torch.cuda.current_stream().synchronize()
    want, _ = reference_step(FUSABLE, x.double().cpu().numpy(), positions, w64, keys, values)
    err = np.abs(out.double().cpu().numpy() - want).max()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert err <= 2e-2 * np.abs(want).max(), f"{block.summary}: error {err}"


def test_calls_captured_in_a_torch_cuda_graph_replay_with_new_inputs(ctx):
    q, k, v = (randn(1, 512, 8, 128, seed=s) for s in (20, 21, 22))
    layer = tessera.sp.Attention(ctx, seq_len=512, heads=8, head_dim=128, dtype="bfloat16",
                                 method="usp")
    out, sp_out = torch.empty_like(q), torch.empty_like(q)
    side = torch.cuda.Stream()  # warm up off the capture, as torch's docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tessera.attention(q, k, v, causal=True, out=out)
        layer(q, k, v, out=sp_out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # both calls on the capture stream, torch's current one
        tessera.attention(q, k, v, causal=True, out=out)
        layer(q, k, v, out=sp_out)
    for seed in (30, 40):
        for x, s in zip((q, k, v), range(seed, seed + 3)):
            x.copy_(randn(*x.shape, seed=s))
        out.fill_(float("nan"))
        sp_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = tessera.attention(q, k, v, causal=True)
        eager_sp = layer(q, k, v)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), "replayed attention is not bitwise the eager call"
        assert torch.equal(sp_out, eager_sp), "replayed sp.Attention is not bitwise the eager call"
        assert_fa3_close(out, q, k, v, True, "graph replay")


def test_llama_on_cuda_matches_the_numpy_llama(tmp_path):
    from test_model import NumpyLlama, random_weights, write_safetensors

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320,
              "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
              "tie_word_embeddings": False}
    weights = random_weights(np.random.default_rng(3), config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "model.safetensors", weights)
    m = tessera.model.Llama(str(tmp_path), weights=str(tmp_path), backend="cuda")
    ref = NumpyLlama(config, weights)
    assert m.backend == "cuda"
    a, b = m.add_sequence(), m.add_sequence()
    prompt_a, prompt_b = list(range(5, 40)), [7, 319, 2]
    got = m.forward([(a, prompt_a), (b, prompt_b)], rows="last")
    want = np.stack([ref.forward(a, prompt_a)[-1], ref.forward(b, prompt_b)[-1]])
    for step in range(4):  # bf16 weights and activations: within 3% of the largest logit
        assert np.abs(got - want).max() <= 0.03 * np.abs(want).max(), f"step {step}"
        tokens = [int(want[0].argmax()), int(want[1].argmax())]
        got = m.forward([(a, [tokens[0]]), (b, [tokens[1]])], rows="last")
        want = np.stack([ref.forward(a, [tokens[0]])[-1], ref.forward(b, [tokens[1]])[-1]])


def test_llama_strategies_on_cuda_match_the_unscheduled_forward(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320,
              "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512}
    (tmp_path / "config.json").write_text(json.dumps(config))

    def run(strategy):
        m = tessera.model.Llama(str(tmp_path), seed=5, backend="cuda")
        a, b, c = m.add_sequence(), m.add_sequence(), m.add_sequence()
        inputs = [(a, list(range(3, 43))), (b, list(range(7, 57))), (c, [1, 2, 3])]
        logits = [m.forward(inputs, rows="last", strategy=strategy)]
        for step in range(4):  # decode steps: eager, captured, then replayed
            logits.append(m.forward([(s, [step + 1]) for s in (a, b, c)], rows="last",
                                    strategy=strategy))
        return np.concatenate(logits)

    plain = run(None)
    assert np.array_equal(run("sequential"), plain)
    for name in ("nanoflow", "dual_batch", "tokenweave"):
        got = run(name)
        assert np.abs(got - plain).max() <= 0.01 * np.abs(plain).max(), name

    class Mine:
        def split(self, lengths):
            return [len(lengths)]

        def schedule(self, ctx):
            while ctx.ready(0) is not None:
                ctx.run_next(0)

    m = tessera.model.Llama(str(tmp_path), backend="cuda")
    with pytest.raises(tessera.UnsupportedError, match="expected a built-in strategy's name"):
        m.forward([(m.add_sequence(), [1, 2])], strategy=Mine())


def test_diffusers_flux_with_tessera_attention_on_cuda(ctx):
    diffusers = pytest.importorskip("diffusers")
    import tessera.diffusers

    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=8, out_channels=8, num_layers=1, num_single_layers=1,
        attention_head_dim=64, num_attention_heads=2, joint_attention_dim=12,
        pooled_projection_dim=10, guidance_embeds=True, axes_dims_rope=(16, 24, 24)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.1, 0.1)
    model = model.to(DEVICE)
    h, w, J = 16, 24, 7
    L = h * w
    g = torch.Generator().manual_seed(1)
    image = torch.randn(1, L, 8, generator=g).to(DEVICE)
    args = dict(encoder_hidden_states=torch.randn(1, J, 12, generator=g).to(DEVICE),
                pooled_projections=torch.randn(1, 10, generator=g).to(DEVICE),
                timestep=torch.tensor([0.6], device=DEVICE), txt_ids=torch.zeros(J, 3, device=DEVICE),
                guidance=torch.tensor([3.5], device=DEVICE), return_dict=False)
    img_ids = torch.zeros(L, 3, device=DEVICE)
    img_ids[:, 1] = torch.arange(L, device=DEVICE) // w
    img_ids[:, 2] = torch.arange(L, device=DEVICE) % w

    def run(m, dtype, rows=None):
        kwargs = {k: (x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() and k != "txt_ids"
                      else x) for k, x in args.items()}
        with torch.no_grad():
            if rows is None:
                return m.to(dtype)(hidden_states=image.to(dtype), img_ids=img_ids, **kwargs)[0]
            return m.to(dtype)(hidden_states=image[:, rows].to(dtype), img_ids=img_ids[rows],
                               **kwargs)[0]

    want = run(model, torch.float32).float()
    own = (run(model, torch.bfloat16).float() - want).abs().max().item()
    assert tessera.diffusers.use_sequence_parallel(model) == 2
    layer = tessera.sp.Attention(ctx, seq_len=L, heads=2, head_dim=64, joint_tokens=J,
                                 dtype="bfloat16", method="auto")
    rows = torch.from_numpy(layer.local_tokens).to(DEVICE)
    with tessera.diffusers.sequence_parallel(layer):
        out = run(model, torch.bfloat16, rows)
    got = torch.empty_like(want)
    got[:, rows] = out.float()
    err = (got - want).abs().max().item()
    assert err <= 2 * own + 1e-3 * want.abs().max().item(), f"error {err} vs diffusers' own {own}"


def test_diffusers_cogvideox_with_tessera_attention_on_cuda(ctx):
    diffusers = pytest.importorskip("diffusers")
    import tessera.diffusers

    torch.manual_seed(0)
    model = diffusers.CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
        time_embed_dim=32, text_embed_dim=12, num_layers=2, sample_width=16, sample_height=16,
        sample_frames=9, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=7,
        use_rotary_positional_embeddings=True).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.1, 0.1)
    model = model.to(DEVICE)
    g = torch.Generator().manual_seed(2)
    latent = torch.randn(1, 3, 4, 16, 16, generator=g).to(DEVICE)  # 3 x 8 x 8 image tokens
    text = torch.randn(1, 7, 12, generator=g).to(DEVICE)
    L, J, D = 3 * 8 * 8, 7, 64
    rope = tuple(torch.randn(L, D, generator=g).to(DEVICE) for _ in range(2))
    t = torch.tensor([500], device=DEVICE)

    def run(dtype):
        with torch.no_grad():
            return model.to(dtype)(hidden_states=latent.to(dtype), encoder_hidden_states=text.to(dtype),
                                   timestep=t, image_rotary_emb=rope, return_dict=False)[0].float()

    want = run(torch.float32)
    own = (run(torch.bfloat16) - want).abs().max().item()
    assert tessera.diffusers.use_sequence_parallel(model) == 2
    layer = tessera.sp.Attention(ctx, seq_len=L, heads=2, head_dim=D, joint_tokens=J,
                                 dtype="bfloat16", method="auto")
    with torch.no_grad():
        rows, tokens = tessera.diffusers.cogvideox_forward(
            model, layer, latent.bfloat16(), text.bfloat16(), t, image_rotary_emb=rope)
    full = torch.empty(1, L, tokens.shape[-1], device=DEVICE)
    full[:, rows] = tokens.float()
    got = tessera.diffusers.cogvideox_unpatchify(model, full, latent.shape)
    err = (got - want).abs().max().item()
    assert err <= 2 * own + 1e-3 * want.abs().max().item(), f"error {err} vs diffusers' own {own}"
