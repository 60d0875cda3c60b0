// Multi-process GPU tests of the sequence-parallel attention executor (SpAttention on the cuda
// backend): every method, two- and one-sided where it exists, in bf16 on up to 4 GPUs, checked
// against a float32 reference of the whole sequence with FlashAttention-3's rule (max error
// within 2x the error of a reference computed in bf16 precision, plus the output rounding);
// the same on two emulated machines (NCCL's network transport, paced one-sided traffic); and
// run() captured in a CUDA graph and replayed with new inputs.
//
// Structure (as comm_gpu_test.cc): every SpGpu.X test re-launches this binary as one process
// per GPU with --gtest_filter=SpGpuWorker.X; each worker makes its rank context, runs, checks
// its own output shard and the joint output, and exits non-zero on failure.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_workers.h"
#include "tessera/attn/reference.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/stream.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::sp {
namespace {

// ---------------------------------------------------------------------------------------------
// Parent side

int num_gpus_for_test() {
  return testing::gpus_for_test(4);
}

// Runs SpGpuWorker.<test> on `num_ranks` processes; fails when any worker fails.
void run_workers(const std::string& test, int num_ranks,
                 std::vector<std::pair<std::string, std::string>> env = {}) {
  testing::run_gpu_workers("SpGpuWorker", test, num_ranks, 60000, std::move(env));
}

#define REQUIRE_GPUS(n) TESSERA_REQUIRE_GPUS(num_gpus_for_test(), n)

TEST(SpGpu, EveryMethodBf16) {
  REQUIRE_GPUS(2);
  run_workers("EveryMethodBf16", num_gpus_for_test());
}
TEST(SpGpu, EmulatedTwoMachines) {
  REQUIRE_GPUS(2);
  run_workers("EmulatedTwoMachines", num_gpus_for_test() / 2 * 2);
}
TEST(SpGpu, IpcHeapOneSided) {
  REQUIRE_GPUS(2);
  run_workers("IpcHeapOneSided", num_gpus_for_test());
}
TEST(SpGpu, CudaGraphCapture) {
  REQUIRE_GPUS(2);
  run_workers("CudaGraphCapture", num_gpus_for_test());
}

// ---------------------------------------------------------------------------------------------
// Worker side

#define WORKER_ONLY()                                                                        \
  do {                                                                                       \
    if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by SpGpu.*"; \
  } while (0)

std::unique_ptr<RankContext> make_context(const ContextOptions& options) {
  return create_cuda_context(bootstrap_from_launch(detect_launch()), options);
}

// After every rank arrived, exit without destructors (a failed rank may have left NCCL or
// NVSHMEM unusable; their teardown would then hang).
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

struct ShapeCase {
  int64_t seq_len = 0;
  int64_t joint = 0;
  int heads = 8;
  int kv_heads = 8;
  int head_dim = 128;
  bool causal = false;
  DType dtype = DType::kBF16;

  std::string to_string() const {
    return str("L", seq_len, " J", joint, " H", heads, "/", kv_heads, " D", head_dim,
               causal ? " causal" : "", " ", dtype_name(dtype));
  }
};

// The whole sequence [joint; image] (B = 1), its float32 reference and the reference computed
// in the input precision (for the tolerance).
struct Problem {
  ShapeCase shape;
  std::vector<float> q, k, v;  // [1, T, H|Hkv, D], values representable in the dtype
  attn::ReferenceResult f32, low;
};

Problem make_problem(const ShapeCase& s, uint32_t seed) {
  Problem p;
  p.shape = s;
  const int64_t T = s.joint + s.seq_len;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, int heads) {
    x.resize(size_t(T * heads * s.head_dim));
    for (float& e : x) e = round_to_dtype(s.dtype, dist(rng));
  };
  fill(p.q, s.heads);
  fill(p.k, s.kv_heads);
  fill(p.v, s.kv_heads);
  const TensorView q(p.q.data(), DType::kF32, Device::cpu(), {1, T, s.heads, s.head_dim});
  const TensorView k(p.k.data(), DType::kF32, Device::cpu(), {1, T, s.kv_heads, s.head_dim});
  const TensorView v(p.v.data(), DType::kF32, Device::cpu(), {1, T, s.kv_heads, s.head_dim});
  // The low-precision reference needs bf16 inputs to know its rounding.
  std::vector<uint16_t> qb(p.q.size()), kb(p.k.size()), vb(p.v.size());
  for (size_t i = 0; i < qb.size(); ++i) qb[i] = float_to_bf16_bits(p.q[i]);
  for (size_t i = 0; i < kb.size(); ++i) kb[i] = float_to_bf16_bits(p.k[i]);
  for (size_t i = 0; i < vb.size(); ++i) vb[i] = float_to_bf16_bits(p.v[i]);
  const TensorView ql(qb.data(), DType::kBF16, Device::cpu(), {1, T, s.heads, s.head_dim});
  const TensorView kl(kb.data(), DType::kBF16, Device::cpu(), {1, T, s.kv_heads, s.head_dim});
  const TensorView vl(vb.data(), DType::kBF16, Device::cpu(), {1, T, s.kv_heads, s.head_dim});
  const attn::MaskSpec mask = s.causal ? attn::MaskSpec::causal_at(0, 0) : attn::MaskSpec::none();
  const float scale = attn::default_softmax_scale(s.head_dim);
  const attn::KvChunk chunk{k, v, mask};
  const attn::KvChunk chunk_low{kl, vl, mask};
  p.f32 = attn::reference_attention(q, std::span<const attn::KvChunk>(&chunk, 1), scale);
  p.low = attn::reference_attention(ql, std::span<const attn::KvChunk>(&chunk_low, 1), scale,
                                    attn::ReferencePrecision::kInputRounding);
  return p;
}

PlanRequest make_request(const ShapeCase& s, Method method, CommMode comm) {
  PlanRequest r;
  r.batch = 1;
  r.seq_len = s.seq_len;
  r.heads = s.heads;
  r.kv_heads = s.kv_heads;
  r.head_dim = s.head_dim;
  r.dtype = s.dtype;
  r.causal = s.causal;
  r.joint_tokens = s.joint;
  r.options.method = method;
  r.options.comm = comm;
  return r;
}

std::vector<int64_t> positions_of(const std::vector<TokenRun>& runs) {
  std::vector<int64_t> pos;
  for (const TokenRun& r : runs)
    for (int64_t i = 0; i < r.count; ++i) pos.push_back(r.at(i));
  return pos;
}

// A device tensor [1, rows, heads, D] holding the rows of `full` at `positions`.
Tensor upload_rows(const std::vector<float>& full, const ShapeCase& s, int heads,
                   const std::vector<int64_t>& positions, const RankContext& ctx) {
  const int64_t rows = int64_t(positions.size());
  std::vector<uint16_t> host(size_t(rows * heads * s.head_dim));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t e = 0; e < heads * s.head_dim; ++e)
      host[size_t(i * heads * s.head_dim + e)] =
          float_to_bf16_bits(full[size_t(positions[i] * heads * s.head_dim + e)]);
  Tensor t = Tensor::empty({1, rows, heads, s.head_dim}, s.dtype, ctx.device);
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(t.data(), host.data(), host.size() * 2, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  return t;
}

// A device output [1, rows, H, D] filled with NaN (bf16 0xFFFF).
Tensor poisoned_output(const ShapeCase& s, int64_t rows, const RankContext& ctx) {
  Tensor t = Tensor::empty({1, rows, s.heads, s.head_dim}, s.dtype, ctx.device);
  EXPECT_EQ(cudaMemset(t.data(), 0xFF, size_t(rows * s.heads * s.head_dim) * 2), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memset's stream is not the layer's
  return t;
}

struct Errors {
  double max_error = 0.0;
  double tolerance = 0.0;  // FA3 rule over the same elements
  int64_t unwritten = 0;
};

void compare(const Tensor& out, const Problem& p, const std::vector<int64_t>& positions,
             Errors& e) {
  const ShapeCase& s = p.shape;
  const int64_t rows = int64_t(positions.size());
  const int64_t row_elems = s.heads * s.head_dim;
  std::vector<uint16_t> host(size_t(rows * row_elems));
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(host.data(), out.data(), host.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  double low_err = 0.0, noise = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t x = 0; x < row_elems; ++x) {
      const size_t ref_index = size_t(positions[i] * row_elems + x);
      const float want = p.f32.o[ref_index];
      const float got = bf16_bits_to_float(host[size_t(i * row_elems + x)]);
      if (!std::isfinite(got)) {
        ++e.unwritten;
        continue;
      }
      e.max_error = std::max(e.max_error, double(std::fabs(got - want)));
      low_err =
          std::max(low_err, double(std::fabs(round_to_dtype(s.dtype, p.low.o[ref_index]) - want)));
      noise = std::max(noise, double(std::fabs(round_to_dtype(s.dtype, want) - want)));
    }
  e.tolerance = std::max(e.tolerance, 2 * low_err + noise + 1e-6);
}

// One layer's tensors on this rank.
struct LayerTensors {
  std::vector<int64_t> pos, joint_pos;
  Tensor q, k, v, o, jq, jk, jv, jo;
};

LayerTensors make_tensors(const SpAttention& layer, const Problem& p, const RankContext& ctx) {
  const ShapeCase& s = p.shape;
  LayerTensors t;
  t.pos = positions_of(layer.local_tokens());
  for (int64_t j = 0; j < s.joint; ++j) t.joint_pos.push_back(j);
  t.q = upload_rows(p.q, s, s.heads, t.pos, ctx);
  t.k = upload_rows(p.k, s, s.kv_heads, t.pos, ctx);
  t.v = upload_rows(p.v, s, s.kv_heads, t.pos, ctx);
  t.o = poisoned_output(s, int64_t(t.pos.size()), ctx);
  if (s.joint > 0) {
    t.jq = upload_rows(p.q, s, s.heads, t.joint_pos, ctx);
    t.jk = upload_rows(p.k, s, s.kv_heads, t.joint_pos, ctx);
    t.jv = upload_rows(p.v, s, s.kv_heads, t.joint_pos, ctx);
    t.jo = poisoned_output(s, s.joint, ctx);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return t;
}

SpAttentionTensors views(const LayerTensors& t) {
  SpAttentionTensors v{t.q, t.k, t.v, t.o, {}, {}, {}, {}};
  if (!t.joint_pos.empty()) {
    v.joint_q = t.jq;
    v.joint_k = t.jk;
    v.joint_v = t.jv;
    v.joint_o = t.jo;
  }
  return v;
}

void expect_correct(const LayerTensors& t, const Problem& p, const std::string& what, int rank) {
  Errors e;
  compare(t.o, p, t.pos, e);
  if (!t.joint_pos.empty()) compare(t.jo, p, t.joint_pos, e);
  EXPECT_EQ(e.unwritten, 0) << what << ": output elements left unwritten (NaN)";
  EXPECT_LE(e.max_error, e.tolerance)
      << what << ": max error " << e.max_error << " vs FA3 tolerance " << e.tolerance;
  std::printf("[rank %d] %s: max error %.3g (tolerance %.3g)\n", rank, what.c_str(), e.max_error,
              e.tolerance);
}

// The bf16 bit patterns of a device tensor (empty for an absent one).
std::vector<uint16_t> download_bits(const Tensor& t) {
  std::vector<uint16_t> host(t.view().empty() ? 0 : size_t(t.view().numel()));
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(host.data(), t.data(), host.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return host;
}

struct MethodCase {
  Method method;
  CommMode comm;
};

const MethodCase kMethods[] = {
    {Method::kRing, CommMode::kTwoSided},    {Method::kRing, CommMode::kOneSided},
    {Method::kUlysses, CommMode::kTwoSided}, {Method::kUlysses, CommMode::kOneSided},
    {Method::kUsp, CommMode::kTwoSided},     {Method::kUsp, CommMode::kOneSided},
    {Method::kTas, CommMode::kTwoSided},     {Method::kTas, CommMode::kOneSided},
    {Method::kTorus, CommMode::kTwoSided},   {Method::kTorus, CommMode::kOneSided},
    {Method::kMesh, CommMode::kTwoSided},    {Method::kAuto, CommMode::kTwoSided},
};

// Runs every method on `shape`; kUnsupported (e.g. Ulysses with fewer heads than ranks, Torus
// on a single machine with T = 1 is fine) is reported and skipped.
void check_every_method(RankContext& ctx, const ShapeCase& shape, uint32_t seed) {
  const Problem p = make_problem(shape, seed);
  for (const MethodCase& m : kMethods) {
    const std::string what = str(method_name(m.method), " ", comm_mode_name(m.comm), " on ",
                                 ctx.size, " GPUs, ", shape.to_string());
    std::unique_ptr<SpAttention> layer;
    try {
      layer = SpAttention::create(ctx, make_request(shape, m.method, m.comm));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kUnsupported) {
        std::printf("%s: not applicable: %s\n", what.c_str(), e.what());
        continue;
      }
      ADD_FAILURE() << what << ": " << e.what();
      continue;
    }
    LayerTensors t = make_tensors(*layer, p, ctx);
    layer->run(views(t), ctx.stream);
    ctx.stream.synchronize();
    ctx.heap->check_errors();
    expect_correct(t, p, str(what, " [", layer->plan().summary(), "]"), ctx.rank);
    const std::vector<uint16_t> first_o = download_bits(t.o), first_jo = download_bits(t.jo);
    // A second run on fresh poison: buffers, signals and barriers are reusable, and the
    // output is bitwise the first run's (merges in plan order, never in arrival order).
    EXPECT_EQ(cudaMemset(t.o.data(), 0xFF, t.o.view().span_bytes()), cudaSuccess);
    if (!t.joint_pos.empty())
      EXPECT_EQ(cudaMemset(t.jo.data(), 0xFF, t.jo.view().span_bytes()), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    layer->run(views(t), ctx.stream);
    ctx.stream.synchronize();
    expect_correct(t, p, what + " (second run)", ctx.rank);
    EXPECT_TRUE(download_bits(t.o) == first_o) << what << ": second run not bitwise the first";
    EXPECT_TRUE(download_bits(t.jo) == first_jo) << what << ": joint output of the second run "
                                                 << "not bitwise the first";
  }
}

ContextOptions heap_options(const std::string& transport) {
  ContextOptions o;
  o.heap_transport = transport;
  o.heap_bytes = size_t(512) << 20;
  return o;
}

TEST(SpGpuWorker, EveryMethodBf16) {
  WORKER_ONLY();
  auto ctx = make_context(heap_options("auto"));
  // GQA 4, causal, joint tokens, L not divisible by P; then heads P may not divide, D 64.
  ShapeCase a;
  a.seq_len = 1021;
  a.joint = 77;
  a.heads = 8;
  a.kv_heads = 2;
  a.head_dim = 128;
  a.causal = true;
  check_every_method(*ctx, a, 1);
  ShapeCase b;
  b.seq_len = 766;
  b.heads = 6;
  b.kv_heads = 6;
  b.head_dim = 64;
  check_every_method(*ctx, b, 2);
  exit_worker_now(*ctx);
}

TEST(SpGpuWorker, EmulatedTwoMachines) {
  WORKER_ONLY();
  ContextOptions o = heap_options("auto");
  o.emulate_machines = 2;
  o.emulated_link.bandwidth_gbps = 50.0;
  o.emulated_link.latency_us = 5.0;
  o.emulated_link.preset = "custom";
  auto ctx = make_context(o);
  ShapeCase a;
  a.seq_len = 1001;
  a.joint = 31;
  a.heads = 8;
  a.kv_heads = 8;
  a.head_dim = 128;
  a.causal = true;
  check_every_method(*ctx, a, 3);
  exit_worker_now(*ctx);
}

TEST(SpGpuWorker, IpcHeapOneSided) {
  WORKER_ONLY();
  auto ctx = make_context(heap_options("ipc"));
  ShapeCase a;
  a.seq_len = 999;
  a.joint = 16;
  a.heads = 8;
  a.kv_heads = 2;
  a.head_dim = 64;
  a.causal = true;
  const Problem p = make_problem(a, 4);
  for (Method m : {Method::kRing, Method::kUlysses, Method::kUsp, Method::kTorus}) {
    const std::string what = str(method_name(m), " one-sided over ipc, ", a.to_string());
    auto layer = SpAttention::create(*ctx, make_request(a, m, CommMode::kOneSided));
    LayerTensors t = make_tensors(*layer, p, *ctx);
    layer->run(views(t), ctx->stream);
    ctx->stream.synchronize();
    ctx->heap->check_errors();
    expect_correct(t, p, what, ctx->rank);
  }
  exit_worker_now(*ctx);
}

// run() captured once in a CUDA graph, replayed with new inputs written into the same
// buffers: a two-sided plan (NCCL on the executor's streams) and a one-sided one (heap).
TEST(SpGpuWorker, CudaGraphCapture) {
  WORKER_ONLY();
  auto ctx = make_context(heap_options("auto"));
  ShapeCase s;
  s.seq_len = 1024 + 3;
  s.joint = 64;
  s.heads = 8;
  s.kv_heads = 4;
  s.head_dim = 128;
  s.causal = false;
  const Problem first = make_problem(s, 5);
  const Problem second = make_problem(s, 6);
  for (const MethodCase& m : {MethodCase{Method::kUsp, CommMode::kTwoSided},
                              MethodCase{Method::kMesh, CommMode::kTwoSided},
                              MethodCase{Method::kTas, CommMode::kOneSided}}) {
    const std::string what =
        str(method_name(m.method), " ", comm_mode_name(m.comm), " in a CUDA graph");
    auto layer = SpAttention::create(*ctx, make_request(s, m.method, m.comm));
    Stream stream = Stream::create_cuda(ctx->device.index);
    auto stream_of = [&] { return static_cast<cudaStream_t>(stream.cuda_stream()); };
    LayerTensors t = make_tensors(*layer, first, *ctx);
    // Eager warm-up, then capture.
    layer->run(views(t), stream);
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream_of(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    try {
      layer->run(views(t), stream);
    } catch (const Error& e) {
      cudaStreamEndCapture(stream_of(), &graph);
      FAIL() << what << ": run() failed under capture: " << e.what();
    }
    ASSERT_EQ(cudaStreamEndCapture(stream_of(), &graph), cudaSuccess) << what;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << what;
    for (const Problem* p : {&second, &first}) {
      LayerTensors fresh = make_tensors(*layer, *p, *ctx);
      // Same buffers as captured: copy the new inputs and poison into them.
      auto copy = [](const Tensor& dst, const Tensor& src) {
        if (src.view().numel() == 0) return;
        EXPECT_EQ(
            cudaMemcpy(dst.data(), src.data(), src.view().span_bytes(), cudaMemcpyDeviceToDevice),
            cudaSuccess);
      };
      copy(t.q, fresh.q);
      copy(t.k, fresh.k);
      copy(t.v, fresh.v);
      copy(t.o, fresh.o);
      if (s.joint > 0) {
        copy(t.jq, fresh.jq);
        copy(t.jk, fresh.jk);
        copy(t.jv, fresh.jv);
        copy(t.jo, fresh.jo);
      }
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream_of()), cudaSuccess) << what;
      stream.synchronize();
      ctx->heap->check_errors();
      expect_correct(t, *p, str(what, " (replay)"), ctx->rank);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  exit_worker_now(*ctx);
}

}  // namespace
}  // namespace tessera::sp
