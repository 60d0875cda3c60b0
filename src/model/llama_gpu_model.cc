#include "tessera/model/llama_gpu_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "decode/split_kv_rule.h"
#include "model/greedy.h"
#include "model/llama_gpu_backend.h"
#include "model/llama_gpu_impl.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"
#include "tessera/gemm/gemm.h"
#include "tessera/model/ops.h"
#include "tessera/model/page_allocator.h"
#include "tessera/runtime/memory.h"
#include "tessera/sched/schedule.h"

namespace tessera::model {
namespace {

// The concatenation of `parts` (fused QKV and gate/up weights), rounded to `dtype`.
Bits to_bits(std::initializer_list<const std::vector<float>*> parts, DType dtype) {
  Bits out;
  size_t total = 0;
  for (const std::vector<float>* p : parts) total += p->size();
  out.reserve(total);
  for (const std::vector<float>* p : parts) {
    for (float v : *p)
      out.push_back(dtype == DType::kF16 ? float_to_fp16_bits(v) : float_to_bf16_bits(v));
  }
  return out;
}

// One layer's weights laid out for the device, made on a worker thread.
struct HostLayer {
  Bits input_norm, wqkv, bqkv, wo, post_norm, wgu, wdown;
};

[[maybe_unused]] HostLayer host_layer(const DecoderConfig& c, const LlamaTensorSource& source,
                                      const LlamaShapes& s, int64_t layer, DType dtype) {
  const LlamaLayerWeights w = load_llama_layer(c, source, s.rank, s.ranks, layer);
  HostLayer h;
  h.input_norm = to_bits({&w.input_norm}, dtype);
  h.wqkv = to_bits({&w.q, &w.k, &w.v}, dtype);
  if (c.qkv_bias) h.bqkv = to_bits({&w.q_bias, &w.k_bias, &w.v_bias}, dtype);
  h.wo = to_bits({&w.o}, dtype);
  h.post_norm = to_bits({&w.post_norm}, dtype);
  h.wgu = to_bits({&w.gate, &w.up}, dtype);
  h.wdown = to_bits({&w.down}, dtype);
  return h;
}

}  // namespace

LlamaGpuModel::Impl::Impl(const DecoderConfig& c, const LlamaTensorSource& source,
                          const LlamaGpuOptions& o, Communicator* comm_in)
    : config(c),
      shapes(llama_shapes(c, comm_in ? comm_in->rank() : 0, comm_in ? comm_in->size() : 1)),
      opts(o),
      comm(comm_in),
      pages(o.cache.page_size, o.cache.num_pages, "LlamaGpuOptions.cache") {
#ifndef TESSERA_WITH_CUDA
  (void)source;
  throw_error(ErrorCode::kUnsupported,
              "LlamaGpuModel: this build has no cuda backend (configure with TESSERA_CUDA=ON)");
#else
  TESSERA_CHECK_ARG(o.dtype == DType::kBF16 || o.dtype == DType::kF16,
                    "LlamaGpuOptions.dtype = ", dtype_name(o.dtype), ": expected bf16 or f16");
  const auto positive = [](int64_t v, const char* name) {
    TESSERA_CHECK_ARG(v >= 1, "LlamaGpuOptions.", name, " = ", v, ": expected >= 1");
  };
  positive(o.max_tokens, "max_tokens");
  positive(o.max_batch, "max_batch");
  positive(o.max_context, "max_context");
  positive(o.max_logit_rows, "max_logit_rows");
  TESSERA_CHECK_ARG(o.device >= 0 && o.device < cuda_device_count(),
                    "LlamaGpuOptions.device = ", o.device, ": expected 0 to ",
                    cuda_device_count() - 1, " (visible GPUs)");
  const int64_t d = shapes.head_dim, group = shapes.q_heads / shapes.kv_heads;
  TESSERA_CHECK((d == 64 || d == 128) && detail::cuda_split_kv_supported(int(d), int(group)),
                ErrorCode::kUnsupported, "LlamaGpuModel: head_dim = ", d, " with ", group,
                " query heads per KV head: the cuda layers take head_dim 64 or 128 and up to 16 "
                "query heads per KV head");
  device = Device::cuda(o.device);
  stream = Stream::create_cuda(o.device);
  sm_count = detail::cuda_sm_count(o.device);
  split_kv_wave = int64_t(sm_count) *
                  detail::cuda_split_kv_ctas_per_multiprocessor(o.dtype, int(d), int(group));
  const int64_t cw = shapes.hidden, qw = shapes.q_width(), kvw = shapes.kv_width();
  const int64_t f = shapes.intermediate, v = shapes.vocab;
  qkv_width = qw + 2 * kvw;

  const LlamaWeights globals = load_llama_weights(c, source, shapes.rank, shapes.ranks, false);
  embed = upload(to_bits({&globals.embed}, o.dtype), {v, cw}, false);
  final_norm = upload(to_bits({&globals.final_norm}, o.dtype), {cw});
  lm_head =
      c.tie_word_embeddings ? embed : upload(to_bits({&globals.lm_head}, o.dtype), {v, cw}, false);
  weight_bytes += v * cw * int64_t(dtype_size(o.dtype));  // lm_head, read every step
  // Layers drawn or read and rounded on worker threads, a group at a time, uploaded in order.
  const int64_t workers = std::max(1u, std::thread::hardware_concurrency());
  for (int64_t first = 0; first < shapes.num_layers; first += workers) {
    std::vector<std::future<HostLayer>> group;
    for (int64_t l = first; l < std::min(shapes.num_layers, first + workers); ++l)
      group.push_back(std::async(std::launch::async, host_layer, std::cref(c), std::cref(source),
                                 std::cref(shapes), l, o.dtype));
    for (auto& future : group) {
      const HostLayer h = future.get();
      LayerWeights g;
      g.input_norm = upload(h.input_norm, {cw});
      g.wqkv = upload(h.wqkv, {qkv_width, cw});
      if (c.qkv_bias) g.bqkv = upload(h.bqkv, {qkv_width});
      g.wo = upload(h.wo, {cw, qw});
      g.post_norm = upload(h.post_norm, {cw});
      g.wgu = upload(h.wgu, {2 * f, cw});
      g.wdown = upload(h.wdown, {cw, f});
      layers.push_back(std::move(g));
    }
  }
  const std::vector<float> freq = rope_inv_freq(d, c.rope_theta, c.rope_scaling);
  inv_freq = Tensor::empty({int64_t(freq.size())}, DType::kF32, device);
  copy_bytes(inv_freq.data(), freq.data(), freq.size() * sizeof(float), stream);

  pages_per_seq = (o.max_context + o.cache.page_size - 1) / o.cache.page_size;
  cache_rows = o.cache.num_pages * o.cache.page_size;
  try {
    cache = Tensor::empty({shapes.num_layers, 2, cache_rows, kvw}, o.dtype, device);
  } catch (const Error& e) {
    // The cache is most of the memory a large batch asks for: say which option sized it.
    const double gb = double(shapes.num_layers) * 2 * double(cache_rows) * double(kvw) *
                      double(dtype_size(o.dtype)) / 1e9;
    throw_error(e.code(), str("LlamaGpuOptions.cache: ", o.cache.num_pages, " pages of ",
                              o.cache.page_size, " positions over ", shapes.num_layers,
                              " layers need ", gb, " GB of KV cache on cuda:", o.device,
                              ", which it could not allocate; fewer pages or layers would fit (",
                              e.what(), ")"));
  }

  const int64_t t = o.max_tokens, r = o.max_logit_rows;
  for (Tensor* b : {&x, &residual, &h}) *b = Tensor::empty({t, cw}, o.dtype, device);
  if (comm != nullptr) partial = Tensor::empty({t, cw}, o.dtype, device);
  qkv = Tensor::empty({t, qkv_width}, o.dtype, device);
  attn = Tensor::empty({t, qw}, o.dtype, device);
  gate_up = Tensor::empty({t, 2 * f}, o.dtype, device);
  act = Tensor::empty({t, f}, o.dtype, device);
  for (Tensor* b : {&xr, &rr, &hr}) *b = Tensor::empty({r, cw}, o.dtype, device);
  logits = Tensor::empty({r, v}, DType::kF32, device);
  next = Tensor::empty({r}, DType::kI32, device);
  int64_t most = 1;  // the largest batch x splits of any decode run
  for (int64_t b = 1; b <= o.max_batch; ++b) most = std::max(most, b * splits_for(b));
  partial_o = Tensor::empty({most * shapes.q_heads * d}, DType::kF32, device);
  partial_lse = Tensor::empty({most * shapes.q_heads}, DType::kF32, device);

  off_pos = t;
  off_slot = 2 * t;
  off_rows = 3 * t;
  off_seq = off_rows + r;
  off_table = off_seq + o.max_batch;
  off_cu = off_table + o.max_batch * pages_per_seq;
  off_gather = off_cu + 2 * o.max_batch;
  const int64_t total = off_gather + o.max_batch * o.max_context;
  gathered_k = Tensor::empty({o.max_context, kvw}, o.dtype, device);
  gathered_v = Tensor::empty({o.max_context, kvw}, o.dtype, device);
  step_i32 = Tensor::empty({total}, DType::kI32, device);
  staging.assign(size_t(total), 0);
  stream.synchronize();
#endif
}

Tensor LlamaGpuModel::Impl::upload(const Bits& bits, std::initializer_list<int64_t> shape,
                                   bool count) {
  Tensor t = Tensor::empty(shape, opts.dtype, device);
  TESSERA_CHECK(int64_t(bits.size()) == t.view().numel(), ErrorCode::kInternal,
                "LlamaGpuModel: a weight has ", bits.size(), " values for ", t.view().to_string());
  copy_bytes(t.data(), bits.data(), bits.size() * sizeof(uint16_t), stream);
  stream.synchronize();  // `bits` goes away; construction only
  if (count) weight_bytes += int64_t(bits.size() * sizeof(uint16_t));
  return t;
}

int LlamaGpuModel::Impl::splits_for(int64_t batch) const {
  return int(decode::split_kv_splits(batch, shapes.kv_heads, opts.max_context, split_kv_wave));
}

const gemm::Gemm& LlamaGpuModel::Impl::linear(LinearKind kind, int64_t m) {
  auto& slot = gemms[{int(kind), m}];
  if (!slot) {
    const int64_t c = shapes.hidden, qw = shapes.q_width(), f = shapes.intermediate;
    gemm::GemmShape s;
    s.m = m;
    s.dtype = s.out_dtype = opts.dtype;
    s.weight_nk = true;
    switch (kind) {
      case LinearKind::kQkv:
        s.n = qkv_width, s.k = c, s.bias = config.qkv_bias;
        break;
      case LinearKind::kO:
        s.n = c, s.k = qw;
        break;
      case LinearKind::kGateUp:
        s.n = 2 * f, s.k = c;
        break;
      case LinearKind::kDown:
        s.n = c, s.k = f;
        break;
      case LinearKind::kHead:
        s.n = shapes.vocab, s.k = c, s.out_dtype = DType::kF32;
        break;
    }
    slot = std::make_unique<gemm::Gemm>(s, device, gemm::GemmImpl::kAuto);
  }
  return *slot;
}

void LlamaGpuModel::Impl::run_linear(LinearKind kind, const TensorView& a, const Tensor& w,
                                     const Tensor& bias, const TensorView& out) {
  linear(kind, a.size(0)).run(a, w, bias.data() ? bias.view() : TensorView{}, out, stream);
}

Step LlamaGpuModel::Impl::pack(std::span<const SequenceTokens> inputs, LogitRows which) {
  TESSERA_CHECK_ARG(!inputs.empty(), "LlamaGpuModel::forward: inputs: expected >= 1 sequence");
  TESSERA_CHECK_ARG(int64_t(inputs.size()) <= opts.max_batch,
                    "LlamaGpuModel::forward: ", inputs.size(),
                    " inputs: expected at most LlamaGpuOptions.max_batch = ", opts.max_batch);
  Step step;
  std::set<int64_t> seen;
  int64_t pages_needed = 0;
  const int64_t page = opts.cache.page_size;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SequenceTokens& in = inputs[i];
    TESSERA_CHECK_ARG(pages.contains(in.seq_id), "LlamaGpuModel::forward: inputs[", i,
                      "].seq_id = ", in.seq_id, ": no such sequence (add_sequence() first)");
    TESSERA_CHECK_ARG(seen.insert(in.seq_id).second, "LlamaGpuModel::forward: inputs[", i,
                      "].seq_id = ", in.seq_id, ": repeated in one batch");
    const int64_t n = int64_t(in.tokens.size()), start = pages.length(in.seq_id);
    TESSERA_CHECK_ARG(n >= 1, "LlamaGpuModel::forward: inputs[", i,
                      "].tokens: expected >= 1 token");
    for (size_t j = 0; j < in.tokens.size(); ++j) {
      TESSERA_CHECK_ARG(in.tokens[j] >= 0 && in.tokens[j] < shapes.vocab,
                        "LlamaGpuModel::forward: inputs[", i, "].tokens[", j, "] = ", in.tokens[j],
                        ": expected in [0, ", shapes.vocab, ")");
    }
    TESSERA_CHECK_ARG(start + n <= opts.max_context, "LlamaGpuModel::forward: inputs[", i,
                      "] reaches position ", start + n,
                      ": expected at most LlamaGpuOptions.max_context = ", opts.max_context);
    pages_needed += pages.pages_to_extend(in.seq_id, n);
    if (n == 1) {
      if (!step.decodes.empty() &&
          step.decodes.back().first_input + step.decodes.back().count == int64_t(i))
        ++step.decodes.back().count;
      else
        step.decodes.push_back({int64_t(i), 1, step.tokens});
    } else {
      step.prefills.push_back({step.tokens, n, start});
    }
    step.tokens += n;
  }
  TESSERA_CHECK_ARG(step.tokens <= opts.max_tokens, "LlamaGpuModel::forward: ", step.tokens,
                    " new tokens: expected at most LlamaGpuOptions.max_tokens = ", opts.max_tokens);
  step.logit_rows = which == LogitRows::kAll ? step.tokens : int64_t(inputs.size());
  TESSERA_CHECK_ARG(
      step.logit_rows <= opts.max_logit_rows, "LlamaGpuModel::forward: logits of ", step.logit_rows,
      " rows: expected at most LlamaGpuOptions.max_logit_rows = ", opts.max_logit_rows);
  TESSERA_CHECK_ARG(pages_needed <= pages.free_pages(),
                    "LlamaGpuModel::forward: out of KV cache pages: the batch needs ", pages_needed,
                    " more, ", pages.free_pages(), " of ", pages.num_pages(), " are free");
  // Checked: now cache the positions and fill the step's inputs.
  int64_t row = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SequenceTokens& in = inputs[i];
    const int64_t start = pages.length(in.seq_id), n = int64_t(in.tokens.size());
    pages.extend(in.seq_id, n);
    step.batch.sequences.push_back({in.seq_id, start, n, row});
    const std::vector<int64_t>& table = pages.page_table(in.seq_id);
    for (int64_t j = 0; j < n; ++j, ++row) {
      const int64_t pos = start + j;
      staging[size_t(row)] = in.tokens[size_t(j)];
      staging[size_t(off_pos + row)] = int32_t(pos);
      step.batch.positions.push_back(int32_t(pos));
      staging[size_t(off_slot + row)] = int32_t(table[size_t(pos / page)] * page + pos % page);
    }
    if (which == LogitRows::kLast) staging[size_t(off_rows) + i] = int32_t(row - 1);
    staging[size_t(off_seq) + i] = int32_t(start + n - 1);
    int32_t* table_row = staging.data() + off_table + int64_t(i) * pages_per_seq;
    std::fill(table_row, table_row + pages_per_seq, 0);
    for (size_t p = 0; p < table.size(); ++p) table_row[p] = int32_t(table[p]);
  }
  if (which == LogitRows::kAll) {
    for (int64_t r = 0; r < step.tokens; ++r) staging[size_t(off_rows + r)] = int32_t(r);
  }
  // Prompt runs: each run's cu_seqlens counts rows from the run's first; a part of the run
  // (a nano-batch) uses the entries from its first prompt's on, with the same base row.
  // Chunked prefills run alone, over the cache slots of every position they attend to.
  size_t input = 0;
  for (size_t i = 0; i < step.prefills.size(); ++i) {
    Prefill& p = step.prefills[i];
    if (p.cached > 0) {
      while (step.batch.sequences[input].first_row != p.first_row) ++input;
      const std::vector<int64_t>& table = pages.page_table(step.batch.sequences[input].seq_id);
      p.gather_offset = off_gather + step.gather_entries;
      for (int64_t pos = 0; pos < p.cached + p.num_tokens; ++pos)
        staging[size_t(off_gather + step.gather_entries++)] =
            int32_t(table[size_t(pos / page)] * page + pos % page);
      continue;
    }
    const Prefill* prev = i > 0 ? &step.prefills[i - 1] : nullptr;
    const bool continues = prev != nullptr && prev->cached == 0 &&
                           prev->first_row + prev->num_tokens == p.first_row;
    if (!continues) staging[size_t(off_cu + step.cu_entries++)] = 0;  // a new run
    p.run_first_row = continues ? step.prefills[i - 1].run_first_row : p.first_row;
    p.cu_offset = off_cu + step.cu_entries - 1;
    staging[size_t(off_cu + step.cu_entries++)] = int32_t(p.first_row + p.num_tokens - p.run_first_row);
  }
  return step;
}

