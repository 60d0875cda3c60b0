// `tessera bench tp`: the tensor-parallel operations (Flux) for a model's layers, fused and
// unfused side by side on the same inputs, each verified.
//
// Inputs are a function of their global index (value(tensor, row, col): a hash rounded to the
// dtype), so every rank fills its own shards and can compute any element of the reference
// without communication. After the timed iterations each rank checks `--check` sampled output
// elements against a float64 dot product with the bound of the cpu tests (output rounding,
// float32 accumulation, rounded partials) and counts the wrong ones. Times: an event pair
// around each iteration after a barrier, median per rank, slowest rank reported.
// `--shrink F` divides N and K by F (cpu runs of the real layer shapes would take minutes).
// Weights are [N, K] (nn.Linear's layout). On cuda the fused rows run inside one machine, and
// each case also times this rank's GEMM alone (gemm::Gemm, kAuto: the faster of Tessera's kernel
// and cuBLASLt) for the Flux paper's metrics: effective communication time = fused - GEMM
// alone; overlap efficiency = (unfused - fused) / (unfused - GEMM alone).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "bench_record.h"
#include "bench_stats.h"
#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"
#include "tessera/runtime/memory.h"
#include "tessera/tp/model_shapes.h"
#include "tessera/tp/operation.h"
#include "tessera/tp/planner.h"
#include "tessera/tp/tune_table.h"

namespace tessera::cli {
namespace {

enum class Operand : uint64_t { kA = 1, kW = 2, kBias = 3 };

// Deterministic input value of a global element, in [-1, 1), rounded to `dtype`.
float value(Operand tensor, int64_t row, int64_t col, DType dtype) {
  uint64_t x = (uint64_t(tensor) << 58) ^ (uint64_t(row) << 29) ^ uint64_t(col);
  x += 0x9e3779b97f4a7c15ull;  // splitmix64
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return round_to_dtype(dtype, float(double(x >> 40) / double(1ull << 23) - 1.0));
}

struct Measured {
  double median_us = 0;
  int64_t wrong = 0;
  int64_t checked = 0;
};

class TpBench {
 public:
  TpBench(RankContext& ctx, const Options& opt) : ctx_(ctx), opt_(opt) {}

  Measured run(const tp::TpPlan& plan) {
    const tp::TpRequest& r = plan.request;
    tp::TpOperation op(ctx_, plan);
    const tp::RankShapes s = op.shapes();
    const int rank = ctx_.rank, p = r.world_size;
    const tp::RowRange mine = tp::row_range(r.m, p, rank);
    const bool rs = r.op == tp::TpOp::kGemmReduceScatter, ag = r.op == tp::TpOp::kAllGatherGemm;
    // This rank's operands as functions of global indices.
    const int64_t a_row0 = rs ? 0 : mine.begin, a_col0 = rs ? rank * s.a_cols : 0;
    const int64_t k_rank = rs ? r.k / p : r.k, n_rank = ag ? r.n / p : r.n;
    const int64_t k0 = rs ? rank * k_rank : 0, n0 = ag ? rank * n_rank : 0;
    const bool kn = r.weight_layout == tp::WeightLayout::kKN;
    // Fused and unfused runs of a case share their inputs (filling the widest layers' weights
    // and activations takes seconds per rank).
    const std::string key = tp::describe(r);
    if (operands_key_ != key) {
      operands_key_.clear();
      a_ = b_ = bias_ = Tensor();  // free the last case's inputs first
      a_ = fill(s.a_rows, s.a_cols, r.dtype, [&](int64_t i, int64_t j) {
        return value(Operand::kA, a_row0 + i, a_col0 + j, r.dtype);
      });
      b_ = fill(s.b_rows, s.b_cols, r.dtype, [&](int64_t i, int64_t j) {
        const int64_t kk = kn ? i : j, nn = kn ? j : i;
        return value(Operand::kW, k0 + kk, n0 + nn, r.dtype);
      });
      bias_ = r.has_bias ? fill(1, s.bias, r.out_dtype,
                                [&](int64_t, int64_t j) {
                                  return value(Operand::kBias, 0, (ag ? n0 : 0) + j, r.out_dtype);
                                })
                         : Tensor();
      operands_key_ = key;
    }
    const Tensor &a = a_, &b = b_, &bias = bias_;
    Tensor out = Tensor::empty({s.out_rows, s.out_cols}, r.out_dtype, ctx_.device);
    const TensorView bias_view =
        r.has_bias ? TensorView(bias.data(), r.out_dtype, ctx_.device, {s.bias}) : TensorView();
    auto once = [&] {
      op.run(TensorView(a.data(), r.dtype, ctx_.device, {s.a_rows, s.a_cols}),
             TensorView(b.data(), r.dtype, ctx_.device, {s.b_rows, s.b_cols}), bias_view,
             out.view(), ctx_.stream);
    };
    const Stream& st = ctx_.stream;
    warm_up(once);
    const int iters = int(opt_.integer("iters"));
    std::vector<double> us;
    try {
      for (int i = 0; i < iters; ++i) {
        ctx_.world->barrier(st);
        Event start = Event::create(st, true), end = Event::create(st, true);
        start.record(st);
        once();
        end.record(st);
        ctx_.world->synchronize(st);
        us.push_back(1000.0 * end.elapsed_ms_since(start));
      }
    } catch (const Error&) {
      // A fused kernel's timed-out wait (who waited for whom) explains a failed barrier.
      if (ctx_.heap) ctx_.heap->check_errors();
      throw;
    }
    if (opt_.flag("phases")) print_phases(op, once);
    Measured m;
    m.median_us = max_across_ranks(ctx_, median(us));
    check(r, s, out, m);
    m.wrong = int64_t(sum_across_ranks(ctx_, double(m.wrong)));
    m.checked = int64_t(sum_across_ranks(ctx_, double(m.checked)));
    return m;
  }

