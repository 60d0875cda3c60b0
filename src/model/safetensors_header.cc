// The safetensors header: dtype names and the complete validation of
// parse_safetensors_header (safetensors.h). Byte counts are uint64 and every product is
// checked for overflow, so a hostile header cannot make a tensor reach outside the file.
#include <algorithm>
#include <array>

#include "model/json_fields.h"
#include "tessera/core/error.h"
#include "tessera/model/safetensors.h"

namespace tessera::model {

namespace {

using detail::Json;

struct DTypeEntry {
  SafetensorsDType dtype;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeEntry, 15> kDTypes = {{
    {SafetensorsDType::kBool, "BOOL", 1},
    {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},
    {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},
    {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},
    {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF64, "F64", 8},
    {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
}};

std::string short_name(std::string_view name) {
  return name.size() <= 80 ? std::string(name) : std::string(name.substr(0, 77)) + "...";
}

[[noreturn]] void refuse(std::string_view source, const std::string& what) {
  throw_error(ErrorCode::kInvalidArgument, str(source, ": ", what));
}

// A JSON integer as uint64 (negative or non-integer: false).
bool as_u64(const Json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

SafetensorsTensor read_entry(const std::string& name, const Json& entry, std::string_view source) {
  const std::string where = str("tensor '", short_name(name), "'");
  if (!entry.is_object())
    refuse(source, str(where, " = ", detail::describe(entry),
                       ": expected an object with dtype, shape and data_offsets"));
  for (const auto& [key, value] : entry.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      refuse(source, str(where, " has a field '", short_name(key),
                         "': expected only dtype, shape and data_offsets"));
  }
  SafetensorsTensor t;
  t.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string())
    refuse(source, str(where, ": dtype ",
                       dtype == entry.end() ? std::string("is missing") : detail::describe(*dtype),
                       ": expected a dtype name such as F32, F16, BF16, I64"));
  const std::string dtype_text = dtype->get<std::string>();
  const auto known = std::find_if(kDTypes.begin(), kDTypes.end(),
                                  [&](const DTypeEntry& e) { return dtype_text == e.name; });
  if (known == kDTypes.end())
    refuse(source,
           str(where, ": dtype = \"", short_name(dtype_text), "\": expected one of BOOL, ",
               "U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64"));
  t.dtype = known->dtype;

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array() || shape->size() > kSafetensorsMaxDims)
    refuse(source, str(where, ": shape ",
                       shape == entry.end() ? std::string("is missing") : detail::describe(*shape),
                       ": expected a list of at most ", kSafetensorsMaxDims, " dimensions"));
  // The product of the non-zero dimensions stays <= 2^62, so a view's strides (products of
  // trailing dimensions, int64) cannot overflow even when a zero dimension empties the tensor.
  uint64_t nonzero_product = 1;
  bool zero = false;
  for (const Json& d : *shape) {
    uint64_t dim = 0;
    if (!as_u64(d, &dim) || dim > uint64_t(INT64_MAX))
      refuse(source, str(where, ": shape = ", detail::describe(*shape),
                         ": expected dimensions that are integers from 0 to 2^63 - 1"));
    t.shape.push_back(int64_t(dim));
    zero |= dim == 0;
    if (dim != 0 && (__builtin_mul_overflow(nonzero_product, dim, &nonzero_product) ||
                     nonzero_product > (uint64_t{1} << 62)))
      refuse(source, str(where, ": shape = ", detail::describe(*shape),
                         ": expected at most 2^62 elements (zero dimensions left out)"));
  }
  const uint64_t numel = zero ? 0 : nonzero_product;

  const auto offsets = entry.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !as_u64((*offsets)[0], &begin) || !as_u64((*offsets)[1], &end) || begin > end)
    refuse(source, str(where, ": data_offsets ",
                       offsets == entry.end() ? std::string("is missing")
                                              : str("= ", detail::describe(*offsets)),
                       ": expected [begin, end] with 0 <= begin <= end"));
  t.begin = begin;
  t.end = end;
  uint64_t bytes = 0;
  const bool bytes_overflow = __builtin_mul_overflow(numel, known->size, &bytes);
  if (bytes_overflow || bytes != end - begin)
    refuse(source,
           str(where, ": data_offsets [", begin, ", ", end, "] hold ", end - begin,
               " bytes: expected ", bytes_overflow ? std::string("2^64 or more") : str(bytes),
               " (", known->name, " shape ", detail::describe(*shape), ")"));
  return t;
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDType dtype) {
  for (const DTypeEntry& e : kDTypes)
    if (e.dtype == dtype) return e.name;
  return "?";
}

size_t safetensors_dtype_size(SafetensorsDType dtype) {
  for (const DTypeEntry& e : kDTypes)
    if (e.dtype == dtype) return e.size;
  return 0;
}

bool to_tessera_dtype(SafetensorsDType dtype, DType* out) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      *out = DType::kF32;
      return true;
    case SafetensorsDType::kF16:
      *out = DType::kF16;
      return true;
    case SafetensorsDType::kBF16:
      *out = DType::kBF16;
      return true;
    case SafetensorsDType::kU8:
      *out = DType::kU8;
      return true;
    case SafetensorsDType::kI32:
      *out = DType::kI32;
      return true;
    case SafetensorsDType::kI64:
      *out = DType::kI64;
      return true;
    case SafetensorsDType::kU64:
      *out = DType::kU64;
      return true;
    default:
      return false;
  }
}

