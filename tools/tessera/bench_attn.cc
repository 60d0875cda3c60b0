// `tessera bench attn`: forward attention throughput over a shape sweep, with torch SDPA
// (cuDNN and flash backends) measured in the same run on identical inputs, and ratios.
//
// Cases are strings "b<B>_h<Hq>[_kv<Hkv>]_d<D>_l<L>[_causal][_fp16][_fold<N>][_varlen][_fp8]"
// (Lq = Lkv = L). "_fold<N>" times accumulate() folding the KV split into N chunks in one launch,
// next to the one-call forward over the whole KV (the chunked path distributed attention uses).
// "_varlen" packs B sequences of different lengths, L/2 to 3L/2 (B L tokens in all), into one
// forward_varlen call; compare its TFLOP/s with the case without "_varlen" (the same tokens in
// B equal sequences). "_fp8" quantizes the bf16 inputs per head to e4m3 (on the host) and times
// forward_fp8 (V's transposed copy included) beside the bf16 forward of the same inputs, with
// the FP8 output's error against the bf16 one. The anchor skips fold, varlen and fp8 cases.
// Inputs: element e of q/k/v (contiguous [B, L, H, D]) is a hash of (seed, tensor, e) mapped
// to [-1, 1) and rounded to the dtype; bench/anchors/torch_sdpa.py generates the same bits,
// and both print a checksum of the first elements to prove it.
// Timing: CUDA events around each call, median of many; FLOPs = 4 B Hq D Lq Lkv, halved for
// causal (the usual convention, so numbers compare with other reports). Correctness: sampled
// query rows against the float32 reference with FlashAttention-3's tolerance rule.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_record.h"
#include "command.h"
#include "options.h"
#include "tessera/attn/attention.h"
#include "tessera/attn/fp8.h"
#include "tessera/attn/reference.h"
#include "tessera/attn/varlen.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/memory.h"
#include "tessera/runtime/stream.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::cli {
namespace {

using attn::KvChunk;
using attn::MaskSpec;

const char* kDefaultCases =
    "b1_h24_d128_l4608,b1_h24_d128_l16384,b1_h24_d128_l36864,b1_h24_d128_l65536,"
    "b1_h24_d64_l65536,b1_h32_d128_l32768,b1_h32_kv8_d128_l32768,b1_h24_d128_l16384_causal,"
    "b1_h24_d128_l65536_causal,b1_h24_d128_l16384_fp16,b1_h24_d64_l65536_fp16,"
    "b1_h24_d256_l16384,b1_h24_d256_l16384_causal,b1_h24_d128_l16384_fold4,b4_h24_d128_l4096,"
    "b4_h24_d128_l4096_varlen,b4_h24_d128_l4096_causal,b4_h24_d128_l4096_varlen_causal,"
    "b16_h32_kv8_d128_l512_varlen_causal,b1_h24_d128_l16384_fp8,b1_h24_d128_l16384_causal_fp8,"
    "b1_h24_d256_l16384_fp8";

struct AttnCase {
  std::string name;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, head_dim = 128, len = 1;
  bool causal = false;
  DType dtype = DType::kBF16;
  int fold = 0;  // > 0: accumulate over this many chunks
  bool varlen = false;
  bool fp8 = false;  // also forward_fp8 on the inputs quantized per head
};

// The varlen case's sequence lengths: from L/2 up to 3L/2 in even steps, B L tokens in all.
std::vector<int64_t> varlen_lengths(const AttnCase& c) {
  std::vector<int64_t> lens;
  int64_t sum = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = c.batch == 1 ? c.len : c.len / 2 + c.len * b / (c.batch - 1);
    lens.push_back(b + 1 == c.batch ? c.batch * c.len - sum : len);
    sum += len;
  }
  return lens;
}

