// write_safetensors (safetensors.h): the layout Hugging Face's writer produces, so files read
// back aligned and other readers take them.
#include <algorithm>
#include <fstream>
#include <set>

#include "model/json_fields.h"
#include "tessera/core/error.h"
#include "tessera/model/safetensors.h"

namespace tessera::model {

void write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const NamedTensor*> order;
  std::set<std::string_view> names;
  for (const NamedTensor& t : tensors) {
    TESSERA_CHECK_ARG(!t.name.empty() && t.name != "__metadata__", "write_safetensors ", path,
                      ": tensor name '", t.name, "': expected a non-empty name other than ",
                      "__metadata__");
    TESSERA_CHECK_ARG(names.insert(t.name).second, "write_safetensors ", path, ": tensor '", t.name,
                      "' given twice: expected unique names");
    check_device(t.tensor, Device::cpu(), ("tensor '" + t.name + "'").c_str());
    check_contiguous(t.tensor, ("tensor '" + t.name + "'").c_str());
    TESSERA_CHECK_ARG(t.tensor.numel() == 0 || !t.tensor.empty(), "tensor '", t.name,
                      "' = ", t.tensor.to_string(), " has no data");
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](const NamedTensor* a, const NamedTensor* b) {
    return a->tensor.element_size() != b->tensor.element_size()
               ? a->tensor.element_size() > b->tensor.element_size()
               : a->name < b->name;
  });

  detail::Json header = detail::Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const NamedTensor* t : order) {
    const uint64_t bytes = uint64_t(t->tensor.numel()) * t->tensor.element_size();
    std::vector<int64_t> shape;
    for (int d = 0; d < t->tensor.ndim(); ++d) shape.push_back(t->tensor.size(d));
    header[t->name] = {{"dtype", safetensors_dtype_name(to_safetensors_dtype(t->tensor.dtype()))},
                       {"shape", shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const detail::Json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument,
                str("write_safetensors ", path, ": a tensor name or metadata string is not ",
                    "valid UTF-8: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TESSERA_CHECK(bool(out), ErrorCode::kSystem, "write_safetensors: cannot create ", path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const NamedTensor* t : order)
    out.write(static_cast<const char*>(t->tensor.data()),
              std::streamsize(uint64_t(t->tensor.numel()) * t->tensor.element_size()));
  out.close();
  TESSERA_CHECK(bool(out), ErrorCode::kSystem, "write_safetensors: cannot write ", path);
}

}  // namespace tessera::model
