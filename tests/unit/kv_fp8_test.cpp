// The FP8 KV cache's encoding (ops/kv_fp8.h) and the CPU attention over FP8 pages: the e4m3
// rounding against a brute-force nearest search, the scale's choice, the error bound, and the
// attention equal, bit for bit, to the float attention over the decoded keys and values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "batch_test_util.h"
#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/ops/kv_fp8.h"
#include "strata/ops/ops.h"

namespace strata {
namespace {

using testing::make_batch;
using testing::random_tensor;

// The e4m3fn value nearest to x by search over every finite code, ties to the even code,
// saturating at +-448 (the definition f32_to_f8e4m3 must meet).
float nearest_e4m3(float x) {
  float best = 0.f;
  double best_d = INFINITY;
  for (int c = 0; c < 0x7f; ++c) {
    const float m = f8e4m3_to_f32(uint8_t(c));
    const double d = std::fabs(double(std::fabs(x)) - m);
    if (d < best_d || (d == best_d && c % 2 == 0)) {
      best_d = d;
      best = m;
    }
  }
  return std::fabs(x) >= 448.f ? std::copysign(448.f, x) : std::copysign(best, x);
}

TEST(KvFp8, E4m3RoundingIsNearestTiesToEven) {
  std::vector<float> xs;
  for (int c = 0; c < 0x7f; ++c) {
    const float v = f8e4m3_to_f32(uint8_t(c)), next = f8e4m3_to_f32(uint8_t(c + 1));
    xs.insert(xs.end(), {v, -v});
    if (c + 1 < 0x7f) {  // the midpoint (a tie) and a hair either side of it
      const float mid = (v + next) / 2;
      xs.insert(xs.end(), {mid, -mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1000.f)});
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> e(-14.f, 10.f);
  for (int i = 0; i < 200000; ++i) xs.push_back((i % 2 ? -1.f : 1.f) * std::exp2(e(rng)));
  xs.insert(xs.end(), {0.f, -0.f, 448.f, 463.9f, 464.f, 1e30f, -1e30f, INFINITY, -INFINITY, 1e-30f,
                       std::numeric_limits<float>::denorm_min()});
  for (float x : xs) {
    const float got = f8e4m3_to_f32(f32_to_f8e4m3(x));
    ASSERT_EQ(got, nearest_e4m3(x)) << "x = " << x;
    ASSERT_EQ(std::signbit(got), std::signbit(x)) << "x = " << x;
  }
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(NAN))));
}

TEST(KvFp8, ScaleIsTheSmallestPowerOfTwoThatFits) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> e(-120.f, 120.f);
  std::vector<float> amaxes{448.f, 448.1f, 447.9f, 224.f, 1.f, 0.875f, 0.8751f, 3.5f};
  for (int i = 0; i < 10000; ++i) amaxes.push_back(std::exp2(e(rng)));
  for (float amax : amaxes) {
    const int ex = int(ops::kv_fp8_scale_byte(amax)) - 127;
    EXPECT_LE(double(amax) * std::exp2(-ex), 448.0) << amax;
    if (ex > -127) {  // -127: clamped
      EXPECT_GT(double(amax) * std::exp2(-(ex - 1)), 448.0) << amax;
    }
  }
  EXPECT_EQ(ops::kv_fp8_scale_byte(0.f), 127);
  EXPECT_EQ(ops::kv_fp8_scale_byte(INFINITY), 127);
  EXPECT_EQ(ops::kv_fp8_scale_byte(NAN), 127);
  EXPECT_EQ(ops::kv_fp8_scale_byte(1e-44f), 0);      // clamped at 2^-127
  EXPECT_EQ(ops::kv_fp8_scale_byte(3e38f), 127 + 120);  // 3e38 = 0.88 * 2^128
}

