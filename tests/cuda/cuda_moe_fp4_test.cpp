// NVFP4 and MXFP4 experts kept compressed on the GPU (F4_E2M1 codes; NVFP4: e4m3 scale bytes per 16
// columns and an F32 global a row; MXFP4: ue8m0 scale bytes per 32 columns; Tensor::with_scale)
// through every MoE path (docs/plans/fp4_kernels.md S3, §7): the decode GEMVs (routing given or
// inside, the shared expert fused) and the grouped mma.sync tiles, which take FP4 experts at every
// token count above the GEMVs' (never the wgmma kernel), against the CPU op on the same kept
// tensors; the tiles with power-of-two globals (and MXFP4, whose scales are powers of two) bit for
// bit against the bf16 path on the dequantised weights; the shapes refused by name; and the
// decoding of every (code, scale byte) pair through dequant_fp4_to_bf16, which uses the kernels'
// decode helpers (fp4_weights.cuh: e2m1x8_values, fp4_scale_value), against nvfp4_value /
// mxfp4_value. At the Qwen3.5-35B-A3B expert shape (256 experts, hidden 2048, intermediate 512,
// top 8, shared expert 512) and at an intermediate of 160 (K of 32 mod 64, partial column blocks).
#include <cmath>
#include <cstring>
#include <random>

#include "cuda_test_util.h"
#include "../unit/expect_error.h"

namespace strata::testing {
namespace {

enum class Fp4 { kNvfp4, kMxfp4 };
// NVFP4 globals: kRealistic as `strata quantize`'s dummy weights (0.0346 / (6 x 448), varied a
// row); kPowerOfTwo 2^-16 and 2^-17 on alternate rows (gate and up rows differ).
enum class Globals { kRealistic, kPowerOfTwo };

const char* name(Fp4 f) { return f == Fp4::kNvfp4 ? "NVFP4" : "MXFP4"; }

// Uniform random bytes in [lo, hi] over t's storage.
void random_bytes(const Tensor& t, std::mt19937_64& rng, int lo = 0, int hi = 255) {
  auto* p = static_cast<uint8_t*>(t.raw());
  const size_t n = t.nbytes();
  if (lo == 0 && hi == 255) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t v = rng();
      std::memcpy(p + i, &v, 8);
    }
    for (; i < n; ++i) p[i] = uint8_t(rng());
    return;
  }
  std::uniform_int_distribution<int> u(lo, hi);
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t(u(rng));
}

// Random kept experts [e, rows, cols] on the CPU, as the dummy loader's (plan §6): uniform code
// bytes (every code valid); NVFP4 scale bytes uniform in [0x70, 0x7e] (128 .. 448), MXFP4 in
// {118, 119} (2^-9, 2^-8): |w| <= 0.0346 or 0.0234.
Tensor random_fp4_experts(Fp4 f, Globals globals, int64_t e, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  Tensor codes = Tensor::empty({e, rows, cols}, DType::kF4E2M1);
  random_bytes(codes, rng);
  if (f == Fp4::kMxfp4) {
    Tensor scale = Tensor::empty({e, rows, cols / 32}, DType::kUE8M0);
    random_bytes(scale, rng, 118, 119);
    return codes.with_scale(scale, 32);
  }
  Tensor scale = Tensor::empty({e, rows, cols / 16}, DType::kF8E4M3);
  random_bytes(scale, rng, 0x70, 0x7e);
  Tensor global = Tensor::empty({e, rows}, DType::kF32);
  std::uniform_real_distribution<float> u(0.75f, 1.25f);
  for (int64_t i = 0; i < global.numel(); ++i) {
    global.data<float>()[i] =
        globals == Globals::kPowerOfTwo ? std::ldexp(1.f, -16 - int(i % 2)) : 0.0346f / (6 * 448) * u(rng);
  }
  return codes.with_scale(scale, 16, global);
}

// A stack of experts on the CPU and the GPU; with `bf16`, also its dequantised weights rounded to
// bf16 on the GPU (exact for MXFP4 and power-of-two globals: c * s * g has at most 6 significant bits).
struct Experts {
  Fp4 format = Fp4::kNvfp4;
  int64_t e = 0, h = 0, inter = 0;
  Tensor gu, down, g_gu, g_down, bf_gu, bf_down;
};

