#include "model/random_weights.h"

#include <random>

namespace tessera::model {
namespace {

uint64_t name_hash(const std::string& name) {  // FNV-1a: the same on every platform
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ uint64_t(uint8_t(c))) * 1099511628211ull;
  return h;
}

}  // namespace

std::vector<float> random_tensor(uint64_t seed, const std::string& name, int64_t rows,
                                 int64_t cols, float center, float scale) {
  std::mt19937_64 rng(seed ^ name_hash(name));
  std::vector<float> out(size_t(rows * cols));
  for (float& x : out) x = center + scale * (2.0f * (float(rng() >> 40) * 0x1p-24f) - 1.0f);
  return out;
}

std::vector<float> whole_tensor(const WeightStore& store, const std::string& name, int64_t rows,
                                int64_t cols) {
  const DType dtype = store.tensor(name).dtype();
  const TensorView t =
      cols == 1 ? store.tensor(name, {rows}, dtype) : store.tensor(name, {rows, cols}, dtype);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) out[size_t(i)] = load_as_float(t.data(), dtype, i);
  return out;
}

}  // namespace tessera::model
