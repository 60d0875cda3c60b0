// The cost model behind the sim executor, Mesh's tile search and `auto`: what a transfer, an
// attention block and a state pass cost on one GPU. Plain numbers, set from the topology and
// from measurements (DESIGN.md section 6 gives the H200 figures the defaults start from).
//
//   transfer(bytes, link)  = latency(link) + bytes / bandwidth(link)
//       bandwidth is per GPU and per direction: a GPU's transfers on one link class share it
//       (the sim queues them), different classes (NVLink, network) run side by side.
//   attention(block)       = launch + 4 * B * heads * visible_pairs * D / (peak(D) * util)
//       util = min(1, CTAs / SMs) * kv / (kv + kv_half): small grids and short KV chunks run
//       below peak (CTAs = B * heads * ceil(q_rows / q_tile)); visible_pairs counts the (q, kv)
//       pairs the causal mask leaves.
//   state pass(bytes)      = launch + bytes / hbm  (merge, finalize)
//   two-sided step         + two_sided_step_us of synchronization, and compute that starts
//                            while a two-sided transfer of its rank runs is slowed by
//                            two_sided_compute_slowdown (NCCL kernels hold SMs)
//   one-sided step         + one_sided_step_us
//   barrier                = barrier_hops * latency of the slowest link in the group
//   gemm(m, n, k)          = launch + max(2mnk / (gemm_tflops * m / (m + gemm_m_half)),
//                                         (mk + kn + mn) * bytes / hbm)
//       small m runs below peak (few tiles, the weight read dominates); tensor-parallel
//       operations (tp/) time their GEMMs with it, fused ones gemm_fused_slowdown slower
//       (signal waits in the prologue, stores to peers in the epilogue)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tessera/comm/topology.h"
#include "tessera/sp/plan.h"

namespace tessera::sp {

struct LinkCost {
  double bandwidth_gbps = 1.0;  // GB/s (1e9 bytes/s) per GPU and direction
  double latency_us = 0.0;
};

// One job of an attention launch, for CostModel::attention_launch_us.
struct AttentionJobCost {
  int q_heads = 0;
  int64_t q_rows = 0;
  int64_t kv_rows = 0;
  int64_t visible_pairs = 0;
};

struct CostModel {
  LinkCost self{3000.0, 1.0};   // a copy inside one GPU's memory
  LinkCost nvlink{300.0, 3.0};  // NVLink/NVSwitch peer traffic (NCCL busbw ~290 GB/s)
  LinkCost pcie{25.0, 5.0};
  LinkCost network{50.0, 5.0};  // replaced by the topology's cross link
  LinkCost emulated_network{50.0, 5.0};
  // Two-sided (NCCL) traffic between emulated machines runs NCCL's socket transport over
  // loopback (measured ~2.5-3.5 GB/s per GPU on the H200 machine, docs/PERF.md), held to the
  // emulated link on top (SymmetricHeap::reserve_link): it moves at the slower of the two.
  // `tessera bench sp` measures the sockets at start and sets these terms.
  LinkCost emulated_two_sided{3.0, 50.0};

