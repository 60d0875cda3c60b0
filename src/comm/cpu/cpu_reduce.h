// Element-wise reduction over the ranks' blocks for the cpu communicator.
//
//   out[i] = op(inputs[0][i], inputs[1][i], ..., inputs[n-1][i])   for i in [0, count)
//
// combined left to right (rank order), so every rank computing the same reduction gets the
// same bits. f32/f16/bf16 accumulate in float and f16/bf16 round once at the end; integers
// are exact (sums wrap modulo 2^bits). max/min propagate NaN. `out` must not alias an input
// other than inputs[0].
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

// True for the dtypes reduce_into supports (f32, f16, bf16, i32, i64, u64).
bool is_reducible(DType dtype);

void reduce_into(void* out, const std::vector<const void*>& inputs, int64_t count, DType dtype,
                 ReduceOp op);

}  // namespace tessera::cpu
