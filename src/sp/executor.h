// PlanExecutor: runs one rank's part of a sequence-parallel attention plan (plan.h) on the
// cpu or cuda backend. Backend-neutral: it interprets the steps through the local attention
// API (attn::init_state / accumulate / merge / finalize), the Communicator (two-sided steps)
// and the SymmetricHeap (one-sided steps), Streams and Events; only the issue discipline and
// the strided copy differ per backend.
//
// Creation (collective over the context's ranks; may allocate and synchronize):
//   - checks that every rank holds the same plan (a fingerprint all-gathered on the world);
//   - memory: workspace slots that no peer accesses in one private buffer; slots some peer
//     puts into or gets from (remotely_accessed_slots on any rank) in one symmetric
//     allocation, each slot at the same offset on every rank (max_slot_bytes); a bound slot
//     (the caller's q, k, v, o, joint tensors) that peers access on this rank is staged there,
//     head-major (heads outermost, so the head subsets peers move are long contiguous runs):
//     inputs are copied in at the start of a run, outputs copied out at its end;
//     per stream a private staging area for packing strided regions of transfers (each
//     transfer plane of a step gets its own offset; a stream runs one step at a time);
//   - one Communicator per plan stream with two-sided steps (split off the world, so NCCL
//     work on different streams never shares a communicator), and, on cuda, one warm-up
//     exchange per communicator so every NCCL connection exists before the first run;
//   - signal slots of the heap: the plan's signals and one per barrier instance (the k-th
//     barrier of a group). Barriers are built from signals: arrive = raise the slot at every
//     other member, leave = wait for size - 1 raises, then subtract them again so the slot is
//     back at 0 for the next run. Unlike SymmetricHeap::barrier (an epoch counted on the
//     host), nothing changes between runs, so a captured CUDA graph replays correctly, and
//     groups smaller than the world need no communicator;
//   - cuda: one stream per communication stream of the plan (stream 0, compute, is the
//     caller's stream) and events for dependencies that cross streams.
//
// A run (collective; no allocation, no host synchronization on cuda, so it can be captured
// in a CUDA graph):
//   cuda: stage inputs, fork every plan stream from the caller's stream (an event), enqueue
//         each step on its stream in the schedule's order (executor_schedule.h) waiting for
//         cross-stream deps through events, join every stream back, copy staged outputs out.
//   cpu:  the same steps, inline, in the schedule's order of start and end actions: sends
//         are buffered, receives, barriers and waits block (bounded), and the order cannot
//         deadlock.
// Step mapping:
//   kCompute   attn::accumulate with one KvChunk per KV operand, MaskSpec from the operands'
//              positions, a fresh job when the step starts its state; several compute steps
//              are issued as one multi-job launch where that changes nothing the plan orders
//              (executor_fusion.h)
//   kMerge     attn::merge({dst, src}) into dst; overwrite: strided copy of O and lse
//   kFinalize  attn::finalize, or nothing where the launch that last writes its state writes the
//              output instead (AccumulateJob::final_o; executor_fusion.h says when): the step
//              then only waits for its deps and records its event (and a zero-length timing)
//   kSendRecv / kAllToAll  send/recv of every transfer plane (sorted by transfer id, as the
//              validator matches them), inside one NCCL group on cuda; strided regions are
//              packed into / unpacked from staging
//   kPut / kGet  SymmetricHeap put/get of contiguous runs, or a strided copy through the
//              peer pointer when the region is strided and the peer is load/store reachable;
//              a put with a signal raises it on each destination after its data
//   kSignal / kWait / kBarrier  heap signal, wait_signal (then reset back to 0), the signal
//              barrier above
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor_copy.h"
#include "executor_fusion.h"
#include "executor_schedule.h"
#include "tessera/attn/attention.h"
#include "tessera/comm/context.h"
#include "tessera/comm/signal_slots.h"
#include "tessera/core/buffer.h"
#include "tessera/sp/attention_layer.h"
#include "tessera/sp/plan.h"

namespace tessera::sp::detail {

// The caller's tensors of one run (empty joint views when the plan has no joint tokens).
struct RunTensors {
  TensorView q, k, v, o;
  TensorView joint_q, joint_k, joint_v, joint_o;
};

class PlanExecutor {
 public:
  // Collective over ctx's ranks. `plan` must be valid (check_plan) and identical on every
  // rank; ctx must outlive the executor.
  PlanExecutor(RankContext& ctx, Plan plan, float softmax_scale);
  ~PlanExecutor();
  PlanExecutor(const PlanExecutor&) = delete;
  PlanExecutor& operator=(const PlanExecutor&) = delete;

  // Runs the plan on `stream` (stream 0 of the plan). The tensors are checked by the caller
  // (attention_layer.cc) against the plan's shapes.
  void run(const RunTensors& io, const Stream& stream);

  // Runs record when each step begins and ends (two timing events per step on cuda; for
  // studying overlap, not for production runs: the events cost a little and keep a run out
  // of CUDA graphs).
  void enable_timeline(bool on);
  // The steps of the last run in step order. Waits for the run to finish (bounded).
  std::vector<StepTiming> last_timeline() const;
  // The compute launches (fused steps) of this rank.
  const ComputeLaunches& compute_launches() const { return fused_; }

