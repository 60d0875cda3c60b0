// decode::reference_attention_block (reference.h): the block's math in float64, one weight row
// at a time for the whole batch so each weight is converted once.
#include "decode/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "decode/cpu_cache.h"
#include "decode/reference_math.h"

namespace tessera::decode {
void reference_attention_block(const ModelConfig& m, const DecodeStep& step,
                               const AttentionWeights& w, const KvCache& cache,
                               int64_t page_size) {
  const int64_t batch = step.x.size(0), hidden = m.hidden, d = m.head_dim;
  const int64_t hq = m.num_heads, hkv = m.num_kv_heads, group = m.group_size();
  const DType dtype = step.x.dtype();
  const std::vector<float> inv_freq = rope_inv_freq(m);
  const int32_t* positions = step.positions.data_as<const int32_t>();

  std::vector<double> xn = ref::load_rows(step.x);  // [B][hidden]
  if (!w.input_norm.empty())
    for (int64_t b = 0; b < batch; ++b)
      ref::rms_norm(xn.data() + b * hidden, hidden, w.input_norm, m.rms_norm_eps);
  std::vector<double> q = ref::matmul_rows(w.wq, xn, batch);  // [B][Hq*D]
  std::vector<double> k = ref::matmul_rows(w.wk, xn, batch);  // [B][Hkv*D]
  std::vector<double> v = ref::matmul_rows(w.wv, xn, batch);

  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> o(static_cast<size_t>(batch * hq * d), 0.0);
  std::vector<double> scores;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pos = positions[b];
    for (int64_t g = 0; g < hkv; ++g) {
      double* kb = k.data() + (b * hkv + g) * d;
      double* vb = v.data() + (b * hkv + g) * d;
      ref::rope_halves(kb, d, pos, inv_freq);
      // The cache stores the dtype; attention reads back what it stores.
      const int64_t at = cpu::cache_offset(cache, page_size, b, pos, g);
      for (int64_t i = 0; i < d; ++i) {
        kb[i] = round_to_dtype(dtype, float(kb[i]));
        vb[i] = round_to_dtype(dtype, float(vb[i]));
        store_from_float(cache.k.data(), dtype, at + i, float(kb[i]));
        store_from_float(cache.v.data(), dtype, at + i, float(vb[i]));
      }
    }
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / group;
      double* qh = q.data() + (b * hq + h) * d;
      ref::rope_halves(qh, d, pos, inv_freq);
      scores.assign(size_t(pos + 1), 0.0);
      double smax = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t <= pos; ++t) {
        const int64_t at = cpu::cache_offset(cache, page_size, b, t, g);
        double s = 0;
        for (int64_t i = 0; i < d; ++i) s += qh[i] * load_as_float(cache.k.data(), dtype, at + i);
        scores[size_t(t)] = s * scale;
        smax = std::max(smax, scores[size_t(t)]);
      }
      double denom = 0;
      for (double& s : scores) denom += (s = std::exp(s - smax));
      double* oh = o.data() + (b * hq + h) * d;
      for (int64_t t = 0; t <= pos; ++t) {
        const int64_t at = cpu::cache_offset(cache, page_size, b, t, g);
        const double p = scores[size_t(t)] / denom;
        for (int64_t i = 0; i < d; ++i) oh[i] += p * load_as_float(cache.v.data(), dtype, at + i);
      }
    }
  }
  const std::vector<double> out = ref::matmul_rows(w.wo, o, batch);
  for (int64_t i = 0; i < batch * hidden; ++i)
    store_from_float(step.out.data(), step.out.dtype(), i, float(out[size_t(i)]));
}

}  // namespace tessera::decode
