#include "tp/cuda/ag_gemm_kernel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::tp::detail {

namespace {

gemm::kernels::ElementType element(DType d) {
  return d == DType::kBF16 ? gemm::kernels::ElementType::kBF16 : gemm::kernels::ElementType::kF16;
}

// Both cooperative tiles are 128 rows; 128x256 runs in clusters of two row tiles.
constexpr int kTileRows = 128;
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

void check_ag_gemm_kernel_supports(const TpPlan& plan, const char* who) {
  const TpRequest& r = plan.request;
  TESSERA_CHECK(r.op == TpOp::kAllGatherGemm, ErrorCode::kUnsupported, who,
                ": op = ", tp_op_name(r.op),
                ": only ag_gemm is built (the epilogue hook of gemm_rs and gemm_a2a is not)");
  TESSERA_CHECK(plan.fused && plan.transfer == Transfer::kPush && plan.route == Route::kDirect &&
                    r.num_machines == 1,
                ErrorCode::kUnsupported, who,
                ": expected a fused plan, push, direct, one machine; got ", describe(plan));
  TESSERA_CHECK(r.weight_layout == WeightLayout::kNK, ErrorCode::kUnsupported, who,
                ": weight_layout = ", weight_layout_name(r.weight_layout),
                ": expected nk ([N, K])");
  TESSERA_CHECK((r.dtype == DType::kBF16 || r.dtype == DType::kF16) && r.out_dtype == r.dtype,
                ErrorCode::kUnsupported, who, ": dtype ", dtype_name(r.dtype), " -> ",
                dtype_name(r.out_dtype), ": expected bf16 or f16 in and the same out");
  TESSERA_CHECK(r.k % 8 == 0 && (r.n / r.world_size) % 8 == 0, ErrorCode::kUnsupported, who,
                ": K ", r.k, " and N/P ", r.n / r.world_size,
                ": expected multiples of 8 (TMA rows)");
}

AgGemmKernel::AgGemmKernel(const TpPlan& plan, int rank, Device gpu, int config_sms)
    : rank_(rank) {
  const TpRequest& r = plan.request;
  const int p = r.world_size;
  m_ = r.m;
  n_ = r.n / p;
  k_ = r.k;
  const gemm::GemmConfig rule = gemm::choose_gemm_config(m_, n_, k_, config_sms);
  config_.tile =
      rule.tile == gemm::GemmTile::k128x256 ? gemm::GemmTile::k128x256 : gemm::GemmTile::k128x128;
  config_.split = gemm::GemmSplit::kDataParallel;
  config_.swizzle = 1;
  launcher_ = tp::kernels::find_ag_gemm_kernel(
      {element(r.dtype), element(r.out_dtype), true, config_.tile, {}});
  TESSERA_CHECK(bool(launcher_), ErrorCode::kUnsupported, "no AllGather+GEMM kernel for ",
                dtype_name(r.dtype), " tile ", gemm::gemm_config_name(config_), " in this build");

  // Row tiles -> the chunk slots their rows come from; slots are in row order, so a tile needs
  // a contiguous range of them.
  const int cluster = cluster_rows(config_.tile);
  m_tiles_ = int((m_ + kTileRows - 1) / kTileRows);
  arrival_words_ = num_signal_slots(plan);
  std::vector<int32_t> tile_chunks(size_t(2 * m_tiles_));
  std::vector<int32_t> chunk_source(size_t(arrival_words_), -1);
  for (int s = 0; s < p; ++s) {
    for (int64_t c = 0; c < num_chunks(plan, s); ++c)
      chunk_source[size_t(chunk_signal(plan, s, c))] = s;
  }
  auto slot_of_row = [&](int64_t row) {
    const int s = source_of_row(m_, p, row);
    return chunk_signal(plan, s, chunk_of_row(plan, s, row));
  };
  for (int t = 0; t < m_tiles_; ++t) {
    const int64_t first = int64_t(t) * kTileRows, last = std::min(m_, first + kTileRows) - 1;
    tile_chunks[size_t(2 * t)] = slot_of_row(first);
    tile_chunks[size_t(2 * t + 1)] = slot_of_row(last) + 1;
  }

  // Clusters ordered by when the last chunk they need arrives: its source's place in
  // gather_order, then the chunk (stable: row order among equals).
  const std::vector<int> sources = gather_order(plan, rank);
  std::vector<int> place(static_cast<size_t>(p));
  for (size_t i = 0; i < sources.size(); ++i) place[size_t(sources[i])] = int(i);
  const int m_clusters = (m_tiles_ + cluster - 1) / cluster;
  m_clusters_ = m_clusters;
  const int tile_cols = config_.tile == gemm::GemmTile::k128x256 ? 256 : 128;
  n_tiles_ = int((n_ + tile_cols - 1) / tile_cols);
  // A band: the row clusters of one communication chunk (source 0's share is the largest).
  band_clusters_ = int(std::max<int64_t>(1, chunk_rows(plan, 0, 0).count / (kTileRows * cluster)));
  std::vector<std::pair<int64_t, int32_t>> keyed;
  for (int c = 0; c < m_clusters; ++c) {
    int64_t key = 0;
    for (int t = c * cluster; t < std::min(m_tiles_, (c + 1) * cluster); ++t) {
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

  TESSERA_CUDA_CHECK(cudaSetDevice(gpu.index));
  tile_chunks_ = upload(tile_chunks, gpu);
  chunk_source_ = upload(chunk_source, gpu);
  cluster_order_ = upload(order, gpu);
  int device_sms = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, gpu.index));
  gemm::kernels::GemmProblem problem;
  problem.m = m_;
  problem.n = n_;
  problem.k = k_;
  problem.device_sms = device_sms;  // the largest grid a launch may ask for
  workspace_bytes_ = launcher_.workspace_bytes(problem, config_);
  workspace_ = Buffer::allocate(std::max<size_t>(workspace_bytes_, 1), gpu);
}

void AgGemmKernel::launch(const void* gathered, const void* b, const void* bias, void* out,
                          const uint64_t* words, uint64_t expected, int64_t timeout_ms,
                          const cuda_comm::WaitTimeoutLog& log, int grid_sms,
                          cudaStream_t stream) const {
  tp::kernels::ArrivalWait wait;
  wait.words = words;
  wait.tile_chunks = static_cast<const int32_t*>(tile_chunks_.data());
  wait.chunk_source = static_cast<const int32_t*>(chunk_source_.data());
  wait.cluster_order = static_cast<const int32_t*>(cluster_order_.data());
  wait.m_tiles = m_tiles_;
  wait.m_clusters = m_clusters_;
  wait.n_tiles = n_tiles_;
  wait.band_clusters = band_clusters_;
  wait.expected = expected;
  wait.timeout_ns = uint64_t(std::max<int64_t>(1, timeout_ms)) * 1000000ull;
  wait.rank = rank_;
  wait.record = log.device_record();
  wait.claim = log.device_claim();
  gemm::kernels::GemmProblem problem;
  problem.m = m_;
  problem.n = n_;
  problem.k = k_;
  problem.a = gathered;
  problem.b = b;
  problem.bias = bias;
  problem.d = out;
  problem.device_sms = grid_sms;
  const cudaError_t e =
      launcher_.launch(problem, config_, wait, workspace_.data(), workspace_bytes_, stream);
  TESSERA_CHECK(e == cudaSuccess, ErrorCode::kCuda, "AllGather+GEMM rank ", rank_, " (",
                config_name(), "): ", cudaGetErrorString(e));
}

}  // namespace tessera::tp::detail