AttnCase parse_case(const std::string& text) {
  AttnCase c;
  c.name = text;
  bool has_kv = false;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('_', start);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(start, end - start);
    start = end + 1;
    auto number = [&](size_t skip) {
      char* stop = nullptr;
      errno = 0;
      const long long v = std::strtoll(part.c_str() + skip, &stop, 10);
      TESSERA_CHECK_ARG(stop && *stop == '\0' && errno != ERANGE && v > 0 && v <= INT32_MAX,
                        "--cases: '", part, "' in '", text, "': expected a number from 1 to ",
                        INT32_MAX, " after '", part.substr(0, skip), "'");
      return int64_t(v);
    };
    if (part == "causal") {
      c.causal = true;
    } else if (part == "fp16" || part == "f16") {
      c.dtype = DType::kF16;
    } else if (part == "bf16") {
      c.dtype = DType::kBF16;
    } else if (part == "varlen") {
      c.varlen = true;
    } else if (part == "fp8") {
      c.fp8 = true;
    } else if (part.rfind("fold", 0) == 0) {
      c.fold = int(number(4));
    } else if (part.rfind("kv", 0) == 0) {
      c.heads_kv = number(2);
      has_kv = true;
    } else if (part[0] == 'b') {
      c.batch = number(1);
    } else if (part[0] == 'h') {
      c.heads_q = number(1);
    } else if (part[0] == 'd') {
      c.head_dim = number(1);
    } else if (part[0] == 'l') {
      c.len = number(1);
    } else {
      throw_error(ErrorCode::kInvalidArgument,
                  str("--cases: unknown part '", part, "' in '", text,
                      "': expected b<B>_h<H>[_kv<Hkv>]_d<D>_l<L>[_causal][_fp16][_fold<N>]"
                      "[_varlen][_fp8]"));
    }
  }
  if (!has_kv) c.heads_kv = c.heads_q;
  TESSERA_CHECK_ARG(c.heads_q % c.heads_kv == 0, "--cases: '", text, "': Hq ", c.heads_q,
                    " is not a multiple of Hkv ", c.heads_kv);
  TESSERA_CHECK_ARG(int(c.varlen) + int(c.fold > 0) + int(c.fp8) <= 1, "--cases: '", text,
                    "': varlen, fold and fp8 do not combine");
  TESSERA_CHECK_ARG(!c.fp8 || c.dtype == DType::kBF16, "--cases: '", text,
                    "': fp8 quantizes bf16 inputs (no fp16)");
  return c;
}

