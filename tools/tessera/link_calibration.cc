// Measured two-sided link between emulated machines (see link_calibration.h).
#include "link_calibration.h"

#include <algorithm>
#include <vector>

#include "rank_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"

namespace tessera::cli {

namespace {

// Median microseconds of `iters` exchanges of `bytes` with the ranks one machine over.
double exchange_us(RankContext& ctx, size_t bytes, int iters) {
  const Topology& t = ctx.topology;
  const int per_machine = ctx.size / t.num_machines();
  const int to = (ctx.rank + per_machine) % ctx.size;
  const int from = (ctx.rank - per_machine + ctx.size) % ctx.size;
  const int64_t n = int64_t(bytes);
  const Tensor send = Tensor::empty({n}, DType::kU8, ctx.device);
  const Tensor recv = Tensor::empty({n}, DType::kU8, ctx.device);
  const Stream& s = ctx.stream;
  std::vector<double> us;
  for (int i = 0; i < iters + 1; ++i) {  // the first exchange connects: not timed
    Event start = Event::create(s, true), end = Event::create(s, true);
    start.record(s);
    ctx.world->group_begin();
    ctx.world->send(send.view(), to, s);
    ctx.world->recv(recv.view(), from, s);
    ctx.world->group_end();
    end.record(s);
    ctx.world->synchronize(s);
    if (i > 0) us.push_back(1000.0 * end.elapsed_ms_since(start));
  }
  std::sort(us.begin(), us.end());
  return max_across_ranks(ctx, us[us.size() / 2]);
}

}  // namespace

MeasuredLink measure_emulated_two_sided(RankContext& ctx) {
  TESSERA_CHECK_ARG(
      ctx.topology.emulated && ctx.topology.num_machines() > 1 && ctx.topology.is_regular(),
      "measure_emulated_two_sided: topology ", ctx.topology.to_string(),
      ": expected emulated machines of equal size, more than one");
  MeasuredLink link;
  const size_t big = size_t(64) << 20;
  link.latency_us = exchange_us(ctx, 4096, 5);
  const double big_us = exchange_us(ctx, big, 3);
  link.bandwidth_gbps = double(big) / (std::max(big_us - link.latency_us, 1.0) * 1e3);
  return link;
}

std::string cost_overrides(const MeasuredLink& link) {
  return str("emulated_two_sided_gbps=", link.bandwidth_gbps,
             ",emulated_two_sided_us=", link.latency_us);
}

}  // namespace tessera::cli
