// Measures the link two-sided (NCCL) traffic really takes between emulated machines, for the
// cost model (CostModel::emulated_two_sided): on one host NCCL cannot use the paced one-sided
// transport, so with emulated machines it runs its socket transport over loopback, whose speed
// has nothing to do with the emulated link preset.
#pragma once

#include <string>

#include "tessera/comm/context.h"

namespace tessera::cli {

struct MeasuredLink {
  double bandwidth_gbps = 0.0;  // per GPU, every rank sending across at once
  double latency_us = 0.0;      // a 4 KiB exchange
};

// Collective. Every rank exchanges with the rank one machine over (ring over machines, all
// ranks at once, as ring and torus steps load the link): a 4 KiB exchange gives the latency, a
// 64 MiB one the bandwidth (medians of a few, slowest rank). Only for emulated topologies
// with more than one machine; throws kInvalidArgument otherwise.
MeasuredLink measure_emulated_two_sided(RankContext& ctx);

// "emulated_two_sided_gbps=...,emulated_two_sided_us=..." for CostModel::apply.
std::string cost_overrides(const MeasuredLink& link);

}  // namespace tessera::cli
