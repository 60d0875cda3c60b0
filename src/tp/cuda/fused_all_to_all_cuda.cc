// Fused GEMM+AllToAll across the GPUs of one machine (tp_backend.h): Ulysses' input projection,
// each rank's sequence rows projected and every owner's column block (its heads) sent to it.
//   1. the GEMMs on the caller's stream, into local memory as the ReduceScatter does (a GEMM
//      storing over NVLink ran slower): weights [N, K] give each owner's column block as
//      contiguous weight rows, so one GEMM per owner in owner_order (rank+1, ..., this rank
//      last, straight into its own `received` rows); weights [K, N] do not, so one GEMM of all
//      N columns and a pitched copy per owner;
//   2. on a side stream, each owner's block by copy engine into this rank's rows of the owner's
//      `received` as soon as its GEMM is done (overlapping the next owner's GEMM), then the
//      owner's word for this source written by the stream. Before the copy the stream waits
//      (cuStreamWaitValue64) until the owner released the previous call's buffer;
//   3. the owner waits for every source's word (bounded, naming the source), joins the side
//      stream, copies `received` into the caller's output and releases it to every source.
// A release wait has no timeout of its own; an owner that does not release also sends nothing
// more, and this rank's wait for that owner's block (step 3) times out naming it.
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"
#include "tessera/runtime/cuda_check.h"
#include "tp/cuda/peer_words.h"
#include "tp/tp_backend.h"

namespace tessera::tp::detail {

namespace {

class FusedAllToAll final : public CudaTpRunner {
 public:
  FusedAllToAll(RankContext& ctx, const TpPlan& plan, const SymmetricBuffer& received,
                int signal_base)
      : ctx_(ctx),
        plan_(plan),
        words_(ctx, signal_base, num_signal_slots(plan), "fused gemm_a2a on cuda"),
        side_(Stream::create_cuda(ctx.device.index)),
        sent_(Event::create(side_)) {
    const TpRequest& r = plan.request;
    const int p = r.world_size;
    mine_ = row_range(r.m, p, ctx.rank);
    per_owner_ = r.weight_layout == WeightLayout::kNK;
    out_elem_ = dtype_size(r.out_dtype);
    for (int q = 0; q < p; ++q) {
      peer_received_.push_back(words_.buffer(received, q));
      computed_.push_back(Event::create(side_));
    }
    if (mine_.count > 0) {
      gemm::GemmShape shape;
      shape.m = mine_.count;
      shape.n = per_owner_ ? r.n / p : r.n;
      shape.k = r.k;
      shape.dtype = r.dtype;
      shape.out_dtype = r.out_dtype;
      shape.weight_nk = per_owner_;
      shape.bias = r.has_bias;
      gemm_ = std::make_unique<gemm::Gemm>(shape, ctx.device);
      product_ = Buffer::allocate(size_t(mine_.count * r.n) * out_elem_, ctx.device);
    }
  }