// The input generator shared with bench/anchors/torch_sdpa.py (keep the two in step).
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x045d9f3bu;
  x ^= x >> 16;
  x *= 0x045d9f3bu;
  x ^= x >> 16;
  return x;
}
float input_value(uint32_t seed, uint32_t tensor, uint64_t index) {
  const uint32_t offset = seed * 0x9E3779B1u + tensor * 0x85EBCA77u;
  const uint32_t h = mix32(uint32_t(index) + offset);
  return float(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

Tensor make_input(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, uint32_t tensor) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  const int64_t n = t.view().numel();
  const int threads = int(std::max(1u, std::min(32u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      for (int64_t i = n * w / threads; i < n * (w + 1) / threads; ++i)
        store_from_float(t.data(), dtype, i, input_value(seed, tensor, uint64_t(i)));
    });
  }
  for (auto& th : pool) th.join();
  return t;
}

double checksum(const Tensor& t) {
  double s = 0;
  const int64_t n = std::min<int64_t>(t.view().numel(), 4096);
  for (int64_t i = 0; i < n; ++i) s += load_as_float(t.data(), t.view().dtype(), i);
  return s;
}

double flops(const AttnCase& c) {
  double pairs = double(c.batch) * double(c.len) * double(c.len);
  if (c.varlen) {
    pairs = 0;
    for (int64_t len : varlen_lengths(c)) pairs += double(len) * double(len);
  }
  const double full = 4.0 * double(c.heads_q) * double(c.head_dim) * pairs;
  return c.causal ? full / 2 : full;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()
             ? 0
             : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

// Times fn() with events: warm-up, then enough iterations for ~target_ms (at least min_iters).
double time_us(const Stream& stream, const std::function<void()>& fn, int warmup, int min_iters,
               double target_ms) {
  Event start = Event::create(stream, true), stop = Event::create(stream, true);
  for (int i = 0; i < warmup; ++i) fn();
  start.record(stream);
  fn();
  stop.record(stream);
  stop.synchronize(wait_timeout_ms(), "bench attn: warm-up call");
  const double once_ms = std::max(1e-3, double(stop.elapsed_ms_since(start)));
  const int iters = std::clamp(int(target_ms / once_ms), min_iters, 500);
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize(wait_timeout_ms(), "bench attn: timed call");
    samples.push_back(1000.0 * stop.elapsed_ms_since(start));
  }
  return median(samples);
}

struct RowCheck {
  bool ok = true;
  double max_err = 0, tolerance = 0;
};

// Compares sampled query rows (batch 0, first and last head) with the float32 reference. q, k,
// v, o: [1+, c.len, H, D] contiguous; lse: head h's rows from h * lse_head_stride.
RowCheck check_rows(const AttnCase& c, const TensorView& q, const TensorView& k,
                    const TensorView& v, const TensorView& o, const TensorView& lse,
                    int64_t lse_head_stride, int num_rows) {
  RowCheck r;
  const float scale = attn::default_softmax_scale(c.head_dim);
  auto round = [&](float x) {
    return c.dtype == DType::kBF16 ? bf16_bits_to_float(float_to_bf16_bits(x))
                                   : fp16_bits_to_float(float_to_fp16_bits(x));
  };
  for (int s = 0; s < num_rows; ++s) {
    const int64_t row = num_rows == 1 ? c.len - 1 : (c.len - 1) * s / (num_rows - 1);
    for (int64_t h : {int64_t(0), c.heads_q - 1}) {
      const int64_t hk = h / (c.heads_q / c.heads_kv);
      const MaskSpec mask = c.causal ? MaskSpec::causal_at(row, 0) : MaskSpec::none();
      KvChunk one{k.slice(0, 0, 1).slice(2, hk, 1), v.slice(0, 0, 1).slice(2, hk, 1), mask};
      TensorView qrow = q.slice(0, 0, 1).slice(1, row, 1).slice(2, h, 1);
      attn::ReferenceResult f32 =
          attn::reference_attention(qrow, std::span<const KvChunk>(&one, 1), scale);
      attn::ReferenceResult low = attn::reference_attention(
          qrow, std::span<const KvChunk>(&one, 1), scale, attn::ReferencePrecision::kInputRounding);
      double err_low = 0, noise = 0, err = 0;
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const float ref = f32.o_at(0, 0, 0, d);
        const float got =
            load_as_float(o.data(), c.dtype, ((row * c.heads_q) + h) * c.head_dim + d);
        err_low = std::max(err_low, double(std::abs(round(low.o_at(0, 0, 0, d)) - ref)));
        noise = std::max(noise, double(std::abs(round(ref) - ref)));
        err = std::isfinite(got) ? std::max(err, double(std::abs(got - ref))) : INFINITY;
      }
      const float l = lse.data_as<float>()[h * lse_head_stride + row];
      if (!(std::abs(l - f32.lse_at(0, 0, 0)) <= 1e-3 + 1e-5 * std::abs(l))) r.ok = false;
      const double tol = 2 * err_low + noise + 1e-6;
      r.max_err = std::max(r.max_err, err);
      r.tolerance = std::max(r.tolerance, tol);
      if (!(err <= tol)) r.ok = false;
    }
  }
  return r;
}

struct Result {
  AttnCase c;
  std::string impl;
  double median_us = 0, tflops = 0;
  bool ok = false;
  double max_err = 0, tolerance = 0, input_checksum = 0;
  double rms_err = NAN, x_bf16 = NAN;  // fp8: against the bf16 forward of the same inputs
};

std::vector<Result> run_varlen_case(const AttnCase& c, const Stream& stream, uint32_t seed,
                                    int warmup, int min_iters, double target_ms, int check);
Result run_fp8(const AttnCase& c, const Stream& stream, const Tensor& hq, const Tensor& hk,
               const Tensor& hv, const Tensor& o_bf16, const Result& bf16, int warmup,
               int min_iters, double target_ms);

