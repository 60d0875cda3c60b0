// The online-softmax partial of one CTA's slice of the keys, in float32: what the cpu emulations
// of the fused decode kernels (split_emulation.cc, latent_split_emulation.cc) keep per CTA and
// merge in rank order, as the kernels' ClusterReduce does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tessera::decode::cpu {

inline constexpr float kNoKey = -std::numeric_limits<float>::infinity();

// exp(m - m_max), zero for a partial that saw no key.
inline float rescale(float m, float m_max) { return m == kNoKey ? 0.f : std::exp(m - m_max); }

struct SoftmaxPartial {
  float m = kNoKey, l = 0.f;
  std::vector<float> o;
  explicit SoftmaxPartial(int64_t d = 0) : o(static_cast<size_t>(d), 0.f) {}
  // Folds one key's score s and value row v.
  void add(float s, const float* v, int64_t d) {
    const float m_new = std::max(m, s);
    const float corr = rescale(m, m_new), p = std::exp(s - m_new);
    l = l * corr + p;
    for (int64_t i = 0; i < d; ++i) o[size_t(i)] = o[size_t(i)] * corr + p * v[i];
    m = m_new;
  }
};

// The partials merged by their common maximum, rescaled and added in rank order: o / l (zero
// where no partial saw a key).
inline std::vector<float> merge_partials(const std::vector<SoftmaxPartial>& parts, int64_t d) {
  float m_max = kNoKey;
  for (const SoftmaxPartial& part : parts) m_max = std::max(m_max, part.m);
  float l = 0;
  std::vector<float> acc(static_cast<size_t>(d), 0.f);
  for (const SoftmaxPartial& part : parts) {
    const float f = rescale(part.m, m_max);
    l += part.l * f;
    for (int64_t i = 0; i < d; ++i) acc[size_t(i)] += part.o[size_t(i)] * f;
  }
  for (float& a : acc) a = l > 0 ? a / l : 0.f;
  return acc;
}

}  // namespace tessera::decode::cpu
