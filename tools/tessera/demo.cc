// `tessera demo`: Tessera's main job. Until the sequence-parallel attention layer lands it
// verifies and times the communication substrate on every visible GPU (or on the cpu backend
// with 4 ranks in 2 emulated machines when no GPU is visible).
#include <cstdio>

#include "command.h"
#include "tessera/core/error.h"
#include "tessera/runtime/stream.h"

namespace tessera::cli {
namespace {

int run_demo(const std::vector<std::string>& args, int argc, char** argv) {
  (void)argc;
  (void)argv;
  const Command* bench = nullptr;
  for (const auto& c : commands())
    if (c.name == "bench comm") bench = &c;
  TESSERA_CHECK(bench != nullptr, ErrorCode::kInternal, "bench comm is not registered");
  std::vector<std::string> bench_args = args;
  if (!cuda_available()) {
    std::printf("tessera demo: no GPU visible: cpu backend, 4 ranks in 2 emulated machines\n");
    bench_args.insert(bench_args.end(), {"--backend", "cpu", "--nranks", "4", "--emulate-nodes", "2"});
  }
  return bench->run(bench_args, argc, argv);
}

const CommandRegistration kDemo("demo", "the main job: verify and time Tessera on the visible GPUs", run_demo);

}  // namespace
}  // namespace tessera::cli
