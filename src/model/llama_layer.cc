#include "tessera/model/llama_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "linear.h"
#include "tessera/attn/reference.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"
#include "tessera/tp/operation.h"

namespace tessera::model {
namespace {

// The rows [first, first + count) of `range`'s sequences (contiguous in a packed batch).
struct Rows {
  int64_t first = 0, count = 0;
};
Rows rows_of(const PackedBatch& batch, SequenceRange range) {
  if (range.begin == range.end) return {};
  const PackedSequence& first = batch.sequences[range.begin];
  const PackedSequence& last = batch.sequences[range.end - 1];
  return {first.first_row, last.first_row + last.num_tokens - first.first_row};
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

const char* llama_op_name(LlamaOp op) {
  switch (op) {
    case LlamaOp::kAttnNorm: return "attn_norm";
    case LlamaOp::kQkv: return "qkv";
    case LlamaOp::kAttention: return "attention";
    case LlamaOp::kOProj: return "o_proj";
    case LlamaOp::kOAllReduce: return "o_all_reduce";
    case LlamaOp::kMlpNorm: return "mlp_norm";
    case LlamaOp::kGateUp: return "gate_up";
    case LlamaOp::kDown: return "down";
    case LlamaOp::kMlpAllReduce: return "mlp_all_reduce";
  }
  return "?";
}

LlamaOp parse_llama_op(std::string_view name, const char* what) {
  for (int i = 0; i < kLlamaOps; ++i) {
    if (name == llama_op_name(LlamaOp(i))) return LlamaOp(i);
  }
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", name,
                  "': expected attn_norm, qkv, attention, o_proj, o_all_reduce, mlp_norm, "
                  "gate_up, down or mlp_all_reduce"));
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kCompute: return "compute";
    case OpKind::kMemory: return "memory";
    case OpKind::kNetwork: return "network";
  }
  return "?";
}

OpKind llama_op_kind(LlamaOp op) {
  switch (op) {
    case LlamaOp::kQkv:
    case LlamaOp::kOProj:
    case LlamaOp::kGateUp:
    case LlamaOp::kDown:
      return OpKind::kCompute;
    case LlamaOp::kOAllReduce:
    case LlamaOp::kMlpAllReduce:
      return OpKind::kNetwork;
    default:
      return OpKind::kMemory;
  }
}

AllReduceNorm all_reduce_norm_group(int64_t layer, LlamaOp first, int64_t layers) {
  const bool after_attention = first == LlamaOp::kOAllReduce;
  const int64_t norm_layer = after_attention ? layer : layer + 1;
  TESSERA_CHECK_ARG((after_attention || first == LlamaOp::kMlpAllReduce) && norm_layer < layers,
                    "no all-reduce+RMSNorm group from layer ", layer, " ", llama_op_name(first),
                    ": expected an all-reduce with an RMSNorm after it");
  return {norm_layer, after_attention ? LlamaOp::kMlpNorm : LlamaOp::kAttnNorm};
}

bool fused_group_starts_at(FusedGroup group, LlamaOp first) {
  if (group == FusedGroup::kAllReduceNorm)
    return first == LlamaOp::kOAllReduce || first == LlamaOp::kMlpAllReduce;
  return first == LlamaOp::kOProj || first == LlamaOp::kDown;
}

const char* fused_group_name(FusedGroup group) {
  switch (group) {
    case FusedGroup::kAllReduceNorm: return "all-reduce+RMSNorm";
    case FusedGroup::kRowParallelPair: return "row-parallel GEMM+all-reduce";
    case FusedGroup::kRowParallelPipelined:
      return "row-parallel GEMM+all-reduce in row chunks";
  }
  return "?";
}

RowChunk row_chunk(int64_t rows, int chunks, int i) {
  TESSERA_CHECK_ARG(chunks >= 1 && i >= 0 && i < chunks, "row_chunk: chunk ", i, " of ", chunks,
                    ": expected 0 <= chunk < chunks");
  const int64_t begin = rows * i / chunks;
  return {begin, rows * (i + 1) / chunks - begin};
}

