// The unfused pairs on the cuda backend (tp_backend.h): cuBLASLt for the GEMM, the world
// Communicator (NCCL) for the collective, cudaMemcpy2DAsync for the padding and repacking
// collectives need when M is not a multiple of P (and for AllToAll's column blocks).
#include <cuda_runtime.h>

#include <optional>
#include <vector>

#include "gemm/cuda/blaslt_gemm.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"
#include "tp/tp_backend.h"

namespace tessera::tp::detail {

namespace {

class UnfusedPair final : public CudaTpRunner {
 public:
  UnfusedPair(RankContext& ctx, const TpPlan& plan) : ctx_(ctx), r_(plan.request) {
    TESSERA_CHECK(ctx.world != nullptr, ErrorCode::kUnsupported, "rank ", ctx.rank,
                  ": the unfused ", tp_op_name(r_.op),
                  " needs the context's world communicator (NCCL) and this context has none "
                  "(loopback ranks share one GPU); expected a fused plan");
    p_ = r_.world_size;
    rank_ = ctx.rank;
    share_ = (r_.m + p_ - 1) / p_;
    padded_ = r_.m % p_ != 0;
    mine_ = row_range(r_.m, p_, rank_);
    in_elem_ = dtype_size(r_.dtype);
    out_elem_ = dtype_size(r_.out_dtype);
    gemm::GemmShape shape;
    shape.dtype = r_.dtype;
    shape.out_dtype = r_.out_dtype;
    shape.weight_nk = r_.weight_layout == WeightLayout::kNK;
    auto allocate = [&](size_t bytes) {
      return Buffer::allocate(std::max<size_t>(bytes, 1), ctx.device);
    };
    switch (r_.op) {
      case TpOp::kAllGatherGemm:
        // The GEMM runs on the gathered, padded rows and (padded) writes rows per source.
        shape.m = p_ * share_;
        shape.n = r_.n / p_;
        shape.k = r_.k;
        shape.bias = r_.has_bias;
        send_ = allocate(size_t(share_ * r_.k) * in_elem_);
        recv_ = allocate(size_t(p_ * share_ * r_.k) * in_elem_);
        if (padded_) product_ = allocate(size_t(p_ * share_ * shape.n) * out_elem_);
        break;
      case TpOp::kGemmReduceScatter:
        // The bias rides on rank 0's partial, so the sum holds it once.
        shape.m = r_.m;
        shape.n = r_.n;
        shape.k = r_.k / p_;
        shape.bias = r_.has_bias && rank_ == 0;
        product_ = allocate(size_t(r_.m * r_.n) * out_elem_);
        if (padded_) send_ = allocate(size_t(p_ * share_ * r_.n) * out_elem_);
        recv_ = allocate(size_t(share_ * r_.n) * out_elem_);
        break;
      case TpOp::kGemmAllToAll:
        shape.m = mine_.count;
        shape.n = r_.n;
        shape.k = r_.k;
        shape.bias = r_.has_bias;
        product_ = allocate(size_t(share_ * r_.n) * out_elem_);
        send_ = allocate(size_t(share_ * r_.n) * out_elem_);
        recv_ = allocate(size_t(share_ * r_.n) * out_elem_);
        break;
    }
    if (shape.m >= 1) gemm_.emplace(shape);
    workspace_ = allocate(gemm::BlasLtGemm::kWorkspaceBytes);
  }