SafetensorsDType to_safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return SafetensorsDType::kF32;
    case DType::kF16:
      return SafetensorsDType::kF16;
    case DType::kBF16:
      return SafetensorsDType::kBF16;
    case DType::kU8:
      return SafetensorsDType::kU8;
    case DType::kI32:
      return SafetensorsDType::kI32;
    case DType::kI64:
      return SafetensorsDType::kI64;
    case DType::kU64:
      return SafetensorsDType::kU64;
    case DType::kFP8E4M3:
      return SafetensorsDType::kF8E4M3;  // torch.float8_e4m3fn, the same format
  }
  throw_error(ErrorCode::kInternal, "unknown dtype");
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file, std::string_view source) {
  if (file.size() < 8)
    refuse(source, str("the file is ", file.size(), " bytes: expected at least 8 (the header ",
                       "length), is it a .safetensors file?"));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file[size_t(i)];
  if (header_bytes < 2 || header_bytes > kSafetensorsMaxHeaderBytes ||
      header_bytes > file.size() - 8)
    refuse(source, str("header length = ", header_bytes, ": expected 2 to ",
                       std::min<uint64_t>(kSafetensorsMaxHeaderBytes, file.size() - 8), " (the ",
                       file.size(), "-byte file after its 8-byte length",
                       file.size() - 8 < kSafetensorsMaxHeaderBytes ? ", truncated?" : "", ")"));
  SafetensorsHeader header;
  header.data_offset = 8 + header_bytes;
  const uint64_t data_bytes = file.size() - header.data_offset;
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, header_bytes);
  const Json root = detail::parse_json(text, str(source, " (header)"));
  if (!root.is_object())
    refuse(source, str("header = ", detail::describe(root), ": expected a JSON object"));

  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        refuse(source,
               str("__metadata__ = ", detail::describe(entry), ": expected an object of strings"));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          refuse(source, str("__metadata__.", short_name(key), " = ", detail::describe(value),
                             ": expected a string"));
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    SafetensorsTensor t = read_entry(name, entry, source);
    if (t.end > data_bytes)
      refuse(source, str("tensor '", short_name(name), "' data_offsets [", t.begin, ", ", t.end,
                         "]: expected an end <= ", data_bytes,
                         ", the data's size (the file may be truncated)"));
    header.tensors.push_back(std::move(t));
  }

  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin
                     : a.end != b.end   ? a.end < b.end
                                        : a.name < b.name;
            });
  // The tensors must tile [0, data_bytes): each starts where the previous one ended.
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : header.tensors) {
    if (t.begin < covered)
      refuse(source, str("tensor '", short_name(t.name), "' data_offsets [", t.begin, ", ", t.end,
                         "] overlap tensor '", short_name(previous->name), "' [", previous->begin,
                         ", ", previous->end, "]: expected disjoint tensors"));
    if (t.begin > covered)
      refuse(source, str("bytes [", covered, ", ", t.begin, ") of the data belong to no tensor ",
                         "(before '", short_name(t.name), "'): expected no holes"));
    covered = t.end;
    previous = &t;
  }
  if (covered != data_bytes)
    refuse(source, str("bytes [", covered, ", ", data_bytes, ") at the end of the data belong to ",
                       "no tensor: expected the tensors to end where the file ends"));
  return header;
}

}  // namespace tessera::model
