// F4_E2M1 tensors (NVFP4 / MXFP4 weights kept compressed, docs/plans/fp4_kernels.md step S1): their
// logical shape (two codes a byte, low nibble first), Tensor::with_scale's two NVFP4 levels (e4m3
// block scales and an F32 global a row) and MXFP4's ue8m0 scales, to_f32 equal to io/quant.h's
// dequantisation of the same bytes bit for bit over every code and every scale byte the checkpoint
// path accepts, views that carry both levels, and the errors that name the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "expect_bitwise_equal.h"
#include "strata/core/error.h"
#include "strata/core/tensor.h"
#include "strata/io/quant.h"
#include "expect_error.h"

namespace strata {
namespace {

Tensor bytes_tensor(Shape shape, DType dtype, const std::vector<uint8_t>& bytes) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  EXPECT_EQ(t.nbytes(), bytes.size());
  std::memcpy(t.raw(), bytes.data(), bytes.size());
  return t;
}

Tensor f32_tensor(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  EXPECT_EQ(size_t(t.numel()), values.size());
  std::memcpy(t.raw(), values.data(), values.size() * 4);
  return t;
}

// Codes for `rows` rows of `cols` elements, row r's element c being code (c + r) % 16: every code in
// every column, at low and high nibbles alike. Packed low nibble first.
std::vector<uint8_t> cycling_codes(int64_t rows, int64_t cols) {
  std::vector<uint8_t> bytes(size_t(rows * cols / 2));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 2) {
      const uint8_t lo = uint8_t((c + r) % 16), hi = uint8_t((c + 1 + r) % 16);
      bytes[size_t((r * cols + c) / 2)] = uint8_t(lo | (hi << 4));
    }
  }
  return bytes;
}

// The e4m3 scale bytes dequant_nvfp4 accepts: every non-negative non-NaN byte, and -0 (a zero block).
std::vector<uint8_t> valid_nvfp4_scale_bytes() {
  std::vector<uint8_t> out;
  for (int b = 0; b < 0x7f; ++b) out.push_back(uint8_t(b));
  out.push_back(0x80);
  return out;
}

// The ue8m0 scale bytes dequant_mxfp4 accepts: all but NaN (0xff).
std::vector<uint8_t> valid_mxfp4_scale_bytes() {
  std::vector<uint8_t> out;
  for (int b = 0; b < 0xff; ++b) out.push_back(uint8_t(b));
  return out;
}

TEST(Fp4Tensor, LogicalShapeTwoCodesAByte) {
  EXPECT_EQ(dtype_bytes(DType::kF4E2M1, 6), 3u);
  EXPECT_EQ(dtype_bytes(DType::kF4E2M1, 0), 0u);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 3), 6u);
  EXPECT_EQ(dtype_bytes(DType::kF8E4M3, 5), 5u);
  EXPECT_THROW(dtype_bytes(DType::kF4E2M1, 5), Error);

  const Tensor t = Tensor::empty({3, 4, 8}, DType::kF4E2M1);
  EXPECT_EQ(t.numel(), 96);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.describe(), "F4_E2M1[3, 4, 8]");
  const Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape(), Shape({2, 4, 8}));
  EXPECT_EQ(r.nbytes(), 32u);
  EXPECT_EQ(static_cast<const char*>(r.raw()) - static_cast<const char*>(t.raw()), 16);
  EXPECT_EQ(t.reshape({12, 8}).nbytes(), 48u);
  EXPECT_EQ(t.reshape({-1, 2}).shape(), Shape({48, 2}));
  EXPECT_EQ(t.to(Device::kCpu).nbytes(), 48u);

  // An odd last dimension splits a byte: refused, named.
  expect_error_mentions([&] { t.reshape({32, 3}); }, {"F4_E2M1[3, 4, 8]", "[32, 3]", "even"});
  expect_error_mentions([] { Tensor::empty({4, 5}, DType::kF4E2M1); }, {"F4_E2M1[4, 5]", "even"});
  expect_error_mentions([] { Tensor::empty({}, DType::kF4E2M1); }, {"F4_E2M1[]", "even"});
  expect_error_mentions([&] { t.reshape({96}).rows(1, 2); }, {"F4_E2M1[96]"});
  // Codes without their scales mean no numbers.
  expect_error_mentions([&] { t.to_f32(); }, {"F4_E2M1[3, 4, 8]", "with_scale"});
}