void LlamaGpuModel::Impl::upload_step(const Step& step, size_t inputs) {
  const auto copy = [&](int64_t offset, int64_t count) {
    copy_bytes(step_i32.data_as<int32_t>() + offset, staging.data() + offset,
               size_t(count) * sizeof(int32_t), stream);
  };
  copy(0, step.tokens);
  copy(off_pos, step.tokens);
  copy(off_slot, step.tokens);
  copy(off_rows, step.logit_rows);
  copy(off_seq, int64_t(inputs));
  copy(off_table, int64_t(inputs) * pages_per_seq);
  copy(off_cu, step.cu_entries);
  copy(off_gather, step.gather_entries);
}

const decode::AttentionBlock* LlamaGpuModel::Impl::fused_block(int64_t batch) {
  if (!opts.fused_decode || config.qkv_bias) return nullptr;
  auto it = fused.find(batch);
  if (it == fused.end()) {
    decode::AttentionBlockOptions o;
    o.model.name = "llama";
    o.model.hidden = shapes.hidden;
    o.model.num_heads = shapes.q_heads;
    o.model.num_kv_heads = shapes.kv_heads;
    o.model.head_dim = shapes.head_dim;
    o.model.rope_theta = float(config.rope_theta);
    if (config.rope_scaling.llama3) {
      o.model.rope_scaling = {float(config.rope_scaling.factor),
                              float(config.rope_scaling.low_freq_factor),
                              float(config.rope_scaling.high_freq_factor),
                              config.rope_scaling.original_max_position_embeddings};
    }
    o.model.rms_norm_eps = float(config.rms_norm_eps);
    o.max_batch = batch;
    o.max_context = opts.max_context;
    o.dtype = opts.dtype;
    o.paged = true;
    o.page_size = opts.cache.page_size;
    o.device = device;
    o.impl = decode::DecodeImpl::kFused;
    FusedDecode f;
    try {
      f.block = std::make_unique<decode::AttentionBlock>(o);
      f.workspace = Tensor::empty({int64_t(f.block->workspace_bytes()) + 1}, DType::kU8, device);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnsupported) throw;
      f.block.reset();  // e.g. head_dim 64: the layer's own operations
    }
    it = fused.emplace(batch, std::move(f)).first;
  }
  return it->second.block.get();
}

