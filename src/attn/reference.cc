// The float32 attention reference (reference.h). Every (batch, query head, query row) is one
// exact two-pass softmax over the visible keys of all chunks: scores, their max, the sum of
// exp(s - max), then O = sum p v / sum. kInputRounding rounds the scores and the normalized
// probabilities to the input dtype, as an attention computed in that dtype would.
#include "tessera/attn/reference.h"

#include <cmath>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::attn {

namespace {

// A [B, L, H, D] view read into a contiguous float array (the reference's working copy).
std::vector<float> to_float_bshd(const TensorView& t) {
  const int64_t b = t.size(0), l = t.size(1), h = t.size(2), d = t.size(3);
  std::vector<float> out(size_t(b * l * h * d));
  size_t idx = 0;
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t il = 0; il < l; ++il)
      for (int64_t ih = 0; ih < h; ++ih) {
        int64_t base = ib * t.stride(0) + il * t.stride(1) + ih * t.stride(2);
        for (int64_t id = 0; id < d; ++id)
          out[idx++] = load_as_float(t.data(), t.dtype(), base + id);
      }
  return out;
}

}  // namespace

ReferenceResult reference_attention(const TensorView& q, std::span<const KvChunk> kv,
                                    float softmax_scale, ReferencePrecision precision) {
  TESSERA_CHECK_ARG(q.device().kind == DeviceKind::kCpu, "reference_attention: q is on ",
                    q.device().to_string(), ": expected cpu");
  TESSERA_CHECK_ARG(q.ndim() == 4, "reference_attention: q = ", q.to_string(),
                    ": expected [B, Lq, Hq, D]");
  ReferenceResult r;
  r.batch = q.size(0);
  r.lq = q.size(1);
  r.heads = q.size(2);
  r.head_dim = q.size(3);
  const int64_t batch = r.batch, lq = r.lq, hq = r.heads, d = r.head_dim;
  const bool rounding = precision == ReferencePrecision::kInputRounding;
  const DType in_dtype = q.dtype();

  struct FloatChunk {
    std::vector<float> k, v;
    int64_t lkv, hkv;
    MaskSpec mask;
  };
  std::vector<FloatChunk> chunks;
  int64_t total_keys = 0;
  for (size_t c = 0; c < kv.size(); ++c) {
    const KvChunk& ch = kv[c];
    TESSERA_CHECK_ARG(
        ch.k.device().kind == DeviceKind::kCpu && ch.v.device().kind == DeviceKind::kCpu,
        "reference_attention: kv[", c, "] must be on cpu");
    TESSERA_CHECK_ARG(ch.k.ndim() == 4 && ch.k.size(0) == batch && ch.k.size(3) == d &&
                          ch.k.size(2) > 0 && hq % ch.k.size(2) == 0,
                      "reference_attention: kv[", c, "].k = ", ch.k.to_string(), ": expected [",
                      batch, ", Lkv, Hkv, ", d, "] with ", hq, " % Hkv == 0");
    chunks.push_back(
        {to_float_bshd(ch.k), to_float_bshd(ch.v), ch.k.size(1), ch.k.size(2), ch.mask});
    total_keys += ch.k.size(1);
  }
  std::vector<float> qf = to_float_bshd(q);
  r.o.assign(size_t(batch * lq * hq * d), 0.0f);
  r.lse.assign(size_t(batch * hq * lq), -std::numeric_limits<float>::infinity());

  std::vector<float> scores(static_cast<size_t>(total_keys));
  std::vector<char> visible(static_cast<size_t>(total_keys));
  std::vector<double> probs(static_cast<size_t>(total_keys));
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t i = 0; i < lq; ++i) {
        const float* qrow = &qf[size_t(((b * lq + i) * hq + h) * d)];
        float max_score = -std::numeric_limits<float>::infinity();
        size_t key = 0;
        for (const FloatChunk& ch : chunks) {
          const int64_t hk = h / (hq / ch.hkv);
          for (int64_t j = 0; j < ch.lkv; ++j, ++key) {
            visible[key] = !ch.mask.masked(i, j);
            if (!visible[key]) continue;
            const float* krow = &ch.k[size_t(((b * ch.lkv + j) * ch.hkv + hk) * d)];
            float dot = 0.0f;
            for (int64_t x = 0; x < d; ++x) dot += qrow[x] * krow[x];
            if (rounding) dot = round_to_dtype(in_dtype, dot);
            scores[key] = dot * softmax_scale;
            max_score = std::max(max_score, scores[key]);
          }
        }
        if (max_score == -std::numeric_limits<float>::infinity()) continue;  // sees no key
        double sum = 0.0;
        for (size_t x = 0; x < key; ++x) {
          probs[x] = visible[x] ? std::exp(double(scores[x]) - double(max_score)) : 0.0;
          sum += probs[x];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        key = 0;
        for (const FloatChunk& ch : chunks) {
          const int64_t hk = h / (hq / ch.hkv);
          for (int64_t j = 0; j < ch.lkv; ++j, ++key) {
            if (!visible[key]) continue;
            double p = probs[key];
            if (rounding) p = round_to_dtype(in_dtype, float(p / sum)) * sum;
            const float* vrow = &ch.v[size_t(((b * ch.lkv + j) * ch.hkv + hk) * d)];
            for (int64_t x = 0; x < d; ++x) acc[size_t(x)] += p * vrow[x];
          }
        }
        float* orow = &r.o[size_t(((b * lq + i) * hq + h) * d)];
        for (int64_t x = 0; x < d; ++x) orow[x] = float(acc[size_t(x)] / sum);
        r.lse[size_t((b * hq + h) * lq + i)] = float(double(max_score) + std::log(sum));
      }
    }
  }
  return r;
}

}  // namespace tessera::attn