TEST(KvFp8, EncodeDecodeErrorIsHalfAnE4m3Step) {
  std::mt19937 rng(9);
  std::normal_distribution<float> n(0.f, 1.f);
  const int64_t d = 256;
  std::vector<float> x(d), back(d);
  std::vector<uint8_t> codes(d);
  uint8_t scale = 0;
  for (float magnitude : {1e-6f, 0.03f, 1.f, 37.f, 5e4f}) {
    for (int rep = 0; rep < 20; ++rep) {
      float amax = 0;
      for (float& v : x) {
        v = n(rng) * magnitude;
        amax = std::max(amax, std::fabs(v));
      }
      ops::kv_fp8_encode(x.data(), d, codes.data(), &scale);
      ops::kv_fp8_decode(codes.data(), scale, d, back.data());
      const float s = ue8m0_to_f32(scale);
      EXPECT_GT(amax / s, 224.f);
      for (int64_t i = 0; i < d; ++i) {
        // Normal codes: half a step of 3 mantissa bits; subnormal ones: half of 2^-9 * s.
        const float bound = std::max(std::fabs(x[i]) / 16.f, s * std::ldexp(1.f, -10));
        ASSERT_LE(std::fabs(back[i] - x[i]), bound) << "magnitude " << magnitude << ", element " << i;
      }
      // Decoded values are fixed points: encoding them again gives them back (the scale may halve,
      // when the largest element rounded down to 224 s).
      std::vector<uint8_t> again(d);
      std::vector<float> back2(d);
      uint8_t scale2 = 0;
      ops::kv_fp8_encode(back.data(), d, again.data(), &scale2);
      ops::kv_fp8_decode(again.data(), scale2, d, back2.data());
      EXPECT_EQ(back2, back);
    }
  }
  // Zeros, NaN and infinities: no scale from them, and nothing non-finite becomes a number.
  std::vector<float> odd(d, 0.f);
  ops::kv_fp8_encode(odd.data(), d, codes.data(), &scale);
  EXPECT_EQ(scale, 127);
  for (uint8_t c : codes) EXPECT_EQ(c, 0);
  odd[3] = NAN;
  odd[5] = INFINITY;
  odd[6] = -INFINITY;
  odd[7] = 2.f;
  ops::kv_fp8_encode(odd.data(), d, codes.data(), &scale);
  ops::kv_fp8_decode(codes.data(), scale, d, back.data());
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_TRUE(std::isnan(back[5]));
  EXPECT_TRUE(std::isnan(back[6]));
  EXPECT_EQ(back[7], 2.f);
}

// x [T, H, D] with every (token, head) vector replaced by its FP8 encoding, decoded.
Tensor through_fp8(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::kF32);
  const int64_t d = x.dim(-1);
  std::vector<uint8_t> codes(static_cast<size_t>(d));
  for (int64_t r = 0; r < x.numel() / d; ++r) {
    uint8_t s = 0;
    ops::kv_fp8_encode(x.data<float>() + r * d, d, codes.data(), &s);
    ops::kv_fp8_decode(codes.data(), s, d, y.data<float>() + r * d);
  }
  return y;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Two steps through one cache (a prefill, then a mixed batch that continues it beside a fresh
// sequence), at the Qwen3.5 attention shape (16 query heads over 2 kv heads of 256, scaled
// down to 4 / 2 heads here to keep the test short).
TEST(KvFp8, AttentionEqualsFloatAttentionOverTheDecodedValues) {
  std::mt19937 rng(10);
  const int64_t hq = 4, hkv = 2, d = 256, block = 16;
  int blocks = 0, first_blocks = 0;
  ForwardBatch second = make_batch({5, 21}, {37, 0}, int(block), &blocks);
  ForwardBatch first = make_batch({37}, {0}, int(block), &first_blocks);
  first.seqs[0].block_table = second.seqs[0].block_table;
  ops::PagedKv fp8{Tensor::zeros({blocks, block, hkv, d}, DType::kF8E4M3),
                   Tensor::zeros({blocks, block, hkv, d}, DType::kF8E4M3),
                   Tensor::zeros({blocks, block, hkv}, DType::kUE8M0), Tensor::zeros({blocks, block, hkv}, DType::kUE8M0)};
  ASSERT_TRUE(fp8.fp8());
  ops::PagedKv f32{Tensor::zeros({blocks, block, hkv, d}, DType::kF32), Tensor::zeros({blocks, block, hkv, d}, DType::kF32),
                   {}, {}};
  ops::PagedKv exact{Tensor::zeros({blocks, block, hkv, d}, DType::kF32),
                     Tensor::zeros({blocks, block, hkv, d}, DType::kF32), {}, {}};
  for (const ForwardBatch* b : {&first, &second}) {
    const int64_t t = b->num_tokens();
    Tensor q = random_tensor({t, hq, d}, rng, 0.2f), k = random_tensor({t, hkv, d}, rng, 3.f),
           v = random_tensor({t, hkv, d}, rng, 0.05f), gate = random_tensor({t, hq * d}, rng);
    Tensor got = Tensor::empty({t, hq, d}, DType::kF32), want = Tensor::empty({t, hq, d}, DType::kF32),
           unq = Tensor::empty({t, hq, d}, DType::kF32);
    ops::paged_attention_gated(q, k, v, fp8, *b, 0.0625f, gate, got);
    ops::paged_attention_gated(q, through_fp8(k), through_fp8(v), f32, *b, 0.0625f, gate, want);
    ops::paged_attention_gated(q, k, v, exact, *b, 0.0625f, gate, unq);
    EXPECT_TRUE(bitwise_equal(got, want)) << "step of " << t << " tokens";
    double err = 0, top = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      err = std::max(err, double(std::fabs(got.data<float>()[i] - unq.data<float>()[i])));
      top = std::max(top, double(std::fabs(unq.data<float>()[i])));
    }
    std::printf("  step of %lld tokens: FP8 KV against float KV, max |d| %.3g of max |out| %.3g\n", (long long)t, err,
                top);
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, 0.1 * top);
  }
}

