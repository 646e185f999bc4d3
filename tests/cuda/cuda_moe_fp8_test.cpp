// FP8 experts kept compressed on the GPU (F8_E4M3 codes with per-row scales per 128 columns,
// Tensor::with_scale) through every MoE path: the decode GEMVs (routing inside or given, the
// shared expert fused) against the CPU op on the same scaled experts; the grouped mma.sync tiles
// and the wgmma tiles (codes dequantised into their shared-memory stages) bit for
// bit against the bf16 path on the dequantised weights rounded to bf16, which is what they
// compute. At the Qwen3.5-35B-A3B expert shape (256 experts, hidden 2048, intermediate 512, top
// 8) and at edges: K of 32 mod 64, partial scale groups, partial column blocks.
#include <cstring>
#include <random>

#include "cuda_test_util.h"

namespace strata::testing {
namespace {

// Random F8 experts [E, rows, cols] with random per-row scales (the last group partial when cols
// is not a multiple of 128), on the CPU.
Tensor random_fp8_experts(int64_t e, int64_t rows, int64_t cols, std::mt19937& rng, float range) {
  Tensor codes = Tensor::empty({e, rows, cols}, DType::kF8E4M3);
  ops::fill_random_uniform(codes, rng(), 448.f);
  Tensor scale = Tensor::empty({e, rows, (cols + 127) / 128}, DType::kF32);
  std::uniform_real_distribution<float> u(0.25f, 1.f);
  for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] = u(rng) * range / 448.f;
  return codes.with_scale(scale, 128);
}

// max |got - ref| / max |ref| (no floor: these outputs are small).
double scaled_err(const Tensor& got, const Tensor& ref) {
  double m = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    scale = std::max(scale, double(std::fabs(ref.data<float>()[i])));
    const double d = std::fabs(double(got.data<float>()[i]) - ref.data<float>()[i]);
    m = std::max(m, std::isnan(d) ? INFINITY : d);
  }
  return m / scale;
}

// bf16 activations and output (the GEMVs keep the weights exact): a few roundings of 2^-9.
constexpr double kTol = 1e-2;

struct Case {
  int64_t t, e, k, h, inter, shared_inter;  // shared_inter 0: no shared expert
  const char* what;
};