std::vector<Result> run_tessera_case(const AttnCase& c, const Stream& stream, uint32_t seed,
                                     int warmup, int min_iters, double target_ms, int check) {
  if (c.varlen) return run_varlen_case(c, stream, seed, warmup, min_iters, target_ms, check);
  const Device dev = stream.backend() == Backend::kCuda ? stream.device() : Device::cpu();
  const std::vector<int64_t> qshape{c.batch, c.len, c.heads_q, c.head_dim};
  const std::vector<int64_t> kvshape{c.batch, c.len, c.heads_kv, c.head_dim};
  Tensor hq = make_input(qshape, c.dtype, seed, 0);
  Tensor hk = make_input(kvshape, c.dtype, seed, 1);
  Tensor hv = make_input(kvshape, c.dtype, seed, 2);
  auto upload = [&](const Tensor& h) {
    if (dev.kind == DeviceKind::kCpu) return h;
    Tensor d = Tensor::empty(std::vector<int64_t>{h.view().size(0), h.view().size(1),
                                                  h.view().size(2), h.view().size(3)},
                             h.view().dtype(), dev);
    copy_bytes(d.data(), h.data(), size_t(h.view().numel()) * h.view().element_size(), stream);
    return d;
  };
  Tensor q = upload(hq), k = upload(hk), v = upload(hv);
  Tensor o = Tensor::empty(qshape, c.dtype, dev);
  Tensor lse = Tensor::empty({c.batch, c.heads_q, c.len}, DType::kF32, dev);
  const size_t o_bytes = size_t(o.view().numel()) * o.view().element_size();
  const size_t lse_bytes = size_t(lse.view().numel()) * 4;
  fill_bytes(o.data(), 0xFF, o_bytes, stream);  // poison: NaN
  fill_bytes(lse.data(), 0xFF, lse_bytes, stream);
  const MaskSpec mask = c.causal ? MaskSpec::causal_at(0, 0) : MaskSpec::none();
  const float scale = attn::default_softmax_scale(c.head_dim);
  auto download_check = [&](const Tensor& out, const Tensor& out_lse) {
    Tensor ho = Tensor::empty(qshape, c.dtype, Device::cpu());
    Tensor hl = Tensor::empty({c.batch, c.heads_q, c.len}, DType::kF32, Device::cpu());
    stream.synchronize();
    copy_bytes(ho.data(), out.data(), o_bytes, stream);
    copy_bytes(hl.data(), out_lse.data(), lse_bytes, stream);
    stream.synchronize();
    return check_rows(c, hq, hk, hv, ho, hl, c.len, check);
  };

  std::vector<Result> results;
  auto forward_once = [&] { attn::forward(q, k, v, o, lse, mask, scale, stream); };
  forward_once();
  RowCheck fwd_check = download_check(o, lse);
  Result fwd{c,
             "tessera sm90",
             0,
             0,
             fwd_check.ok,
             fwd_check.max_err,
             fwd_check.tolerance,
             checksum(hq) + checksum(hk) + checksum(hv)};
  fwd.median_us = time_us(stream, forward_once, warmup, min_iters, target_ms);
  fwd.tflops = flops(c) / (fwd.median_us * 1e-6) / 1e12;
  results.push_back(fwd);
  if (c.fp8)
    results.push_back(run_fp8(c, stream, hq, hk, hv, o, fwd, warmup, min_iters, target_ms));

  if (c.fold > 0) {
    // The same attention folded from c.fold KV chunks (one launch) into an f32 state.
    std::vector<KvChunk> chunks;
    for (int i = 0; i < c.fold; ++i) {
      const int64_t s = c.len * i / c.fold, e = c.len * (i + 1) / c.fold;
      MaskSpec m = mask;
      m.kv_start = s;
      chunks.push_back({k.view().slice(1, s, e - s), v.view().slice(1, s, e - s), m});
    }
    Tensor so = Tensor::empty(qshape, DType::kF32, dev);
    attn::AttnState state{so, lse};
    fill_bytes(so.data(), 0xFF, size_t(so.view().numel()) * 4, stream);
    fill_bytes(lse.data(), 0xFF, lse_bytes, stream);
    fill_bytes(o.data(), 0xFF, o_bytes, stream);
    attn::init_state(state, stream);
    attn::accumulate(q, chunks, state, scale, stream);
    attn::finalize(state, o, stream);
    RowCheck fold_check = download_check(o, lse);
    Result fold{c,
                str("tessera fold", c.fold),
                0,
                0,
                fold_check.ok,
                fold_check.max_err,
                fold_check.tolerance,
                fwd.input_checksum};
    // Timed: the accumulate launch alone (init_state/finalize are separate row kernels).
    fold.median_us = time_us(
        stream, [&] { attn::accumulate(q, chunks, state, scale, stream); }, warmup, min_iters,
        target_ms);
    fold.tflops = flops(c) / (fold.median_us * 1e-6) / 1e12;
    results.push_back(fold);
  }
  return results;
}