  const Plan& plan() const { return plan_; }
  int rank() const { return rank_; }
  float softmax_scale() const { return softmax_scale_; }
  void set_softmax_scale(float scale) { softmax_scale_ = scale; }
  size_t private_bytes() const { return private_bytes_; }
  size_t symmetric_bytes() const { return symmetric_bytes_; }
  size_t staging_bytes() const { return staging_bytes_; }
  int num_signal_slots() const { return num_signal_slots_; }

 private:
  // A plane of a slot as bound for the current run: memory and geometry.
  struct PlaneBinding {
    void* base = nullptr;  // the geometry's offsets count from here
    Geometry geometry;     // [B, rows, heads, inner] or [B, heads, rows] (lse)
    bool heads_outer = false;
  };
  struct SlotMemory {
    std::vector<SlotPlane> planes;
    std::vector<PlaneBinding> bound;  // per plane, for the current run
    bool symmetric = false;           // lives in the symmetric allocation
    size_t symmetric_offset = 0;      // of the slot in the symmetric allocation
    size_t private_offset = 0;        // of the slot in the private buffer (workspace only)
    bool staged = false;              // a bound slot peers access: staged in symmetric memory
  };
  // One plane of one transfer of a step, as seen by this rank.
  struct PlaneTransfer {
    const Transfer* transfer = nullptr;
    int plane = 0;
    bool local_is_src = false;  // this rank reads (send / put) rather than writes
    int peer = -1;
    int64_t staging_offset = -1;  // bytes into the private buffer, -1: none reserved
    // kPut / kGet to another rank, fixed for the plan (set by plan_staging): the remote
    // region (offsets from the symmetric allocation), the order the transfer is issued in (the
    // remote slot's storage order), and whether it is too scattered for heap transfers.
    Geometry remote;
    std::array<int, 4> remote_order = {0, 1, 2, 3};
    bool scattered = false;
  };
  struct StepState {
    std::vector<PlaneTransfer> transfers;  // sorted by transfer id, then plane
    bool record_event = false;             // a step on another stream depends on it
    std::vector<int> wait_events;          // deps on other streams
    int signal_slot = -1;                  // heap slot of its signal / barrier
    int wait_from = -1;                    // kWait: the one rank raising it (-1: several)
  };

  void bind_memory();
  void plan_staging();
  void reserve_signals();
  void create_streams_and_comms();
  void warm_up_connections();
  void check_same_plan_everywhere();

  void bind_run(const RunTensors& io);
  PlaneBinding& binding(int slot, int plane) { return slots_[slot].bound[plane]; }
  TensorView local_view(int slot, int plane, const Region& region) const;
  // Geometry of a region of `peer`'s symmetric slot, offsets from the symmetric allocation.
  Geometry remote_geometry(int peer, int slot, int plane, const Region& region) const;
  // A contiguous view of `like`'s shape at the plane's staging offset.
  TensorView staging_view(const PlaneTransfer& x, const Geometry& like) const;
  Device device() const;

  void start_step(int index, const Stream& s);
  void end_step(int index, const Stream& s);
  // Issues compute launch `launch` (at the start of its last member step).
  void run_compute_launch(int launch, const Stream& s);
  void run_merge(const Step& step, const Stream& s);
  void run_finalize(const Step& step, const Stream& s);
  void post_sends(const Step& step, const StepState& st, const Stream& s);
  void receive(const Step& step, const StepState& st, const Stream& s);
  void run_put(const Step& step, const StepState& st, const Stream& s);
  void run_get(const StepState& st, const Stream& s);
  void barrier_arrive(const Step& step, const StepState& st, const Stream& s);
  void barrier_leave(const Step& step, const StepState& st, const Stream& s);
  void signal_wait(const Step& step, const StepState& st, const Stream& s);
  const Stream& stream_for(int plan_stream, const Stream& caller) const;

  RankContext& ctx_;
  Plan plan_;
  int rank_ = 0;
  float softmax_scale_ = 1.0f;
  bool cuda_ = false;
  std::vector<ScheduledAction> actions_;
  ComputeLaunches fused_;
  std::vector<attn::KvChunk> launch_chunks_;      // run-time scratch, sized at construction
  std::vector<attn::AccumulateJob> launch_jobs_;  // run-time scratch
  bool timeline_ = false;
  Event timeline_origin_;
  std::vector<Event> step_begin_, step_end_;  // per step, when the timeline is on
  std::vector<SlotMemory> slots_;
  std::vector<StepState> steps_;
  std::vector<std::vector<int>> link_tokens_;  // per step: reserve_link tokens of its receives

  Buffer private_buffer_;  // workspace slots and staging
  size_t private_bytes_ = 0;
  SymmetricBuffer symmetric_;
  size_t symmetric_bytes_ = 0;
  std::vector<size_t> staging_offset_;  // per plan stream, into private_buffer_
  size_t staging_bytes_ = 0;

  SignalSlots signal_slots_;  // released also when the constructor throws
  int signal_base_ = -1;
  int num_signal_slots_ = 0;

  std::vector<std::unique_ptr<Communicator>> comms_;  // per plan stream (null: none)
  std::vector<Stream> streams_;                       // per plan stream; [0] unused (caller's)
  std::vector<Event> step_events_;                    // per step that others wait for
  Event fork_event_;
  std::vector<Event> join_events_;
};

}  // namespace tessera::sp::detail
