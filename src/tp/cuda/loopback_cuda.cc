// TpLoopback on the cuda backend (tessera/tp/loopback.h): TpOperation's fused cuda path on P
// loopback ranks of one GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "comm/cuda/signal_kernels.h"
#include "tessera/comm/loopback.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"
#include "tessera/tp/loopback.h"
#include "tessera/tp/operation.h"
#include "tp/cuda/ag_gemm_kernel.h"
#include "tp/tp_backend.h"

namespace tessera::tp {

struct TpLoopback::Impl {
  TpPlan plan;
  Device gpu;
  std::optional<LoopbackRanks> ranks;
  std::vector<std::unique_ptr<TpOperation>> ops;  // one per rank, dropped before the ranks
  Event start;              // run(): the ranks start after the caller's stream's prior work
  std::vector<Event> done;  // run(): per rank, the caller's stream waits for it
  // ag_gemm: rank r's kernel on the whole GPU for run_hooked_gemm, made on first use.
  std::vector<std::optional<detail::AgGemmKernel>> hooked;
  Buffer arrived;  // every arrival word 1
  cuda_comm::WaitTimeoutLog log;
  int sms = 0;
  std::string config;
};

TpLoopback::TpLoopback(const TpPlan& plan, Device gpu) : impl_(std::make_unique<Impl>()) {
  TESSERA_CHECK(gpu.is_cuda(), ErrorCode::kUnsupported, "TpLoopback: device = ", gpu.to_string(),
                ": expected a GPU");
  Impl& im = *impl_;
  im.plan = plan;
  im.plan.fused = true;
  im.gpu = gpu;
  const TpRequest& r = im.plan.request;
  TESSERA_CHECK_ARG(r.num_machines == 1, "TpLoopback: plan.request.num_machines = ", r.num_machines,
                    ": expected 1 (loopback ranks share one GPU)");
  validate_plan(im.plan, 1 << 16);
  detail::check_cuda_fused_supported(im.plan);
  TESSERA_CUDA_CHECK(cudaSetDevice(gpu.index));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&im.sms, cudaDevAttrMultiProcessorCount, gpu.index));
  ContextOptions options;
  options.heap_bytes = fused_symmetric_bytes(im.plan) + (size_t(1) << 20);  // + alignment
  im.ranks.emplace(r.world_size, gpu, options);
  im.ops.resize(size_t(r.world_size));
  im.ranks->run_each([&](RankContext& ctx) {
    im.ops[size_t(ctx.rank)] = std::make_unique<TpOperation>(ctx, im.plan);
  });
  im.start = Event::create(im.ranks->context(0).stream);
  for (int rank = 0; rank < r.world_size; ++rank)
    im.done.push_back(Event::create(im.ranks->context(rank).stream));
  if (r.op == TpOp::kAllGatherGemm) {
    im.config = detail::AgGemmKernel(im.plan, 0, gpu, rank_sms()).config_name();
    im.hooked.resize(size_t(r.world_size));
    const size_t words = size_t(num_signal_slots(im.plan));
    im.arrived = Buffer::allocate(words * sizeof(uint64_t), gpu);
    const std::vector<uint64_t> ones(words, 1);
    TESSERA_CUDA_CHECK(cudaMemcpy(im.arrived.data(), ones.data(), words * sizeof(uint64_t),
                                  cudaMemcpyHostToDevice));
  }
}

TpLoopback::~TpLoopback() {
  if (!impl_) return;
  impl_->ops.clear();  // before the ranks whose heaps hold their buffers
}

const TpPlan& TpLoopback::plan() const {
  return impl_->plan;
}
int TpLoopback::rank_sms() const {
  return impl_->ranks->context(0).options.rank_sms;
}
std::string TpLoopback::gemm_config() const {
  return impl_->config;
}

