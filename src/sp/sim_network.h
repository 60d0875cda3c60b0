// FluidNetwork: the links of the sim executor as a fluid model. Every transfer in flight is a
// flow through a few ports (a GPU's egress and ingress of one link class, and for two-sided
// traffic between emulated machines the GPU's sockets too); the flows in flight share each
// port max-min fairly, each also capped at its own rate. That is what the hardware does (NCCL
// channels and the emulated NICs' ~20 us reservation quanta interleave the transfers that
// share a NIC), and unlike reserving a port for a whole transfer first-come first-served it
// does not let one transfer's place in the queue decide another's wait.
//
// Time is in microseconds, rates in bytes per microsecond (1 GB/s = 1e3 bytes/us). The caller
// drives time: start flows at `now`, ask next_finish(), and collect finished flows with
// finish_until(t) for t no later than that.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace tessera::sp::detail {

class FluidNetwork {
 public:
  // A port of `bytes_per_us` capacity; returns its id.
  int add_port(double bytes_per_us);
  // Starts a flow of `bytes` (> 0) through `ports` at `now`, never faster than
  // `cap_bytes_per_us`. `tag` is returned when it finishes.
  void start(double now, const std::vector<int>& ports, double cap_bytes_per_us, double bytes,
             int64_t tag);
  // When the next flow in flight finishes at the current rates (+inf when none is).
  double next_finish() const;
  // Advances to `now` and returns the tags of the flows done by then, in finishing order.
  std::vector<int64_t> finish_until(double now);
  bool idle() const { return flows_.empty(); }

 private:
  struct Flow {
    std::vector<int> ports;
    double cap;
    double remaining;  // bytes
    double rate = 0.0;
    int64_t tag;
  };
  void advance(double now);
  void share();  // max-min fair rates by progressive filling

  std::vector<double> capacity_;
  std::vector<Flow> flows_;
  double now_ = 0.0;
};

}  // namespace tessera::sp::detail
