// `tessera bench sp`: every sequence-parallel attention method side by side on one shape.
//
// For each sequence length and method (ring, ulysses, usp, tas, torus, mesh, auto; ":one-sided"
// for the symmetric-memory form): plan with SpAttention::create, run warm-up and timed
// iterations (an event pair around each run(); median per rank, slowest rank reported), then
// check every output element against a single-GPU reference computed on each rank: the local
// attention kernel over the rank's own query rows and the whole sequence's K and V (so the
// reference and the method share nothing but the kernel). Columns:
//   median_us    measured latency of one layer
//   TFLOP/s/GPU  4 B H D (visible pairs of the whole sequence) / P / time (causal halves it)
//   of_1gpu      TFLOP/s/GPU over the single-GPU kernel's TFLOP/s on the whole sequence,
//                timed the same way in the same run on every GPU at once (the first row)
//   sim_us       the sim executor's prediction of the same plan on the cost model
//   MB_in        max over ranks of bytes received, inside machines and across machines
//   max_diff     max |output - reference|; ok when within 2^-6 (four bf16 ulps at 1.0)
// On emulated machines (cuda) the run starts by measuring the link two-sided traffic really
// takes (NCCL sockets between emulated machines, link_calibration.h) and gives it to the cost
// model behind auto, mesh and sim_us; --cost terms given by the user still win.
// --timeline PREFIX writes, per method, length and rank, when each step of one more run began
// and ended next to the sim's times for it (PREFIX-<method>-L<seq>-rank<r>.json, ':' in the
// method written '_'; bench/timeline.py draws them).
// Inputs: element e of a tensor is a hash of (seed, tensor, b, position, head, d) mapped to
// [-1, 1) and rounded to the dtype, so every rank generates its rows and the full K, V alike.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bench_record.h"
#include "bench_stats.h"
#include "command.h"
#include "link_calibration.h"
#include "options.h"
#include "rank_launch.h"
#include "sp_methods.h"
#include "tessera/attn/attention.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/memory.h"
#include "tessera/sp/attention_layer.h"
#include "tessera/sp/sim.h"

namespace tessera::cli {
namespace {

using sp::Method;

// splitmix64 of the element's coordinates: the same value on every rank.
float input_value(uint64_t seed, int tensor, int64_t b, int64_t pos, int64_t h, int64_t d) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + uint64_t(tensor) * 0xBF58476D1CE4E5B9ull +
               uint64_t(((b * 1000003 + pos) * 4099 + h) * 1031 + d);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return float(double(x >> 40) / double(1ull << 24)) * 2.0f - 1.0f;
}

// A tensor [B, rows, heads, D] on the rank's device whose row i holds sequence position
// positions[i] of input `tensor`.
Tensor make_input(const RankContext& ctx, DType dtype, int tensor, int64_t batch, int heads,
                  int64_t head_dim, const std::vector<int64_t>& positions, const Stream& s) {
  const int64_t rows = int64_t(positions.size());
  Tensor t = Tensor::empty({batch, rows, heads, head_dim}, dtype, ctx.device);
  std::vector<uint16_t> host(size_t(batch * rows * heads * head_dim));
  std::vector<float> host_f32;
  if (dtype == DType::kF32) host_f32.resize(host.size());
  size_t e = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d, ++e) {
          const float v = input_value(7, tensor, b, positions[size_t(i)], h, d);
          if (dtype == DType::kF32) {
            host_f32[e] = v;
          } else {
            host[e] = dtype == DType::kBF16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v);
          }
        }
  if (e > 0) {
    copy_bytes(t.data(),
               dtype == DType::kF32 ? static_cast<const void*>(host_f32.data()) : host.data(),
               e * dtype_size(dtype), s);
  }
  s.synchronize();
  return t;
}

std::vector<float> download(const Tensor& t, const Stream& s) {
  const int64_t n = t.view().numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  std::vector<std::byte> raw(size_t(n) * t.view().element_size());
  copy_bytes(raw.data(), t.data(), raw.size(), s);
  s.synchronize();
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_as_float(raw.data(), t.view().dtype(), i);
  return out;
}

struct Row {
  std::string method, params;
  bool applicable = true;
  std::string reason;
  double median_us = 0, tflops = 0, sim_us = 0, mb_intra = 0, mb_cross = 0, max_diff = 0;
  double sim_hidden = 0;  // the sim's share of communication time that overlapped compute
  bool ok = false;
};

struct Shape {
  int64_t batch = 1, seq = 0, joint = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  DType dtype = DType::kBF16;