Experts make_experts(Fp4 f, Globals globals, int64_t e, int64_t h, int64_t inter, bool bf16, unsigned seed) {
  std::mt19937_64 rng(seed);
  Experts x;
  x.format = f, x.e = e, x.h = h, x.inter = inter;
  x.gu = random_fp4_experts(f, globals, e, 2 * inter, h, rng);
  x.down = random_fp4_experts(f, globals, e, h, inter, rng);
  x.g_gu = x.gu.to(Device::kCuda);
  x.g_down = x.down.to(Device::kCuda);
  if (bf16) {
    x.bf_gu = to_gpu(x.gu.to_f32());
    x.bf_down = to_gpu(x.down.to_f32());
  }
  return x;
}

// bf16 activations and output (the kernels keep the weights exact, f32 sums): a few roundings of 2^-9.
constexpr double kTol = 1e-2;

// t tokens routed to top_k of the experts, with a shared expert of shared_inter (0: none).
void check(const Experts& ex, int64_t t, int64_t top_k, int64_t shared_inter, const char* what) {
  std::mt19937 rng(unsigned(t * 131 + ex.e * 7 + ex.inter + int(ex.format)));
  const std::string at = std::string(name(ex.format)) + ", " + what + ": " + std::to_string(t) + " tokens, " +
                         std::to_string(ex.e) + " experts, hidden " + std::to_string(ex.h) + ", intermediate " +
                         std::to_string(ex.inter);
  Tensor logits = rand_bf16_values({t, ex.e}, rng, 2.f);
  Tensor ids = Tensor::empty({t, top_k}, DType::kI32), w = Tensor::empty({t, top_k}, DType::kF32);
  ops::moe_route_softmax(logits, int(top_k), true, ids, w);
  Tensor x = rand_bf16_values({t, ex.h}, rng);
  const bool shared = shared_inter > 0;
  Tensor sgu, sdown, sgate;
  if (shared) {
    sgu = rand_bf16_values({t, 2 * shared_inter}, rng);
    sdown = rand_bf16_values({ex.h, shared_inter}, rng, 0.05f);
    sgate = rand_bf16_values({t, 1}, rng, 2.f);
  }
  // The CPU op on the kept experts (it dequantises them exactly: to_f32).
  Tensor ref = Tensor::empty({t, ex.h}, DType::kF32);
  if (shared) {
    ops::moe_experts_shared(x, ex.gu, ex.down, ids, w, sgu, sdown, sgate, ref);
  } else {
    ops::moe_experts(x, ex.gu, ex.down, ids, w, ref);
  }
  const Tensor gids = ids.to(Device::kCuda), gw = w.to(Device::kCuda);
  auto run = [&](const Tensor& g_gu, const Tensor& g_down) {
    Tensor out = Tensor::empty({t, ex.h}, DType::kBF16, Device::kCuda);
    if (shared) {
      ops::moe_experts_shared(to_gpu(x), g_gu, g_down, gids, gw, to_gpu(sgu), to_gpu(sdown), to_gpu(sgate), out);
    } else {
      ops::moe_experts(to_gpu(x), g_gu, g_down, gids, gw, out);
    }
    return out.to(Device::kCpu);
  };
  const Tensor got = run(ex.g_gu, ex.g_down);
  const double err = scaled_err(got.to_f32(), ref);
  std::printf("  %s: error %.3g of the largest output\n", at.c_str(), err);
  EXPECT_LE(err, kTol) << at;
  if (t > 16) {
    // The mma.sync tiles hold bf16(c * s), exact, and multiply the accumulators by the rows' globals:
    // with power-of-two globals every product and partial sum is the bf16 path's on bf16(c * s * g)
    // (exact too) scaled by the same power of two, so the outputs are equal bit for bit, while the
    // bf16 path is on its mma.sync tiles too (moe_tiling: below 32 rows an expert on average).
    const bool bf16_on_mma_sync = t * top_k < 32 * ex.e;
    if (ex.bf_gu.defined() && bf16_on_mma_sync) {
      const Tensor bf = run(ex.bf_gu, ex.bf_down);
      EXPECT_EQ(std::memcmp(got.raw(), bf.raw(), got.nbytes()), 0) << at << ": differs from the bf16 path";
    }
  } else if (ex.e <= 256) {
    // Routed inside the gate/up pass.
    Tensor rids = Tensor::empty({t, top_k}, DType::kI32, Device::kCuda);
    Tensor rw = Tensor::empty({t, top_k}, DType::kF32, Device::kCuda);
    Tensor out = Tensor::empty({t, ex.h}, DType::kBF16, Device::kCuda);
    ops::moe_route_experts(to_gpu(logits, DType::kF32), int(top_k), true, rids, rw, to_gpu(x), ex.g_gu, ex.g_down,
                           shared ? to_gpu(sgu) : Tensor(), shared ? to_gpu(sdown) : Tensor(),
                           shared ? to_gpu(sgate) : Tensor(), out);
    const Tensor back = rids.to(Device::kCpu);
    ASSERT_EQ(std::memcmp(back.raw(), ids.raw(), ids.nbytes()), 0) << at << ": routed inside";
    EXPECT_LE(scaled_err(to_host_f32(out), ref), kTol) << at << ": routed inside";
  }
}

