// FP8 block-scale and MXFP4 dequantisation, bit-exact against values decoded here by hand from
// the format definitions (not through core/dtype.h), and the errors that name the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/core/tensor.h"
#include "strata/io/quant.h"
#include "expect_error.h"

using namespace strata;

namespace {

// e4m3fn by its definition: sign, 4 exponent bits (bias 7), 3 mantissa bits, no infinities.
double e4m3_by_hand(uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return sign ? -mag : mag;
}

// e2m1 by its definition: sign, 2 exponent bits (bias 1), 1 mantissa bit.
double e2m1_by_hand(uint8_t nibble) {
  const int sign = (nibble >> 3) & 1, e = (nibble >> 1) & 3, m = nibble & 1;
  const double mag = e == 0 ? m * 0.5 : (1 + m / 2.0) * std::pow(2.0, e - 1);
  return sign ? -mag : mag;
}

Tensor bytes_tensor(Shape shape, DType dtype, const std::vector<uint8_t>& bytes) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  EXPECT_EQ(t.nbytes(), bytes.size());
  std::memcpy(t.raw(), bytes.data(), bytes.size());
  return t;
}

// A weight code for every element that is never NaN (0x7f / 0xff).
uint8_t code_at(int64_t r, int64_t c) {
  uint8_t b = uint8_t((r * 37 + c * 11 + (r * c) % 7) & 0xff);
  return (b & 0x7f) == 0x7f ? uint8_t(b ^ 0x01) : b;
}

}  // namespace

TEST(QuantFp8, HandPickedCodesAndScales) {
  // 1.0 (0x38), -2.5 (0xc2: exp 8, man 2 -> 1.25 * 2), 448 (0x7e), smallest subnormal (0x01).
  Tensor w = bytes_tensor({1, 4}, DType::kF8E4M3, {0x38, 0xc2, 0x7e, 0x01});
  Tensor s = bytes_tensor({1, 1}, DType::kUE8M0, {128});  // 2^1
  Tensor out = dequant_fp8_block(w, s, 128, 128, "w");
  const std::vector<float> want = {2.f, -5.f, 896.f, std::ldexp(1.f, -8)};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.data<float>()[i], want[size_t(i)]) << i;
}

TEST(QuantFp8, BlockScalesWithPartialBlocksAreBitExact) {
  // 200 x 300 in 128 x 128 blocks: a 2 x 3 grid of scales, the last row and column partial.
  const int64_t n = 200, k = 300;
  std::vector<uint8_t> codes(size_t(n * k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) codes[size_t(r * k + c)] = code_at(r, c);
  }
  const std::vector<uint8_t> exps = {120, 127, 130, 133, 100, 140};
  Tensor out = dequant_fp8_block(bytes_tensor({n, k}, DType::kF8E4M3, codes),
                                 bytes_tensor({2, 3}, DType::kUE8M0, exps), 128, 128, "w");
  ASSERT_EQ(out.shape(), Shape({n, k}));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const double scale = std::pow(2.0, int(exps[size_t((r / 128) * 3 + c / 128)]) - 127);
      const float want = float(e4m3_by_hand(codes[size_t(r * k + c)]) * scale);
      ASSERT_EQ(out.data<float>()[r * k + c], want) << r << "," << c;
    }
  }
}

TEST(QuantFp8, FloatScalesAreOneFloatMultiply) {
  const int64_t n = 130, k = 5;
  std::vector<uint8_t> codes(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i) codes[size_t(i)] = code_at(i, 3);
  Tensor scale = Tensor::empty({2, 1}, DType::kF32);
  scale.data<float>()[0] = 0.0123f;
  scale.data<float>()[1] = 3.7f;
  Tensor out = dequant_fp8_block(bytes_tensor({n, k}, DType::kF8E4M3, codes), scale, 128, 128, "w");
  for (int64_t i = 0; i < n * k; ++i) {
    const float s = scale.data<float>()[(i / k) / 128];
    ASSERT_EQ(out.data<float>()[i], float(e4m3_by_hand(codes[size_t(i)])) * s) << i;
  }
}

