// Structured mutations of a valid plan, for fuzzing the validator: each changes one field of
// the plan (a step's kind, stream, deps, a transfer's ranks, slots, regions or bytes, a
// compute operand's positions or heads, a slot's size, signals, the shape, the topology), or
// removes, duplicates or swaps steps and transfers. New values are near the old one (off by
// one is where plans go wrong) or at the edges of the field's type.
#pragma once

#include <algorithm>
#include <limits>
#include <utility>

#include "fuzz_support.h"
#include "tessera/sp/plan.h"

namespace tessera::fuzz {

// The old value nudged by -2..+2, an edge value, or any value.
inline int64_t mutate_value(FuzzedDataProvider& in, int64_t old) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
    case 1: {
      const int64_t delta = in.ConsumeIntegralInRange<int64_t>(-2, 2);
      int64_t out;
      return __builtin_add_overflow(old, delta, &out) ? old : out;
    }
    case 2:
      return edge_value(in);
    default:
      return in.ConsumeIntegral<int64_t>();
  }
}

template <typename T>
void mutate_field(FuzzedDataProvider& in, T& field) {
  const int64_t v = mutate_value(in, int64_t(field));
  field = T(std::clamp<int64_t>(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

template <typename T>
T& pick(FuzzedDataProvider& in, std::vector<T>& items) {
  return items[in.ConsumeIntegralInRange<size_t>(0, items.size() - 1)];
}

template <typename T>
void reshape_list(FuzzedDataProvider& in, std::vector<T>& items) {
  if (items.empty()) return;
  const size_t i = in.ConsumeIntegralInRange<size_t>(0, items.size() - 1);
  const size_t j = in.ConsumeIntegralInRange<size_t>(0, items.size() - 1);
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      items.erase(items.begin() + long(i));
      break;
    case 1:
      items.insert(items.begin() + long(i), items[j]);
      break;
    default:
      std::swap(items[i], items[j]);
  }
}

inline void mutate_region(FuzzedDataProvider& in, sp::Region& region) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return mutate_field(in, region.row_begin);
    case 1:
      return mutate_field(in, region.row_count);
    case 2:
      return mutate_field(in, region.head_begin);
    default:
      return mutate_field(in, region.head_count);
  }
}

inline void mutate_ref(FuzzedDataProvider& in, sp::SlotRef& ref) {
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) return mutate_field(in, ref.slot);
  mutate_region(in, ref.region);
}

inline void mutate_operand(FuzzedDataProvider& in, sp::AttnOperand& op) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      return mutate_ref(in, op.ref);
    case 1:
      return mutate_field(in, op.positions.start);
    case 2:
      return mutate_field(in, op.positions.stride);
    case 3:
      return mutate_field(in, op.positions.count);
    default:
      return mutate_field(in, op.first_head);
  }
}

inline void mutate_transfer(FuzzedDataProvider& in, sp::Transfer& t) {
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      return mutate_field(in, t.id);
    case 1:
      return mutate_field(in, t.src_rank);
    case 2:
      return mutate_field(in, t.dst_rank);
    case 3:
      return mutate_ref(in, t.src);
    case 4:
      return mutate_ref(in, t.dst);
    case 5:
      t.link = LinkClass(in.ConsumeIntegralInRange<int>(0, 4));
      return;
    default:
      return mutate_field(in, t.bytes);
  }
}

inline void mutate_compute(FuzzedDataProvider& in, sp::ComputeSpec& c) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      return mutate_operand(in, c.q);
    case 1:
      if (!c.kv.empty()) mutate_operand(in, pick(in, c.kv));
      return;
    case 2:
      return reshape_list(in, c.kv);
    case 3:
      c.causal = !c.causal;
      return;
    case 4:
      return mutate_ref(in, c.state);
    default:
      c.accumulate = !c.accumulate;
  }
}

