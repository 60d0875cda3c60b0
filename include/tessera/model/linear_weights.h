// A dense layer's weights as diffusers and transformers store them: weight [out, in] and bias
// [out] (empty without bias), float32 host memory on the cpu backend.
#pragma once

#include <vector>

namespace tessera::model {

struct LinearWeights {
  std::vector<float> weight;  // [out, in]
  std::vector<float> bias;    // [out], or empty
};

}  // namespace tessera::model
