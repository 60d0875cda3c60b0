#include "decode/split_kv_rule.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::decode {

int split_kv_splits(int64_t batch, int64_t kv_heads, int64_t max_context, int64_t ctas_per_wave) {
  TESSERA_CHECK(batch >= 1 && kv_heads >= 1 && max_context >= 1 && ctas_per_wave >= 1,
                ErrorCode::kInvalidArgument, "split_kv_splits: batch ", batch, ", kv_heads ",
                kv_heads, ", max_context ", max_context, ", ctas_per_wave ", ctas_per_wave,
                ": expected every one >= 1");
  const int64_t most = std::max<int64_t>(1, max_context / kMinSplitTokens);
  int64_t best = 1, best_cost = -1;
  for (int64_t s = 1; s <= most; ++s) {
    const int64_t waves = (batch * kv_heads * s + ctas_per_wave - 1) / ctas_per_wave;
    const int64_t cost = waves * ((max_context + s - 1) / s + kSplitOverheadTokens);
    if (best_cost < 0 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return int(best);
}

}  // namespace tessera::decode