// The fp8 case: q, k, v (host bf16) quantized per head, forward_fp8 timed (V's transposed copy
// included), its output compared element by element with the bf16 forward's (o_bf16, device).
// ok: finite everywhere and within 2^-4 of max|v| = 1 (P and V are rounded to e4m3).
Result run_fp8(const AttnCase& c, const Stream& stream, const Tensor& hq, const Tensor& hk,
               const Tensor& hv, const Tensor& o_bf16, const Result& bf16, int warmup,
               int min_iters, double target_ms) {
  const Device dev = stream.device();
  auto shape_of = [](const Tensor& t) {
    std::vector<int64_t> shape;
    for (int d = 0; d < t.view().ndim(); ++d) shape.push_back(t.view().size(d));
    return shape;
  };
  auto quantize = [&](const Tensor& h, std::vector<float>& descales) {
    descales = attn::fp8_head_descales(h);
    Tensor h8 = Tensor::empty(shape_of(h), DType::kFP8E4M3, Device::cpu());
    attn::quantize_fp8_per_head(h, descales, h8);
    Tensor d = Tensor::empty(shape_of(h), DType::kFP8E4M3, dev);
    copy_bytes(d.data(), h8.data(), size_t(h8.view().numel()), stream);
    return d;
  };
  auto on_device = [&](const std::vector<float>& values) {
    Tensor d = Tensor::empty({int64_t(values.size())}, DType::kF32, dev);
    copy_bytes(d.data(), values.data(), values.size() * 4, stream);
    return d;
  };
  std::vector<float> dq, dk, dv;
  Tensor q8 = quantize(hq, dq), k8 = quantize(hk, dk), v8 = quantize(hv, dv);
  Tensor dq_t = on_device(dq), dk_t = on_device(dk), dv_t = on_device(dv);
  const attn::Fp8DescaleTensors descales{dq_t, dk_t, dv_t};
  Tensor workspace =
      Tensor::empty({attn::fp8_workspace_bytes(v8, stream)}, DType::kU8, dev);
  Tensor o = Tensor::empty(shape_of(o_bf16), DType::kBF16, dev);
  const size_t o_bytes = size_t(o.view().numel()) * 2;
  fill_bytes(o.data(), 0xFF, o_bytes, stream);
  const MaskSpec mask = c.causal ? MaskSpec::causal_at(0, 0) : MaskSpec::none();
  const float scale = attn::default_softmax_scale(c.head_dim);
  auto run = [&] {
    attn::forward_fp8(q8, k8, v8, descales, mask, scale, o, TensorView(), workspace, stream);
  };
  run();
  Tensor got = Tensor::empty(shape_of(o), DType::kBF16, Device::cpu());
  Tensor want = Tensor::empty(shape_of(o), DType::kBF16, Device::cpu());
  stream.synchronize();
  copy_bytes(got.data(), o.data(), o_bytes, stream);
  copy_bytes(want.data(), o_bf16.data(), o_bytes, stream);
  stream.synchronize();
  Result r = bf16;
  r.impl = "tessera fp8";
  r.tolerance = 1.0 / 16;
  r.max_err = 0;
  double sum_sq = 0;
  bool finite = true;
  const int64_t n = o.view().numel();
  for (int64_t i = 0; i < n; ++i) {
    const double a = load_as_float(got.data(), DType::kBF16, i);
    const double e = std::abs(a - load_as_float(want.data(), DType::kBF16, i));
    finite &= std::isfinite(a);
    r.max_err = std::max(r.max_err, e);
    sum_sq += e * e;
  }
  r.rms_err = std::sqrt(sum_sq / double(std::max<int64_t>(n, 1)));
  r.ok = finite && r.max_err <= r.tolerance;
  r.median_us = time_us(stream, run, warmup, min_iters, target_ms);
  r.tflops = flops(c) / (r.median_us * 1e-6) / 1e12;
  r.x_bf16 = r.tflops / bf16.tflops;
  return r;
}

