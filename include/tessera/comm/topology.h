// Topology: which rank sits on which host and how every pair of ranks is linked. Read from
// the hardware (host identity via the bootstrap, NVLink/PCIe between local GPUs), or
// emulated: ranks regrouped into N machines whose cross-machine links are slower (see
// comm/emulation.h for what is emulated and how).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

class Bootstrap;

enum class LinkClass : uint8_t {
  kSelf,             // same rank
  kNVLink,           // GPUs of one host joined by NVLink
  kPCIe,             // GPUs of one host without NVLink (or cpu ranks of one machine)
  kNetwork,          // different hosts
  kEmulatedNetwork,  // same host, but in different emulated machines
};
const char* link_class_name(LinkClass link);
bool is_cross_machine(LinkClass link);

// A cross-machine link: per-GPU bandwidth and one-way latency.
struct LinkSpec {
  double bandwidth_gbps = 50.0;  // GB/s (1e9 bytes/s) per GPU
  double latency_us = 5.0;
  std::string preset = "nic400";  // "nic400" (default), "paper", or "custom"
};
// "nic400": 50 GB/s, 5 us (a 400 Gb/s NIC per GPU). "paper": the StreamFusion testbed's
// communication-to-computation ratio scaled to H200 attention speed. Throws on other names.
LinkSpec link_preset(const std::string& name);

struct Topology {
  int world_size = 1;
  std::vector<int> machine_of_rank;    // machine (host or emulated machine) per rank
  std::vector<int> local_rank;         // index within its machine
  std::vector<std::string> host_name;  // real host per rank
  std::vector<int> device_of_rank;     // CUDA ordinal per rank (-1 on cpu)
  std::vector<LinkClass> links;        // world_size x world_size, row-major
  bool emulated = false;
  LinkSpec cross_link;                 // used for kEmulatedNetwork (and costs of kNetwork)

  int num_machines() const;
  LinkClass link(int a, int b) const { return links[a * world_size + b]; }
  std::vector<int> ranks_on_machine(int machine) const;
  // Machine sizes are equal (a regular N x M grid).
  bool is_regular() const;
  std::string to_string() const;  // human summary, one line per machine
};

// Every rank calls this: exchanges host identity and device ids through `bootstrap` and
// classifies each pair (NVLink when the GPUs report active NVLinks between them).
Topology detect_topology(Bootstrap& bootstrap, int device);
// Link class of every pair of GPUs visible to this process (row-major, n x n), without a
// bootstrap; for `tessera info`. Empty without the cuda backend.
std::vector<LinkClass> detect_local_links(int num_devices);
// A cpu-backend topology: `world_size` ranks split evenly into `num_machines`.
Topology cpu_topology(int world_size, int num_machines);
// Regroups a real single-host topology into `num_machines` emulated machines of consecutive
// ranks. Throws kInvalidArgument when num_machines does not divide the ranks.
Topology emulate_machines(const Topology& real, int num_machines, const LinkSpec& link);

}  // namespace tessera
