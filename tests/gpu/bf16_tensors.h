// Host float rows to a bf16 device tensor and back, for the GPU tests of the DiT models.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/runtime/memory.h"

namespace tessera::testing {

// [rows, cols] of v rounded to bf16 on ctx's device (synchronized: v's bits are gone after).
inline Tensor upload_bf16(const std::vector<float>& v, int64_t rows, int64_t cols,
                          const RankContext& ctx) {
  Tensor t = Tensor::empty({rows, cols}, DType::kBF16, ctx.device);
  std::vector<uint16_t> bits;
  for (float x : v) bits.push_back(float_to_bf16_bits(x));
  copy_bytes(t.data(), bits.data(), bits.size() * 2, ctx.stream);
  ctx.stream.synchronize();
  return t;
}

inline std::vector<float> download_bf16(const Tensor& t, const RankContext& ctx) {
  std::vector<uint16_t> bits(size_t(t.view().numel()));
  copy_bytes(bits.data(), t.data(), bits.size() * 2, ctx.stream);
  ctx.stream.synchronize();
  std::vector<float> v;
  for (uint16_t b : bits) v.push_back(bf16_bits_to_float(b));
  return v;
}

}  // namespace tessera::testing