TEST(QuantFp8, ErrorsNameTheTensor) {
  Tensor w = bytes_tensor({2, 2}, DType::kF8E4M3, {0x38, 0x38, 0x38, 0x38});
  expect_error_mentions([&] { dequant_fp8_block(w, bytes_tensor({2, 1}, DType::kUE8M0, {127, 127}), 128, 128, "layers.0.attn.wq_a.weight"); },
                        {"layers.0.attn.wq_a.weight", "[1, 1]", "[2, 1]"});
  expect_error_mentions([&] { dequant_fp8_block(bytes_tensor({1, 2}, DType::kF8E4M3, {0x38, 0x7f}), bytes_tensor({1, 1}, DType::kUE8M0, {127}), 128, 128, "wkv"); },
                        {"wkv", "NaN"});
  expect_error_mentions([&] { dequant_fp8_block(w, bytes_tensor({1, 1}, DType::kUE8M0, {0xff}), 128, 128, "wkv"); },
                        {"wkv", "not finite"});
  expect_error_mentions([&] { dequant_fp8_block(w, bytes_tensor({1, 1}, DType::kU8, {1}), 128, 128, "wkv"); },
                        {"wkv", "U8"});
}

TEST(QuantMxfp4, HandPackedBytesLowNibbleFirst) {
  // One row of 64 elements: group 0 scale 2^0, group 1 scale 2^2.
  // Byte 0 = 0x21: element 0 = nibble 1 (0.5), element 1 = nibble 2 (1.0).
  // Byte 1 = 0xf7: element 2 = nibble 7 (6.0), element 3 = nibble 15 (-6.0).
  // Byte 16 = 0x9b: element 32 = nibble 11 (-1.5) * 4, element 33 = nibble 9 (-0.5) * 4.
  std::vector<uint8_t> packed(32, 0x00);
  packed[0] = 0x21;
  packed[1] = 0xf7;
  packed[16] = 0x9b;
  Tensor out = dequant_mxfp4(bytes_tensor({1, 32}, DType::kI8, packed),
                             bytes_tensor({1, 2}, DType::kUE8M0, {127, 129}), "w1");
  ASSERT_EQ(out.shape(), Shape({1, 64}));
  const float* o = out.data<float>();
  EXPECT_EQ(o[0], 0.5f);
  EXPECT_EQ(o[1], 1.0f);
  EXPECT_EQ(o[2], 6.0f);
  EXPECT_EQ(o[3], -6.0f);
  EXPECT_EQ(o[4], 0.0f);
  EXPECT_EQ(o[32], -6.0f);
  EXPECT_EQ(o[33], -2.0f);
  EXPECT_EQ(o[63], 0.0f);
}

TEST(QuantMxfp4, EveryCodeAndScaleIsBitExact) {
  const int64_t n = 3, k = 96;  // 3 groups per row
  std::vector<uint8_t> packed(size_t(n * k / 2)), scales(size_t(n * 3));
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t((i * 29 + 7) & 0xff);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(115 + 3 * i);
  Tensor out = dequant_mxfp4(bytes_tensor({n, k / 2}, DType::kU8, packed),
                             bytes_tensor({n, 3}, DType::kUE8M0, scales), "w");
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = packed[size_t(r * k / 2 + c / 2)];
      const uint8_t nibble = c % 2 ? byte >> 4 : byte & 15;
      const double scale = std::pow(2.0, int(scales[size_t(r * 3 + c / 32)]) - 127);
      ASSERT_EQ(out.data<float>()[r * k + c], float(e2m1_by_hand(nibble) * scale)) << r << "," << c;
    }
  }
}

TEST(QuantMxfp4, ErrorsNameTheTensor) {
  std::vector<uint8_t> packed(16, 0x11);
  expect_error_mentions([&] { dequant_mxfp4(bytes_tensor({1, 16}, DType::kU8, packed), bytes_tensor({1, 2}, DType::kUE8M0, {127, 127}), "experts.0.w2"); },
                        {"experts.0.w2", "[1, 1]"});
  expect_error_mentions([&] { dequant_mxfp4(bytes_tensor({1, 16}, DType::kU8, packed), bytes_tensor({1, 1}, DType::kUE8M0, {0xff}), "experts.0.w2"); },
                        {"experts.0.w2", "NaN"});
  expect_error_mentions([&] { dequant_mxfp4(bytes_tensor({1, 4}, DType::kU8, {1, 2, 3, 4}), bytes_tensor({1, 1}, DType::kUE8M0, {127}), "experts.0.w3"); },
                        {"experts.0.w3", "multiple of 32"});
}
