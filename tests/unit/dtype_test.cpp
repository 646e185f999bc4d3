#include <gtest/gtest.h>

#include <cmath>

#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/core/tensor.h"

using namespace strata;

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, Fp8E4M3AllCodes) {
  EXPECT_EQ(f8e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);    // exp 7, man 0
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);  // the largest finite value
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_EQ(f8e4m3_to_f32(0xb8), -1.0f);
}

TEST(DType, Fp8E5M2AndF16) {
  EXPECT_EQ(f8e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(0x7c)));
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(DType, Fp4AndUe8m0) {
  EXPECT_EQ(f4e2m1_to_f32(0x7), 6.0f);
  EXPECT_EQ(f4e2m1_to_f32(0xf), -6.0f);
  EXPECT_EQ(f4e2m1_to_f32(0x1), 0.5f);
  EXPECT_EQ(ue8m0_to_f32(127), 1.0f);
  EXPECT_EQ(ue8m0_to_f32(130), 8.0f);
}

TEST(Tensor, ReshapeRowsAndConvert) {
  Tensor t = Tensor::zeros({4, 3}, DType::kBF16);
  auto* p = t.data<uint16_t>();
  for (int i = 0; i < 12; ++i) p[i] = f32_to_bf16(float(i));
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  Tensor f = r.to_f32();
  EXPECT_EQ(f.data<float>()[0], 3.0f);
  EXPECT_EQ(f.data<float>()[5], 8.0f);
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{12}));
  EXPECT_THROW(t.reshape({5, -1}), Error);
  EXPECT_THROW(t.rows(2, 5), Error);
}
