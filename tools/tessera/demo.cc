// `tessera demo`: Tessera's main job. A DiT-sized attention layer (Flux-12B: H24, D128,
// L 36864 image tokens + 512 joint text tokens) with every sequence-parallel method:
//   - on GPUs: on every visible GPU, on the real topology and on 2 emulated machines, each
//     method verified against a single-GPU reference, with latency, TFLOP/s per GPU, bytes per
//     link class and the cost model's share of communication hidden (`tessera bench sp`);
//   - without GPUs: the same methods run and verified on the cpu backend (4 ranks in 2
//     emulated machines, a small shape the float32 reference computes quickly), then the
//     cost model's times for the DiT-sized layer on 2 machines x 2 H200s (`tessera plan`),
//     labelled as predictions.
// Each part runs as its own `tessera` process: NCCL reads its emulated host id once per
// process, so real and emulated runs cannot share one.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "options.h"
#include "tessera/core/error.h"
#include "tessera/runtime/stream.h"

namespace tessera::cli {
namespace {

// Runs this executable with `args`; returns its exit status.
int run_self(const std::vector<std::string>& args) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> argv;
  std::string self = "tessera";
  argv.push_back(self.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  TESSERA_CHECK(pid >= 0, ErrorCode::kSystem, "demo: fork failed");
  if (pid == 0) {
    execv("/proc/self/exe", argv.data());
    std::perror("tessera demo: exec");
    _exit(127);
  }
  int status = 0;
  TESSERA_CHECK(waitpid(pid, &status, 0) == pid, ErrorCode::kSystem, "demo: waitpid failed");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_demo(const std::vector<std::string>& args, int, char**) {
  Options opt("demo", {{"seq", "36864", "image tokens L of the GPU layer"},
                       {"joint", "512", "joint text tokens"},
                       {"json-prefix", "", "write each part's records to PREFIX-<part>.json"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  const std::string prefix = opt.text("json-prefix");
  auto with_json = [&](std::vector<std::string> a, const std::string& part) {
    if (!prefix.empty()) a.insert(a.end(), {"--json", prefix + "-" + part + ".json"});
    return a;
  };
  const std::vector<std::string> dit = {"--seq", opt.text("seq"), "--heads", "24", "--head-dim",
                                        "128", "--joint", opt.text("joint")};
  int status = 0;
  if (cuda_available()) {
    const int gpus = cuda_device_count();
    std::printf("tessera demo: DiT attention layer (Flux-12B shape) on %d GPU%s\n\n", gpus,
                gpus > 1 ? "s" : "");
    std::vector<std::string> real = {"bench", "sp", "--backend", "cuda"};
    real.insert(real.end(), dit.begin(), dit.end());
    status |= run_self(with_json(real, "real"));
    if (gpus >= 2) {
      std::printf("\n");
      std::vector<std::string> emulated = real;
      emulated.insert(emulated.end(), {"--emulate-nodes", "2"});
      status |= run_self(with_json(emulated, "emulated"));
    }
    return status;
  }
  std::printf("tessera demo: no GPU visible, so the cpu backend (ranks are threads, float32 "
              "reference kernels): 4 ranks in 2 emulated machines\n\n");
  status |= run_self(with_json({"bench", "sp", "--backend", "cpu", "--nranks", "4",
                                "--emulate-nodes", "2", "--seq", "509", "--joint", "16",
                                "--heads", "6", "--kv-heads", "2", "--head-dim", "32",
                                "--iters", "3", "--warmup", "1"},
                               "cpu"));
  std::printf("\nCost-model times (predictions, not measurements) for the DiT-sized layer on 2 "
              "machines x 2 H200s:\n");
  std::vector<std::string> plan = {"plan", "--machines", "2", "--gpus-per-machine", "2"};
  plan.insert(plan.end(), dit.begin(), dit.end());
  status |= run_self(with_json(plan, "sim"));
  return status;
}

const CommandRegistration kDemo("demo",
                                "the main job: a DiT attention layer with every method, verified",
                                run_demo);

}  // namespace
}  // namespace tessera::cli
