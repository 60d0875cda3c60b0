// SafetensorsFile: the file mapped once (private, so writes through a view stay in this
// process), its header validated before any view is handed out.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/model/safetensors.h"

namespace tessera::model {

struct SafetensorsFile::State {
  std::string path;
  uint8_t* base = nullptr;  // the mapping; nullptr for an empty file
  size_t size = 0;
  SafetensorsHeader header;
  std::map<std::string, size_t, std::less<>> index;  // name -> header.tensors[i]

  ~State() {
    if (base != nullptr) ::munmap(base, size);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto state = std::make_shared<State>();
  state->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSERA_CHECK(fd >= 0, ErrorCode::kSystem, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(ErrorCode::kSystem, str(path, ": not a regular file"));
  }
  state->size = size_t(st.st_size);
  if (state->size > 0) {
    void* p = ::mmap(nullptr, state->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    TESSERA_CHECK(p != MAP_FAILED, ErrorCode::kSystem, path, ": cannot map ", state->size,
                  " bytes: ", std::strerror(mmap_errno));
    state->base = static_cast<uint8_t*>(p);
  } else {
    ::close(fd);
  }
  state->header = parse_safetensors_header({state->base, state->size}, path);
  for (size_t i = 0; i < state->header.tensors.size(); ++i)
    state->index.emplace(state->header.tensors[i].name, i);
  SafetensorsFile file;
  file.state_ = std::move(state);
  return file;
}

const std::string& SafetensorsFile::path() const {
  TESSERA_CHECK_ARG(state_ != nullptr, "SafetensorsFile: no file is open");
  return state_->path;
}

const std::vector<SafetensorsTensor>& SafetensorsFile::tensors() const {
  TESSERA_CHECK_ARG(state_ != nullptr, "SafetensorsFile: no file is open");
  return state_->header.tensors;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  TESSERA_CHECK_ARG(state_ != nullptr, "SafetensorsFile: no file is open");
  return state_->header.metadata;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  if (state_ == nullptr) return nullptr;
  const auto it = state_->index.find(name);
  return it == state_->index.end() ? nullptr : &state_->header.tensors[it->second];
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  TESSERA_CHECK_ARG(t != nullptr, "tensor '", name, "' is not in ",
                    state_ ? state_->path : std::string("(no file)"));
  DType dtype{};
  TESSERA_CHECK(to_tessera_dtype(t->dtype, &dtype), ErrorCode::kUnsupported, state_->path,
                ": tensor '", name, "' has dtype ", safetensors_dtype_name(t->dtype),
                ": expected F32, F16, BF16, U8, I32, I64 or U64 (the dtypes Tessera computes on)");
  TESSERA_CHECK(t->shape.size() <= size_t(TensorView::kMaxDims), ErrorCode::kUnsupported,
                state_->path, ": tensor '", name, "' has ", t->shape.size(),
                " dims: expected at most ", TensorView::kMaxDims);
  uint8_t* data =
      state_->base == nullptr ? nullptr : state_->base + state_->header.data_offset + t->begin;
  return TensorView::contiguous(data, dtype, Device::cpu(), t->shape.data(), int(t->shape.size()));
}

}  // namespace tessera::model
