// Hugging Face .safetensors files: the reader (memory-mapped, header validated completely
// before any tensor is handed out) and a small writer (tests and the runtime's random models
// make their own files; there is no network).
//
// Format: an 8-byte little-endian header length N, N bytes of JSON header, then the data.
//   header = { "__metadata__": {string: string} (optional),
//              "<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
// Offsets are relative to the data (byte 8 + N). The reader checks everything the format
// promises and nothing less: 2 <= N <= 100 MB and N <= file size - 8; the header is one JSON
// object (UTF-8, no key twice, nesting at most 32 deep) whose entries have exactly those
// fields with known dtype names, non-negative dimensions (at most 8, whose non-zero ones
// multiply to at most 2^62, so a view's int64 strides cannot overflow), begin <= end;
// end - begin == numel * dtype size computed without overflow; and the tensors, ordered by
// offset, tile the data from byte 0 to its end with no gap and no overlap (the format allows
// no holes), so every tensor's bytes lie inside the file. Anything else throws
// kInvalidArgument naming the file, the tensor and the field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor_view.h"

namespace tessera::model {

// The dtypes of the safetensors format. Those Tessera computes on map to a DType; the others
// are still read and validated (their size is known), but a view of them is kUnsupported.
enum class SafetensorsDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};
const char* safetensors_dtype_name(SafetensorsDType dtype);  // "F32", "BF16", ...
size_t safetensors_dtype_size(SafetensorsDType dtype);
// The Tessera dtype of `dtype`; false when there is none (I8, F64, ...).
bool to_tessera_dtype(SafetensorsDType dtype, DType* out);
SafetensorsDType to_safetensors_dtype(DType dtype);

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;  // as the reference reader
inline constexpr int kSafetensorsMaxDims = 8;

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the data section
  uint64_t end = 0;

  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;                // 8 + N: where the data section starts in the file
  std::vector<SafetensorsTensor> tensors;  // ordered by offset
  std::map<std::string, std::string> metadata;
};

// Validates the header of a whole file held in `file` (see the top of this header); `source`
// names it in errors. The reader and the fuzzer call this; it never reads past `file`.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file, std::string_view source);

// One .safetensors file, memory-mapped (private, copy-on-write: writing through a view never
// changes the file). Views stay valid while any copy of this object lives.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  // kSystem if the file cannot be opened or mapped; kInvalidArgument if it is not valid.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const;
  const std::vector<SafetensorsTensor>& tensors() const;
  const std::map<std::string, std::string>& metadata() const;
  // nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // A cpu view of the tensor's bytes in the mapping. Throws kInvalidArgument naming the tensor
  // and the file if there is none, kUnsupported for dtypes without a DType or more than
  // TensorView::kMaxDims dims. The data may be unaligned for its dtype if the writer did not
  // align it (Tessera's writer and Hugging Face's do).
  TensorView view(std::string_view name) const;

  struct State;

 private:
  std::shared_ptr<const State> state_;
};

struct NamedTensor {
  std::string name;
  TensorView tensor;  // cpu, contiguous
};

// Writes a .safetensors file: tensors ordered by decreasing element size (then by name), so
// each lies aligned to its element size as Hugging Face's writer does; the header padded with
// spaces to a multiple of 8 bytes. Refuses duplicate or empty names, "__metadata__", tensors
// not on the cpu or not contiguous (kInvalidArgument); kSystem if the file cannot be written.
void write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera::model