// Every token count of the plan: GEMVs up to 16, the mma.sync tiles above (2048: where bf16 and FP8
// would take wgmma tiles).
void check_production(const Experts& ex) {
  check(ex, 3, 8, 0, "GEMVs, no shared expert");
  check(ex, 40, 8, 0, "mma.sync tiles, no shared expert");
  for (int64_t t : {1, 3, 16, 17, 64, 160, 256, 2048}) check(ex, t, 8, 512, "production shape, shared expert");
}

TEST(CudaMoeFp4, Nvfp4ExpertsAtTheProductionShape) {
  STRATA_REQUIRE_GPU();
  check_production(make_experts(Fp4::kNvfp4, Globals::kRealistic, 256, 2048, 512, false, 1));
}

TEST(CudaMoeFp4, Nvfp4TilesWithPowerOfTwoGlobalsEqualTheBf16Path) {
  STRATA_REQUIRE_GPU();
  const Experts ex = make_experts(Fp4::kNvfp4, Globals::kPowerOfTwo, 256, 2048, 512, true, 2);
  for (int64_t t : {1, 17, 64, 160, 256}) check(ex, t, 8, 512, "power-of-two globals, shared expert");
}

TEST(CudaMoeFp4, Mxfp4ExpertsAtTheProductionShape) {
  STRATA_REQUIRE_GPU();
  check_production(make_experts(Fp4::kMxfp4, Globals::kRealistic, 256, 2048, 512, true, 3));
}

TEST(CudaMoeFp4, IntermediateOf160) {
  STRATA_REQUIRE_GPU();
  for (Fp4 f : {Fp4::kNvfp4, Fp4::kMxfp4}) {
    const Experts ex = make_experts(f, Globals::kPowerOfTwo, 16, 2048, 160, true, 4);
    check(ex, 3, 4, 0, "GEMVs, K of 32 mod 64");
    check(ex, 40, 4, 0, "mma.sync tiles, K of 32 mod 64, partial column blocks");
    check(ex, 300, 4, 320, "mma.sync tiles where bf16 takes wgmma, shared expert");
  }
}

TEST(CudaMoeFp4, RefusesWhatItCannotRead) {
  STRATA_REQUIRE_GPU();
  const int64_t t = 2, k = 2;
  Tensor ids = Tensor::empty({t, k}, DType::kI32, Device::kCuda);
  Tensor w = Tensor::empty({t, k}, DType::kF32, Device::kCuda);
  const Experts nv = make_experts(Fp4::kNvfp4, Globals::kRealistic, 4, 256, 64, false, 5);
  const Experts mx = make_experts(Fp4::kMxfp4, Globals::kRealistic, 4, 256, 64, false, 6);
  Tensor x = Tensor::empty({t, 256}, DType::kBF16, Device::kCuda), out = x;
  // NVFP4 of an intermediate 48 (valid: a multiple of 16): the kernels' vectors need 32.
  const Experts odd = make_experts(Fp4::kNvfp4, Globals::kRealistic, 4, 256, 48, false, 7);
  expect_error_mentions([&] { ops::moe_experts(x, odd.g_gu, odd.g_down, ids, w, out); },
                        {"moe_experts", "FP4", "48", "multiples of 32"});
  expect_error_mentions([&] { ops::moe_experts(x, nv.g_gu, mx.g_down, ids, w, out); },
                        {"moe_experts", "down", "NVFP4", "UE8M0"});
  expect_error_mentions([&] { ops::moe_experts(x, mx.g_gu, nv.g_down, ids, w, out); },
                        {"moe_experts", "down", "MXFP4", "F8_E4M3"});
  const Tensor bf_down = Tensor::empty({4, 256, 64}, DType::kBF16, Device::kCuda);
  expect_error_mentions([&] { ops::moe_experts(x, nv.g_gu, bf_down, ids, w, out); },
                        {"moe_experts", "down", "NVFP4", "BF16"});
}

