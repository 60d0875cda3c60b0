// Public attention entries (attention.h): validate every argument, then run the float32
// reference for cpu tensors or hand the validated jobs to the cuda backend.
#include "tessera/attn/attention.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attn/arg_checks.h"
#include "attn/attention_backend.h"
#include "tessera/attn/reference.h"
#include "tessera/core/error.h"

namespace tessera::attn {

namespace detail {

void check_on_stream(const TensorView& t, const Stream& stream, std::string_view what) {
  const Device want = stream.backend() == Backend::kCpu ? Device::cpu() : stream.device();
  TESSERA_CHECK_ARG(t.device() == want, what, " = ", t.to_string(), " is on ",
                    t.device().to_string(), ": expected ", want.to_string(),
                    " (the stream's device)");
}

void check_softmax_scale(float softmax_scale) {
  TESSERA_CHECK_ARG(std::isfinite(softmax_scale) && softmax_scale > 0,
                    "softmax_scale = ", softmax_scale, ": expected a finite value > 0");
}

}  // namespace detail

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

using detail::check_on_stream;

// A [B, L, H, D] tensor with unit stride in D and a supported float dtype.
void check_bshd(const TensorView& t, const std::string& what) {
  TESSERA_CHECK_ARG(!t.empty() || t.numel() == 0, what, " has no data");
  TESSERA_CHECK_ARG(t.ndim() == 4, what, " = ", t.to_string(), ": expected 4 dims [B, L, H, D]");
  TESSERA_CHECK_ARG(t.size(3) >= 1, what, " = ", t.to_string(), ": expected head dim D >= 1");
  TESSERA_CHECK_ARG(t.stride(3) == 1 || t.size(3) == 1, what, " = ", t.to_string(), " has stride ",
                    t.stride(3), " in D: expected 1");
  TESSERA_CHECK_ARG(is_float_dtype(t.dtype()), what, " has dtype ", dtype_name(t.dtype()),
                    ": expected bf16, f16 or f32");
}

// f32 [B, H, L], any strides.
void check_lse(const TensorView& t, int64_t b, int64_t h, int64_t l, const std::string& what) {
  TESSERA_CHECK_ARG(t.ndim() == 3 && t.size(0) == b && t.size(1) == h && t.size(2) == l, what,
                    " = ", t.to_string(), ": expected f32[", b, ", ", h, ", ", l, "] [B, Hq, Lq]");
  check_dtype(t, DType::kF32, what.c_str());
}

void check_same_shape(const TensorView& t, const TensorView& like, const std::string& what,
                      const std::string& like_name) {
  bool same = t.ndim() == like.ndim();
  for (int d = 0; same && d < t.ndim(); ++d) same = t.size(d) == like.size(d);
  TESSERA_CHECK_ARG(same, what, " = ", t.to_string(), ": expected the shape of ", like_name, " = ",
                    like.to_string());
}

void check_supported_on_backend(const TensorView& t, const Stream& stream, const std::string& what,
                                bool is_qkv) {
#ifdef TESSERA_WITH_CUDA
  if (stream.backend() == Backend::kCuda) detail::cuda_check_supported(t, what.c_str(), is_qkv);
#else
  (void)t;
  (void)stream;
  (void)what;
  (void)is_qkv;
#endif
}

// q and its KV chunks: shapes, dtypes, devices, masks.
void check_q_and_chunks(const TensorView& q, std::span<const KvChunk> kv, const Stream& stream,
                        const std::string& prefix) {
  const std::string qn = prefix + "q";
  check_bshd(q, qn);
  check_on_stream(q, stream, qn);
  check_supported_on_backend(q, stream, qn, true);
  for (size_t c = 0; c < kv.size(); ++c) {
    const std::string kn = str(prefix, "kv[", c, "].k"), vn = str(prefix, "kv[", c, "].v");
    const KvChunk& ch = kv[c];
    check_bshd(ch.k, kn);
    check_bshd(ch.v, vn);
    check_same_shape(ch.v, ch.k, vn, kn);
    TESSERA_CHECK_ARG(ch.k.dtype() == q.dtype() && ch.v.dtype() == q.dtype(), kn, " / ", vn,
                      " have dtypes ", dtype_name(ch.k.dtype()), " / ", dtype_name(ch.v.dtype()),
                      ": expected ", dtype_name(q.dtype()), " (q's)");
    TESSERA_CHECK_ARG(ch.k.size(0) == q.size(0), kn, " = ", ch.k.to_string(), " has batch ",
                      ch.k.size(0), ": expected ", q.size(0), " (q's)");
    TESSERA_CHECK_ARG(ch.k.size(3) == q.size(3), kn, " = ", ch.k.to_string(), " has head dim ",
                      ch.k.size(3), ": expected ", q.size(3), " (q's)");
    TESSERA_CHECK_ARG(ch.k.size(2) >= 1 && q.size(2) % ch.k.size(2) == 0, kn, " = ",
                      ch.k.to_string(), " has ", ch.k.size(2), " heads: expected a divisor of q's ",
                      q.size(2));
    if (c > 0) {
      TESSERA_CHECK_ARG(ch.k.size(2) == kv[0].k.size(2), kn, " has ", ch.k.size(2),
                        " heads: expected ", kv[0].k.size(2), " like ", prefix, "kv[0].k");
    }
    check_on_stream(ch.k, stream, kn);
    check_on_stream(ch.v, stream, vn);
    check_supported_on_backend(ch.k, stream, kn, true);
    check_supported_on_backend(ch.v, stream, vn, true);
    TESSERA_CHECK_ARG(ch.mask.q_stride >= 1 && ch.mask.kv_stride >= 1, prefix, "kv[", c,
                      "].mask has q_stride ", ch.mask.q_stride, ", kv_stride ", ch.mask.kv_stride,
                      ": expected both >= 1");
  }
}

void check_state(const AttnState& state, const TensorView& q, const Stream& stream,
                 const std::string& prefix) {
  const std::string on = prefix + "state.o", ln = prefix + "state.lse";
  check_bshd(state.o, on);
  check_dtype(state.o, DType::kF32, on.c_str());
  check_same_shape(state.o, q, on, prefix + "q");
  check_on_stream(state.o, stream, on);
  check_supported_on_backend(state.o, stream, on, false);
  check_lse(state.lse, q.size(0), q.size(2), q.size(1), ln);
  check_on_stream(state.lse, stream, ln);
}

// ---- cpu backend --------------------------------------------------------------------------

int64_t offset_bshd(const TensorView& t, int64_t b, int64_t l, int64_t h) {
  return b * t.stride(0) + l * t.stride(1) + h * t.stride(2);
}
int64_t offset_bhl(const TensorView& t, int64_t b, int64_t h, int64_t l) {
  return b * t.stride(0) + h * t.stride(1) + l * t.stride(2);
}

void store_result(const ReferenceResult& r, const TensorView& o, const TensorView& lse) {
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t i = 0; i < r.lq; ++i)
      for (int64_t h = 0; h < r.heads; ++h) {
        int64_t base = offset_bshd(o, b, i, h);
        for (int64_t d = 0; d < r.head_dim; ++d)
          store_from_float(o.data(), o.dtype(), base + d, r.o_at(b, i, h, d));
        if (!lse.empty())
          store_from_float(lse.data(), DType::kF32, offset_bhl(lse, b, h, i), r.lse_at(b, h, i));
      }
}

