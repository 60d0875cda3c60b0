// PlanExecutor: runs a sequence-parallel attention plan on the cpu or cuda backend (see
// executor.h for what it allocates, how it issues and how each step maps to the backends).
#include "executor.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "tessera/comm/agreement.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/memory.h"

namespace tessera::sp::detail {

namespace {

constexpr size_t kAlignment = 256;

size_t align_up(size_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

bool is_input(SlotBinding b) {
  return b == SlotBinding::kInputQ || b == SlotBinding::kInputKV || b == SlotBinding::kJointQ ||
         b == SlotBinding::kJointKV;
}

// The region of a plane's geometry: rows x heads ([B, rows, heads, inner]) or heads x rows
// (the lse plane [B, heads, rows]).
Geometry region_of(const Geometry& plane, bool heads_outer, const Region& r) {
  if (heads_outer)
    return plane.slice(1, r.head_begin, r.head_count).slice(2, r.row_begin, r.row_count);
  return plane.slice(1, r.row_begin, r.row_count).slice(2, r.head_begin, r.head_count);
}

// The geometry of a plane of a slot the executor lays out: the plan's [B, rows, heads, inner]
// (or [B, heads, rows] for lse), or, for a caller's tensor staged in symmetric memory,
// head-major: heads outermost, each head a [B, rows, inner] block. Peers put into an output
// and pull from an input a head subset of a row range; head-major, that is one contiguous run
// per (head, batch entry) instead of one per row, which matters where a peer is reached only
// through SymmetricHeap put/get (another machine).
Geometry plane_geometry(const AttentionShape& shape, const SlotDesc& slot, const SlotPlane& plane,
                        int64_t byte_offset) {
  const int64_t es = int64_t(dtype_size(plane.dtype));
  TESSERA_CHECK(byte_offset % es == 0, ErrorCode::kInternal, "plane '", plane.name, "' of slot '",
                slot.name, "' at byte ", byte_offset, " is not element-aligned");
  if (plane.heads_outer) {
    return Geometry::contiguous(plane.dtype, {shape.batch, slot.heads, slot.rows},
                                byte_offset / es);
  }
  Geometry g = Geometry::contiguous(plane.dtype, {shape.batch, slot.rows, slot.heads, plane.inner},
                                    byte_offset / es);
  if (slot.binding != SlotBinding::kWorkspace) {
    g.stride[0] = slot.rows * plane.inner;
    g.stride[1] = plane.inner;
    g.stride[2] = shape.batch * slot.rows * plane.inner;
  }
  return g;
}

// A one-sided plane moves through SymmetricHeap put/get (copy engines or the paced link, no
// SMs) when it is at most this many pitched transfers; a more scattered one goes through a
// peer pointer as one SM copy where the peer is load/store reachable. Through the heap, a
// local side laid out otherwise is packed / unpacked in local memory (a fast SM pass) instead
// of reading or writing NVLink from SMs for the whole transfer.
constexpr int kMaxHeapTransfersPerPlane = 8;

int pitched_groups(const Geometry& g) {
  int n = 0;
  g.for_each_pitched([&](int64_t, int64_t, int64_t, int64_t) { ++n; });
  return n;
}

}  // namespace

// ---- creation --------------------------------------------------------------------------------

PlanExecutor::PlanExecutor(RankContext& ctx, Plan plan, float softmax_scale)
    : ctx_(ctx), plan_(std::move(plan)), rank_(ctx.rank), softmax_scale_(softmax_scale) {
  TESSERA_CHECK_ARG(plan_.world_size == ctx.size && int(plan_.ranks.size()) == ctx.size, "plan of ",
                    plan_.world_size, " ranks on a context of ", ctx.size,
                    " ranks: expected the same number");
  TESSERA_CHECK_ARG(ctx.world != nullptr, "context of rank ", ctx.rank,
                    " has no world communicator");
  cuda_ = ctx.backend == Backend::kCuda;
  std::vector<std::vector<ScheduledAction>> order = schedule_plan(plan_);
  actions_ = std::move(order[rank_]);
  steps_.resize(plan_.ranks[rank_].steps.size());
  link_tokens_.resize(steps_.size());
  fused_ = fuse_compute_steps(plan_, rank_, actions_, attn::kMaxJobsPerLaunch,
                              attn::kMaxChunksPerLaunch);
  size_t max_jobs = 0, max_chunks = 0;
  for (const ComputeLaunch& l : fused_.launches) {
    max_jobs = std::max(max_jobs, l.jobs.size());
    size_t chunks = 0;
    for (const FusedJob& j : l.jobs) chunks += j.chunks.size();
    max_chunks = std::max(max_chunks, chunks);
  }
  launch_jobs_.reserve(max_jobs);
  launch_chunks_.reserve(max_chunks);
  reserve_signals();
  check_same_plan_everywhere();
  bind_memory();
  create_streams_and_comms();
  warm_up_connections();
}

PlanExecutor::~PlanExecutor() = default;

Device PlanExecutor::device() const {
  return cuda_ ? ctx_.device : Device::cpu();
}

void PlanExecutor::reserve_signals() {
  const RankPlan& mine = plan_.ranks[rank_];
  int num_plan_signals = 0;
  for (const RankPlan& rp : plan_.ranks)
    num_plan_signals = std::max(num_plan_signals, rp.num_signals);
  // Barrier instances (the k-th barrier of a group), numbered the same way on every rank.
  std::map<std::pair<std::vector<int>, int>, int> instance_index;
  std::vector<std::map<int, int>> instance_of_step(plan_.ranks.size());
  for (int r = 0; r < plan_.world_size; ++r) {
    std::map<std::vector<int>, int> seen;
    const auto& steps = plan_.ranks[r].steps;
    for (int i = 0; i < int(steps.size()); ++i) {
      const Step& st = steps[i];
      if (st.kind != StepKind::kBarrier || st.group.size() <= 1) continue;
      const auto key = std::make_pair(st.group, seen[st.group]++);
      auto [it, fresh] = instance_index.try_emplace(key, int(instance_index.size()));
      instance_of_step[r][i] = it->second;
    }
  }
  num_signal_slots_ = num_plan_signals + int(instance_index.size());
  if (num_signal_slots_ > 0) {
    TESSERA_CHECK_ARG(ctx_.heap != nullptr, "plan ", plan_.method, " (", comm_mode_name(plan_.comm),
                      ") uses ", num_signal_slots_,
                      " signals but the context has no symmetric heap: expected "
                      "ContextOptions::create_heap = true");
    signal_slots_ = SignalSlots(*ctx_.heap, num_signal_slots_, "sequence-parallel attention");
    signal_base_ = signal_slots_.base();
  }
  // Who raises each of this rank's signals (for wait messages).
  std::map<int, std::set<int>> raisers;
  for (int r = 0; r < plan_.world_size; ++r) {
    for (const Step& st : plan_.ranks[r].steps) {
      if (st.kind == StepKind::kSignal && st.signal_rank == rank_) raisers[st.signal_id].insert(r);
      if (st.kind == StepKind::kPut && st.signal_id >= 0) {
        for (const Transfer& t : st.transfers) {
          if (t.dst_rank == rank_) raisers[st.signal_id].insert(r);
        }
      }
    }
  }
  for (int i = 0; i < int(mine.steps.size()); ++i) {
    const Step& st = mine.steps[i];
    StepState& ss = steps_[i];
    switch (st.kind) {
      case StepKind::kPut:
      case StepKind::kSignal:
      case StepKind::kWait:
        if (st.signal_id >= 0) ss.signal_slot = signal_base_ + st.signal_id;
        if (st.kind == StepKind::kWait) {
          const std::set<int>& from = raisers[st.signal_id];
          ss.wait_from = from.size() == 1 ? *from.begin() : -1;
        }
        break;
      case StepKind::kBarrier:
        if (auto it = instance_of_step[rank_].find(i); it != instance_of_step[rank_].end()) {
          ss.signal_slot = signal_base_ + num_plan_signals + it->second;
        }
        break;
      default:
        break;
    }
  }
}

void PlanExecutor::check_same_plan_everywhere() {
  const int P = plan_.world_size;
  if (P == 1) return;
  // Notes are for people and may name the rank that wrote them (error texts): leave them out.
  Plan bare = plan_;
  bare.notes.clear();
  const uint64_t mine[2] = {fingerprint(to_json(bare)), uint64_t(int64_t(signal_base_))};
  const std::vector<uint64_t> all = all_gather_words(ctx_, mine);
  for (int r = 0; r < P; ++r) {
    TESSERA_CHECK(all[2 * r] == mine[0], ErrorCode::kInvalidArgument, "rank ", rank_, ": rank ", r,
                  " planned a different ", plan_.method, " plan (fingerprint ", all[2 * r], " vs ",
                  mine[0],
                  "): every rank must create SpAttention with the same request and options");
    TESSERA_CHECK(all[2 * r + 1] == mine[1], ErrorCode::kInvalidArgument, "rank ", rank_, ": rank ",
                  r, " got signal slots from ", int64_t(all[2 * r + 1]), " but this rank from ",
                  int64_t(mine[1]),
                  ": every rank must create and destroy its SpAttention objects in the same order");
  }
}

void PlanExecutor::bind_memory() {
  const AttentionShape& shape = plan_.shape;
  const RankPlan& mine = plan_.ranks[rank_];
  size_t num_slot_ids = 0;
  for (const RankPlan& rp : plan_.ranks) num_slot_ids = std::max(num_slot_ids, rp.slots.size());
  // Slots any rank accesses remotely: symmetric, at one offset everywhere.
  std::vector<bool> remote_any(num_slot_ids, false);
  for (int r = 0; r < plan_.world_size; ++r) {
    for (int id : remotely_accessed_slots(plan_, r)) remote_any[id] = true;
  }
  std::vector<bool> remote_here(num_slot_ids, false);
  for (int id : remotely_accessed_slots(plan_, rank_)) remote_here[id] = true;
  std::vector<size_t> symmetric_offset(num_slot_ids, 0);
  for (size_t id = 0; id < num_slot_ids; ++id) {
    if (!remote_any[id]) continue;
    symmetric_offset[id] = symmetric_bytes_;
    symmetric_bytes_ = align_up(symmetric_bytes_ + size_t(max_slot_bytes(plan_, int(id))));
  }

  slots_.resize(mine.slots.size());
  for (size_t id = 0; id < mine.slots.size(); ++id) {
    const SlotDesc& desc = mine.slots[id];
    SlotMemory& m = slots_[id];
    m.planes = slot_planes(shape, desc);
    m.bound.resize(m.planes.size());
    for (size_t p = 0; p < m.planes.size(); ++p) m.bound[p].heads_outer = m.planes[p].heads_outer;
    if (desc.binding == SlotBinding::kWorkspace) {
      m.symmetric = remote_any[id];
    } else {
      m.staged = remote_here[id];
      m.symmetric = m.staged;
    }
    m.symmetric_offset = symmetric_offset[id];
    if (desc.binding == SlotBinding::kWorkspace && !m.symmetric) {
      m.private_offset = private_bytes_;
      private_bytes_ = align_up(private_bytes_ + size_t(slot_bytes(shape, desc)));
    }
  }
  plan_staging();
  // Staging areas after the private slots, one per plan stream.
  const size_t slots_end = private_bytes_;
  private_bytes_ = slots_end + staging_bytes_;
  for (size_t& off : staging_offset_) off += slots_end;
  // Each reserved plane's offset from the private buffer's start.
  for (int i = 0; i < int(steps_.size()); ++i) {
    const size_t base = staging_offset_[plan_.ranks[rank_].steps[i].stream];
    for (PlaneTransfer& x : steps_[i].transfers) {
      if (x.staging_offset >= 0) x.staging_offset += int64_t(base);
    }
  }

  if (private_bytes_ > 0) private_buffer_ = Buffer::allocate(private_bytes_, device());
  if (symmetric_bytes_ > 0) {
    TESSERA_CHECK_ARG(ctx_.heap != nullptr, "plan ", plan_.method, " (", comm_mode_name(plan_.comm),
                      ") accesses ", symmetric_bytes_,
                      " bytes one-sided but the context has no symmetric heap: expected "
                      "ContextOptions::create_heap = true");
    symmetric_ = ctx_.heap->allocate(symmetric_bytes_);  // collective: same bytes everywhere
  }
  // Workspace and staged slots have fixed memory; bound ones are set per run.
  for (size_t id = 0; id < mine.slots.size(); ++id) {
    SlotMemory& m = slots_[id];
    const SlotDesc& desc = mine.slots[id];
    if (desc.binding != SlotBinding::kWorkspace && !m.staged) continue;
    std::byte* base = m.symmetric
                          ? static_cast<std::byte*>(symmetric_.local) + m.symmetric_offset
                          : static_cast<std::byte*>(private_buffer_.data()) + m.private_offset;
    for (size_t p = 0; p < m.planes.size(); ++p) {
      m.bound[p].base = base;
      m.bound[p].geometry = plane_geometry(shape, desc, m.planes[p], m.planes[p].offset_bytes);
    }
  }
}

void PlanExecutor::plan_staging() {
  const AttentionShape& shape = plan_.shape;
  const RankPlan& mine = plan_.ranks[rank_];
  staging_offset_.assign(size_t(plan_.num_streams), 0);
  std::vector<size_t> need(size_t(plan_.num_streams), 0);
  for (int i = 0; i < int(mine.steps.size()); ++i) {
    const Step& step = mine.steps[i];
    StepState& st = steps_[i];
    if (!is_comm_step(step.kind)) continue;
    for (const Transfer& t : step.transfers) {
      const bool self = t.src_rank == rank_ && t.dst_rank == rank_;
      // Which side this rank touches: sends and puts read the source, receives and gets
      // write the destination.
      bool local_src;
      if (step.kind == StepKind::kPut) {
        local_src = true;
      } else if (step.kind == StepKind::kGet) {
        local_src = false;
      } else {
        local_src = t.src_rank == rank_;
      }
      const SlotRef& local = local_src ? t.src : t.dst;
      const int peer = self ? rank_ : (local_src ? t.dst_rank : t.src_rank);
      const SlotDesc& desc = mine.slots[local.slot];
      const std::vector<SlotPlane> planes = slot_planes(shape, desc);
      for (int p = 0; p < int(planes.size()); ++p) {
        PlaneTransfer x;
        x.transfer = &t;
        x.plane = p;
        x.local_is_src = local_src;
        x.peer = peer;
        st.transfers.push_back(x);
      }
    }
    // Two-sided: in transfer id order, the same on both ends (NCCL matches a pair's sends and
    // receives by order). One-sided: in plan order, which rotates the peers per rank.
    if (!is_one_sided_step(step.kind)) {
      std::stable_sort(st.transfers.begin(), st.transfers.end(),
                       [](const PlaneTransfer& a, const PlaneTransfer& b) {
                         return std::make_pair(a.transfer->id, a.plane) <
                                std::make_pair(b.transfer->id, b.plane);
                       });
    }
    // Staging for every plane that may be strided: a region that is not contiguous in the
    // slot, or any region of a slot bound to the caller's tensors (their strides are known
    // only when a run binds them).
    size_t used = 0;
    for (PlaneTransfer& x : st.transfers) {
      if (x.peer == rank_) continue;
      const SlotRef& local = x.local_is_src ? x.transfer->src : x.transfer->dst;
      const SlotDesc& desc = mine.slots[local.slot];
      const SlotMemory& m = slots_[local.slot];
      const SlotPlane& plane = m.planes[x.plane];
      const Geometry g = region_of(plane_geometry(shape, desc, plane, plane.offset_bytes),
                                   plane.heads_outer, local.region);
      const bool bound_to_caller = desc.binding != SlotBinding::kWorkspace && !m.staged;
      // One-sided transfers move in the remote slot's storage order (run_put, run_get): the
      // local side needs packing when it is not contiguous in that order.
      bool laid_out_alike = g.is_contiguous();
      if (is_one_sided_step(step.kind)) {
        const SlotRef& remote = x.local_is_src ? x.transfer->dst : x.transfer->src;
        x.remote = remote_geometry(x.peer, remote.slot, x.plane, remote.region);
        x.remote_order = x.remote.storage_order();
        x.scattered = pitched_groups(x.remote.permuted(x.remote_order)) > kMaxHeapTransfersPerPlane;
        laid_out_alike = g.permuted(x.remote_order).is_contiguous();
      }
      if (g.numel() == 0 || (!bound_to_caller && laid_out_alike)) continue;
      x.staging_offset = int64_t(used);
      used = align_up(used + g.bytes());
    }
    need[step.stream] = std::max(need[step.stream], used);
  }
  staging_bytes_ = 0;
  for (int s = 0; s < plan_.num_streams; ++s) {
    staging_offset_[s] = staging_bytes_;
    staging_bytes_ += need[s];
  }
}

void PlanExecutor::create_streams_and_comms() {
  const int S = plan_.num_streams;
  // A communicator for every stream that carries two-sided steps on any rank (the same on
  // every rank), split in stream order.
  std::vector<bool> two_sided(size_t(S), false);
  for (const RankPlan& rp : plan_.ranks) {
    for (const Step& st : rp.steps) {
      if (st.kind == StepKind::kSendRecv || st.kind == StepKind::kAllToAll)
        two_sided[st.stream] = true;
    }
  }
  comms_.resize(size_t(S));
  for (int s = 0; s < S; ++s) {
    if (!two_sided[s] || plan_.world_size == 1) continue;
    comms_[s] = ctx_.world->split(0, rank_, str("sp.", plan_.method, ".stream", s));
    TESSERA_CHECK(
        comms_[s] != nullptr && comms_[s]->size() == plan_.world_size && comms_[s]->rank() == rank_,
        ErrorCode::kInternal, "split of the world for stream ", s,
        " did not keep the world's ranks");
  }
  // Cross-stream dependencies become events.
  const RankPlan& mine = plan_.ranks[rank_];
  for (int i = 0; i < int(mine.steps.size()); ++i) {
    for (int d : mine.steps[i].deps) {
      if (mine.steps[d].stream == mine.steps[i].stream) continue;
      steps_[i].wait_events.push_back(d);
      steps_[d].record_event = true;
    }
  }
  if (!cuda_) return;
  streams_.resize(size_t(S));
  join_events_.resize(size_t(S));
  const Stream& like = ctx_.stream;
  for (int s = 1; s < S; ++s) {
    // Higher priority than compute (CUDA clamps -1 into its range): communication kernels get
    // SMs as soon as they are ready instead of queueing behind attention blocks.
    streams_[s] = Stream::create_cuda(ctx_.device.index, -1);
    join_events_[s] = Event::create(like);
  }
  fork_event_ = Event::create(like);
  step_events_.resize(mine.steps.size());
  for (int i = 0; i < int(mine.steps.size()); ++i) {
    if (steps_[i].record_event) step_events_[i] = Event::create(like);
  }
}

void PlanExecutor::enable_timeline(bool on) {
  timeline_ = on;
  if (!on || !step_begin_.empty()) return;
  const Stream like = cuda_ ? ctx_.stream : Stream::cpu();
  timeline_origin_ = Event::create(like, true);
  const size_t n = plan_.ranks[rank_].steps.size();
  for (size_t i = 0; i < n; ++i) {
    step_begin_.push_back(Event::create(like, true));
    step_end_.push_back(Event::create(like, true));
  }
}

std::vector<StepTiming> PlanExecutor::last_timeline() const {
  TESSERA_CHECK_ARG(timeline_, "last_timeline() on rank ", rank_,
                    ": expected enable_timeline(true) before the run");
  const RankPlan& mine = plan_.ranks[rank_];
  std::vector<StepTiming> out;
  for (int i = 0; i < int(mine.steps.size()); ++i) {
    // Fused compute steps were timed on the launch's last member.
    int timed = i;
    if (mine.steps[i].kind == StepKind::kCompute)
      timed = fused_.launches[size_t(fused_.launch_of_step[size_t(i)])].steps.back();
    const Event& begin = step_begin_[size_t(timed)];
    const Event& end = step_end_[size_t(timed)];
    end.synchronize(wait_timeout_ms(), "the end of a timed sequence-parallel run");
    out.push_back({i, mine.steps[i].stream, 1000.0 * begin.elapsed_ms_since(timeline_origin_),
                   1000.0 * end.elapsed_ms_since(timeline_origin_)});
  }
  return out;
}

void PlanExecutor::warm_up_connections() {
  // NCCL connects a pair of ranks lazily, at their first transfer, and that may block the
  // host until the peer gets there too. One exchange per communicator now, with every peer
  // and the largest size of the plan, makes every connection before the first run.
  if (!cuda_) return;
  for (int s = 0; s < plan_.num_streams; ++s) {
    if (!comms_[s]) continue;
    std::map<int, size_t> send_bytes, recv_bytes;
    for (const RankPlan& rp : plan_.ranks) {
      for (const Step& st : rp.steps) {
        if (st.stream != s || (st.kind != StepKind::kSendRecv && st.kind != StepKind::kAllToAll)) {
          continue;
        }
        for (const Transfer& t : st.transfers) {
          if (t.src_rank == t.dst_rank) continue;
          const size_t bytes = size_t(t.bytes);
          if (t.src_rank == rank_) send_bytes[t.dst_rank] = std::max(send_bytes[t.dst_rank], bytes);
          if (t.dst_rank == rank_) recv_bytes[t.src_rank] = std::max(recv_bytes[t.src_rank], bytes);
        }
      }
    }
    size_t total = 0;
    for (const auto& [peer, b] : send_bytes) total += align_up(b);
    for (const auto& [peer, b] : recv_bytes) total += align_up(b);
    if (total == 0) continue;
    Buffer scratch = Buffer::allocate(total, ctx_.device);
    auto* base = static_cast<std::byte*>(scratch.data());
    size_t off = 0;
    Communicator& comm = *comms_[s];
    const Stream& stream = streams_[s];
    comm.group_begin();
    for (const auto& [peer, b] : send_bytes) {
      comm.send(TensorView(base + off, DType::kU8, ctx_.device, {int64_t(b)}), peer, stream);
      off += align_up(b);
    }
    for (const auto& [peer, b] : recv_bytes) {
      comm.recv(TensorView(base + off, DType::kU8, ctx_.device, {int64_t(b)}), peer, stream);
      off += align_up(b);
    }
    comm.group_end();
    comm.synchronize(stream);
  }
}

// ---- binding ---------------------------------------------------------------------------------

void PlanExecutor::bind_run(const RunTensors& io) {
  const RankPlan& mine = plan_.ranks[rank_];
  for (size_t id = 0; id < mine.slots.size(); ++id) {
    const SlotDesc& desc = mine.slots[id];
    SlotMemory& m = slots_[id];
    if (desc.binding == SlotBinding::kWorkspace || m.staged) continue;
    auto bind = [&](int plane, const TensorView& t) {
      m.bound[plane].base = t.data();
      m.bound[plane].geometry = Geometry::of(t);
    };
    switch (desc.binding) {
      case SlotBinding::kInputQ:
        bind(0, io.q);
        break;
      case SlotBinding::kInputKV:
        bind(0, io.k);
        bind(1, io.v);
        break;
      case SlotBinding::kOutput:
        bind(0, io.o);
        break;
      case SlotBinding::kJointQ:
        bind(0, io.joint_q);
        break;
      case SlotBinding::kJointKV:
        bind(0, io.joint_k);
        bind(1, io.joint_v);
        break;
      case SlotBinding::kJointOutput:
        bind(0, io.joint_o);
        break;
      case SlotBinding::kWorkspace:
        break;
    }
  }
}

TensorView PlanExecutor::local_view(int slot, int plane, const Region& region) const {
  const PlaneBinding& b = slots_[slot].bound[plane];
  return region_of(b.geometry, b.heads_outer, region).view(b.base, device());
}

Geometry PlanExecutor::remote_geometry(int peer, int slot, int plane, const Region& region) const {
  const SlotDesc& desc = plan_.ranks[peer].slots[slot];
  const std::vector<SlotPlane> planes = slot_planes(plan_.shape, desc);
  const SlotPlane& p = planes[plane];
  return region_of(
      plane_geometry(plan_.shape, desc, p, int64_t(slots_[slot].symmetric_offset) + p.offset_bytes),
      p.heads_outer, region);
}

TensorView PlanExecutor::staging_view(const PlaneTransfer& x, const Geometry& like) const {
  TESSERA_CHECK(x.staging_offset >= 0, ErrorCode::kInternal, "rank ", rank_, ": transfer ",
                x.transfer->id, " plane ", x.plane, " needs packing but has no staging reserved");
  Geometry g = like;
  int64_t n = 1;
  for (int d = g.ndim - 1; d >= 0; --d) {
    g.stride[d] = n;
    n *= g.shape[d];
  }
  g.offset = 0;
  return g.view(static_cast<std::byte*>(private_buffer_.data()) + x.staging_offset, device());
}

const Stream& PlanExecutor::stream_for(int plan_stream, const Stream& caller) const {
  if (!cuda_ || plan_stream == kComputeStream) return caller;
  return streams_[plan_stream];
}

// ---- running ---------------------------------------------------------------------------------

void PlanExecutor::run(const RunTensors& io, const Stream& caller) {
  if (timeline_) timeline_origin_.record(caller);
  bind_run(io);
  const RankPlan& mine = plan_.ranks[rank_];
  // Staged inputs: peers read them from symmetric memory.
  for (size_t id = 0; id < mine.slots.size(); ++id) {
    const SlotMemory& m = slots_[id];
    const SlotBinding b = mine.slots[id].binding;
    if (!m.staged || !is_input(b)) continue;
    const Region all{0, mine.slots[id].rows, 0, mine.slots[id].heads};
    const TensorView first = b == SlotBinding::kInputQ    ? io.q
                             : b == SlotBinding::kInputKV ? io.k
                             : b == SlotBinding::kJointQ  ? io.joint_q
                                                          : io.joint_k;
    copy_strided(local_view(int(id), 0, all), first, caller);
    if (b == SlotBinding::kInputKV) copy_strided(local_view(int(id), 1, all), io.v, caller);
    if (b == SlotBinding::kJointKV) copy_strided(local_view(int(id), 1, all), io.joint_v, caller);
  }
  if (cuda_) {
    fork_event_.record(caller);
    for (int s = 1; s < plan_.num_streams; ++s) fork_event_.wait_on(streams_[s]);
  }
  for (const ScheduledAction& a : actions_) {
    const Stream& s = stream_for(mine.steps[a.step].stream, caller);
    if (a.end) {
      end_step(a.step, s);
    } else {
      start_step(a.step, s);
    }
  }
  if (cuda_) {
    for (int s = 1; s < plan_.num_streams; ++s) {
      join_events_[s].record(streams_[s]);
      join_events_[s].wait_on(caller);
    }
  }
  // Staged outputs: peers wrote into symmetric memory; the plan's last barrier ordered that.
  for (size_t id = 0; id < mine.slots.size(); ++id) {
    const SlotMemory& m = slots_[id];
    const SlotBinding b = mine.slots[id].binding;
    if (!m.staged || is_input(b)) continue;
    const Region all{0, mine.slots[id].rows, 0, mine.slots[id].heads};
    copy_strided(b == SlotBinding::kOutput ? io.o : io.joint_o, local_view(int(id), 0, all),
                 caller);
  }
}

void PlanExecutor::start_step(int index, const Stream& s) {
  const Step& step = plan_.ranks[rank_].steps[index];
  StepState& st = steps_[index];
  if (step.kind == StepKind::kCompute) {
    const ComputeLaunch& launch = fused_.launches[size_t(fused_.launch_of_step[size_t(index)])];
    if (launch.steps.back() != index) return;  // issued with its last member
    if (cuda_) {
      for (int member : launch.steps)
        for (int d : steps_[member].wait_events) step_events_[d].wait_on(s);
    }
    if (timeline_) step_begin_[index].record(s);
    run_compute_launch(fused_.launch_of_step[size_t(index)], s);
    if (timeline_) step_end_[index].record(s);
    if (cuda_) {
      for (int member : launch.steps)
        if (steps_[member].record_event) step_events_[member].record(s);
    }
    return;
  }
  if (cuda_) {
    for (int d : st.wait_events) step_events_[d].wait_on(s);
  }
  if (timeline_) step_begin_[index].record(s);
  switch (step.kind) {
    case StepKind::kCompute:
      break;
    case StepKind::kMerge:
      run_merge(step, s);
      break;
    case StepKind::kFinalize:
      // A folded finalize was done by its launch; its place keeps the waits and the event.
      if (fused_.finalize_folded_into[size_t(index)] < 0) run_finalize(step, s);
      break;
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
      post_sends(step, st, s);
      if (cuda_) receive(step, st, s);
      break;
    case StepKind::kPut:
      run_put(step, st, s);
      break;
    case StepKind::kGet:
      run_get(st, s);
      break;
    case StepKind::kSignal:
      ctx_.heap->signal(step.signal_rank, st.signal_slot, SignalOp::kAdd, 1, s);
      break;
    case StepKind::kWait:
      if (cuda_) signal_wait(step, st, s);
      break;
    case StepKind::kBarrier:
      barrier_arrive(step, st, s);
      if (cuda_) barrier_leave(step, st, s);
      break;
  }
  if (timeline_ && (cuda_ || !has_end_action(step.kind))) step_end_[index].record(s);
  if (cuda_ && st.record_event) step_events_[index].record(s);
}

void PlanExecutor::end_step(int index, const Stream& s) {
  if (cuda_) return;  // cuda enqueues a whole step at its start
  const Step& step = plan_.ranks[rank_].steps[index];
  const StepState& st = steps_[index];
  switch (step.kind) {
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
      receive(step, st, s);
      break;
    case StepKind::kWait:
      signal_wait(step, st, s);
      break;
    case StepKind::kBarrier:
      barrier_leave(step, st, s);
      break;
    default:
      break;
  }
  // The cpu timeline: a step with an end action ends when that action returns.
  if (timeline_ && has_end_action(step.kind)) step_end_[size_t(index)].record(s);
}

void PlanExecutor::run_compute_launch(int index, const Stream& s) {
  const ComputeLaunch& launch = fused_.launches[size_t(index)];
  const auto stride = [](const TokenRun& run) { return run.count > 1 ? run.stride : int64_t(1); };
  const RankPlan& mine = plan_.ranks[rank_];
  // Chunks first (jobs hold spans into launch_chunks_, which must not reallocate after).
  launch_chunks_.clear();
  for (const FusedJob& job : launch.jobs) {
    const ComputeSpec& first = mine.steps[size_t(job.first_step)].compute;
    for (const auto& [step, k] : job.chunks) {
      const ComputeSpec& c = mine.steps[size_t(step)].compute;
      const AttnOperand& kv = c.kv[size_t(k)];
      launch_chunks_.push_back(
          {local_view(kv.ref.slot, 0, kv.ref.region), local_view(kv.ref.slot, 1, kv.ref.region),
           attn::MaskSpec{c.causal, first.q.positions.start, stride(first.q.positions),
                          kv.positions.start, stride(kv.positions)}});
    }
  }
  launch_jobs_.clear();
  size_t next_chunk = 0;
  bool finalize_after = false;
  for (const FusedJob& job : launch.jobs) {
    const ComputeSpec& c = mine.steps[size_t(job.first_step)].compute;
    const attn::AttnState state{local_view(c.state.slot, 0, c.state.region),
                                local_view(c.state.slot, 1, c.state.region)};
    TensorView final_o;
    if (job.finalize_step >= 0) {
      const Step& fin = mine.steps[size_t(job.finalize_step)];
      final_o = local_view(fin.dst.slot, 0, fin.dst.region);
      // A caller's output laid out against the kernel's rules: finalize right after instead
      // (the same place in the plan's order).
      if (!attn::final_output_supported(final_o, s)) {
        final_o = TensorView();
        finalize_after = true;
      }
    }
    launch_jobs_.push_back(
        {local_view(c.q.ref.slot, 0, c.q.ref.region), state,
         std::span<const attn::KvChunk>(launch_chunks_.data() + next_chunk, job.chunks.size()),
         !c.accumulate, final_o});
    next_chunk += job.chunks.size();
  }
  attn::accumulate(launch_jobs_, softmax_scale_, s);
  if (!finalize_after) return;
  for (size_t j = 0; j < launch.jobs.size(); ++j) {
    if (launch.jobs[j].finalize_step >= 0 && launch_jobs_[j].final_o.empty())
      run_finalize(mine.steps[size_t(launch.jobs[j].finalize_step)], s);
  }
}

void PlanExecutor::run_merge(const Step& step, const Stream& s) {
  const TensorView dst_o = local_view(step.dst.slot, 0, step.dst.region);
  const TensorView dst_lse = local_view(step.dst.slot, 1, step.dst.region);
  const TensorView src_o = local_view(step.src.slot, 0, step.src.region);
  const TensorView src_lse = local_view(step.src.slot, 1, step.src.region);
  if (step.overwrite) {
    copy_strided(dst_o, src_o, s);
    copy_strided(dst_lse, src_lse, s);
    return;
  }
  const attn::Partial parts[2] = {{dst_o, dst_lse}, {src_o, src_lse}};
  attn::merge(parts, dst_o, dst_lse, s);
}

void PlanExecutor::run_finalize(const Step& step, const Stream& s) {
  const attn::AttnState state{local_view(step.src.slot, 0, step.src.region),
                              local_view(step.src.slot, 1, step.src.region)};
  attn::finalize(state, local_view(step.dst.slot, 0, step.dst.region), s);
}

void PlanExecutor::post_sends(const Step& step, const StepState& st, const Stream& s) {
  Communicator* comm = comms_[step.stream].get();
  // What this rank receives from other emulated machines crosses their NICs from now on
  // (without a heap there are no NIC clocks: the sockets' own speed).
  std::vector<int>& tokens = link_tokens_[size_t(&step - plan_.ranks[rank_].steps.data())];
  tokens.clear();
  for (const PlaneTransfer& x : st.transfers) {
    if (x.local_is_src || x.peer == rank_ || ctx_.heap == nullptr) continue;
    const Transfer& t = *x.transfer;
    const TensorView v = local_view(t.dst.slot, x.plane, t.dst.region);
    const size_t bytes = size_t(v.numel()) * dtype_size(v.dtype());
    if (bytes > 0) tokens.push_back(ctx_.heap->reserve_link(x.peer, bytes, s));
  }
  if (cuda_ && comm) comm->group_begin();
  for (const PlaneTransfer& x : st.transfers) {
    const Transfer& t = *x.transfer;
    if (x.peer == rank_) {  // a transfer to itself is a local copy
      if (x.local_is_src) {
        copy_strided(local_view(t.dst.slot, x.plane, t.dst.region),
                     local_view(t.src.slot, x.plane, t.src.region), s);
      }
      continue;
    }
    if (!x.local_is_src) continue;
    TensorView v = local_view(t.src.slot, x.plane, t.src.region);
    if (v.numel() == 0) continue;
    if (!v.is_contiguous()) {
      const TensorView packed = staging_view(x, Geometry::of(v));
      copy_strided(packed, v, s);
      v = packed;
    }
    comm->send(v, x.peer, s);
  }
  // cuda: receive() adds the receives to this group and closes it.
}

void PlanExecutor::receive(const Step& step, const StepState& st, const Stream& s) {
  Communicator* comm = comms_[step.stream].get();
  for (const PlaneTransfer& x : st.transfers) {
    if (x.local_is_src || x.peer == rank_) continue;
    const Transfer& t = *x.transfer;
    const TensorView v = local_view(t.dst.slot, x.plane, t.dst.region);
    if (v.numel() == 0) continue;
    comm->recv(v.is_contiguous() ? v : staging_view(x, Geometry::of(v)), x.peer, s);
  }
  if (cuda_ && comm) comm->group_end();
  // Held until the emulated link would have delivered it (NCCL's sockets may be faster).
  for (int token : link_tokens_[size_t(&step - plan_.ranks[rank_].steps.data())]) {
    ctx_.heap->hold_for_link(token, s);
  }
  for (const PlaneTransfer& x : st.transfers) {
    if (x.local_is_src || x.peer == rank_) continue;
    const Transfer& t = *x.transfer;
    const TensorView v = local_view(t.dst.slot, x.plane, t.dst.region);
    if (v.numel() == 0 || v.is_contiguous()) continue;
    copy_strided(v, staging_view(x, Geometry::of(v)), s);
  }
}

void PlanExecutor::run_put(const Step& step, const StepState& st, const Stream& s) {
  SymmetricHeap& heap = *ctx_.heap;
  for (const PlaneTransfer& x : st.transfers) {
    const Transfer& t = *x.transfer;
    TensorView src = local_view(t.src.slot, x.plane, t.src.region);
    if (src.numel() == 0) continue;
    if (x.peer == rank_) {
      copy_strided(local_view(t.dst.slot, x.plane, t.dst.region), src, s);
      continue;
    }
    // Issued in the remote slot's storage order (its runs are then as long as they get: a
    // head-major slot's head group is one run of rows), with the source packed in that order
    // when it is laid out otherwise.
    const Geometry dst = x.remote.permuted(x.remote_order);
    if (!src.is_contiguous() && x.scattered) {
      // Many scattered runs: store straight into the peer's memory where it is load/store
      // reachable (SM copies, which compete with the overlapped attention for SMs).
      if (void* peer_base = heap.peer_ptr(symmetric_, x.peer)) {
        copy_strided(x.remote.view(peer_base, device()), src, s);
        continue;
      }
    }
    TensorView from_view = Geometry::of(src).permuted(x.remote_order).view(src.data(), device());
    if (!from_view.is_contiguous()) {
      const TensorView packed = staging_view(x, dst);
      copy_strided(packed, from_view, s);
      from_view = packed;
    }
    // One transfer per group of equal runs at a constant pitch, not one per run: across
    // machines each transfer pays the link's latency (and a launch).
    const size_t es = dtype_size(dst.dtype);
    auto* from = static_cast<const std::byte*>(from_view.data());
    dst.for_each_pitched([&](int64_t offset, int64_t pitch, int64_t count, int64_t rows) {
      const size_t row_bytes = size_t(count) * es;
      if (rows == 1) {
        heap.put(symmetric_, size_t(offset) * es, from, row_bytes, x.peer, s);
      } else {
        heap.put_2d(symmetric_, size_t(offset) * es, size_t(pitch) * es, from, row_bytes, row_bytes,
                    size_t(rows), x.peer, s);
      }
      from += row_bytes * size_t(rows);
    });
  }
  if (step.signal_id >= 0) {
    std::set<int> raised;
    for (const Transfer& t : step.transfers) {
      if (raised.insert(t.dst_rank).second) {
        heap.signal(t.dst_rank, st.signal_slot, SignalOp::kAdd, 1, s);
      }
    }
  }
}

void PlanExecutor::run_get(const StepState& st, const Stream& s) {
  SymmetricHeap& heap = *ctx_.heap;
  for (const PlaneTransfer& x : st.transfers) {
    const Transfer& t = *x.transfer;
    const TensorView dst = local_view(t.dst.slot, x.plane, t.dst.region);
    if (dst.numel() == 0) continue;
    if (x.peer == rank_) {
      copy_strided(dst, local_view(t.src.slot, x.plane, t.src.region), s);
      continue;
    }
    // In the remote slot's storage order, as run_put; unpacked from staging when the
    // destination is laid out otherwise.
    const Geometry src = x.remote.permuted(x.remote_order);
    if (!dst.is_contiguous() && x.scattered) {
      if (void* peer_base = heap.peer_ptr(symmetric_, x.peer)) {
        copy_strided(dst, x.remote.view(peer_base, device()), s);
        continue;
      }
    }
    const TensorView into_view =
        Geometry::of(dst).permuted(x.remote_order).view(dst.data(), device());
    const bool unpack = !into_view.is_contiguous();
    const TensorView target = unpack ? staging_view(x, src) : into_view;
    const size_t es = dtype_size(src.dtype);
    auto* into = static_cast<std::byte*>(target.data());
    src.for_each_pitched([&](int64_t offset, int64_t pitch, int64_t count, int64_t rows) {
      const size_t row_bytes = size_t(count) * es;
      if (rows == 1) {
        heap.get(into, symmetric_, size_t(offset) * es, row_bytes, x.peer, s);
      } else {
        heap.get_2d(into, row_bytes, symmetric_, size_t(offset) * es, size_t(pitch) * es, row_bytes,
                    size_t(rows), x.peer, s);
      }
      into += row_bytes * size_t(rows);
    });
    if (unpack) copy_strided(into_view, target, s);
  }
}

void PlanExecutor::barrier_arrive(const Step& step, const StepState& st, const Stream& s) {
  if (step.group.size() <= 1) return;
  for (int m : step.group) {
    if (m != rank_) ctx_.heap->signal(m, st.signal_slot, SignalOp::kAdd, 1, s);
  }
}

void PlanExecutor::barrier_leave(const Step& step, const StepState& st, const Stream& s) {
  if (step.group.size() <= 1) return;
  const uint64_t others = uint64_t(step.group.size() - 1);
  int from = -1;
  if (others == 1) from = step.group[0] == rank_ ? step.group[1] : step.group[0];
  ctx_.heap->wait_signal(st.signal_slot, WaitCmp::kGe, others, from, s);
  // Back to zero for the next run (an early raise of the next barrier is kept: subtract).
  ctx_.heap->signal(rank_, st.signal_slot, SignalOp::kAdd, uint64_t(0) - others, s);
}

void PlanExecutor::signal_wait(const Step& step, const StepState& st, const Stream& s) {
  const uint64_t value = uint64_t(step.signal_value);
  ctx_.heap->wait_signal(st.signal_slot, WaitCmp::kGe, value, st.wait_from, s);
  ctx_.heap->signal(rank_, st.signal_slot, SignalOp::kAdd, uint64_t(0) - value, s);
}

}  // namespace tessera::sp::detail