// The varlen case: B packed sequences (varlen_lengths) through one forward_varlen call, timed
// beside one forward() a sequence ("tessera each"); sampled rows of the first sequence checked.
std::vector<Result> run_varlen_case(const AttnCase& c, const Stream& stream, uint32_t seed,
                                    int warmup, int min_iters, double target_ms, int check) {
  const Device dev = stream.backend() == Backend::kCuda ? stream.device() : Device::cpu();
  const std::vector<int64_t> lens = varlen_lengths(c);
  std::vector<int32_t> cu{0};
  int64_t longest = 0;
  for (int64_t len : lens) {
    cu.push_back(int32_t(cu.back() + len));
    longest = std::max(longest, len);
  }
  const int64_t total = cu.back();
  Tensor hq = make_input({1, total, c.heads_q, c.head_dim}, c.dtype, seed, 0);
  Tensor hk = make_input({1, total, c.heads_kv, c.head_dim}, c.dtype, seed, 1);
  Tensor hv = make_input({1, total, c.heads_kv, c.head_dim}, c.dtype, seed, 2);
  auto on_device = [&](const void* data, const std::vector<int64_t>& shape, DType dtype) {
    Tensor d = Tensor::empty(shape, dtype, dev);
    copy_bytes(d.data(), data, size_t(d.view().numel()) * d.view().element_size(), stream);
    return d;
  };
  const std::vector<int64_t> qshape{total, c.heads_q, c.head_dim};
  const std::vector<int64_t> kvshape{total, c.heads_kv, c.head_dim};
  Tensor q = on_device(hq.data(), qshape, c.dtype), k = on_device(hk.data(), kvshape, c.dtype),
         v = on_device(hv.data(), kvshape, c.dtype);
  Tensor cu_dev = on_device(cu.data(), {int64_t(cu.size())}, DType::kI32);
  Tensor o = Tensor::empty(qshape, c.dtype, dev);
  Tensor lse = Tensor::empty({c.heads_q, total}, DType::kF32, dev);
  const size_t o_bytes = size_t(o.view().numel()) * o.view().element_size();
  const size_t lse_bytes = size_t(lse.view().numel()) * 4;
  fill_bytes(o.data(), 0xFF, o_bytes, stream);
  fill_bytes(lse.data(), 0xFF, lse_bytes, stream);
  const float scale = attn::default_softmax_scale(c.head_dim);
  auto run = [&] {
    attn::forward_varlen(q, k, v, cu_dev, cu_dev, longest, longest, c.causal, scale, o, lse,
                         stream);
  };
  run();
  Tensor ho = Tensor::empty({1, total, c.heads_q, c.head_dim}, c.dtype, Device::cpu());
  Tensor hl = Tensor::empty({c.heads_q, total}, DType::kF32, Device::cpu());
  stream.synchronize();
  copy_bytes(ho.data(), o.data(), o_bytes, stream);
  copy_bytes(hl.data(), lse.data(), lse_bytes, stream);
  stream.synchronize();
  AttnCase first = c;  // the first sequence, checked as a batch of one
  first.len = lens[0];
  const RowCheck rc = check_rows(first, hq.view().slice(1, 0, lens[0]),
                                 hk.view().slice(1, 0, lens[0]), hv.view().slice(1, 0, lens[0]),
                                 ho.view().slice(1, 0, lens[0]), hl.view(), total, check);
  Result r{c, "tessera varlen", 0, 0, rc.ok, rc.max_err, rc.tolerance,
           checksum(hq) + checksum(hk) + checksum(hv)};
  r.median_us = time_us(stream, run, warmup, min_iters, target_ms);
  r.tflops = flops(c) / (r.median_us * 1e-6) / 1e12;
  // The same sequences, one forward() each (what a caller without varlen does): the launch
  // count and the short sequences' partial waves are what varlen saves.
  auto each = [&] {
    for (size_t b = 0; b < lens.size(); ++b) {
      const MaskSpec mask = c.causal ? MaskSpec::causal_at(0, 0) : MaskSpec::none();
      auto rows = [&](const Tensor& t) { return attn::packed_rows(t, cu[b], lens[b]); };
      attn::forward(rows(q), rows(k), rows(v), rows(o), TensorView(), mask, scale, stream);
    }
  };
  // Checked: bitwise varlen's output (the same tiles; attn GPU tests hold the kernel to it).
  fill_bytes(o.data(), 0xFF, o_bytes, stream);
  each();
  Tensor ho_each = Tensor::empty({1, total, c.heads_q, c.head_dim}, c.dtype, Device::cpu());
  stream.synchronize();
  copy_bytes(ho_each.data(), o.data(), o_bytes, stream);
  stream.synchronize();
  Result one_by_one = r;
  one_by_one.impl = "tessera each";
  one_by_one.ok = r.ok && std::memcmp(ho_each.data(), ho.data(), o_bytes) == 0;
  one_by_one.median_us = time_us(stream, each, warmup, min_iters, target_ms);
  one_by_one.tflops = flops(c) / (one_by_one.median_us * 1e-6) / 1e12;
  return {r, one_by_one};
}

