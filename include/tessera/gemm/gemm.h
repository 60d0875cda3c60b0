// Gemm: one dense GEMM, planned once for its shape and run on a stream; the building block of
// the tensor-parallel operations and the model runtime's linears.
//   out[M, N] = a[M, K] . b + bias[N]     a row-major; b [K, N] row-major or [N, K] row-major
//                                          (weight_nk: a Linear's weight); f32 accumulation
// Implementations:
//   kHopper    Tessera's sm90a kernel on CUTLASS 4.x collectives (TMA, WGMMA, warp-specialized
//              persistent; kernels/gemm/gemm_sm90.cuh): bf16 or f16 in, the same type out
//   kSkinny    Tessera's memory-bound kernel for a few rows (decode's projections; M <= 8,
//              weight [N, K], bf16 or f16 in, out of the same type or f32;
//              kernels/gemm/skinny_gemm_launch.h)
//   kCublasLt  cuBLASLt (bf16/f16/f32 in, bf16/f16/f32 out): the baseline and the fallback
//   kAuto      kSkinny where it takes the shape and the measured rule prefers it
//              (gemm_prefers_skinny); else kHopper where it has an instantiation for the shape's
//              types and the rule does not prefer cuBLASLt (gemm_prefers_cublaslt); else
//              kCublasLt
// On the cpu backend every implementation is the float32 reference (k ascending).
// run() neither allocates nor synchronizes, so it can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tessera/core/tensor_view.h"
#include "tessera/gemm/gemm_config.h"
#include "tessera/runtime/stream.h"

namespace tessera::gemm {

enum class GemmImpl : uint8_t { kAuto, kHopper, kCublasLt, kSkinny };
const char* gemm_impl_name(GemmImpl impl);  // "auto", "tessera", "cublaslt", "skinny"

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kBF16;      // a and b
  DType out_dtype = DType::kBF16;  // out and bias
  bool weight_nk = false;          // b is [N, K] (else [K, N])
  bool bias = false;
};

class Gemm {
 public:
  // Throws kInvalidArgument naming the field (sizes >= 1, dtypes bf16/f16/f32), kUnsupported
  // when the implementation cannot run the shape on `device` (kHopper: 16-bit types, out of the
  // same type, K and N multiples of 8; not in this build). kHopper runs `hopper_config`, or
  // the rule's pick (choose_gemm_config) without one.
  Gemm(const GemmShape& shape, Device device, GemmImpl impl = GemmImpl::kAuto,
       std::optional<GemmConfig> hopper_config = std::nullopt);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  const GemmShape& shape() const;
  GemmImpl impl() const;  // the one chosen (never kAuto)
  // kHopper on a GPU: the configuration it runs (gemm_config_name); "" otherwise.
  // kSkinny: "skinny".
  std::string config_name() const;
  // a [M, K], b as weight_nk says, bias [N] (an empty view without bias), out [M, N]; each
  // contiguous, of its dtype, on the plan's device; refused naming the argument otherwise.
  // max_sms > 0 keeps the GEMM on at most that many multiprocessors, leaving the others to a
  // kernel another stream runs beside it (the scheduler's NanoFlow partition): kHopper's
  // persistent grid is that size (at least one cluster, 2), cuBLASLt takes it as its SM count
  // target, kSkinny ignores it.
  // 0 (or more than the device has): all of them.
  void run(const TensorView& a, const TensorView& b, const TensorView& bias, const TensorView& out,
           const Stream& stream, int max_sms = 0) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::gemm
