// `tessera bench tp-loopback`: the fused tensor-parallel operations of P ranks on one GPU
// (TpLoopback: TpOperation's cuda path on P loopback ranks, each on 1/P of the multiprocessors),
// every rank's output verified, and what the protocols cost on top of the GEMMs:
//   ag_gemm    (qkv, mlp_up): outputs against cuBLASLt on the gathered rows; the hooks inside
//              the kernel (tile order, arrival waits): rank 0's kernel with every arrival
//              already signalled beside the plain building block of the same configuration
//              and cuBLASLt, all on the whole GPU, timed in turns (one of each an iteration);
//   gemm_rs    (attn_out, mlp_down) and gemm_a2a (flux-12b's ulysses_qkv): outputs against
//              cuBLASLt (for gemm_rs, each rank's partial by cuBLASLt, summed in rank order as
//              the owner sums); the protocol (per-owner GEMMs, copies into the owners'
//              symmetric buffers, signal words, the owner's sum or copy out) beside the same P
//              ranks' GEMMs alone, each on its 1/P of the multiprocessors, all at once.
// Loopback times are P ranks sharing one GPU, not P GPUs.
// Records: bench "tp", case "<op> <model> <layer> tp<P> M<m>", impls "tessera loopback",
// "tessera hooked", "tessera", "cublaslt" (ag_gemm), "tessera gemms alone" (gemm_rs, gemm_a2a);
// the hooks' cost is hooked / tessera - 1, the protocol's loopback / gemms alone - 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench_record.h"
#include "bench_stats.h"
#include "command.h"
#include "options.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"
#include "tessera/gemm/gemm_config.h"
#include "tessera/runtime/memory.h"
#include "tessera/tp/loopback.h"
#include "tessera/tp/model_shapes.h"

namespace tessera::cli {
namespace {

constexpr DType kDtype = DType::kBF16;

// Elements of `got` farther from `want` than two roundings of the output type (of `scale`,
// which bounds the rounded terms' magnitudes, or of the value) allow.
int64_t mismatches(const std::vector<std::byte>& got, const std::vector<float>& want,
                   const std::vector<float>& scale) {
  const double eps = 1.0 / 128;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = load_as_float(got.data(), kDtype, int64_t(i)), w = want[i];
    const double s = scale.empty() ? std::fabs(w) : double(scale[i]);
    bad += !(std::fabs(g - w) <= eps * s + 2e-2);
  }
  return bad;
}

struct Bench {
  int p = 4;
  int warmup = 3, iters = 20;
  Device gpu = Device::cuda(0);
  Stream stream = Stream::create_cuda(0);
  std::vector<BenchRecord> records;
  int64_t total_wrong = 0;

  // A [rows, cols] bf16 tensor of values in [-1, 1) from a hash of (seed, index): cheap for
  // the largest shapes, the same every run.
  Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed) {
    std::vector<std::byte> h(size_t(rows * cols) * 2);
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint64_t x = (uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;
      x ^= x >> 31;
      x *= 0x94D049BB133111EBull;
      x ^= x >> 29;
      store_from_float(h.data(), kDtype, i, float(x >> 40) / float(1 << 23) - 1.0f);
    }
    Tensor t = Tensor::empty({rows, cols}, kDtype, gpu);
    copy_bytes(t.data(), h.data(), h.size(), stream);
    return t;
  }
  std::vector<std::byte> download(const void* data, size_t bytes) {
    std::vector<std::byte> h(bytes);
    copy_bytes(h.data(), data, bytes, stream);
    stream.synchronize();
    return h;
  }
  std::vector<float> floats(const void* data, int64_t count) {
    const std::vector<std::byte> h = download(data, size_t(count) * 2);
    std::vector<float> f(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) f[size_t(i)] = load_as_float(h.data(), kDtype, i);
    return f;
  }
  double time_us(const std::function<void()>& call) { return time_in_turns({call})[0]; }
  // Median us of each call, timed in turns (one of each per iteration), so that every call
  // meets the GPU's clocks and caches in the same state.
  std::vector<double> time_in_turns(const std::vector<std::function<void()>>& calls) {
    for (int i = 0; i < warmup; ++i) {
      for (const auto& call : calls) call();
    }
    std::vector<std::vector<double>> us(calls.size());
    for (int i = 0; i < iters; ++i) {
      for (size_t c = 0; c < calls.size(); ++c) {
        Event start = Event::create(stream, true), end = Event::create(stream, true);
        start.record(stream);
        calls[c]();
        end.record(stream);
        end.synchronize(60000, "bench tp-loopback: a call");
        us[c].push_back(1000.0 * end.elapsed_ms_since(start));
      }
    }
    std::vector<double> medians;
    for (auto& u : us) medians.push_back(median(u));
    return medians;
  }
  void report(const std::string& name, const char* impl, const std::string& config, double us,
              double flops, int64_t wrong) {
    total_wrong += wrong;
    const double tflops = flops / (us * 1e-6) / 1e12;
    std::printf("  %-40s %-20s %-14s %11.1f %9.1f %8lld\n", name.c_str(), impl, config.c_str(), us,
                tflops, static_cast<long long>(wrong));
    BenchRecord rec;
    rec.bench = "tp";
    rec.case_name = name;
    rec.impl = impl;
    rec.gpu = first_gpu_name();
    rec.num_gpus = 1;
    rec.topology = str(p, " ranks on 1 GPU (loopback)");
    rec.median_us = us;
    rec.tflops = tflops;
    rec.ok = wrong == 0;
    if (!config.empty()) rec.extra_text["config"] = config;
    records.push_back(rec);
  }

