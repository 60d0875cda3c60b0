// TpLoopback on the cuda backend (tessera/tp/loopback.h): P ranks' AllGather+GEMM on one GPU.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/cuda/signal_kernels.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/gemm/gemm_config.h"
#include "tessera/runtime/cuda_check.h"
#include "tessera/tp/loopback.h"
#include "tp/ag_gemm_launch.h"

namespace tessera::tp {

namespace {

using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

// The driver's stream write, found at run time (the runtime library links no libcuda).
WriteValue64 stream_write_value64() {
  static const WriteValue64 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &p, 12000,
                                                           cudaEnableDefault, &found);
    TESSERA_CHECK(e == cudaSuccess && found == cudaDriverEntryPointSuccess && p != nullptr,
                  ErrorCode::kCuda, "cuStreamWriteValue64 not found in the CUDA driver");
    return reinterpret_cast<WriteValue64>(p);
  }();
  return fn;
}

gemm::kernels::ElementType element(DType d) {
  return d == DType::kBF16 ? gemm::kernels::ElementType::kBF16 : gemm::kernels::ElementType::kF16;
}

int tile_rows(gemm::GemmTile) {
  return 128;
}  // both cooperative tiles
int cluster_rows(gemm::GemmTile tile) {
  return tile == gemm::GemmTile::k128x256 ? 2 : 1;
}

int source_of_row(int64_t m, int p, int64_t row) {
  for (int s = 0; s < p; ++s) {
    const RowRange r = row_range(m, p, s);
    if (row < r.begin + r.count) return s;
  }
  return p - 1;
}

