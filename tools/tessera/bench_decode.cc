// `tessera bench decode`: per-layer latency of the decode attention block (fused ClusterFusion
// kernel), each case captured in a CUDA graph and replayed; bytes moved (weights + KV read)
// and the fraction of the HBM roofline, with the read bandwidth measured in the same run by a
// streaming read. --cluster-sizes sweeps the cluster size (the tuner's candidates).
// `tessera tune decode`: the same timing for every cluster size; the fastest goes to the table.
// `tessera bench cluster`: ClusterReduce / ClusterGather over DSMEM against the same through
// global memory (ClusterFusion's Table 1), 256 B to 64 KB, cluster sizes 2 to 16.
// Cases: "<model> b<batch> ctx<context>"; every sequence attends over `context` tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_record.h"
#include "hbm_bandwidth.h"
#include "bench_stats.h"
#include "command.h"
#include "options.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"
#include "tessera/decode/tune_table.h"
#include "tessera/runtime/memory.h"
#include "tessera/runtime/stream.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>

#include "cluster/collective_launch.h"
#include "decode/decode_launch.h"
#include "decode/mla_launch.h"
#endif

namespace tessera::cli {
namespace {

#ifdef TESSERA_WITH_CUDA

// Median of `iters` event-timed calls of `fn` after `warmup` untimed ones, in microseconds.
template <typename Fn>
double median_us(cudaStream_t s, int warmup, int iters, Fn fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(a, s);
    fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms[i], a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + iters / 2, ms.end());
  return ms[iters / 2] * 1e3;
}

// Fills device memory with random bf16-sized values in [-scale, scale) (never zeros: zeros
// would hide unwritten outputs and time faster than real data).
void fill_random(void* dst, size_t bytes, float scale, uint32_t seed, const Stream& stream) {
  static std::vector<uint16_t> pattern;
  const size_t chunk = size_t(16) << 20;
  pattern.resize(chunk / 2);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (auto& v : pattern) v = float_to_bf16_bits(dist(rng));
  for (size_t off = 0; off < bytes; off += chunk)
    copy_bytes(static_cast<char*>(dst) + off, pattern.data(), std::min(chunk, bytes - off), stream);
  stream.synchronize();
}

struct DecodeResult {
  std::string case_name;
  int cluster = 0;
  std::string plan;  // AttentionBlock::describe(): where the cluster size came from
  double us = 0, bytes = 0;
  int resident_clusters = 0;  // clusters of this size the device runs at once (fused)
};

DecodeResult time_case(const decode::ModelConfig& m, int64_t batch, int64_t context,
                       int cluster_size, bool paged, int iters, const Stream& stream,
                       decode::DecodeImpl impl = decode::DecodeImpl::kFused) {
  using namespace decode;
  AttentionBlockOptions o{m, batch, context, DType::kBF16, paged, 16, Device::cuda(0), impl,
                          cluster_size};
  AttentionBlock block(o);
  auto tensor = [](std::vector<int64_t> shape, DType dt = DType::kBF16) {
    return Tensor::empty(shape, dt, Device::cuda(0));
  };
  // A random matrix (or vector) of the model, counted in the weight bytes.
  std::vector<Tensor> weights;
  double weight_bytes = 0;
  auto weight = [&](std::vector<int64_t> shape, float scale) {
    Tensor t = tensor(shape);
    const size_t bytes = size_t(t.view().numel()) * 2;
    fill_random(t.data(), bytes, scale, uint32_t(weights.size() + 1), stream);
    weight_bytes += double(bytes);
    weights.push_back(t);
    return TensorView(t);
  };
  const bool latent = m.kind == AttentionKind::kLatent;
  const float ws = 1.f / std::sqrt(float(m.hidden));
  // The cache: K and V rows of head_dim per KV head, or MLA's one latent row of R + Dr.
  const int64_t cache_heads = latent ? 1 : m.num_kv_heads;
  const int64_t row = latent ? m.kv_lora_rank + m.rope_head_dim : m.head_dim;
  const int64_t pages_per_seq = (context + 15) / 16;
  std::vector<int64_t> cache_shape = paged ? std::vector<int64_t>{batch * pages_per_seq, 16, cache_heads, row}
                                           : std::vector<int64_t>{batch, context, cache_heads, row};
  Tensor k = tensor(cache_shape), v = latent ? Tensor{} : tensor(cache_shape);
  fill_random(k.data(), size_t(k.view().numel()) * 2, 1.f, 6, stream);
  if (!latent) fill_random(v.data(), size_t(v.view().numel()) * 2, 1.f, 7, stream);
  Tensor table = tensor({batch, pages_per_seq}, DType::kI32);
  std::vector<int32_t> pages(batch * pages_per_seq);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = int32_t(i);
  copy_bytes(table.data(), pages.data(), pages.size() * 4, stream);
  Tensor pos = tensor({batch}, DType::kI32);
  std::vector<int32_t> positions(batch, int32_t(context - 1));
  copy_bytes(pos.data(), positions.data(), positions.size() * 4, stream);
  Tensor x = tensor({batch, m.hidden}), out = tensor({batch, m.hidden});
  fill_random(x.data(), batch * m.hidden * 2, 1.f, 8, stream);
  Tensor work = tensor({int64_t(block.workspace_bytes())}, DType::kU8);
  const DecodeStep step{x, pos, out};
  const KvCache cache{k, latent ? TensorView{} : TensorView(v), paged ? TensorView(table) : TensorView{}};
  std::function<void()> run;
  if (latent) {
    const int64_t h = m.num_heads, r = m.kv_lora_rank, dr = m.rope_head_dim;
    const LatentAttentionWeights w{
        weight({h * (m.nope_head_dim + dr), m.hidden}, ws), weight({r + dr, m.hidden}, ws),
        weight({r}, 1.f), weight({h * (m.nope_head_dim + m.v_head_dim), r}, 1.f / std::sqrt(float(r))),
        weight({m.hidden, h * m.v_head_dim}, ws), weight({m.hidden}, 1.f)};
    run = [&, w] { block.run(step, w, cache, work, stream); };
  } else {
    const int64_t q = m.num_heads * m.head_dim, kv = m.num_kv_heads * m.head_dim;
    const AttentionWeights w{weight({q, m.hidden}, ws), weight({kv, m.hidden}, ws),
                             weight({kv, m.hidden}, ws), weight({m.hidden, q}, ws),
                             weight({m.hidden}, 1.f)};
    run = [&, w] { block.run(step, w, cache, work, stream); };
  }
  run();
  stream.synchronize();

  auto s = static_cast<cudaStream_t>(stream.cuda_stream());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  TESSERA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess,
                ErrorCode::kCuda, "bench decode: stream capture failed to begin");
  run();
  TESSERA_CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess &&
                    cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess,
                ErrorCode::kCuda, "bench decode: capturing run() in a CUDA graph failed");
  DecodeResult r;
  r.case_name = str(m.name, " b", batch, " ctx", context);
  r.cluster = block.impl() == decode::DecodeImpl::kFused ? block.cluster_size() : 0;
  r.plan = block.describe();
  if (block.impl() == decode::DecodeImpl::kFused)
    r.resident_clusters =
        latent ? decode::kernels::mla_decode_max_active_clusters(
                     decode::kernels::Element::kBF16, int(m.hidden), int(m.kv_lora_rank),
                     int(m.nope_head_dim), int(m.rope_head_dim), int(m.v_head_dim),
                     block.cluster_size())
               : decode::kernels::fused_decode_max_active_clusters(
                     decode::kernels::Element::kBF16, int(m.group_size()),
                     int(std::min<int64_t>(batch, 16)), int(m.hidden), block.cluster_size());
  r.us = median_us(s, 10, iters, [&] { cudaGraphLaunch(exec, s); });
  // Weights, then the cached rows read (K and V, or the latent rows).
  r.bytes = weight_bytes + double(batch) * (context - 1) * cache_heads * row * 2 * (latent ? 1 : 2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return r;
}