inline void mutate_step(FuzzedDataProvider& in, sp::Step& s) {
  switch (in.ConsumeIntegralInRange<int>(0, 14)) {
    case 0:
      s.kind = sp::StepKind(in.ConsumeIntegralInRange<int>(0, 9));
      return;
    case 1:
      return mutate_field(in, s.stream);
    case 2:
      if (s.deps.empty() || in.ConsumeBool()) {
        s.deps.push_back(int(mutate_value(in, s.deps.empty() ? 0 : s.deps.back())));
      } else {
        mutate_field(in, pick(in, s.deps));
      }
      return;
    case 3:
      return reshape_list(in, s.deps);
    case 4:
      if (!s.transfers.empty()) mutate_transfer(in, pick(in, s.transfers));
      return;
    case 5:
      return reshape_list(in, s.transfers);
    case 6:
      if (!s.group.empty()) mutate_field(in, pick(in, s.group));
      return;
    case 7:
      return reshape_list(in, s.group);
    case 8:
      return mutate_compute(in, s.compute);
    case 9:
      return mutate_ref(in, s.src);
    case 10:
      return mutate_ref(in, s.dst);
    case 11:
      s.overwrite = !s.overwrite;
      return;
    case 12:
      return mutate_field(in, s.signal_id);
    case 13:
      return mutate_field(in, s.signal_rank);
    default:
      return mutate_field(in, s.signal_value);
  }
}

inline void mutate_slot(FuzzedDataProvider& in, sp::SlotDesc& slot) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return mutate_field(in, slot.rows);
    case 1:
      return mutate_field(in, slot.heads);
    case 2:
      slot.kind = sp::SlotKind(in.ConsumeIntegralInRange<int>(0, 3));
      return;
    default:
      slot.binding = sp::SlotBinding(in.ConsumeIntegralInRange<int>(0, 6));
  }
}

inline void mutate_shape(FuzzedDataProvider& in, sp::AttentionShape& shape) {
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0:
      return mutate_field(in, shape.batch);
    case 1:
      return mutate_field(in, shape.seq_len);
    case 2:
      return mutate_field(in, shape.joint_tokens);
    case 3:
      return mutate_field(in, shape.heads);
    case 4:
      return mutate_field(in, shape.kv_heads);
    case 5:
      return mutate_field(in, shape.head_dim);
    case 6:
      shape.dtype = DType(in.ConsumeIntegralInRange<int>(0, 6));
      return;
    case 7:
      shape.partial_dtype = DType(in.ConsumeIntegralInRange<int>(0, 6));
      return;
    default:
      shape.causal = !shape.causal;
  }
}

inline void mutate_rank_plan(FuzzedDataProvider& in, sp::RankPlan& rank) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
    case 1:
    case 2:
      if (!rank.steps.empty()) mutate_step(in, pick(in, rank.steps));
      return;
    case 3:
      return reshape_list(in, rank.steps);
    case 4:
      if (!rank.slots.empty()) mutate_slot(in, pick(in, rank.slots));
      return;
    default:
      return mutate_field(in, rank.num_signals);
  }
}

// Mostly inside a rank's steps; sometimes the plan's own fields.
inline void mutate_plan(FuzzedDataProvider& in, sp::Plan& plan) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      return mutate_shape(in, plan.shape);
    case 1:
      return mutate_field(in, plan.world_size);
    case 2:
      return mutate_field(in, plan.num_streams);
    case 3:
      if (!plan.machine_of_rank.empty()) mutate_field(in, pick(in, plan.machine_of_rank));
      return;
    case 4:
      if (!plan.links.empty()) {
        pick(in, plan.links) = LinkClass(in.ConsumeIntegralInRange<int>(0, 4));
      }
      return;
    case 5:
      plan.layout = sp::TokenLayout(in.ConsumeIntegralInRange<int>(0, 2));
      return;
    case 6:
      return reshape_list(in, plan.ranks);
    default:
      if (!plan.ranks.empty()) mutate_rank_plan(in, pick(in, plan.ranks));
  }
}

}  // namespace tessera::fuzz
