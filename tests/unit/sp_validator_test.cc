// The validator rejects deliberately broken plans, each with a message naming the step: a
// missing block, a double-computed block, a read before its transfer, a buffer overwritten
// while still needed, an output on the wrong rank, and structural faults (links, byte counts,
// unmatched transfers, GQA mapping, mask, positions, signals, deadlock).
#include <gtest/gtest.h>

#include <functional>

#include "tessera/core/error.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera::sp {
namespace {

using testing::gpu_topology;
using testing::request;

Plan make(Method method, int P, CommMode comm = CommMode::kTwoSided, bool causal = false,
          int64_t joint = 0, int heads = 4, int machines = 1) {
  PlanRequest req =
      request(gpu_topology(machines, P / machines), method, 6 * P + 1, heads, heads, causal, joint);
  req.options.comm = comm;
  return make_plan(req, CostModel());
}

// Removes step `index` of `rank`; dependencies on it are dropped, later ones renumbered.
void erase_step(Plan& plan, int rank, int index) {
  auto& steps = plan.ranks[rank].steps;
  steps.erase(steps.begin() + index);
  for (Step& s : steps) {
    std::vector<int> deps;
    for (int d : s.deps) {
      if (d != index) deps.push_back(d > index ? d - 1 : d);
    }
    s.deps = deps;
  }
}

// Inserts `step` at `index` of `rank`, renumbering later dependencies.
void insert_step(Plan& plan, int rank, int index, Step step) {
  auto& steps = plan.ranks[rank].steps;
  for (Step& s : steps) {
    for (int& d : s.deps) {
      if (d >= index) ++d;
    }
  }
  steps.insert(steps.begin() + index, std::move(step));
}

int find_step(const Plan& plan, int rank, const std::function<bool(const Step&)>& pred,
              int nth = 0) {
  const auto& steps = plan.ranks[rank].steps;
  for (int i = 0; i < int(steps.size()); ++i) {
    if (pred(steps[i]) && nth-- == 0) return i;
  }
  ADD_FAILURE() << "no such step on rank " << rank;
  return -1;
}

bool note_has(const Step& s, const std::string& text) {
  return s.note.find(text) != std::string::npos;
}

// The report is an error and one message contains every fragment.
void expect_error(const Plan& plan, const std::vector<std::string>& fragments) {
  const ValidationReport report = validate_plan(plan);
  ASSERT_FALSE(report.ok()) << "the broken plan was accepted";
  for (const std::string& e : report.errors) {
    bool all = true;
    for (const std::string& f : fragments) all = all && e.find(f) != std::string::npos;
    if (all) return;
  }
  std::string wanted;
  for (const std::string& f : fragments) wanted += " [" + f + "]";
  ADD_FAILURE() << "no error contains" << wanted << "\n" << report.to_string(30);
}

TEST(SpValidator, AcceptsPlannedPlansAndCountsBlocks) {
  for (Method m : {Method::kRing, Method::kUlysses, Method::kUsp, Method::kTas, Method::kTorus,
                   Method::kMesh}) {
    const Plan plan = make(m, 4, CommMode::kTwoSided, false, 0, 4, 2);
    const ValidationReport report = validate_plan(plan);
    EXPECT_TRUE(report.ok()) << method_name(m) << "\n" << report.to_string();
    // 4 contiguous shards are 4 atoms; 4 heads: 4 * 4 * 4 visible blocks.
    EXPECT_EQ(report.num_atoms, 4) << method_name(m);
    EXPECT_EQ(report.blocks_needed, 64) << method_name(m);
    EXPECT_EQ(report.blocks_computed, 64) << method_name(m);
  }
  EXPECT_NO_THROW(check_plan(make(Method::kRing, 3)));
}

TEST(SpValidator, RejectsMissingBlock) {
  Plan plan = make(Method::kRing, 3);
  const int i = find_step(plan, 1, [](const Step& s) {
    return s.kind == StepKind::kCompute && note_has(s, "ring step 1");
  });
  erase_step(plan, 1, i);
  expect_error(plan, {"is never computed"});
  // The finalize of the affected rows names its step and the missing kv.
  expect_error(plan, {"rank 1 step", "finalize", "lack kv"});
}

TEST(SpValidator, RejectsDoubleComputedBlock) {
  Plan plan = make(Method::kRing, 3);
  const int i = find_step(plan, 2, [](const Step& s) {
    return s.kind == StepKind::kCompute && note_has(s, "ring step 2");
  });
  Step again = plan.ranks[2].steps[i];
  again.compute.accumulate = true;
  again.deps = {i};
  insert_step(plan, 2, i + 1, again);
  expect_error(plan,
               {"computed 2 times", str("rank 2 step ", i, " "), str("rank 2 step ", i + 1, " ")});
  expect_error(plan, {"finalize", "2 times"});
}

TEST(SpValidator, RejectsReadBeforeItsTransfer) {
  Plan plan = make(Method::kRing, 3);
  // The first block of ring step 1 reads ring0, which the step-0 transfer fills.
  const int i = find_step(plan, 0, [](const Step& s) {
    return s.kind == StepKind::kCompute && note_has(s, "ring step 1");
  });
  plan.ranks[0].steps[i].deps.clear();
  expect_error(plan, {str("rank 0 step ", i, " (compute"), "'ring0'", "nothing orders the two"});
}

TEST(SpValidator, RejectsReadOfDataThatNeverArrives) {
  Plan plan = make(Method::kRing, 3);
  const int i = find_step(plan, 0, [](const Step& s) {
    return s.kind == StepKind::kCompute && note_has(s, "ring step 1");
  });
  // Point the kv operand at ring1, which nothing fills before ring step 2.
  Step& s = plan.ranks[0].steps[i];
  s.compute.kv[0].ref.slot += 1;
  expect_error(plan, {str("rank 0 step ", i, " (compute"), "'ring1'", "holds no data"});
}

TEST(SpValidator, RejectsOneSidedReadWithoutBarrier) {
  Plan plan = make(Method::kUlysses, 2, CommMode::kOneSided);
  for (int r = 0; r < 2; ++r) {
    const int b = find_step(plan, r, [](const Step& s) { return s.kind == StepKind::kBarrier; });
    erase_step(plan, r, b);
  }
  // Rank 0's compute reads what rank 1 pushed into its ua_q, unordered.
  expect_error(plan, {"(compute", "'ua_q'", "(put", "nothing orders the two"});
}

TEST(SpValidator, PutWithSignalAndWaitReplaceABarrier) {
  // Ulysses one-sided on 3 ranks: each rank's scatter-push raises signal 0 on its two
  // destinations, and each rank waits for both instead of the first barrier.
  auto with_signals = [](int64_t wait_value) {
    Plan plan = make(Method::kUlysses, 3, CommMode::kOneSided);
    for (int r = 0; r < 3; ++r) {
      plan.ranks[r].num_signals = 1;
      const int put = find_step(plan, r, [](const Step& s) { return s.kind == StepKind::kPut; });
      plan.ranks[r].steps[put].signal_id = 0;
      const int b = find_step(plan, r, [](const Step& s) { return s.kind == StepKind::kBarrier; });
      Step& wait = plan.ranks[r].steps[b];
      wait.kind = StepKind::kWait;
      wait.group.clear();
      wait.signal_id = 0;
      wait.signal_value = wait_value;
    }
    return plan;
  };
  const ValidationReport report = validate_plan(with_signals(2));
  EXPECT_TRUE(report.ok()) << report.to_string();
  expect_error(with_signals(1), {"(wait", "to reach 1", "raises it 2 times"});
}

TEST(SpValidator, RejectsSlotIdsThatDifferAcrossRanks) {
  Plan plan = make(Method::kRing, 2);
  plan.ranks[1].slots.back().name = "other";
  expect_error(plan, {"on rank 0 but 'other'", "same buffer on every rank"});
}

TEST(SpValidator, RejectsBufferOverwrittenWhileStillNeeded) {
  Plan plan = make(Method::kRing, 4);
  // Ring step 2's transfer refills ring0, which ring step 1's blocks read.
  const int i = find_step(plan, 1, [](const Step& s) {
    return s.kind == StepKind::kSendRecv && note_has(s, "ring step 2");
  });
  plan.ranks[1].steps[i].deps.clear();
  expect_error(plan, {str("rank 1 step ", i, " (sendrecv"), "writes 'ring0'", "reads it",
                      "nothing orders the two"});
}

TEST(SpValidator, RejectsRemoteWriteAfterOwnerMayFinish) {
  Plan plan = make(Method::kUlysses, 2, CommMode::kOneSided);
  for (int r = 0; r < 2; ++r) {
    const int b = find_step(plan, r, [](const Step& s) {
      return s.kind == StepKind::kBarrier && note_has(s, "outputs landed");
    });
    erase_step(plan, r, b);
  }
  expect_error(plan, {"(put", "writes 'o'", "can finish before that"});
}

TEST(SpValidator, RejectsOutputOnTheWrongRank) {
  Plan plan = make(Method::kUlysses, 3);
  // Redirect rank 0's O for rank 1's tokens to rank 2.
  const int s0 = find_step(plan, 0, [](const Step& s) {
    return s.kind == StepKind::kAllToAll && note_has(s, "exchange of o");
  });
  Transfer* moved = nullptr;
  for (Transfer& t : plan.ranks[0].steps[s0].transfers) {
    if (t.src_rank == 0 && t.dst_rank == 1) moved = &t;
  }
  ASSERT_NE(moved, nullptr);
  const int id = moved->id;
  moved->dst_rank = 2;
  moved->dst.slot = 2;  // rank 2's output slot ("o")
  moved->link = plan.links[0 * 3 + 2];
  const Transfer redirected = *moved;
  const int s1 = find_step(plan, 1, [](const Step& s) {
    return s.kind == StepKind::kAllToAll && note_has(s, "exchange of o");
  });
  auto& t1 = plan.ranks[1].steps[s1].transfers;
  t1.erase(std::remove_if(t1.begin(), t1.end(), [&](const Transfer& t) { return t.id == id; }),
           t1.end());
  const int s2 = find_step(plan, 2, [](const Step& s) {
    return s.kind == StepKind::kAllToAll && note_has(s, "exchange of o");
  });
  plan.ranks[2].steps[s2].transfers.push_back(redirected);
  expect_error(plan, {"rank 2 output 'o'", "wrong rank", str("rank 2 step ", s2, " (alltoall")});
  expect_error(plan, {"rank 1 output 'o' is missing"});
}

TEST(SpValidator, RejectsStructuralFaults) {
  {
    Plan plan = make(Method::kRing, 2, CommMode::kTwoSided, false, 0, 4, 2);
    const int i = find_step(plan, 0, [](const Step& s) { return s.kind == StepKind::kSendRecv; });
    plan.ranks[0].steps[i].transfers[0].link = LinkClass::kNVLink;
    expect_error(plan, {str("rank 0 step ", i), "link nvlink", "network"});
  }
  {
    Plan plan = make(Method::kRing, 2);
    const int i = find_step(plan, 0, [](const Step& s) { return s.kind == StepKind::kSendRecv; });
    plan.ranks[0].steps[i].transfers[0].bytes += 1;
    expect_error(plan, {str("rank 0 step ", i), "bytes"});
  }
  {
    Plan plan = make(Method::kRing, 2);
    const int i = find_step(plan, 1, [](const Step& s) { return s.kind == StepKind::kSendRecv; });
    auto& ts = plan.ranks[1].steps[i].transfers;
    ts.erase(
        std::remove_if(ts.begin(), ts.end(), [](const Transfer& t) { return t.src_rank == 0; }),
        ts.end());
    expect_error(plan, {"must be listed by both", "by the sender"});
  }
  {
    Plan plan = make(Method::kRing, 2, CommMode::kTwoSided, true);
    const int i = find_step(plan, 0, [](const Step& s) { return s.kind == StepKind::kCompute; });
    plan.ranks[0].steps[i].compute.causal = false;
    expect_error(plan, {str("rank 0 step ", i), "causal = 0"});
  }
  {
    Plan plan = make(Method::kRing, 2);
    const int i = find_step(plan, 0, [](const Step& s) { return s.kind == StepKind::kCompute; });
    plan.ranks[0].steps[i].compute.q.positions.start += 1;
    expect_error(plan, {str("rank 0 step ", i), "q operand", "expects tokens"});
  }
  {
    // GQA: 8 query heads on 2 kv heads; a call must not map query head 0 to kv head 1.
    PlanRequest req = request(gpu_topology(1, 2), Method::kRing, 13, 8, 2, false, 0);
    Plan plan = make_plan(req, CostModel());
    const int i = find_step(plan, 0, [](const Step& s) { return s.kind == StepKind::kCompute; });
    AttnOperand& kv = plan.ranks[0].steps[i].compute.kv[0];
    kv.first_head = 1;
    kv.ref.region.head_begin = 1;
    kv.ref.region.head_count = 1;
    expect_error(plan, {str("rank 0 step ", i), "GQA"});
  }
  {
    Plan plan = make(Method::kRing, 2);
    plan.ranks[0].num_signals = 1;
    Step wait;
    wait.kind = StepKind::kWait;
    wait.stream = 1;
    wait.signal_id = 0;
    wait.signal_value = 1;
    plan.ranks[0].steps.push_back(wait);
    expect_error(plan, {"waits for signal 0 to reach 1", "raises it 0 times"});
  }
}

TEST(SpValidator, RejectsDeadlock) {
  // Two ranks that each receive before they send, in separate steps, wait for each other.
  Plan plan = make(Method::kRing, 2);
  for (int r = 0; r < 2; ++r) {
    const int i = find_step(plan, r, [](const Step& s) { return s.kind == StepKind::kSendRecv; });
    Step send = plan.ranks[r].steps[i];
    Step recv = send;
    std::erase_if(send.transfers, [&](const Transfer& t) { return t.src_rank != r; });
    std::erase_if(recv.transfers, [&](const Transfer& t) { return t.dst_rank != r; });
    plan.ranks[r].steps[i] = recv;
    send.deps = {i};
    insert_step(plan, r, i + 1, send);
  }
  expect_error(plan, {"never completes", "waits for"});
  expect_error(plan, {"the plan deadlocks"});
}

}  // namespace
}  // namespace tessera::sp
