// Fused GEMM+ReduceScatter across the GPUs of one machine (tp_backend.h). Each source sends
// its partial of every owner's rows into the owner's `partials` block for that source (the
// symmetric heap), raises the owner's word for the source, and each owner sums the blocks in
// source order in float32 (kernels/tp/sum_partials.cu; bitwise the same every call).
//   1. the GEMMs on the caller's stream, storing into local memory (a GEMM storing over NVLink
//      ran 30 to 50% slower: 4 H200, `bench tp --phases`): split (each owner's share >=
//      kSplitRows rows), one GEMM per owner in owner_order (rank+1, rank+2, ..., this rank last,
//      into its own block), else one GEMM of all rows (split P ways a small GEMM would read the
//      weights P times);
//   2. on a side stream, each owner's rows by copy engine as soon as its GEMM is done, then the
//      owner's word written by the stream; the copies overlap the next GEMM. Before the copy to
//      an owner the stream waits (cuStreamWaitValue64) until the owner released the previous
//      call's block (no source overwrites a block whose owner still sums it), in place of a
//      heap barrier before the first copy;
//   3. the owner waits for every source's word (bounded, naming the source), joins the side
//      stream, sums, and releases its blocks to every source (its word at each,
//      released_signal, raised to the epoch by the stream after the sum).
// A release wait has no timeout of its own; an owner that does not release also sends nothing
// more, and this rank's wait for that owner's partial (step 3) times out naming it.
// A ReduceScatter epilogue hook inside the GEMM (Flux's per-tile stores) is not built.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"
#include "tessera/runtime/cuda_check.h"
#include "tp/cuda/peer_words.h"
#include "tp/sum_partials_launch.h"
#include "tp/tp_backend.h"

namespace tessera::tp::detail {

namespace {

constexpr int64_t kSplitRows = 512;

model::kernels::Element element(DType d) {
  switch (d) {
    case DType::kF32:
      return model::kernels::Element::kF32;
    case DType::kF16:
      return model::kernels::Element::kF16;
    default:
      return model::kernels::Element::kBF16;
  }
}

class FusedReduceScatter final : public CudaTpRunner {
 public:
  FusedReduceScatter(RankContext& ctx, const TpPlan& plan, const SymmetricBuffer& partials,
                     int signal_base)
      : ctx_(ctx),
        plan_(plan),
        partials_(partials),
        words_(ctx, signal_base, num_signal_slots(plan), "fused gemm_rs on cuda"),
        side_(Stream::create_cuda(ctx.device.index)),
        sent_(Event::create(side_)) {
    const TpRequest& r = plan.request;
    const int p = r.world_size;
    share_ = (r.m + p - 1) / p;
    out_elem_ = dtype_size(r.out_dtype);
    for (int q = 0; q < p; ++q) {
      peer_partials_.push_back(words_.buffer(partials_, q));
      computed_.push_back(Event::create(side_));
    }
    int64_t smallest = r.m;
    for (int o = 0; o < p; ++o) smallest = std::min(smallest, row_range(r.m, p, o).count);
    split_ = smallest >= kSplitRows;
    auto gemm_of = [&](int64_t rows) {
      gemm::GemmShape shape;
      shape.m = rows;
      shape.n = r.n;
      shape.k = r.k / p;
      shape.dtype = r.dtype;
      shape.out_dtype = r.out_dtype;
      shape.weight_nk = r.weight_layout == WeightLayout::kNK;
      return std::make_unique<gemm::Gemm>(shape, ctx.device);
    };
    if (split_) {
      for (int o = 0; o < p; ++o) {
        const int64_t rows = row_range(r.m, p, o).count;
        if (!gemms_.count(rows)) gemms_[rows] = gemm_of(rows);
      }
    } else {
      gemms_[r.m] = gemm_of(r.m);
    }
    product_ = Buffer::allocate(size_t(r.m * r.n) * out_elem_, ctx.device);
    kernels::preload_sum_partials();
  }

