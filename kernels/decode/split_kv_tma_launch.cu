// launch_split_kv_tma (split_kv_tma_launch.h): the kernel's instantiations, its tensor maps and
// its persistent grid.
#include "decode/split_kv_tma_launch.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "common/smem_limit.h"
#include "decode/split_kv_tma.cuh"
#include "runtime/cuda/driver_function.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {
namespace {

namespace tma = split_kv_tma;

// Two consumer warps and three 32-token stages a pipeline, four pipelines a CTA (measured on an
// H200 against one to eight warps a pipeline, one to eight pipelines a CTA and two to six
// stages: docs/PERF.md, "Decode attention from a share of the SMs"); three pipelines where four
// merge areas do not fit (groups over 4 at head dimension 128).
constexpr int kWarps = 2, kStages = 3;

template <int D>
int pipes_for(int group) {
  return D == 64 || group <= 4 ? 4 : 3;
}

using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                            const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                            CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                            CUtensorMapFloatOOBfill);

// A cache's map: [rows, cols] of 16-bit elements, boxes {64, 16}, 128-byte swizzle. Encoded
// once per (address, shape, dtype) and kept: a map holds nothing but those, so a kept one is
// never stale, and a step after the first (or a graph capture) encodes nothing.
CUtensorMap cache_map(const void* base, int64_t rows, int64_t cols, Element element) {
  using Key = std::tuple<const void*, int64_t, int64_t, int>;
  static std::mutex mutex;
  static std::map<Key, CUtensorMap> maps;
  const Key key{base, rows, cols, int(element)};
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = maps.find(key); it != maps.end()) return it->second;
  static const Encode encode = driver_function<Encode>("cuTensorMapEncodeTiled");
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, tma::kBlock}, steps[2] = {1, 1};
  const CUresult e = encode(&map,
                            element == Element::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                            2, const_cast<void*>(base), dims, strides, box, steps,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda, "cuTensorMapEncodeTiled failed (CUresult ",
                int(e), ") for a KV cache of ", rows, " rows x ", cols, " elements");
  maps.emplace(key, map);
  return map;
}

template <typename T, int D, int kN, int kPipes>
void launch(const UnfusedDecodeParams& p, const tma::CacheMaps& maps, cudaStream_t s) {
  using G = tma::Geometry<D, kWarps, kStages, kPipes>;
  auto kernel = tma::split_kv_tma_kernel<T, D, kN, kWarps, kStages, kPipes>;
  // The limit for the largest group this form takes.
  static std::atomic<uint64_t> raised{0};
  const int device = ::tessera::kernels::raise_smem_limit_once(
      kernel, G::smem_bytes(D == 128 && kPipes == 4 ? 4 : kN * 8), raised);
  int sms = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t items = int64_t(p.splits) * p.num_kv_heads * p.batch;
  const int limit = p.sm_limit > 0 ? std::min(p.sm_limit, sms) : sms;
  const int grid = int(std::min<int64_t>(items, limit));
  kernel<<<grid, G::kThreads, G::smem_bytes(p.num_heads / p.num_kv_heads), s>>>(p, maps);
}

template <typename T>
void launch(const UnfusedDecodeParams& p, const tma::CacheMaps& maps, cudaStream_t s) {
  const int group = p.num_heads / p.num_kv_heads;
  const bool one_tile = split_kv_warp::head_tiles(group) == 1;
  if (p.head_dim == 64)
    return one_tile ? launch<T, 64, 1, 4>(p, maps, s) : launch<T, 64, 2, 4>(p, maps, s);
  if (pipes_for<128>(group) == 4) return launch<T, 128, 1, 4>(p, maps, s);
  one_tile ? launch<T, 128, 1, 3>(p, maps, s) : launch<T, 128, 2, 3>(p, maps, s);
}

}  // namespace

int split_kv_tma_pipes(int head_dim, int group) {
  if (group < 1 || group > 16) return 0;
  if (head_dim == 64) return pipes_for<64>(group);
  if (head_dim == 128) return pipes_for<128>(group);
  return 0;
}

bool launch_split_kv_tma(const UnfusedDecodeParams& p, cudaStream_t stream) {
  if (split_kv_tma_pipes(p.head_dim, p.num_heads / p.num_kv_heads) == 0) return false;
  const bool paged = p.page_table != nullptr;
  if (paged && p.page_size % tma::kBlock != 0) return false;
  auto aligned = [](const void* a) { return reinterpret_cast<uintptr_t>(a) % 16 == 0; };
  if (!aligned(p.k_cache) || !aligned(p.v_cache)) return false;
  const int64_t rows = paged ? p.num_pages * p.page_size : int64_t(p.batch) * p.context_stride;
  const int64_t cols = int64_t(p.num_kv_heads) * p.head_dim;
  // Box rows are int coordinates.
  if (rows <= 0 || rows > int64_t(INT32_MAX)) return false;
  const tma::CacheMaps maps{cache_map(p.k_cache, rows, cols, p.element),
                            cache_map(p.v_cache, rows, cols, p.element)};
  if (p.element == Element::kBF16)
    launch<__nv_bfloat16>(p, maps, stream);
  else
    launch<__half>(p, maps, stream);
  return true;
}

}  // namespace tessera::decode::kernels
