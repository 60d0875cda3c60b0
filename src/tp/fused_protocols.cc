// The fused protocols of TpOperation on the symmetric heap (operation.h): AllGather+GEMM,
// GEMM+ReduceScatter and GEMM+AllToAll, tile by tile in tile_schedule()'s order. On the cpu
// backend the stream runs inline, so a rank sends everything it sends before its first wait:
// no rank waits on a peer that is itself waiting, whatever the order.
#include <cstring>

#include "operation_impl.h"
#include "tessera/core/error.h"

namespace tessera::tp {

namespace {

int wrap(int index, int size) { return ((index % size) + size) % size; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tiles of a [rows, cols] block (what a source sends an owner).
int64_t block_tiles(const TpPlan& plan, int64_t rows, int64_t cols) {
  return ceil_div(rows, plan.tile_m) * ceil_div(cols, plan.tile_n);
}

}  // namespace

void TpOperation::Impl::run_fused_all_gather(const RunArgs& args) {
  const TpRequest& r = plan.request;
  SymmetricHeap& heap = *ctx.heap;
  const Stream& s = args.stream;
  const size_t row_bytes = size_t(r.k) * dtype_size(r.dtype);
  const RowRange mine = row_range(r.m, world, rank);
  auto* gathered_rows = static_cast<std::byte*>(gathered.local);
  const auto* a_rows = static_cast<const std::byte*>(args.a.data());
  const int g = gpus_per_machine, machines = r.num_machines;
  const int machine = rank / g, local = rank % g;
  // The rank that raises this rank's signal for each source's chunks.
  std::vector<int> sender(world);
  for (int source = 0; source < world; ++source) sender[source] = source;

  // Puts chunk c of `source`'s rows, whose first row is at `first_row` here, to `peer`.
  auto push_chunk = [&](int source, int64_t c, const std::byte* first_row, int peer) {
    const RowRange rows = chunk_rows(plan, source, c);
    const RowRange share = row_range(r.m, world, source);
    heap.put_with_signal(gathered, size_t(rows.begin) * row_bytes,
                         first_row + size_t(rows.begin - share.begin) * row_bytes,
                         size_t(rows.count) * row_bytes, peer, slot(chunk_signal(plan, source, c)),
                         SignalOp::kSet, 1, s);
  };
  auto gathered_share = [&](int source) {
    return gathered_rows + size_t(row_range(r.m, world, source).begin) * row_bytes;
  };

  heap.barrier(s);
  if (plan.transfer == Transfer::kPull) {
    // Own rows into the gather buffer, then tell every peer they are there.
    std::memcpy(gathered_share(rank), a_rows, size_t(mine.count) * row_bytes);
    for (int i = 1; i < world; ++i) {
      heap.signal(wrap(rank + i, world), slot(ready_signal(plan, rank)), SignalOp::kSet, 1, s);
    }
    for (int source : gather_order(plan, rank)) {
      if (source == rank) continue;
      heap.wait_signal(slot(ready_signal(plan, source)), WaitCmp::kGe, 1, source, s);
      for (int64_t c = 0; c < num_chunks(plan, source); ++c) {
        const RowRange rows = chunk_rows(plan, source, c);
        heap.get(gathered_rows + size_t(rows.begin) * row_bytes, gathered,
                 size_t(rows.begin) * row_bytes, size_t(rows.count) * row_bytes, source, s);
        heap.signal(rank, slot(chunk_signal(plan, source, c)), SignalOp::kSet, 1, s);
      }
    }
    sender.assign(world, rank);
  } else if (plan.route == Route::kRing) {
    const int next = wrap(rank + 1, world), prev = wrap(rank - 1, world);
    if (world > 1) {
      for (int64_t c = 0; c < num_chunks(plan, rank); ++c) push_chunk(rank, c, a_rows, next);
    }
    // Shard rank-h arrives from prev and goes on to next, until next is its owner.
    for (int hop = 1; hop < world - 1; ++hop) {
      const int source = wrap(rank - hop, world);
      for (int64_t c = 0; c < num_chunks(plan, source); ++c) {
        heap.wait_signal(slot(chunk_signal(plan, source, c)), WaitCmp::kGe, 1, prev, s);
        push_chunk(source, c, gathered_share(source), next);
      }
    }
    sender.assign(world, prev);
  } else if (plan.two_level) {
    // Own rows to this machine's ranks, then to this local index on every other machine...
    for (int dl = 1; dl < g; ++dl) {
      const int peer = machine * g + wrap(local + dl, g);
      for (int64_t c = 0; c < num_chunks(plan, rank); ++c) push_chunk(rank, c, a_rows, peer);
    }
    for (int dm = 1; dm < machines; ++dm) {
      const int peer = wrap(machine + dm, machines) * g + local;
      for (int64_t c = 0; c < num_chunks(plan, rank); ++c) push_chunk(rank, c, a_rows, peer);
    }
    // ...and what those sent here on to this machine's ranks: each shard crosses a machine
    // boundary once per machine.
    for (int dm = 1; dm < machines; ++dm) {
      const int source = wrap(machine - dm, machines) * g + local;
      for (int64_t c = 0; c < num_chunks(plan, source); ++c) {
        heap.wait_signal(slot(chunk_signal(plan, source, c)), WaitCmp::kGe, 1, source, s);
        for (int dl = 1; dl < g; ++dl) {
          push_chunk(source, c, gathered_share(source), machine * g + wrap(local + dl, g));
        }
      }
    }
    for (int source = 0; source < world; ++source) {
      if (source / g != machine && source % g != local) sender[source] = machine * g + source % g;
    }
  } else {
    for (int i = 1; i < world; ++i) {
      for (int64_t c = 0; c < num_chunks(plan, rank); ++c) {
        push_chunk(rank, c, a_rows, wrap(rank + i, world));
      }
    }
  }

  // GEMM tiles, each after the chunks covering its rows (the prologue wait).
  const int64_t ldo = r.n / world;
  const size_t out_elem = dtype_size(r.out_dtype);
  std::vector<int64_t> chunks_here(world, 0);
  chunks_here[rank] = num_chunks(plan, rank);
  const bool own_rows_in_a = plan.transfer == Transfer::kPush;
  for (const TileTask& tile : tile_schedule(plan, rank)) {
    const int source = tile.block;
    const int64_t last = chunk_of_row(plan, source, tile.row_begin + tile.rows - 1);
    for (int64_t c = chunks_here[source]; c <= last; ++c) {
      heap.wait_signal(slot(chunk_signal(plan, source, c)), WaitCmp::kGe, 1, sender[source], s);
    }
    chunks_here[source] = std::max(chunks_here[source], last + 1);
    const std::byte* tile_a = source == rank && own_rows_in_a
                                  ? a_rows + size_t(tile.row_begin - mine.begin) * row_bytes
                                  : gathered_rows + size_t(tile.row_begin) * row_bytes;
    auto* dst = static_cast<std::byte*>(args.out.data()) +
                (size_t(tile.row_begin) * size_t(ldo) + size_t(tile.col_begin)) * out_elem;
    compute_tile(tile_a, r.k, tile, args.b, args.bias.empty() ? nullptr : args.bias.data(), dst,
                 ldo);
  }

  // Every signal raised here was waited for above: reset them for the next run.
  for (int source = 0; source < world; ++source) {
    if (source == rank) continue;
    for (int64_t c = 0; c < num_chunks(plan, source); ++c) {
      heap.signal(rank, slot(chunk_signal(plan, source, c)), SignalOp::kSet, 0, s);
    }
    if (plan.transfer == Transfer::kPull) {
      heap.signal(rank, slot(ready_signal(plan, source)), SignalOp::kSet, 0, s);
    }
  }
}

void TpOperation::Impl::run_fused_reduce_scatter(const RunArgs& args) {
  const TpRequest& r = plan.request;
  SymmetricHeap& heap = *ctx.heap;
  const Stream& s = args.stream;
  const size_t in_elem = dtype_size(r.dtype), out_elem = dtype_size(r.out_dtype);
  const int64_t n = r.n, lda = r.k / world;
  const int64_t block_elems = max_share() * n;  // one source's partials for one owner
  const int g = gpus_per_machine, machines = r.num_machines;
  const int machine = rank / g, local = rank % g;
  const RowRange mine = row_range(r.m, world, rank);
  const auto* a = static_cast<const std::byte*>(args.a.data());

  heap.barrier(s);
  // Partial tiles to their owners; two-level: to this machine's rank of the owner's local
  // index, which sums the machine's partials before one sum crosses.
  for (const TileTask& tile : tile_schedule(plan, rank)) {
    const int owner = tile.block;
    const RowRange owner_rows = row_range(r.m, world, owner);
    tile_bytes.resize(size_t(tile.rows * tile.cols) * out_elem);
    compute_tile(a + size_t(tile.row_begin * lda) * in_elem, lda, tile, args.b, nullptr,
                 tile_bytes.data(), tile.cols);
    const bool relayed = plan.two_level && owner / g != machine;
    const int peer = relayed ? machine * g + owner % g : owner;
    const int partial_slot = relayed ? (owner / g) * g + local : rank;
    const size_t offset =
        (size_t(partial_slot) * size_t(block_elems) +
         size_t((tile.row_begin - owner_rows.begin) * n + tile.col_begin)) * out_elem;
    heap.put_2d(relayed ? relay_partials : partials, offset, size_t(n) * out_elem,
                tile_bytes.data(), size_t(tile.cols) * out_elem, size_t(tile.cols) * out_elem,
                size_t(tile.rows), peer, s);
    heap.signal(peer, relayed ? slot(relay_signal(plan, rank)) : slot(count_signal(plan, rank)),
                SignalOp::kAdd, 1, s);
  }

  // Sums partials [rows, n] of `sources` (slots of `buffer` here) in the order given, in float32.
  auto sum_slots = [&](const SymmetricBuffer& buffer, const std::vector<int>& slots, int64_t rows,
                       std::vector<float>& sum) {
    sum.assign(size_t(rows * n), 0.0f);
    for (int partial_slot : slots) {
      const void* base = static_cast<const std::byte*>(buffer.local) +
                         size_t(partial_slot) * size_t(block_elems) * out_elem;
      for (int64_t e = 0; e < rows * n; ++e) sum[size_t(e)] += load_as_float(base, r.out_dtype, e);
    }
  };

  if (plan.two_level) {
    // Relay: this machine's partials for the owners of this local index elsewhere.
    int64_t expected = 0;
    for (int dm = 1; dm < machines; ++dm) {
      const int owner = wrap(machine + dm, machines) * g + local;
      expected += block_tiles(plan, row_range(r.m, world, owner).count, n);
    }
    for (int source = machine * g; expected > 0 && source < (machine + 1) * g; ++source) {
      heap.wait_signal(slot(relay_signal(plan, source)), WaitCmp::kGe, uint64_t(expected), source, s);
    }
    for (int dm = 1; dm < machines; ++dm) {
      const int owner_machine = wrap(machine + dm, machines);
      const int owner = owner_machine * g + local;
      const int64_t rows = row_range(r.m, world, owner).count;
      if (rows == 0) continue;
      std::vector<int> slots;
      for (int l = 0; l < g; ++l) slots.push_back(owner_machine * g + l);
      sum_slots(relay_partials, slots, rows, acc);
      tile_bytes.resize(size_t(rows * n) * out_elem);
      detail::store_tile(acc.data(), rows, n, nullptr, 0, r.out_dtype, tile_bytes.data(), n);
      heap.put(partials, size_t(rank) * size_t(block_elems) * out_elem, tile_bytes.data(),
               size_t(rows * n) * out_elem, owner, s);
      heap.signal(owner, slot(count_signal(plan, rank)), SignalOp::kAdd,
                  uint64_t(block_tiles(plan, rows, n)), s);
    }
  }

  // Owner: every source's partials (two-level: this machine's ranks and one relay per other
  // machine), summed in rank order.
  std::vector<int> sources;
  for (int source = 0; source < world; ++source) {
    if (!plan.two_level || source / g == machine || source % g == local) sources.push_back(source);
  }
  const int64_t expected = block_tiles(plan, mine.count, n);
  for (int source : sources) {
    if (expected > 0) {
      heap.wait_signal(slot(count_signal(plan, source)), WaitCmp::kGe, uint64_t(expected), source, s);
    }
  }
  if (mine.count > 0) {
    sum_slots(partials, sources, mine.count, acc);
    detail::store_tile(acc.data(), mine.count, n, args.bias.empty() ? nullptr : args.bias.data(),
                       0, r.out_dtype, args.out.data(), n);
  }

  for (int source : sources) heap.signal(rank, slot(count_signal(plan, source)), SignalOp::kSet, 0, s);
  if (plan.two_level) {
    for (int source = machine * g; source < (machine + 1) * g; ++source) {
      heap.signal(rank, slot(relay_signal(plan, source)), SignalOp::kSet, 0, s);
    }
  }
}

void TpOperation::Impl::run_fused_all_to_all(const RunArgs& args) {
  const TpRequest& r = plan.request;
  SymmetricHeap& heap = *ctx.heap;
  const Stream& s = args.stream;
  const size_t in_elem = dtype_size(r.dtype), out_elem = dtype_size(r.out_dtype);
  const int64_t cols_per_rank = r.n / world;
  const RowRange mine = row_range(r.m, world, rank);
  const auto* a = static_cast<const std::byte*>(args.a.data());

  heap.barrier(s);
  // Each tile goes straight into its owner's output rows of this rank's sequence share.
  for (const TileTask& tile : tile_schedule(plan, rank)) {
    const int owner = tile.block;
    tile_bytes.resize(size_t(tile.rows * tile.cols) * out_elem);
    compute_tile(a + size_t(tile.row_begin * r.k) * in_elem, r.k, tile, args.b,
                 args.bias.empty() ? nullptr : args.bias.data(), tile_bytes.data(), tile.cols);
    const size_t offset = (size_t(mine.begin + tile.row_begin) * size_t(cols_per_rank) +
                           size_t(tile.col_begin - owner * cols_per_rank)) * out_elem;
    heap.put_2d(received, offset, size_t(cols_per_rank) * out_elem, tile_bytes.data(),
                size_t(tile.cols) * out_elem, size_t(tile.cols) * out_elem, size_t(tile.rows),
                owner, s);
    heap.signal(owner, slot(count_signal(plan, rank)), SignalOp::kAdd, 1, s);
  }
  for (int source = 0; source < world; ++source) {
    const int64_t expected = block_tiles(plan, row_range(r.m, world, source).count, cols_per_rank);
    if (expected > 0) {
      heap.wait_signal(slot(count_signal(plan, source)), WaitCmp::kGe, uint64_t(expected), source, s);
    }
  }
  if (args.out.data() != received.local) {
    std::memcpy(args.out.data(), received.local, size_t(r.m * cols_per_rank) * out_elem);
  }
  for (int source = 0; source < world; ++source) {
    heap.signal(rank, slot(count_signal(plan, source)), SignalOp::kSet, 0, s);
  }
}

}  // namespace tessera::tp