  void all_gather_gemm(const tp::TpLayerShape& layer, int64_t m);
  void owner_operation(const tp::TpLayerShape& layer, int64_t m);
};

void Bench::all_gather_gemm(const tp::TpLayerShape& layer, int64_t m) {
  const int64_t n = layer.n / p, k = layer.k;
  tp::TpPlan plan;
  plan.request = {tp::TpOp::kAllGatherGemm, m,     layer.n, k, kDtype, kDtype,
                  tp::WeightLayout::kNK,    false, p,       1};
  tp::TpLoopback loopback(plan, gpu);
  const std::string name = str("ag_gemm ", layer.model, " ", layer.layer, " tp", p, " M", m);
  const std::string config = loopback.gemm_config();
  Tensor gathered = random_tensor(m, k, 1), want = Tensor::empty({m, n}, kDtype, gpu);
  std::vector<Tensor> shards, weights, outs;
  std::vector<TensorView> a, b, bias, out;
  for (int r = 0; r < p; ++r) {
    const tp::RowRange rows = tp::row_range(m, p, r);
    shards.push_back(Tensor::empty({rows.count, k}, kDtype, gpu));
    copy_bytes(shards.back().data(),
               static_cast<const std::byte*>(gathered.data()) + size_t(rows.begin * k) * 2,
               size_t(rows.count * k) * 2, stream);
    weights.push_back(random_tensor(n, k, 10 + uint64_t(r)));
    outs.push_back(Tensor::empty({m, n}, kDtype, gpu));
    a.push_back(shards.back().view());
    b.push_back(weights.back().view());
    bias.push_back(TensorView());
    out.push_back(outs.back().view());
  }
  const gemm::GemmShape shape{m, n, k, kDtype, kDtype, true, false};
  gemm::Gemm cublaslt(shape, gpu, gemm::GemmImpl::kCublasLt);
  gemm::Gemm plain(shape, gpu, gemm::GemmImpl::kHopper, gemm::parse_gemm_config(config, "config"));
  const double rank_flops = 2.0 * double(m) * double(n) * double(k);
  // Loopback: every rank's output against cuBLASLt on the gathered rows.
  const double loop_us = time_us([&] { loopback.run(a, b, bias, out, stream); });
  int64_t wrong = 0;
  for (int r = 0; r < p; ++r) {
    cublaslt.run(gathered.view(), b[size_t(r)], TensorView(), want.view(), stream);
    wrong += mismatches(download(outs[size_t(r)].data(), size_t(m * n) * 2),
                        floats(want.data(), m * n), {});
  }
  report(name, "tessera loopback", config, loop_us, rank_flops * p, wrong);
  // The hooked kernel, the plain one and cuBLASLt on rank 0's GEMM, whole GPU, timed in turns;
  // each output checked after its own call.
  cublaslt.run(gathered.view(), b[0], TensorView(), want.view(), stream);
  const std::vector<float> want0 = floats(want.data(), m * n);
  auto hooked = [&] {
    loopback.run_hooked_gemm(0, gathered.view(), b[0], TensorView(), out[0], stream);
  };
  auto plain_run = [&] { plain.run(gathered.view(), b[0], TensorView(), out[0], stream); };
  hooked();
  const int64_t hooked_wrong = mismatches(download(outs[0].data(), size_t(m * n) * 2), want0, {});
  plain_run();
  const int64_t plain_wrong = mismatches(download(outs[0].data(), size_t(m * n) * 2), want0, {});
  const std::vector<double> turns =
      time_in_turns({hooked, plain_run, [&] {
                       cublaslt.run(gathered.view(), b[0], TensorView(), want.view(), stream);
                     }});
  const double hooked_us = turns[0], plain_us = turns[1], cublaslt_us = turns[2];
  report(name, "tessera hooked", config, hooked_us, rank_flops, hooked_wrong);
  report(name, "tessera", config, plain_us, rank_flops, plain_wrong);
  report(name, "cublaslt", "", cublaslt_us, rank_flops, 0);
  std::printf("  %-40s hooks cost %+.1f%% (hooked %.1f us vs plain %.1f us)\n", name.c_str(),
              100.0 * (hooked_us / plain_us - 1.0), hooked_us, plain_us);
}

