// The tensor-parallel layers of the models Tessera's benchmarks and projections use, with
// their global GEMM shapes (N output and K input features; M is the token count):
//   llama3-70b  hidden 8192, 64 heads (8 KV heads) of 128, MLP 28672 (gate and up fused)
//   gpt3-175b   hidden 12288, 96 heads of 128, MLP 49152 (the Flux paper's shapes)
// Column-parallel layers (qkv, mlp_up) are AllGather+GEMM, row-parallel ones (attn_out,
// mlp_down) GEMM+ReduceScatter.
#pragma once

#include <string>
#include <vector>

#include "tessera/tp/request.h"

namespace tessera::tp {

struct TpLayerShape {
  std::string model;
  std::string layer;
  TpOp op;
  int64_t n = 0;
  int64_t k = 0;
};

// "llama3-70b", "gpt3-175b" or "all"; throws kInvalidArgument naming `what` otherwise.
std::vector<TpLayerShape> tp_layer_shapes(const std::string& model, const char* what = "model");

}  // namespace tessera::tp