// NVFP4: every code nibble (low and high) times every e4m3 scale byte dequant_nvfp4 accepts, with
// globals that round, that are a power of two, and that make subnormals; the row's global is its own.
TEST(Fp4Tensor, Nvfp4ToF32EqualsDequantNvfp4OverEveryCodeAndScale) {
  const std::vector<uint8_t> scale_bytes = valid_nvfp4_scale_bytes();
  const std::vector<float> globals = {1.f, 1.f / 3.f, 0.0123f, 0x1p-130f, 0x1p+20f};
  const int64_t cols = 32, groups = cols / kNvfp4Group;
  const int64_t rows = int64_t(scale_bytes.size() * globals.size());  // every (scale, global) pair
  const std::vector<uint8_t> codes = cycling_codes(rows, cols);
  std::vector<uint8_t> scales(size_t(rows * groups));
  std::vector<float> row_global(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    scales[size_t(r * groups)] = scale_bytes[size_t(r) % scale_bytes.size()];
    scales[size_t(r * groups + 1)] = scale_bytes[size_t(r * 7 + 3) % scale_bytes.size()];
    row_global[size_t(r)] = globals[size_t(r) / scale_bytes.size()];
  }
  const Tensor scale = bytes_tensor({rows, groups}, DType::kF8E4M3, scales);
  const Tensor kept = bytes_tensor({rows, cols}, DType::kF4E2M1, codes)
                          .with_scale(scale, kNvfp4Group, f32_tensor({rows}, row_global));
  EXPECT_EQ(kept.describe(), "F4_E2M1[" + std::to_string(rows) + ", 32] scaled per 16 (F8_E4M3, F32 global a row)");
  const Tensor f = kept.to_f32();
  const Tensor packed = bytes_tensor({rows, cols / 2}, DType::kU8, codes);
  for (size_t gi = 0; gi < globals.size(); ++gi) {
    const Tensor want = dequant_nvfp4(packed, scale, globals[gi], "experts.0.w1");
    const int64_t first = int64_t(gi * scale_bytes.size()), last = first + int64_t(scale_bytes.size());
    expect_bitwise_equal(f.rows(first, last), want.rows(first, last), "global " + std::to_string(globals[gi]));
  }
  // Not vacuous: row 0x38 (group 0's scale byte 0x38 = 1.0, global 1), column 5: code (5 + 56) % 16 =
  // 13, -3.
  const int64_t r = 0x38, c = 5;
  EXPECT_EQ(f.data<float>()[r * cols + c], -3.f);
  EXPECT_EQ(f.data<float>()[r * cols + c], nvfp4_value(13, 0x38, 1.f));
}

// MXFP4: every code nibble times every ue8m0 byte dequant_mxfp4 accepts (0xfd, 0xfe overflow alike).
TEST(Fp4Tensor, Mxfp4ToF32EqualsDequantMxfp4OverEveryCodeAndScale) {
  const std::vector<uint8_t> scale_bytes = valid_mxfp4_scale_bytes();
  const int64_t cols = 64, groups = cols / kMxfp4Group, rows = int64_t(scale_bytes.size());
  const std::vector<uint8_t> codes = cycling_codes(rows, cols);
  std::vector<uint8_t> scales(size_t(rows * groups));
  for (int64_t r = 0; r < rows; ++r) {
    scales[size_t(r * groups)] = scale_bytes[size_t(r)];
    scales[size_t(r * groups + 1)] = scale_bytes[size_t(rows - 1 - r)];
  }
  const Tensor scale = bytes_tensor({rows, groups}, DType::kUE8M0, scales);
  const Tensor kept = bytes_tensor({rows, cols}, DType::kF4E2M1, codes).with_scale(scale, kMxfp4Group);
  EXPECT_EQ(kept.describe(), "F4_E2M1[255, 64] scaled per 32 (UE8M0)");
  EXPECT_FALSE(kept.global_scale().defined());
  const Tensor f = kept.to_f32();
  expect_bitwise_equal(f, dequant_mxfp4(bytes_tensor({rows, cols / 2}, DType::kU8, codes), scale, "experts.0.w1"),
                       "mxfp4");
  // Row 127 (scale 2^0 in group 0): element 3 is code (3 + 127) % 16 = 2: 1.0; row 0: 0.5 * 2^-127.
  EXPECT_EQ(f.data<float>()[127 * cols + 3], 1.f);
  EXPECT_EQ(f.data<float>()[0 * cols + 1], 0x1p-128f);
}

