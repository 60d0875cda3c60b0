// decode::latent_reference_output (latent_reference.h): MLA's absorbed decode step in float64.
// Each weight row is converted once per step for the whole batch (ref::matmul_rows, and Wkv_b
// row by row for the absorbed query and the value up-projection); a sequence's cached latent
// rows are read once and shared by every head.
#include "decode/latent_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "decode/cpu_cache.h"
#include "decode/reference_math.h"

namespace tessera::decode {

std::vector<double> latent_reference_output(const ModelConfig& m, const DecodeStep& step,
                                            const LatentAttentionWeights& w, const KvCache& cache,
                                            int64_t page_size) {
  const int64_t batch = step.x.size(0), hidden = m.hidden, heads = m.num_heads;
  const int64_t rank = m.kv_lora_rank, dr = m.rope_head_dim, dn = m.nope_head_dim;
  const int64_t dv = m.v_head_dim, dq = dn + dr, row_width = rank + dr;
  const DType dtype = step.x.dtype();
  const std::vector<float> inv_freq = rope_inv_freq(m);  // unscaled: yarn is not modelled
  const int32_t* positions = step.positions.data_as<const int32_t>();

  std::vector<double> xn = ref::load_rows(step.x);  // [B][hidden]
  if (!w.input_norm.empty())
    for (int64_t b = 0; b < batch; ++b)
      ref::rms_norm(xn.data() + b * hidden, hidden, w.input_norm, m.rms_norm_eps);
  std::vector<double> q = ref::matmul_rows(w.wq, xn, batch);       // [B][H][Dn + Dr]
  std::vector<double> ckv = ref::matmul_rows(w.wkv_a, xn, batch);  // [B][R + Dr]

  // The new token's latent row: normalized c and rotated kr, rounded to the dtype as stored.
  for (int64_t b = 0; b < batch; ++b) {
    double* row = ckv.data() + b * row_width;
    ref::rms_norm(row, rank, w.kv_a_norm, m.rms_norm_eps);
    ref::rope_pairs(row + rank, dr, positions[b], inv_freq);
    const int64_t at = cpu::cache_offset(cache, page_size, b, positions[b], 0);
    for (int64_t i = 0; i < row_width; ++i) {
      row[i] = round_to_dtype(dtype, float(row[i]));
      store_from_float(cache.k.data(), dtype, at + i, float(row[i]));
    }
    for (int64_t h = 0; h < heads; ++h)
      ref::rope_pairs(q.data() + (b * heads + h) * dq + dn, dr, positions[b], inv_freq);
  }

  // The absorbed query ql[b][h] = W_UK_h^T qn[b][h], one Wkv_b row at a time.
  std::vector<double> ql(static_cast<size_t>(batch * heads * rank), 0.0);  // [B][H][R]
  std::vector<float> wrow(static_cast<size_t>(rank));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < dn; ++i) {
      cpu::load_row(w.wkv_b, h * (dn + dv) + i, wrow.data());
      for (int64_t b = 0; b < batch; ++b) {
        const double qn = q[size_t((b * heads + h) * dq + i)];
        double* qlh = ql.data() + (b * heads + h) * rank;
        for (int64_t j = 0; j < rank; ++j) qlh[j] += qn * double(wrow[size_t(j)]);
      }
    }

  // Attention over the latent rows as stored: ol[b][h] = sum_t softmax(s)_t c_t.
  const double scale = 1.0 / std::sqrt(double(dq));
  std::vector<double> ol(static_cast<size_t>(batch * heads * rank), 0.0);  // [B][H][R]
  std::vector<double> rows, scores;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pos = positions[b];
    rows.resize(size_t((pos + 1) * row_width));  // [p_b + 1][R + Dr]
    for (int64_t t = 0; t <= pos; ++t) {
      const int64_t at = cpu::cache_offset(cache, page_size, b, t, 0);
      for (int64_t i = 0; i < row_width; ++i)
        rows[size_t(t * row_width + i)] = load_as_float(cache.k.data(), dtype, at + i);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const double* qlh = ql.data() + (b * heads + h) * rank;
      const double* qrh = q.data() + (b * heads + h) * dq + dn;
      scores.assign(size_t(pos + 1), 0.0);
      double smax = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t <= pos; ++t) {
        const double* row = rows.data() + t * row_width;
        double s = 0;
        for (int64_t j = 0; j < rank; ++j) s += qlh[j] * row[j];
        for (int64_t i = 0; i < dr; ++i) s += qrh[i] * row[rank + i];
        scores[size_t(t)] = s * scale;
        smax = std::max(smax, scores[size_t(t)]);
      }
      double denom = 0;
      for (double& s : scores) denom += (s = std::exp(s - smax));
      double* olh = ol.data() + (b * heads + h) * rank;
      for (int64_t t = 0; t <= pos; ++t) {
        const double p = scores[size_t(t)] / denom;
        const double* row = rows.data() + t * row_width;
        for (int64_t j = 0; j < rank; ++j) olh[j] += p * row[j];
      }
    }
  }

  // The value up-projection o[b][h] = W_UV_h ol[b][h], then out = Wo o.
  std::vector<double> o(static_cast<size_t>(batch * heads * dv));  // [B][H*Dv]
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < dv; ++i) {
      cpu::load_row(w.wkv_b, h * (dn + dv) + dn + i, wrow.data());
      for (int64_t b = 0; b < batch; ++b) {
        const double* olh = ol.data() + (b * heads + h) * rank;
        double acc = 0;
        for (int64_t j = 0; j < rank; ++j) acc += double(wrow[size_t(j)]) * olh[j];
        o[size_t((b * heads + h) * dv + i)] = acc;
      }
    }
  return ref::matmul_rows(w.wo, o, batch);
}

void reference_latent_attention_block(const ModelConfig& m, const DecodeStep& step,
                                      const LatentAttentionWeights& w, const KvCache& cache,
                                      int64_t page_size) {
  const std::vector<double> out = latent_reference_output(m, step, w, cache, page_size);
  for (size_t i = 0; i < out.size(); ++i)
    store_from_float(step.out.data(), step.out.dtype(), int64_t(i), float(out[i]));
}

}  // namespace tessera::decode