TensorView LlamaGpuModel::Impl::k_table(int64_t layer) const {
  return TensorView(cache.view().slice(0, layer, 1).data(), opts.dtype, device,
                    {cache_rows, shapes.kv_width()});
}

TensorView LlamaGpuModel::Impl::v_table(int64_t layer) const {
  return TensorView(static_cast<uint16_t*>(k_table(layer).data()) + cache_rows * shapes.kv_width(),
                    opts.dtype, device, {cache_rows, shapes.kv_width()});
}

void LlamaGpuModel::Impl::run_step(const Step& step, const sched::Strategy* strategy) {
  const int64_t t = step.tokens, r = step.logit_rows;
  const TensorView xs = rows(x, t), res = rows(residual, t);
  fill_bytes(res.data(), 0, size_t(res.numel()) * dtype_size(opts.dtype), stream);
  embedding(i32_view(0, t), embed, xs, stream);
  if (strategy != nullptr) {
    run_scheduled_layers(step, *strategy);
  } else {
    const Part all = whole(step);
    for (int64_t l = 0; l < shapes.num_layers; ++l) run_layer(l, step, all);
  }
  // The final norm and lm_head on the asked-for rows only.
  const TensorView picked = i32_view(off_rows, r), hrs = rows(hr, r);
  embedding(picked, xs, rows(xr, r), stream);
  embedding(picked, res, rows(rr, r), stream);
  const TensorView rrs = rows(rr, r);
  rms_norm(rows(xr, r), {rrs, rrs}, final_norm, float(config.rms_norm_eps), hrs, stream);
  run_linear(LinearKind::kHead, hrs, lm_head, Tensor{}, rows(logits, r));
  argmax(rows(logits, r), rows(next, r), stream);
}

