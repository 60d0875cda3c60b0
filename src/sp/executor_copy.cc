// Strided copies of the sequence-parallel executor (see executor_copy.h).
#include "executor_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::sp::detail {

Geometry Geometry::contiguous(DType dtype, std::initializer_list<int64_t> shape, int64_t offset) {
  Geometry g;
  g.dtype = dtype;
  g.ndim = int(shape.size());
  TESSERA_CHECK(g.ndim >= 1 && g.ndim <= 4, ErrorCode::kInternal, "geometry of ", g.ndim,
                " dims: expected 1..4");
  int d = 0;
  for (int64_t s : shape) g.shape[d++] = s;
  int64_t stride = 1;
  for (d = g.ndim - 1; d >= 0; --d) {
    g.stride[d] = stride;
    stride *= g.shape[d];
  }
  g.offset = offset;
  return g;
}

Geometry Geometry::of(const TensorView& view) {
  Geometry g;
  g.dtype = view.dtype();
  g.ndim = view.ndim();
  TESSERA_CHECK(g.ndim >= 1 && g.ndim <= 4, ErrorCode::kInternal, "geometry of ", view.to_string(),
                ": expected 1..4 dims");
  for (int d = 0; d < g.ndim; ++d) {
    g.shape[d] = view.size(d);
    g.stride[d] = view.stride(d);
  }
  return g;
}

Geometry Geometry::slice(int dim, int64_t start, int64_t length) const {
  TESSERA_CHECK(dim >= 0 && dim < ndim && start >= 0 && length >= 0 && start + length <= shape[dim],
                ErrorCode::kInternal, "slice [", start, ", ", start + length, ") of dim ", dim,
                " outside ", shape[dim]);
  Geometry g = *this;
  g.offset += start * stride[dim];
  g.shape[dim] = length;
  return g;
}

int64_t Geometry::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool Geometry::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

Geometry Geometry::permuted(const std::array<int, 4>& order) const {
  Geometry g = *this;
  for (int d = 0; d < ndim; ++d) {
    TESSERA_CHECK(order[d] >= 0 && order[d] < ndim, ErrorCode::kInternal, "permutation of ", ndim,
                  " dims: entry ", d, " is ", order[d]);
    g.shape[d] = shape[order[d]];
    g.stride[d] = stride[order[d]];
  }
  return g;
}

std::array<int, 4> Geometry::storage_order() const {
  std::array<int, 4> order = {0, 1, 2, 3};
  // Size-1 dims have no meaningful stride: sort only the others, keep size-1 dims in place.
  std::vector<int> moving;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] != 1) moving.push_back(d);
  std::vector<int> sorted = moving;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](int a, int b) { return stride[a] > stride[b]; });
  for (size_t i = 0; i < moving.size(); ++i) order[size_t(moving[i])] = sorted[i];
  return order;
}

TensorView Geometry::view(void* base, Device device) const {
  void* data = static_cast<char*>(base) + offset * int64_t(dtype_size(dtype));
  switch (ndim) {
    case 1:
      return TensorView(data, dtype, device, {shape[0]}, {stride[0]});
    case 2:
      return TensorView(data, dtype, device, {shape[0], shape[1]}, {stride[0], stride[1]});
    case 3:
      return TensorView(data, dtype, device, {shape[0], shape[1], shape[2]},
                        {stride[0], stride[1], stride[2]});
    default:
      return TensorView(data, dtype, device, {shape[0], shape[1], shape[2], shape[3]},
                        {stride[0], stride[1], stride[2], stride[3]});
  }
}

namespace {

// Both sides as outer dims of contiguous rows (see the header).
StridedCopyDesc normalize(const TensorView& dst, const TensorView& src) {
  const int64_t es = int64_t(src.element_size());
  std::vector<int64_t> shape, ss, ds;
  for (int d = 0; d < src.ndim(); ++d) {
    if (src.size(d) == 1) continue;
    shape.push_back(src.size(d));
    ss.push_back(src.stride(d) * es);
    ds.push_back(dst.stride(d) * es);
  }
  StridedCopyDesc desc;
  desc.src = src.data();
  desc.dst = dst.data();
  desc.row_bytes = es;
  // Fold inner dims that are contiguous with the row on both sides into it.
  while (!shape.empty() && ss.back() == desc.row_bytes && ds.back() == desc.row_bytes) {
    desc.row_bytes *= shape.back();
    shape.pop_back();
    ss.pop_back();
    ds.pop_back();
  }
  // Merge neighbouring outer dims that are contiguous with each other on both sides.
  for (int d = int(shape.size()) - 1; d >= 1; --d) {
    if (ss[d - 1] == shape[d] * ss[d] && ds[d - 1] == shape[d] * ds[d]) {
      shape[d - 1] *= shape[d];
      ss[d - 1] = ss[d];
      ds[d - 1] = ds[d];
      shape.erase(shape.begin() + d);
      ss.erase(ss.begin() + d);
      ds.erase(ds.begin() + d);
    }
  }
  TESSERA_CHECK(shape.size() <= 4, ErrorCode::kInternal, "strided copy of ", src.to_string(),
                ": more than 4 outer dims");
  const int pad = 4 - int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    desc.shape[pad + d] = shape[d];
    desc.src_stride[pad + d] = ss[d];
    desc.dst_stride[pad + d] = ds[d];
  }
  return desc;
}

void cpu_copy(const StridedCopyDesc& c) {
  const auto* src = static_cast<const std::byte*>(c.src);
  auto* dst = static_cast<std::byte*>(c.dst);
  for (int64_t i0 = 0; i0 < c.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < c.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < c.shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < c.shape[3]; ++i3) {
          const int64_t so = i0 * c.src_stride[0] + i1 * c.src_stride[1] + i2 * c.src_stride[2] +
                             i3 * c.src_stride[3];
          const int64_t d_o = i0 * c.dst_stride[0] + i1 * c.dst_stride[1] + i2 * c.dst_stride[2] +
                              i3 * c.dst_stride[3];
          std::memcpy(dst + d_o, src + so, size_t(c.row_bytes));
        }
}

}  // namespace

void copy_strided(const TensorView& dst, const TensorView& src, const Stream& stream) {
  bool same = dst.ndim() == src.ndim() && dst.dtype() == src.dtype();
  for (int d = 0; same && d < src.ndim(); ++d) same = dst.size(d) == src.size(d);
  TESSERA_CHECK(same, ErrorCode::kInternal, "strided copy from ", src.to_string(), " to ",
                dst.to_string(), ": expected the same shape and dtype");
  if (src.numel() == 0) return;
  const StridedCopyDesc desc = normalize(dst, src);
  if (stream.backend() == Backend::kCuda) {
#ifdef TESSERA_WITH_CUDA
    cuda_copy_strided(desc, stream.cuda_stream());
    return;
#else
    throw_error(ErrorCode::kUnsupported, "strided copy on a cuda stream: no cuda backend built");
#endif
  }
  cpu_copy(desc);
}

}  // namespace tessera::sp::detail