// gemm_rs: rank r holds its K/P columns of A and of W ([N, K/P]); owner o gets rows o of the
// sum. gemm_a2a: rank r holds rows r of A and all of W; owner o gets columns o of all rows.
void Bench::owner_operation(const tp::TpLayerShape& layer, int64_t m) {
  const bool rs = layer.op == tp::TpOp::kGemmReduceScatter;
  const int64_t n = layer.n, k = layer.k, k_rank = rs ? k / p : k, n_owner = n / p;
  tp::TpPlan plan;
  plan.request = {layer.op, m, n, k, kDtype, kDtype, tp::WeightLayout::kNK, false, p, 1};
  tp::TpLoopback loopback(plan, gpu);
  const std::string name =
      str(tp::tp_op_name(layer.op), " ", layer.model, " ", layer.layer, " tp", p, " M", m);
  // gemm_rs: each rank's K/P columns of A and W made as they are held; gemm_a2a: A and W whole.
  Tensor a_full = rs ? Tensor() : random_tensor(m, k, 1),
         w_full = rs ? Tensor() : random_tensor(n, k, 2);
  std::vector<Tensor> a_t, b_t, out_t;
  std::vector<TensorView> a, b, bias, out;
  std::vector<std::unique_ptr<gemm::Gemm>> alone;  // each rank's GEMMs without the protocol
  for (int r = 0; r < p; ++r) {
    const tp::RankShapes sh = tp::rank_shapes(plan.request, r);
    const tp::RowRange rows = tp::row_range(m, p, r);
    if (rs) {
      a_t.push_back(random_tensor(m, k_rank, 1 + uint64_t(r)));
      b_t.push_back(random_tensor(n, k_rank, 10 + uint64_t(r)));
    } else {
      a_t.push_back(Tensor::empty({std::max<int64_t>(rows.count, 1), k}, kDtype, gpu));
      copy_bytes(a_t.back().data(),
                 static_cast<const std::byte*>(a_full.data()) + size_t(rows.begin * k) * 2,
                 size_t(rows.count * k) * 2, stream);
      b_t.push_back(Tensor());
    }
    out_t.push_back(Tensor::empty({std::max<int64_t>(sh.out_rows, 1), sh.out_cols}, kDtype, gpu));
    a.push_back(sh.a_rows == 0
                    ? TensorView()
                    : TensorView(a_t.back().data(), kDtype, gpu, {sh.a_rows, sh.a_cols}));
    b.push_back(rs ? b_t.back().view() : w_full.view());
    bias.push_back(TensorView());
    out.push_back(sh.out_rows == 0
                      ? TensorView()
                      : TensorView(out_t.back().data(), kDtype, gpu, {sh.out_rows, sh.out_cols}));
    const int64_t gemm_m = rs ? m : rows.count;
    alone.push_back(
        gemm_m == 0 ? nullptr
                    : std::make_unique<gemm::Gemm>(
                          gemm::GemmShape{gemm_m, n, k_rank, kDtype, kDtype, true, false}, gpu));
  }
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const double loop_us = time_us([&] { loopback.run(a, b, bias, out, stream); });
  // References: cuBLASLt's product of all rows (gemm_a2a), or of each rank's partial summed
  // in rank order in float32, as the owner sums (gemm_rs).
  int64_t wrong = 0;
  Tensor product = Tensor::empty({m, n}, kDtype, gpu);
  std::vector<float> want(size_t(m * n), 0.0f), scale;
  if (rs) {
    scale.assign(size_t(m * n), 0.0f);
    gemm::Gemm cublaslt({m, n, k_rank, kDtype, kDtype, true, false}, gpu,
                        gemm::GemmImpl::kCublasLt);
    for (int r = 0; r < p; ++r) {
      cublaslt.run(a[size_t(r)], b[size_t(r)], TensorView(), product.view(), stream);
      const std::vector<float> partial = floats(product.data(), m * n);
      for (size_t i = 0; i < partial.size(); ++i) {
        want[i] += partial[i];
        scale[i] += std::fabs(partial[i]);
      }
    }
  } else {
    gemm::Gemm cublaslt({m, n, k, kDtype, kDtype, true, false}, gpu, gemm::GemmImpl::kCublasLt);
    cublaslt.run(a_full.view(), w_full.view(), TensorView(), product.view(), stream);
    want = floats(product.data(), m * n);
  }
  for (int o = 0; o < p; ++o) {
    const tp::RankShapes sh = tp::rank_shapes(plan.request, o);
    if (sh.out_rows == 0) continue;
    const tp::RowRange rows = tp::row_range(m, p, o);
    std::vector<float> want_o, scale_o;
    for (int64_t i = 0; i < sh.out_rows; ++i) {
      for (int64_t j = 0; j < sh.out_cols; ++j) {
        const size_t at = rs ? size_t((rows.begin + i) * n + j) : size_t(i * n + o * n_owner + j);
        want_o.push_back(want[at]);
        if (rs) scale_o.push_back(scale[at]);
      }
    }
    wrong += mismatches(download(out_t[size_t(o)].data(), size_t(sh.out_rows * sh.out_cols) * 2),
                        want_o, scale_o);
  }
  report(name, "tessera loopback", "", loop_us, flops, wrong);
  // The same ranks' GEMMs alone, each on its own stream and share of the multiprocessors.
  std::vector<Stream> rank_streams;
  for (int r = 0; r < p; ++r) rank_streams.push_back(Stream::create_cuda(gpu.index));
  const double alone_us = time_us([&] {
    Event start = Event::create(stream);
    start.record(stream);
    for (int r = 0; r < p; ++r) {
      if (!alone[size_t(r)]) continue;
      const Stream& s = rank_streams[size_t(r)];
      start.wait_on(s);
      const int64_t gemm_m = alone[size_t(r)]->shape().m;
      alone[size_t(r)]->run(a[size_t(r)], b[size_t(r)], TensorView(),
                            TensorView(product.data(), kDtype, gpu, {gemm_m, n}), s,
                            loopback.rank_sms());
      Event done = Event::create(s);
      done.record(s);
      done.wait_on(stream);
    }
  });
  report(name, "tessera gemms alone", "", alone_us, flops, 0);
  std::printf(
      "  %-40s protocol cost %+.1f%% (loopback %.1f us vs the ranks' GEMMs alone %.1f us)\n",
      name.c_str(), 100.0 * (loop_us / alone_us - 1.0), loop_us, alone_us);
}

