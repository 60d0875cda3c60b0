// decode::split_attention_block (split_emulation.h): the fused kernel's dataflow in float32.
// Per KV group (one cluster of N CTAs in the kernel):
//   QKV:       CTA r's partial over hidden_slice(r); partials added in rank order 0..N-1, as
//              ClusterReduce adds them; the RMSNorm's rstd applied after the sum (the kernel
//              projects x * norm_weight, rounded to the dtype, and scales the sums).
//   attention: CTA r's online-softmax partial (m, l, o) over seq_slice(r); CTA N-1 folds the
//              new token; merged by the maximum m, rescaled and added in rank order; o / l is
//              rounded to the dtype (the kernel keeps it in shared memory as such).
//   output:    per-group partials of Wo o, added over the groups in group order.
#include "decode/split_emulation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "decode/cpu_cache.h"
#include "decode/softmax_partial.h"
#include "decode/split_geometry.h"

namespace tessera::decode {
void split_attention_block(const ModelConfig& m, const DecodeStep& step,
                           const AttentionWeights& w, const KvCache& cache, int64_t page_size,
                           int n) {
  const int64_t batch = step.x.size(0), hidden = m.hidden, d = m.head_dim;
  const int64_t hkv = m.num_kv_heads, group = m.group_size();
  const DType dtype = step.x.dtype();
  const std::vector<float> inv_freq = rope_inv_freq(m);
  const int32_t* positions = step.positions.data_as<const int32_t>();
  const float softmax_scale = 1.0f / std::sqrt(float(d));

  // x scaled by the norm weight and rounded; the sum of squares per CTA slice, in rank order.
  std::vector<float> xg(static_cast<size_t>(batch * hidden)), rstd(static_cast<size_t>(batch), 1.f);
  for (int64_t b = 0; b < batch; ++b) {
    float sumsq = 0;
    for (int r = 0; r < n; ++r) {
      const Range slice = hidden_slice(hidden, n, r);
      float part = 0;
      for (int64_t c = slice.begin; c < slice.end; ++c) {
        const float x = load_as_float(step.x.data(), dtype, b * hidden + c);
        part += x * x;
        xg[size_t(b * hidden + c)] =
            w.input_norm.empty()
                ? x
                : round_to_dtype(dtype, x * load_as_float(w.input_norm.data(), dtype, c));
      }
      sumsq += part;
    }
    if (!w.input_norm.empty()) rstd[size_t(b)] = 1.f / std::sqrt(sumsq / float(hidden) + m.rms_norm_eps);
  }

  std::vector<float> out_acc(static_cast<size_t>(batch * hidden), 0.f);
  std::vector<float> wrow(static_cast<size_t>(std::max(hidden, m.num_heads * d)));
  std::vector<float> qkv(static_cast<size_t>((group + 2) * batch * d));  // [row block][b][dim]
  std::vector<float> o(static_cast<size_t>(batch * m.num_heads * d));   // attention outputs [B][Hq*D]
  std::vector<float> krow(static_cast<size_t>(d)), vrow(static_cast<size_t>(d));
  for (int64_t g = 0; g < hkv; ++g) {
    // QKV projection: rank partials added in rank order.
    for (int64_t rb = 0; rb < group + 2; ++rb) {
      const TensorView& mat = rb < group ? w.wq : (rb == group ? w.wk : w.wv);
      const int64_t row0 = rb < group ? (g * group + rb) * d : g * d;
      for (int64_t i = 0; i < d; ++i) {
        cpu::load_row(mat, row0 + i, wrow.data());
        for (int64_t b = 0; b < batch; ++b) {
          float sum = 0;
          for (int r = 0; r < n; ++r) {
            const Range slice = hidden_slice(hidden, n, r);
            float part = 0;
            for (int64_t c = slice.begin; c < slice.end; ++c)
              part += wrow[size_t(c)] * xg[size_t(b * hidden + c)];
            sum += part;
          }
          qkv[size_t((rb * batch + b) * d + i)] = sum * rstd[size_t(b)];
        }
      }
    }
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t pos = positions[b];
      // RoPE on the q heads and k; q takes the softmax scale; the new k and v are rounded.
      for (int64_t rb = 0; rb <= group; ++rb) {
        float* head = qkv.data() + (rb * batch + b) * d;
        for (int64_t i = 0; i < d / 2; ++i) {
          const float angle = float(pos) * inv_freq[size_t(i)];
          const float c = std::cos(angle), s = std::sin(angle);
          const float x0 = head[i], x1 = head[i + d / 2];
          head[i] = x0 * c - x1 * s;
          head[i + d / 2] = x1 * c + x0 * s;
        }
        if (rb < group)
          for (int64_t i = 0; i < d; ++i) head[i] *= softmax_scale;
      }
      float* k_new = qkv.data() + (group * batch + b) * d;
      float* v_new = qkv.data() + ((group + 1) * batch + b) * d;
      const int64_t at = cpu::cache_offset(cache, page_size, b, pos, g);
      for (int64_t i = 0; i < d; ++i) {
        k_new[i] = round_to_dtype(dtype, k_new[i]);
        v_new[i] = round_to_dtype(dtype, v_new[i]);
        store_from_float(cache.k.data(), dtype, at + i, k_new[i]);
        store_from_float(cache.v.data(), dtype, at + i, v_new[i]);
      }
      // Attention: one partial per rank and query head, merged in rank order.
      for (int64_t h = 0; h < group; ++h) {
        const float* q = qkv.data() + (h * batch + b) * d;
        std::vector<cpu::SoftmaxPartial> parts(static_cast<size_t>(n), cpu::SoftmaxPartial(d));
        for (int r = 0; r < n; ++r) {
          cpu::SoftmaxPartial& part = parts[size_t(r)];
          const Range slice = seq_slice(pos, n, r);
          for (int64_t t = slice.begin; t < slice.end; ++t) {
            const int64_t kt = cpu::cache_offset(cache, page_size, b, t, g);
            float s = 0;
            for (int64_t i = 0; i < d; ++i) {
              krow[size_t(i)] = load_as_float(cache.k.data(), dtype, kt + i);
              vrow[size_t(i)] = load_as_float(cache.v.data(), dtype, kt + i);
              s += q[i] * krow[size_t(i)];
            }
            part.add(s, vrow.data(), d);
          }
          if (r == new_token_rank(n)) {
            float s = 0;
            for (int64_t i = 0; i < d; ++i) s += q[i] * k_new[i];
            part.add(s, v_new, d);
          }
        }
        const std::vector<float> merged = cpu::merge_partials(parts, d);
        for (int64_t i = 0; i < d; ++i)
          o[size_t((b * m.num_heads + g * group + h) * d + i)] = round_to_dtype(dtype, merged[size_t(i)]);
      }
    }
  }
  // Output projection: each group's columns of Wo give a partial; partials added in group order.
  const int64_t cols = group * d, q_width = m.num_heads * d;
  for (int64_t row = 0; row < hidden; ++row) {
    cpu::load_row(w.wo, row, wrow.data());
    for (int64_t b = 0; b < batch; ++b) {
      float sum = 0;
      for (int64_t g = 0; g < hkv; ++g) {
        float part = 0;
        for (int64_t c = g * cols; c < (g + 1) * cols; ++c)
          part += wrow[size_t(c)] * o[size_t(b * q_width + c)];
        sum += part;
      }
      out_acc[size_t(b * hidden + row)] = sum;
    }
  }
  for (int64_t i = 0; i < batch * hidden; ++i)
    store_from_float(step.out.data(), dtype, i, out_acc[size_t(i)]);
}

}  // namespace tessera::decode
