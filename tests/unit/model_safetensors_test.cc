// safetensors: what the writer writes reads back (values, shapes, dtypes, alignment, metadata);
// hand-made headers that break the format are refused naming the tensor and the field; a
// sharded directory, missing tensors, wrong shapes and dtypes, truncated files; tensor-parallel
// shards.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/model/safetensors.h"
#include "tessera/model/weight_store.h"

namespace tessera::model {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera_safetensors_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file of an 8-byte length, `header` and `data` (the raw format, to break it on purpose).
  std::string raw_file(const std::string& name, const std::string& header, size_t data_bytes,
                       int64_t length_override = -1) {
    const uint64_t length = length_override >= 0 ? uint64_t(length_override) : header.size();
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(length >> (8 * i));
    bytes += header + std::string(data_bytes, '\x11');
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  fs::path dir_;
};

std::string refusal_of_file(const std::string& file, ErrorCode code = ErrorCode::kInvalidArgument) {
  try {
    SafetensorsFile::open(file);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << file << " was accepted";
  return "";
}

TEST_F(Safetensors, WrittenTensorsReadBackAlignedWithTheirValues) {
  std::vector<float> w(3 * 5);
  std::iota(w.begin(), w.end(), -7.0f);
  std::vector<uint16_t> b(7);
  for (size_t i = 0; i < b.size(); ++i) b[i] = float_to_bf16_bits(0.5f * float(i) - 1.0f);
  std::vector<int64_t> ids = {1, -2, 3};
  const std::vector<NamedTensor> tensors = {
      {"model.norm.weight", TensorView(b.data(), DType::kBF16, Device::cpu(), {7})},
      {"lm_head.weight", TensorView(w.data(), DType::kF32, Device::cpu(), {3, 5})},
      {"ids", TensorView(ids.data(), DType::kI64, Device::cpu(), {3})},
      {"empty", TensorView(nullptr, DType::kF32, Device::cpu(), {0, 4})},
  };
  write_safetensors(path("m.safetensors"), tensors, {{"format", "pt"}});

  const SafetensorsFile file = SafetensorsFile::open(path("m.safetensors"));
  ASSERT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  const TensorView lm = file.view("lm_head.weight");
  EXPECT_EQ(lm.dtype(), DType::kF32);
  ASSERT_EQ(lm.ndim(), 2);
  EXPECT_EQ(lm.size(0), 3);
  EXPECT_EQ(lm.size(1), 5);
  EXPECT_EQ(std::memcmp(lm.data(), w.data(), w.size() * 4), 0);
  const TensorView norm = file.view("model.norm.weight");
  EXPECT_EQ(norm.dtype(), DType::kBF16);
  EXPECT_EQ(std::memcmp(norm.data(), b.data(), b.size() * 2), 0);
  EXPECT_EQ(file.view("ids").data_as<int64_t>()[1], -2);
  EXPECT_EQ(file.view("empty").numel(), 0);
  for (const SafetensorsTensor& t : file.tensors()) {
    const TensorView v = file.view(t.name);
    if (v.numel() > 0)
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % v.element_size(), 0u) << t.name;
  }
  // Views write to private pages: the file keeps its bytes.
  lm.data_as<float>()[0] = 1234.0f;
  EXPECT_EQ(SafetensorsFile::open(path("m.safetensors")).view("lm_head.weight").data_as<float>()[0],
            -7.0f);
}

TEST_F(Safetensors, WriterRefusesBadNames) {
  float x = 1;
  const TensorView v(&x, DType::kF32, Device::cpu(), {1});
  const std::vector<NamedTensor> twice = {{"a", v}, {"a", v}};
  EXPECT_THROW(write_safetensors(path("t.safetensors"), twice), Error);
  const std::vector<NamedTensor> reserved = {{"__metadata__", v}};
  EXPECT_THROW(write_safetensors(path("t.safetensors"), reserved), Error);
  const std::vector<NamedTensor> strided = {
      {"s", TensorView(&x, DType::kF32, Device::cpu(), {1, 1}, {1, 2})}};
  EXPECT_NO_THROW(write_safetensors(path("t.safetensors"), strided));  // 1 x 1: contiguous
  float y[4] = {};
  const std::vector<NamedTensor> column = {
      {"c", TensorView(y, DType::kF32, Device::cpu(), {2, 1}, {2, 1})}};
  EXPECT_THROW(write_safetensors(path("t.safetensors"), column), Error);  // rows 2 apart
  const std::vector<NamedTensor> transposed = {
      {"t", TensorView(y, DType::kF32, Device::cpu(), {2, 2}, {1, 2})}};
  EXPECT_THROW(write_safetensors(path("t.safetensors"), transposed), Error);
}

TEST_F(Safetensors, RefusesBrokenHeadersNamingWhatIsWrong) {
  struct Case {
    std::string header;
    size_t data_bytes;
    std::string message;
  };
  const Case cases[] = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
       "tensor 'a' data_offsets [0, 8]: expected an end <= 4, the data's size (the file may be "
       "truncated)"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor 'a': data_offsets [0, 8] hold 8 bytes: expected 12 (F32 shape [3] (a list))"},
      {R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8,
       "tensor 'a': dtype = \"F31\": expected one of BOOL"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
       "tensor 'a': shape = [-2] (a list): expected dimensions that are integers"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8,
       "tensor 'a': data_offsets = [8,0] (a list): expected [begin, end] with 0 <= begin <= end"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8, "data_offsets = [0,8,9]"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", 8, "tensor 'a': data_offsets is missing"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8,
       "tensor 'a' has a field 'extra': expected only dtype, shape and data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
           "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "tensor 'b' data_offsets [4, 8] overlap tensor 'a' [0, 8]: expected disjoint tensors"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
       "bytes [0, 4) of the data belong to no tensor (before 'a'): expected no holes"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8,
       "bytes [4, 8) at the end of the data belong to no tensor"},
      // 2^32 * 2^32 elements: the product overflows uint64 and must not wrap to 0 bytes.
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0,
       "expected at most 2^62 elements (zero dimensions left out)"},
      // 2^62 elements of 4 bytes: the byte count overflows.
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0,
       "hold 0 bytes: expected 2^64 or more"},
      // A fuzz_safetensors input (UBSan: signed overflow in TensorView's strides): an empty
      // tensor whose other dimensions multiply past int64.
      {R"({"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})", 0,
       "shape = [0,1099511627776,1099511627776] (a list): expected at most 2^62 elements"},
      {R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4,
       "expected a list of at most 8 dimensions"},
      {R"({"__metadata__":{"format":1}})", 0,
       "__metadata__.format = 1 (an integer): expected a string"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
           "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "key \"a\" appears twice in one object"},
      {R"([1,2])", 0, "header = [1,2] (a list): expected a JSON object"},
      {R"({"a":)", 0, "(header): not valid JSON"},
  };
  int index = 0;
  for (const Case& c : cases) {
    const std::string file = raw_file("case" + std::to_string(index++), c.header, c.data_bytes);
    const std::string message = refusal_of_file(file);
    EXPECT_NE(message.find(c.message), std::string::npos) << c.header << "\n  got: " << message;
  }
}

