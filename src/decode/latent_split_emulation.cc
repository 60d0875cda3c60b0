// decode::split_latent_attention_block (split_emulation.h): the fused MLA kernel's dataflow
// (split_geometry.h, the ClusterFusion appendix's) in float32. Per query head h, a cluster of N
// CTAs, for each sequence b:
//   input:      x times the norm weight, rounded to the dtype; the norm's rstd from the sum of
//               squares over the whole row (every CTA reads all of x) applied to the sums
//   projection: CTA r's query rows and latent rows (their even slices), gathered whole
//   latent row: c's sum of squares per CTA slice added in rank order; c = c * rstd * kv_a_norm
//               and kr = rope(kr), rounded to the dtype as stored; head 0's cluster appends the
//               row, every cluster attends to its own copy of it (not read back)
//   absorption: ql = W_UK_h^T qn per CTA slice of R, gathered; ql and rope(qr) take the
//               softmax scale
//   attention:  each CTA's online-softmax partial over its sequence slice (the new row on
//               new_token_rank), merged in rank order; the latent output o_lat rounded
//   value up:   per-CTA partials of W_UV_h o_lat over its slice of R, added in rank order;
//               the head's output o_h rounded
//   output:     each head's partial Wo[:, h] o_h, added over the heads in head order
// The latent row and query projections are the same in every head's cluster (the same slices,
// the same order), so they are computed once here.
#include <algorithm>
#include <cmath>
#include <vector>

#include "decode/cpu_cache.h"
#include "decode/softmax_partial.h"
#include "decode/split_emulation.h"
#include "decode/split_geometry.h"

namespace tessera::decode {
namespace {

// y[i] = sum over c of w[row0 + i][c] * x[c], in float32, for i in [0, n).
void project_rows(const TensorView& w, int64_t row0, int64_t n, const float* x, float scale,
                  std::vector<float>& wrow, float* y) {
  const int64_t cols = w.size(1);
  for (int64_t i = 0; i < n; ++i) {
    cpu::load_row(w, row0 + i, wrow.data());
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += wrow[size_t(c)] * x[c];
    y[i] = sum * scale;
  }
}

// sum over j in [0, width) of a[j] * b[j], as a cluster of n CTAs adds it: each CTA's even
// slice summed, the slices' sums added in rank order.
float rank_order_dot(const float* a, const float* b, int64_t width, int n) {
  float sum = 0;
  for (int r = 0; r < n; ++r) {
    const Range slice = even_slice(width, n, r);
    float part = 0;
    for (int64_t j = slice.begin; j < slice.end; ++j) part += a[j] * b[j];
    sum += part;
  }
  return sum;
}

// Rotates the interleaved pairs (2i, 2i+1) of v[0, d) by pos * inv_freq_i.
void rope_pairs(float* v, int64_t d, int64_t pos, const std::vector<float>& inv_freq) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const float angle = float(pos) * inv_freq[size_t(i)];
    const float c = std::cos(angle), s = std::sin(angle);
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

}  // namespace

void split_latent_attention_block(const ModelConfig& m, const DecodeStep& step,
                                  const LatentAttentionWeights& w, const KvCache& cache,
                                  int64_t page_size, int n) {
  const int64_t batch = step.x.size(0), hidden = m.hidden, heads = m.num_heads;
  const int64_t rank = m.kv_lora_rank, dr = m.rope_head_dim, dn = m.nope_head_dim;
  const int64_t dv = m.v_head_dim, dq = dn + dr, width = rank + dr;
  TESSERA_CHECK_ARG(latent_cluster_divides(hidden, rank, dn, dr, n), "cluster_size = ", n,
                    ": expected a divisor of hidden, kv_lora_rank, nope + rope head dims and "
                    "kv_lora_rank + rope_head_dim");
  const DType dtype = step.x.dtype();
  const std::vector<float> inv_freq = rope_inv_freq(m);
  const int32_t* positions = step.positions.data_as<const int32_t>();
  const float softmax_scale = 1.0f / std::sqrt(float(dq));

  std::vector<float> wrow(static_cast<size_t>(std::max({hidden, rank, heads * dv})));
  std::vector<float> xg(static_cast<size_t>(hidden));
  std::vector<float> q(static_cast<size_t>(heads * dq)), row(static_cast<size_t>(width));
  std::vector<float> ql(static_cast<size_t>(rank)), cached(static_cast<size_t>(width));
  std::vector<float> o_heads(static_cast<size_t>(heads * dv));
  std::vector<float> out_acc(static_cast<size_t>(batch * hidden), 0.f);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pos = positions[b];
    // Input: x * norm weight rounded; rstd over the whole row.
    float sumsq = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      const float x = load_as_float(step.x.data(), dtype, b * hidden + c);
      sumsq += x * x;
      xg[size_t(c)] = w.input_norm.empty()
                          ? x
                          : round_to_dtype(dtype, x * load_as_float(w.input_norm.data(), dtype, c));
    }
    const float rstd =
        w.input_norm.empty() ? 1.f : 1.f / std::sqrt(sumsq / float(hidden) + m.rms_norm_eps);
    // Projections: each CTA's rows (its slices), gathered.
    for (int r = 0; r < n; ++r) {
      const Range lr = even_slice(width, n, r);
      project_rows(w.wkv_a, lr.begin, lr.size(), xg.data(), rstd, wrow, row.data() + lr.begin);
      for (int64_t h = 0; h < heads; ++h) {
        const Range qr = even_slice(dq, n, r);
        project_rows(w.wq, h * dq + qr.begin, qr.size(), xg.data(), rstd, wrow,
                     q.data() + h * dq + qr.begin);
      }
    }
    // The latent row: c normalized (slice sums in rank order), kr rotated, both rounded.
    const float csq = rank_order_dot(row.data(), row.data(), rank, n);
    const float crstd = 1.f / std::sqrt(csq / float(rank) + m.rms_norm_eps);
    for (int64_t j = 0; j < rank; ++j)
      row[size_t(j)] *= crstd * load_as_float(w.kv_a_norm.data(), dtype, j);
    rope_pairs(row.data() + rank, dr, pos, inv_freq);
    const int64_t at = cpu::cache_offset(cache, page_size, b, pos, 0);
    for (int64_t i = 0; i < width; ++i) {
      row[size_t(i)] = round_to_dtype(dtype, row[size_t(i)]);
      store_from_float(cache.k.data(), dtype, at + i, row[size_t(i)]);
    }

