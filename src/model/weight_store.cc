// WeightStore (weight_store.h): one file or a sharded directory, every tensor by name.
#include "tessera/model/weight_store.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/json_fields.h"
#include "tessera/core/error.h"

namespace tessera::model {

namespace fs = std::filesystem;

struct WeightStore::State {
  std::string path;
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t, std::less<>> file_of;  // tensor name -> files[i]
};

namespace {

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  TESSERA_CHECK(bool(in), ErrorCode::kSystem, file.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void add_file(WeightStore::State& state, SafetensorsFile file) {
  const size_t index = state.files.size();
  for (const SafetensorsTensor& t : file.tensors()) {
    const auto [it, fresh] = state.file_of.emplace(t.name, index);
    TESSERA_CHECK_ARG(fresh, state.path, ": tensor '", t.name, "' is in both ",
                      state.files[it->second].path(), " and ", file.path(),
                      ": expected each tensor in one file");
  }
  state.files.push_back(std::move(file));
}

}  // namespace

std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           std::string_view source) {
  const detail::Json root = detail::parse_json(json_text, source);
  const detail::JsonFields top(root, std::string(source));
  const detail::Json* map = top.find("weight_map");
  if (map == nullptr || !map->is_object())
    top.fail("weight_map", map, "an object of tensor name -> shard file name");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : map->items()) {
    const std::string field = "weight_map[\"" + name.substr(0, 80) + "\"]";
    if (!file.is_string()) top.fail(field, &file, "a shard file name (a string)");
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
        f.find('\0') != std::string::npos)
      top.fail(field, &file, "a file name in the index's directory (no '/', not '.' or '..')");
    out.emplace(name, f);
  }
  return out;
}

WeightStore WeightStore::open(const std::string& path) {
  auto state = std::make_shared<State>();
  state->path = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    add_file(*state, SafetensorsFile::open(path));
  } else if (const fs::path index = fs::path(path) / "model.safetensors.index.json";
             fs::exists(index, ec)) {
    const auto weight_map = parse_safetensors_index(read_text(index), index.string());
    std::map<std::string, size_t> opened;  // shard file name -> files[i]
    for (const auto& [name, file] : weight_map) {
      if (!opened.count(file)) {
        opened[file] = state->files.size();
        add_file(*state, SafetensorsFile::open((fs::path(path) / file).string()));
      }
      TESSERA_CHECK_ARG(state->files[opened[file]].find(name) != nullptr, index.string(),
                        ": tensor '", name, "' is mapped to ", file, ", which has no such tensor");
    }
  } else {
    const fs::path single = fs::path(path) / "model.safetensors";
    TESSERA_CHECK(fs::exists(single, ec), ErrorCode::kInvalidArgument, path,
                  ": no model.safetensors.index.json and no model.safetensors in this directory");
    add_file(*state, SafetensorsFile::open(single.string()));
  }
  WeightStore store;
  store.state_ = std::move(state);
  return store;
}

bool WeightStore::contains(std::string_view name) const {
  return state_ != nullptr && state_->file_of.find(name) != state_->file_of.end();
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  if (state_ != nullptr)
    for (const auto& [name, file] : state_->file_of) out.push_back(name);
  return out;
}

const SafetensorsFile& WeightStore::file_of(std::string_view name) const {
  TESSERA_CHECK_ARG(state_ != nullptr, "WeightStore: no weights are open");
  const auto it = state_->file_of.find(name);
  TESSERA_CHECK_ARG(it != state_->file_of.end(), "tensor '", name, "' is missing from ",
                    state_->path);
  return state_->files[it->second];
}

TensorView WeightStore::tensor(std::string_view name) const {
  return file_of(name).view(name);
}

TensorView WeightStore::tensor(std::string_view name, std::initializer_list<int64_t> shape,
                               DType dtype, const TensorShard& shard) const {
  return tensor(name, std::vector<int64_t>(shape), dtype, shard);
}

TensorView WeightStore::tensor(std::string_view name, const std::vector<int64_t>& shape,
                               DType dtype, const TensorShard& shard) const {
  const SafetensorsFile& file = file_of(name);
  const SafetensorsTensor& info = *file.find(name);
  auto dims = [](const std::vector<int64_t>& s) {
    std::string text = "[";
    for (size_t d = 0; d < s.size(); ++d) text += str(d ? ", " : "", s[d]);
    return text + "]";
  };
  TESSERA_CHECK_ARG(info.shape == shape, "tensor '", name, "' in ", file.path(), " has shape ",
                    dims(info.shape), ": expected ", dims(shape));
  DType stored{};
  TESSERA_CHECK_ARG(to_tessera_dtype(info.dtype, &stored) && stored == dtype, "tensor '", name,
                    "' in ", file.path(), " has dtype ", safetensors_dtype_name(info.dtype),
                    ": expected ", safetensors_dtype_name(to_safetensors_dtype(dtype)));
  return shard_view(file.view(name), shard, str("tensor '", name, "'"));
}

void write_safetensors_index(const std::string& directory, const std::vector<std::string>& files) {
  detail::Json map = detail::Json::object();
  uint64_t total = 0;
  for (const std::string& f : files) {
    const SafetensorsFile file = SafetensorsFile::open((fs::path(directory) / f).string());
    for (const SafetensorsTensor& t : file.tensors()) {
      map[t.name] = f;
      total += t.bytes();
    }
  }
  const detail::Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  const fs::path path = fs::path(directory) / "model.safetensors.index.json";
  std::ofstream out(path, std::ios::trunc);
  out << index.dump(2) << "\n";
  out.close();
  TESSERA_CHECK(bool(out), ErrorCode::kSystem, path.string(), ": cannot write");
}

}  // namespace tessera::model