TEST_F(Safetensors, RefusesBadHeaderLengths) {
  std::ofstream(path("short"), std::ios::binary) << "abc";
  EXPECT_NE(refusal_of_file(path("short")).find("the file is 3 bytes: expected at least 8"),
            std::string::npos);
  std::ofstream(path("empty"), std::ios::binary);
  EXPECT_NE(refusal_of_file(path("empty")).find("the file is 0 bytes"), std::string::npos);
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_NE(refusal_of_file(raw_file("long", header, 4, 1000))
                .find("header length = 1000: expected 2 to "),
            std::string::npos);
  EXPECT_NE(refusal_of_file(raw_file("huge", header, 4, int64_t(1) << 62)).find("header length"),
            std::string::npos);
  EXPECT_NE(refusal_of_file(raw_file("one", header, 4, 1)).find("header length = 1"),
            std::string::npos);
  EXPECT_NO_THROW(SafetensorsFile::open(raw_file("ok", header, 4)));
  EXPECT_NO_THROW(SafetensorsFile::open(raw_file("padded", header + "    ", 4)));
  EXPECT_EQ(refusal_of_file(path("absent"), ErrorCode::kSystem).find("absent: cannot open") ==
                std::string::npos,
            false);
}

TEST_F(Safetensors, TruncatedFileIsRefused) {
  std::vector<float> w(64, 1.0f);
  const std::vector<NamedTensor> tensors = {
      {"w", TensorView(w.data(), DType::kF32, Device::cpu(), {8, 8})}};
  write_safetensors(path("t.safetensors"), tensors);
  fs::resize_file(path("t.safetensors"), fs::file_size(path("t.safetensors")) - 3);
  EXPECT_NE(refusal_of_file(path("t.safetensors")).find("(the file may be truncated)"),
            std::string::npos);
}