void LlamaLayerBuffers::resize(const LlamaShapes& s, int64_t tokens) {
  h.resize(size_t(tokens * s.hidden));
  q.resize(size_t(tokens * s.q_width()));
  k.resize(size_t(tokens * s.kv_width()));
  v.resize(size_t(tokens * s.kv_width()));
  attn.resize(size_t(tokens * s.q_width()));
  partial.resize(size_t(tokens * s.hidden));
  gate.resize(size_t(tokens * s.intermediate));
  up.resize(size_t(tokens * s.intermediate));
}

void LlamaLayer::check_call(const PackedBatch& batch, const std::vector<float>& x,
                            const std::vector<float>& residual, Communicator* comm) const {
  const int64_t t = batch.total_tokens(), c = shapes_.hidden;
  TESSERA_CHECK_ARG(int64_t(x.size()) == t * c && int64_t(residual.size()) == t * c,
                    "LlamaLayer::forward: x and residual: expected ", t, " x ", c, " floats");
  TESSERA_CHECK_ARG(
      (comm == nullptr && shapes_.ranks == 1) ||
          (comm != nullptr && comm->size() == shapes_.ranks && comm->rank() == shapes_.rank),
      "LlamaLayer::forward: comm: expected the group of rank ", shapes_.rank, " of ", shapes_.ranks,
      " (null for one rank)");
}

void LlamaLayer::forward(const PackedBatch& batch, std::vector<float>& x,
                         std::vector<float>& residual, PagedKvCache& cache, Communicator* comm,
                         const Stream& stream) const {
  check_call(batch, x, residual, comm);
  if (batch.total_tokens() == 0) return;
  LlamaLayerBuffers buffers;
  buffers.resize(shapes_, batch.total_tokens());
  for (int op = 0; op < kLlamaOps; ++op) {
    run_op(LlamaOp(op), batch, {0, batch.sequences.size()}, x, residual, buffers, cache, comm,
           stream);
  }
}