// state = merge(state, r) in fp32.
void fold_into_state(const ReferenceResult& r, const AttnState& s) {
  float* lse = s.lse.data_as<float>();
  float* o = s.o.data_as<float>();
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t h = 0; h < r.heads; ++h)
      for (int64_t i = 0; i < r.lq; ++i) {
        const float add = r.lse_at(b, h, i);
        if (add == kNegInf) continue;
        float& cur = lse[offset_bhl(s.lse, b, h, i)];
        const float m = std::max(cur, add);
        const float w_old = cur == kNegInf ? 0.0f : std::exp(cur - m);
        const float w_new = std::exp(add - m);
        const float total = w_old + w_new;
        float* orow = o + offset_bshd(s.o, b, i, h);
        for (int64_t d = 0; d < r.head_dim; ++d)
          orow[d] = (orow[d] * w_old + r.o_at(b, i, h, d) * w_new) / total;
        cur = m + std::log(total);
      }
}

void cpu_merge(std::span<const Partial> partials, const TensorView& o, const TensorView& lse) {
  const int64_t batch = o.size(0), lq = o.size(1), heads = o.size(2), d = o.size(3);
  std::vector<float> w(partials.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        float m = kNegInf;
        for (const Partial& p : partials)
          m = std::max(m, load_as_float(p.lse.data(), DType::kF32, offset_bhl(p.lse, b, h, i)));
        float total = 0.0f;
        for (size_t k = 0; k < partials.size(); ++k) {
          float l = load_as_float(partials[k].lse.data(), DType::kF32,
                                  offset_bhl(partials[k].lse, b, h, i));
          w[k] = (m == kNegInf || l == kNegInf) ? 0.0f : std::exp(l - m);
          total += w[k];
        }
        const int64_t obase = offset_bshd(o, b, i, h);
        for (int64_t x = 0; x < d; ++x) {
          float acc = 0.0f;
          for (size_t k = 0; k < partials.size(); ++k)
            if (w[k] != 0.0f)
              acc += w[k] * load_as_float(partials[k].o.data(), partials[k].o.dtype(),
                                          offset_bshd(partials[k].o, b, i, h) + x);
          store_from_float(o.data(), o.dtype(), obase + x, total > 0 ? acc / total : 0.0f);
        }
        if (!lse.empty())
          store_from_float(lse.data(), DType::kF32, offset_bhl(lse, b, h, i),
                           total > 0 ? m + std::log(total) : kNegInf);
      }
}

