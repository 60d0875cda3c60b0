// Topology helpers shared by every backend: link classes, the cross-machine link presets,
// the cpu backend's topology and the regrouping of one host into emulated machines.
// (detect_topology, which reads the hardware, lives with the cuda backend.)
#include "tessera/comm/topology.h"

#include <unistd.h>

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera {

namespace {

// "nic400": one 400 Gb/s NIC per GPU = 50 GB/s, ~5 us one-way through the NIC and a switch.
constexpr double kNic400BandwidthGbps = 400.0 / 8.0;
constexpr double kNic400LatencyUs = 5.0;

// "paper": the StreamFusion testbed (streamfusion.txt, section 5): p4de.24xlarge machines of
// 8 A100s whose 400 Gb/s of EFA are shared by the 8 GPUs, i.e. 400 / 8 / 8 = 6.25 GB/s per
// GPU. What matters for overlap is the ratio of communication to computation, so the link
// is slowed by how much faster H200 attention is than A100 attention: ~190 TFLOP/s effective
// on A100 vs ~620 TFLOP/s on H200 (cuDNN SDPA measured 609-689 here), giving
// 6.25 * 190 / 620 ~= 1.9 GB/s per GPU. EFA's one-way latency is ~15 us.
constexpr double kPaperEfaGbitPerMachine = 400.0;
constexpr int kPaperGpusPerMachine = 8;
constexpr double kPaperPerGpuGbps = kPaperEfaGbitPerMachine / 8.0 / kPaperGpusPerMachine;
constexpr double kA100AttentionTflops = 190.0;
constexpr double kH200AttentionTflops = 620.0;
constexpr double kPaperBandwidthGbps =
    kPaperPerGpuGbps * kA100AttentionTflops / kH200AttentionTflops;
constexpr double kPaperLatencyUs = 15.0;

std::string this_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// Validates the fields every Topology must have consistent sizes for.
void check_topology_shape(const Topology& t, const char* what) {
  const size_t n = size_t(t.world_size);
  TESSERA_CHECK_ARG(t.world_size >= 1 && t.machine_of_rank.size() == n &&
                        t.local_rank.size() == n && t.links.size() == n * n,
                    what, ": topology of world_size ", t.world_size, " has ",
                    t.machine_of_rank.size(), " machine entries, ", t.local_rank.size(),
                    " local ranks and ", t.links.size(), " links: expected ", n, ", ", n, " and ",
                    n * n);
}

// Fills machine_of_rank and local_rank for `num_machines` machines of consecutive ranks.
void assign_consecutive_machines(Topology& t, int num_machines) {
  const int per_machine = t.world_size / num_machines;
  t.machine_of_rank.assign(t.world_size, 0);
  t.local_rank.assign(t.world_size, 0);
  for (int r = 0; r < t.world_size; ++r) {
    t.machine_of_rank[r] = r / per_machine;
    t.local_rank[r] = r % per_machine;
  }
}

}  // namespace

const char* link_class_name(LinkClass link) {
  switch (link) {
    case LinkClass::kSelf:
      return "self";
    case LinkClass::kNVLink:
      return "nvlink";
    case LinkClass::kPCIe:
      return "pcie";
    case LinkClass::kNetwork:
      return "network";
    case LinkClass::kEmulatedNetwork:
      return "emulated-network";
  }
  return "unknown";
}

bool is_cross_machine(LinkClass link) {
  return link == LinkClass::kNetwork || link == LinkClass::kEmulatedNetwork;
}

LinkSpec link_preset(const std::string& name) {
  LinkSpec spec;
  if (name == "nic400") {
    spec.bandwidth_gbps = kNic400BandwidthGbps;
    spec.latency_us = kNic400LatencyUs;
  } else if (name == "paper") {
    spec.bandwidth_gbps = kPaperBandwidthGbps;
    spec.latency_us = kPaperLatencyUs;
  } else {
    throw_error(ErrorCode::kInvalidArgument,
                str("link preset = '", name, "': expected one of nic400, paper"));
  }
  spec.preset = name;
  return spec;
}

int Topology::num_machines() const {
  if (machine_of_rank.empty()) return 0;
  return *std::max_element(machine_of_rank.begin(), machine_of_rank.end()) + 1;
}

std::vector<int> Topology::ranks_on_machine(int machine) const {
  TESSERA_CHECK_ARG(machine >= 0 && machine < num_machines(), "machine = ", machine,
                    ": expected 0..", num_machines() - 1);
  std::vector<int> ranks;
  for (int r = 0; r < int(machine_of_rank.size()); ++r) {
    if (machine_of_rank[r] == machine) ranks.push_back(r);
  }
  return ranks;
}

bool Topology::is_regular() const {
  const int machines = num_machines();
  if (machines == 0) return false;
  std::vector<int> count(machines, 0);
  for (int m : machine_of_rank) ++count[m];
  return std::all_of(count.begin(), count.end(), [&](int c) { return c == count[0]; });
}

std::string Topology::to_string() const {
  const int machines = num_machines();
  std::string s = str(world_size, " rank", world_size == 1 ? "" : "s", " on ", machines,
                      emulated ? " emulated" : "", " machine", machines == 1 ? "" : "s");
  if (machines > 1) {
    s += str(" (cross-machine link ", cross_link.preset, ": ", cross_link.bandwidth_gbps, " GB/s, ",
             cross_link.latency_us, " us)");
  }
  for (int m = 0; m < machines; ++m) {
    std::vector<int> ranks = ranks_on_machine(m);
    s += str("\n  machine ", m, ":");
    for (int r : ranks) s += str(" ", r);
    if (!ranks.empty() && size_t(ranks[0]) < host_name.size()) {
      s += str("  host ", host_name[ranks[0]]);
    }
    if (!ranks.empty() && size_t(ranks[0]) < device_of_rank.size() &&
        device_of_rank[ranks[0]] >= 0) {
      s += "  devices";
      for (int r : ranks) s += str(" ", device_of_rank[r]);
    }
    // The slowest link class inside the machine (enum order runs from fastest to slowest).
    LinkClass inner = LinkClass::kSelf;
    for (int a : ranks) {
      for (int b : ranks) inner = std::max(inner, link(a, b));
    }
    if (ranks.size() > 1) s += str("  links ", link_class_name(inner));
  }
  return s;
}

Topology cpu_topology(int world_size, int num_machines) {
  TESSERA_CHECK_ARG(world_size >= 1, "world_size = ", world_size, ": expected >= 1");
  TESSERA_CHECK_ARG(num_machines >= 1 && world_size % num_machines == 0,
                    "num_machines = ", num_machines,
                    ": expected a divisor of world_size = ", world_size);
  Topology t;
  t.world_size = world_size;
  assign_consecutive_machines(t, num_machines);
  t.host_name.assign(world_size, this_host_name());
  t.device_of_rank.assign(world_size, -1);
  t.emulated = num_machines > 1;  // all cpu ranks share one host
  t.links.assign(size_t(world_size) * world_size, LinkClass::kPCIe);
  for (int a = 0; a < world_size; ++a) {
    for (int b = 0; b < world_size; ++b) {
      LinkClass& l = t.links[size_t(a) * world_size + b];
      if (a == b) {
        l = LinkClass::kSelf;
      } else if (t.machine_of_rank[a] != t.machine_of_rank[b]) {
        l = LinkClass::kEmulatedNetwork;
      }
    }
  }
  return t;
}

Topology emulate_machines(const Topology& real, int num_machines, const LinkSpec& link) {
  check_topology_shape(real, "emulate_machines");
  TESSERA_CHECK_ARG(num_machines >= 1, "num_machines = ", num_machines, ": expected >= 1");
  TESSERA_CHECK_ARG(real.num_machines() == 1, "emulate_machines: the real topology has ",
                    real.num_machines(), " machines: expected a single host");
  TESSERA_CHECK_ARG(real.world_size % num_machines == 0, "num_machines = ", num_machines,
                    ": expected a divisor of the ", real.world_size, " ranks");
  TESSERA_CHECK_ARG(link.bandwidth_gbps > 0 && link.latency_us >= 0,
                    "emulated link bandwidth = ", link.bandwidth_gbps,
                    " GB/s, latency = ", link.latency_us,
                    " us: expected bandwidth > 0 and latency >= 0");
  Topology t = real;
  assign_consecutive_machines(t, num_machines);
  t.emulated = num_machines > 1;
  t.cross_link = link;
  for (int a = 0; a < t.world_size; ++a) {
    for (int b = 0; b < t.world_size; ++b) {
      if (t.machine_of_rank[a] != t.machine_of_rank[b]) {
        t.links[size_t(a) * t.world_size + b] = LinkClass::kEmulatedNetwork;
      }
    }
  }
  return t;
}

}  // namespace tessera
