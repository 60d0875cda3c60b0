// `tessera info`: build, versions, GPUs, links between them, emulation presets, parameters.
#include <cstdio>

#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/comm/context.h"
#include "tessera/comm/topology.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/build_info.h"
#include "tessera/runtime/stream.h"

namespace tessera::cli {

namespace {

int run_info(const std::vector<std::string>& args, int, char**) {
  Options opt("info", {});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  BuildInfo b = build_info();
  std::printf("Tessera %s\n", b.version.c_str());
  std::printf("  backends        cpu%s\n", b.has_cuda ? ", cuda" : " (built without CUDA)");
  if (b.has_cuda) {
    std::printf("  CUDA runtime    %s (driver supports %s)\n", b.cuda_runtime.c_str(), b.cuda_driver.c_str());
    std::printf("  NCCL            %s (compiled against %s)\n", b.nccl_runtime.c_str(), b.nccl_compiled.c_str());
    std::printf("  NVSHMEM         %s\n", b.nvshmem.c_str());
    std::printf("  CUTLASS/CuTe    %s\n", b.cutlass.c_str());
  }
  auto gpus = visible_gpus();
  std::printf("\nGPUs: %zu visible%s\n", gpus.size(), gpus.empty() ? " (the cpu backend will be used)" : "");
  for (const auto& g : gpus) {
    std::printf("  cuda:%d  %s  sm_%d%d  %d SMs  %.0f GiB  %s\n", g.index, g.name.c_str(), g.compute_major,
                g.compute_minor, g.sm_count, g.memory_gib, g.pci_bus_id.c_str());
  }
  if (gpus.size() > 1) {
    auto links = detect_local_links(int(gpus.size()));
    std::printf("\nLinks between GPUs:\n  %-8s", "");
    for (size_t j = 0; j < gpus.size(); ++j) std::printf(" %-8s", str("cuda:", j).c_str());
    std::printf("\n");
    for (size_t i = 0; i < gpus.size(); ++i) {
      std::printf("  %-8s", str("cuda:", i).c_str());
      for (size_t j = 0; j < gpus.size(); ++j)
        std::printf(" %-8s", links.empty() ? "?" : link_class_name(links[i * gpus.size() + j]));
      std::printf("\n");
    }
  }
  std::printf("\nEmulated machines (--emulate-nodes N; see docs/ARCHITECTURE.md):\n");
  for (const char* name : {"nic400", "paper"}) {
    LinkSpec l = link_preset(name);
    std::printf("  --link %-7s %6.2f GB/s per GPU, %5.1f us latency%s\n", name, l.bandwidth_gbps, l.latency_us,
                std::string(name) == "nic400" ? "  (default)" : "");
  }
  std::printf("  two-sided (NCCL) traffic between emulated machines uses NCCL's socket transport\n");
  std::printf("\nParameters (environment variables):\n");
  for (const auto& p : all_params()) {
    std::printf("  %-28s = %-10s %s%s\n", p.name.c_str(), p.current_value.c_str(), p.help.c_str(),
                p.from_environment ? " [set in environment]" : "");
  }
  return 0;
}

const CommandRegistration kInfo("info", "build, versions, GPUs, links, emulation presets, parameters", run_info);

}  // namespace

std::string gpu_name(const RankContext& ctx) { return device_name(ctx.device); }

}  // namespace tessera::cli