  void run(const TensorView& a, const TensorView& b, const TensorView& bias, const TensorView& out,
           const Stream& stream) override {
    const TpRequest& r = plan_.request;
    const int p = r.world_size, rank = ctx_.rank;
    const int64_t cols = r.n / p;
    const uint64_t epoch = ++epoch_;
    const auto s = static_cast<cudaStream_t>(stream.cuda_stream());
    const auto side = static_cast<cudaStream_t>(side_.cuda_stream());
    const size_t in_elem = dtype_size(r.dtype), block_row = size_t(cols) * out_elem_;
    const size_t block_bytes = size_t(mine_.count) * block_row;
    auto rows_at = [&](int owner) {  // this rank's rows of `owner`'s received buffer
      return peer_received_[size_t(owner)] + size_t(mine_.begin) * block_row;
    };
    // Where this rank's block for `owner` is computed: its own rows directly, the others'
    // in product_ (per owner: its block; all columns: the owner's column block, pitched).
    auto product_of = [&](int owner) -> std::byte* {
      auto* base = static_cast<std::byte*>(product_.data());
      return per_owner_ ? base + size_t(owner) * block_bytes : base + size_t(owner) * block_row;
    };
    const size_t product_pitch = per_owner_ ? block_row : size_t(r.n) * out_elem_;
    auto copy_block = [&](int owner, cudaStream_t on) {
      TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(rows_at(owner), block_row, product_of(owner),
                                           product_pitch, block_row, size_t(mine_.count),
                                           cudaMemcpyDeviceToDevice, on));
    };
    cuda_comm::CudaSymmetricHeap& heap = words_.heap();
    phases_.start(s);
    if (mine_.count > 0 && !per_owner_) {
      gemm_->run(a, b, bias,
                 TensorView(product_.data(), r.out_dtype, ctx_.device, {mine_.count, r.n}), stream,
                 ctx_.options.rank_sms);
      phases_.mark("gemm", s);
    }
    for (int owner : owner_order(plan_, rank)) {
      if (mine_.count > 0 && per_owner_) {
        const size_t weight_row = size_t(r.k) * in_elem;
        const TensorView b_rows(
            static_cast<std::byte*>(b.data()) + size_t(owner * cols) * weight_row, r.dtype,
            ctx_.device, {cols, r.k});
        const TensorView bias_cols = bias.empty()
                                         ? TensorView()
                                         : TensorView(static_cast<std::byte*>(bias.data()) +
                                                          size_t(owner * cols) * out_elem_,
                                                      r.out_dtype, ctx_.device, {cols});
        void* dst = owner == rank ? static_cast<void*>(rows_at(rank)) : product_of(owner);
        gemm_->run(a, b_rows, bias_cols,
                   TensorView(dst, r.out_dtype, ctx_.device, {mine_.count, cols}), stream,
                   ctx_.options.rank_sms);
        phases_.mark("gemm for", s, owner);
      }
      if (owner == rank) {
        if (mine_.count > 0 && !per_owner_) copy_block(rank, s);
        continue;
      }
      words_.send_to_owner(
          stream, side_, computed_[size_t(owner)], owner, released_signal(plan_, owner),
          count_signal(plan_, rank), epoch,
          [&](cudaStream_t on) {
            if (mine_.count > 0) copy_block(owner, on);
          },
          "fused gemm_a2a: an owner's word");
      phases_.mark("sent to", side, owner);
    }
    for (int source = 0; source < p; ++source) {
      if (source != rank)
        heap.wait_signal(words_.base() + count_signal(plan_, source), WaitCmp::kGe, epoch, source,
                         stream);
    }
    phases_.mark("blocks arrived", s);
    sent_.record(side_);  // the next call's GEMMs overwrite what the side stream copies
    sent_.wait_on(stream);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(out.data(), peer_received_[size_t(rank)],
                                       size_t(r.m) * block_row, cudaMemcpyDeviceToDevice, s));
    phases_.mark("copy out", s);
    words_.release_to_peers(s, released_signal(plan_, rank), epoch);
  }

 private:
  RankContext& ctx_;
  TpPlan plan_;
  PeerWords words_;
  Stream side_;                  // the copies to the owners
  Event sent_;                   // the caller's stream joins the side stream before the copy out
  std::vector<Event> computed_;  // per owner: its block is computed
  RowRange mine_;                // this rank's rows
  bool per_owner_ = true;        // weights [N, K]: a GEMM per owner's column block
  size_t out_elem_ = 2;
  std::vector<std::byte*> peer_received_;
  std::unique_ptr<gemm::Gemm> gemm_;  // none when this rank has no rows
  Buffer product_;  // this rank's rows of every column: [M_r, N] (or per owner [P][M_r, N/P])
  uint64_t epoch_ = 0;
};

}  // namespace

std::unique_ptr<CudaTpRunner> make_cuda_fused_all_to_all(RankContext& ctx, const TpPlan& plan,
                                                         const SymmetricBuffer& received,
                                                         int signal_base) {
  return std::make_unique<FusedAllToAll>(ctx, plan, received, signal_base);
}

}  // namespace tessera::tp::detail