  // --warmup iterations, then on cuda as many more as fill 50 ms, the same count on every rank
  // (the operations are collective): after the seconds the host spends filling a case's inputs
  // the GPU has clocked down, and a small case's first timed iterations ran up to 2x slower
  // (4 H200: the first of two runs of one unfused pair at M 128, 116 against 62 us).
  template <typename Run>
  void warm_up(Run&& once) {
    for (int i = 0; i < int(opt_.integer("warmup")); ++i) once();
    if (ctx_.backend != Backend::kCuda) return;
    const Stream& st = ctx_.stream;
    Event start = Event::create(st, true), end = Event::create(st, true);
    start.record(st);
    once();
    end.record(st);
    st.synchronize();
    const double us = std::max(1.0, 1000.0 * end.elapsed_ms_since(start));
    const int more = int(max_across_ranks(ctx_, std::min(2000.0, std::ceil(50000.0 / us))));
    for (int i = 0; i < more; ++i) once();
    st.synchronize();
  }

  // One more run with its phases timed (after the timed ones: the events stay out of their
  // medians), each rank's printed in rank order (cuda; the cpu backend times none).
  template <typename Run>
  void print_phases(tp::TpOperation& op, Run&& once) {
    const Stream& st = ctx_.stream;
    op.time_phases(true);
    ctx_.world->barrier(st);
    once();
    ctx_.world->synchronize(st);
    const std::vector<tp::TpPhase> phases = op.phases();
    op.time_phases(false);
    if (phases.empty()) return;  // the cpu backend times none (the same on every rank)
    std::string line = str("    rank ", ctx_.rank, " phases (us):");
    char us[32];
    for (const tp::TpPhase& phase : phases) {
      std::snprintf(us, sizeof us, "%.1f", phase.us);
      line += str(" ", phase.name, " ", us, ";");
    }
    for (int q = 0; q < ctx_.size; ++q) {
      if (q == ctx_.rank) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      }
      ctx_.world->barrier(st);
      ctx_.world->synchronize(st);
    }
  }

