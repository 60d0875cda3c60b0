// shard_view (weight_store.h): the tensor-parallel slice of one rank.
#include "tessera/core/error.h"
#include "tessera/model/weight_store.h"

namespace tessera::model {

TensorView shard_view(const TensorView& full, const TensorShard& shard, std::string_view what) {
  TESSERA_CHECK_ARG(shard.ranks >= 1, what, ": shard ranks = ", shard.ranks, ": expected >= 1");
  TESSERA_CHECK_ARG(shard.rank >= 0 && shard.rank < shard.ranks, what,
                    ": shard rank = ", shard.rank, ": expected 0 to ", shard.ranks - 1);
  if (shard.ranks == 1) return full;
  TESSERA_CHECK_ARG(shard.dim >= 0 && shard.dim < full.ndim(), what, " = ", full.to_string(),
                    ": shard dim = ", shard.dim, ": expected 0 to ", full.ndim() - 1);
  const int64_t n = full.size(shard.dim);
  TESSERA_CHECK_ARG(n % shard.ranks == 0, what, " = ", full.to_string(), ": dim ", shard.dim, " (",
                    n, ") does not split over ", shard.ranks,
                    " ranks: expected a multiple of the tensor-parallel size");
  const int64_t part = n / shard.ranks;
  return full.slice(shard.dim, shard.rank * part, part);
}

}  // namespace tessera::model