void LlamaGpuModel::Impl::execute(const Step& step, size_t inputs,
                                  const sched::Strategy* strategy) {
  // Before anything runs: the GPU model builds the all-reduce with its RMSNorm and the pipelined
  // row-parallel pair (flux's fused GEMM+ReduceScatter pairs exist only in the cpu model so far).
  if (strategy != nullptr) {
    for (FusedGroup g : strategy->fused_groups()) {
      TESSERA_CHECK(g != FusedGroup::kRowParallelPair, ErrorCode::kUnsupported,
                    "LlamaGpuModel::forward: strategy ", strategy->name(), " fuses ",
                    fused_group_name(g),
                    ", which the GPU model does not build yet (its "
                    "row-parallel GEMMs and all-reduces run unfused); expected a strategy "
                    "without it");
    }
  }
  const auto start = std::chrono::steady_clock::now();
  struct Timed {  // the host time of this call, however it returns
    std::chrono::steady_clock::time_point start;
    double& out;
    ~Timed() {
      out = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
    }
  } timed{start, last_host_us};
  upload_step(step, inputs);
#ifdef TESSERA_WITH_CUDA
  // Under tensor parallelism the all-reduces are captured too; every rank captures and replays
  // at the same steps, since every rank runs the same batches. A strategy's side streams fork
  // from `stream` and join it again, so they are captured with it.
  const bool graphable = opts.cuda_graphs && (comm == nullptr || comm->graph_capturable()) &&
                         step.prefills.empty() && step.decodes.size() == 1 &&
                         step.logit_rows == step.tokens &&
                         (timeline == nullptr || strategy == nullptr);  // timed: eager
  if (graphable) {
    const std::pair<int64_t, std::string> key{step.tokens, strategy ? strategy->name() : ""};
    auto it = graphs.find(key);
    if (it == graphs.end() && eager_batches.count(key) != 0) {
      // Every plan of this batch size exists (the eager step made them): capture.
      it = graphs
               .emplace(key, std::make_unique<detail::CudaGraph>(
                                 stream, [&] { run_step(step, strategy); }))
               .first;
    }
    if (it != graphs.end()) return it->second->replay(stream);
    eager_batches.insert(key);
  }
#endif
  run_step(step, strategy);
}