// Runs the anchor script and collects its "RESULT case impl median_us tflops ok checksum" lines.
std::vector<Result> run_anchor(const std::string& command, const std::vector<AttnCase>& cases,
                               uint32_t seed, int warmup, int min_iters, double target_ms,
                               int check) {
  std::string names;
  for (const AttnCase& c : cases) {
    if (c.fold > 0 || c.varlen || c.fp8) continue;
    names += (names.empty() ? "" : ",") + c.name;
  }
  std::vector<Result> out;
  if (names.empty()) return out;
  const std::string cmd =
      str(command, " --cases ", names, " --seed ", seed, " --warmup ", warmup, " --min-iters ",
          min_iters, " --target-ms ", target_ms, " --check-rows ", check, " 2>&1");
  std::printf("# anchor: %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  TESSERA_CHECK(pipe != nullptr, ErrorCode::kSystem, "cannot run the anchor: ", cmd);
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) {
    char name[256], impl[128];
    double us = 0, tf = 0, sum = 0;
    int ok = 0;
    if (std::sscanf(line, "RESULT %255s %127s %lf %lf %d %lf", name, impl, &us, &tf, &ok, &sum) ==
        6) {
      Result r;
      r.c = parse_case(name);
      r.impl = str("torch sdpa ", impl);
      r.median_us = us;
      r.tflops = tf;
      r.ok = ok != 0;
      r.input_checksum = sum;
      out.push_back(r);
    } else {
      std::printf("#   %s", line);
    }
  }
  const int status = pclose(pipe);
  if (status != 0) std::printf("# anchor exited with status %d\n", status);
  return out;
}

std::string gpu_name() {
#ifdef TESSERA_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) return prop.name;
#endif
  return "cpu";
}

