// Encodes the fused decode kernel's tensor maps (fused_tensor_maps.h).
#include "decode/cuda/fused_tensor_maps.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::detail {
namespace {

using EncodeTiled = decltype(&cuTensorMapEncodeTiled);

EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    TESSERA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                        cudaEnableDefault, &found));
    TESSERA_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr, ErrorCode::kCuda,
                  "fused decode: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A row-major [rows, cols] matrix of 2-byte elements, boxes of [box_rows, box_cols].
void encode(CUtensorMap* map, const void* data, CUtensorMapDataType type, int64_t rows,
            int64_t cols, int box_rows, int box_cols, CUtensorMapSwizzle swizzle, const char* what) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_fn()(map, type, 2, const_cast<void*>(data), dims, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK(r == CUDA_SUCCESS, ErrorCode::kCuda, "fused decode: encoding the TMA descriptor of ",
                what, " [", rows, ", ", cols, "] failed (CUresult ", int(r),
                "): pointers must be 16-byte aligned");
}

}  // namespace

void encode_fused_decode_tensor_maps(kernels::FusedDecodeParams& p, int64_t cache_rows,
                                     int batch_tile) {
  const auto type = p.element == kernels::Element::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  constexpr int D = kernels::kHeadDim;
  const int64_t q_rows = int64_t(p.num_heads) * D, kv_rows = int64_t(p.num_kv_heads) * D;
  const auto sw = CU_TENSOR_MAP_SWIZZLE_128B;
  encode(&p.tm_wq, p.wq, type, q_rows, p.hidden, 128, 64, sw, "weights.wq");
  encode(&p.tm_wk, p.wk, type, kv_rows, p.hidden, 128, 64, sw, "weights.wk");
  encode(&p.tm_wv, p.wv, type, kv_rows, p.hidden, 128, 64, sw, "weights.wv");
  encode(&p.tm_wo, p.wo, type, p.hidden, q_rows, 128, 64, sw, "weights.wo");
  encode(&p.tm_x, p.x, type, p.batch, p.hidden, batch_tile, 64, sw, "x");
  encode(&p.tm_k, p.k_cache, type, cache_rows, kv_rows, 16, D, CU_TENSOR_MAP_SWIZZLE_NONE, "cache.k");
  encode(&p.tm_v, p.v_cache, type, cache_rows, kv_rows, 16, D, CU_TENSOR_MAP_SWIZZLE_NONE, "cache.v");
}

}  // namespace tessera::decode::detail
