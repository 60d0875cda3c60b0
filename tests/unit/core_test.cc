#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "tessera/core/buffer.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/core/tensor_view.h"

namespace tessera {
namespace {

TEST(DType, Bf16RoundTripAndRounding) {
  for (float v : {0.0f, 1.0f, -2.5f, 3.140625f, 0.0078125f, 65536.0f}) {
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(v)), v) << v;
  }
  // 1 + 2^-8 is halfway between two bf16 values; ties go to even (1.0).
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
}

TEST(DType, Fp16RoundTripSubnormalAndOverflow) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f}) {
    EXPECT_EQ(fp16_bits_to_float(float_to_fp16_bits(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(fp16_bits_to_float(float_to_fp16_bits(1e6f))));
  EXPECT_EQ(fp16_bits_to_float(float_to_fp16_bits(1.0f + 1.0f / 2048)), 1.0f);  // tie to even
}

TEST(DType, ParseNamesArgumentOnError) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  try {
    parse_dtype("f8", "--dtype");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--dtype = 'f8'"), std::string::npos) << e.what();
  }
}

TEST(TensorView, ContiguousSliceAndStrides) {
  std::vector<float> data(2 * 5 * 3 * 4);
  TensorView t(data.data(), DType::kF32, Device::cpu(), {2, 5, 3, 4});  // [B, L, H, D]
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 120);
  EXPECT_EQ(t.stride(1), 12);
  TensorView s = t.slice(1, 2, 3);
  EXPECT_EQ(s.size(1), 3);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data_as<float>(), data.data() + 24);
  EXPECT_EQ(s.span_bytes(), size_t((1 * 60 + 2 * 12 + 2 * 4 + 3 + 1) * 4));
  EXPECT_THROW(t.slice(1, 4, 2), Error);
  EXPECT_THROW(t.size(4), Error);
}

TEST(TensorView, ChecksNameTheArgument) {
  std::vector<float> data(8);
  TensorView t(data.data(), DType::kF32, Device::cpu(), {8});
  try {
    check_min_bytes(t, 64, "recv");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recv"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("at least 64"), std::string::npos);
  }
  EXPECT_THROW(check_dtype(t, DType::kBF16, "q"), Error);
}

TEST(Buffer, HostAllocationAndTensor) {
  Tensor t = Tensor::empty({3, 7}, DType::kBF16, Device::cpu());
  EXPECT_EQ(t.view().numel(), 21);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 256, 0u);
  EXPECT_GE(t.buffer().bytes(), 42u);
}

const Param<int64_t> kTestParam("TESSERA_TEST_ONLY_PARAM", 7, "a parameter for this test");

TEST(Params, EnvironmentOverrideAndRegistry) {
  EXPECT_EQ(kTestParam.get(), 7);
  setenv("TESSERA_TEST_ONLY_PARAM", "11", 1);
  EXPECT_EQ(kTestParam.get(), 11);
  kTestParam.override(3);
  EXPECT_EQ(kTestParam.get(), 3);
  kTestParam.clear_override();
  setenv("TESSERA_TEST_ONLY_PARAM", "eleven", 1);
  EXPECT_THROW(kTestParam.get(), Error);
  unsetenv("TESSERA_TEST_ONLY_PARAM");
  bool found_timeout = false;
  for (const auto& p : all_params()) found_timeout |= p.name == "TESSERA_TIMEOUT_MS";
  EXPECT_TRUE(found_timeout);
}

}  // namespace
}  // namespace tessera