  // This rank's GEMM alone: AllGather+GEMM's on the gathered rows, [M, K] x [N/P, K]^T;
  // GEMM+ReduceScatter's partial, [M, K/P] x [N, K/P]^T.
  double gemm_alone_us(const tp::TpRequest& r) {
    // This rank's GEMM: AllGather+GEMM all rows, its N/P columns; GEMM+ReduceScatter all rows,
    // its K/P inputs; GEMM+AllToAll its rows (the largest share), every column.
    const bool ag = r.op == tp::TpOp::kAllGatherGemm, a2a = r.op == tp::TpOp::kGemmAllToAll;
    gemm::GemmShape shape;
    shape.m = a2a ? (r.m + r.world_size - 1) / r.world_size : r.m;
    shape.n = ag ? r.n / r.world_size : r.n;
    shape.k = ag || a2a ? r.k : r.k / r.world_size;
    shape.dtype = r.dtype;
    shape.out_dtype = r.out_dtype;
    shape.weight_nk = true;
    const gemm::Gemm gemm(shape, ctx_.device);
    // The operation's own values (zeros would run the tensor cores cooler and faster).
    Tensor a = fill(shape.m, shape.k, r.dtype, [&](int64_t i, int64_t j) {
      return value(Operand::kA, i, j, r.dtype);
    });
    Tensor b = fill(shape.n, shape.k, r.dtype, [&](int64_t i, int64_t j) {
      return value(Operand::kW, j, i, r.dtype);
    });
    Tensor out = Tensor::empty({shape.m, shape.n}, r.out_dtype, ctx_.device);
    const Stream& st = ctx_.stream;
    auto once = [&] {
      gemm.run(TensorView(a.data(), r.dtype, ctx_.device, {shape.m, shape.k}),
               TensorView(b.data(), r.dtype, ctx_.device, {shape.n, shape.k}), TensorView(),
               out.view(), st);
    };
    warm_up(once);
    std::vector<double> us;
    for (int i = 0; i < int(opt_.integer("iters")); ++i) {
      Event start = Event::create(st, true), end = Event::create(st, true);
      start.record(st);
      once();
      end.record(st);
      st.synchronize();
      us.push_back(1000.0 * end.elapsed_ms_since(start));
    }
    return max_across_ranks(ctx_, median(us));
  }

 private:
  // Rows are filled by several host threads: this host's cores shared among its ranks.
  template <typename Fn>
  Tensor fill(int64_t rows, int64_t cols, DType dtype, Fn&& fn) {
    std::vector<std::byte> host(size_t(rows * cols) * dtype_size(dtype));
    const int64_t threads = std::clamp<int64_t>(
        int64_t(std::thread::hardware_concurrency()) / std::max(ctx_.size, 1), 1,
        std::max<int64_t>(rows, 1));
    auto fill_rows = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < cols; ++j)
          store_from_float(host.data(), dtype, i * cols + j, fn(i, j));
      }
    };
    std::vector<std::thread> workers;
    for (int64_t t = 1; t < threads; ++t)
      workers.emplace_back(fill_rows, rows * t / threads, rows * (t + 1) / threads);
    fill_rows(0, rows / threads);
    for (std::thread& w : workers) w.join();
    Tensor t = Tensor::empty({std::max<int64_t>(rows * cols, 1)}, dtype, ctx_.device);
    copy_bytes(t.data(), host.data(), host.size(), ctx_.stream);
    ctx_.stream.synchronize();
    return t;
  }

  // Sampled output elements against a float64 reference.
  void check(const tp::TpRequest& r, const tp::RankShapes& s, const Tensor& out, Measured& m) {
    std::vector<std::byte> host(size_t(s.out_rows * s.out_cols) * dtype_size(r.out_dtype));
    copy_bytes(host.data(), out.data(), host.size(), ctx_.stream);
    ctx_.stream.synchronize();
    const int p = r.world_size;
    const bool rs = r.op == tp::TpOp::kGemmReduceScatter;
    const double out_eps = r.out_dtype == DType::kBF16  ? 1.0 / 256
                           : r.out_dtype == DType::kF16 ? 1.0 / 2048
                                                        : 1.2e-7;
    const int64_t samples = std::min<int64_t>(opt_.integer("check"), s.out_rows * s.out_cols);
    for (int64_t t = 0; t < samples; ++t) {
      const int64_t e = (t * 7919 + ctx_.rank) % (s.out_rows * s.out_cols);
      const int64_t i = e / s.out_cols, j = e % s.out_cols;
      const int64_t row = i + (rs ? tp::row_range(r.m, p, ctx_.rank).begin : 0);
      const int64_t col = j + (rs ? 0 : ctx_.rank * s.out_cols);
      double sum = 0, magnitude = 0, partial = 0, partials = 0;
      const int64_t k_part = rs ? r.k / p : r.k;
      for (int64_t kk = 0; kk < r.k; ++kk) {
        const double term =
            double(value(Operand::kA, row, kk, r.dtype)) * value(Operand::kW, kk, col, r.dtype);
        sum += term;
        partial += term;
        magnitude += std::fabs(term);
        if ((kk + 1) % k_part == 0) partials += std::fabs(std::exchange(partial, 0.0));
      }
      if (r.has_bias) sum += value(Operand::kBias, 0, col, r.out_dtype);
      const double bound = out_eps * std::fabs(sum) + double(r.k) * 1.2e-7 * magnitude +
                           (rs ? out_eps * (p + 1) * partials : 0.0) + 1e-30;
      const double got = load_as_float(host.data(), r.out_dtype, e);
      m.wrong += !(std::fabs(got - sum) <= bound);
      ++m.checked;
    }
  }

  RankContext& ctx_;
  const Options& opt_;
  std::string operands_key_;  // the request whose inputs a_, b_, bias_ hold
  Tensor a_, b_, bias_;
};