#ifndef TESSERA_WITH_CUDA
[[noreturn]] void no_cuda_backend(const char* what) {
  throw_error(ErrorCode::kUnsupported,
              str(what, ": tensors are on cuda but this build of Tessera has no cuda backend"));
}
#endif

void run_jobs(std::span<const detail::AttentionJob> jobs, bool accumulate, float softmax_scale,
              const Stream& stream) {
  if (stream.backend() == Backend::kCuda) {
#ifdef TESSERA_WITH_CUDA
    detail::cuda_attention(jobs, accumulate, softmax_scale, stream);
    return;
#else
    no_cuda_backend(accumulate ? "attn::accumulate" : "attn::forward");
#endif
  }
  for (const detail::AttentionJob& job : jobs) {
    ReferenceResult r = reference_attention(job.q, job.kv, softmax_scale);
    if (accumulate) {
      if (job.fresh) init_state(AttnState{job.o, job.lse}, stream);
      fold_into_state(r, AttnState{job.o, job.lse});
      // The cpu state is written anyway; final_o is then exactly what finalize writes.
      if (!job.final_o.empty()) {
        const Partial state{job.o, job.lse};
        cpu_merge(std::span<const Partial>(&state, 1), job.final_o, TensorView());
      }
    } else {
      store_result(r, job.o, job.lse);
    }
  }
}

}  // namespace

float default_softmax_scale(int64_t head_dim) {
  TESSERA_CHECK_ARG(head_dim >= 1, "head_dim = ", head_dim, ": expected >= 1");
  return float(1.0 / std::sqrt(double(head_dim)));
}

