// Emulated machines on one host (`--emulate-nodes N`).
//
// What is emulated: ranks are grouped into N machines of consecutive ranks, and traffic
// between groups is really slower, the same for every method compared:
//   - two-sided (NCCL): every group gets its own NCCL_HOSTID before the communicator is
//     made, so NCCL sees N hosts and moves cross-group traffic through its network
//     transport (sockets over loopback) instead of NVLink. Its speed is what NCCL's socket
//     transport reaches here; `tessera bench comm` measures and prints it.
//   - one-sided (symmetric heap): puts and gets that cross groups run through a copy kernel
//     paced to the configured link (bandwidth per GPU and latency), so a transfer of B bytes
//     takes latency + B / bandwidth.
// What is not emulated: contention on a shared NIC between GPUs of one machine (each GPU has
// its own link, as with one NIC per GPU), and congestion in a network fabric.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/comm/topology.h"

namespace tessera {

// The NCCL_HOSTID value for `rank` under `topology` (empty when not emulated).
std::string emulated_host_id(const Topology& topology, int rank);

// Time a paced transfer of `bytes` takes on `link`, in microseconds.
double paced_transfer_us(const LinkSpec& link, size_t bytes);

}  // namespace tessera
