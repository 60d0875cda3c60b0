// Emulated machines on one host: the NCCL host id that makes NCCL see N hosts, and the time
// a transfer paced to an emulated link takes (latency + bytes / bandwidth).
#include "tessera/comm/emulation.h"

#include "tessera/core/error.h"

namespace tessera {

std::string emulated_host_id(const Topology& topology, int rank) {
  TESSERA_CHECK_ARG(rank >= 0 && rank < int(topology.machine_of_rank.size()), "rank = ", rank,
                    ": expected 0..", int(topology.machine_of_rank.size()) - 1);
  if (!topology.emulated) return "";
  return str("tessera-emulated-machine-", topology.machine_of_rank[rank]);
}

double paced_transfer_us(const LinkSpec& link, size_t bytes) {
  TESSERA_CHECK_ARG(link.bandwidth_gbps > 0 && link.latency_us >= 0, "link '", link.preset,
                    "': bandwidth = ", link.bandwidth_gbps, " GB/s, latency = ", link.latency_us,
                    " us: expected bandwidth > 0 and latency >= 0");
  // GB/s = 1e9 bytes/s = 1e3 bytes/us.
  return link.latency_us + double(bytes) / (link.bandwidth_gbps * 1e3);
}

}  // namespace tessera
