// TpLoopback on the cuda backend (tessera/tp/loopback.h): P ranks' AllGather+GEMM on one GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "comm/cuda/signal_kernels.h"
#include "comm/cuda/stream_memops.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"
#include "tessera/tp/loopback.h"
#include "tp/cuda/ag_gemm_kernel.h"

namespace tessera::tp {

struct TpLoopback::Impl {
  TpPlan plan;
  Device gpu;
  int p = 1;
  int64_t m = 0, n = 0, k = 0;  // the per-rank GEMM: [M, K] x [N/P, K]^T
  size_t in_elem = 2;
  int sms = 0, rank_sms = 0;
  std::vector<detail::AgGemmKernel> kernels;  // one per rank
  std::vector<Stream> compute, comm;
  std::vector<Buffer> gathered, words;
  Buffer arrived;  // every word 1 (run_hooked_gemm)
  cuda_comm::WaitTimeoutLog log;
  uint64_t epoch = 0;
  int64_t timeout_ms = wait_timeout_ms();
};

TpLoopback::TpLoopback(const TpPlan& plan, Device gpu) : impl_(std::make_unique<Impl>()) {
  const TpRequest& r = plan.request;
  validate_plan(plan, 1 << 16);
  TESSERA_CHECK(gpu.is_cuda(), ErrorCode::kUnsupported, "TpLoopback: device = ", gpu.to_string(),
                ": expected a GPU");
  detail::check_ag_gemm_kernel_supports(plan, "TpLoopback");
  Impl& im = *impl_;
  im.plan = plan;
  im.gpu = gpu;
  im.p = r.world_size;
  im.m = r.m;
  im.n = r.n / r.world_size;
  im.k = r.k;
  im.in_elem = dtype_size(r.dtype);
  TESSERA_CUDA_CHECK(cudaSetDevice(gpu.index));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&im.sms, cudaDevAttrMultiProcessorCount, gpu.index));
  im.rank_sms = std::max(1, im.sms / im.p - 1);
  const size_t words = size_t(num_signal_slots(plan));
  im.arrived = Buffer::allocate(words * sizeof(uint64_t), gpu);
  const std::vector<uint64_t> ones(words, 1);
  TESSERA_CUDA_CHECK(cudaMemcpy(im.arrived.data(), ones.data(), words * sizeof(uint64_t),
                                cudaMemcpyHostToDevice));
  for (int rank = 0; rank < im.p; ++rank) {
    im.kernels.emplace_back(plan, rank, gpu, im.rank_sms);
    im.compute.push_back(Stream::create_cuda(gpu.index));
    im.comm.push_back(Stream::create_cuda(gpu.index));
    im.gathered.push_back(Buffer::allocate(size_t(im.m * im.k) * im.in_elem, gpu));
    im.words.push_back(Buffer::allocate(words * sizeof(uint64_t), gpu));
    TESSERA_CUDA_CHECK(cudaMemset(im.words.back().data(), 0, words * sizeof(uint64_t)));
  }
}

TpLoopback::~TpLoopback() = default;
const TpPlan& TpLoopback::plan() const {
  return impl_->plan;
}
std::string TpLoopback::gemm_config() const {
  return impl_->kernels.front().config_name();
}
void TpLoopback::set_timeout_ms(int64_t timeout_ms) {
  TESSERA_CHECK_ARG(timeout_ms >= 1, "timeout_ms = ", timeout_ms, ": expected >= 1");
  impl_->timeout_ms = timeout_ms;
}