// A stack [E, R, C] with random codes, valid scales and per-row globals.
Tensor random_nvfp4(int64_t e, int64_t r, int64_t c, unsigned seed) {
  std::mt19937 rng(seed);
  Tensor codes = Tensor::empty({e, r, c}, DType::kF4E2M1);
  for (size_t i = 0; i < codes.nbytes(); ++i) codes.data<uint8_t>()[i] = uint8_t(rng());
  Tensor scale = Tensor::empty({e, r, c / kNvfp4Group}, DType::kF8E4M3);
  for (int64_t i = 0; i < scale.numel(); ++i) scale.data<uint8_t>()[i] = uint8_t(rng() % 0x7f);
  Tensor global = Tensor::empty({e, r}, DType::kF32);
  std::uniform_real_distribution<float> g(1e-4f, 1e-2f);
  for (int64_t i = 0; i < global.numel(); ++i) global.data<float>()[i] = g(rng);
  return codes.with_scale(scale, kNvfp4Group, global);
}

TEST(Fp4Tensor, ViewsCarryBothScaleLevels) {
  const Tensor w = random_nvfp4(3, 5, 64, 7);
  const Tensor f = w.to_f32();
  // Each row its own global: row (2, 4) equals the 2-D dequantisation of its bytes with its global.
  const Tensor row = w.rows(2, 3).reshape({5, 64}).rows(4, 5);
  const Tensor one = dequant_nvfp4(Tensor::view_of(nullptr, row.raw(), {1, 32}, DType::kU8), row.scale(),
                                   w.global_scale().data<float>()[2 * 5 + 4], "experts.2.w1");
  expect_bitwise_equal(row.to_f32(), one, "one row");
  expect_bitwise_equal(one, f.reshape({15, 64}).rows(14, 15), "one row of the whole");

  const Tensor part = w.rows(1, 3);
  EXPECT_EQ(part.scale().shape(), Shape({2, 5, 4}));
  EXPECT_EQ(part.global_scale().shape(), Shape({2, 5}));
  EXPECT_EQ(part.global_scale().raw(), static_cast<const void*>(w.global_scale().data<float>() + 5));
  expect_bitwise_equal(part.to_f32(), f.rows(1, 3), "rows");

  const Tensor flat = w.reshape({15, 64});
  EXPECT_EQ(flat.scale().shape(), Shape({15, 4}));
  EXPECT_EQ(flat.global_scale().shape(), Shape({15}));
  expect_bitwise_equal(flat.to_f32(), f.reshape({15, 64}), "reshape");
  expect_bitwise_equal(flat.rows(4, 11).to_f32(), f.reshape({15, 64}).rows(4, 11), "rows of a reshape");
  expect_error_mentions([&] { w.reshape({3, 10, 32}); }, {"F4_E2M1[3, 5, 64] scaled per 16", "last dimension", "[3, 10, 32]"});

  const Tensor copy = w.to(Device::kCpu);
  EXPECT_NE(copy.raw(), w.raw());
  EXPECT_NE(copy.global_scale().raw(), w.global_scale().raw());
  EXPECT_EQ(copy.describe(), w.describe());
  expect_bitwise_equal(copy.to_f32(), f, "to");

  // MXFP4 views: the scale alone goes along.
  const Tensor mx = Tensor::zeros({2, 3, 64}, DType::kF4E2M1)
                        .with_scale(Tensor::zeros({2, 3, 2}, DType::kUE8M0), kMxfp4Group);
  EXPECT_FALSE(mx.rows(1, 2).global_scale().defined());
  EXPECT_EQ(mx.reshape({6, 64}).scale().shape(), Shape({6, 2}));
  EXPECT_FALSE(mx.to(Device::kCpu).global_scale().defined());
}