// paged_kv_write (the draft head's catch-ups) leaves the cache paged_attention leaves, float and
// FP8 pages alike, and touches nothing else (a mixed batch: a chunk after cached tokens beside a
// fresh sequence, neither a whole number of pages).
TEST(KvFp8, KvWriteLeavesTheCacheAttentionLeaves) {
  std::mt19937 rng(12);
  const int64_t hq = 4, hkv = 2, d = 256, block = 16;
  int blocks = 0;
  const ForwardBatch b = make_batch({5, 21}, {37, 0}, int(block), &blocks);
  const int64_t t = b.num_tokens();
  const Tensor q = random_tensor({t, hq, d}, rng), k = random_tensor({t, hkv, d}, rng, 3.f),
               v = random_tensor({t, hkv, d}, rng);
  for (const bool fp8 : {false, true}) {
    auto cache = [&] {
      std::mt19937 fill(13);  // the same stale contents in both caches
      if (!fp8) return ops::PagedKv{random_tensor({blocks, block, hkv, d}, fill), random_tensor({blocks, block, hkv, d}, fill), {}, {}};
      ops::PagedKv c{Tensor::zeros({blocks, block, hkv, d}, DType::kF8E4M3), Tensor::zeros({blocks, block, hkv, d}, DType::kF8E4M3),
                     Tensor::zeros({blocks, block, hkv}, DType::kUE8M0), Tensor::zeros({blocks, block, hkv}, DType::kUE8M0)};
      for (const Tensor* x : {&c.k, &c.v, &c.k_scale, &c.v_scale}) {
        for (int64_t i = 0; i < int64_t(x->nbytes()); ++i) static_cast<uint8_t*>(x->raw())[i] = uint8_t(fill() % 120);
      }
      return c;
    };
    const ops::PagedKv by_attention = cache(), by_write = cache();
    Tensor out = Tensor::empty({t, hq, d}, DType::kF32);
    ops::paged_attention(q, k, v, by_attention, b, 0.0625f, out);
    ops::paged_kv_write(k, v, by_write, b);
    EXPECT_TRUE(bitwise_equal(by_write.k, by_attention.k)) << (fp8 ? "FP8" : "float") << " keys";
    EXPECT_TRUE(bitwise_equal(by_write.v, by_attention.v)) << (fp8 ? "FP8" : "float") << " values";
    if (fp8) {
      EXPECT_TRUE(bitwise_equal(by_write.k_scale, by_attention.k_scale));
      EXPECT_TRUE(bitwise_equal(by_write.v_scale, by_attention.v_scale));
    }
    EXPECT_FALSE(bitwise_equal(by_write.k, cache().k)) << "nothing was written";
  }
}

TEST(KvFp8, AttentionNamesMissingScales) {
  std::mt19937 rng(11);
  int blocks = 0;
  ForwardBatch b = make_batch({3}, {0}, 16, &blocks);
  Tensor q = random_tensor({3, 2, 16}, rng), k = random_tensor({3, 1, 16}, rng), v = random_tensor({3, 1, 16}, rng);
  Tensor out = Tensor::empty({3, 2, 16}, DType::kF32);
  ops::PagedKv c{Tensor::zeros({blocks, 16, 1, 16}, DType::kF8E4M3), Tensor::zeros({blocks, 16, 1, 16}, DType::kF8E4M3),
                 Tensor::zeros({blocks, 16, 1}, DType::kUE8M0), {}};
  try {
    ops::paged_attention(q, k, v, c, b, 0.25f, out);
    FAIL() << "an FP8 cache without v_scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("UE8M0 scales"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
