#include "tessera/model/llama_layer.h"

#include <cmath>
#include <cstring>

#include "linear.h"
#include "tessera/attn/reference.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"

namespace tessera::model {
namespace {

TensorView rows_view(std::vector<float>& data, int64_t rows, int64_t cols) {
  return TensorView(data.data(), DType::kF32, Device::cpu(), {rows, cols});
}

TensorView vector_view(const std::vector<float>& data) {
  return TensorView(const_cast<float*>(data.data()), DType::kF32, Device::cpu(),
                    {int64_t(data.size())});
}

void check_size(const std::vector<float>& weight, int64_t expected, int64_t layer,
                const char* name) {
  TESSERA_CHECK_ARG(int64_t(weight.size()) == expected, "LlamaLayer: layer ", layer, " weight ",
                    name, " has ", weight.size(), " elements: expected ", expected);
}

}  // namespace

LlamaLayer::LlamaLayer(const DecoderConfig& config, const LlamaShapes& shapes, int64_t layer_idx,
                       LlamaLayerWeights weights, const std::vector<float>* inv_freq)
    : shapes_(shapes),
      layer_idx_(layer_idx),
      eps_(float(config.rms_norm_eps)),
      w_(std::move(weights)),
      inv_freq_(inv_freq) {
  const int64_t c = shapes.hidden, qw = shapes.q_width(), kvw = shapes.kv_width();
  const int64_t f = shapes.intermediate;
  check_size(w_.input_norm, c, layer_idx, "input_layernorm");
  check_size(w_.q, qw * c, layer_idx, "q_proj");
  check_size(w_.k, kvw * c, layer_idx, "k_proj");
  check_size(w_.v, kvw * c, layer_idx, "v_proj");
  if (config.qkv_bias) {
    check_size(w_.q_bias, qw, layer_idx, "q_proj.bias");
    check_size(w_.k_bias, kvw, layer_idx, "k_proj.bias");
    check_size(w_.v_bias, kvw, layer_idx, "v_proj.bias");
  }
  check_size(w_.o, c * qw, layer_idx, "o_proj");
  check_size(w_.post_norm, c, layer_idx, "post_attention_layernorm");
  check_size(w_.gate, f * c, layer_idx, "gate_proj");
  check_size(w_.up, f * c, layer_idx, "up_proj");
  check_size(w_.down, c * f, layer_idx, "down_proj");
  TESSERA_CHECK_ARG(inv_freq != nullptr && int64_t(inv_freq->size()) * 2 <= shapes.head_dim,
                    "LlamaLayer: inv_freq: expected at most head_dim / 2 = ", shapes.head_dim / 2,
                    " frequencies");
}

void LlamaLayer::forward(const PackedBatch& batch, std::vector<float>& x,
                         std::vector<float>& residual, PagedKvCache& cache, Communicator* comm,
                         const Stream& stream) const {
  const int64_t t = batch.total_tokens(), c = shapes_.hidden, d = shapes_.head_dim;
  const int64_t qw = shapes_.q_width(), kvw = shapes_.kv_width(), f = shapes_.intermediate;
  TESSERA_CHECK_ARG(int64_t(x.size()) == t * c && int64_t(residual.size()) == t * c,
                    "LlamaLayer::forward: x and residual: expected ", t, " x ", c, " floats");
  TESSERA_CHECK_ARG(
      (comm == nullptr && shapes_.ranks == 1) ||
          (comm != nullptr && comm->size() == shapes_.ranks && comm->rank() == shapes_.rank),
      "LlamaLayer::forward: comm: expected the group of rank ", shapes_.rank, " of ", shapes_.ranks,
      " (null for one rank)");
  if (t == 0) return;
  const Device cpu = Device::cpu();
  const TensorView res = rows_view(residual, t, c);
  std::vector<float> h(size_t(t * c));
  rms_norm(rows_view(x, t, c), {res, res}, vector_view(w_.input_norm), eps_, rows_view(h, t, c),
           stream);

  std::vector<float> q(size_t(t * qw)), k(size_t(t * kvw)), v(size_t(t * kvw));
  linear(h.data(), t, c, w_.q, w_.q_bias, q.data(), qw, stream);
  linear(h.data(), t, c, w_.k, w_.k_bias, k.data(), kvw, stream);
  linear(h.data(), t, c, w_.v, w_.v_bias, v.data(), kvw, stream);
  const TensorView positions(const_cast<int32_t*>(batch.positions.data()), DType::kI32, cpu, {t});
  const TensorView q_heads(q.data(), DType::kF32, cpu, {t, shapes_.q_heads, d});
  const TensorView k_heads(k.data(), DType::kF32, cpu, {t, shapes_.kv_heads, d});
  rope(q_heads, positions, vector_view(*inv_freq_), q_heads, stream);
  rope(k_heads, positions, vector_view(*inv_freq_), k_heads, stream);
  const TensorView v_heads(v.data(), DType::kF32, cpu, {t, shapes_.kv_heads, d});
  for (const PackedSequence& s : batch.sequences) {
    cache.write(layer_idx_, s.seq_id, s.start, k_heads.slice(0, s.first_row, s.num_tokens),
                v_heads.slice(0, s.first_row, s.num_tokens));
  }

  std::vector<float> attn(size_t(t * qw)), partial(size_t(t * c));
  attend(batch, q, cache, attn);
  linear(attn.data(), t, qw, w_.o, {}, partial.data(), c, stream);
  sum_over_ranks(partial, x, comm, stream);

  rms_norm(rows_view(x, t, c), {res, res}, vector_view(w_.post_norm), eps_, rows_view(h, t, c),
           stream);
  std::vector<float> gate(size_t(t * f)), up(size_t(t * f));
  linear(h.data(), t, c, w_.gate, {}, gate.data(), f, stream);
  linear(h.data(), t, c, w_.up, {}, up.data(), f, stream);
  silu_and_mul(rows_view(gate, t, f), rows_view(up, t, f), rows_view(gate, t, f), stream);
  linear(gate.data(), t, f, w_.down, {}, partial.data(), c, stream);
  sum_over_ranks(partial, x, comm, stream);
}

void LlamaLayer::attend(const PackedBatch& batch, const std::vector<float>& q,
                        const PagedKvCache& cache, std::vector<float>& out) const {
  const int64_t hq = shapes_.q_heads, d = shapes_.head_dim, qw = shapes_.q_width();
  const float scale = 1.0f / std::sqrt(float(d));
  for (const PackedSequence& s : batch.sequences) {
    if (s.num_tokens == 0) continue;
    float* q_rows = const_cast<float*>(q.data()) + s.first_row * qw;
    const TensorView q_seq(q_rows, DType::kF32, Device::cpu(), {1, s.num_tokens, hq, d});
    const std::vector<attn::KvChunk> chunks =
        cache.kv_chunks(layer_idx_, s.seq_id, s.start + s.num_tokens, s.start);
    const attn::ReferenceResult r = attn::reference_attention(q_seq, chunks, scale);
    std::memcpy(out.data() + s.first_row * qw, r.o.data(), r.o.size() * sizeof(float));
  }
}

void LlamaLayer::sum_over_ranks(std::vector<float>& partial, std::vector<float>& out,
                                Communicator* comm, const Stream& stream) const {
  if (comm == nullptr) {
    out = partial;
    return;
  }
  const int64_t n = int64_t(partial.size());
  comm->all_reduce(TensorView(partial.data(), DType::kF32, Device::cpu(), {n}),
                   TensorView(out.data(), DType::kF32, Device::cpu(), {n}), ReduceOp::kSum, stream);
  comm->synchronize(stream);
}

}  // namespace tessera::model
