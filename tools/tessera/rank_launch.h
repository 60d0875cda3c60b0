// Runs a per-rank body on the chosen backend, the same way for every multi-rank subcommand:
//   cuda: one process per GPU. From a plain shell the CLI re-executes itself once per visible
//         GPU (launch_local_workers); under torchrun / mpirun / srun it is already a worker.
//   cpu:  `nranks` threads of this process (the cpu backend), in `machines` machines.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>

#include "tessera/comm/context.h"

namespace tessera::cli {

struct RankLaunch {
  std::string backend = "auto";  // "auto" (cuda when a GPU is visible), "cuda", "cpu"
  int nranks = 0;                // 0: every visible GPU (cuda) / 4 (cpu)
  ContextOptions context;
};

// --nranks: left out (or empty) means the default (0 here); given, it must be 1..4096.
int nranks_option(const std::string& text);

// The product of `factors`, or SIZE_MAX when it overflows (so a size check refuses it).
size_t saturating_product(std::initializer_list<size_t> factors);

// Checks that `bytes_per_rank` (what one rank will allocate) fits in memory: cpu ranks share
// the host's RAM, a cuda rank has one GPU's. Otherwise throws kInvalidArgument naming the
// option responsible and its value ("--seq = 99999999999"), how much memory is needed (and
// for what) and how much there is, before anything is allocated.
void check_memory_fits(const RankLaunch& launch, size_t bytes_per_rank, const std::string& option,
                       const std::string& value, const std::string& what_needs_it);

// Resolves "auto", prints a line when falling back to cpu, and runs `body` on every rank.
// Returns the process exit code (the launcher's, in the parent of cuda workers).
int run_on_ranks(const RankLaunch& launch, int argc, char** argv,
                 const std::function<void(RankContext&)>& body);

// Parses --emulate-nodes / --link / --link-gbps / --link-latency-us into `options`.
void apply_emulation_options(int emulate_nodes, const std::string& preset, double gbps,
                             double latency_us, ContextOptions& options);

// "1x4" or "2x2 emulated": machines x ranks per machine.
std::string topology_label(const Topology& topology);

// max over ranks of `value` (host-side exchange through the bootstrap or the cpu world).
double max_across_ranks(RankContext& ctx, double value);
double sum_across_ranks(RankContext& ctx, double value);

// The GPU's name for records ("NVIDIA H200"), or "cpu".
std::string gpu_name(const RankContext& ctx);

}  // namespace tessera::cli