int run_bench_tp_loopback(const std::vector<std::string>& args, int, char**) {
  Options opt("bench tp-loopback",
              {{"model", "all",
                "llama3-70b, gpt3-175b, all (both), or flux-12b (its Ulysses GEMM+AllToAll)"},
               {"ops", "ag_gemm,gemm_rs,gemm_a2a", "comma list of the operations to run"},
               {"tp", "4", "ranks sharing the GPU"},
               {"m", "1024,4096,16384", "comma list of token counts M"},
               {"warmup", "3", "untimed calls per case"},
               {"iters", "20", "timed calls per case (median reported)"},
               {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  TESSERA_CHECK(cuda_available(), ErrorCode::kUnsupported,
                "tessera bench tp-loopback: needs a GPU (loopback runs the fused kernels)");
  std::vector<tp::TpOp> ops;
  for (const std::string& op : opt.list("ops")) ops.push_back(tp::parse_tp_op(op, "--ops"));
  Bench bench;
  bench.p = int(opt.integer("tp", 1, 16));
  bench.warmup = int(opt.integer("warmup", 0, 1000));
  bench.iters = int(opt.integer("iters", 1, 1000));
  std::printf("# tessera bench tp-loopback: %d ranks on one GPU, bf16, weight [N, K]\n", bench.p);
  std::printf("# %-40s %-20s %-14s %11s %9s %8s\n", "case", "impl", "config", "median_us",
              "TFLOP/s", "#wrong");
  for (const tp::TpLayerShape& layer : tp::tp_layer_shapes(opt.text("model"), "--model")) {
    if (std::find(ops.begin(), ops.end(), layer.op) == ops.end()) continue;
    for (const std::string& m_text : opt.list("m")) {
      const int64_t m = int64_t(parse_bytes(m_text, "--m"));
      TESSERA_CHECK_ARG(m >= 1, "--m = '", m_text, "': expected >= 1");
      if (layer.op == tp::TpOp::kAllGatherGemm)
        bench.all_gather_gemm(layer, m);
      else
        bench.owner_operation(layer, m);
      std::fflush(stdout);
    }
  }
  std::printf("# %zu records, #wrong total %lld\n", bench.records.size(),
              static_cast<long long>(bench.total_wrong));
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), bench.records);
  return bench.total_wrong == 0 ? 0 : 1;
}

const CommandRegistration kBenchTpLoopback(
    "bench tp-loopback",
    "the fused tensor-parallel operations of P ranks on one GPU, verified; the hooks' and "
    "protocols' cost",
    run_bench_tp_loopback);

}  // namespace
}  // namespace tessera::cli