  void run(const TensorView& a, const TensorView& b, const TensorView& bias, const TensorView& out,
           const Stream& stream) override {
    const TpRequest& r = plan_.request;
    const int p = r.world_size, rank = ctx_.rank;
    const int64_t k_rank = r.k / p;
    const uint64_t epoch = ++epoch_;
    const auto s = static_cast<cudaStream_t>(stream.cuda_stream());
    const auto side = static_cast<cudaStream_t>(side_.cuda_stream());
    const size_t in_elem = dtype_size(r.dtype), row_out = size_t(r.n) * out_elem_;
    const size_t block_bytes = size_t(share_) * row_out;
    auto block_of = [&](int owner) {  // this rank's block in `owner`'s partials
      return peer_partials_[size_t(owner)] + size_t(rank) * block_bytes;
    };
    auto product_rows = [&](const RowRange& rows) {
      return static_cast<std::byte*>(product_.data()) + size_t(rows.begin) * row_out;
    };
    // `owner`'s rows, computed on the caller's stream, to the owner by the side stream.
    auto send = [&](int owner, const RowRange& rows, Event& computed) {
      words_.send_to_owner(
          stream, side_, computed, owner, released_signal(plan_, owner), count_signal(plan_, rank),
          epoch,
          [&](cudaStream_t on) {
            if (rows.count > 0)
              TESSERA_CUDA_CHECK(cudaMemcpyAsync(block_of(owner), product_rows(rows),
                                                 size_t(rows.count) * row_out,
                                                 cudaMemcpyDeviceToDevice, on));
          },
          "fused gemm_rs: an owner's word");
      phases_.mark("sent to", side, owner);
    };
    cuda_comm::CudaSymmetricHeap& heap = words_.heap();
    phases_.start(s);
    if (split_) {
      for (int owner : owner_order(plan_, rank)) {
        const RowRange rows = row_range(r.m, p, owner);
        if (rows.count > 0) {
          const TensorView a_rows(static_cast<std::byte*>(a.data()) +
                                      size_t(rows.begin * k_rank) * in_elem,
                                  r.dtype, ctx_.device, {rows.count, k_rank});
          void* dst = owner == rank ? static_cast<void*>(block_of(rank)) : product_rows(rows);
          gemms_.at(rows.count)
              ->run(a_rows, b, TensorView(),
                    TensorView(dst, r.out_dtype, ctx_.device, {rows.count, r.n}), stream,
                    ctx_.options.rank_sms);
          phases_.mark("gemm for", s, owner);
        }
        if (owner != rank) send(owner, rows, computed_[size_t(owner)]);
      }
    } else {
      gemms_.at(r.m)->run(a, b, TensorView(),
                          TensorView(product_.data(), r.out_dtype, ctx_.device, {r.m, r.n}), stream,
                          ctx_.options.rank_sms);
      phases_.mark("gemm", s);
      for (int owner : owner_order(plan_, rank)) {
        const RowRange rows = row_range(r.m, p, owner);
        if (owner != rank) {
          send(owner, rows, computed_[size_t(owner)]);
        } else if (rows.count > 0) {
          TESSERA_CUDA_CHECK(cudaMemcpyAsync(block_of(rank), product_rows(rows),
                                             size_t(rows.count) * row_out,
                                             cudaMemcpyDeviceToDevice, s));
        }
      }
    }
    for (int source = 0; source < p; ++source) {
      if (source != rank)
        heap.wait_signal(words_.base() + count_signal(plan_, source), WaitCmp::kGe, epoch, source,
                         stream);
    }
    phases_.mark("partials arrived", s);
    sent_.record(side_);  // the next call's GEMMs overwrite what the side stream copies
    sent_.wait_on(stream);
    kernels::SumPartialsParams sum;
    sum.element = element(r.out_dtype);
    sum.partials = peer_partials_[size_t(rank)];
    sum.sources = p;
    sum.block_stride = share_ * r.n;
    sum.rows = row_range(r.m, p, rank).count;
    sum.cols = r.n;
    sum.bias = bias.empty() ? nullptr : bias.data();
    sum.out = out.data();
    kernels::launch_sum_partials(sum, stream.cuda_stream());
    TESSERA_CUDA_CHECK(cudaGetLastError());
    phases_.mark("sum", s);
    words_.release_to_peers(s, released_signal(plan_, rank), epoch);
  }

 private:
  RankContext& ctx_;
  TpPlan plan_;
  SymmetricBuffer partials_;
  PeerWords words_;
  Stream side_;  // the copies to the owners
  Event sent_;    // the caller's stream joins the side stream before the sum
  std::vector<Event> computed_;  // per owner: its rows are computed
  int64_t share_ = 0;
  size_t out_elem_ = 2;
  bool split_ = false;
  std::vector<std::byte*> peer_partials_;
  std::map<int64_t, std::unique_ptr<gemm::Gemm>> gemms_;  // by row count
  Buffer product_;  // the GEMMs' rows for the other owners, [M, N]
  uint64_t epoch_ = 0;
};

}  // namespace

std::unique_ptr<CudaTpRunner> make_cuda_fused_reduce_scatter(RankContext& ctx, const TpPlan& plan,
                                                             const SymmetricBuffer& partials,
                                                             int signal_base) {
  return std::make_unique<FusedReduceScatter>(ctx, plan, partials, signal_base);
}

}  // namespace tessera::tp::detail
