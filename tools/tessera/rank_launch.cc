#include "rank_launch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/memory.h"

namespace tessera::cli {

void apply_emulation_options(int emulate_nodes, const std::string& preset, double gbps,
                             double latency_us, ContextOptions& options) {
  TESSERA_CHECK_ARG(emulate_nodes >= 1, "--emulate-nodes = ", emulate_nodes, ": expected >= 1");
  options.emulate_machines = emulate_nodes;
  options.emulated_link = link_preset(preset);
  if (gbps > 0) {
    options.emulated_link.bandwidth_gbps = gbps;
    options.emulated_link.preset = "custom";
  }
  if (latency_us >= 0) {
    options.emulated_link.latency_us = latency_us;
    options.emulated_link.preset = "custom";
  }
}

std::string topology_label(const Topology& t) {
  int machines = t.num_machines();
  std::string label = str(machines, "x", t.world_size / std::max(machines, 1));
  return t.emulated ? label + " emulated" : label;
}

int run_on_ranks(const RankLaunch& launch, int argc, char** argv,
                 const std::function<void(RankContext&)>& body) {
  std::string backend = launch.backend;
  TESSERA_CHECK_ARG(backend == "auto" || backend == "cuda" || backend == "cpu", "--backend = '",
                    backend, "': expected auto, cuda or cpu");
  if (backend == "auto") {
    backend = cuda_available() ? "cuda" : "cpu";
    if (backend == "cpu" && !launched_as_worker()) {
      std::fprintf(stderr, "tessera: no GPU visible; running on the cpu backend (ranks are threads)\n");
    }
  }
  if (backend == "cpu") {
    int n = launch.nranks > 0 ? launch.nranks : 4;
    run_cpu_ranks(n, launch.context.emulate_machines, launch.context, body);
    return 0;
  }
  TESSERA_CHECK(cuda_available(), ErrorCode::kUnsupported,
                "--backend cuda: no CUDA device is visible (or this build has no cuda backend)");
  if (!launched_as_worker()) {
    int n = launch.nranks > 0 ? launch.nranks : cuda_device_count();
    TESSERA_CHECK_ARG(n >= 1 && n <= cuda_device_count(), "--nranks = ", n, ": expected 1..",
                      cuda_device_count(), " (one process per visible GPU)");
    return launch_local_workers(n, argc, argv);
  }
  auto ctx = create_cuda_context(bootstrap_from_launch(detect_launch()), launch.context);
  body(*ctx);
  return 0;
}

namespace {
std::vector<double> gather_values(RankContext& ctx, double value) {
  std::vector<double> all(size_t(ctx.size), 0.0);
  if (ctx.bootstrap) {
    ctx.bootstrap->allgather(&value, all.data(), sizeof(double));
    return all;
  }
  // cpu ranks share the host: an all_gather of one f32 pair would lose precision, so gather
  // the 8 bytes as two i32 words.
  int32_t words[2];
  std::memcpy(words, &value, sizeof words);
  std::vector<int32_t> out(size_t(ctx.size) * 2);
  TensorView send(words, DType::kI32, Device::cpu(), {2});
  TensorView recv(out.data(), DType::kI32, Device::cpu(), {int64_t(out.size())});
  ctx.world->all_gather(send, recv, ctx.stream);
  ctx.world->synchronize(ctx.stream);
  std::memcpy(all.data(), out.data(), all.size() * sizeof(double));
  return all;
}
}  // namespace

double max_across_ranks(RankContext& ctx, double value) {
  double m = value;
  for (double v : gather_values(ctx, value)) m = std::max(m, v);
  return m;
}

double sum_across_ranks(RankContext& ctx, double value) {
  double s = 0;
  for (double v : gather_values(ctx, value)) s += v;
  return s;
}

}  // namespace tessera::cli