void LlamaLayer::run_op(LlamaOp op, const PackedBatch& batch, SequenceRange range,
                        std::vector<float>& x, std::vector<float>& residual,
                        LlamaLayerBuffers& buf, PagedKvCache& cache, Communicator* comm,
                        const Stream& stream) const {
  TESSERA_CHECK_ARG(range.begin <= range.end && range.end <= batch.sequences.size(),
                    "LlamaLayer::run_op: sequences [", range.begin, ", ", range.end,
                    ") of a batch of ", batch.sequences.size());
  const Rows span = rows_of(batch, range);
  const int64_t r0 = span.first, t = span.count;  // plain names: lambdas capture them
  if (t == 0) return;
  const int64_t c = shapes_.hidden, d = shapes_.head_dim;
  const int64_t qw = shapes_.q_width(), kvw = shapes_.kv_width(), f = shapes_.intermediate;
  const Device cpu = Device::cpu();
  // Rows [r0, r0 + t) of a [T, width] buffer: a view, no copy.
  auto rows = [&](std::vector<float>& b, int64_t width) {
    return TensorView(b.data() + r0 * width, DType::kF32, cpu, {t, width});
  };
  auto at = [&](std::vector<float>& b, int64_t width) { return b.data() + r0 * width; };
  switch (op) {
    case LlamaOp::kAttnNorm:
    case LlamaOp::kMlpNorm: {
      const TensorView res = rows(residual, c);
      rms_norm(rows(x, c), {res, res},
               vector_view(op == LlamaOp::kAttnNorm ? w_.input_norm : w_.post_norm), eps_,
               rows(buf.h, c), stream);
      return;
    }
    case LlamaOp::kQkv: {
      linear(at(buf.h, c), t, c, w_.q, w_.q_bias, at(buf.q, qw), qw, stream);
      linear(at(buf.h, c), t, c, w_.k, w_.k_bias, at(buf.k, kvw), kvw, stream);
      linear(at(buf.h, c), t, c, w_.v, w_.v_bias, at(buf.v, kvw), kvw, stream);
      const TensorView positions(const_cast<int32_t*>(batch.positions.data()) + r0, DType::kI32,
                                 cpu, {t});
      const TensorView q_heads(at(buf.q, qw), DType::kF32, cpu, {t, shapes_.q_heads, d});
      const TensorView k_heads(at(buf.k, kvw), DType::kF32, cpu, {t, shapes_.kv_heads, d});
      const TensorView v_heads(at(buf.v, kvw), DType::kF32, cpu, {t, shapes_.kv_heads, d});
      rope(q_heads, positions, vector_view(*inv_freq_), q_heads, stream);
      rope(k_heads, positions, vector_view(*inv_freq_), k_heads, stream);
      for (size_t i = range.begin; i < range.end; ++i) {
        const PackedSequence& s = batch.sequences[i];
        cache.write(layer_idx_, s.seq_id, s.start, k_heads.slice(0, s.first_row - r0, s.num_tokens),
                    v_heads.slice(0, s.first_row - r0, s.num_tokens));
      }
      return;
    }
    case LlamaOp::kAttention:
      attend(batch, range, buf.q, cache, buf.attn);
      return;
    case LlamaOp::kOProj:
      linear(at(buf.attn, qw), t, qw, w_.o, {}, at(buf.partial, c), c, stream);
      return;
    case LlamaOp::kGateUp: {
      linear(at(buf.h, c), t, c, w_.gate, {}, at(buf.gate, f), f, stream);
      linear(at(buf.h, c), t, c, w_.up, {}, at(buf.up, f), f, stream);
      silu_and_mul(rows(buf.gate, f), rows(buf.up, f), rows(buf.gate, f), stream);
      return;
    }
    case LlamaOp::kDown:
      linear(at(buf.gate, f), t, f, w_.down, {}, at(buf.partial, c), c, stream);
      return;
    case LlamaOp::kOAllReduce:
    case LlamaOp::kMlpAllReduce:
      sum_over_ranks(rows(buf.partial, c), rows(x, c), comm, stream);
      return;
  }
}