// `tune`: `tessera tune tp`, which measures fused and unfused and writes the tuning table
// (tp/tune_table.h; --tune-table defaults to tp_tune_table_path()).
int run_tp(const std::vector<std::string>& args, int argc, char** argv, bool tune) {
  Options opt(
      tune ? "tune tp" : "bench tp",
      {{"backend", "auto", "cuda, cpu or auto (cuda when a GPU is visible)"},
       {"nranks", "", "ranks (default: every visible GPU on cuda, 4 on cpu)"},
       {"model", "llama3-70b", "llama3-70b, gpt3-175b, flux-12b (Ulysses projection) or all"},
       {"layers", "", "comma list of layers (default: all of the model's)"},
       {"m", "", "comma list of token counts M (default 128,1024,4096 on cuda, 64,257 on cpu)"},
       {"shrink", "", "divide N and K by this (default 1 on cuda, 64 on cpu)"},
       {"impls", "fused,unfused",
        "comma list of fused, unfused and auto (the planner's choice: a matching row of the "
        "tuning table, else the cost model)"},
       {"warmup", "2", "untimed iterations per case (on cuda then more, to fill 50 ms)"},
       {"iters", "10", "timed iterations per case (median reported)"},
       {"check", "64", "sampled output elements verified per rank"},
       {"comm-rows", "-1",
        "AllGather+GEMM's rows per communication chunk (-1: the planner's pick, 0: a whole "
        "shard)"},
       {"phases", "", "print when each phase of one more run ended, per rank", true},
       {"emulate-nodes", "1", "group the ranks into N emulated machines"},
       {"link", "nic400", "emulated link preset: nic400 (50 GB/s, 5 us) or paper"},
       {"link-gbps", "0", "emulated link bandwidth per GPU in GB/s (overrides --link)"},
       {"link-latency-us", "-1", "emulated link latency in us (overrides --link)"},
       {"json", "", "write the records to this JSON file"},
       {"tune-table", "",
        tune ? "the tuning table to write (default: TESSERA_TP_TUNE_TABLE or ~/.cache/tessera/"
               "tp_tune.tsv)"
             : "also write each case's fused and unfused medians into this tuning table"}});
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
  const bool on_gpu = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  std::vector<tp::TpLayerShape> layers = tp::tp_layer_shapes(opt.text("model"), "--model");
  if (!opt.text("layers").empty()) {
    const auto wanted = opt.list("layers");
    std::vector<tp::TpLayerShape> kept;
    for (const std::string& name : wanted) {
      const auto it = std::find_if(layers.begin(), layers.end(),
                                   [&](const tp::TpLayerShape& l) { return l.layer == name; });
      TESSERA_CHECK_ARG(it != layers.end(), "--layers: '", name,
                        "': expected qkv, attn_out, mlp_up or mlp_down");
      kept.push_back(*it);
    }
    layers = kept;
  }
  std::vector<int64_t> token_counts;
  for (const std::string& text :
       opt.list("m").empty() || opt.text("m").empty()
           ? std::vector<std::string>(on_gpu ? std::vector<std::string>{"128", "1024", "4096"}
                                             : std::vector<std::string>{"64", "257"})
           : opt.list("m")) {
    const int64_t m = int64_t(parse_bytes(text, "--m"));
    TESSERA_CHECK_ARG(m >= 1, "--m = '", text, "': expected >= 1 token");
    token_counts.push_back(m);
  }
  const int64_t shrink =
      opt.text("shrink").empty() ? (on_gpu ? 1 : 64) : opt.integer("shrink", 1, 1 << 20);
  const auto impls = opt.list("impls");
  for (const auto& impl : impls) {
    TESSERA_CHECK_ARG(impl == "fused" || impl == "unfused" || impl == "auto", "--impls: '", impl,
                      "': expected fused, unfused or auto");
  }
  (void)opt.integer("iters", 1, 1000000);
  (void)opt.integer("warmup", 0, 1000000);
  (void)opt.integer("check", 0, 1 << 20);
  launch.context.heap_bytes = size_t(1) << 30;
  const std::string table = !opt.text("tune-table").empty() ? opt.text("tune-table")
                            : tune                          ? tp::tp_tune_table_path()
                                                            : std::string();
  TESSERA_CHECK_ARG(table.empty() || (std::find(impls.begin(), impls.end(), "fused") != impls.end() &&
                                      std::find(impls.begin(), impls.end(), "unfused") != impls.end()),
                    "--tune-table: needs --impls with both fused and unfused");
  return run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    TpBench bench(ctx, opt);
    const std::string topo = topology_label(ctx.topology);
    if (ctx.rank == 0) {
      std::printf(
          "# tessera bench tp: %d ranks, %s, backend %s%s\n# %-40s %-15s %6s %11s %9s %8s %9s "
          "%7s\n",
          ctx.size, topo.c_str(), backend_name(ctx.backend),
          shrink > 1 ? str(", N and K / ", shrink).c_str() : "", "case", "impl", "M", "median_us",
          "TFLOP/s", "#wrong", "gemm_us", "overlap");
    }
    std::vector<BenchRecord> records;
    std::vector<tp::TpTuneEntry> tuned;  // cases with both fused and unfused measured
    int64_t total_wrong = 0;
    for (const tp::TpLayerShape& layer : layers) {
      for (int64_t m : token_counts) {
        tp::TpRequest request;
        request.op = layer.op;
        request.m = m;
        // Shrunk shapes keep N and K multiples of the ranks.
        request.n = std::max<int64_t>(layer.n / shrink / ctx.size, 1) * ctx.size;
        request.k = std::max<int64_t>(layer.k / shrink / ctx.size, 1) * ctx.size;
        request.world_size = ctx.size;
        request.num_machines = ctx.topology.num_machines();
        request.weight_layout = tp::WeightLayout::kNK;
        const std::string name = str(tp::tp_op_name(layer.op), " ", layer.model,
                                     shrink > 1 ? str("/", shrink) : std::string(), " ",
                                     layer.layer, " tp", ctx.size, " M", m);
        const bool on_cuda = ctx.backend == Backend::kCuda;
        // Whether this backend builds the fused form of the case (cuda: not across machines);
        // where it does not, only the unfused pair and auto run.
        tp::TpPlanOptions forced;
        forced.fuse = tp::TpPlanOptions::Fuse::kFused;
        const bool fused_runs =
            tp::fused_unsupported_reason(tp::plan_for_context(ctx, request, forced), ctx.backend)
                .empty();
        const double gemm_us = on_cuda && fused_runs ? bench.gemm_alone_us(request) : 0.0;
        std::vector<BenchRecord> of_case;
        for (const std::string& impl : impls) {
          const bool fused = impl == "fused", automatic = impl == "auto";
          if (fused && !fused_runs) continue;
          tp::TpPlanOptions options;
          options.comm_rows = opt.integer("comm-rows", -1, int64_t(1) << 40);
          options.fuse = automatic ? tp::TpPlanOptions::Fuse::kAuto
                         : fused   ? tp::TpPlanOptions::Fuse::kFused
                                   : tp::TpPlanOptions::Fuse::kUnfused;
          const tp::TpPlan plan = tp::plan_for_context(ctx, request, options);
          const Measured result = bench.run(plan);
          total_wrong += result.wrong;
          BenchRecord rec;
          rec.bench = "tp";
          rec.case_name = name;
          rec.impl = automatic ? "tessera auto"
                     : fused   ? "tessera fused"
                               : (on_cuda ? "cublaslt+nccl" : "tessera unfused");
          rec.gpu = gpu_name(ctx);
          rec.num_gpus = on_cuda ? ctx.size : 0;
          rec.topology = topo;
          rec.median_us = result.median_us;
          rec.tflops = 2.0 * double(m) * double(request.n) * double(request.k) / ctx.size /
                       (result.median_us * 1e-6) / 1e12;
          rec.ok = result.wrong == 0;
          rec.extra["checked"] = double(result.checked);
          rec.extra["wrong"] = double(result.wrong);
          if (gemm_us > 0) {
            rec.extra["gemm_alone_us"] = gemm_us;
            rec.extra["effective_comm_us"] = result.median_us - gemm_us;
          }
          rec.extra_text["plan"] = tp::describe(plan);
          if (automatic) rec.extra_text["reason"] = plan.reason;
          of_case.push_back(rec);
        }
        // The paper's overlap efficiency, on the fused record, against the unfused one.
        auto find = [&](bool fused) {
          return std::find_if(of_case.begin(), of_case.end(), [&](const BenchRecord& rec) {
            return fused ? rec.impl == "tessera fused"
                         : rec.impl == "cublaslt+nccl" || rec.impl == "tessera unfused";
          });
        };
        const auto fused_rec = find(true), unfused_rec = find(false);
        if (gemm_us > 0 && fused_rec != of_case.end() && unfused_rec != of_case.end() &&
            unfused_rec->median_us > gemm_us) {
          fused_rec->extra["overlap_efficiency"] =
              (unfused_rec->median_us - fused_rec->median_us) / (unfused_rec->median_us - gemm_us);
          fused_rec->extra["vs_unfused"] = unfused_rec->median_us / fused_rec->median_us;
        }
        if (fused_rec != of_case.end() && unfused_rec != of_case.end()) {
          tuned.push_back({gpu_name(ctx), ctx.size, request.num_machines, request.op, request.n,
                           request.k, m, fused_rec->median_us, unfused_rec->median_us});
        }
        for (const BenchRecord& rec : of_case) {
          if (ctx.rank == 0) {
            const auto eff = rec.extra.find("overlap_efficiency");
            std::printf("  %-40s %-15s %6lld %11.1f %9.2f %8lld %9.1f %7s\n", name.c_str(),
                        rec.impl.c_str(), static_cast<long long>(m), rec.median_us, rec.tflops,
                        static_cast<long long>(rec.extra.at("wrong")), gemm_us,
                        eff == rec.extra.end() ? "" : str(int(std::lround(100 * eff->second)), "%").c_str());
          }
          records.push_back(rec);
        }
        // Written after every case, so a run stopped early keeps what it measured.
        if (ctx.rank == 0 && !opt.text("json").empty()) write_bench_json(opt.text("json"), records);
      }
    }
    if (ctx.rank != 0) return;
    std::printf("# %zu cases, #wrong total %lld\n", records.size(),
                static_cast<long long>(total_wrong));
    if (total_wrong != 0)
      throw_error(ErrorCode::kInternal, str("bench tp: ", total_wrong, " wrong elements"));
    if (!table.empty()) {
      tp::write_tp_tune_table(table, tuned);
      std::printf("# %zu measured cases written to the tuning table %s\n", tuned.size(),
                  table.c_str());
    }
  });
}

const CommandRegistration kBenchTp(
    "bench tp", "tensor-parallel GEMMs with fused communication, fused vs unfused, verified",
    [](const std::vector<std::string>& args, int argc, char** argv) {
      return run_tp(args, argc, argv, false);
    });
const CommandRegistration kTuneTp(
    "tune tp",
    "measure fused and unfused tensor-parallel GEMMs and write the planner's tuning table",
    [](const std::vector<std::string>& args, int argc, char** argv) {
      return run_tp(args, argc, argv, true);
    });

}  // namespace
}  // namespace tessera::cli