TEST_F(Safetensors, ReadsOtherDTypesButViewsOnlyTesserasOwn) {
  const std::string header = R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  const SafetensorsFile file = SafetensorsFile::open(raw_file("f64", header, 8));
  ASSERT_NE(file.find("d"), nullptr);
  EXPECT_EQ(file.find("d")->dtype, SafetensorsDType::kF64);
  try {
    file.view("d");
    ADD_FAILURE() << "an F64 view was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("tensor 'd' has dtype F64"), std::string::npos);
  }
}

// A small model in two shards with its index.
class ShardedWeights : public Safetensors {
 protected:
  void SetUp() override {
    Safetensors::SetUp();
    q_.resize(4 * 6);
    o_.resize(6 * 4);
    std::iota(q_.begin(), q_.end(), 0.0f);
    std::iota(o_.begin(), o_.end(), 100.0f);
    const std::vector<NamedTensor> first = {
        {"layers.0.q_proj.weight", TensorView(q_.data(), DType::kF32, Device::cpu(), {4, 6})}};
    const std::vector<NamedTensor> second = {
        {"layers.0.o_proj.weight", TensorView(o_.data(), DType::kF32, Device::cpu(), {6, 4})}};
    write_safetensors(path("model-00001-of-00002.safetensors"), first);
    write_safetensors(path("model-00002-of-00002.safetensors"), second);
    write_safetensors_index(
        dir_.string(), {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
  }
  std::vector<float> q_, o_;
};

TEST_F(ShardedWeights, ReadsEveryTensorThroughTheIndex) {
  const WeightStore store = WeightStore::open(dir_.string());
  EXPECT_EQ(store.names(),
            (std::vector<std::string>{"layers.0.o_proj.weight", "layers.0.q_proj.weight"}));
  const TensorView q = store.tensor("layers.0.q_proj.weight", {4, 6}, DType::kF32);
  EXPECT_EQ(q.data_as<float>()[23], 23.0f);
  const TensorView o = store.tensor("layers.0.o_proj.weight", {6, 4}, DType::kF32);
  EXPECT_EQ(o.data_as<float>()[5], 105.0f);
  EXPECT_NE(store.file_of("layers.0.o_proj.weight").path().find("00002"), std::string::npos);
}

TEST_F(ShardedWeights, MissingTensorWrongShapeAndWrongDTypeAreNamed) {
  const WeightStore store = WeightStore::open(dir_.string());
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  EXPECT_NE(message([&] {
              store.tensor("layers.0.k_proj.weight", {4, 6}, DType::kF32);
            }).find("tensor 'layers.0.k_proj.weight' is missing from "),
            std::string::npos);
  EXPECT_NE(message([&] {
              store.tensor("layers.0.q_proj.weight", {6, 4}, DType::kF32);
            }).find("has shape [4, 6]: expected [6, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              store.tensor("layers.0.q_proj.weight", {4, 6}, DType::kBF16);
            }).find("has dtype F32: expected BF16"),
            std::string::npos);
}

TEST_F(ShardedWeights, IndexErrorsAreNamed) {
  auto index_refusal = [&](const std::string& text) {
    std::ofstream(path("model.safetensors.index.json"), std::ios::trunc) << text;
    try {
      WeightStore::open(dir_.string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << text << " was accepted";
    return std::string();
  };
  EXPECT_NE(index_refusal(R"({"weight_map": {"x": "../model.safetensors"}})")
                .find("weight_map[\"x\"] = \"../model.safetensors\" (a string): expected a file "
                      "name in the index's directory"),
            std::string::npos);
  EXPECT_NE(index_refusal(R"({"weight_map": {"x": 3}})").find("weight_map[\"x\"] = 3"),
            std::string::npos);
  EXPECT_NE(index_refusal(R"({"metadata": {}})").find("weight_map is missing"), std::string::npos);
  EXPECT_NE(index_refusal(R"({"weight_map": {"layers.0.k_proj.weight":
                                "model-00001-of-00002.safetensors"}})")
                .find("tensor 'layers.0.k_proj.weight' is mapped to "
                      "model-00001-of-00002.safetensors, which has no such tensor"),
            std::string::npos);
  EXPECT_NE(index_refusal(R"({"weight_map": {"a": "gone.safetensors"}})")
                .find("gone.safetensors: cannot open"),
            std::string::npos);
  // The same tensor in two shard files.
  const std::vector<NamedTensor> both = {
      {"layers.0.q_proj.weight", TensorView(q_.data(), DType::kF32, Device::cpu(), {4, 6})},
      {"layers.0.o_proj.weight", TensorView(o_.data(), DType::kF32, Device::cpu(), {6, 4})}};
  write_safetensors(path("both.safetensors"), both);
  EXPECT_NE(index_refusal(R"({"weight_map": {
                "layers.0.q_proj.weight": "model-00001-of-00002.safetensors",
                "layers.0.o_proj.weight": "both.safetensors"}})")
                .find("is in both"),
            std::string::npos);
}

