#include "rank_launch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include <unistd.h>

#include "options.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/build_info.h"
#include "tessera/runtime/memory.h"

namespace tessera::cli {

void apply_emulation_options(int emulate_nodes, const std::string& preset, double gbps,
                             double latency_us, ContextOptions& options) {
  TESSERA_CHECK_ARG(emulate_nodes >= 1 && emulate_nodes <= 4096,
                    "--emulate-nodes = ", emulate_nodes, ": expected 1..4096");
  TESSERA_CHECK_ARG(std::isfinite(gbps) && gbps >= 0, "--link-gbps = ", gbps,
                    ": expected a bandwidth >= 0 (0: the --link preset's)");
  TESSERA_CHECK_ARG(std::isfinite(latency_us) && (latency_us == -1 || latency_us >= 0),
                    "--link-latency-us = ", latency_us,
                    ": expected a latency >= 0 (or -1: the --link preset's)");
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

int nranks_option(const std::string& text) {
  return text.empty() ? 0 : int(parse_integer(text, "--nranks", 1, 4096));
}

size_t saturating_product(std::initializer_list<size_t> factors) {
  // A zero factor makes the product 0, even where the others alone would overflow.
  if (std::find(factors.begin(), factors.end(), size_t(0)) != factors.end()) return 0;
  size_t p = 1;
  for (size_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return std::numeric_limits<size_t>::max();
  }
  return p;
}

namespace {
std::string gib(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(size_t(1) << 30));
  return text;
}
}  // namespace

void check_memory_fits(const RankLaunch& launch, size_t bytes_per_rank, const std::string& option,
                       const std::string& value, const std::string& what_needs_it) {
  const bool on_gpu = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  double available = 0;
  std::string where;
  size_t needed = bytes_per_rank;
  if (on_gpu) {
    const std::vector<GpuInfo> gpus = visible_gpus();
    if (gpus.empty()) return;  // run_on_ranks reports the missing GPU
    available = gpus.front().memory_gib * double(size_t(1) << 30);
    where = str("one rank's GPU (", gpus.front().name, ") has ", gib(available));
  } else {
    const int ranks = launch.nranks > 0 ? launch.nranks : 4;
    needed = saturating_product({bytes_per_rank, size_t(ranks)});
    available = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    where = str("the ", ranks, " cpu ranks share this machine's ", gib(available));
  }
  TESSERA_CHECK_ARG(
      double(needed) <= available, option, " = ", value, ": needs ",
      needed == std::numeric_limits<size_t>::max() ? std::string("more than 2^64 bytes")
                                                   : gib(double(needed)),
      " of memory (", what_needs_it, ") but ", where, ": expected a smaller ", option);
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
  const int machines = launch.context.emulate_machines;
  if (backend == "cpu") {
    int n = launch.nranks > 0 ? launch.nranks : 4;
    TESSERA_CHECK_ARG(n % machines == 0, "--emulate-nodes = ", machines,
                      ": expected a divisor of the ", n, " ranks (",
                      launch.nranks > 0 ? "--nranks" : "the cpu default",
                      "), so the emulated machines have equal rank counts");
    run_cpu_ranks(n, launch.context.emulate_machines, launch.context, body);
    return 0;
  }
  TESSERA_CHECK(cuda_available(), ErrorCode::kUnsupported,
                "--backend cuda: no CUDA device is visible (or this build has no cuda backend)");
  if (!launched_as_worker()) {
    int n = launch.nranks > 0 ? launch.nranks : cuda_device_count();
    TESSERA_CHECK_ARG(n >= 1 && n <= cuda_device_count(), "--nranks = ", n, ": expected 1..",
                      cuda_device_count(), " (one process per visible GPU)");
    TESSERA_CHECK_ARG(n % machines == 0, "--emulate-nodes = ", machines,
                      ": expected a divisor of the ", n,
                      " ranks, so the emulated machines have equal rank counts");
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
