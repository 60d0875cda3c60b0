// A model's weights by Hugging Face tensor name, from one .safetensors file or a directory
// (model.safetensors.index.json naming the shard file of every tensor, or a single
// model.safetensors), every file memory-mapped. Layers ask for their tensors with the shape
// and dtype they expect, whole or as the tensor-parallel shard of one rank, and get cpu views
// into the mappings (the runtime copies them to the device it runs on).
//
// Tensor parallelism (Megatron's split of a linear y = x W^T, W [out, in] as Hugging Face
// stores it): a column-parallel linear (q, k, v, gate, up) gives rank r of P the rows
// [r out/P, (r+1) out/P) of W (TensorShard::rows); a row-parallel linear (o, down) gives it
// the columns [r in/P, (r+1) in/P) (TensorShard::columns), a strided view. P must divide the
// split dimension; anything else is refused naming the tensor.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor_view.h"
#include "tessera/model/safetensors.h"

namespace tessera::model {

struct TensorShard {
  int dim = 0;    // the dimension split across ranks
  int rank = 0;   // this rank, in [0, ranks)
  int ranks = 1;  // P

  static TensorShard whole() { return {0, 0, 1}; }
  static TensorShard rows(int rank, int ranks) { return {0, rank, ranks}; }     // column-parallel
  static TensorShard columns(int rank, int ranks) { return {1, rank, ranks}; }  // row-parallel
};

// The part of `full` that `shard` gives its rank: [r n/P, (r+1) n/P) of dimension `dim`, same
// strides. Throws kInvalidArgument naming `what` if dim is out of range, rank is outside
// [0, ranks), ranks < 1, or ranks does not divide that dimension.
TensorView shard_view(const TensorView& full, const TensorShard& shard, std::string_view what);

class WeightStore {
 public:
  WeightStore() = default;
  // `path`: a .safetensors file, or a directory with model.safetensors.index.json (sharded)
  // or model.safetensors. Every file is opened and validated here; the index must be valid
  // JSON with a weight_map of tensor name -> file name in the directory, and every tensor it
  // names must be in that file. A tensor in two files is refused.
  static WeightStore open(const std::string& path);

  bool contains(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  // The file holding `name` (kInvalidArgument naming it when there is none).
  const SafetensorsFile& file_of(std::string_view name) const;

  // The whole tensor as stored.
  TensorView tensor(std::string_view name) const;
  // The tensor, checked to have `shape` and `dtype` (errors name the tensor, its file, what it
  // has and what was expected), then cut to `shard`.
  TensorView tensor(std::string_view name, std::initializer_list<int64_t> shape, DType dtype,
                    const TensorShard& shard = TensorShard::whole()) const;
  TensorView tensor(std::string_view name, const std::vector<int64_t>& shape, DType dtype,
                    const TensorShard& shard = TensorShard::whole()) const;

  struct State;

 private:
  std::shared_ptr<const State> state_;
};

// The weight_map of a model.safetensors.index.json text: tensor name -> shard file name. Each
// file name must be a plain name in the index's directory (no '/', not '.' or '..'); anything
// else, or a field of the wrong type, throws kInvalidArgument naming `source` and the field.
std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           std::string_view source);

// Writes model.safetensors.index.json into `directory` for shard files already written there:
// every tensor of each file goes into the weight_map, total_size the sum of their bytes.
void write_safetensors_index(const std::string& directory, const std::vector<std::string>& files);

}  // namespace tessera::model