  void run(const TensorView& a, const TensorView& b, const TensorView& bias, const TensorView& out,
           const Stream& stream) override {
    auto s = static_cast<cudaStream_t>(stream.cuda_stream());
    Communicator& comm = *ctx_.world;
    const void* bias_ptr = bias.empty() ? nullptr : bias.data();
    auto view = [&](const Buffer& buffer, DType dtype, int64_t elements) {
      return TensorView(buffer.data(), dtype, ctx_.device, {elements});
    };
    auto at = [](const void* base, size_t bytes) {
      return static_cast<const std::byte*>(base) + bytes;
    };
    auto at_mut = [](void* base, size_t bytes) { return static_cast<std::byte*>(base) + bytes; };
    phases_.start(s);
    switch (r_.op) {
      case TpOp::kAllGatherGemm: {
        const size_t row_bytes = size_t(r_.k) * in_elem_;
        const int64_t cols = r_.n / p_;
        if (padded_)
          TESSERA_CUDA_CHECK(cudaMemsetAsync(send_.data(), 0, size_t(share_) * row_bytes, s));
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(send_.data(), a.data(), size_t(mine_.count) * row_bytes,
                                           cudaMemcpyDeviceToDevice, s));
        comm.all_gather(view(send_, r_.dtype, share_ * r_.k),
                        view(recv_, r_.dtype, p_ * share_ * r_.k), stream);
        phases_.mark("all_gather", s);
        void* product = padded_ ? product_.data() : out.data();
        gemm_->run(recv_.data(), b.data(), bias_ptr, product, workspace_.data(), s);
        if (padded_) {
          const size_t row_out = size_t(cols) * out_elem_;
          for (int source = 0; source < p_; ++source) {
            const RowRange rows = row_range(r_.m, p_, source);
            if (rows.count == 0) continue;
            TESSERA_CUDA_CHECK(
                cudaMemcpyAsync(at_mut(out.data(), size_t(rows.begin) * row_out),
                                at(product_.data(), size_t(source * share_) * row_out),
                                size_t(rows.count) * row_out, cudaMemcpyDeviceToDevice, s));
          }
        }
        phases_.mark("gemm", s);
        break;
      }
      case TpOp::kGemmReduceScatter: {
        const size_t row_out = size_t(r_.n) * out_elem_;
        gemm_->run(a.data(), b.data(), bias_ptr, product_.data(), workspace_.data(), s);
        phases_.mark("gemm", s);
        const Buffer& send = padded_ ? send_ : product_;
        if (padded_) {
          TESSERA_CUDA_CHECK(cudaMemsetAsync(send_.data(), 0, size_t(p_ * share_) * row_out, s));
          for (int owner = 0; owner < p_; ++owner) {
            const RowRange rows = row_range(r_.m, p_, owner);
            TESSERA_CUDA_CHECK(
                cudaMemcpyAsync(at_mut(send_.data(), size_t(owner * share_) * row_out),
                                at(product_.data(), size_t(rows.begin) * row_out),
                                size_t(rows.count) * row_out, cudaMemcpyDeviceToDevice, s));
          }
        }
        comm.reduce_scatter(view(send, r_.out_dtype, p_ * share_ * r_.n),
                            view(recv_, r_.out_dtype, share_ * r_.n), ReduceOp::kSum, stream);
        phases_.mark("reduce_scatter", s);
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(out.data(), recv_.data(), size_t(mine_.count) * row_out,
                                           cudaMemcpyDeviceToDevice, s));
        break;
      }
      case TpOp::kGemmAllToAll: {
        const int64_t cols = r_.n / p_;
        const size_t block_row = size_t(cols) * out_elem_, full_row = size_t(r_.n) * out_elem_;
        if (gemm_) gemm_->run(a.data(), b.data(), bias_ptr, product_.data(), workspace_.data(), s);
        if (padded_)
          TESSERA_CUDA_CHECK(cudaMemsetAsync(send_.data(), 0, size_t(share_) * full_row, s));
        // Column block j of this rank's rows becomes block j of the send buffer.
        for (int owner = 0; owner < p_ && mine_.count > 0; ++owner) {
          TESSERA_CUDA_CHECK(
              cudaMemcpy2DAsync(at_mut(send_.data(), size_t(owner * share_) * block_row), block_row,
                                at(product_.data(), size_t(owner) * block_row), full_row, block_row,
                                size_t(mine_.count), cudaMemcpyDeviceToDevice, s));
        }
        comm.all_to_all(view(send_, r_.out_dtype, share_ * r_.n),
                        view(recv_, r_.out_dtype, share_ * r_.n), stream);
        for (int source = 0; source < p_; ++source) {
          const RowRange rows = row_range(r_.m, p_, source);
          if (rows.count == 0) continue;
          TESSERA_CUDA_CHECK(cudaMemcpyAsync(at_mut(out.data(), size_t(rows.begin) * block_row),
                                             at(recv_.data(), size_t(source * share_) * block_row),
                                             size_t(rows.count) * block_row,
                                             cudaMemcpyDeviceToDevice, s));
        }
        break;
      }
    }
  }

 private:
  RankContext& ctx_;
  TpRequest r_;
  int p_ = 1, rank_ = 0;
  int64_t share_ = 0;
  bool padded_ = false;
  RowRange mine_;
  size_t in_elem_ = 2, out_elem_ = 2;
  std::optional<gemm::BlasLtGemm> gemm_;
  Buffer send_, recv_, product_, workspace_;
};

}  // namespace

std::unique_ptr<CudaTpRunner> make_cuda_unfused_pair(RankContext& ctx, const TpPlan& plan) {
  return std::make_unique<UnfusedPair>(ctx, plan);
}

}  // namespace tessera::tp::detail