int64_t visible_pairs(int64_t lq, int64_t lkv, const MaskSpec& mask) {
  if (!mask.causal) return lq * lkv;
  TESSERA_CHECK_ARG(mask.q_stride >= 1 && mask.kv_stride >= 1, "mask strides ", mask.q_stride, ", ",
                    mask.kv_stride, ": expected >= 1");
  int64_t pairs = 0;
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t q = mask.q_pos(i);
    if (q < mask.kv_start) continue;
    pairs += std::min(lkv, (q - mask.kv_start) / mask.kv_stride + 1);
  }
  return pairs;
}

void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
             const TensorView& lse, const MaskSpec& mask, float softmax_scale,
             const Stream& stream) {
  const KvChunk chunk{k, v, mask};
  forward(q, std::span<const KvChunk>(&chunk, 1), o, lse, softmax_scale, stream);
}

void forward(const TensorView& q, std::span<const KvChunk> kv, const TensorView& o,
             const TensorView& lse, float softmax_scale, const Stream& stream) {
  detail::check_softmax_scale(softmax_scale);
  check_q_and_chunks(q, kv, stream, "");
  check_bshd(o, "o");
  check_same_shape(o, q, "o", "q");
  TESSERA_CHECK_ARG(o.dtype() == q.dtype(), "o has dtype ", dtype_name(o.dtype()), ": expected ",
                    dtype_name(q.dtype()), " (q's)");
  check_on_stream(o, stream, "o");
  check_supported_on_backend(o, stream, "o", false);
  if (!lse.empty()) {
    check_lse(lse, q.size(0), q.size(2), q.size(1), "lse");
    check_on_stream(lse, stream, "lse");
  }
  const detail::AttentionJob job{q, o, lse, kv};
  run_jobs(std::span<const detail::AttentionJob>(&job, 1), false, softmax_scale, stream);
}

void init_state(const AttnState& state, const Stream& stream) {
  check_bshd(state.o, "state.o");
  check_dtype(state.o, DType::kF32, "state.o");
  check_on_stream(state.o, stream, "state.o");
  check_lse(state.lse, state.o.size(0), state.o.size(2), state.o.size(1), "state.lse");
  check_on_stream(state.lse, stream, "state.lse");
  if (stream.backend() == Backend::kCuda) {
#ifdef TESSERA_WITH_CUDA
    check_supported_on_backend(state.o, stream, "state.o", false);
    detail::cuda_init_state(state, stream);
    return;
#else
    no_cuda_backend("attn::init_state");
#endif
  }
  const TensorView& o = state.o;
  for (int64_t b = 0; b < o.size(0); ++b)
    for (int64_t i = 0; i < o.size(1); ++i)
      for (int64_t h = 0; h < o.size(2); ++h) {
        float* row = o.data_as<float>() + offset_bshd(o, b, i, h);
        std::fill(row, row + o.size(3), 0.0f);
        state.lse.data_as<float>()[offset_bhl(state.lse, b, h, i)] = kNegInf;
      }
}

void accumulate(const TensorView& q, std::span<const KvChunk> kv, const AttnState& state,
                float softmax_scale, const Stream& stream) {
  const AccumulateJob job{q, state, kv};
  accumulate(std::span<const AccumulateJob>(&job, 1), softmax_scale, stream);
}

