// copy_blocks: the loader's one pass from stored bytes to weights (core/block_copy.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "strata/core/block_copy.h"
#include "strata/core/error.h"

namespace strata {
namespace {

std::vector<uint16_t> bf16_values(int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f32_to_bf16(float(i % 1000) * 0.37f - float(i % 7));
  return v;
}

// A [rows, cols] BF16 matrix: the columns [c0, c0 + n) of every row and whole rows [r0, r1),
// read as F32 in one call and in uneven pieces, equal the scalar conversion element by element.
TEST(BlockCopy, SlicesConcatenateAndConvertExactly) {
  const int64_t rows = 37, cols = 300000;  // a row is longer than one parallel piece
  const std::vector<uint16_t> m = bf16_values(rows * cols);
  const int64_t c0 = 5, n = 123457, r0 = 3, r1 = 6;
  const std::vector<CopyBlock> blocks = {{m.data() + c0, DType::kBF16, rows, n, cols},
                                         dense_block(m.data() + r0 * cols, DType::kBF16, (r1 - r0) * cols)};
  const int64_t total = total_elements(blocks);
  ASSERT_EQ(total, rows * n + (r1 - r0) * cols);
  std::vector<float> want;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = c0; c < c0 + n; ++c) want.push_back(bf16_to_f32(m[size_t(r * cols + c)]));
  }
  for (int64_t i = r0 * cols; i < r1 * cols; ++i) want.push_back(bf16_to_f32(m[size_t(i)]));

  std::vector<float> whole(size_t(total), -1.f), pieces(size_t(total), -1.f);
  copy_blocks(blocks, 0, total, whole.data(), DType::kF32);
  for (int64_t at = 0, step = 1; at < total; at += step, step = step * 3 + 1) {
    const int64_t count = std::min(step, total - at);
    copy_blocks(blocks, at, count, pieces.data() + at, DType::kF32);
  }
  EXPECT_EQ(std::memcmp(whole.data(), want.data(), want.size() * 4), 0);
  EXPECT_EQ(std::memcmp(pieces.data(), want.data(), want.size() * 4), 0);

  // As stored (the CUDA staging copy): the same elements, still BF16.
  std::vector<uint16_t> raw(static_cast<size_t>(total));
  copy_blocks(blocks, 0, total, raw.data(), DType::kBF16);
  for (int64_t i = 0; i < total; ++i) ASSERT_EQ(bf16_to_f32(raw[size_t(i)]), want[size_t(i)]) << i;
}

// F32 and F16 to BF16 round to nearest even as f32_to_bf16 does, from an unaligned source, and
// specials (NaN, infinities, subnormals, ties) come out the same.
TEST(BlockCopy, RoundsToBf16AsTheScalarConversionFromUnalignedSources) {
  std::vector<float> f = {0.f, -0.f, 1.f, 1.00390625f, 1.01171875f, -3.5e-39f, 1e-45f, 3.4e38f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 0.1f, -65504.f};
  for (int i = 0; i < 5000; ++i) f.push_back(std::ldexp(float(i) * 1.618f, i % 60 - 30) * (i % 2 ? -1.f : 1.f));
  std::vector<char> bytes(f.size() * 4 + 1);
  std::memcpy(bytes.data() + 1, f.data(), f.size() * 4);
  std::vector<uint16_t> out(f.size());
  copy_blocks({dense_block(bytes.data() + 1, DType::kF32, int64_t(f.size()))}, 0, int64_t(f.size()), out.data(),
              DType::kBF16);
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(out[i], f32_to_bf16(f[i])) << f[i];

  std::vector<uint16_t> h;
  for (uint32_t bits = 0; bits < 65536; bits += 7) h.push_back(uint16_t(bits));
  h.push_back(0x7c00);  // +inf
  h.push_back(0x7e01);  // NaN
  h.push_back(0x0001);  // the smallest subnormal
  std::vector<uint16_t> from_h(h.size());
  std::vector<float> h_f32(h.size());
  copy_blocks({dense_block(h.data(), DType::kF16, int64_t(h.size()))}, 0, int64_t(h.size()), from_h.data(),
              DType::kBF16);
  copy_blocks({dense_block(h.data(), DType::kF16, int64_t(h.size()))}, 0, int64_t(h.size()), h_f32.data(),
              DType::kF32);
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(from_h[i], f32_to_bf16(f16_to_f32(h[i]))) << h[i];
    const float want = f16_to_f32(h[i]);
    ASSERT_EQ(std::memcmp(&h_f32[i], &want, 4), 0) << h[i];
  }
}

// The CUDA upload stages each stretch of one stored dtype as stored: a range of mixed-dtype
// blocks is copied as long as the blocks it reads convert.
TEST(BlockCopy, MixedDtypesStageOneStretchAtATime) {
  std::vector<uint16_t> h(10);
  std::vector<float> f(10);
  for (int i = 0; i < 10; ++i) {
    h[size_t(i)] = uint16_t(0x3c00 + i);  // F16 1 + i/1024
    f[size_t(i)] = float(i) - 4.5f;
  }
  const std::vector<CopyBlock> blocks = {dense_block(h.data(), DType::kF16, 10), dense_block(f.data(), DType::kF32, 10)};
  std::vector<uint16_t> h_out(10);
  std::vector<float> f_out(10);
  copy_blocks(blocks, 0, 10, h_out.data(), DType::kF16);
  copy_blocks(blocks, 10, 10, f_out.data(), DType::kF32);
  EXPECT_EQ(h_out, h);
  EXPECT_EQ(f_out, f);
  EXPECT_THROW(copy_blocks(blocks, 5, 10, h_out.data(), DType::kF16), Error);
}

TEST(BlockCopy, RefusesBadRangesAndConversionsByName) {
  const std::vector<uint16_t> m = bf16_values(16);
  const std::vector<CopyBlock> blocks = {dense_block(m.data(), DType::kBF16, 16)};
  std::vector<float> out(16);
  auto error_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of([&] { copy_blocks(blocks, 4, 13, out.data(), DType::kF32); }).find("past the blocks' 16"),
            std::string::npos);
  const std::vector<uint8_t> packed(8);
  EXPECT_NE(error_of([&] {
              copy_blocks({dense_block(packed.data(), DType::kF4E2M1, 8)}, 0, 8, out.data(), DType::kF32);
            }).find("no conversion from F4_E2M1 to F32"),
            std::string::npos);
  std::vector<uint16_t> h(16);
  EXPECT_NE(error_of([&] { copy_blocks(blocks, 0, 16, h.data(), DType::kF16); }).find("no conversion from BF16 to F16"),
            std::string::npos);
  // Rows closer together than their length: a lying layout, refused.
  EXPECT_NE(error_of([&] {
              copy_blocks({{m.data(), DType::kBF16, 4, 4, 2}}, 0, 16, out.data(), DType::kF32);
            }).find("bad block"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