  std::string label() const {
    return str("B", batch, " L", seq, joint ? str(" J", joint) : "", " H", heads,
               kv_heads != heads ? str("/kv", kv_heads) : "", " D", head_dim, " ",
               dtype_name(dtype), causal ? " causal" : "");
  }
};

// --warmup untimed calls of `fn`, then --iters timed back to back on the context's stream
// (an event pair around each); the median per rank, the slowest rank's. Collective.
template <typename Fn>
double timed_median_us(RankContext& ctx, const Options& opt, const Fn& fn) {
  const Stream& s = ctx.stream;
  for (int64_t i = 0; i < opt.integer("warmup"); ++i) fn();
  const int iters = int(opt.integer("iters"));
  std::vector<Event> starts, ends;
  for (int i = 0; i < iters; ++i) {
    starts.push_back(Event::create(s, true));
    ends.push_back(Event::create(s, true));
  }
  for (int i = 0; i < iters; ++i) {
    starts[size_t(i)].record(s);
    fn();
    ends[size_t(i)].record(s);
  }
  s.synchronize();
  if (ctx.heap) ctx.heap->check_errors();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i)
    us.push_back(1000.0 * ends[size_t(i)].elapsed_ms_since(starts[size_t(i)]));
  return max_across_ranks(ctx, median(us));
}

// The FLOPs of the whole layer: 4 B H D (visible (q, k) pairs of joint + image tokens).
double layer_flops(const Shape& s) {
  const int64_t T = s.joint + s.seq;
  const double pairs = s.causal ? double(T) * double(T + 1) / 2 : double(T) * double(T);
  return 4.0 * double(s.batch) * s.heads * s.head_dim * pairs;
}

