// CostModel (see cost_model.h for the terms).
#include "tessera/sp/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "tessera/core/error.h"

namespace tessera::sp {

const LinkCost& CostModel::link(LinkClass link) const {
  switch (link) {
    case LinkClass::kSelf:
      return self;
    case LinkClass::kNVLink:
      return nvlink;
    case LinkClass::kPCIe:
      return pcie;
    case LinkClass::kNetwork:
      return network;
    case LinkClass::kEmulatedNetwork:
      return emulated_network;
  }
  return network;
}

LinkCost CostModel::link(LinkClass l, CommMode comm) const {
  if (l != LinkClass::kEmulatedNetwork || comm != CommMode::kTwoSided) return link(l);
  LinkCost slower = emulated_network;
  slower.bandwidth_gbps = std::min(slower.bandwidth_gbps, emulated_two_sided.bandwidth_gbps);
  slower.latency_us = std::max(slower.latency_us, emulated_two_sided.latency_us);
  return slower;
}

LinkCost& CostModel::link(LinkClass l) {
  return const_cast<LinkCost&>(static_cast<const CostModel*>(this)->link(l));
}

double CostModel::transfer_us(LinkClass l, int64_t bytes, CommMode comm) const {
  const LinkCost c = link(l, comm);
  // GB/s = 1e3 bytes per microsecond.
  return c.latency_us + double(bytes) / (c.bandwidth_gbps * 1e3);
}

double CostModel::attention_peak_tflops(int head_dim) const {
  const double f = std::clamp((head_dim - 64) / 64.0, 0.0, 1.0);
  return attn_tflops_d64 + f * (attn_tflops_d128 - attn_tflops_d64);
}

double CostModel::attention_us(const AttentionShape& shape, int q_heads, int64_t q_rows,
                               int64_t kv_rows, int64_t pairs) const {
  const AttentionJobCost job{q_heads, q_rows, kv_rows, pairs};
  return attention_launch_us(shape, std::span<const AttentionJobCost>(&job, 1));
}

double CostModel::attention_launch_us(const AttentionShape& shape,
                                      std::span<const AttentionJobCost> jobs) const {
  double ctas = 0.0;
  double full_grid_us = 0.0;  // the jobs' time if the grid filled every SM
  for (const AttentionJobCost& j : jobs) {
    if (j.visible_pairs <= 0 || j.q_rows <= 0 || j.kv_rows <= 0 || j.q_heads <= 0) continue;
    const double flops =
        4.0 * double(shape.batch) * j.q_heads * double(j.visible_pairs) * shape.head_dim;
    ctas +=
        double(shape.batch) * j.q_heads * std::ceil(double(j.q_rows) / std::max(1, q_tile_rows));
    const double kv_per_row = double(j.visible_pairs) / double(j.q_rows);
    const double kv_util = kv_per_row / (kv_per_row + attn_kv_half_rows);
    full_grid_us += flops / (attention_peak_tflops(shape.head_dim) * std::max(kv_util, 1e-3) * 1e6);
  }
  if (ctas == 0.0) return launch_us;
  const double grid_util = std::min(1.0, ctas / std::max(1, num_sms));
  return launch_us + full_grid_us / std::max(grid_util, 1e-3);  // TFLOP/s = 1e6 flop per us
}

double CostModel::state_pass_us(int64_t bytes) const {
  return launch_us + (bytes > 0 ? double(bytes) / (hbm_gbps * 1e3) : 0.0);  // no 0 / 0
}

double CostModel::gemm_us(int64_t m, int64_t n, int64_t k, int elem_bytes) const {
  const double md = double(m), flops = 2.0 * md * double(n) * double(k);
  // TFLOP/s = 1e6 flop per us. No rows (a rank with no share) compute nothing, whatever the
  // terms: 0 / 0 with gemm_m_half = 0 must not make the estimate NaN.
  double rate = md > 0 ? gemm_tflops * md / (md + gemm_m_half) : 1.0;
  if (!(rate > 1e-9)) rate = 1e-9;
  const double bytes = (md * double(k) + double(k) * double(n) + md * double(n)) * elem_bytes;
  return launch_us + std::max(flops / (rate * 1e6), bytes / (hbm_gbps * 1e3));
}

CostModel CostModel::for_topology(const Topology& topology) {
  CostModel m;
  m.network = {topology.cross_link.bandwidth_gbps, topology.cross_link.latency_us};
  m.emulated_network = m.network;
  return m;
}

void CostModel::set(std::string_view key, double value) {
  struct Term {
    const char* name;
    double* field;
  };
  double sms = num_sms;
  double tile = q_tile_rows;
  const Term terms[] = {
      {"nvlink_gbps", &nvlink.bandwidth_gbps},
      {"nvlink_us", &nvlink.latency_us},
      {"pcie_gbps", &pcie.bandwidth_gbps},
      {"pcie_us", &pcie.latency_us},
      {"network_gbps", &network.bandwidth_gbps},
      {"network_us", &network.latency_us},
      {"emulated_two_sided_gbps", &emulated_two_sided.bandwidth_gbps},
      {"emulated_two_sided_us", &emulated_two_sided.latency_us},
      {"attn_tflops_d64", &attn_tflops_d64},
      {"attn_tflops_d128", &attn_tflops_d128},
      {"attn_kv_half_rows", &attn_kv_half_rows},
      {"num_sms", &sms},
      {"q_tile_rows", &tile},
      {"launch_us", &launch_us},
      {"hbm_gbps", &hbm_gbps},
      {"two_sided_step_us", &two_sided_step_us},
      {"one_sided_step_us", &one_sided_step_us},
      {"two_sided_compute_slowdown", &two_sided_compute_slowdown},
      {"one_sided_compute_slowdown", &one_sided_compute_slowdown},
      {"barrier_hops", &barrier_hops},
      {"gemm_tflops", &gemm_tflops},
      {"gemm_m_half", &gemm_m_half},
      {"gemm_fused_slowdown", &gemm_fused_slowdown},
      {"copy_chunk_us", &copy_chunk_us},
      {"fused_call_us", &fused_call_us},
  };
  for (const Term& t : terms) {
    if (key != t.name) continue;
    TESSERA_CHECK_ARG(std::isfinite(value), "cost model term ", key, " = ", value,
                      ": expected a finite number");
    // Counts are stored as int: a larger value would not convert.
    TESSERA_CHECK_ARG((t.field != &sms && t.field != &tile) ||
                          (value >= 1 && value <= std::numeric_limits<int>::max()),
                      "cost model term ", key, " = ", value, ": expected a count from 1 to ",
                      std::numeric_limits<int>::max());
    *t.field = value;
    num_sms = int(sms);
    q_tile_rows = int(tile);
    if (key == "network_gbps") emulated_network.bandwidth_gbps = value;
    if (key == "network_us") emulated_network.latency_us = value;
    return;
  }
  std::string names;
  for (const Term& t : terms) names += str(names.empty() ? "" : ", ", t.name);
  throw_error(ErrorCode::kInvalidArgument,
              str("cost model term '", key, "': expected one of ", names));
}

void CostModel::apply(std::string_view overrides) {
  size_t pos = 0;
  while (pos < overrides.size()) {
    size_t end = overrides.find(',', pos);
    if (end == std::string_view::npos) end = overrides.size();
    std::string_view item = overrides.substr(pos, end - pos);
    pos = end + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    TESSERA_CHECK_ARG(eq != std::string_view::npos && eq > 0, "cost model override '", item,
                      "': expected key=value");
    const std::string text(item.substr(eq + 1));
    char* stop = nullptr;
    const double value = std::strtod(text.c_str(), &stop);
    TESSERA_CHECK_ARG(!text.empty() && stop && *stop == '\0', "cost model override '", item,
                      "': the value is not a number");
    set(item.substr(0, eq), value);
  }
  validate();
}

void CostModel::validate() const {
  for (LinkClass l : {LinkClass::kSelf, LinkClass::kNVLink, LinkClass::kPCIe, LinkClass::kNetwork,
                      LinkClass::kEmulatedNetwork}) {
    const LinkCost& c = link(l);
    TESSERA_CHECK_ARG(c.bandwidth_gbps > 0 && c.latency_us >= 0, "cost model link ",
                      link_class_name(l), ": bandwidth = ", c.bandwidth_gbps,
                      " GB/s, latency = ", c.latency_us,
                      " us: expected bandwidth > 0 and latency >= 0");
  }
  TESSERA_CHECK_ARG(
      emulated_two_sided.bandwidth_gbps > 0 && emulated_two_sided.latency_us >= 0,
      "cost model emulated two-sided link: bandwidth = ", emulated_two_sided.bandwidth_gbps,
      " GB/s, latency = ", emulated_two_sided.latency_us,
      " us: expected bandwidth > 0 and latency >= 0");
  TESSERA_CHECK_ARG(attn_tflops_d64 > 0 && attn_tflops_d128 > 0,
                    "cost model attention peak = ", attn_tflops_d64, "/", attn_tflops_d128,
                    " TFLOP/s: expected > 0");
  TESSERA_CHECK_ARG(hbm_gbps > 0, "cost model hbm_gbps = ", hbm_gbps, ": expected > 0");
  TESSERA_CHECK_ARG(gemm_tflops > 0 && gemm_m_half >= 0 && gemm_fused_slowdown >= 0,
                    "cost model gemm_tflops = ", gemm_tflops, ", gemm_m_half = ", gemm_m_half,
                    ", gemm_fused_slowdown = ", gemm_fused_slowdown,
                    ": expected a peak > 0 and the others >= 0");
  TESSERA_CHECK_ARG(attn_kv_half_rows >= 0 && launch_us >= 0 && two_sided_step_us >= 0 &&
                        one_sided_step_us >= 0 && copy_chunk_us >= 0 && fused_call_us >= 0 &&
                        two_sided_compute_slowdown >= 0 && one_sided_compute_slowdown >= 0 &&
                        barrier_hops >= 0 && num_sms >= 1 && q_tile_rows >= 1,
                    "cost model: times, slowdown and sizes must be >= 0 (SMs, q tile >= 1)");
}

std::string CostModel::describe() const {
  return str("links (GB/s, us): nvlink ", nvlink.bandwidth_gbps, "/", nvlink.latency_us, ", pcie ",
             pcie.bandwidth_gbps, "/", pcie.latency_us, ", network ", network.bandwidth_gbps, "/",
             network.latency_us, ", emulated ", emulated_network.bandwidth_gbps, "/",
             emulated_network.latency_us, " (two-sided ", emulated_two_sided.bandwidth_gbps, "/",
             emulated_two_sided.latency_us, "); attention peak ", attn_tflops_d64, " (D64) / ",
             attn_tflops_d128, " (D128) TFLOP/s, half speed at ", attn_kv_half_rows, " kv rows, ",
             num_sms, " SMs; launch ", launch_us, " us; hbm ", hbm_gbps, " GB/s; two-sided step ",
             two_sided_step_us, " us (+", two_sided_compute_slowdown * 100,
             "% on overlapped compute), one-sided step ", one_sided_step_us, " us (+",
             one_sided_compute_slowdown * 100,
             "% on compute beside copies inside a machine); copy chunk ", copy_chunk_us,
             " us; fused tensor-parallel call ", fused_call_us, " us");
}

namespace {

// sum_{i=0}^{n-1} floor((a * i + b) / c) for n, c >= 1 and a, b >= 0, in O(log) steps: the
// classic reduction that swaps the roles of a and c (a Euclid-like recursion on the lattice
// points under the line).
int64_t floor_sum(int64_t n, int64_t c, int64_t a, int64_t b) {
  int64_t total = 0;
  while (true) {
    if (a >= c) {
      total += (n - 1) * n / 2 * (a / c);
      a %= c;
    }
    if (b >= c) {
      total += n * (b / c);
      b %= c;
    }
    const int64_t y_max = a * n + b;
    if (y_max < c) break;
    n = y_max / c;
    b = y_max % c;
    std::swap(c, a);
  }
  return total;
}

}  // namespace

int64_t visible_pairs(const TokenRun& q, const TokenRun& kv, bool causal) {
  if (q.count <= 0 || kv.count <= 0) return 0;
  if (!causal) return q.count * kv.count;
  // Row i sees min(m, floor((q(i) - k0) / ks) + 1) keys when q(i) >= k0, none before.
  const int64_t qs = q.count > 1 ? q.stride : 1;
  const int64_t ks = kv.count > 1 ? kv.stride : 1;
  const int64_t m = kv.count;
  auto first_row_at_least = [&](int64_t pos) {  // first i with q(i) >= pos, in [0, n]
    if (q.start >= pos) return int64_t(0);
    const int64_t i = (pos - q.start + qs - 1) / qs;
    return std::min(i, q.count);
  };
  const int64_t lo = first_row_at_least(kv.start);                 // sees >= 1 key
  const int64_t hi = std::max(lo, first_row_at_least(kv.last()));  // sees all m keys
  int64_t pairs = (q.count - hi) * m;
  if (hi > lo) {
    // sum over i in [lo, hi) of floor((q(i) - k0) / ks) + 1
    pairs += floor_sum(hi - lo, ks, qs, q.at(lo) - kv.start) + (hi - lo);
  }
  return pairs;
}

}  // namespace tessera::sp
