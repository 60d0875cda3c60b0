// Multi-process GPU tests of the cuda communication backend: NCCL communicators (collectives,
// groups, point to point, bounded synchronize), both symmetric heaps (NVSHMEM and CUDA IPC:
// put, get, put_with_signal, signals, barrier, peer pointers used by a kernel, bounded waits
// that time out) and emulated machines (NCCL_HOSTID, paced one-sided transfers).
//
// Structure: every CommGpu.X test (the parent, run by ctest) re-launches this binary as one
// process per GPU with --gtest_filter=CommGpuWorker.X; each worker test makes its own rank
// context and asserts; a worker exits non-zero when it fails, which fails the parent. Worker
// tests skip when not launched as workers. One worker test per launch: NVSHMEM and the
// bootstrap are per process. Inputs encode (rank, index) so every result is checked bit-exact.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// A kernel that loads and stores through peer pointers, for the peer_ptr test (internal API).
#include "../../src/comm/cuda/cuda_heap.h"
#include "../../src/comm/cuda/host_call_watchdog.h"
#include "../../src/comm/cuda/paced_copy.h"
#include "gpu/gpu_workers.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/comm/communicator.h"
#include "tessera/comm/context.h"
#include "tessera/comm/emulation.h"
#include "tessera/comm/symmetric_heap.h"
#include "tessera/comm/topology.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/stream.h"

