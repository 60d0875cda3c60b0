// Strided copies for the sequence-parallel executor: packing a region of a slot (rows x heads
// of a [B, rows, heads, D] plane, or heads x rows of the [B, heads, rows] lse plane) into a
// contiguous buffer, unpacking it, and copying between two strided views of one shape.
//
// A Geometry is a strided view without a base pointer (shape, strides and offset in elements),
// so the same description addresses local memory, a peer's memory through a peer pointer, or
// byte offsets inside a peer's symmetric buffer for SymmetricHeap put/get.
//
// copy_strided() normalizes both sides to at most 4 outer dims of contiguous byte runs (it
// merges dims that are contiguous on both sides, so a region spanning all heads copies whole
// rows), then runs loops of memcpy on cpu streams or one kernel on cuda streams (in
// src/sp/cuda/executor_copy.cu: no allocation, no synchronization).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"

namespace tessera::sp::detail {

struct Geometry {
  DType dtype = DType::kF32;
  int ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};  // elements
  int64_t offset = 0;                // elements from the base

  // A contiguous (row-major) geometry.
  static Geometry contiguous(DType dtype, std::initializer_list<int64_t> shape, int64_t offset = 0);
  // The geometry of an existing view (offset 0 from view.data()).
  static Geometry of(const TensorView& view);

  Geometry slice(int dim, int64_t start, int64_t length) const;
  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  // The same elements with dims reordered: dim i of the result is dim order[i] of this one.
  Geometry permuted(const std::array<int, 4>& order) const;
  // Dims from the largest stride to the smallest (ties and size-1 dims keep their place): the
  // order in which this geometry's memory is laid out. A head-major slot [B, rows, heads, D]
  // gives {0, 2, 1, 3}.
  std::array<int, 4> storage_order() const;
  // The view of this geometry over memory starting at `base`.
  TensorView view(void* base, Device device) const;
  // Calls fn(element offset from the base, element count) for each maximal contiguous run,
  // in row-major order of the elements.
  template <typename Fn>
  void for_each_run(Fn&& fn) const {
    if (numel() == 0) return;
    // The longest contiguous suffix of dims is one run; iterate over the dims before it.
    int inner = ndim;
    int64_t run = 1;
    while (inner > 0 && (shape[inner - 1] == 1 || stride[inner - 1] == run)) {
      run *= shape[inner - 1];
      --inner;
    }
    int64_t idx[4] = {0, 0, 0, 0};
    while (true) {
      int64_t off = offset;
      for (int d = 0; d < inner; ++d) off += idx[d] * stride[d];
      fn(off, run);
      int d = inner - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }
  // Calls fn(element offset of the first run, pitch in elements, run length in elements,
  // rows) for the fewest groups of runs that are `rows` equal runs at a constant pitch, in
  // row-major order (the runs of for_each_run, grouped). The innermost outer dim with more than
  // one index gives the rows; outer dims before it join while their stride continues the
  // pitch (stride = pitch * rows so far); the rest are iterated. A pitch below the run length
  // (overlapping rows) is not a 2-D transfer: such runs come one by one (rows = 1).
  template <typename Fn>
  void for_each_pitched(Fn&& fn) const {
    if (numel() == 0) return;
    int inner = ndim;
    int64_t run = 1;
    while (inner > 0 && (shape[inner - 1] == 1 || stride[inner - 1] == run)) {
      run *= shape[inner - 1];
      --inner;
    }
    if (inner == 0) {
      fn(offset, run, run, int64_t(1));
      return;
    }
    // Dims [row_begin, inner) fold into rows at `pitch` (inner - 1 has shape > 1: it did not
    // join the run).
    const int64_t pitch = stride[inner - 1];
    int64_t rows = shape[inner - 1];
    int row_begin = inner - 1;
    while (row_begin > 0 && (shape[row_begin - 1] == 1 || stride[row_begin - 1] == pitch * rows)) {
      rows *= shape[row_begin - 1];
      --row_begin;
    }
    if (pitch < run) {
      for_each_run([&](int64_t off, int64_t count) { fn(off, count, count, int64_t(1)); });
      return;
    }
    int64_t idx[4] = {0, 0, 0, 0};
    while (true) {
      int64_t off = offset;
      for (int d = 0; d < row_begin; ++d) off += idx[d] * stride[d];
      fn(off, pitch, run, rows);
      int d = row_begin - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }
};

// dst <- src (same shape and dtype; any strides). Both views must be on the stream's device
// (cuda: the device may also load/store peer memory through a peer pointer).
void copy_strided(const TensorView& dst, const TensorView& src, const Stream& stream);

// What the cuda kernel copies: outer_count x row_bytes, normalized on the host.
struct StridedCopyDesc {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t shape[4] = {1, 1, 1, 1};       // outer dims (unused ones are 1)
  int64_t src_stride[4] = {0, 0, 0, 0};  // bytes
  int64_t dst_stride[4] = {0, 0, 0, 0};  // bytes
  int64_t row_bytes = 0;                 // contiguous bytes per outer index
};

#ifdef TESSERA_WITH_CUDA
void cuda_copy_strided(const StridedCopyDesc& desc, void* cuda_stream);
#endif

}  // namespace tessera::sp::detail