  double attn_tflops_d64 = 485.0;  // peak attention forward, bf16, per head_dim (measured)
  double attn_tflops_d128 = 620.0;
  double attn_kv_half_rows = 512.0;  // KV length at which a block reaches half of peak
  int num_sms = 132;
  int q_tile_rows = 128;
  double launch_us = 4.0;
  double hbm_gbps = 3500.0;
  double two_sided_step_us = 10.0;
  double one_sided_step_us = 2.0;
  double two_sided_compute_slowdown = 0.08;
  // Attention beside copy-engine copies inside the machine (one-sided steps over NVLink):
  // measured 15-19% slower while a pull runs (1x4 H200 timelines, docs/PERF.md).
  double one_sided_compute_slowdown = 0.17;
  double barrier_hops = 2.0;
  // bf16 dense GEMM (cuBLAS on H200: 787 TFLOP/s at 8192^3; 259-483 at M 128 and 615-813 at M
  // 1024-16384 on Llama-3-70B TP4 shapes, DESIGN.md section 6).
  double gemm_tflops = 790.0;
  double gemm_m_half = 160.0;
  double gemm_fused_slowdown = 0.06;
  // One copy-engine transfer with its stream-written signal, beyond its bytes: fused
  // AllGather+GEMM pays it per communication chunk (4 H200, `bench tp --phases`: 16 MiB to a
  // peer in 8 chunks took 95-137 us, in one 51-53 us).
  double copy_chunk_us = 7.0;
  // What a fused tensor-parallel call costs beyond its GEMM and its transfers: side-stream fork
  // and join, signal words, and the building block's slower small-M kernels against the
  // unfused pair's cuBLASLt. Fitted with gemm_fused_slowdown to the measured fused and unfused
  // times of 116 cases at TP 2 and 4 on H200s (docs/PERF.md): 20-90 us over the GEMM alone at
  // M <= 128, where the model had 1-10.
  double fused_call_us = 60.0;

  const LinkCost& link(LinkClass link) const;
  LinkCost& link(LinkClass link);
  // The cost of `link` for traffic of `comm`. Two-sided traffic between emulated machines: the
  // slower of emulated_network and emulated_two_sided (bandwidth and latency each); otherwise
  // link(link).
  LinkCost link(LinkClass link, CommMode comm) const;
  // latency + bytes / bandwidth, without queueing (one-sided, or two-sided where it differs).
  double transfer_us(LinkClass link, int64_t bytes, CommMode comm = CommMode::kOneSided) const;
  double attention_peak_tflops(int head_dim) const;
  // One attention call: `q_heads` heads, q_rows x kv_rows of which `visible_pairs` unmasked.
  double attention_us(const AttentionShape& shape, int q_heads, int64_t q_rows, int64_t kv_rows,
                      int64_t visible_pairs) const;
  // One launch of several jobs (the executor fuses compute steps): one launch overhead, the
  // jobs' CTAs share the grid (so small jobs ride along in the big ones' waves), each job's
  // FLOPs at its own KV-length efficiency.
  double attention_launch_us(const AttentionShape& shape,
                             std::span<const AttentionJobCost> jobs) const;
  double state_pass_us(int64_t bytes) const;
  // One GEMM [m, k] x [k, n] with `elem_bytes`-byte operands.
  double gemm_us(int64_t m, int64_t n, int64_t k, int elem_bytes) const;

  // H200 defaults with the topology's cross-machine link for network classes.
  static CostModel for_topology(const Topology& topology);
  // Sets one term by name (calibration, CLI flags): nvlink_gbps, nvlink_us, pcie_gbps,
  // pcie_us, network_gbps, network_us (both network classes), emulated_two_sided_gbps,
  // emulated_two_sided_us, attn_tflops_d64,
  // attn_tflops_d128, attn_kv_half_rows, num_sms, q_tile_rows, launch_us, hbm_gbps,
  // two_sided_step_us, one_sided_step_us, two_sided_compute_slowdown,
  // one_sided_compute_slowdown, barrier_hops, gemm_tflops, gemm_m_half, gemm_fused_slowdown,
  // copy_chunk_us, fused_call_us.
  // Throws kInvalidArgument naming an unknown key.
  void set(std::string_view key, double value);
  // Applies "key=value,key=value" (empty: nothing); throws naming the bad entry.
  void apply(std::string_view overrides);
  // Throws kInvalidArgument naming the first non-positive bandwidth or negative time.
  void validate() const;
  std::string describe() const;
};

// (q, kv) pairs with kv_pos <= q_pos (all q.count * kv.count pairs when not causal).
int64_t visible_pairs(const TokenRun& q, const TokenRun& kv, bool causal);

}  // namespace tessera::sp