namespace tessera {
namespace {

// ---------------------------------------------------------------------------------------------
// Parent side

int num_gpus_for_test() {
  return testing::gpus_for_test(8);
}

// Runs CommGpuWorker.<test> on `num_ranks` processes; fails when any worker fails.
void run_workers(const std::string& test, int num_ranks,
                 std::vector<std::pair<std::string, std::string>> env = {}) {
  testing::run_gpu_workers("CommGpuWorker", test, num_ranks, 30000, std::move(env));
}

#define REQUIRE_GPUS(n) TESSERA_REQUIRE_GPUS(num_gpus_for_test(), n)

TEST(CommGpu, Collectives) {
  REQUIRE_GPUS(2);
  run_workers("Collectives", num_gpus_for_test());
}
TEST(CommGpu, HeapNvshmem) {
  REQUIRE_GPUS(2);
  run_workers("HeapNvshmem", num_gpus_for_test());
}
TEST(CommGpu, HeapIpc) {
  REQUIRE_GPUS(2);
  run_workers("HeapIpc", num_gpus_for_test());
}
TEST(CommGpu, SignalWaitTimeoutIpc) {
  REQUIRE_GPUS(2);
  run_workers("SignalWaitTimeoutIpc", num_gpus_for_test());
}
TEST(CommGpu, SignalWaitTimeoutNvshmem) {
  REQUIRE_GPUS(2);
  run_workers("SignalWaitTimeoutNvshmem", num_gpus_for_test());
}
TEST(CommGpu, HeapBarrierTimeoutIpc) {
  REQUIRE_GPUS(2);
  run_workers("HeapBarrierTimeoutIpc", num_gpus_for_test());
}
TEST(CommGpu, NcclSynchronizeTimeout) {
  REQUIRE_GPUS(2);
  run_workers("NcclSynchronizeTimeout", num_gpus_for_test());
}
// A host call armed past TESSERA_TIMEOUT_MS ends the process with status 124 and a message
// naming the call, rank and group; a disarmed one is left alone.
TEST(CommGpu, HostCallWatchdogEndsAStuckCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  kWaitTimeoutMs.override(200);
  EXPECT_EXIT(
      {
        cuda_comm::HostCallWatchdog watchdog("rank 1 on group 'tp' (2 ranks)");
        watchdog.arm("all_gather", 7);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(124),
      "rank 1 on group 'tp' \\(2 ranks\\): all_gather #7 has waited inside NCCL on the host");
  {
    cuda_comm::HostCallWatchdog watchdog("rank 0 on group 'tp' (2 ranks)");
    watchdog.arm("all_gather", 8);
    watchdog.disarm();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // still running: not fired
  }
  kWaitTimeoutMs.clear_override();
}
// A peer that never takes part in a first, lazily connected use (a send to a rank that never
// receives): the waiting rank ends within the bound instead of hanging, either by the host call
// watchdog (status 124) or, where NCCL returns from the send, by synchronize's kTimeout (3).
TEST(CommGpu, FirstUseWithAnAbsentPeerIsBounded) {
  REQUIRE_GPUS(2);
  std::vector<std::string> args = {
      testing::self_executable(), "--gtest_filter=CommGpuWorker.FirstUseWithAnAbsentPeerIsBounded"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const int status =
      launch_local_workers(2, int(args.size()), argv.data(), {{"TESSERA_TIMEOUT_MS", "1000"}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(status == 124 || status == 3) << "worker status " << status;
  EXPECT_LT(seconds, 30.0);
  std::printf("absent peer: status %d (%s) after %.1f s\n", status,
              status == 124 ? "host call watchdog" : "synchronize's kTimeout", seconds);
}
TEST(CommGpu, EmulatedTwoMachines) {
  REQUIRE_GPUS(2);
  int n = num_gpus_for_test() / 2 * 2;  // two equal emulated machines
  run_workers("EmulatedTwoMachines", n);
}

TEST(CommGpu, EmulatedNicsAreShared) {
  REQUIRE_GPUS(3);
  run_workers("EmulatedNicsAreShared", 3);
}

// ---------------------------------------------------------------------------------------------
// Worker side

#define WORKER_ONLY()                                                                          \
  do {                                                                                         \
    if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by CommGpu.*"; \
  } while (0)

std::unique_ptr<RankContext> make_context(const ContextOptions& options) {
  return create_cuda_context(bootstrap_from_launch(detect_launch()), options);
}

ContextOptions options_with_heap(const std::string& transport) {
  ContextOptions options;
  options.heap_transport = transport;
  options.heap_bytes = size_t(64) << 20;
  return options;
}

// Ends a worker whose CUDA context may be lost (a device trap) or whose peers' may be: after
// every rank arrived, exit without destructors (NVSHMEM finalize and NCCL destroy would need
// a working context).
[[noreturn]] void exit_worker_now(RankContext& ctx) {
  try {
    ctx.bootstrap->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "final bootstrap barrier failed: %s\n", e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

template <typename T>
std::vector<T> download(const void* device, size_t count) {
  std::vector<T> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

template <typename T>
void upload(void* device, const std::vector<T>& host) {
  EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  // Copies from pageable memory may return before the DMA lands, and the rank's stream does
  // not wait for the legacy stream.
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
}

Tensor device_tensor(int64_t count, DType dtype, const RankContext& ctx) {
  return Tensor::empty({count}, dtype, ctx.device);
}

// Fills a device tensor with a poison pattern so unwritten elements are caught.
void poison(const Tensor& t) {
  EXPECT_EQ(cudaMemset(t.data(), 0xA5, t.view().span_bytes()), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
}

template <typename T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << ": element " << i;
  }
}

// Values encoding (rank, block, index), exact in int32 and float32.
int32_t encode(int rank, int block, int index) {
  return rank * 10000 + block * 100 + index;
}

// ------------------------------------- collectives ------------------------------------------

void check_all_gather_i32(Communicator& comm, RankContext& ctx, int n) {
  const int w = comm.size(), me = comm.rank();
  Tensor send = device_tensor(n, DType::kI32, ctx),
         recv = device_tensor(int64_t(w) * n, DType::kI32, ctx);
  std::vector<int32_t> mine(n);
  for (int i = 0; i < n; ++i) mine[i] = encode(comm.global_rank(me), 0, i);
  upload(send.data(), mine);
  poison(recv);
  comm.all_gather(send, recv, ctx.stream);
  comm.synchronize(ctx.stream);
  std::vector<int32_t> want(size_t(w) * n);
  for (int r = 0; r < w; ++r)
    for (int i = 0; i < n; ++i) want[size_t(r) * n + i] = encode(comm.global_rank(r), 0, i);
  expect_equal(download<int32_t>(recv.data(), want.size()), want,
               "all_gather on '" + comm.name() + "'");
}

void check_all_to_all_i32(Communicator& comm, RankContext& ctx, int n) {
  const int w = comm.size(), me = comm.rank();
  Tensor send = device_tensor(int64_t(w) * n, DType::kI32, ctx);
  Tensor recv = device_tensor(int64_t(w) * n, DType::kI32, ctx);
  std::vector<int32_t> mine(size_t(w) * n), want(size_t(w) * n);
  for (int j = 0; j < w; ++j) {
    for (int i = 0; i < n; ++i) {
      mine[size_t(j) * n + i] = encode(me, j, i);  // block j goes to rank j
      want[size_t(j) * n + i] = encode(j, me, i);  // block j came from rank j
    }
  }
  upload(send.data(), mine);
  poison(recv);
  comm.all_to_all(send, recv, ctx.stream);
  comm.synchronize(ctx.stream);
  expect_equal(download<int32_t>(recv.data(), want.size()), want,
               "all_to_all on '" + comm.name() + "'");
}

// bf16 moved as raw bits: any pattern must arrive unchanged.
void check_all_gather_bf16_bits(Communicator& comm, RankContext& ctx, int n) {
  const int w = comm.size(), me = comm.rank();
  Tensor send = device_tensor(n, DType::kBF16, ctx),
         recv = device_tensor(int64_t(w) * n, DType::kBF16, ctx);
  auto bits = [](int r, int i) { return uint16_t((r << 11) ^ (i * 37 + 1)); };
  std::vector<uint16_t> mine(n), want(size_t(w) * n);
  for (int i = 0; i < n; ++i) mine[i] = bits(me, i);
  for (int r = 0; r < w; ++r)
    for (int i = 0; i < n; ++i) want[size_t(r) * n + i] = bits(r, i);
  upload(send.data(), mine);
  poison(recv);
  comm.all_gather(send, recv, ctx.stream);
  comm.synchronize(ctx.stream);
  expect_equal(download<uint16_t>(recv.data(), want.size()), want, "all_gather bf16 bits");
}

template <typename T>
void check_reductions(Communicator& comm, RankContext& ctx, DType dtype, int n) {
  const int w = comm.size(), me = comm.rank();
  // send[j * n + i] = (rank + 1) * (j * n + i + 1): sums, maxima and minima over ranks are
  // (W(W+1)/2, W, 1) times (j * n + i + 1), exact in int32 and float32.
  const int64_t total = int64_t(w) * n;
  Tensor send = device_tensor(total, dtype, ctx);
  std::vector<T> mine(total);
  for (int64_t k = 0; k < total; ++k) mine[k] = T((me + 1) * (k + 1));
  upload(send.data(), mine);
  const T sum_factor = T(w * (w + 1) / 2), max_factor = T(w), min_factor = T(1);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    const T factor = op == ReduceOp::kSum   ? sum_factor
                     : op == ReduceOp::kMax ? max_factor
                                            : min_factor;
    Tensor reduced = device_tensor(total, dtype, ctx);
    poison(reduced);
    comm.all_reduce(send, reduced, op, ctx.stream);
    Tensor scattered = device_tensor(n, dtype, ctx);
    poison(scattered);
    comm.reduce_scatter(send, scattered, op, ctx.stream);
    comm.synchronize(ctx.stream);
    std::vector<T> want_all(total), want_block(n);
    for (int64_t k = 0; k < total; ++k) want_all[k] = T(factor * T(k + 1));
    for (int i = 0; i < n; ++i) want_block[i] = T(factor * T(int64_t(me) * n + i + 1));
    const std::string what =
        str(reduce_op_name(op), " ", dtype_name(dtype), " on '", comm.name(), "'");
    expect_equal(download<T>(reduced.data(), total), want_all, "all_reduce " + what);
    expect_equal(download<T>(scattered.data(), n), want_block, "reduce_scatter " + what);
  }
}

void check_ring_send_recv(Communicator& comm, RankContext& ctx, int n) {
  const int w = comm.size(), me = comm.rank();
  const int next = (me + 1) % w, prev = (me + w - 1) % w;
  Tensor out = device_tensor(n, DType::kI32, ctx), in = device_tensor(n, DType::kI32, ctx);
  std::vector<int32_t> mine(n), want(n);
  for (int i = 0; i < n; ++i) {
    mine[i] = encode(me, 7, i);
    want[i] = encode(prev, 7, i);
  }
  upload(out.data(), mine);
  poison(in);
  comm.group_begin();
  comm.send(out, next, ctx.stream);
  comm.recv(in, prev, ctx.stream);
  comm.group_end();
  comm.synchronize(ctx.stream);
  expect_equal(download<int32_t>(in.data(), n), want, "ring send/recv on '" + comm.name() + "'");
}

void check_everything(Communicator& comm, RankContext& ctx) {
  check_all_gather_i32(comm, ctx, 5);
  check_all_gather_bf16_bits(comm, ctx, 33);
  check_all_to_all_i32(comm, ctx, 3);
  check_reductions<int32_t>(comm, ctx, DType::kI32, 7);
  check_reductions<float>(comm, ctx, DType::kF32, 9);
  check_ring_send_recv(comm, ctx, 1001);
  comm.barrier(ctx.stream);
  comm.synchronize(ctx.stream);
}

TEST(CommGpuWorker, Collectives) {
  WORKER_ONLY();
  ContextOptions options;
  options.create_heap = false;
  auto ctx = make_context(options);
  Communicator& world = *ctx->world;
  const int w = world.size(), me = world.rank();
  EXPECT_EQ(world.backend(), Backend::kCuda);
  EXPECT_EQ(world.name(), "world");
  check_everything(world, *ctx);

  // Argument checks name the argument and never reach NCCL.
  Tensor small = device_tensor(2, DType::kI32, *ctx),
         big = device_tensor(int64_t(w) * 2, DType::kI32, *ctx);
  try {
    world.all_gather(big, small, ctx->stream);
    ADD_FAILURE() << "all_gather into a too small recv did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("recv"), std::string::npos) << e.what();
  }
  EXPECT_THROW(world.all_reduce(small, small, ReduceOp::kSum, Stream::cpu()), Error);
  Tensor f32 = device_tensor(2, DType::kF32, *ctx);
  EXPECT_THROW(world.all_reduce(small, f32, ReduceOp::kSum, ctx->stream), Error);
  EXPECT_THROW(world.send(small, w, ctx->stream), Error);

  // By parity, in reverse rank order (key = -rank): checks NCCL's order and global ranks.
  {
    auto parity = world.split(me % 2, -me, "parity");
    ASSERT_NE(parity, nullptr);
    std::vector<int> members;
    for (int r = w - 1; r >= 0; --r)
      if (r % 2 == me % 2) members.push_back(r);
    ASSERT_EQ(parity->size(), int(members.size()));
    for (int i = 0; i < parity->size(); ++i) EXPECT_EQ(parity->global_rank(i), members[i]);
    EXPECT_EQ(parity->global_rank(parity->rank()), me);
    check_everything(*parity, *ctx);
  }
  // A rank outside every group gets nullptr; the others a group of w - 1.
  {
    auto without_zero = world.split(me == 0 ? -1 : 0, me, "without0");
    if (me == 0) {
      EXPECT_EQ(without_zero, nullptr);
    } else {
      ASSERT_NE(without_zero, nullptr);
      EXPECT_EQ(without_zero->size(), w - 1);
      EXPECT_EQ(without_zero->global_rank(without_zero->rank()), me);
      if (w > 2) check_everything(*without_zero, *ctx);
    }
  }
  // The sequence-parallel layouts through split_groups.
  if (w % 2 == 0) {
    auto pairs = world.split_groups(contiguous_groups(w, 2), "ulysses");
    ASSERT_NE(pairs, nullptr);
    EXPECT_EQ(pairs->size(), 2);
    EXPECT_EQ(pairs->global_rank(0), me / 2 * 2);
    check_everything(*pairs, *ctx);
    auto strided = world.split_groups(strided_groups(w, 2), "ring");
    ASSERT_NE(strided, nullptr);
    EXPECT_EQ(strided->global_rank(strided->rank()), me);
    check_everything(*strided, *ctx);
  }
  // The world still works after the groups came and went.
  check_all_to_all_i32(world, *ctx, 4);
}

// ------------------------------------- heaps ------------------------------------------------

uint8_t pattern_byte(int rank, size_t i) {
  return uint8_t(rank * 31 + i * 7 + (i >> 9));
}
std::vector<uint8_t> pattern(int rank, size_t bytes, size_t skip = 0) {
  std::vector<uint8_t> p(bytes);
  for (size_t i = 0; i < bytes; ++i) p[i] = pattern_byte(rank, i + skip);
  return p;
}

// Pitched transfers (put_2d / get_2d), collective: this rank puts rows into `to`'s buffer and
// reads them back; `from` is the rank that puts into this rank's buffer. Two shapes: 240-byte
// rows at 16-byte aligned pitches (whole vectors; paced pieces and CTA slices end mid-row), and
// odd rows at odd offsets and pitches (byte heads and tails). Bytes between rows stay untouched.
void check_pitched(SymmetricHeap& heap, RankContext& ctx, int to, int from,
                   const std::string& what) {
  const Stream& s = ctx.stream;
  const int me = heap.rank();
  struct Shape {
    size_t offset, pitch, row_bytes, rows, local_pitch;
  };
  for (const Shape& sh : {Shape{16, 768, 240, 601, 240}, Shape{3, 29, 13, 9, 17}}) {
    const std::string label = str(what, " (", sh.rows, " rows of ", sh.row_bytes, " bytes)");
    const size_t span = sh.offset + (sh.rows - 1) * sh.pitch + sh.row_bytes;
    SymmetricBuffer buf = heap.allocate(span + 8);
    Tensor local = device_tensor(int64_t(sh.rows * sh.local_pitch), DType::kU8, ctx);
    const std::vector<uint8_t> mine = pattern(me, sh.rows * sh.local_pitch);
    upload(local.data(), mine);
    EXPECT_EQ(cudaMemset(buf.local, 0xA5, span + 8), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    heap.barrier(s);
    heap.put_2d(buf, sh.offset, sh.pitch, local.data(), sh.local_pitch, sh.row_bytes, sh.rows, to,
                s);
    heap.barrier(s);
    s.synchronize();
    const std::vector<uint8_t> theirs = pattern(from, sh.rows * sh.local_pitch);
    std::vector<uint8_t> want(span + 8, 0xA5);
    for (size_t r = 0; r < sh.rows; ++r) {
      std::memcpy(want.data() + sh.offset + r * sh.pitch, theirs.data() + r * sh.local_pitch,
                  sh.row_bytes);
    }
    expect_equal(download<uint8_t>(buf.local, span + 8), want, label + " put_2d");
    // get_2d back from `to`: its buffer holds this rank's rows.
    poison(local);
    heap.get_2d(local.data(), sh.local_pitch, buf, sh.offset, sh.pitch, sh.row_bytes, sh.rows, to,
                s);
    s.synchronize();
    const std::vector<uint8_t> got = download<uint8_t>(local.data(), sh.rows * sh.local_pitch);
    for (size_t r = 0; r < sh.rows; ++r) {
      for (size_t c = 0; c < sh.local_pitch; ++c) {
        const uint8_t expected = c < sh.row_bytes ? mine[r * sh.local_pitch + c] : uint8_t(0xA5);
        ASSERT_EQ(got[r * sh.local_pitch + c], expected)
            << label << " get_2d: row " << r << ", byte " << c;
      }
    }
    heap.barrier(s);
    s.synchronize();
  }
  EXPECT_THROW(heap.put_2d(SymmetricBuffer{}, 0, 8, nullptr, 8, 16, 2, to, s), Error);
}

void run_heap_test(const std::string& transport) {
  auto ctx = make_context(options_with_heap(transport));
  ASSERT_NE(ctx->heap, nullptr);
  SymmetricHeap& heap = *ctx->heap;
  const Stream& s = ctx->stream;
  const int w = heap.size(), me = heap.rank();
  const int next = (me + 1) % w, prev = (me + w - 1) % w;
  for (int p = 0; p < w; ++p) EXPECT_EQ(heap.transport(p), transport) << "peer " << p;
  EXPECT_EQ(heap.backend(), Backend::kCuda);

  const size_t bytes = (size_t(1) << 20) + 13;  // odd: tails on every path
  SymmetricBuffer a = heap.allocate(bytes);
  SymmetricBuffer b = heap.allocate(bytes);
  SymmetricBuffer c = heap.allocate(bytes);
  ASSERT_NE(a.local, nullptr);
  EXPECT_EQ(heap.peer_ptr(a, me), a.local);
  Tensor staging = device_tensor(int64_t(bytes) + 64, DType::kU8, *ctx);

  // Collective allocation is checked: different sizes throw on every rank.
  EXPECT_THROW(heap.allocate(me == 0 ? 100 : 200), Error);

  // put: my pattern into next's `a`; barrier; `a` holds prev's pattern.
  upload(staging.data(), pattern(me, bytes));
  EXPECT_EQ(cudaMemset(a.local, 0, bytes), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  heap.barrier(s);
  heap.put(a, 0, staging.data(), bytes, next, s);
  heap.barrier(s);
  s.synchronize();
  expect_equal(download<uint8_t>(a.local, bytes), pattern(prev, bytes), transport + " put");

  // Unaligned put: 1000 bytes from staging + 5 to offset 3 of next's `c`.
  heap.put(c, 3, static_cast<uint8_t*>(staging.data()) + 5, 1000, next, s);
  heap.barrier(s);
  s.synchronize();
  expect_equal(download<uint8_t>(static_cast<uint8_t*>(c.local) + 3, 1000), pattern(prev, 1000, 5),
               transport + " unaligned put");

  // get: next's `b` (its own pattern) into staging.
  upload(b.local, pattern(me + 100, bytes));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  heap.barrier(s);
  poison(staging);
  heap.get(staging.data(), b, 0, bytes, next, s);
  s.synchronize();
  expect_equal(download<uint8_t>(staging.data(), bytes), pattern(next + 100, bytes),
               transport + " get");

  // put_with_signal, four chunks counted on slot 3, then the data must be there.
  upload(staging.data(), pattern(me + 50, bytes));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const size_t chunk = bytes / 4;
  for (int k = 0; k < 4; ++k) {
    const size_t len = k == 3 ? bytes - 3 * chunk : chunk;
    heap.put_with_signal(b, k * chunk, static_cast<uint8_t*>(staging.data()) + k * chunk, len, next,
                         3, SignalOp::kAdd, 1, s);
  }
  heap.wait_signal(3, WaitCmp::kGe, 4, prev, s);
  s.synchronize();
  EXPECT_EQ(heap.read_signal(3), 4u);
  expect_equal(download<uint8_t>(b.local, bytes), pattern(prev + 50, bytes),
               transport + " put_with_signal");
  heap.check_errors();

  // kSet and signal() without data.
  heap.put_with_signal(b, 0, staging.data(), 0, next, 5, SignalOp::kSet, 42, s);
  heap.signal(prev, 7, SignalOp::kAdd, 2, s);
  heap.wait_signal(5, WaitCmp::kEq, 42, prev, s);
  heap.wait_signal(7, WaitCmp::kGe, 2, next, s);
  heap.wait_signal(7, WaitCmp::kNe, 0, -1, s);
  heap.wait_signal(7, WaitCmp::kGt, 1, next, s);
  s.synchronize();
  EXPECT_EQ(heap.read_signal(5), 42u);
  EXPECT_EQ(heap.read_signal(7), 2u);

  // peer_ptr used by a kernel: store my pattern into next's `c` through its mapping.
  void* next_c = heap.peer_ptr(c, next);
  ASSERT_NE(next_c, nullptr) << "GPUs of one host should be load/store reachable";
  upload(staging.data(), pattern(me + 7, bytes));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  heap.barrier(s);  // nobody still reads `c`
  cuda_comm::launch_peer_copy(next_c, staging.data(), bytes,
                              static_cast<cudaStream_t>(s.cuda_stream()));
  heap.barrier(s);
  s.synchronize();
  expect_equal(download<uint8_t>(c.local, bytes), pattern(prev + 7, bytes),
               transport + " kernel store through peer_ptr");

  // Pitched transfers: one cudaMemcpy2DAsync through the peer mapping.
  check_pitched(heap, *ctx, next, prev, transport);

  // Many barriers in a row complete.
  for (int i = 0; i < 20; ++i) heap.barrier(s);
  s.synchronize();
  heap.check_errors();

  // Argument checks.
  EXPECT_THROW(heap.put(a, bytes - 2, staging.data(), 4, next, s), Error);
  EXPECT_THROW(heap.put(a, 0, staging.data(), 4, w, s), Error);
  EXPECT_THROW(heap.wait_signal(heap.num_signal_slots(), WaitCmp::kGe, 1, 0, s), Error);
  EXPECT_THROW(heap.wait_signal(0, WaitCmp::kGe, 1, w, s), Error);
  EXPECT_THROW(heap.signal(next, 0, SignalOp::kAdd, 1, Stream::cpu()), Error);
  SymmetricBuffer foreign{staging.data(), 0, 64};
  EXPECT_THROW(heap.put(foreign, 0, staging.data(), 8, next, s), Error);
  heap.barrier(s);
  s.synchronize();
}

TEST(CommGpuWorker, HeapNvshmem) {
  WORKER_ONLY();
  run_heap_test("nvshmem");
}

TEST(CommGpuWorker, HeapIpc) {
  WORKER_ONLY();
  run_heap_test("ipc");
}

// Rank 1 waits on slot 9 for a signal rank 0 never sends (500 ms): the device traps, the
// stream reports a CUDA error, check_errors() says who waited for whom.
void run_signal_wait_timeout(const std::string& transport) {
  auto ctx = make_context(options_with_heap(transport));
  if (ctx->rank == 1) {
    kWaitTimeoutMs.override(500);
    ctx->heap->wait_signal(9, WaitCmp::kGe, 1, 0, ctx->stream);
    kWaitTimeoutMs.clear_override();
    EXPECT_THROW(ctx->stream.synchronize(), Error);
    try {
      ctx->heap->check_errors();
      ADD_FAILURE() << "check_errors did not report the timed out wait";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << m;
      EXPECT_NE(m.find("rank 1: timed out after"), std::string::npos) << m;
      EXPECT_NE(m.find("signal slot 9 from rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("expected >= 1"), std::string::npos) << m;
    }
  } else {
    EXPECT_NO_THROW(ctx->heap->check_errors());
  }
  exit_worker_now(*ctx);
}

TEST(CommGpuWorker, SignalWaitTimeoutIpc) {
  WORKER_ONLY();
  run_signal_wait_timeout("ipc");
}

// The same under NVSHMEM: the trap must not take NVSHMEM's own threads (and the process) down
// before check_errors() reports it.
TEST(CommGpuWorker, SignalWaitTimeoutNvshmem) {
  WORKER_ONLY();
  run_signal_wait_timeout("nvshmem");
}

// Every rank but 0 enters a heap barrier that rank 0 skips: their waits name rank 0.
TEST(CommGpuWorker, HeapBarrierTimeoutIpc) {
  WORKER_ONLY();
  auto ctx = make_context(options_with_heap("ipc"));
  if (ctx->rank != 0) {
    kWaitTimeoutMs.override(500);
    ctx->heap->barrier(ctx->stream);
    kWaitTimeoutMs.clear_override();
    EXPECT_THROW(ctx->stream.synchronize(), Error);
    try {
      ctx->heap->check_errors();
      ADD_FAILURE() << "check_errors did not report the timed out barrier";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << m;
      EXPECT_NE(m.find(str("rank ", ctx->rank, ": timed out after")), std::string::npos) << m;
      EXPECT_NE(m.find("heap barrier #1 waiting for rank 0"), std::string::npos) << m;
    }
  }
  exit_worker_now(*ctx);
}

// Rank 0 skips the second all_reduce: the others' synchronize times out naming it, aborts the
// communicator, and later use is refused.
TEST(CommGpuWorker, NcclSynchronizeTimeout) {
  WORKER_ONLY();
  ContextOptions options;
  options.create_heap = false;
  auto ctx = make_context(options);
  Communicator& world = *ctx->world;
  Tensor data = device_tensor(1024, DType::kF32, *ctx);
  EXPECT_EQ(cudaMemset(data.data(), 0, 4096), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  world.all_reduce(data, data, ReduceOp::kSum, ctx->stream);  // connects every pair first
  world.synchronize(ctx->stream);
  if (ctx->rank != 0) {
    world.all_reduce(data, data, ReduceOp::kSum, ctx->stream);
    kWaitTimeoutMs.override(500);
    try {
      world.synchronize(ctx->stream);
      ADD_FAILURE() << "synchronize did not time out";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << m;
      EXPECT_NE(m.find(str("rank ", ctx->rank, ": all_reduce #2 on group 'world' (", world.size(),
                           " ranks) did not complete within 500 ms")),
                std::string::npos)
          << m;
    }
    kWaitTimeoutMs.clear_override();
    try {
      world.barrier(ctx->stream);
      ADD_FAILURE() << "an aborted communicator accepted work";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
    }
  }
  exit_worker_now(*ctx);
}

TEST(CommGpuWorker, FirstUseWithAnAbsentPeerIsBounded) {
  WORKER_ONLY();
  ContextOptions options;
  options.create_heap = false;
  auto ctx = make_context(options);
  if (ctx->rank == 0) {  // never receives; outlives rank 1's bound, then leaves
    std::this_thread::sleep_for(std::chrono::seconds(4));
    std::fflush(stdout);
    std::_Exit(0);
  }
  Tensor data = device_tensor(1024, DType::kF32, *ctx);
  try {
    ctx->world->send(data, 0, ctx->stream);
    ctx->world->synchronize(ctx->stream);
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", ctx->rank, e.what());
    std::fflush(stderr);
    std::_Exit(e.code() == ErrorCode::kTimeout ? 3 : 1);
  }
  std::_Exit(1);  // the send completed without a receiver
}

// ------------------------------------- emulated machines ------------------------------------

TEST(CommGpuWorker, EmulatedTwoMachines) {
  WORKER_ONLY();
  ContextOptions options = options_with_heap("nvshmem");
  options.emulate_machines = 2;
  options.emulated_link.bandwidth_gbps = 20.0;
  options.emulated_link.latency_us = 40.0;
  options.emulated_link.preset = "custom";
  auto ctx = make_context(options);
  const Topology& topo = ctx->topology;
  const int w = ctx->size, me = ctx->rank;
  const int partner = (me + w / 2) % w;  // same local index, other machine
  ASSERT_TRUE(topo.emulated);
  ASSERT_EQ(topo.num_machines(), 2);
  EXPECT_EQ(topo.machine_of_rank[me], me / (w / 2));
  EXPECT_EQ(topo.link(me, partner), LinkClass::kEmulatedNetwork);
  const std::string host_id = emulated_host_id(topo, me);
  ASSERT_FALSE(host_id.empty());
  ASSERT_NE(std::getenv("NCCL_HOSTID"), nullptr);
  EXPECT_EQ(std::string(std::getenv("NCCL_HOSTID")), host_id);
  EXPECT_NE(std::getenv("NCCL_SOCKET_IFNAME"), nullptr);

  // NCCL across the emulated machines (its network transport) stays bit-exact.
  check_all_gather_i32(*ctx->world, *ctx, 1000);
  check_all_to_all_i32(*ctx->world, *ctx, 257);
  check_reductions<int32_t>(*ctx->world, *ctx, DType::kI32, 100);

  SymmetricHeap& heap = *ctx->heap;
  const Stream& s = ctx->stream;
  for (int p = 0; p < w; ++p) {
    const bool cross = topo.machine_of_rank[p] != topo.machine_of_rank[me];
    EXPECT_EQ(heap.transport(p), cross ? "nvshmem+paced" : "nvshmem") << "peer " << p;
  }

  // Paced put_with_signal and get stay bit-exact (odd sizes, unaligned ends).
  const size_t bytes = (size_t(4) << 20) + 5;
  SymmetricBuffer a = heap.allocate(bytes + 16);
  Tensor staging = device_tensor(int64_t(bytes) + 64, DType::kU8, *ctx);
  upload(staging.data(), pattern(me, bytes + 3));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  heap.barrier(s);
  heap.put_with_signal(a, 1, static_cast<uint8_t*>(staging.data()) + 3, bytes, partner, 2,
                       SignalOp::kSet, 1, s);
  heap.wait_signal(2, WaitCmp::kEq, 1, partner, s);
  s.synchronize();
  expect_equal(download<uint8_t>(static_cast<uint8_t*>(a.local) + 1, bytes),
               pattern(partner, bytes, 3), "paced put_with_signal");
  heap.barrier(s);
  poison(staging);
  heap.get(staging.data(), a, 1, bytes, partner, s);
  s.synchronize();
  expect_equal(download<uint8_t>(staging.data(), bytes), pattern(me, bytes, 3), "paced get");

  // Pitched paced transfers: one paced kernel each, bit-exact.
  check_pitched(heap, *ctx, partner, partner, "paced");

  // A paced put of B bytes takes at least latency + B / bandwidth.
  const size_t timed_bytes = size_t(8) << 20;
  SymmetricBuffer t = heap.allocate(timed_bytes);
  Tensor source = device_tensor(int64_t(timed_bytes), DType::kU8, *ctx);
  Event start = Event::create(s, true), end = Event::create(s, true);
  heap.put(t, 0, source.data(), 4096, partner, s);  // loads the kernel (lazy loading) untimed
  heap.barrier(s);
  start.record(s);
  heap.put(t, 0, source.data(), timed_bytes, partner, s);
  end.record(s);
  s.synchronize();
  const double expected_us = paced_transfer_us(options.emulated_link, timed_bytes);
  const double measured_us = 1000.0 * end.elapsed_ms_since(start);
  EXPECT_GE(measured_us, 0.99 * expected_us) << "paced put finished too early";
  EXPECT_LT(measured_us, 20.0 * expected_us + 5000.0) << "paced put far slower than its link";
  std::printf("rank %d: paced put of %zu bytes: %.1f us (link says %.1f us)\n", me, timed_bytes,
              measured_us, expected_us);

  // A bare signal across machines carries the latency.
  start.record(s);
  heap.signal(partner, 4, SignalOp::kAdd, 1, s);
  end.record(s);
  heap.wait_signal(4, WaitCmp::kGe, 1, partner, s);
  s.synchronize();
  EXPECT_GE(1000.0 * end.elapsed_ms_since(start), 0.99 * options.emulated_link.latency_us);

  // Same-machine traffic is not paced.
  const int neighbour = (me % (w / 2) + 1) % (w / 2) + (me / (w / 2)) * (w / 2);
  if (neighbour != me) EXPECT_EQ(heap.transport(neighbour), "nvshmem");
  heap.barrier(s);
  s.synchronize();
  heap.check_errors();
}

// Three GPUs, each its own emulated machine: one NIC per GPU carries everything it sends and
// receives, whichever GPU runs the copy and whichever stream it is on.
TEST(CommGpuWorker, EmulatedNicsAreShared) {
  WORKER_ONLY();
  ContextOptions options = options_with_heap("ipc");
  options.emulate_machines = 3;
  options.emulated_link = LinkSpec{10.0, 20.0, "custom"};
  auto ctx = make_context(options);
  ASSERT_EQ(ctx->size, 3);
  const int me = ctx->rank;
  auto& heap = dynamic_cast<cuda_comm::CudaSymmetricHeap&>(*ctx->heap);
  std::printf("rank %d: globaltimer offset to rank 0: %lld ns (round trip %llu ns)\n", me,
              static_cast<long long>(heap.clock_offset_ns()),
              static_cast<unsigned long long>(heap.clock_round_trip_ns()));
  if (me != 0) EXPECT_LT(heap.clock_round_trip_ns(), 1000000u) << "clock probe round trip";

  const size_t bytes = size_t(16) << 20;
  const double one_us = paced_transfer_us(options.emulated_link, bytes);
  SymmetricBuffer inbox = heap.allocate(2 * bytes);
  Tensor source = device_tensor(int64_t(bytes), DType::kU8, *ctx);
  const Stream& s = ctx->stream;
  Stream other = Stream::create_cuda(ctx->device.index, -1);
  heap.put(inbox, 0, source.data(), 4096, (me + 1) % 3, s);  // loads the kernels untimed
  int warm = heap.reserve_link((me + 1) % 3, 4096, s);
  heap.hold_for_link(warm, s);
  s.synchronize();
  Event start = Event::create(s, true), end = Event::create(s, true);

  // Ingress: ranks 1 and 2 push into rank 0 at once; rank 0 sees both land after 2 transfers.
  heap.barrier(s);
  if (me == 0) {
    start.record(s);
    heap.wait_signal(5, WaitCmp::kGe, 2, -1, s);
    end.record(s);
  } else {
    heap.put_with_signal(inbox, size_t(me - 1) * bytes, source.data(), bytes, 0, 5, SignalOp::kAdd,
                         1, s);
  }
  s.synchronize();
  if (me == 0) {
    const double us = 1000.0 * end.elapsed_ms_since(start);
    std::printf("rank 0: two pushes into its NIC: %.0f us (one alone: %.0f us)\n", us, one_us);
    EXPECT_GE(us, 0.95 * 2 * one_us) << "two pushes into one NIC must share its bandwidth";
  }

  // Egress: rank 1 pushes to ranks 0 and 2 on two streams at once.
  heap.barrier(s);
  if (me == 1) {
    Event forked = Event::create(s), joined = Event::create(other);
    start.record(s);
    forked.record(s);
    forked.wait_on(other);
    heap.put(inbox, 0, source.data(), bytes, 0, s);
    heap.put(inbox, bytes, source.data(), bytes, 2, other);
    joined.record(other);
    joined.wait_on(s);
    end.record(s);
    s.synchronize();
    const double us = 1000.0 * end.elapsed_ms_since(start);
    std::printf("rank 1: two pushes out of its NIC on two streams: %.0f us\n", us);
    EXPECT_GE(us, 0.95 * 2 * one_us) << "two pushes out of one NIC must share its bandwidth";
  }

  // Two-sided traffic held to the link: two receives on rank 2 (from 0 and 1) take two
  // transfers' time; the hold does nothing once the link time has passed.
  heap.barrier(s);
  s.synchronize();
  if (me == 2) {
    start.record(s);
    const int a = heap.reserve_link(0, bytes, s);
    const int b = heap.reserve_link(1, bytes, s);
    heap.hold_for_link(a, s);
    heap.hold_for_link(b, s);
    end.record(s);
    s.synchronize();
    const double us = 1000.0 * end.elapsed_ms_since(start);
    EXPECT_GE(us, 0.99 * 2 * one_us) << "two reservations on one ingress";
    EXPECT_LT(us, 4 * one_us) << "held far longer than the link";
    EXPECT_EQ(heap.reserve_link(2, bytes, s), -1) << "no link to itself";
  }
  heap.barrier(s);
  s.synchronize();
  heap.check_errors();
}

}  // namespace
}  // namespace tessera