TEST_F(ShardedWeights, TensorParallelShardsAreRowAndColumnSlices) {
  const WeightStore store = WeightStore::open(dir_.string());
  // Column-parallel q_proj [4, 6] over 2 ranks: rank 1 has rows 2 and 3.
  const TensorView q1 =
      store.tensor("layers.0.q_proj.weight", {4, 6}, DType::kF32, TensorShard::rows(1, 2));
  ASSERT_EQ(q1.size(0), 2);
  EXPECT_EQ(q1.size(1), 6);
  EXPECT_EQ(q1.data_as<float>()[0], 12.0f);
  EXPECT_TRUE(q1.is_contiguous());
  // Row-parallel o_proj [6, 4] over 4 ranks: rank 3 has column 3 of every row.
  const TensorView o3 =
      store.tensor("layers.0.o_proj.weight", {6, 4}, DType::kF32, TensorShard::columns(3, 4));
  ASSERT_EQ(o3.size(1), 1);
  EXPECT_EQ(o3.size(0), 6);
  for (int r = 0; r < 6; ++r)
    EXPECT_EQ(o3.data_as<float>()[r * o3.stride(0)], 100.0f + float(r * 4 + 3));
  // Every rank's shard together is the whole tensor, once.
  for (int ranks : {1, 2, 3, 6}) {
    float sum = 0;
    for (int r = 0; r < ranks; ++r) {
      const TensorView s =
          store.tensor("layers.0.o_proj.weight", {6, 4}, DType::kF32, TensorShard::rows(r, ranks));
      for (int64_t i = 0; i < s.numel(); ++i) sum += s.data_as<float>()[i];
    }
    EXPECT_EQ(sum, std::accumulate(o_.begin(), o_.end(), 0.0f)) << ranks;
  }
  auto refusal = [&](const TensorShard& shard) {
    try {
      store.tensor("layers.0.q_proj.weight", {4, 6}, DType::kF32, shard);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  EXPECT_NE(refusal(TensorShard::rows(0, 3))
                .find("tensor 'layers.0.q_proj.weight' = f32[4, 6] cpu: dim 0 (4) does not split "
                      "over 3 ranks"),
            std::string::npos);
  EXPECT_NE(refusal(TensorShard::columns(0, 4)).find("dim 1 (6) does not split over 4 ranks"),
            std::string::npos);
  EXPECT_NE(refusal(TensorShard::rows(2, 2)).find("shard rank = 2: expected 0 to 1"),
            std::string::npos);
  EXPECT_NE(refusal(TensorShard::rows(0, 0)).find("shard ranks = 0: expected >= 1"),
            std::string::npos);
  EXPECT_NE(refusal({2, 0, 2}).find("shard dim = 2: expected 0 to 1"), std::string::npos);
}

TEST_F(Safetensors, OpensASingleFileDirectory) {
  float x[3] = {1, 2, 3};
  const std::vector<NamedTensor> tensors = {{"x", TensorView(x, DType::kF32, Device::cpu(), {3})}};
  write_safetensors(path("model.safetensors"), tensors);
  EXPECT_EQ(WeightStore::open(dir_.string()).tensor("x").data_as<float>()[2], 3.0f);
  EXPECT_EQ(WeightStore::open(path("model.safetensors")).names().size(), 1u);
  fs::remove(path("model.safetensors"));
  EXPECT_THROW(WeightStore::open(dir_.string()), Error);
}

}  // namespace
}  // namespace tessera::model