void LlamaLayer::run_all_reduce_norm(LlamaOp norm, const PackedBatch& batch, SequenceRange range,
                                     std::vector<float>& x, std::vector<float>& residual,
                                     LlamaLayerBuffers& buf, Communicator* comm,
                                     const Stream& stream) const {
  TESSERA_CHECK_ARG(norm == LlamaOp::kAttnNorm || norm == LlamaOp::kMlpNorm,
                    "LlamaLayer::run_all_reduce_norm: norm = ", llama_op_name(norm),
                    ": expected attn_norm or mlp_norm");
  const Rows span = rows_of(batch, range);
  const int64_t r0 = span.first, t = span.count;  // plain names: lambdas capture them
  if (t == 0) return;
  const int64_t c = shapes_.hidden;
  const Device cpu = Device::cpu();
  const TensorView weight =
      vector_view(norm == LlamaOp::kAttnNorm ? w_.input_norm : w_.post_norm);
  auto normalize = [&](int64_t row, int64_t n) {  // rows [row, row + n) of x + residual
    if (n == 0) return;
    auto rows = [&](std::vector<float>& b) {
      return TensorView(b.data() + row * c, DType::kF32, cpu, {n, c});
    };
    const TensorView res = rows(residual);
    rms_norm(rows(x), {res, res}, weight, eps_, rows(buf.h), stream);
  };
  if (comm == nullptr) {  // one rank: the all-reduce is a copy
    std::copy_n(buf.partial.begin() + r0 * c, t * c, x.begin() + r0 * c);
    return normalize(r0, t);
  }
  const int64_t p = comm->size(), share = (t + p - 1) / p;
  auto flat = [&](std::vector<float>& v) {
    return TensorView(v.data(), DType::kF32, cpu, {int64_t(v.size())});
  };
  // Rows [q * share, q * share + count(q)) belong to rank q; the last ranks' shares may be short.
  auto count = [&](int64_t q) { return std::clamp<int64_t>(t - q * share, 0, share); };
  std::vector<float> send(size_t(p * share * c), 0.0f), mine(size_t(share * c));
  std::copy_n(buf.partial.begin() + r0 * c, t * c, send.begin());
  comm->reduce_scatter(flat(send), flat(mine), ReduceOp::kSum, stream);
  comm->synchronize(stream);
  const int64_t me = comm->rank(), row = r0 + me * share, n = count(me);
  if (n > 0) std::copy_n(mine.begin(), n * c, x.begin() + row * c);
  normalize(row, n);
  // Every rank's rows of x, residual and h, [x | residual | h] per share.
  std::vector<float> out(size_t(3 * share * c), 0.0f), all(size_t(p * 3 * share * c));
  for (int k = 0; n > 0 && k < 3; ++k) {
    const std::vector<float>& from = k == 0 ? x : k == 1 ? residual : buf.h;
    std::copy_n(from.begin() + row * c, n * c, out.begin() + k * share * c);
  }
  comm->all_gather(flat(out), flat(all), stream);
  comm->synchronize(stream);
  for (int64_t q = 0; q < p; ++q) {
    for (int k = 0; count(q) > 0 && k < 3; ++k) {
      std::vector<float>& to = k == 0 ? x : k == 1 ? residual : buf.h;
      std::copy_n(all.begin() + (q * 3 + k) * share * c, count(q) * c,
                  to.begin() + (r0 + q * share) * c);
    }
  }
}

void LlamaLayer::run_row_parallel_fused(LlamaOp gemm, const PackedBatch& batch,
                                        SequenceRange range, std::vector<float>& x,
                                        LlamaLayerBuffers& buf, tp::TpOperation& rs,
                                        Communicator& comm, const Stream& stream) const {
  TESSERA_CHECK_ARG(gemm == LlamaOp::kOProj || gemm == LlamaOp::kDown,
                    "LlamaLayer::run_row_parallel_fused: gemm = ", llama_op_name(gemm),
                    ": expected o_proj or down");
  const Rows span = rows_of(batch, range);
  const int64_t r0 = span.first, t = span.count;
  if (t == 0) return;
  const bool attention = gemm == LlamaOp::kOProj;
  const int64_t c = shapes_.hidden, k = attention ? shapes_.q_width() : shapes_.intermediate;
  const int p = comm.size();
  const tp::TpRequest& r = rs.plan().request;
  TESSERA_CHECK_ARG(r.op == tp::TpOp::kGemmReduceScatter && r.m == t && r.n == c &&
                        r.k == k * p && r.dtype == DType::kF32 && r.out_dtype == DType::kF32,
                    "LlamaLayer::run_row_parallel_fused: rs = ", tp::describe(r),
                    ": expected gemm_rs M", t, " N", c, " K", k * p, " f32");
  const Device cpu = Device::cpu();
  const std::vector<float>& in = attention ? buf.attn : buf.gate;
  const std::vector<float>& w = attention ? w_.o : w_.down;
  // Each rank's reduced rows, padded to the largest share for the all-gather.
  const int64_t share = (t + p - 1) / p;
  const tp::RowRange mine = tp::row_range(t, p, comm.rank());
  std::vector<float> reduced(size_t(share * c), 0.0f), all(size_t(p * share * c));
  rs.run(TensorView(const_cast<float*>(in.data()) + r0 * k, DType::kF32, cpu, {t, k}),
         TensorView(const_cast<float*>(w.data()), DType::kF32, cpu, {c, k}), TensorView(),
         TensorView(reduced.data(), DType::kF32, cpu, {mine.count, c}), stream);
  comm.all_gather(TensorView(reduced.data(), DType::kF32, cpu, {share * c}),
                  TensorView(all.data(), DType::kF32, cpu, {p * share * c}), stream);
  comm.synchronize(stream);
  for (int q = 0; q < p; ++q) {
    const tp::RowRange rows = tp::row_range(t, p, q);
    std::copy_n(all.begin() + q * share * c, rows.count * c, x.begin() + (r0 + rows.begin) * c);
  }
}