int run_bench_decode(const std::vector<std::string>& args, int, char**) {
  Options opt("bench decode",
              {{"models", "llama2-7b,llama3-8b,deepseek-v2-lite", "models (llama2-7b, llama3-8b, deepseek-v2-lite: MLA)"},
               {"batches", "1,16", "batch sizes"},
               {"contexts", "1024,4096,16384,32768", "context lengths (tokens attended)"},
               {"cluster-sizes", "auto", "auto, or a list to sweep (1,2,4,8,16)"},
               {"impls", "fused,unfused", "fused (ClusterFusion kernel), unfused (cuBLASLt + split-KV)"},
               {"paged", "", "paged KV cache (page size 16) instead of contiguous", true},
               {"iters", "100", "timed graph replays per case"},
               {"json", "", "write records to this file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::printf("%s", opt.usage().c_str());
    return 0;
  }
  TESSERA_CHECK(cuda_available(), ErrorCode::kUnsupported, "bench decode: no CUDA device");
  const Stream stream = Stream::create_cuda(0);
  const std::string gpu = first_gpu_name();
  const double gbps = measure_hbm_read_gbps(stream);
  std::printf("# streaming read: %.0f GB/s on %s\n", gbps, gpu.c_str());
  std::printf("# %-28s %-8s %-8s %9s %10s %10s %10s %9s\n", "case", "impl", "cluster", "resident",
              "median_us", "MB", "roof_us", "roofline");
  std::vector<int> clusters;
  if (opt.text("cluster-sizes") != "auto")
    for (const std::string& c : opt.list("cluster-sizes")) clusters.push_back(std::stoi(c));
  else
    clusters.push_back(0);
  std::vector<BenchRecord> records;
  for (const std::string& name : opt.list("models"))
    for (const std::string& b : opt.list("batches"))
      for (const std::string& c : opt.list("contexts"))
        for (const std::string& impl_name : opt.list("impls"))
        for (int cluster : impl_name == "fused" ? clusters : std::vector<int>{0}) {
          const decode::ModelConfig m = decode::ModelConfig::by_name(name, "--models");
          TESSERA_CHECK_ARG(impl_name == "fused" || impl_name == "unfused", "--impls: '",
                            impl_name, "': expected fused or unfused");
          const auto impl = impl_name == "fused" ? decode::DecodeImpl::kFused : decode::DecodeImpl::kUnfused;
          DecodeResult r;
          try {
            r = time_case(m, std::stoll(b), std::stoll(c), cluster, opt.flag("paged"),
                          int(opt.integer("iters")), stream, impl);
          } catch (const Error& e) {
            std::printf("  %s b%s ctx%s cluster %d: %s\n", name.c_str(), b.c_str(), c.c_str(),
                        cluster, e.what());
            continue;
          }
          const double roof_us = r.bytes / gbps * 1e-3;
          std::printf("  %-28s %-8s %-8d %9d %10.1f %10.1f %10.1f %8.1f%%\n", r.case_name.c_str(),
                      impl_name.c_str(), r.cluster, r.resident_clusters, r.us, r.bytes / 1e6,
                      roof_us, 100 * roof_us / r.us);
          std::fflush(stdout);
          BenchRecord rec;
          rec.bench = "decode";
          rec.case_name = r.case_name;
          rec.impl = "tessera " + impl_name;
          rec.gpu = gpu;
          rec.num_gpus = 1;
          rec.topology = "1x1";
          rec.median_us = r.us;
          rec.gbps = r.bytes / r.us * 1e-3;
          rec.ok = true;
          rec.extra["roofline_fraction"] = roof_us / r.us;
          rec.extra["bytes"] = r.bytes;
          rec.extra["cluster_size"] = r.cluster;
          if (r.resident_clusters > 0) rec.extra["resident_clusters"] = r.resident_clusters;
          rec.extra["read_gbps"] = gbps;
          rec.extra_text["plan"] = r.plan;
          rec.extra_text["kv_layout"] = opt.flag("paged") ? "paged16" : "contiguous";
          records.push_back(rec);
        }
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return 0;
}

// `tessera tune decode`: times every launchable cluster size per (model, batch, context) and
// writes the fastest to the tune table (tune_table.h) that plans with cluster_size 0 read.
int run_tune_decode(const std::vector<std::string>& args, int, char**) {
  Options opt("tune decode", {{"models", "llama2-7b,llama3-8b,deepseek-v2-lite", "models"},
                              {"batches", "1,4,16,64", "batch sizes"},
                              {"contexts", "1024,4096,16384,32768", "context lengths"},
                              {"candidates", "1,2,4,8,16", "cluster sizes to time"},
                              {"iters", "50", "timed graph replays per candidate"},
                              {"table", "", "table file (default: tessera's tune table path)"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::printf("%s", opt.usage().c_str());
    return 0;
  }
  TESSERA_CHECK(cuda_available(), ErrorCode::kUnsupported, "tune decode: no CUDA device");
  const Stream stream = Stream::create_cuda(0);
  const std::string gpu = first_gpu_name();
  const std::string path = opt.text("table").empty() ? decode::tune_table_path() : opt.text("table");
  std::vector<decode::TuneEntry> picks;
  for (const std::string& name : opt.list("models"))
    for (const std::string& b : opt.list("batches"))
      for (const std::string& c : opt.list("contexts")) {
        const decode::ModelConfig m = decode::ModelConfig::by_name(name, "--models");
        decode::TuneEntry best{gpu, m.name, std::stoll(b), std::stoll(c), 0, 0};
        std::printf("  %s b%s ctx%s:", name.c_str(), b.c_str(), c.c_str());
        for (const std::string& n : opt.list("candidates")) {
          try {
            const DecodeResult r = time_case(m, best.batch, best.context, std::stoi(n), false,
                                             int(opt.integer("iters")), stream);
            std::printf("  c%s %.1f us", n.c_str(), r.us);
            if (best.cluster_size == 0 || r.us < best.median_us) {
              best.cluster_size = r.cluster;
              best.median_us = r.us;
            }
          } catch (const Error&) {
            std::printf("  c%s -", n.c_str());  // not launchable for this shape
          }
        }
        std::printf("  -> %d\n", best.cluster_size);
        std::fflush(stdout);
        if (best.cluster_size > 0) picks.push_back(best);
      }
  decode::write_tune_table(path, picks);
  std::printf("# wrote %zu rows to %s\n", picks.size(), path.c_str());
  return 0;
}

int run_bench_cluster(const std::vector<std::string>& args, int, char**) {
  using namespace cluster;
  Options opt("bench cluster", {{"sizes", "2,4,8,16", "cluster sizes"},
                                {"bytes", "256,1K,4K,16K,64K", "message bytes"},
                                {"iters", "1000", "collectives per timed launch"},
                                {"json", "", "write records to this file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::printf("%s", opt.usage().c_str());
    return 0;
  }
  TESSERA_CHECK(cuda_available(), ErrorCode::kUnsupported, "bench cluster: no CUDA device");
  const Stream stream = Stream::create_cuda(0);
  auto s = static_cast<cudaStream_t>(stream.cuda_stream());
  const std::string gpu = first_gpu_name();
  const int iters = int(opt.integer("iters"));
  std::vector<BenchRecord> records;
  std::printf("# %-8s %-8s %8s %12s %12s %8s %12s   (us per collective, f32)\n", "op", "cluster",
              "bytes", "dsmem_us", "global_us", "speedup", "push_us");
  for (const std::string& size_text : opt.list("sizes"))
    for (const std::string& bytes_text : opt.list("bytes"))
      for (CollectiveOp op : {CollectiveOp::kReduceSum, CollectiveOp::kGather}) {
        const int n = std::stoi(size_text);
        const size_t bytes = parse_bytes(bytes_text, "--bytes");
        // Reduce: every CTA holds `bytes`; gather: the gathered message is `bytes`.
        const int count = int(std::max<size_t>(1, op == CollectiveOp::kGather ? bytes / 4 / n : bytes / 4));
        double per_op[3] = {0, 0, 0};  // dsmem, global, dsmem push (reduce up to 4 KB)
        for (CollectivePath path :
             {CollectivePath::kDsmem, CollectivePath::kGlobal, CollectivePath::kDsmemPush}) {
          if (path == CollectivePath::kDsmemPush && (op == CollectiveOp::kGather || bytes > 4096))
            continue;
          CollectiveLaunch l{op, path, CollectiveElement::kF32, n, count, 1, 0};
          if (!collective_unlaunchable_reason(l).empty()) continue;
          Tensor in = Tensor::empty({int64_t(count) * n}, DType::kF32, Device::cuda(0));
          Tensor out = Tensor::empty({int64_t(collective_buffer_bytes(l)) * n}, DType::kU8, Device::cuda(0));
          Tensor scratch = Tensor::empty({int64_t(std::max<size_t>(16, collective_scratch_bytes(l)))}, DType::kU8, Device::cuda(0));
          fill_random(in.data(), size_t(count) * n * 4, 1.f, 9, stream);
          l.in = in.data();
          l.out = out.data();
          l.global_scratch = scratch.data();
          const double base = median_us(s, 3, 21, [&] { l.iters = 0; launch_collective(l, s); });
          const double full = median_us(s, 3, 21, [&] { l.iters = iters; launch_collective(l, s); });
          per_op[int(path)] = (full - base) / iters;
        }
        const char* op_name = op == CollectiveOp::kGather ? "gather" : "reduce";
        std::printf("  %-8s %-8d %8zu %12.3f %12.3f %8.2f %12.3f\n", op_name, n, bytes, per_op[0],
                    per_op[1], per_op[1] / per_op[0], per_op[2]);
        for (int g = 0; g < 3; ++g) {
          if (per_op[g] == 0) continue;
          BenchRecord rec;
          rec.bench = "cluster";
          rec.case_name = str(op_name, " c", n, " ", bytes, "B");
          rec.impl = g == 0 ? "dsmem" : (g == 1 ? "global" : "dsmem push");
          rec.gpu = gpu;
          rec.num_gpus = 1;
          rec.topology = "1x1";
          rec.median_us = per_op[g];
          rec.ok = per_op[g] > 0;
          records.push_back(rec);
        }
      }
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return 0;
}

#else

int run_bench_decode(const std::vector<std::string>&, int, char**) {
  throw_error(ErrorCode::kUnsupported, "bench decode: this build of Tessera has no cuda backend");
}
int run_bench_cluster(const std::vector<std::string>&, int, char**) {
  throw_error(ErrorCode::kUnsupported, "bench cluster: this build of Tessera has no cuda backend");
}
int run_tune_decode(const std::vector<std::string>&, int, char**) {
  throw_error(ErrorCode::kUnsupported, "tune decode: this build of Tessera has no cuda backend");
}

#endif

const CommandRegistration kBenchDecode("bench decode",
                                       "decode attention block: fused latency, HBM roofline",
                                       run_bench_decode);
const CommandRegistration kTuneDecode("tune decode",
                                      "time the decode cluster sizes, write the tune table",
                                      run_tune_decode);
const CommandRegistration kBenchCluster("bench cluster",
                                        "ClusterReduce/ClusterGather: DSMEM vs global memory",
                                        run_bench_cluster);

}  // namespace
}  // namespace tessera::cli
