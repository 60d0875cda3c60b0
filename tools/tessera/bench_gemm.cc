// `tessera bench gemm`: the Hopper GEMM building block (tessera::gemm::Gemm, kHopper) beside
// cuBLASLt on the same operands, for the per-rank GEMMs of a model's tensor-parallel layers
// (column-parallel: N/P x K; row-parallel: N x K/P) at TP 4 and 8, and 8192^3. Each case is
// verified: sampled outputs of each against a float64 dot product. Times: CUDA events around
// each call, median; the implementations take turns call by call (the same clocks and
// temperature for each); operands stay in L2 where they fit, for all alike.
// --configs all also runs every Hopper configuration (gemm_config.h) and names the best, which
// is how choose_gemm_config()'s rule is made and checked.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
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
#include "tessera/tp/model_shapes.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::cli {
namespace {

struct GemmCase {
  std::string name;
  int64_t m, n, k;
};

// Sampled outputs that differ from a float64 dot product by more than the output type's rounding
// plus float32 accumulation over K.
int64_t count_wrong(const std::vector<std::byte>& got, const std::vector<float>& a,
                    const std::vector<float>& b, const GemmCase& c, DType dtype, bool weight_nk,
                    int64_t samples) {
  int64_t wrong = 0;
  const double eps = dtype == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
  for (int64_t t = 0; t < samples; ++t) {
    const int64_t e = (t * 104729) % (c.m * c.n), i = e / c.n, j = e % c.n;
    double sum = 0, magnitude = 0;
    for (int64_t k = 0; k < c.k; ++k) {
      const double w = weight_nk ? b[size_t(j * c.k + k)] : b[size_t(k * c.n + j)];
      sum += double(a[size_t(i * c.k + k)]) * w;
      magnitude += std::fabs(double(a[size_t(i * c.k + k)]) * w);
    }
    const double v = load_as_float(got.data(), dtype, e);
    wrong += !(std::fabs(v - sum) <= eps * std::fabs(sum) + double(c.k) * 1.2e-7 * magnitude);
  }
  return wrong;
}

int run_bench_gemm(const std::vector<std::string>& args, int, char**) {
  Options opt(
      "bench gemm",
      {{"model", "all",
        "llama3-70b, gpt3-175b or all (their per-rank tensor-parallel GEMMs), or llama3-8b"},
       {"tp", "4,8", "comma list of tensor-parallel degrees"},
       {"m", "128,1024,4096,16384", "comma list of token counts M"},
       {"dtype", "bf16", "bf16 or f16"},
       {"weight", "nk", "weight layout: nk ([N, K], a Linear's) or kn"},
       {"warmup", "5", "untimed calls per case"},
       {"iters", "30", "timed calls per case (median reported)"},
       {"check", "32", "sampled output elements verified per case and implementation"},
       {"configs", "rule",
        "Hopper configurations: rule (choose_gemm_config's pick), all (every candidate beside the "
        "rule's) or a comma list of names such as 128x256/dp/s1"},
       {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  const std::string dtype_text = opt.text("dtype");
  TESSERA_CHECK_ARG(dtype_text == "bf16" || dtype_text == "f16", "--dtype = '", dtype_text,
                    "': expected bf16 or f16");
  const DType dtype = dtype_text == "bf16" ? DType::kBF16 : DType::kF16;
  const std::string weight = opt.text("weight");
  TESSERA_CHECK_ARG(weight == "nk" || weight == "kn", "--weight = '", weight,
                    "': expected nk or kn");
  std::vector<GemmCase> cases;
  for (const std::string& p_text : opt.list("tp")) {
    const int64_t p = int64_t(parse_bytes(p_text, "--tp"));
    TESSERA_CHECK_ARG(p >= 1 && p <= 64, "--tp = '", p_text, "': expected 1 to 64");
    for (const tp::TpLayerShape& layer : tp::tp_layer_shapes(opt.text("model"), "--model")) {
      const bool column = layer.op != tp::TpOp::kGemmReduceScatter;
      for (const std::string& m_text : opt.list("m")) {
        const int64_t m = int64_t(parse_bytes(m_text, "--m"));
        TESSERA_CHECK_ARG(m >= 1, "--m = '", m_text, "': expected >= 1");
        const int64_t n = column ? layer.n / p : layer.n, k = column ? layer.k : layer.k / p;
        cases.push_back(
            {str(layer.model, " ", layer.layer, " tp", p, " M", m, " N", n, " K", k), m, n, k});
      }
    }
  }
  cases.push_back({"square M8192 N8192 K8192", 8192, 8192, 8192});
  const int warmup = int(opt.integer("warmup", 0, 100000)),
            iters = int(opt.integer("iters", 1, 100000));
  const int64_t samples = opt.integer("check", 0, 1 << 20);
  std::vector<gemm::GemmConfig> configs;  // run beside the rule's pick
  if (opt.text("configs") == "all") {
    configs = gemm::gemm_config_candidates();
  } else if (opt.text("configs") != "rule") {
    for (const std::string& name : opt.list("configs"))
      configs.push_back(gemm::parse_gemm_config(name, "--configs"));
  }
  TESSERA_CHECK(
      cuda_available(), ErrorCode::kUnsupported,
      "tessera bench gemm: needs a GPU (the cpu backend's GEMM is the float32 reference)");

  const Device gpu = Device::cuda(0);
  const Stream stream = Stream::create_cuda(0);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<BenchRecord> records;
  int64_t total_wrong = 0;
  std::printf("# tessera bench gemm: %s, weight [%s], GPU 0\n# %-52s %-22s %11s %9s %8s %8s\n",
              dtype_name(dtype), weight == "nk" ? "N, K" : "K, N", "case", "impl", "median_us",
              "TFLOP/s", "vs_cblt", "#wrong");
  double worst_rule = 1e9;
  for (const GemmCase& c : cases) {
    const gemm::GemmShape shape{c.m, c.n, c.k, dtype, dtype, weight == "nk", false};
    std::vector<float> a_host(size_t(c.m * c.k)), b_host(size_t(c.k * c.n));
    std::vector<std::byte> a_bytes(a_host.size() * 2), b_bytes(b_host.size() * 2);
    for (size_t i = 0; i < a_host.size(); ++i)
      store_from_float(a_bytes.data(), dtype, int64_t(i),
                       a_host[i] = round_to_dtype(dtype, dist(rng)));
    for (size_t i = 0; i < b_host.size(); ++i)
      store_from_float(b_bytes.data(), dtype, int64_t(i),
                       b_host[i] = round_to_dtype(dtype, dist(rng)));
    Tensor a = Tensor::empty({c.m, c.k}, dtype, gpu);
    Tensor b = weight == "nk" ? Tensor::empty({c.n, c.k}, dtype, gpu)
                              : Tensor::empty({c.k, c.n}, dtype, gpu);
    Tensor out = Tensor::empty({c.m, c.n}, dtype, gpu);
    copy_bytes(a.data(), a_bytes.data(), a_bytes.size(), stream);
    copy_bytes(b.data(), b_bytes.data(), b_bytes.size(), stream);
    stream.synchronize();
    struct Contender {
      std::string name;  // "cublaslt", "tessera" (the rule's pick) or "tessera <config>"
      std::unique_ptr<gemm::Gemm> gemm;
      std::vector<double> us;
    };
    std::vector<Contender> contenders;
    contenders.push_back(
        {"cublaslt", std::make_unique<gemm::Gemm>(shape, gpu, gemm::GemmImpl::kCublasLt), {}});
    contenders.push_back(
        {"tessera", std::make_unique<gemm::Gemm>(shape, gpu, gemm::GemmImpl::kHopper), {}});
    if (c.m <= 8 && weight == "nk") {
      contenders.push_back(
          {"skinny", std::make_unique<gemm::Gemm>(shape, gpu, gemm::GemmImpl::kSkinny), {}});
    }
    for (const gemm::GemmConfig& config : configs) {
      contenders.push_back(
          {"tessera " + gemm::gemm_config_name(config),
           std::make_unique<gemm::Gemm>(shape, gpu, gemm::GemmImpl::kHopper, config),
           {}});
    }
    auto call = [&](const Contender& ct) {
      ct.gemm->run(a.view(), b.view(), TensorView(), out.view(), stream);
    };
    for (int i = 0; i < warmup; ++i) {
      for (const Contender& ct : contenders) call(ct);
    }
    for (int i = 0; i < iters; ++i) {
      for (Contender& ct : contenders) {
        Event start = Event::create(stream, true), end = Event::create(stream, true);
        start.record(stream);
        call(ct);
        end.record(stream);
        end.synchronize(60000, "bench gemm: a GEMM call");
        ct.us.push_back(1000.0 * end.elapsed_ms_since(start));
      }
    }
    const double cublaslt_us = median(contenders[0].us);
    const Contender* best = nullptr;
    for (const Contender& ct : contenders) {
      const double med = median(ct.us);
      if (ct.name != "cublaslt" && (!best || med < median(best->us))) best = &ct;
      call(ct);
      std::vector<std::byte> got(size_t(c.m * c.n) * 2);
      copy_bytes(got.data(), out.data(), got.size(), stream);
      stream.synchronize();
      const int64_t wrong = count_wrong(got, a_host, b_host, c, dtype, weight == "nk", samples);
      total_wrong += wrong;
      const double tflops = 2.0 * double(c.m) * double(c.n) * double(c.k) / (med * 1e-6) / 1e12;
      const std::string label =
          ct.name == "tessera" ? "tessera " + ct.gemm->config_name() : ct.name;
      std::printf("  %-52s %-22s %11.1f %9.1f %7.3fx %8lld\n", c.name.c_str(), label.c_str(), med,
                  tflops, cublaslt_us / med, static_cast<long long>(wrong));
      BenchRecord rec;
      rec.bench = "gemm";
      rec.case_name = c.name;
      rec.impl = ct.name;
      rec.gpu = first_gpu_name();
      rec.num_gpus = 1;
      rec.topology = "1x1";
      rec.median_us = med;
      rec.tflops = tflops;
      rec.ok = wrong == 0;
      rec.extra["vs_cublaslt"] = cublaslt_us / med;
      rec.extra_text["dtype"] = dtype_name(dtype);
      rec.extra_text["weight"] = weight;
      if (ct.name != "cublaslt") rec.extra_text["config"] = ct.gemm->config_name();
      records.push_back(rec);
    }
    const double rule_ratio = cublaslt_us / median(contenders[1].us);
    worst_rule = std::min(worst_rule, rule_ratio);
    if (contenders.size() > 2) {
      std::printf("  %-52s best %s %.3fx, rule %.3fx\n", c.name.c_str(),
                  best->gemm->config_name().c_str(), cublaslt_us / median(best->us), rule_ratio);
    }
  }
  std::printf("# rule's pick vs cuBLASLt: worst %.3fx\n", worst_rule);
  std::printf("# %zu records, #wrong total %lld\n", records.size(),
              static_cast<long long>(total_wrong));
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return total_wrong == 0 ? 0 : 1;
}

const CommandRegistration kBenchGemm(
    "bench gemm", "the Hopper GEMM building block vs cuBLASLt, per-rank TP shapes", run_bench_gemm);

}  // namespace
}  // namespace tessera::cli