void LlamaLayer::run_row_parallel_pipelined(LlamaOp gemm, const PackedBatch& batch,
                                            SequenceRange range, int chunks, std::vector<float>& x,
                                            LlamaLayerBuffers& buf, Communicator* comm,
                                            const Stream& stream) const {
  TESSERA_CHECK_ARG(gemm == LlamaOp::kOProj || gemm == LlamaOp::kDown,
                    "LlamaLayer::run_row_parallel_pipelined: gemm = ", llama_op_name(gemm),
                    ": expected o_proj or down");
  TESSERA_CHECK_ARG(chunks >= 1, "LlamaLayer::run_row_parallel_pipelined: chunks = ", chunks,
                    ": expected >= 1");
  const Rows span = rows_of(batch, range);
  const bool attention = gemm == LlamaOp::kOProj;
  const int64_t c = shapes_.hidden, k = attention ? shapes_.q_width() : shapes_.intermediate;
  const std::vector<float>& in = attention ? buf.attn : buf.gate;
  const std::vector<float>& w = attention ? w_.o : w_.down;
  const Device cpu = Device::cpu();
  for (int i = 0; i < chunks; ++i) {
    const RowChunk chunk = row_chunk(span.count, chunks, i);
    if (chunk.count == 0) continue;
    const int64_t r0 = span.first + chunk.begin;
    linear(in.data() + r0 * k, chunk.count, k, w, {}, buf.partial.data() + r0 * c, c, stream);
    auto rows = [&](std::vector<float>& b) {
      return TensorView(b.data() + r0 * c, DType::kF32, cpu, {chunk.count, c});
    };
    sum_over_ranks(rows(buf.partial), rows(x), comm, stream);
  }
}

void LlamaLayer::attend(const PackedBatch& batch, SequenceRange range, const std::vector<float>& q,
                        const PagedKvCache& cache, std::vector<float>& out) const {
  const int64_t hq = shapes_.q_heads, d = shapes_.head_dim, qw = shapes_.q_width();
  const float scale = 1.0f / std::sqrt(float(d));
  for (size_t i = range.begin; i < range.end; ++i) {
    const PackedSequence& s = batch.sequences[i];
    if (s.num_tokens == 0) continue;
    float* q_rows = const_cast<float*>(q.data()) + s.first_row * qw;
    const TensorView q_seq(q_rows, DType::kF32, Device::cpu(), {1, s.num_tokens, hq, d});
    const std::vector<attn::KvChunk> chunks =
        cache.kv_chunks(layer_idx_, s.seq_id, s.start + s.num_tokens, s.start);
    const attn::ReferenceResult r = attn::reference_attention(q_seq, chunks, scale);
    std::memcpy(out.data() + s.first_row * qw, r.o.data(), r.o.size() * sizeof(float));
  }
}

void LlamaLayer::sum_over_ranks(const TensorView& partial, const TensorView& out,
                                Communicator* comm, const Stream& stream) const {
  if (comm == nullptr) {
    std::memcpy(out.data(), partial.data(), size_t(partial.numel()) * sizeof(float));
    return;
  }
  const int64_t n = partial.numel();
  comm->all_reduce(TensorView(partial.data(), DType::kF32, Device::cpu(), {n}),
                   TensorView(out.data(), DType::kF32, Device::cpu(), {n}), ReduceOp::kSum, stream);
  comm->synchronize(stream);
}

}  // namespace tessera::model
