#include "tessera/tp/model_shapes.h"

#include "tessera/core/error.h"

namespace tessera::tp {

std::vector<TpLayerShape> tp_layer_shapes(const std::string& model, const char* what) {
  const std::vector<TpLayerShape> llama = {
      {"llama3-70b", "qkv", TpOp::kAllGatherGemm, (64 + 2 * 8) * 128, 8192},
      {"llama3-70b", "attn_out", TpOp::kGemmReduceScatter, 8192, 8192},
      {"llama3-70b", "mlp_up", TpOp::kAllGatherGemm, 2 * 28672, 8192},
      {"llama3-70b", "mlp_down", TpOp::kGemmReduceScatter, 8192, 28672}};
  const std::vector<TpLayerShape> gpt3 = {
      {"gpt3-175b", "qkv", TpOp::kAllGatherGemm, 3 * 12288, 12288},
      {"gpt3-175b", "attn_out", TpOp::kGemmReduceScatter, 12288, 12288},
      {"gpt3-175b", "mlp_up", TpOp::kAllGatherGemm, 49152, 12288},
      {"gpt3-175b", "mlp_down", TpOp::kGemmReduceScatter, 12288, 49152}};
  // Not in "all" (the Flux issue's shapes): a single-GPU model, for the decode GEMMs.
  const std::vector<TpLayerShape> llama8b = {
      {"llama3-8b", "qkv", TpOp::kAllGatherGemm, (32 + 2 * 8) * 128, 4096},
      {"llama3-8b", "attn_out", TpOp::kGemmReduceScatter, 4096, 4096},
      {"llama3-8b", "mlp_up", TpOp::kAllGatherGemm, 2 * 14336, 4096},
      {"llama3-8b", "mlp_down", TpOp::kGemmReduceScatter, 4096, 14336}};
  // Not in "all": Flux.1's Ulysses projection (3 x 3072 q/k/v features from 3072, head-sharded
  // by GEMM+AllToAll), for sequence-parallel DiTs.
  const std::vector<TpLayerShape> flux = {
      {"flux-12b", "ulysses_qkv", TpOp::kGemmAllToAll, 3 * 3072, 3072}};
  if (model == "llama3-70b") return llama;
  if (model == "flux-12b") return flux;
  if (model == "llama3-8b") return llama8b;
  if (model == "gpt3-175b") return gpt3;
  if (model == "all") {
    std::vector<TpLayerShape> all = llama;
    all.insert(all.end(), gpt3.begin(), gpt3.end());
    return all;
  }
  throw_error(
      ErrorCode::kInvalidArgument,
      str(what, " = '", model, "': expected llama3-70b, gpt3-175b, llama3-8b, flux-12b or all"));
}

}  // namespace tessera::tp