TEST(Fp4Tensor, WithScaleNamesTheTensorAndTheMismatch) {
  const Tensor codes = Tensor::empty({4, 64}, DType::kF4E2M1);
  const Tensor e4m3 = Tensor::empty({4, 4}, DType::kF8E4M3), global = Tensor::empty({4}, DType::kF32);
  const Tensor ue8m0 = Tensor::empty({4, 2}, DType::kUE8M0);
  EXPECT_NO_THROW(codes.with_scale(e4m3, 16, global));
  EXPECT_NO_THROW(codes.with_scale(ue8m0, 32));
  // NVFP4's block scale: shape, dtype.
  expect_error_mentions([&] { codes.with_scale(Tensor::empty({4, 8}, DType::kF8E4M3), 16, global); },
                        {"F4_E2M1[4, 64]", "F8_E4M3[4, 4]", "F8_E4M3[4, 8]"});
  expect_error_mentions([&] { codes.with_scale(Tensor::empty({4, 4}, DType::kUE8M0), 16, global); },
                        {"F4_E2M1[4, 64]", "F8_E4M3[4, 4]", "UE8M0[4, 4]"});
  // NVFP4's global: missing, shape, dtype.
  expect_error_mentions([&] { codes.with_scale(e4m3, 16); }, {"F4_E2M1[4, 64]", "global", "F32[4]", "none"});
  expect_error_mentions([&] { codes.with_scale(e4m3, 16, Tensor::empty({4, 1}, DType::kF32)); },
                        {"F4_E2M1[4, 64]", "F32[4]", "F32[4, 1]"});
  expect_error_mentions([&] { codes.with_scale(e4m3, 16, Tensor::empty({4}, DType::kBF16)); },
                        {"F4_E2M1[4, 64]", "F32[4]", "BF16[4]"});
  // MXFP4: shape, dtype, no global.
  expect_error_mentions([&] { codes.with_scale(Tensor::empty({4, 3}, DType::kUE8M0), 32); },
                        {"F4_E2M1[4, 64]", "UE8M0[4, 2]", "UE8M0[4, 3]"});
  expect_error_mentions([&] { codes.with_scale(Tensor::empty({4, 2}, DType::kF32), 32); },
                        {"F4_E2M1[4, 64]", "UE8M0[4, 2]", "F32[4, 2]"});
  expect_error_mentions([&] { codes.with_scale(ue8m0, 32, global); }, {"F4_E2M1[4, 64]", "no global", "F32[4]"});
  // Groups: only 16 and 32, whole groups a row.
  expect_error_mentions([&] { codes.with_scale(Tensor::empty({4, 1}, DType::kF32), 64); }, {"F4_E2M1[4, 64]", "64"});
  expect_error_mentions([&] { Tensor::empty({4, 40}, DType::kF4E2M1).with_scale(ue8m0, 32); },
                        {"F4_E2M1[4, 40]", "40", "32"});
  expect_error_mentions([&] { Tensor::empty({64}, DType::kF4E2M1).with_scale(ue8m0, 32); }, {"F4_E2M1[64]"});
  // FP8 takes no global; other dtypes no scale.
  expect_error_mentions(
      [&] { Tensor::empty({4, 200}, DType::kF8E4M3).with_scale(Tensor::empty({4, 2}, DType::kF32), 128, global); },
      {"F8_E4M3[4, 200]", "no global"});
  expect_error_mentions([&] { Tensor::empty({4, 64}, DType::kU8).with_scale(ue8m0, 32); }, {"U8[4, 64]"});
}

// view_as: a loader fills U8 bytes and views them as the F4_E2M1 codes they pack (same storage);
// a different byte count, an odd F4 row or a scaled tensor is refused.
TEST(Fp4Tensor, BytesViewedAsCodes) {
  Tensor bytes = Tensor::empty({2, 3, 16}, DType::kU8);
  for (int i = 0; i < 96; ++i) bytes.data<uint8_t>()[i] = uint8_t(i * 7);
  const Tensor codes = bytes.view_as({2, 3, 32}, DType::kF4E2M1);
  EXPECT_EQ(codes.dtype(), DType::kF4E2M1);
  EXPECT_EQ(codes.raw(), bytes.raw());
  EXPECT_EQ(codes.nbytes(), bytes.nbytes());
  expect_error_mentions([&] { bytes.view_as({2, 3, 16}, DType::kF4E2M1); }, {"U8[2, 3, 16]", "byte count"});
  expect_error_mentions([&] { bytes.view_as({192, 1}, DType::kF4E2M1); }, {"even last dimension"});
  const Tensor scaled = codes.with_scale(Tensor::empty({2, 3, 1}, DType::kUE8M0), 32);
  expect_error_mentions([&] { scaled.view_as({2, 3, 16}, DType::kU8); }, {"block-scaled"});
}

}  // namespace
}  // namespace strata
