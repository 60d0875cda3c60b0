// The plain-C++ description of one attention launch, shared by the host glue
// (src/attn/cuda/attention_cuda.cc, compiled by the host compiler) and the kernel launchers
// (kernels/attn/inst/*.cu, compiled by nvcc). No CUDA or CuTe types here.
//
// A launch computes, for each job (one Q chunk) and each of its KV chunks, attention over the
// concatenation of the chunks, and either writes the normalized output and lse (forward) or
// folds the result into an f32 (O, lse) state (accumulate). See attention.h for semantics.
#pragma once

#include <cstdint>

#include "tessera/attn/attention.h"

namespace tessera::attn::kernels {

// kE4M3: FP8 inputs (forward only), bf16 output.
enum class ElementType : int { kBF16 = 0, kF16 = 1, kE4M3 = 2 };

// A [B, L, H, D] tensor: base pointer and element strides of B, L and H (D's is 1).
struct Bshd {
  const void* data = nullptr;
  int64_t len = 0;  // L
  int64_t stride_b = 0, stride_l = 0, stride_h = 0;
};

struct KvLaunchChunk {
  Bshd k, v;  // same len and strides layout rules; k.len == v.len
  // FP8: v is V's transposed copy (launch_fp8_transpose_v), [B, Hkv, D, v.len] with keys
  // contiguous; v.stride_l is then the stride of D and v.len the padded key count.
  MaskSpec mask;
};

struct JobLaunch {
  Bshd q;
  void* o = nullptr;  // forward: element type; accumulate: float state
  int64_t o_stride_b = 0, o_stride_l = 0, o_stride_h = 0;
  float* lse = nullptr;  // [B, Hq, Lq]; forward may pass nullptr
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_l = 0;
  int kv_begin = 0, kv_end = 0;  // range in LaunchDesc::kv
  bool fresh = false;            // accumulate: start from the empty state, do not read it
  // accumulate: when set, the normalized output in the element type goes here instead of the
  // state's O (AccumulateJob::final_o); the lse is written as always.
  void* final_o = nullptr;
  int64_t final_o_stride_b = 0, final_o_stride_l = 0, final_o_stride_h = 0;
};

struct LaunchDesc {
  ElementType element = ElementType::kBF16;
  int head_dim = 0;
  int64_t batch = 0, heads_q = 0, heads_kv = 0;
  float softmax_scale = 0;
  bool accumulate = false;
  int num_jobs = 0, num_kv = 0;
  // Varlen (forward only, one job and one chunk over packed [1, total, H, D] tensors): device
  // i32 arrays of batch + 1 cumulative lengths; batch is the number of sequences and
  // max_seqlen_q sizes the grid. nullptr: the batched layout.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t max_seqlen_q = 0;
  // FP8: per-head descales, device f32 [Hq], [Hkv], [Hkv] (fp8.h); nullptr otherwise.
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  JobLaunch jobs[kMaxJobsPerLaunch];
  KvLaunchChunk kv[kMaxChunksPerLaunch];
  void* cuda_stream = nullptr;
};

using AttentionLaunchFn = void (*)(const LaunchDesc& desc);

// Each kernels/attn/inst/*.cu registers its (element, head dim) launcher at load time; the
// CMake option TESSERA_KERNEL_FILTER may leave some out, and a missing one is kUnsupported.
// `variant` is "" for the production configuration; tuning builds (scripts/attn_dev.sh)
// register named alternatives that the TESSERA_ATTN_KERNEL parameter selects.
bool register_attention_kernel(ElementType element, int head_dim, AttentionLaunchFn fn,
                               const char* variant = "");
AttentionLaunchFn find_attention_kernel(ElementType element, int head_dim,
                                        const char* variant = "");

// ---- FP8: V's transposed copy (src/attn/cuda/attention_fp8_vt.cu) ---------------------------

// The FP8 PV product reads P straight from the S accumulator's registers, so slot s (0..31) of
// each 32-key K step multiplies key fp8_pv_key_of_slot(s) of that group (the derivation is at
// the kernel's convert_p_fp8): V's transposed copy holds its keys in this order.
constexpr int fp8_pv_key_of_slot(int s) {
  return 16 * (s / 16) + 8 * ((s % 4) / 2) + 2 * ((s % 16) / 4) + s % 2;
}

// Keys of the transposed copy: L rounded up to whole 128-key tiles (zeros past L).
constexpr int64_t fp8_vt_len(int64_t len) { return (len + 127) / 128 * 128; }

// vt [B, H, D, fp8_vt_len(L)] (contiguous, keys permuted by fp8_pv_key_of_slot within each
// group of 32, zeros past L) = V [B, L, H, D] e4m3 (Bshd strides), D 128 or 256.
void launch_fp8_transpose_v(const Bshd& v, int64_t batch, int64_t heads, int head_dim, void* vt,
                            void* cuda_stream);

// ---- merge / finalize / init_state (kernels/attn/attention_rows.cu) ----------------------

enum class FloatType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

struct RowTensor {  // [B, L, H, D] of any float type
  const void* data = nullptr;
  FloatType type = FloatType::kF32;
  int64_t stride_b = 0, stride_l = 0, stride_h = 0;
};
struct LseTensor {  // f32 [B, H, L]
  const float* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_l = 0;
};

inline constexpr int kMaxMergePartials = 64;

struct MergeDesc {
  int64_t batch = 0, len = 0, heads = 0, head_dim = 0;
  int num_partials = 0;
  RowTensor partial_o[kMaxMergePartials];
  LseTensor partial_lse[kMaxMergePartials];
  RowTensor out_o;    // written
  LseTensor out_lse;  // written unless data == nullptr
  void* cuda_stream = nullptr;
};

// out = merge(partials); with zero partials writes O = 0 and lse = -inf.
void launch_merge_rows(const MergeDesc& desc);
// o = 0 (f32), lse = -inf.
void launch_init_state(const RowTensor& o, const LseTensor& lse, int64_t batch, int64_t len,
                       int64_t heads, int64_t head_dim, void* cuda_stream);

}  // namespace tessera::attn::kernels