// dequant_fp4_to_bf16 of w against the CPU's to_f32() rounded to bf16 (RNE), bit for bit. (A
// CUDA-only op: without CUDA the tests calling this skip before it.)
void expect_dequantised(const Tensor& w, const std::string& at) {
#if defined(STRATA_WITH_CUDA)
  const Tensor f = w.to_f32();
  std::vector<uint16_t> want(size_t(f.numel()));
  for (int64_t i = 0; i < f.numel(); ++i) want[size_t(i)] = f32_to_bf16(f.data<float>()[i]);
  Tensor out = Tensor::empty(w.shape(), DType::kBF16, Device::kCuda);
  ops::cuda::dequant_fp4_to_bf16(w.to(Device::kCuda), out);
  const Tensor got = out.to(Device::kCpu);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (got.data<uint16_t>()[i] != want[size_t(i)] && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << at << ": first at element " << first << " (of rows of " << w.dim(-1) << ")";
#else
  ADD_FAILURE() << at << ": dequant_fp4_to_bf16 needs CUDA";
#endif
}

// Row r holds the 16 codes 0..15 (twice for MXFP4's 32) under scale byte scale_bytes[r].
Tensor every_code_under(const std::vector<uint8_t>& scale_bytes, Fp4 f, float global) {
  const int64_t rows = int64_t(scale_bytes.size()), cols = f == Fp4::kNvfp4 ? 16 : 32;
  Tensor codes = Tensor::empty({rows, cols}, DType::kF4E2M1);
  auto* p = static_cast<uint8_t*>(codes.raw());
  for (int64_t i = 0; i < rows * cols / 2; ++i) p[i] = uint8_t((2 * i % 16) | ((2 * i + 1) % 16) << 4);
  Tensor scale = Tensor::empty({rows, 1}, f == Fp4::kNvfp4 ? DType::kF8E4M3 : DType::kUE8M0);
  std::memcpy(scale.raw(), scale_bytes.data(), scale_bytes.size());
  if (f == Fp4::kMxfp4) return codes.with_scale(scale, 32);
  Tensor g = Tensor::empty({rows}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) g.data<float>()[r] = global;
  return codes.with_scale(scale, 16, g);
}

// Every code under every non-NaN scale byte, decoded on the GPU as nvfp4_value / mxfp4_value: with
// global 1 each value is exact in bf16, so a flushed subnormal (the code 0.5 passes through
// 2^-127; MXFP4's scale byte 0 is 2^-127), a wrong nibble order or a wrong scale shows.
TEST(CudaMoeFp4, DecodingEveryCodeUnderEveryScaleByte) {
  STRATA_REQUIRE_GPU();
  std::vector<uint8_t> e4m3, ue8m0;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) != 0x7f) e4m3.push_back(uint8_t(b));  // not NaN (negative scales too)
    if (b != 0xff) ue8m0.push_back(uint8_t(b));
  }
  expect_dequantised(every_code_under(e4m3, Fp4::kNvfp4, 1.f), "NVFP4, global 1");
  expect_dequantised(every_code_under(e4m3, Fp4::kNvfp4, 0.0346f / (6 * 448)), "NVFP4, global 0.0346 / 2688");
  expect_dequantised(every_code_under(e4m3, Fp4::kNvfp4, 3e-39f), "NVFP4, a subnormal global");
  expect_dequantised(every_code_under(ue8m0, Fp4::kMxfp4, 1.f), "MXFP4");
}

TEST(CudaMoeFp4, DequantisedToBf16EqualsTheCpu) {
  STRATA_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  expect_dequantised(random_fp4_experts(Fp4::kNvfp4, Globals::kRealistic, 4, 1024, 2048, rng), "NVFP4 experts");
  expect_dequantised(random_fp4_experts(Fp4::kMxfp4, Globals::kRealistic, 4, 2048, 512, rng), "MXFP4 experts");
}

}  // namespace
}  // namespace strata::testing