void accumulate(std::span<const AccumulateJob> jobs, float softmax_scale, const Stream& stream) {
  detail::check_softmax_scale(softmax_scale);
  std::vector<detail::AttentionJob> validated;
  validated.reserve(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const std::string prefix = jobs.size() == 1 ? std::string() : str("jobs[", j, "].");
    const AccumulateJob& job = jobs[j];
    check_q_and_chunks(job.q, job.kv, stream, prefix);
    check_state(job.state, job.q, stream, prefix);
    if (j > 0) {
      const TensorView& q0 = jobs[0].q;
      TESSERA_CHECK_ARG(job.q.dtype() == q0.dtype() && job.q.size(0) == q0.size(0) &&
                            job.q.size(2) == q0.size(2) && job.q.size(3) == q0.size(3),
                        prefix, "q = ", job.q.to_string(),
                        ": expected the dtype, B, Hq and D of jobs[0].q = ", q0.to_string());
      if (!job.kv.empty() && !jobs[0].kv.empty()) {
        TESSERA_CHECK_ARG(job.kv[0].k.size(2) == jobs[0].kv[0].k.size(2), prefix, "kv[0].k has ",
                          job.kv[0].k.size(2), " heads: expected ", jobs[0].kv[0].k.size(2),
                          " like jobs[0].kv[0].k");
      }
    }
    if (!job.final_o.empty()) {
      const std::string fn = prefix + "final_o";
      check_bshd(job.final_o, fn);
      check_same_shape(job.final_o, job.q, fn, prefix + "q");
      TESSERA_CHECK_ARG(job.final_o.dtype() == job.q.dtype(), fn, " has dtype ",
                        dtype_name(job.final_o.dtype()), ": expected ", dtype_name(job.q.dtype()),
                        " (q's)");
      check_on_stream(job.final_o, stream, fn);
      check_supported_on_backend(job.final_o, stream, fn, false);
    }
    validated.push_back({job.q, job.state.o, job.state.lse, job.kv, job.fresh, job.final_o});
  }
  run_jobs(validated, true, softmax_scale, stream);
}

void finalize(const AttnState& state, const TensorView& o, const Stream& stream) {
  check_bshd(state.o, "state.o");
  check_dtype(state.o, DType::kF32, "state.o");
  check_lse(state.lse, state.o.size(0), state.o.size(2), state.o.size(1), "state.lse");
  check_bshd(o, "o");
  check_same_shape(o, state.o, "o", "state.o");
  for (const auto& [t, name] :
       {std::pair{state.o, "state.o"}, std::pair{state.lse, "state.lse"}, std::pair{o, "o"}}) {
    check_on_stream(t, stream, name);
  }
  const Partial part{state.o, state.lse};
  merge(std::span<const Partial>(&part, 1), o, TensorView(), stream);
}

bool final_output_supported(const TensorView& o, const Stream& stream) {
  if (stream.backend() != Backend::kCuda) return true;
  // The cuda rule of every tensor the attention kernel writes (cuda_check_supported).
  if (reinterpret_cast<uintptr_t>(o.data()) % 16 != 0) return false;
  for (int d = 0; d < o.ndim() - 1; ++d) {
    if (o.size(d) <= 1) continue;
    if (o.stride(d) <= 0 || (o.stride(d) * int64_t(o.element_size())) % 16 != 0) return false;
  }
  return true;
}

void merge(std::span<const Partial> partials, const TensorView& o, const TensorView& lse,
           const Stream& stream) {
  TESSERA_CHECK_ARG(!partials.empty(), "merge: partials is empty: expected at least one (O, lse)");
  check_bshd(o, "o");
  check_on_stream(o, stream, "o");
  const int64_t batch = o.size(0), lq = o.size(1), heads = o.size(2);
  for (size_t k = 0; k < partials.size(); ++k) {
    const std::string on = str("partials[", k, "].o"), ln = str("partials[", k, "].lse");
    check_bshd(partials[k].o, on);
    check_same_shape(partials[k].o, o, on, "o");
    check_on_stream(partials[k].o, stream, on);
    check_lse(partials[k].lse, batch, heads, lq, ln);
    check_on_stream(partials[k].lse, stream, ln);
  }
  if (!lse.empty()) {
    check_lse(lse, batch, heads, lq, "lse");
    check_on_stream(lse, stream, "lse");
  }
  if (stream.backend() == Backend::kCuda) {
#ifdef TESSERA_WITH_CUDA
    // The merge kernel reads and writes single elements: no alignment rule beyond the dtype's.
    detail::cuda_merge(partials, o, lse, stream);
    return;
#else
    no_cuda_backend("attn::merge");
#endif
  }
  cpu_merge(partials, o, lse);
}

}  // namespace tessera::attn