int run_bench_attn(const std::vector<std::string>& args, int, char**) {
  Options opt(
      "bench attn",
      {
          {"cases", kDefaultCases,
           "comma list of b<B>_h<H>[_kv<Hkv>]_d<D>_l<L>[_causal][_fp16][_fold<N>][_varlen][_fp8]"},
          {"seed", "1", "input generator seed (shared with the anchor)"},
          {"warmup", "3", "untimed calls per case"},
          {"min-iters", "10", "timed calls per case, at least"},
          {"target-ms", "400", "timed calls per case: about this much time"},
          {"check-rows", "4", "query rows checked against the f32 reference"},
          {"anchor", "python3 bench/anchors/torch_sdpa.py", "anchor command ('none': skip)"},
          {"json", "", "write records to this file"},
          {"cpu", "", "run on the cpu backend (tiny cases only)", true},
      });
  opt.parse(args);
  if (opt.help_requested()) {
    std::printf("%s", opt.usage().c_str());
    return 0;
  }
  std::vector<AttnCase> cases;
  for (const std::string& name : opt.list("cases")) cases.push_back(parse_case(name));
  const bool on_cpu = opt.flag("cpu") || !cuda_available();
  TESSERA_CHECK(!on_cpu || opt.flag("cpu"), ErrorCode::kUnsupported,
                "bench attn: no CUDA device; pass --cpu (and small --cases) to time the reference");
  const Stream stream = on_cpu ? Stream::cpu() : Stream::create_cuda(0);
  const uint32_t seed = uint32_t(opt.integer("seed", 0, UINT32_MAX));
  const int warmup = int(opt.integer("warmup", 0, 1000000));
  const int min_iters = int(opt.integer("min-iters", 1, 1000000));
  const double target_ms = opt.number("target-ms", 0, 3.6e6);
  const int check = int(opt.integer("check-rows", 0, INT32_MAX));
  const std::string gpu = on_cpu ? "cpu" : gpu_name();

  std::vector<Result> mine;
  for (const AttnCase& c : cases) {
    auto rs = run_tessera_case(c, stream, seed, warmup, min_iters, target_ms, check);
    for (const Result& r : rs)
      std::printf("  %-34s %-16s %10.1f us %8.1f TFLOP/s  %s (max err %.2e, tol %.2e)%s\n",
                  c.name.c_str(), r.impl.c_str(), r.median_us, r.tflops, r.ok ? "ok" : "WRONG",
                  r.max_err, r.tolerance,
                  std::isfinite(r.x_bf16)
                      ? str(" vs bf16: x", r.x_bf16, ", rms err ", r.rms_err).c_str()
                      : "");
    std::fflush(stdout);
    mine.insert(mine.end(), rs.begin(), rs.end());
  }
  std::vector<Result> anchors;
  if (!on_cpu && opt.text("anchor") != "none")
    anchors = run_anchor(opt.text("anchor"), cases, seed, warmup, min_iters, target_ms, check);

  auto find = [&](const std::string& name, const std::string& impl) -> const Result* {
    for (const Result& r : anchors)
      if (r.c.name == name && r.impl == impl) return &r;
    return nullptr;
  };
  std::vector<BenchRecord> records;
  bool all_ok = true, inputs_match = true;
  std::printf("\n# tessera bench attn on %s (TFLOP/s; causal counts half the pairs)\n",
              gpu.c_str());
  std::printf("# %-32s %-14s %10s %8s %8s %8s %8s %8s %s\n", "case", "impl", "median_us", "TFLOP/s",
              "cudnn", "flash", "x_cudnn", "x_flash", "ok");
  for (const Result& r : mine) {
    const Result* cudnn = find(r.c.name, "torch sdpa cudnn");
    const Result* flash = find(r.c.name, "torch sdpa flash");
    auto rate = [](const Result* a) { return a && a->tflops > 0 ? a->tflops : NAN; };
    const double x_cudnn = r.tflops / rate(cudnn), x_flash = r.tflops / rate(flash);
    std::printf("  %-32s %-14s %10.1f %8.1f %8.1f %8.1f %8.2f %8.2f %s\n", r.c.name.c_str(),
                r.impl.c_str(), r.median_us, r.tflops, rate(cudnn), rate(flash), x_cudnn, x_flash,
                r.ok ? "ok" : "WRONG");
    all_ok &= r.ok;
    for (const Result* a : {cudnn, flash})
      if (a &&
          std::abs(a->input_checksum - r.input_checksum) > 1e-6 * (1 + std::abs(r.input_checksum)))
        inputs_match = false;
    BenchRecord rec;
    rec.bench = "attn";
    rec.case_name = r.c.name;
    rec.impl = r.impl;
    rec.gpu = gpu;
    rec.num_gpus = on_cpu ? 0 : 1;
    rec.topology = "1x1";
    rec.median_us = r.median_us;
    rec.tflops = r.tflops;
    rec.ok = r.ok;
    rec.extra["max_err"] = r.max_err;
    rec.extra["tolerance"] = r.tolerance;
    rec.extra["input_checksum"] = r.input_checksum;
    if (std::isfinite(x_cudnn)) rec.extra["x_cudnn"] = x_cudnn;
    if (std::isfinite(x_flash)) rec.extra["x_flash"] = x_flash;
    if (std::isfinite(r.x_bf16)) rec.extra["x_bf16"] = r.x_bf16;
    if (std::isfinite(r.rms_err)) rec.extra["rms_err_vs_bf16"] = r.rms_err;
    records.push_back(rec);
  }
  for (const Result& a : anchors) {
    BenchRecord rec;
    rec.bench = "attn";
    rec.case_name = a.c.name;
    rec.impl = a.impl;
    rec.gpu = gpu;
    rec.num_gpus = 1;
    rec.topology = "1x1";
    rec.median_us = a.median_us;
    rec.tflops = a.tflops;
    rec.ok = a.ok;
    rec.extra["input_checksum"] = a.input_checksum;
    records.push_back(rec);
  }
  if (!anchors.empty())
    std::printf("# anchor inputs %s tessera's (checksums of the first 4096 elements of q, k, v)\n",
                inputs_match ? "match" : "DO NOT MATCH");
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return all_ok && inputs_match ? 0 : 1;
}

const CommandRegistration kBenchAttn("bench attn",
                                     "attention throughput vs torch SDPA (cuDNN, flash)",
                                     run_bench_attn);

}  // namespace
}  // namespace tessera::cli
