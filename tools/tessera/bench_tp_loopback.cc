// `tessera bench tp-loopback`: the fused AllGather+GEMM of P ranks on one GPU (TpLoopback), each
// rank's output verified against cuBLASLt on the gathered rows; and what the kernel's hooks
// (tile order, arrival waits) cost: rank 0's kernel with every arrival already signalled
// beside the plain building block of the same configuration and cuBLASLt, all on the whole GPU.
// Loopback times are P ranks sharing one GPU (each on 1/P of its multiprocessors), not P GPUs.
// Records: bench "tp", case "<op> <model> <layer> tp<P> M<m>", impls "tessera loopback",
// "tessera hooked", "tessera", "cublaslt"; the hooks' cost is hooked / tessera - 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
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

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::cli {
namespace {

// Elements of `got` farther from `want` than two roundings of the output type allow.
int64_t mismatches(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                   DType dtype) {
  const double eps = dtype == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
  int64_t bad = 0;
  const int64_t count = int64_t(got.size() / dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const double g = load_as_float(got.data(), dtype, i), w = load_as_float(want.data(), dtype, i);
    bad += !(std::fabs(g - w) <= eps * std::fabs(w) + 2e-2);
  }
  return bad;
}

int run_bench_tp_loopback(const std::vector<std::string>& args, int, char**) {
  Options opt("bench tp-loopback",
              {{"model", "all", "llama3-70b, gpt3-175b or all (their AllGather+GEMM layers)"},
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
  const int p = int(opt.integer("tp", 1, 16));
  const int warmup = int(opt.integer("warmup", 0, 1000)),
            iters = int(opt.integer("iters", 1, 1000));
  const DType dtype = DType::kBF16;
  const Device gpu = Device::cuda(0);
  const Stream stream = Stream::create_cuda(0);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random_tensor = [&](int64_t rows, int64_t cols) {
    std::vector<std::byte> h(size_t(rows * cols) * 2);
    for (int64_t i = 0; i < rows * cols; ++i) store_from_float(h.data(), dtype, i, dist(rng));
    Tensor t = Tensor::empty({rows, cols}, dtype, gpu);
    copy_bytes(t.data(), h.data(), h.size(), stream);
    return t;
  };
  auto download = [&](const Tensor& t) {
    std::vector<std::byte> h(size_t(t.view().numel()) * dtype_size(t.view().dtype()));
    copy_bytes(h.data(), t.data(), h.size(), stream);
    stream.synchronize();
    return h;
  };
  auto time_us = [&](auto&& call) {
    for (int i = 0; i < warmup; ++i) call();
    std::vector<double> us;
    for (int i = 0; i < iters; ++i) {
      Event start = Event::create(stream, true), end = Event::create(stream, true);
      start.record(stream);
      call();
      end.record(stream);
      end.synchronize(60000, "bench tp-loopback: a call");
      us.push_back(1000.0 * end.elapsed_ms_since(start));
    }
    return median(us);
  };

  std::vector<BenchRecord> records;
  int64_t total_wrong = 0;
  std::printf("# tessera bench tp-loopback: %d ranks on one GPU, bf16, weight [N, K]\n", p);
  std::printf("# %-38s %-17s %-14s %11s %9s %8s\n", "case", "impl", "config", "median_us",
              "TFLOP/s", "#wrong");
  for (const tp::TpLayerShape& layer : tp::tp_layer_shapes(opt.text("model"), "--model")) {
    if (layer.op != tp::TpOp::kAllGatherGemm) continue;
    for (const std::string& m_text : opt.list("m")) {
      const int64_t m = int64_t(parse_bytes(m_text, "--m"));
      TESSERA_CHECK_ARG(m >= 1, "--m = '", m_text, "': expected >= 1");
      const int64_t n = layer.n / p, k = layer.k;
      tp::TpPlan plan;
      plan.request = {tp::TpOp::kAllGatherGemm, m,     layer.n, k, dtype, dtype,
                      tp::WeightLayout::kNK,    false, p,       1};
      tp::TpLoopback loopback(plan, gpu);
      const std::string name = str("ag_gemm ", layer.model, " ", layer.layer, " tp", p, " M", m);
      Tensor gathered = random_tensor(m, k), want = Tensor::empty({m, n}, dtype, gpu);
      std::vector<Tensor> shards, weights, outs;
      std::vector<TensorView> a, b, bias, out;
      for (int r = 0; r < p; ++r) {
        const tp::RowRange rows = tp::row_range(m, p, r);
        shards.push_back(Tensor::empty({rows.count, k}, dtype, gpu));
        copy_bytes(shards.back().data(),
                   static_cast<const std::byte*>(gathered.data()) + size_t(rows.begin * k) * 2,
                   size_t(rows.count * k) * 2, stream);
        weights.push_back(random_tensor(n, k));
        outs.push_back(Tensor::empty({m, n}, dtype, gpu));
        a.push_back(shards.back().view());
        b.push_back(weights.back().view());
        bias.push_back(TensorView());
        out.push_back(outs.back().view());
      }
      const gemm::GemmShape shape{m, n, k, dtype, dtype, true, false};
      gemm::Gemm cublaslt(shape, gpu, gemm::GemmImpl::kCublasLt);
      const gemm::GemmConfig config = gemm::parse_gemm_config(loopback.gemm_config(), "config");
      gemm::Gemm plain(shape, gpu, gemm::GemmImpl::kHopper, config);

      struct Row {
        const char* impl;
        double us;
        double flops;
        int64_t wrong;
      };
      std::vector<Row> rows;
      const double rank_flops = 2.0 * double(m) * double(n) * double(k);
      // Loopback: every rank's output against cuBLASLt on the gathered rows.
      const double loop_us = time_us([&] { loopback.run(a, b, bias, out, stream); });
      int64_t wrong = 0;
      for (int r = 0; r < p; ++r) {
        cublaslt.run(gathered.view(), b[size_t(r)], TensorView(), want.view(), stream);
        wrong += mismatches(download(outs[size_t(r)]), download(want), dtype);
      }
      rows.push_back({"tessera loopback", loop_us, rank_flops * p, wrong});
      // The hooked kernel, the plain one and cuBLASLt on rank 0's GEMM, whole GPU, in turns.
      const double hooked_us = time_us([&] {
        loopback.run_hooked_gemm(0, gathered.view(), b[0], TensorView(), out[0], stream);
      });
      cublaslt.run(gathered.view(), b[0], TensorView(), want.view(), stream);
      rows.push_back({"tessera hooked", hooked_us, rank_flops,
                      mismatches(download(outs[0]), download(want), dtype)});
      const double plain_us =
          time_us([&] { plain.run(gathered.view(), b[0], TensorView(), out[0], stream); });
      rows.push_back(
          {"tessera", plain_us, rank_flops, mismatches(download(outs[0]), download(want), dtype)});
      const double cublaslt_us =
          time_us([&] { cublaslt.run(gathered.view(), b[0], TensorView(), want.view(), stream); });
      rows.push_back({"cublaslt", cublaslt_us, rank_flops, 0});
      for (const Row& row : rows) {
        total_wrong += row.wrong;
        const double tflops = row.flops / (row.us * 1e-6) / 1e12;
        std::printf("  %-38s %-17s %-14s %11.1f %9.1f %8lld\n", name.c_str(), row.impl,
                    loopback.gemm_config().c_str(), row.us, tflops,
                    static_cast<long long>(row.wrong));
        BenchRecord rec;
        rec.bench = "tp";
        rec.case_name = name;
        rec.impl = row.impl;
        rec.gpu = first_gpu_name();
        rec.num_gpus = 1;
        rec.topology = str(p, " ranks on 1 GPU (loopback)");
        rec.median_us = row.us;
        rec.tflops = tflops;
        rec.ok = row.wrong == 0;
        rec.extra_text["config"] = loopback.gemm_config();
        records.push_back(rec);
      }
      std::printf("  %-38s hooks cost %+.1f%% (hooked %.1f us vs plain %.1f us)\n", name.c_str(),
                  100.0 * (hooked_us / plain_us - 1.0), hooked_us, plain_us);
    }
  }
  std::printf("# %zu records, #wrong total %lld\n", records.size(),
              static_cast<long long>(total_wrong));
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return total_wrong == 0 ? 0 : 1;
}

const CommandRegistration kBenchTpLoopback(
    "bench tp-loopback", "fused AllGather+GEMM of P ranks on one GPU, verified; the hooks' cost",
    run_bench_tp_loopback);

}  // namespace
}  // namespace tessera::cli