void check(const Case& c) {
  std::mt19937 rng(unsigned(c.t * 131 + c.e * 7 + c.inter));
  const std::string at = std::string(c.what) + ": " + std::to_string(c.t) + " tokens, " + std::to_string(c.e) +
                         " experts, hidden " + std::to_string(c.h) + ", intermediate " + std::to_string(c.inter);
  Tensor logits = rand_bf16_values({c.t, c.e}, rng, 2.f);
  Tensor ids = Tensor::empty({c.t, c.k}, DType::kI32), w = Tensor::empty({c.t, c.k}, DType::kF32);
  ops::moe_route_softmax(logits, int(c.k), true, ids, w);
  Tensor x = rand_bf16_values({c.t, c.h}, rng);
  const Tensor gu = random_fp8_experts(c.e, 2 * c.inter, c.h, rng, 0.05f);
  const Tensor down = random_fp8_experts(c.e, c.h, c.inter, rng, 0.05f);
  const bool shared = c.shared_inter > 0;
  Tensor sgu, sdown, sgate;
  if (shared) {
    sgu = rand_bf16_values({c.t, 2 * c.shared_inter}, rng);
    sdown = rand_bf16_values({c.h, c.shared_inter}, rng, 0.05f);
    sgate = rand_bf16_values({c.t, 1}, rng, 2.f);
  }
  // The CPU op on the scaled experts (it dequantises them exactly).
  Tensor ref = Tensor::empty({c.t, c.h}, DType::kF32);
  if (shared) {
    ops::moe_experts_shared(x, gu, down, ids, w, sgu, sdown, sgate, ref);
  } else {
    ops::moe_experts(x, gu, down, ids, w, ref);
  }
  const Tensor gids = ids.to(Device::kCuda), gw = w.to(Device::kCuda);
  const Tensor ggu = gu.to(Device::kCuda), gdown = down.to(Device::kCuda);
  ASSERT_TRUE(ggu.scaled());
  auto run = [&](const Tensor& g_gu, const Tensor& g_down) {
    Tensor out = Tensor::empty({c.t, c.h}, DType::kBF16, Device::kCuda);
    if (shared) {
      ops::moe_experts_shared(to_gpu(x), g_gu, g_down, gids, gw, to_gpu(sgu), to_gpu(sdown), to_gpu(sgate), out);
    } else {
      ops::moe_experts(to_gpu(x), g_gu, g_down, gids, gw, out);
    }
    return out.to(Device::kCpu);
  };
  const Tensor got = run(ggu, gdown);
  const double err = scaled_err(got.to_f32(), ref);
  std::printf("  %s: error %.3g of the largest output\n", at.c_str(), err);
  EXPECT_LE(err, kTol) << at;
  if (c.t > 16) {
    // The grouped tiles compute with bf16(code * scale): the bf16 path on those weights, bit for bit.
    const Tensor bf = run(to_gpu(gu.to_f32()), to_gpu(down.to_f32()));
    EXPECT_EQ(std::memcmp(got.raw(), bf.raw(), got.nbytes()), 0) << at << ": differs from the bf16 path";
  } else {
    // Routed inside the gate/up pass.
    Tensor rids = Tensor::empty({c.t, c.k}, DType::kI32, Device::kCuda);
    Tensor rw = Tensor::empty({c.t, c.k}, DType::kF32, Device::kCuda);
    Tensor out = Tensor::empty({c.t, c.h}, DType::kBF16, Device::kCuda);
    ops::moe_route_experts(to_gpu(logits, DType::kF32), int(c.k), true, rids, rw, to_gpu(x), ggu, gdown,
                           shared ? to_gpu(sgu) : Tensor(), shared ? to_gpu(sdown) : Tensor(),
                           shared ? to_gpu(sgate) : Tensor(), out);
    const Tensor back = rids.to(Device::kCpu);
    ASSERT_EQ(std::memcmp(back.raw(), ids.raw(), ids.nbytes()), 0) << at << ": routed inside";
    EXPECT_LE(scaled_err(to_host_f32(out), ref), kTol) << at << ": routed inside";
  }
}

TEST(CudaMoeFp8, DecodeGemvs) {
  STRATA_REQUIRE_GPU();
  check({3, 8, 3, 256, 128, 0, "GEMVs"});
  check({5, 16, 4, 256, 192, 0, "GEMVs, a partial scale group"});
  check({2, 8, 2, 4096, 1024, 0, "GEMVs, several passes"});
  check({1, 256, 8, 2048, 512, 512, "GEMVs, production shape, shared expert"});
  check({16, 256, 8, 2048, 512, 512, "GEMVs, 16 tokens, production shape, shared expert"});
}

TEST(CudaMoeFp8, GroupedTilesEqualTheBf16PathOnDequantisedWeights) {
  STRATA_REQUIRE_GPU();
  check({40, 8, 3, 256, 128, 0, "mma.sync tiles"});
  check({40, 16, 4, 256, 192, 0, "mma.sync tiles, a partial scale group"});
  check({40, 8, 2, 96, 160, 0, "mma.sync tiles, K of 32 mod 64, partial column blocks"});
  check({160, 256, 8, 2048, 512, 512, "mma.sync tiles, production shape, shared expert"});
  check({800, 8, 2, 96, 160, 0, "wgmma tiles, K of 32 mod 64, partial column blocks"});
  check({2048, 256, 8, 2048, 512, 512, "wgmma tiles, production shape, shared expert"});
}

}  // namespace
}  // namespace strata::testing