void TpLoopback::run(std::span<const TensorView> a, std::span<const TensorView> b,
                     std::span<const TensorView> bias, std::span<const TensorView> out,
                     const Stream& stream) {
  Impl& im = *impl_;
  const TpRequest& r = im.plan.request;
  const size_t p = size_t(r.world_size);
  TESSERA_CHECK_ARG(a.size() == p && b.size() == p && out.size() == p && bias.size() == p,
                    "TpLoopback::run: a, b, bias, out hold ", a.size(), ", ", b.size(), ", ",
                    bias.size(), ", ", out.size(), " views: expected one per rank (", p, ")");
  // Each view to the shape TpOperation takes, its element count checked here so the message
  // names the rank.
  std::vector<TensorView> av, bv, biasv, outv;
  for (size_t rank = 0; rank < p; ++rank) {
    const RankShapes sh = rank_shapes(r, int(rank));
    auto shaped = [&](const TensorView& t, const std::vector<int64_t>& shape, DType dtype,
                      const char* what) {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      if (count == 0) {  // a rank without rows: an empty view, or one of no elements
        TESSERA_CHECK_ARG(t.empty() || t.numel() == 0, what, "[", rank, "] = ", t.to_string(),
                          ": expected no elements (this rank has no rows)");
        return TensorView();
      }
      TESSERA_CHECK_ARG(!t.empty() && t.numel() == count, what, "[", rank, "] = ", t.to_string(),
                        ": expected ", count, " elements");
      check_dtype(t, dtype, what);
      check_device(t, im.gpu, what);
      check_contiguous(t, what);
      return TensorView::contiguous(t.data(), dtype, im.gpu, shape.data(), int(shape.size()));
    };
    av.push_back(shaped(a[rank], {sh.a_rows, sh.a_cols}, r.dtype, "a"));
    bv.push_back(shaped(b[rank], {sh.b_rows, sh.b_cols}, r.dtype, "b"));
    outv.push_back(shaped(out[rank], {sh.out_rows, sh.out_cols}, r.out_dtype, "out"));
    if (r.has_bias) {
      biasv.push_back(shaped(bias[rank], {sh.bias}, r.out_dtype, "bias"));
    } else {
      TESSERA_CHECK_ARG(bias[rank].empty(), "bias[", rank, "] = ", bias[rank].to_string(),
                        ": expected an empty view (the request has no bias)");
      biasv.emplace_back();
    }
  }
  im.start.record(stream);
  for (size_t rank = 0; rank < p; ++rank) {
    const Stream& own = im.ranks->context(int(rank)).stream;
    im.start.wait_on(own);
    im.ops[rank]->run(av[rank], bv[rank], biasv[rank], outv[rank], own);
    im.done[rank].record(own);
    im.done[rank].wait_on(stream);
  }
}

void TpLoopback::run_hooked_gemm(int rank, const TensorView& gathered, const TensorView& b,
                                 const TensorView& bias, const TensorView& out,
                                 const Stream& stream) {
  Impl& im = *impl_;
  const TpRequest& r = im.plan.request;
  TESSERA_CHECK(r.op == TpOp::kAllGatherGemm, ErrorCode::kUnsupported,
                "TpLoopback::run_hooked_gemm: op = ", tp_op_name(r.op),
                ": only ag_gemm's hooks are inside its GEMM (the others' per-owner GEMMs, copies "
                "and sums are outside it: compare run() with plain GEMMs)");
  TESSERA_CHECK_ARG(rank >= 0 && rank < r.world_size, "rank = ", rank, ": expected 0 to ",
                    r.world_size - 1);
  const int64_t n = r.n / r.world_size;
  TESSERA_CHECK_ARG(gathered.numel() == r.m * r.k, "gathered = ", gathered.to_string(),
                    ": expected ", r.m, " x ", r.k, " elements");
  TESSERA_CHECK_ARG(b.numel() == n * r.k, "b = ", b.to_string(), ": expected ", n, " x ", r.k,
                    " elements");
  TESSERA_CHECK_ARG(out.numel() == r.m * n, "out = ", out.to_string(), ": expected ", r.m, " x ", n,
                    " elements");
  std::optional<detail::AgGemmKernel>& kernel = im.hooked[size_t(rank)];
  // Configured like the loopback rank's kernel, launched on the whole GPU.
  if (!kernel) kernel.emplace(im.plan, rank, im.gpu, rank_sms());
  kernel->launch(gathered.data(), b.data(), bias.empty() ? nullptr : bias.data(), out.data(),
                 static_cast<const uint64_t*>(im.arrived.data()), 1, wait_timeout_ms(), im.log,
                 im.sms, static_cast<cudaStream_t>(stream.cuda_stream()));
}

}  // namespace tessera::tp
