"""tessera.decode.AttentionBlock on the cpu backend against a NumPy attention block (RMSNorm,
QKV projection, rotate-half RoPE, cache append, GQA attention over the cache, output
projection): the float64 reference plan (unfused) and the fused kernel's split dataflow in
float32 (fused), contiguous and paged caches, ragged positions; the cache written in place;
the errors, naming the argument."""

import numpy as np
import pytest

import tessera

SMALL = dict(hidden=64, num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=10000.0,
             rms_norm_eps=1e-5)
FUSABLE = dict(hidden=256, num_heads=4, num_kv_heads=2, head_dim=128, rope_theta=500000.0,
               rms_norm_eps=1e-5)  # what the fused dataflow takes: D 128, hidden % 128 == 0


def make_weights(m, rng):
    h, q, kv = m["hidden"], m["num_heads"] * m["head_dim"], m["num_kv_heads"] * m["head_dim"]
    s = h ** -0.5
    return {"wq": rng.uniform(-s, s, (q, h)), "wk": rng.uniform(-s, s, (kv, h)),
            "wv": rng.uniform(-s, s, (kv, h)), "wo": rng.uniform(-s, s, (h, q)),
            "input_norm": rng.uniform(0.5, 1.5, h)}


def rope(x, p, m):  # x [heads, D] at position p: Hugging Face's rotate_half
    d = m["head_dim"]
    angles = p * m["rope_theta"] ** (-np.arange(0, d, 2) / d)
    cos, sin = np.tile(np.cos(angles), 2), np.tile(np.sin(angles), 2)
    return x * cos + np.concatenate([-x[:, d // 2:], x[:, :d // 2]], -1) * sin


def reference_step(m, x, positions, w, keys, values):
    """out [B, hidden] and each sequence's new (k, v); keys/values[b]: the cached [p_b, Hkv, D]."""
    H, G, D = m["num_heads"], m["num_kv_heads"], m["head_dim"]
    xn = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + m["rms_norm_eps"]) * w["input_norm"]
    out, new = [], []
    for b, p in enumerate(positions):
        q = rope((xn[b] @ w["wq"].T).reshape(H, D), p, m)
        k = rope((xn[b] @ w["wk"].T).reshape(G, D), p, m)
        v = (xn[b] @ w["wv"].T).reshape(G, D)
        K, V = np.concatenate([keys[b], k[None]]), np.concatenate([values[b], v[None]])
        heads = []
        for h in range(H):
            g = h // (H // G)
            s = K[:, g] @ q[h] / np.sqrt(D)
            e = np.exp(s - s.max())
            heads.append(e / e.sum() @ V[:, g])
        out.append(np.concatenate(heads) @ w["wo"].T)
        new.append((k, v))
    return np.stack(out), new


@pytest.mark.parametrize("model,impl", [(SMALL, "unfused"), (FUSABLE, "fused"), (FUSABLE, "auto")])
@pytest.mark.parametrize("paged", [False, True])
def test_attention_block_matches_numpy(model, impl, paged):
    rng = np.random.default_rng(3)
    B, ctx, page = 3, 40, 8
    G, D = model["num_kv_heads"], model["head_dim"]
    positions = np.array([0, 7, 33], np.int32)
    w = make_weights(model, rng)
    w32 = {k: a.astype(np.float32) for k, a in w.items()}
    cached = [rng.uniform(-1, 1, (2, p, G, D)) for p in positions]
    block = tessera.decode.AttentionBlock(model, max_batch=B, max_context=ctx, dtype="float32",
                                          paged=paged, page_size=page, impl=impl)
    assert block.impl == ("unfused" if model is SMALL else "fused"), block.summary
    if paged:  # each sequence's pages, shuffled over the pool
        per_seq = ctx // page
        table = rng.permutation(B * per_seq).astype(np.int32).reshape(B, per_seq)
        k_cache = np.full((B * per_seq, page, G, D), np.nan, np.float32)
        v_cache = k_cache.copy()
        def at(b, t):
            return table[b, t // page], t % page
    else:
        table = None
        k_cache = np.full((B, ctx, G, D), np.nan, np.float32)
        v_cache = k_cache.copy()
        def at(b, t):
            return b, t
    for b, p in enumerate(positions):
        for t in range(p):
            k_cache[at(b, t)], v_cache[at(b, t)] = cached[b][0][t], cached[b][1][t]
    x = rng.uniform(-1, 1, (B, model["hidden"])).astype(np.float32)
    out = block(x, positions, w32, k_cache, v_cache, page_table=table)
    want, new = reference_step(model, x.astype(np.float64), positions, w,
                               [c[0] for c in cached], [c[1] for c in cached])
    assert out.dtype == np.float32 and out.shape == x.shape
    assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max(), block.summary
    for b, p in enumerate(positions):  # the new token's K and V were appended at p
        assert np.abs(k_cache[at(b, p)] - new[b][0]).max() <= 1e-4
        assert np.abs(v_cache[at(b, p)] - new[b][1]).max() <= 1e-4
    given = np.full_like(x, np.nan)
    assert block(x, positions, w32, k_cache, v_cache, page_table=table, out=given) is given
    assert np.abs(given - want).max() <= 1e-4 * np.abs(want).max()


def test_bad_arguments_name_themselves():
    rng = np.random.default_rng(4)
    w = {k: a.astype(np.float32) for k, a in make_weights(SMALL, rng).items()}
    with pytest.raises(tessera.InvalidArgumentError, match=r"model\['heads'\]: not a field"):
        tessera.decode.AttentionBlock(dict(SMALL, heads=4))
    with pytest.raises(tessera.InvalidArgumentError, match=r"model\['head_dim'\]: missing"):
        tessera.decode.AttentionBlock({k: v for k, v in SMALL.items() if k != "head_dim"})
    with pytest.raises(tessera.InvalidArgumentError, match="model = 'llama4'"):
        tessera.decode.AttentionBlock("llama4")
    with pytest.raises(tessera.InvalidArgumentError, match="impl = 'fast'"):
        tessera.decode.AttentionBlock(SMALL, impl="fast")
    with pytest.raises(tessera.InvalidArgumentError, match="device = 'gpu'"):
        tessera.decode.AttentionBlock(SMALL, device="gpu")
    block = tessera.decode.AttentionBlock(SMALL, max_batch=2, max_context=8, dtype="float32")
    x = np.zeros((2, 64), np.float32)
    k = np.zeros((2, 8, 2, 16), np.float32)
    positions = np.array([1, 2], np.int32)
    with pytest.raises(tessera.InvalidArgumentError, match="positions: dtype int64: expected int32"):
        block(x, positions.astype(np.int64), w, k, k.copy())
    with pytest.raises(tessera.InvalidArgumentError, match="positions: a list"):
        block(x, [1, 2], w, k, k.copy())
    with pytest.raises(tessera.InvalidArgumentError, match=r"weights\['wo'\]: missing"):
        block(x, positions, {n: a for n, a in w.items() if n != "wo"}, k, k.copy())
    with pytest.raises(tessera.InvalidArgumentError, match="weights.wq"):
        block(x, positions, dict(w, wq=w["wq"][:, :32].copy()), k, k.copy())
    with pytest.raises(tessera.InvalidArgumentError, match="cache.v"):
        block(x, positions, w, k, None)
