// Fuzzes the safetensors reader (src/model/safetensors_header.cc, safetensors_file.cc): the
// input is the file. Every input is either refused with tessera::Error or read completely and
// consistently: the tensors, ordered by offset, tile the data section exactly, each tensor's
// bytes lie inside the file and number numel * dtype size, and every byte is read (so ASan sees
// any reach outside). The tensors Tessera has dtypes for are then written with
// write_safetensors and read back through the memory-mapped reader: same names, shapes, dtypes,
// bytes and metadata. A crash, UB, another exception or a broken property is a finding.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/model/safetensors.h"

using namespace tessera;
using namespace tessera::model;

namespace {

std::string temp_file() {
  return "/tmp/tessera_fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors";
}

// numel * dtype size in 128 bits: the reader's overflow-checked count must agree.
unsigned __int128 expected_bytes(const SafetensorsTensor& t) {
  unsigned __int128 n = 1;
  for (int64_t d : t.shape) {
    n *= uint64_t(d);
    if (n > (unsigned __int128)(UINT64_MAX)) n = (unsigned __int128)(UINT64_MAX) + 1;
  }
  return n * safetensors_dtype_size(t.dtype);
}

void check_consistent(const SafetensorsHeader& h, const uint8_t* data, size_t size) {
  if (h.data_offset < 10 || h.data_offset > size) fuzz::fail("data_offset outside the file");
  uint64_t covered = 0;
  unsigned checksum = 0;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin != covered)
      fuzz::fail("tensor '" + t.name + "' does not start where the last ended");
    if (t.end < t.begin || t.end > size - h.data_offset)
      fuzz::fail("tensor '" + t.name + "' reaches past the file");
    if (expected_bytes(t) != t.bytes())
      fuzz::fail("tensor '" + t.name + "' byte count != numel * size");
    if (t.shape.size() > size_t(kSafetensorsMaxDims)) fuzz::fail("too many dims accepted");
    for (uint64_t i = t.begin; i < t.end; ++i) checksum += data[h.data_offset + i];
    covered = t.end;
  }
  if (covered != size - h.data_offset) fuzz::fail("the tensors do not end where the file ends");
  volatile unsigned sink = checksum;
  (void)sink;
}

void check_round_trip(const SafetensorsHeader& h, const uint8_t* data, size_t size) {
  std::vector<uint8_t> copy(data, data + size);  // the views must be writable
  std::vector<NamedTensor> tensors;
  std::vector<const SafetensorsTensor*> kept;
  for (const SafetensorsTensor& t : h.tensors) {
    DType dtype{};
    if (!to_tessera_dtype(t.dtype, &dtype) || t.name.empty() ||
        t.shape.size() > size_t(TensorView::kMaxDims))
      continue;
    tensors.push_back(
        {t.name, TensorView::contiguous(copy.data() + h.data_offset + t.begin, dtype, Device::cpu(),
                                        t.shape.data(), int(t.shape.size()))});
    kept.push_back(&t);
  }
  const std::string path = temp_file();
  try {
    write_safetensors(path, tensors, h.metadata);
  } catch (const Error& e) {
    fuzz::fail(std::string("write_safetensors refused tensors the reader accepted: ") + e.what());
  }
  const SafetensorsFile again = SafetensorsFile::open(path);
  if (again.tensors().size() != kept.size())
    fuzz::fail("the written file has another tensor count");
  if (again.metadata() != h.metadata) fuzz::fail("metadata does not read back");
  for (const SafetensorsTensor* t : kept) {
    const SafetensorsTensor* back = again.find(t->name);
    if (back == nullptr || back->dtype != t->dtype || back->shape != t->shape)
      fuzz::fail("tensor '" + t->name + "' does not read back with its dtype and shape");
    const TensorView v = again.view(t->name);
    if (t->bytes() > 0 && std::memcmp(v.data(), data + h.data_offset + t->begin, t->bytes()) != 0)
      fuzz::fail("tensor '" + t->name + "' does not read back with its bytes");
  }
  std::remove(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsHeader header;
  try {
    header = parse_safetensors_header({data, size}, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;  // refused, named
  } catch (const std::exception& e) {
    fuzz::fail(std::string("parse_safetensors_header threw a non-tessera exception: ") + e.what());
  }
  check_consistent(header, data, size);
  try {
    check_round_trip(header, data, size);
  } catch (const Error& e) {
    fuzz::fail(std::string("an accepted file failed its round trip: ") + e.what());
  } catch (const std::exception& e) {
    fuzz::fail(std::string("round trip threw a non-tessera exception: ") + e.what());
  }
  return 0;
}