// One method on one shape, on every rank (collective).
// One run's measured step times on this rank next to the sim's, as JSON.
void write_timeline(const std::string& path, const std::string& method, const Shape& shape,
                    const sp::SpAttention& layer, const std::vector<sp::StepTiming>& measured,
                    const sp::SimResult& sim, int rank) {
  FILE* f = std::fopen(path.c_str(), "w");
  TESSERA_CHECK_ARG(f != nullptr, "--timeline: cannot write ", path);
  const sp::RankPlan& rp = layer.plan().ranks[size_t(rank)];
  std::vector<const sp::SimStepTime*> sim_of(rp.steps.size(), nullptr);
  for (const sp::SimStepTime& t : sim.timeline)
    if (t.rank == rank && t.step < int(rp.steps.size())) sim_of[size_t(t.step)] = &t;
  std::fprintf(f, "{\"method\": \"%s\", \"case\": \"%s\", \"rank\": %d, \"steps\": [\n",
               method.c_str(), shape.label().c_str(), rank);
  for (size_t i = 0; i < measured.size(); ++i) {
    const sp::Step& s = rp.steps[i];
    std::string note = s.note;
    std::replace(note.begin(), note.end(), '"', '\'');
    std::fprintf(f,
                 "  {\"step\": %d, \"stream\": %d, \"kind\": \"%s\", \"note\": \"%s\", "
                 "\"start_us\": %.2f, \"end_us\": %.2f, \"sim_start_us\": %.2f, "
                 "\"sim_end_us\": %.2f}%s\n",
                 measured[i].step, measured[i].stream, sp::step_kind_name(s.kind), note.c_str(),
                 measured[i].start_us, measured[i].end_us, sim_of[i] ? sim_of[i]->start_us : -1.0,
                 sim_of[i] ? sim_of[i]->end_us : -1.0, i + 1 < measured.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

Row bench_method(RankContext& ctx, const Shape& shape, const MethodSpec& spec, const Options& opt,
                 const std::string& cost, const std::vector<Tensor>& full_kv) {
  Row row;
  row.method = spec.label;
  sp::PlanRequest req;
  req.batch = shape.batch;
  req.seq_len = shape.seq;
  req.heads = shape.heads;
  req.kv_heads = shape.kv_heads;
  req.head_dim = shape.head_dim;
  req.dtype = shape.dtype;
  req.causal = shape.causal;
  req.joint_tokens = shape.joint;
  req.options.method = spec.method;
  req.options.comm = spec.comm;
  sp::SpAttentionOptions layer_options;
  layer_options.cost_overrides = cost;
  std::unique_ptr<sp::SpAttention> layer;
  try {
    layer = sp::SpAttention::create(ctx, req, layer_options);
  } catch (const Error& e) {
    // Planning is deterministic: every rank refuses alike, before any collective.
    if (e.code() != ErrorCode::kUnsupported) throw;
    row.applicable = false;
    row.reason = e.what();
    return row;
  }
  const sp::Plan& plan = layer->plan();
  for (const auto& [k, v] : plan.params)
    row.params += str(row.params.empty() ? "" : " ", k, "=", v);
  row.params = str(sp::token_layout_name(plan.layout), row.params.empty() ? "" : " ", row.params);
  if (spec.method == Method::kAuto)
    row.params = str(plan.method, " ", sp::comm_mode_name(plan.comm), " ", row.params);

  const Stream& s = ctx.stream;
  std::vector<int64_t> pos;
  for (const sp::TokenRun& r : layer->local_tokens())
    for (int64_t i = 0; i < r.count; ++i) pos.push_back(r.at(i));
  std::vector<int64_t> joint_pos;
  for (int64_t j = 0; j < shape.joint; ++j) joint_pos.push_back(j);
  const Tensor q =
      make_input(ctx, shape.dtype, 0, shape.batch, shape.heads, shape.head_dim, pos, s);
  const Tensor k =
      make_input(ctx, shape.dtype, 1, shape.batch, shape.kv_heads, shape.head_dim, pos, s);
  const Tensor v =
      make_input(ctx, shape.dtype, 2, shape.batch, shape.kv_heads, shape.head_dim, pos, s);
  const Tensor o = Tensor::empty({shape.batch, int64_t(pos.size()), shape.heads, shape.head_dim},
                                 shape.dtype, ctx.device);
  sp::SpAttentionTensors io{q, k, v, o, {}, {}, {}, {}};
  Tensor jq, jk, jv, jo;
  if (shape.joint > 0) {
    jq = make_input(ctx, shape.dtype, 0, shape.batch, shape.heads, shape.head_dim, joint_pos, s);
    jk = make_input(ctx, shape.dtype, 1, shape.batch, shape.kv_heads, shape.head_dim, joint_pos, s);
    jv = make_input(ctx, shape.dtype, 2, shape.batch, shape.kv_heads, shape.head_dim, joint_pos, s);
    jo = Tensor::empty({shape.batch, shape.joint, shape.heads, shape.head_dim}, shape.dtype,
                       ctx.device);
    io.joint_q = jq;
    io.joint_k = jk;
    io.joint_v = jv;
    io.joint_o = jo;
  }
  if (o.view().numel() > 0) fill_bytes(o.data(), 0xFF, o.view().span_bytes(), s);  // NaN poison
  if (shape.joint > 0) fill_bytes(jo.data(), 0xFF, jo.view().span_bytes(), s);

  row.median_us = timed_median_us(ctx, opt, [&] { layer->run(io, s); });

  // Reference: this rank's query rows against the whole K, V with the kernel itself.
  const float scale = layer->softmax_scale();
  const Tensor o_ref = Tensor::empty(
      {shape.batch, int64_t(pos.size()), shape.heads, shape.head_dim}, shape.dtype, ctx.device);
  int64_t row0 = 0;
  for (const sp::TokenRun& r : layer->local_tokens()) {
    const attn::MaskSpec mask{shape.causal, r.start, r.count > 1 ? r.stride : 1, 0, 1};
    attn::forward(q.view().slice(1, row0, r.count), full_kv[0], full_kv[1],
                  o_ref.view().slice(1, row0, r.count), TensorView(), mask, scale, s);
    row0 += r.count;
  }
  double diff = 0;
  auto compare = [&](const Tensor& got, const Tensor& want) {
    const std::vector<float> a = download(got, s), b = download(want, s);
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::isfinite(a[i]) ? std::fabs(double(a[i]) - double(b[i])) : 1e30;
      diff = std::max(diff, d);
    }
  };
  compare(o, o_ref);
  if (shape.joint > 0) {
    const Tensor jo_ref = Tensor::empty({shape.batch, shape.joint, shape.heads, shape.head_dim},
                                        shape.dtype, ctx.device);
    attn::forward(jq, full_kv[0], full_kv[1], jo_ref, TensorView(),
                  attn::MaskSpec{shape.causal, 0, 1, 0, 1}, scale, s);
    compare(jo, jo_ref);
  }
  row.max_diff = max_across_ranks(ctx, diff);
  row.ok = row.max_diff <= 1.0 / 64;

  // Model side: FLOPs, bytes per link class, the sim's prediction.
  row.tflops =
      row.median_us > 0 ? layer_flops(shape) / ctx.size / (row.median_us * 1e-6) / 1e12 : 0;
  for (int r = 0; r < plan.world_size; ++r) {
    row.mb_intra = std::max(row.mb_intra, double(sp::bytes_received(plan, r, LinkClass::kNVLink) +
                                                 sp::bytes_received(plan, r, LinkClass::kPCIe)) /
                                              1e6);
    row.mb_cross =
        std::max(row.mb_cross, double(sp::bytes_received(plan, r, LinkClass::kNetwork) +
                                      sp::bytes_received(plan, r, LinkClass::kEmulatedNetwork)) /
                                   1e6);
  }
  sp::CostModel model = sp::CostModel::for_topology(ctx.topology);
  model.apply(cost);
  const sp::SimResult sim = sp::simulate(plan, model);
  row.sim_us = sim.total_us;
  row.sim_hidden = sim.hidden_comm_fraction();

  if (!opt.text("timeline").empty()) {
    layer->enable_timeline(true);
    layer->run(io, s);
    std::string name = spec.label;
    std::replace(name.begin(), name.end(), ':', '_');
    write_timeline(
        str(opt.text("timeline"), "-", name, "-L", shape.seq, "-rank", ctx.rank, ".json"),
        spec.label, shape, *layer, layer->last_timeline(), sim, ctx.rank);
    layer->enable_timeline(false);
  }
  return row;
}

// The single-GPU kernel on the whole sequence (joint + image tokens), every rank at once on its
// own GPU (so clocks and power are as in the distributed runs), timed like the methods: the
// median per rank, the slowest rank's. The yardstick of "TFLOP/s/GPU of P GPUs vs one GPU".
Row bench_single_gpu(RankContext& ctx, const Shape& shape, const Options& opt,
                     const std::vector<Tensor>& full_kv) {
  Row row;
  row.method = "single-GPU kernel";
  row.params = "attn::forward over all L + J tokens, each GPU alone";
  const Stream& s = ctx.stream;
  const int64_t T = shape.joint + shape.seq;
  std::vector<int64_t> all(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) all[size_t(i)] = i;
  const Tensor q =
      make_input(ctx, shape.dtype, 0, shape.batch, shape.heads, shape.head_dim, all, s);
  const Tensor o =
      Tensor::empty({shape.batch, T, shape.heads, shape.head_dim}, shape.dtype, ctx.device);
  const attn::MaskSpec mask{shape.causal, 0, 1, 0, 1};
  const float scale = attn::default_softmax_scale(shape.head_dim);
  auto once = [&] { attn::forward(q, full_kv[0], full_kv[1], o, TensorView(), mask, scale, s); };
  row.median_us = timed_median_us(ctx, opt, once);
  row.tflops = row.median_us > 0 ? layer_flops(shape) / (row.median_us * 1e-6) / 1e12 : 0;
  row.ok = true;
  return row;
}

int run_bench_sp(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt(
      "bench sp",
      {{"backend", "auto", "cuda, cpu or auto (cuda when a GPU is visible)"},
       {"nranks", "", "ranks (default: every visible GPU on cuda, 4 on cpu)"},
       {"methods", kDefaultMethods,
        "comma list of ring, ulysses, usp, tas, torus, mesh, auto, each optionally "
        ":one-sided (symmetric memory) or :two-sided"},
       {"seq", "", "comma list of image sequence lengths L (default 16384 on cuda, 128 on cpu)"},
       {"batch", "1", "batch B"},
       {"heads", "", "query heads H (default 24 on cuda, 4 on cpu)"},
       {"kv-heads", "0", "key/value heads (0: H)"},
       {"head-dim", "", "head dim D (default 128 on cuda, 16 on cpu)"},
       {"joint", "0", "replicated joint (text) tokens J in front of the image tokens"},
       {"causal", "", "causal mask", true},
       {"dtype", "bf16", "bf16 or f16 (cpu also f32)"},
       {"warmup", "3", "untimed runs per case"},
       {"iters", "10", "timed runs per case (median reported)"},
       {"emulate-nodes", "1", "group the ranks into N emulated machines"},
       {"link", "nic400", "emulated link preset: nic400 (50 GB/s, 5 us) or paper"},
       {"link-gbps", "0", "emulated link bandwidth per GPU in GB/s (overrides --link)"},
       {"link-latency-us", "-1", "emulated link latency in us (overrides --link)"},
       {"heap", "auto", "symmetric heap: nvshmem, ipc or auto"},
       {"cost", "", "cost model overrides for auto, mesh and sim_us (key=value,...)"},
       {"timeline", "",
        "write per-rank step timelines of one run to PREFIX-<method>-L<seq>-rank<r>.json"},
       {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  RankLaunch launch;
  launch.backend = opt.text("backend");
  launch.nranks = nranks_option(opt.text("nranks"));
  apply_emulation_options(int(opt.integer("emulate-nodes", 1, 4096)), opt.text("link"),
                          opt.number("link-gbps"), opt.number("link-latency-us"), launch.context);
  launch.context.heap_transport = opt.text("heap");
  const bool on_gpu = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  auto or_default = [&](const std::string& name, const char* gpu, const char* cpu) {
    return opt.text(name).empty() ? std::string(on_gpu ? gpu : cpu) : opt.text(name);
  };
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  std::vector<int64_t> seqs;
  for (const std::string& item : Options::split(or_default("seq", "16384", "128")))
    seqs.push_back(parse_integer(item, "--seq", 1, std::numeric_limits<int64_t>::max()));
  TESSERA_CHECK_ARG(!seqs.empty(), "--seq = '", opt.text("seq"),
                    "': expected a comma list of sequence lengths");
  Shape base;
  base.batch = opt.integer("batch", 1, kMaxInt);
  base.heads = int(parse_integer(or_default("heads", "24", "4"), "--heads", 1, kMaxInt));
  base.kv_heads = int(opt.integer("kv-heads", 0, base.heads));
  if (base.kv_heads == 0) base.kv_heads = base.heads;
  TESSERA_CHECK_ARG(base.heads % base.kv_heads == 0, "--kv-heads = ", base.kv_heads,
                    ": expected a divisor of --heads = ", base.heads, " (or 0 for all)");
  base.head_dim = int(parse_integer(or_default("head-dim", "128", "16"), "--head-dim", 1, kMaxInt));
  base.joint = opt.integer("joint", 0, std::numeric_limits<int64_t>::max());
  base.causal = opt.flag("causal");
  base.dtype = parse_attention_dtype(opt.text("dtype"), "--dtype");
  std::vector<MethodSpec> methods;
  for (const std::string& m : opt.list("methods")) methods.push_back(parse_method_spec(m));
  TESSERA_CHECK_ARG(!methods.empty(), "--methods = '", opt.text("methods"),
                    "': expected a comma list of methods");
  // Checked here, read again where the timing loops run.
  (void)opt.integer("iters", 1, 1000000);
  (void)opt.integer("warmup", 0, 1000000);
  // Symmetric heaps never free: room for every method that may be one-sided (auto included),
  // each with up to two copies of the whole sequence's Q, K, V (Ulysses' exchange buffers are
  // the whole sequence for a head group; staging and ring buffers are smaller). Checked
  // against the memory there is, so a huge --seq is refused naming it.
  const int64_t longest = *std::max_element(seqs.begin(), seqs.end());
  size_t per_method = 0;
  for (int64_t L : seqs) {
    const size_t tokens = size_t(L) + size_t(base.joint);  // both < 2^63: no overflow
    per_method = std::max(per_method,
                          saturating_product({size_t(base.batch), tokens,
                                              size_t(base.heads) + 2 * size_t(base.kv_heads),
                                              size_t(base.head_dim), dtype_size(base.dtype), 2}));
  }
  size_t one_sided = 0;
  for (const MethodSpec& m : methods) {
    one_sided += m.comm == sp::CommMode::kOneSided || m.method == Method::kAuto;
  }
  const size_t heap = saturating_product({per_method, seqs.size(), std::max<size_t>(one_sided, 1)});
  check_memory_fits(launch, std::max(per_method, heap), "--seq", str(longest),
                    str("two copies of Q, K, V of ", longest, " + ", base.joint,
                        " joint tokens, B ", base.batch, " H ", base.heads, " Hkv ", base.kv_heads,
                        " D ", base.head_dim, " ", dtype_name(base.dtype), ", per rank"));
  launch.context.heap_bytes = heap + (size_t(64) << 20);

  return run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    std::string cost = opt.text("cost");
    if (ctx.backend == Backend::kCuda && ctx.topology.emulated && ctx.topology.num_machines() > 1) {
      const MeasuredLink two_sided = measure_emulated_two_sided(ctx);
      cost = cost_overrides(two_sided) + (cost.empty() ? "" : "," + cost);
      if (ctx.rank == 0) {
        std::printf(
            "# two-sided traffic between emulated machines (NCCL sockets), measured: "
            "%.2f GB/s per GPU, %.1f us; held to the emulated link (%.2f GB/s, %.1f us), it "
            "moves at the slower of the two (the cost model does the same)\n",
            two_sided.bandwidth_gbps, two_sided.latency_us, ctx.topology.cross_link.bandwidth_gbps,
            ctx.topology.cross_link.latency_us);
      }
    }
    std::vector<BenchRecord> records;
    int64_t failed = 0;
    for (int64_t L : seqs) {
      Shape shape = base;
      shape.seq = L;
      // The whole sequence's K and V on every rank, for the reference.
      const int64_t T = shape.joint + shape.seq;
      std::vector<int64_t> all(static_cast<size_t>(T));
      for (int64_t i = 0; i < T; ++i) all[size_t(i)] = i;
      const std::vector<Tensor> full_kv = {
          make_input(ctx, shape.dtype, 1, shape.batch, shape.kv_heads, shape.head_dim, all,
                     ctx.stream),
          make_input(ctx, shape.dtype, 2, shape.batch, shape.kv_heads, shape.head_dim, all,
                     ctx.stream)};
      std::vector<Row> rows;
      if (ctx.backend == Backend::kCuda) rows.push_back(bench_single_gpu(ctx, shape, opt, full_kv));
      const double single_tflops = rows.empty() ? 0.0 : rows.front().tflops;
      for (const MethodSpec& m : methods)
        rows.push_back(bench_method(ctx, shape, m, opt, cost, full_kv));
      if (ctx.rank != 0) continue;
      const std::string topo = topology_label(ctx.topology);
      std::printf("# tessera bench sp: %d ranks, %s, backend %s, %s", ctx.size, topo.c_str(),
                  backend_name(ctx.backend), shape.label().c_str());
      if (ctx.topology.emulated) {
        std::printf(", emulated link %.1f GB/s %.1f us", ctx.options.emulated_link.bandwidth_gbps,
                    ctx.options.emulated_link.latency_us);
      }
      std::printf("\n# %-18s %10s %11s %7s %10s %10s %10s %10s %9s %3s  %s\n", "method",
                  "median_us", "TFLOP/s/GPU", "of_1gpu", "sim_us", "sim_hidden", "MB_intra",
                  "MB_cross", "max_diff", "ok", "plan");
      for (const Row& r : rows) {
        if (!r.applicable) {
          std::printf("  %-18s not applicable: %s\n", r.method.c_str(), r.reason.c_str());
          continue;
        }
        const double of_single = single_tflops > 0 ? r.tflops / single_tflops : 0.0;
        std::printf("  %-18s %10.1f %11.2f %7.3f %10.1f %9.0f%% %10.3f %10.3f %9.2e %3s  %s\n",
                    r.method.c_str(), r.median_us, r.tflops, of_single, r.sim_us,
                    100.0 * r.sim_hidden, r.mb_intra, r.mb_cross, r.max_diff, r.ok ? "yes" : "NO",
                    r.params.c_str());
        failed += r.ok ? 0 : 1;
        BenchRecord rec;
        rec.bench = "sp";
        rec.case_name = shape.label();
        rec.impl = "tessera " + r.method;
        rec.gpu = gpu_name(ctx);
        rec.num_gpus = ctx.backend == Backend::kCuda ? ctx.size : 0;
        rec.topology = topo;
        rec.median_us = r.median_us;
        rec.tflops = r.tflops;
        rec.ok = r.ok;
        rec.extra["sim_us"] = r.sim_us;
        rec.extra["sim_hidden_fraction"] = r.sim_hidden;
        rec.extra["mb_in_intra"] = r.mb_intra;
        rec.extra["mb_in_cross"] = r.mb_cross;
        rec.extra["max_diff"] = r.max_diff;
        if (single_tflops > 0) rec.extra["of_single_gpu"] = r.tflops / single_tflops;
        rec.extra_text["plan"] = r.params;
        records.push_back(rec);
      }
    }
    if (ctx.rank != 0) return;
    std::printf("# wrong cases: %lld\n", static_cast<long long>(failed));
    if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
    if (failed != 0)
      throw_error(ErrorCode::kInternal, str("bench sp: ", failed, " cases outside tolerance"));
  });
}

const CommandRegistration kBenchSp(
    "bench sp", "sequence-parallel attention: every method side by side, verified", run_bench_sp);

}  // namespace
}  // namespace tessera::cli
