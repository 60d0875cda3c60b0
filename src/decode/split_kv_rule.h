// How many splits the split-KV decode kernel (kernels/decode/unfused_launch.h) cuts each
// (sequence, KV head) into. Shared by the unfused attention block's plan and the Llama model's.
#pragma once

#include <cstdint>

namespace tessera::decode {

// A split keeps at least this many tokens (two of the tensor-core kernel's 64-token tiles).
inline constexpr int64_t kMinSplitTokens = 128;
// What a split costs beyond its tokens (its prologue, epilogue and share of the merge), in tokens.
inline constexpr int64_t kSplitOverheadTokens = 64;

// The split count for `batch` sequences of up to `max_context` tokens over `kv_heads` KV heads,
// where `ctas_per_wave` of the kernel's CTAs are resident at once (multiprocessors x CTAs each).
// A step takes about (waves of batch x kv_heads x splits CTAs) x (tokens a split + overhead):
// the count with the least of that wins, the smaller on a tie. On an H200 this is one full wave
// wherever it can be: with the cp.async kernel's 3 CTAs a multiprocessor 32 splits at batch 1,
// context 4096, 49 at 16384, 3 at batch 16 (docs/PERF.md, "Split-KV decode on tensor cores");
// with the TMA kernel's 4 pipelines (its "CTAs") 32, 66 and 4.
int split_kv_splits(int64_t batch, int64_t kv_heads, int64_t max_context, int64_t ctas_per_wave);

}  // namespace tessera::decode