template <class T>
Buffer upload(const std::vector<T>& host, Device gpu) {
  Buffer b = Buffer::allocate(std::max<size_t>(host.size() * sizeof(T), 1), gpu);
  TESSERA_CUDA_CHECK(
      cudaMemcpy(b.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace

struct TpLoopback::Impl {
  TpPlan plan;
  Device gpu;
  int p = 1;
  int64_t m = 0, n = 0, k = 0;  // the per-rank GEMM: [M, K] x [N/P, K]^T
  size_t in_elem = 2, out_elem = 2;
  gemm::GemmConfig config;
  tp::kernels::AgGemmLauncher launcher;
  int sms = 0, rank_sms = 0;
  int m_tiles = 0;
  std::vector<Stream> compute, comm;
  std::vector<Buffer> gathered, words, order, workspace;
  Buffer tile_chunks, chunk_source, arrived;  // arrived: every word 1 (run_hooked_gemm)
  size_t workspace_bytes = 0;
  cuda_comm::WaitTimeoutLog log;
  uint64_t epoch = 0;
  int64_t timeout_ms = wait_timeout_ms();

  tp::kernels::ArrivalWait wait_for(int rank, const void* words_base, uint64_t expected) const {
    tp::kernels::ArrivalWait w;
    w.words = static_cast<const uint64_t*>(words_base);
    w.tile_chunks = static_cast<const int32_t*>(tile_chunks.data());
    w.chunk_source = static_cast<const int32_t*>(chunk_source.data());
    w.cluster_order = static_cast<const int32_t*>(order[size_t(rank)].data());
    w.m_tiles = m_tiles;
    w.expected = expected;
    w.timeout_ns = uint64_t(timeout_ms) * 1000000ull;
    w.rank = rank;
    w.record = log.device_record();
    w.claim = log.device_claim();
    return w;
  }

  void launch(int rank, const void* a, const void* b, const void* bias, void* out, int grid_sms,
              const tp::kernels::ArrivalWait& wait, const Stream& s) const {
    gemm::kernels::GemmProblem problem;
    problem.m = m;
    problem.n = n;
    problem.k = k;
    problem.a = a;
    problem.b = b;
    problem.bias = bias;
    problem.d = out;
    problem.device_sms = grid_sms;
    const cudaError_t e =
        launcher.launch(problem, config, wait, workspace[size_t(rank)].data(), workspace_bytes,
                        static_cast<cudaStream_t>(s.cuda_stream()));
    TESSERA_CHECK(e == cudaSuccess, ErrorCode::kCuda, "loopback AllGather+GEMM rank ", rank, " (",
                  gemm::gemm_config_name(config), "): ", cudaGetErrorString(e));
  }
};

TpLoopback::TpLoopback(const TpPlan& plan, Device gpu) : impl_(std::make_unique<Impl>()) {
  const TpRequest& r = plan.request;
  validate_plan(plan, 1 << 16);
  TESSERA_CHECK(gpu.is_cuda(), ErrorCode::kUnsupported, "TpLoopback: device = ", gpu.to_string(),
                ": expected a GPU");
  TESSERA_CHECK(r.op == TpOp::kAllGatherGemm, ErrorCode::kUnsupported,
                "TpLoopback: op = ", tp_op_name(r.op),
                ": only ag_gemm is built (the epilogue hook of gemm_rs and ", "gemm_a2a is not)");
  TESSERA_CHECK(plan.fused && plan.transfer == Transfer::kPush && plan.route == Route::kDirect &&
                    r.num_machines == 1,
                ErrorCode::kUnsupported,
                "TpLoopback: expected a fused plan, push, direct, one machine; got ",
                describe(plan));
  TESSERA_CHECK(r.weight_layout == WeightLayout::kNK, ErrorCode::kUnsupported,
                "TpLoopback: weight_layout = ", weight_layout_name(r.weight_layout),
                ": expected nk ([N, K])");
  TESSERA_CHECK((r.dtype == DType::kBF16 || r.dtype == DType::kF16) && r.out_dtype == r.dtype,
                ErrorCode::kUnsupported, "TpLoopback: dtype ", dtype_name(r.dtype), " -> ",
                dtype_name(r.out_dtype), ": expected bf16 or f16 in and the same out");
  TESSERA_CHECK(r.k % 8 == 0 && (r.n / r.world_size) % 8 == 0, ErrorCode::kUnsupported,
                "TpLoopback: K ", r.k, " and N/P ", r.n / r.world_size,
                ": expected multiples of 8 (TMA rows)");
  Impl& im = *impl_;
  im.plan = plan;
  im.gpu = gpu;
  im.p = r.world_size;
  im.m = r.m;
  im.n = r.n / r.world_size;
  im.k = r.k;
  im.in_elem = dtype_size(r.dtype);
  im.out_elem = dtype_size(r.out_dtype);
  TESSERA_CUDA_CHECK(cudaSetDevice(gpu.index));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&im.sms, cudaDevAttrMultiProcessorCount, gpu.index));
  im.rank_sms = std::max(1, im.sms / im.p - 1);
  // Whole tiles (a split would split a tile's wait): the rule's tile where it is cooperative.
  const gemm::GemmConfig rule = gemm::choose_gemm_config(im.m, im.n, im.k, im.rank_sms);
  im.config.tile =
      rule.tile == gemm::GemmTile::k128x256 ? gemm::GemmTile::k128x256 : gemm::GemmTile::k128x128;
  im.config.split = gemm::GemmSplit::kDataParallel;
  im.config.swizzle = 1;
  im.launcher = tp::kernels::find_ag_gemm_kernel(
      {element(r.dtype), element(r.out_dtype), true, im.config.tile});
  TESSERA_CHECK(bool(im.launcher), ErrorCode::kUnsupported, "TpLoopback: no AllGather+GEMM ",
                "kernel for ", dtype_name(r.dtype), " tile ", gemm::gemm_config_name(im.config),
                " in this build");

  // Row tiles -> the communication tiles (signal slots) their rows come from; slots are in row
  // order, so a tile needs a contiguous range of them.
  const int rows = tile_rows(im.config.tile), cluster = cluster_rows(im.config.tile);
  im.m_tiles = int((im.m + rows - 1) / rows);
  std::vector<int32_t> tile_chunks(size_t(2 * im.m_tiles));
  std::vector<int32_t> chunk_source(size_t(num_signal_slots(plan)), -1);
  for (int s = 0; s < im.p; ++s) {
    for (int64_t c = 0; c < num_chunks(plan, s); ++c)
      chunk_source[size_t(chunk_signal(plan, s, c))] = s;
  }
  auto slot_of_row = [&](int64_t row) {
    const int s = source_of_row(im.m, im.p, row);
    return chunk_signal(plan, s, chunk_of_row(plan, s, row));
  };
  for (int t = 0; t < im.m_tiles; ++t) {
    const int64_t first = int64_t(t) * rows, last = std::min(im.m, first + rows) - 1;
    tile_chunks[size_t(2 * t)] = slot_of_row(first);
    tile_chunks[size_t(2 * t + 1)] = slot_of_row(last) + 1;
  }
  im.tile_chunks = upload(tile_chunks, gpu);
  im.chunk_source = upload(chunk_source, gpu);
  im.arrived = upload(std::vector<uint64_t>(chunk_source.size(), 1), gpu);

  // Each rank's cluster order: by when the last communication tile a cluster needs arrives
  // (its source's place in gather_order, then the chunk), the local rows first.
  const int m_clusters = (im.m_tiles + cluster - 1) / cluster;
  im.workspace_bytes = [&] {
    gemm::kernels::GemmProblem problem;
    problem.m = im.m;
    problem.n = im.n;
    problem.k = im.k;
    problem.device_sms = im.sms;
    return im.launcher.workspace_bytes(problem, im.config);
  }();
  for (int rank = 0; rank < im.p; ++rank) {
    const std::vector<int> sources = gather_order(plan, rank);
    std::vector<int> place(size_t(im.p));
    for (size_t i = 0; i < sources.size(); ++i) place[size_t(sources[i])] = int(i);
    std::vector<std::pair<int64_t, int32_t>> keyed;
    for (int c = 0; c < m_clusters; ++c) {
      int64_t key = 0;
      for (int t = c * cluster; t < std::min(im.m_tiles, (c + 1) * cluster); ++t) {
        for (int32_t slot = tile_chunks[size_t(2 * t)]; slot < tile_chunks[size_t(2 * t + 1)];
             ++slot) {
          const int s = chunk_source[size_t(slot)];
          const int64_t chunk = slot - chunk_signal(plan, s, 0);
          key = std::max(key, int64_t(place[size_t(s)]) * (int64_t(1) << 32) + chunk);
        }
      }
      keyed.push_back({key, c});
    }
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<int32_t> order;
    for (const auto& kv : keyed) order.push_back(kv.second);
    im.order.push_back(upload(order, gpu));
    im.compute.push_back(Stream::create_cuda(gpu.index));
    im.comm.push_back(Stream::create_cuda(gpu.index));
    im.gathered.push_back(Buffer::allocate(size_t(im.m * im.k) * im.in_elem, gpu));
    im.words.push_back(upload(std::vector<uint64_t>(chunk_source.size(), 0), gpu));
    im.workspace.push_back(Buffer::allocate(std::max<size_t>(im.workspace_bytes, 1), gpu));
  }
}

TpLoopback::~TpLoopback() = default;
const TpPlan& TpLoopback::plan() const {
  return impl_->plan;
}
std::string TpLoopback::gemm_config() const {
  return gemm::gemm_config_name(impl_->config);
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
  const WriteValue64 write_value = stream_write_value64();
  for (size_t s = 0; s < p; ++s) {
    start.wait_on(im.comm[s]);
    start.wait_on(im.compute[s]);
  }
  // Each source pushes its rows to itself, then rank+1, rank+2, ...; a chunk, then its word.
  for (int s = 0; s < im.p; ++s) {
    const Stream& cs = im.comm[size_t(s)];
    const auto cu = static_cast<cudaStream_t>(cs.cuda_stream());
    const RowRange mine = row_range(im.m, im.p, s);
    for (int i = 0; i < im.p; ++i) {
      const int q = (s + i) % im.p;
      for (int64_t c = 0; c < num_chunks(im.plan, s); ++c) {
        const RowRange rows = chunk_rows(im.plan, s, c);
        const size_t row_bytes = size_t(im.k) * im.in_elem;
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(
            static_cast<std::byte*>(im.gathered[size_t(q)].data()) + size_t(rows.begin) * row_bytes,
            static_cast<const std::byte*>(a[size_t(s)].data()) +
                size_t(rows.begin - mine.begin) * row_bytes,
            size_t(rows.count) * row_bytes, cudaMemcpyDeviceToDevice, cu));
        auto* word =
            static_cast<uint64_t*>(im.words[size_t(q)].data()) + chunk_signal(im.plan, s, c);
        const CUresult e = write_value(reinterpret_cast<CUstream>(cu),
                                       reinterpret_cast<CUdeviceptr>(word), epoch, 0);
        TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda,
                      "loopback: cuStreamWriteValue64 for rank ", q, " from rank ", s,
                      ": CUresult ", int(e));
      }
    }
  }
  for (int rank = 0; rank < im.p; ++rank) {
    const size_t i = size_t(rank);
    im.launch(rank, im.gathered[i].data(), b[i].data(), r.has_bias ? bias[i].data() : nullptr,
              out[i].data(), im.rank_sms, im.wait_for(rank, im.words[i].data(), epoch),
              im.compute[i]);
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
  im.launch(rank, gathered.data(), b.data(), bias.empty() ? nullptr : bias.data(), out.data(),
            im.sms, im.wait_for(rank, im.arrived.data(), 1), stream);
}

}  // namespace tessera::tp