LlamaGpuModel::LlamaGpuModel(const DecoderConfig& config, const LlamaTensorSource& weights,
                             const LlamaGpuOptions& options, Communicator* comm)
    : impl_(std::make_unique<Impl>(config, weights, options, comm)) {}

LlamaGpuModel::~LlamaGpuModel() = default;

const LlamaShapes& LlamaGpuModel::shapes() const {
  return impl_->shapes;
}
const LlamaGpuOptions& LlamaGpuModel::options() const {
  return impl_->opts;
}
const Stream& LlamaGpuModel::stream() const {
  return impl_->stream;
}
int64_t LlamaGpuModel::weight_bytes() const {
  return impl_->weight_bytes;
}
int64_t LlamaGpuModel::add_sequence() {
  return impl_->pages.add_sequence();
}
void LlamaGpuModel::release_sequence(int64_t seq_id) {
  impl_->pages.release_sequence(seq_id);
}
int64_t LlamaGpuModel::length(int64_t seq_id) const {
  return impl_->pages.length(seq_id);
}

std::vector<float> LlamaGpuModel::forward(std::span<const SequenceTokens> inputs, LogitRows rows,
                                          const sched::Strategy* strategy) {
  const Step step = impl_->pack(inputs, rows);
  impl_->execute(step, inputs.size(), strategy);
  std::vector<float> out(size_t(step.logit_rows * impl_->shapes.vocab));
  copy_bytes(out.data(), impl_->logits.data(), out.size() * sizeof(float), impl_->stream);
  impl_->wait();
  impl_->collect_timeline();
  return out;
}

std::vector<int32_t> LlamaGpuModel::forward_greedy(std::span<const SequenceTokens> inputs,
                                                   const sched::Strategy* strategy) {
  const Step step = impl_->pack(inputs, LogitRows::kLast);
  impl_->execute(step, inputs.size(), strategy);
  std::vector<int32_t> out(inputs.size());
  copy_bytes(out.data(), impl_->next.data(), out.size() * sizeof(int32_t), impl_->stream);
  impl_->wait();
  impl_->collect_timeline();
  return out;
}

double LlamaGpuModel::last_step_host_us() const {
  return impl_->last_host_us;
}

void LlamaGpuModel::set_timeline(sched::Timeline* timeline) {
  impl_->timeline = timeline;
  impl_->timed_spans.clear();
}

void LlamaGpuModel::truncate(int64_t seq_id, int64_t length) {
  impl_->pages.truncate(seq_id, length);
}

std::vector<int32_t> LlamaGpuModel::generate_greedy(const std::vector<int32_t>& prompt,
                                                    int64_t steps) {
  return detail::generate_greedy(
      *this, prompt, steps, "LlamaGpuModel::generate_greedy",
      [&](std::span<const SequenceTokens> input) { return forward_greedy(input)[0]; });
}

}  // namespace tessera::model
