"""tessera.model.Llama on the cpu backend against a NumPy Llama written here from the Hugging
Face definition (RMSNorm, rotate-half RoPE, causal GQA attention, SiLU MLP), on weights this
test writes as .safetensors with a config.json; greedy generation; the errors."""

import json
import struct

import numpy as np
import pytest

import tessera

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 61,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def random_weights(rng, c):
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    w = {"model.embed_tokens.weight": rng.normal(0, 1, (v, h)),
         "model.norm.weight": rng.uniform(0.5, 1.5, h),
         "lm_head.weight": rng.normal(0, h ** -0.5, (v, h))}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, h)
        w[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, h)
        for name, shape in [("self_attn.q_proj", (q, h)), ("self_attn.k_proj", (kv, h)),
                            ("self_attn.v_proj", (kv, h)), ("self_attn.o_proj", (h, q)),
                            ("mlp.gate_proj", (f, h)), ("mlp.up_proj", (f, h)),
                            ("mlp.down_proj", (h, f))]:
            w[p + name + ".weight"] = rng.normal(0, shape[1] ** -0.5, shape)
    return {k: np.asarray(a, np.float32) for k, a in w.items()}


class NumpyLlama:
    """transformers' LlamaForCausalLM forward in float64, keeping each sequence's keys and
    values (post-RoPE) for decoding."""

    def __init__(self, c, w):
        self.c, self.w = c, {k: a.astype(np.float64) for k, a in w.items()}
        self.cache = {}

    def norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + self.c["rms_norm_eps"]) * weight

    def rope(self, x, positions):  # x [T, heads, D]
        d = self.c["head_dim"]
        inv = 1.0 / self.c["rope_theta"] ** (np.arange(0, d, 2) / d)
        angles = np.outer(positions, inv)
        cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None]
        sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None]
        rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
        return x * cos + rotated * sin

    def forward(self, seq, tokens):
        c, w = self.c, self.w
        hq, hkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        layers = self.cache.setdefault(seq, [[np.zeros((0, hkv, d))] * 2
                                             for _ in range(c["num_hidden_layers"])])
        start = layers[0][0].shape[0]
        positions = np.arange(start, start + len(tokens))
        x = w["model.embed_tokens.weight"][tokens]
        for i, kv in enumerate(layers):
            p = f"model.layers.{i}."
            h = self.norm(x, w[p + "input_layernorm.weight"])
            q = self.rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(-1, hq, d), positions)
            k = self.rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(-1, hkv, d), positions)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(-1, hkv, d)
            kv[0], kv[1] = np.concatenate([kv[0], k]), np.concatenate([kv[1], v])
            keys = np.repeat(kv[0], hq // hkv, axis=1)
            values = np.repeat(kv[1], hq // hkv, axis=1)
            scores = np.einsum("thd,shd->hts", q, keys) / np.sqrt(d)
            scores[:, np.arange(scores.shape[2])[None, :] > positions[:, None]] = -np.inf
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            attn = np.einsum("hts,shd->thd", probs, values).reshape(len(tokens), hq * d)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            h = self.norm(x, w[p + "post_attention_layernorm.weight"])
            gate = h @ w[p + "mlp.gate_proj.weight"].T
            up = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        return self.norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


@pytest.fixture
def checkpoint(tmp_path, rng):
    weights = random_weights(rng, CONFIG)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(tmp_path / "model.safetensors", weights)
    return str(tmp_path), weights


def assert_close(got, want, what):
    assert got.shape == want.shape, what
    bound = 1e-4 * np.abs(want).max()
    worst = np.abs(got - want).max()
    assert worst <= bound, f"{what}: worst |diff| {worst} > {bound}"


def test_prefill_and_decode_match_a_numpy_llama(checkpoint):
    path, weights = checkpoint
    m = tessera.model.Llama(path, weights=path)
    ref = NumpyLlama(CONFIG, weights)
    assert (m.vocab_size, m.num_layers, m.hidden_size, m.backend) == (61, 2, 32, "cpu")
    a, b = m.add_sequence(), m.add_sequence()
    prompt_a, prompt_b = [3, 17, 42, 5, 60, 0, 9], [11, 2, 33]
    got = m.forward([(a, prompt_a), (b, prompt_b)])  # every row
    want = np.concatenate([ref.forward(a, prompt_a), ref.forward(b, prompt_b)])
    assert got.dtype == np.float32
    assert_close(got, want, "prefill")
    for step in range(3):  # decode both, then one more token for a only
        inputs = [(a, [int(want[len(prompt_a) - 1 if step == 0 else 0].argmax())])]
        if step < 2:
            inputs.append((b, [7 + step]))
        got = m.forward(inputs, rows="last")
        want = np.concatenate([ref.forward(s, t) for s, t in inputs])
        assert_close(got, want, f"decode step {step}")
    assert m.length(a) == len(prompt_a) + 3 and m.length(b) == len(prompt_b) + 2
    m.release_sequence(b)


def test_generate_is_the_greedy_chain(checkpoint):
    path, weights = checkpoint
    m = tessera.model.Llama(path, weights=path)
    ref = NumpyLlama(CONFIG, weights)
    prompt = [1, 2, 3, 4]
    logits = ref.forward(0, prompt)
    want = []
    for _ in range(6):
        want.append(int(logits[-1].argmax()))
        logits = ref.forward(0, [want[-1]])
    assert m.generate(prompt, steps=6) == want


def test_presets_and_random_weights_are_deterministic():
    first = tessera.model.Llama("tiny", seed=5).generate([1, 2, 3], steps=4)
    assert first == tessera.model.Llama("tiny", seed=5).generate([1, 2, 3], steps=4)
    assert all(0 <= t < 97 for t in first)


def test_bad_arguments_name_themselves(checkpoint):
    path, _ = checkpoint
    with pytest.raises(tessera.InvalidArgumentError, match="config = 'nope'"):
        tessera.model.Llama("nope")
    with pytest.raises(tessera.InvalidArgumentError, match="backend = 'tpu'"):
        tessera.model.Llama("tiny", backend="tpu")
    with pytest.raises(tessera.InvalidArgumentError, match="num_pages = 0"):
        tessera.model.Llama("tiny", num_pages=0)
    m = tessera.model.Llama(path, weights=path)
    seq = m.add_sequence()
    with pytest.raises(tessera.InvalidArgumentError, match="rows = 'first'"):
        m.forward([(seq, [1])], rows="first")
    with pytest.raises(tessera.InvalidArgumentError, match="61"):
        m.forward([(seq, [61])])  # outside the vocabulary
    with pytest.raises(tessera.InvalidArgumentError, match="inputs is empty"):
        m.forward([])
    with pytest.raises(tessera.InvalidArgumentError, match="steps = -1"):
        m.generate([1], steps=-1)
    with pytest.raises(tessera.Error, match="missing.safetensors"):
        tessera.model.Llama(path, weights=path + "/missing.safetensors")


@pytest.mark.skipif("cuda" in tessera.info()["backends"], reason="this build has cuda")
def test_cuda_backend_is_refused_by_a_cpu_build():
    with pytest.raises(tessera.UnsupportedError, match="no cuda backend"):
        tessera.model.Llama("tiny", backend="cuda")