    for (int64_t h = 0; h < heads; ++h) {
      float* qh = q.data() + h * dq;
      rope_pairs(qh + dn, dr, pos, inv_freq);
      for (int64_t i = dn; i < dq; ++i) qh[i] *= softmax_scale;
      // Absorption: ql[j] = sum_i qn[i] W_UK_h[i][j], per CTA slice of R.
      std::fill(ql.begin(), ql.end(), 0.f);
      for (int64_t i = 0; i < dn; ++i) {
        cpu::load_row(w.wkv_b, h * (dn + dv) + i, wrow.data());
        for (int64_t j = 0; j < rank; ++j) ql[size_t(j)] += qh[i] * wrow[size_t(j)];
      }
      for (float& e : ql) e *= softmax_scale;
      // Attention over the latent rows: one partial per CTA, merged in rank order.
      auto score = [&](const float* lrow) {
        float s = 0;
        for (int64_t j = 0; j < rank; ++j) s += ql[size_t(j)] * lrow[j];
        for (int64_t i = 0; i < dr; ++i) s += qh[dn + i] * lrow[rank + i];
        return s;
      };
      std::vector<cpu::SoftmaxPartial> parts(static_cast<size_t>(n), cpu::SoftmaxPartial(rank));
      for (int r = 0; r < n; ++r) {
        const Range slice = seq_slice(pos, n, r);
        for (int64_t t = slice.begin; t < slice.end; ++t) {
          const int64_t kt = cpu::cache_offset(cache, page_size, b, t, 0);
          for (int64_t i = 0; i < width; ++i)
            cached[size_t(i)] = load_as_float(cache.k.data(), dtype, kt + i);
          parts[size_t(r)].add(score(cached.data()), cached.data(), rank);
        }
        if (r == new_token_rank(n)) parts[size_t(r)].add(score(row.data()), row.data(), rank);
      }
      std::vector<float> o_lat = cpu::merge_partials(parts, rank);
      for (float& e : o_lat) e = round_to_dtype(dtype, e);
      // Value up-projection: per CTA slice of R, partials added in rank order.
      for (int64_t i = 0; i < dv; ++i) {
        cpu::load_row(w.wkv_b, h * (dn + dv) + dn + i, wrow.data());
        o_heads[size_t(h * dv + i)] =
            round_to_dtype(dtype, rank_order_dot(wrow.data(), o_lat.data(), rank, n));
      }
    }
    // Output: each head's partial over its Dv columns of Wo, added in head order.
    for (int64_t out_row = 0; out_row < hidden; ++out_row) {
      cpu::load_row(w.wo, out_row, wrow.data());
      float sum = 0;
      for (int64_t h = 0; h < heads; ++h) {
        float part = 0;
        for (int64_t i = h * dv; i < (h + 1) * dv; ++i) part += wrow[size_t(i)] * o_heads[size_t(i)];
        sum += part;
      }
      out_acc[size_t(b * hidden + out_row)] = sum;
    }
  }
  for (int64_t i = 0; i < batch * hidden; ++i)
    store_from_float(step.out.data(), dtype, i, out_acc[size_t(i)]);
}

}  // namespace tessera::decode