void TpLoopback::run(std::span<const TensorView> a, std::span<const TensorView> b,
                     std::span<const TensorView> bias, std::span<const TensorView> out,
                     const Stream& stream) {
  Impl& im = *impl_;
  const TpRequest& r = im.plan.request;
  const size_t p = size_t(im.p);
  TESSERA_CHECK_ARG(a.size() == p && b.size() == p && out.size() == p && bias.size() == p,
                    "TpLoopback::run: a, b, bias, out hold ", a.size(), ", ", b.size(), ", ",
                    bias.size(), ", ", out.size(), " views: expected one per rank (", p, ")");
  for (size_t rank = 0; rank < p; ++rank) {
    const RankShapes sh = rank_shapes(r, int(rank));
    auto check = [&](const TensorView& t, int64_t rows, int64_t cols, DType dtype,
                     const char* what) {
      TESSERA_CHECK_ARG(t.numel() == rows * cols, what, "[", rank, "] = ", t.to_string(),
                        ": expected ", rows, " x ", cols, " elements");
      check_dtype(t, dtype, what);
      check_device(t, im.gpu, what);
      check_contiguous(t, what);
    };
    check(a[rank], sh.a_rows, sh.a_cols, r.dtype, "a");
    check(b[rank], sh.b_rows, sh.b_cols, r.dtype, "b");
    check(out[rank], sh.out_rows, sh.out_cols, r.out_dtype, "out");
    if (r.has_bias) {
      check(bias[rank], 1, sh.bias, r.out_dtype, "bias");
    } else {
      TESSERA_CHECK_ARG(bias[rank].empty(), "bias[", rank, "] = ", bias[rank].to_string(),
                        ": expected an empty view (the request has no bias)");
    }
  }
  const uint64_t epoch = ++im.epoch;
  Event start = Event::create(stream);
  start.record(stream);
  for (size_t s = 0; s < p; ++s) {
    start.wait_on(im.comm[s]);
    start.wait_on(im.compute[s]);
  }
  // Each source pushes its rows to itself, then rank+1, rank+2, ...; a chunk, then its word.
  const size_t row_bytes = size_t(im.k) * im.in_elem;
  for (int s = 0; s < im.p; ++s) {
    const auto cu = static_cast<cudaStream_t>(im.comm[size_t(s)].cuda_stream());
    const RowRange mine = row_range(im.m, im.p, s);
    for (int i = 0; i < im.p; ++i) {
      const int q = (s + i) % im.p;
      for (int64_t c = 0; c < num_chunks(im.plan, s); ++c) {
        const RowRange rows = chunk_rows(im.plan, s, c);
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(
            static_cast<std::byte*>(im.gathered[size_t(q)].data()) + size_t(rows.begin) * row_bytes,
            static_cast<const std::byte*>(a[size_t(s)].data()) +
                size_t(rows.begin - mine.begin) * row_bytes,
            size_t(rows.count) * row_bytes, cudaMemcpyDeviceToDevice, cu));
        cuda_comm::stream_write_value64(
            cu, static_cast<uint64_t*>(im.words[size_t(q)].data()) + chunk_signal(im.plan, s, c),
            epoch, "loopback: a rank's arrival word");
      }
    }
  }
  for (int rank = 0; rank < im.p; ++rank) {
    const size_t i = size_t(rank);
    im.kernels[i].launch(im.gathered[i].data(), b[i].data(), r.has_bias ? bias[i].data() : nullptr,
                         out[i].data(), static_cast<const uint64_t*>(im.words[i].data()), epoch,
                         im.timeout_ms, im.log, im.rank_sms,
                         static_cast<cudaStream_t>(im.compute[i].cuda_stream()));
  }
  for (size_t s = 0; s < p; ++s) {
    for (const Stream* side : {&im.comm[s], &im.compute[s]}) {
      Event done = Event::create(*side);
      done.record(*side);
      done.wait_on(stream);
    }
  }
}

void TpLoopback::run_hooked_gemm(int rank, const TensorView& gathered, const TensorView& b,
                                 const TensorView& bias, const TensorView& out,
                                 const Stream& stream) {
  Impl& im = *impl_;
  TESSERA_CHECK_ARG(rank >= 0 && rank < im.p, "rank = ", rank, ": expected 0 to ", im.p - 1);
  TESSERA_CHECK_ARG(gathered.numel() == im.m * im.k, "gathered = ", gathered.to_string(),
                    ": expected ", im.m, " x ", im.k, " elements");
  TESSERA_CHECK_ARG(b.numel() == im.n * im.k, "b = ", b.to_string(), ": expected ", im.n, " x ",
                    im.k, " elements");
  TESSERA_CHECK_ARG(out.numel() == im.m * im.n, "out = ", out.to_string(), ": expected ", im.m,
                    " x ", im.n, " elements");
  im.kernels[size_t(rank)].launch(gathered.data(), b.data(), bias.empty() ? nullptr : bias.data(),
                                  out.data(), static_cast<const uint64_t*>(im.arrived.data()), 1,
                                  im.timeout_ms, im.log, im.sms,
                                  static_cast<cudaStream_t>(stream.cuda_stream()));
}

}  // namespace tessera::tp
