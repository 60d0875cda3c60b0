// The unfused pairs TpOperation falls back to: the Communicator's collective (NCCL on cuda)
// and the GEMM one after the other, on shares padded to ceil(M / P) rows because collectives
// move equal blocks.
#include <cstring>

#include "operation_impl.h"
#include "tessera/core/error.h"

namespace tessera::tp {

void TpOperation::Impl::allocate_unfused() {
  const TpRequest& r = plan.request;
  const size_t in_elem = dtype_size(r.dtype), out_elem = dtype_size(r.out_dtype);
  const size_t share = size_t(max_share()), p = size_t(world);
  auto allocate = [&](size_t bytes) { return Buffer::allocate(std::max<size_t>(bytes, 1), ctx.device); };
  switch (r.op) {
    case TpOp::kAllGatherGemm:
      send = allocate(share * size_t(r.k) * in_elem);
      recv = allocate(p * share * size_t(r.k) * in_elem);
      break;
    case TpOp::kGemmReduceScatter:
      send = allocate(p * share * size_t(r.n) * out_elem);
      recv = allocate(share * size_t(r.n) * out_elem);
      break;
    case TpOp::kGemmAllToAll:
      product = allocate(share * size_t(r.n) * out_elem);
      send = allocate(share * size_t(r.n) * out_elem);
      recv = allocate(share * size_t(r.n) * out_elem);
      break;
  }
}

void TpOperation::Impl::run_unfused(const RunArgs& args) {
  const TpRequest& r = plan.request;
  Communicator& comm = *ctx.world;
  const Stream& s = args.stream;
  const size_t in_elem = dtype_size(r.dtype), out_elem = dtype_size(r.out_dtype);
  const int64_t share = max_share(), p = world;
  const RowRange mine = row_range(r.m, world, rank);
  const void* bias = args.bias.empty() ? nullptr : args.bias.data();
  auto bytes_at = [](const Buffer& buffer, size_t offset) {
    return static_cast<std::byte*>(buffer.data()) + offset;
  };
  auto view = [&](const Buffer& buffer, DType dtype, int64_t elements) {
    return TensorView(buffer.data(), dtype, ctx.device, {elements});
  };

  switch (r.op) {
    case TpOp::kAllGatherGemm: {
      const size_t row_bytes = size_t(r.k) * in_elem;
      std::memset(send.data(), 0, size_t(share) * row_bytes);
      std::memcpy(send.data(), args.a.data(), size_t(mine.count) * row_bytes);
      comm.all_gather(view(send, r.dtype, share * r.k), view(recv, r.dtype, p * share * r.k), s);
      const int64_t cols = r.n / p;
      for (int source = 0; source < p; ++source) {
        const RowRange rows = row_range(r.m, world, source);
        if (rows.count == 0) continue;
        const TileTask all{source, rows.begin, rows.count, 0, cols};
        compute_tile(bytes_at(recv, size_t(source * share) * row_bytes), r.k, all, args.b, bias,
                     static_cast<std::byte*>(args.out.data()) +
                         size_t(rows.begin * cols) * out_elem,
                     cols);
      }
      break;
    }
    case TpOp::kGemmReduceScatter: {
      // The partial product of every owner's rows, padded; the sum lands here; bias after.
      const int64_t n = r.n, lda = r.k / p;
      std::memset(send.data(), 0, size_t(p * share * n) * out_elem);
      for (int owner = 0; owner < p; ++owner) {
        const RowRange rows = row_range(r.m, world, owner);
        if (rows.count == 0) continue;
        const TileTask all{owner, rows.begin, rows.count, 0, n};
        compute_tile(static_cast<const std::byte*>(args.a.data()) +
                         size_t(rows.begin * lda) * in_elem,
                     lda, all, args.b, nullptr, bytes_at(send, size_t(owner * share * n) * out_elem),
                     n);
      }
      comm.reduce_scatter(view(send, r.out_dtype, p * share * n), view(recv, r.out_dtype, share * n),
                          ReduceOp::kSum, s);
      for (int64_t i = 0; i < mine.count * n; ++i) {
        float v = load_as_float(recv.data(), r.out_dtype, i);
        if (bias) v += load_as_float(bias, r.out_dtype, i % n);
        store_from_float(args.out.data(), r.out_dtype, i, v);
      }
      break;
    }
    case TpOp::kGemmAllToAll: {
      // This rank's rows times the whole weight, then column block j to rank j.
      const int64_t n = r.n, cols = n / p;
      if (mine.count > 0) {
        const TileTask all{rank, 0, mine.count, 0, n};
        compute_tile(args.a.data(), r.k, all, args.b, bias, product.data(), n);
      }
      std::memset(send.data(), 0, size_t(share * n) * out_elem);
      for (int owner = 0; owner < p; ++owner) {
        for (int64_t i = 0; i < mine.count; ++i) {
          std::memcpy(bytes_at(send, size_t((owner * share + i) * cols) * out_elem),
                      bytes_at(product, size_t(i * n + owner * cols) * out_elem),
                      size_t(cols) * out_elem);
        }
      }
      comm.all_to_all(view(send, r.out_dtype, share * n), view(recv, r.out_dtype, share * n), s);
      for (int source = 0; source < p; ++source) {
        const RowRange rows = row_range(r.m, world, source);
        std::memcpy(static_cast<std::byte*>(args.out.data()) + size_t(rows.begin * cols) * out_elem,
                    bytes_at(recv, size_t(source * share * cols) * out_elem),
                    size_t(rows.count * cols) * out_elem);
      }
      break;
    }
  }
}

}  // namespace tessera::tp
