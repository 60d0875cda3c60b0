// A decoder layer's logical operations (llama_layer.h: LlamaOp) on the cuda backend, each over
// the rows of a part of the step (the whole step, or a scheduler's nano-batch) on a given
// stream. Parts are whole sequences, so each operation reads and writes only its part's rows of
// the step's buffers (and its sequences' cache pages): parts may run on different streams at
// once. Two operations of one kind never run at once (a strategy puts each kind on one stream),
// so the split-KV workspace and the GEMM plans are shared.
#include <algorithm>

#include "model/llama_gpu_impl.h"
#include "tessera/attn/attention.h"
#include "tessera/attn/varlen.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"

namespace tessera::model {

Part whole(const Step& step) {
  return Part{0, step.tokens, step.prefills, step.decodes};
}

Part part_of(const Step& step, int64_t first_input, int64_t count) {
  const std::vector<PackedSequence>& seqs = step.batch.sequences;
  TESSERA_CHECK(first_input >= 0 && count >= 1 && first_input + count <= int64_t(seqs.size()),
                ErrorCode::kInternal, "part_of: inputs [", first_input, ", ", first_input + count,
                ") of ", seqs.size());
  const PackedSequence &first = seqs[size_t(first_input)],
                       &last = seqs[size_t(first_input + count - 1)];
  Part part;
  part.first_row = first.first_row;
  part.tokens = last.first_row + last.num_tokens - first.first_row;
  const int64_t row_end = part.first_row + part.tokens;
  for (const Prefill& p : step.prefills) {
    if (p.first_row >= part.first_row && p.first_row < row_end) part.prefills.push_back(p);
  }
  for (const DecodeRun& run : step.decodes) {
    const int64_t begin = std::max(run.first_input, first_input);
    const int64_t end = std::min(run.first_input + run.count, first_input + count);
    if (begin < end)  // one row per decode input
      part.decodes.push_back({begin, end - begin, run.first_row + (begin - run.first_input)});
  }
  return part;
}

void LlamaGpuModel::Impl::run_layer(int64_t l, const Step& step, const Part& all) {
  const decode::AttentionBlock* block = step.prefills.empty() ? fused_block(step.tokens) : nullptr;
  if (block == nullptr) {
    for (int op = 0; op < kLlamaOps; ++op) run_op(l, LlamaOp(op), all, stream);
    return;
  }
  // One kernel from h to the output projection; positions are the tokens cached before.
  const LayerWeights& w = layers[size_t(l)];
  const int64_t t = step.tokens, d = shapes.head_dim, hkv = shapes.kv_heads;
  const int64_t qw = shapes.q_width(), kvw = shapes.kv_width();
  run_op(l, LlamaOp::kAttnNorm, all, stream);
  const int64_t ps = opts.cache.page_size, pages_total = opts.cache.num_pages;
  auto paged = [&](const TensorView& table) {
    return TensorView(table.data(), opts.dtype, device, {pages_total, ps, hkv, d});
  };
  const TensorView wqkv = w.wqkv.view(), xs = rows(x, t);
  const decode::AttentionWeights weights{wqkv.slice(0, 0, qw), wqkv.slice(0, qw, kvw),
                                         wqkv.slice(0, qw + kvw, kvw), w.wo, TensorView{}};
  const TensorView out = comm == nullptr ? xs : rows(partial, t);
  const TensorView table(const_cast<int32_t*>(i32(off_table)), DType::kI32, device,
                         {t, pages_per_seq});
  block->run({rows(h, t), i32_view(off_seq, t), out}, weights,
             {paged(k_table(l)), paged(v_table(l)), table}, fused.at(t).workspace, stream);
  for (int op = int(LlamaOp::kOAllReduce); op < kLlamaOps; ++op)
    run_op(l, LlamaOp(op), all, stream);
}

void LlamaGpuModel::Impl::run_op(int64_t l, LlamaOp op, const Part& part, const Stream& on,
                                 int sm_limit) {
  const LayerWeights& w = layers[size_t(l)];
  const int64_t d = shapes.head_dim, hq = shapes.q_heads, hkv = shapes.kv_heads;
  const int64_t qw = shapes.q_width(), kvw = shapes.kv_width(), f = shapes.intermediate;
  const int64_t t = part.tokens, r0 = part.first_row;
  const float eps = float(config.rms_norm_eps);
  const TensorView xs = rows(x, part), res = rows(residual, part), hs = rows(h, part);
  auto linear_into = [&](LinearKind kind, const TensorView& in, const Tensor& weight,
                         const Tensor& bias, const TensorView& out) {
    linear(kind, t).run(in, weight, bias.data() ? bias.view() : TensorView{}, out, on, sm_limit);
  };
  // Row-parallel projections write a partial sum that the next operation all-reduces.
  const TensorView projected = comm == nullptr ? xs : rows(partial, part);
  auto all_reduce = [&] {
    if (comm != nullptr)
      comm->all_reduce(projected.flat(0, projected.numel()), xs.flat(0, xs.numel()), ReduceOp::kSum,
                       on);
  };
  // q, k, v: column blocks of the part's qkv rows, [T, heads, D].
  auto heads = [&](int64_t column, int64_t count) {
    return TensorView(qkv.data_as<uint16_t>() + r0 * qkv_width + column, opts.dtype, device,
                      {t, count, d}, {qkv_width, d, 1});
  };
  switch (op) {
    case LlamaOp::kAttnNorm:
      return rms_norm(xs, {res, res}, w.input_norm, eps, hs, on);
    case LlamaOp::kQkv: {
      linear_into(LinearKind::kQkv, hs, w.wqkv, w.bqkv, rows(qkv, part));
      const TensorView qk = heads(0, hq + hkv);  // q's heads then k's: one rotation launch
      rope(qk, i32_view(off_pos + r0, t), inv_freq, qk, on);
      const TensorView slots = i32_view(off_slot + r0, t);
      const TensorView k = heads(qw, hkv), v = heads(qw + kvw, hkv);
      scatter_rows(TensorView(k.data(), opts.dtype, device, {t, kvw}, {qkv_width, 1}), slots,
                   k_table(l), on);
      scatter_rows(TensorView(v.data(), opts.dtype, device, {t, kvw}, {qkv_width, 1}), slots,
                   v_table(l), on);
      return;
    }
    case LlamaOp::kAttention:
      return attend(l, part, on, sm_limit);
    case LlamaOp::kOProj:
      return linear_into(LinearKind::kO, rows(attn, part), w.wo, Tensor{}, projected);
    case LlamaOp::kOAllReduce:
    case LlamaOp::kMlpAllReduce:
      return all_reduce();
    case LlamaOp::kMlpNorm:
      return rms_norm(xs, {res, res}, w.post_norm, eps, hs, on);
    case LlamaOp::kGateUp: {
      const TensorView gu = rows(gate_up, part);
      linear_into(LinearKind::kGateUp, hs, w.wgu, Tensor{}, gu);
      return silu_and_mul(gu.slice(1, 0, f), gu.slice(1, f, f), rows(act, part), on);
    }
    case LlamaOp::kDown:
      return linear_into(LinearKind::kDown, rows(act, part), w.wdown, Tensor{}, projected);
  }
}

// Attention of the part's rows: its prompts causal over their own rows, one varlen launch a
// run of prompts in adjacent rows (a prompt starts at position 0, so its keys are its rows);
// a chunked prefill over its sequence's cache rows, gathered (its own new rows are in the
// cache already), causal from its first position; each run of decodes through the split-KV
// kernel over the paged cache.
void LlamaGpuModel::Impl::attend(int64_t l, const Part& part, const Stream& on, int sm_limit) {
  const int64_t d = shapes.head_dim, hq = shapes.q_heads, hkv = shapes.kv_heads;
  const int64_t qw = shapes.q_width(), kvw = shapes.kv_width();
  const float scale = attn::default_softmax_scale(d);
  for (const Prefill& p : part.prefills) {
    if (p.cached == 0) continue;
    const int64_t keys = p.cached + p.num_tokens;
    const TensorView slots = i32_view(p.gather_offset, keys);
    embedding(slots, k_table(l), gathered_k.view().slice(0, 0, keys), on);
    embedding(slots, v_table(l), gathered_v.view().slice(0, 0, keys), on);
    auto heads = [&](const Tensor& t) {  // [1, keys, Hkv, D] of a gathered buffer
      return TensorView(t.data(), opts.dtype, device, {1, keys, hkv, d});
    };
    const TensorView q(qkv.data_as<uint16_t>() + p.first_row * qkv_width, opts.dtype, device,
                       {1, p.num_tokens, hq, d}, {p.num_tokens * qkv_width, qkv_width, d, 1});
    const TensorView o(attn.data_as<uint16_t>() + p.first_row * qw, opts.dtype, device,
                       {1, p.num_tokens, hq, d});
    attn::forward(q, heads(gathered_k), heads(gathered_v), o, TensorView{},
                  attn::MaskSpec::causal_at(p.cached, 0), scale, on);
  }
  for (size_t i = 0; i < part.prefills.size();) {
    const Prefill& first = part.prefills[i];
    if (first.cached > 0) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    int64_t longest = first.num_tokens;
    for (; end < part.prefills.size() && part.prefills[end].cached == 0 &&
           part.prefills[end].run_first_row == first.run_first_row;
         ++end)
      longest = std::max(longest, part.prefills[end].num_tokens);
    // The packed tensors end with the part's last prefill of the run: a key tile past a
    // sequence's end reads (masked) rows of the next one of this part, which this stream wrote,
    // never rows another nano-batch's stream may be writing (past the extent TMA reads zeros).
    const Prefill& last = part.prefills[end - 1];
    const int64_t base = first.run_first_row, rows = last.first_row + last.num_tokens - base;
    auto packed = [&](int64_t column, int64_t heads) {  // [rows, heads, d] of the run
      return TensorView(qkv.data_as<uint16_t>() + base * qkv_width + column, opts.dtype, device,
                        {rows, heads, d}, {qkv_width, d, 1});
    };
    const TensorView o(attn.data_as<uint16_t>() + base * qw, opts.dtype, device, {rows, hq, d});
    const TensorView cu = i32_view(first.cu_offset, int64_t(end - i) + 1);
    attn::forward_varlen(packed(0, hq), packed(qw, hkv), packed(qw + kvw, hkv), cu, cu, longest,
                         longest, /*causal=*/true, scale, o, TensorView{}, on);
    i = end;
  }
#ifdef TESSERA_WITH_CUDA
  for (const DecodeRun& run : part.decodes) {
    detail::SplitKvAttention a;
    a.dtype = opts.dtype;
    a.batch = int(run.count);
    a.num_heads = int(hq);
    a.num_kv_heads = int(hkv);
    a.head_dim = int(d);
    a.q = qkv.data_as<uint16_t>() + run.first_row * qkv_width;
    a.q_stride = qkv_width;
    a.k_cache = k_table(l).data();
    a.v_cache = v_table(l).data();
    a.page_table = i32(off_table + run.first_input * pages_per_seq);
    a.pages_per_seq = pages_per_seq;
    a.num_pages = opts.cache.num_pages;
    a.page_size = opts.cache.page_size;
    a.positions = i32(off_seq + run.first_input);
    a.softmax_scale = scale;
    a.splits = splits_for(run.count);
    a.sm_limit = sm_limit;
    a.partial_o = partial_o.data_as<float>();
    a.partial_lse = partial_lse.data_as<float>();
    a.o = attn.data_as<uint16_t>() + run.first_row * qw;
    detail::cuda_split_kv_attention(a, on);
  }
#else
  (void)l;
  (void)sm_limit;
#endif
}

// TokenWeave's split of an all-reduce and the RMSNorm after it, over the part's rows: the
// partial sums reduce-scattered (each rank gets R/P rows), the residual add and norm on those
// rows only, then h and residual all-gathered in place. x is not gathered: nothing reads it after
// the norm (the next row-parallel projection writes it again). Without a group, or rows that do
// not divide by P, it is the all-reduce then the norm on every row.
void LlamaGpuModel::Impl::run_all_reduce_norm(int64_t l, LlamaOp norm, const Part& part,
                                              const Stream& on) {
  const int p = comm == nullptr ? 1 : comm->size();
  if (p == 1 || part.tokens % p != 0) {
    run_op(l, LlamaOp::kOAllReduce, part, on);  // the all-reduce of the part's rows
    return run_op(l, norm, part, on);
  }
  const LayerWeights& w = layers[size_t(l)];
  const Part share{part.first_row + comm->rank() * (part.tokens / p), part.tokens / p, {}, {}};
  const TensorView xs = rows(x, share), res = rows(residual, share), hs = rows(h, share);
  const TensorView partials = rows(partial, part);
  comm->reduce_scatter(partials.flat(0, partials.numel()), xs.flat(0, xs.numel()), ReduceOp::kSum,
                       on);
  rms_norm(xs, {res, res}, norm == LlamaOp::kMlpNorm ? w.post_norm : w.input_norm,
           float(config.rms_norm_eps), hs, on);
  for (const Tensor* t : {&h, &residual}) {
    const TensorView mine = rows(*t, share), all = rows(*t, part);
    comm->all_gather(mine.flat(0, mine.numel()), all.flat(0, all.numel()), on);
  }
}

}  // namespace tessera::model
