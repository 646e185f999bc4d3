// The DeepSeek-V4 CUDA ops that need no cache (deepseek_v4.cu, and moe.cu's clamped experts)
// against the CPU reference on the same inputs, at the DeepSeek-V4-Flash shapes: hidden 4096 in 4
// hyper-connection streams, 64 query heads of 512 with a 64-wide rotary tail, the output
// projection in 8 groups of rank 1024, 256 experts top 6 of intermediate 2048 (the expert stacks
// cut to 8 experts so the CPU reference stays quick), SwiGLU limit 10. Token counts cross the
// kernels' edges: the hyper-connection blocks of 4 tokens, the experts' GEMV (<= 16 tokens),
// mma.sync and wgmma paths. Routing is compared id for id on fixtures whose top-k gaps are checked.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::testing {
namespace {

constexpr int64_t kHidden = 4096, kStreams = 4, kHeads = 64, kHeadDim = 512, kRotary = 64;
constexpr int64_t kGroups = 8, kGroupRank = 1024, kExperts = 256, kTopK = 6, kInter = 2048;
constexpr float kLimit = 10.f;
// F32 math on F32 inputs, summed in other orders: a few ulps of the largest terms.
constexpr double kF32Tol = 2e-5;

Tensor gpu_empty(Shape shape, DType dtype = DType::kBF16) { return Tensor::empty(std::move(shape), dtype, Device::kCuda); }

// A CPU F32 tensor of uniform values in +-scale (fill_random_uniform's, bit-identical anywhere),
// rounded to bf16 when `bf16_values`.
Tensor uniform(Shape shape, uint64_t seed, float scale, bool bf16_values = true) {
  Tensor t = Tensor::empty(std::move(shape), bf16_values ? DType::kBF16 : DType::kF32);
  ops::fill_random_uniform(t, seed, scale);
  return t.to_f32();
}

ops::TailRope flash_rope() {
  ops::TailRope r;
  r.rotary_dim = int(kRotary);
  for (int i = 0; i < kRotary / 2; ++i) r.inv_freq.push_back(std::pow(10000.f, -2.f * float(i) / float(kRotary)));
  r.attention_scaling = 1.f;
  return r;
}

TEST(CudaDeepseekV4, RopeInterleavedTailBothWays) {
  STRATA_REQUIRE_GPU();
  const std::vector<int32_t> positions = {0, 1, 7, 4095, 65536, 262143, 1048575};
  const int64_t t = int64_t(positions.size());
  const Tensor x = uniform({t, kHeads, kHeadDim}, 11, 2.f);
  for (bool inverse : {false, true}) {
    Tensor ref = x.to_f32();  // a copy
    ops::rope_interleaved_tail(ref, positions, flash_rope(), inverse);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      Tensor g = to_gpu(x, dt);
      ops::rope_interleaved_tail(g, positions, flash_rope(), inverse);
      // The angle is the same f32 product on both sides (positions up to 2^20), and cosf/sinf
      // (no fast math) are within two ulps of the host's cos and sin of it.
      const double tol = dt == DType::kF32 ? kF32Tol : kBf16Tol;
      expect_close(g, ref, tol, std::string(inverse ? "inverse " : "") + "rope_interleaved_tail " +
                                    (dt == DType::kF32 ? "f32" : "bf16"));
    }
  }
}

TEST(CudaDeepseekV4, RmsNormUnweighted) {
  STRATA_REQUIRE_GPU();
  const Tensor x = uniform({7, kStreams * kHidden}, 12, 3.f);
  Tensor ref = Tensor::empty(x.shape(), DType::kF32);
  ops::rms_norm_unweighted(x, 1e-6f, ref);
  Tensor out = gpu_empty(x.shape(), DType::kF32);
  ops::rms_norm_unweighted(to_gpu(x, DType::kF32), 1e-6f, out);
  expect_close(out, ref, kF32Tol, "rms_norm_unweighted f32");
  Tensor g = to_gpu(x);
  ops::rms_norm_unweighted(g, 1e-6f, g);  // in place, bf16
  expect_close(g, ref, kBf16Tol, "rms_norm_unweighted bf16 in place");
}

struct HyperSite {
  Tensor fn, base, scale;
};

// A site's weights as the published checkpoints' magnitudes: fn small against the flattened
// streams' 16,384 inputs, scales and biases of order one, so that the gates and the Sinkhorn
// input spread over their ranges.
HyperSite hyper_site(int64_t mix, int64_t scales, uint64_t seed) {
  return {uniform({mix, kStreams * kHidden}, seed, 0.03f), uniform({mix}, seed + 1, 1.f),
          uniform({scales}, seed + 2, 2.f)};
}

ops::HyperSpec flash_hyper() { return {int(kStreams), 20, 1e-6f, 1e-6f}; }

TEST(CudaDeepseekV4, HyperPreAndHeadAtTheFlashWidth) {
  STRATA_REQUIRE_GPU();
  const int64_t mix = (2 + kStreams) * kStreams;
  const HyperSite pre = hyper_site(mix, 3, 21), head = hyper_site(kStreams, 1, 31);
  for (int64_t t : {1, 4, 5, 37}) {
    const Tensor x = uniform({t, kStreams, kHidden}, 40 + uint64_t(t), 1.5f, false);
    Tensor rc = Tensor::empty({t, kHidden}, DType::kF32), rp = Tensor::empty({t, kStreams}, DType::kF32);
    Tensor rm = Tensor::empty({t, kStreams, kStreams}, DType::kF32), rh = Tensor::empty({t, kHidden}, DType::kF32);
    ops::hyper_pre(x, pre.fn, pre.base, pre.scale, flash_hyper(), rc, rp, rm);
    ops::hyper_head(x, head.fn, head.base, head.scale, flash_hyper(), rh);
    const std::string at = " (" + std::to_string(t) + " tokens)";
    for (DType fn_dtype : {DType::kF32, DType::kBF16}) {  // the weights hold bf16 values: both exact
      const std::string w = fn_dtype == DType::kF32 ? ", f32 fn" : ", bf16 fn";
      Tensor c = gpu_empty({t, kHidden}, DType::kF32), p = gpu_empty({t, kStreams}, DType::kF32);
      Tensor m = gpu_empty({t, kStreams, kStreams}, DType::kF32), h = gpu_empty({t, kHidden}, DType::kF32);
      const Tensor gx = to_gpu(x, DType::kF32);
      ops::hyper_pre(gx, to_gpu(pre.fn, fn_dtype), to_gpu(pre.base, DType::kF32), to_gpu(pre.scale, DType::kF32),
                     flash_hyper(), c, p, m);
      ops::hyper_head(gx, to_gpu(head.fn, fn_dtype), to_gpu(head.base, DType::kF32), to_gpu(head.scale, DType::kF32),
                      flash_hyper(), h);
      expect_close(c, rc, kF32Tol, "hyper_pre collapsed" + w + at);
      expect_close(p, rp, kF32Tol, "hyper_pre post" + w + at);
      expect_close(m, rm, kF32Tol, "hyper_pre comb (Sinkhorn)" + w + at);
      expect_close(h, rh, kF32Tol, "hyper_head" + w + at);
    }
    // The comb rows and columns sum to about one (a check on the reference's spread, too).
    double worst = 0;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t k = 0; k < kStreams; ++k) {
        double col = 0;
        for (int64_t j = 0; j < kStreams; ++j) col += rm.data<float>()[(i * kStreams + j) * kStreams + k];
        worst = std::max(worst, std::fabs(col - 1));
      }
    }
    EXPECT_LT(worst, 1e-3) << at;
  }
}

TEST(CudaDeepseekV4, HyperPostInPlace) {
  STRATA_REQUIRE_GPU();
  for (int64_t t : {1, 9}) {
    const Tensor x = uniform({t, kStreams, kHidden}, 50 + uint64_t(t), 1.5f, false);
    const Tensor y = uniform({t, kHidden}, 60 + uint64_t(t), 1.f);
    const Tensor post = uniform({t, kStreams}, 70 + uint64_t(t), 1.f, false);
    Tensor comb = uniform({t, kStreams, kStreams}, 80 + uint64_t(t), 1.f, false);
    for (int64_t i = 0; i < t; ++i) ops::sinkhorn_project(comb.data<float>() + i * kStreams * kStreams, int(kStreams), 20, 1e-6f);
    Tensor ref = Tensor::empty(x.shape(), DType::kF32);
    ops::hyper_post(x, y, post, comb, ref);
    Tensor gx = to_gpu(x, DType::kF32);
    ops::hyper_post(gx, to_gpu(y), to_gpu(post, DType::kF32), to_gpu(comb, DType::kF32), gx);
    expect_close(gx, ref, kF32Tol, "hyper_post in place, f32 streams (" + std::to_string(t) + " tokens)");
  }
}

TEST(CudaDeepseekV4, GroupedLowRankOutput) {
  STRATA_REQUIRE_GPU();
  const Tensor w = uniform({kGroups * kGroupRank, kHeads * kHeadDim / kGroups}, 90, 0.02f);
  const Tensor gw = to_gpu(w);
  for (int64_t t : {1, 3, 40}) {
    const Tensor x = uniform({t, kHeads * kHeadDim}, 91 + uint64_t(t), 1.f);
    Tensor ref = Tensor::empty({t, kGroups * kGroupRank}, DType::kF32);
    ops::grouped_linear(x, w, int(kGroups), ref);
    for (DType dt : {DType::kBF16, DType::kF32}) {
      Tensor y = gpu_empty({t, kGroups * kGroupRank}, dt);
      ops::grouped_linear(to_gpu(x), gw, int(kGroups), y);
      expect_close(y, ref, dt == DType::kF32 ? 1e-4 : kBf16Tol,
                   std::string("grouped_linear ") + (dt == DType::kF32 ? "f32" : "bf16") + " out (" +
                       std::to_string(t) + " tokens)");
    }
  }
}

TEST(CudaDeepseekV4, SiluMulClampedCutsAtTheLimit) {
  STRATA_REQUIRE_GPU();
  const Tensor gu = uniform({5, 2 * kInter}, 100, 30.f);  // most values past +-10
  Tensor ref = Tensor::empty({5, kInter}, DType::kF32);
  ops::silu_mul_clamped(gu, kLimit, ref);
  Tensor f = gpu_empty({5, kInter}, DType::kF32), b = gpu_empty({5, kInter});
  ops::silu_mul_clamped(to_gpu(gu, DType::kF32), kLimit, f);
  ops::silu_mul_clamped(to_gpu(gu), kLimit, b);
  expect_close(f, ref, kF32Tol, "silu_mul_clamped f32");
  expect_close(b, ref, kBf16Tol, "silu_mul_clamped bf16");
}

TEST(CudaDeepseekV4, LearnedRoutingWithBias) {
  STRATA_REQUIRE_GPU();
  const Tensor bias = uniform({kExperts}, 110, 0.5f, false);
  // Tie-free rows: a draw per row until its 7 best scores (with the bias) are 1e-4 apart, far
  // above the f32 error of the scores (sqrt, log1p and exp: a few ulps of values near 2).
  const int64_t t = 37;
  Tensor logits = Tensor::empty({t, kExperts}, DType::kF32);
  uint64_t seed = 1000;
  for (int64_t r = 0; r < t; ++r) {
    for (;; ++seed) {
      const Tensor row = uniform({1, kExperts}, seed, 4.f, false);
      std::vector<double> s(kExperts);
      for (int64_t e = 0; e < kExperts; ++e) {
        const double l = row.data<float>()[e];
        s[size_t(e)] = std::sqrt(l > 20 ? l : std::log1p(std::exp(l))) + bias.data<float>()[e];
      }
      std::sort(s.begin(), s.end(), std::greater<>());
      bool ok = true;
      for (int64_t j = 0; j < kTopK; ++j) ok = ok && s[size_t(j)] - s[size_t(j + 1)] > 1e-4;
      if (!ok) continue;
      std::copy_n(row.data<float>(), kExperts, logits.data<float>() + r * kExperts);
      ++seed;
      break;
    }
  }
  Tensor ids = Tensor::empty({t, kTopK}, DType::kI32), w = Tensor::empty({t, kTopK}, DType::kF32);
  ops::moe_route_sqrt_softplus(logits, bias, int(kTopK), 2.5f, ids, w);
  Tensor gids = gpu_empty({t, kTopK}, DType::kI32), gw = gpu_empty({t, kTopK}, DType::kF32);
  ops::moe_route_sqrt_softplus(to_gpu(logits, DType::kF32), to_gpu(bias, DType::kF32), int(kTopK), 2.5f, gids, gw);
  expect_same_ints<int32_t>(gids, ids, "moe_route_sqrt_softplus ids");
  expect_close(gw, w, kF32Tol, "moe_route_sqrt_softplus weights");
  // Exact ties (equal logits, no bias) go to the lower index, as on the CPU.
  Tensor flat = Tensor::empty({2, kExperts}, DType::kF32);
  std::fill_n(flat.data<float>(), flat.numel(), 0.25f);
  flat.data<float>()[kExperts + 200] = 1.f;  // row 1: one clear winner, then ties
  Tensor tids = Tensor::empty({2, kTopK}, DType::kI32), tw = Tensor::empty({2, kTopK}, DType::kF32);
  ops::moe_route_sqrt_softplus(flat, Tensor(), int(kTopK), 1.f, tids, tw);
  Tensor gtids = gpu_empty({2, kTopK}, DType::kI32), gtw = gpu_empty({2, kTopK}, DType::kF32);
  ops::moe_route_sqrt_softplus(to_gpu(flat, DType::kF32), Tensor(), int(kTopK), 1.f, gtids, gtw);
  expect_same_ints<int32_t>(gtids, tids, "moe_route_sqrt_softplus ties");
  EXPECT_EQ(tids.data<int32_t>()[0], 0);
  EXPECT_EQ(tids.data<int32_t>()[kTopK], 200);
  EXPECT_EQ(tids.data<int32_t>()[kTopK + 1], 0);
}

TEST(CudaDeepseekV4, HashRouting) {
  STRATA_REQUIRE_GPU();
  const int64_t vocab = 129280, t = 19;
  std::mt19937 rng(120);
  Tensor table = Tensor::empty({vocab, kTopK}, DType::kI32);
  for (int64_t i = 0; i < table.numel(); ++i) table.data<int32_t>()[i] = int32_t(rng() % kExperts);
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < t; ++i) tokens.push_back(int32_t(rng() % vocab));
  tokens[3] = int32_t(vocab - 1);
  const Tensor logits = uniform({t, kExperts}, 121, 4.f, false);
  Tensor ids = Tensor::empty({t, kTopK}, DType::kI32), w = Tensor::empty({t, kTopK}, DType::kF32);
  ops::moe_route_hash(logits, table, tokens, 2.5f, ids, w);
  Tensor gids = gpu_empty({t, kTopK}, DType::kI32), gw = gpu_empty({t, kTopK}, DType::kF32);
  ops::moe_route_hash(to_gpu(logits, DType::kF32), table.to(Device::kCuda), tokens, 2.5f, gids, gw);
  expect_same_ints<int32_t>(gids, ids, "moe_route_hash ids");
  expect_close(gw, w, kF32Tol, "moe_route_hash weights");
  tokens[0] = int32_t(vocab);
  EXPECT_THROW(ops::moe_route_hash(to_gpu(logits, DType::kF32), table.to(Device::kCuda), tokens, 2.5f, gids, gw),
               Error);
}

TEST(CudaDeepseekV4, ClampedExpertsOnEveryPath) {
  STRATA_REQUIRE_GPU();
  const int64_t e = 8;
  // Weights large enough that most gate and up values pass the limit.
  const Tensor gu = uniform({e, 2 * kInter, kHidden}, 130, 0.5f), down = uniform({e, kHidden, kInter}, 131, 0.02f);
  const Tensor ggu = to_gpu(gu), gdown = to_gpu(down);
  // 3 tokens: the GEMVs; 20: the mma.sync tiles (120 pairs); 64: the wgmma tiles (384 >= 32 x 8).
  for (int64_t t : {3, 20, 64}) {
    std::mt19937 rng(unsigned(132 + t));
    const Tensor x = uniform({t, kHidden}, 140 + uint64_t(t), 1.f);
    Tensor ids = Tensor::empty({t, kTopK}, DType::kI32), w = Tensor::empty({t, kTopK}, DType::kF32);
    for (int64_t r = 0; r < t; ++r) {
      std::vector<int32_t> all(e);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      for (int64_t j = 0; j < kTopK; ++j) {
        ids.data<int32_t>()[r * kTopK + j] = all[size_t(j)];
        w.data<float>()[r * kTopK + j] = 0.1f + 0.1f * float(j);
      }
    }
    Tensor ref = Tensor::empty({t, kHidden}, DType::kF32);
    ops::moe_experts_clamped(x, gu, down, ids, w, kLimit, ref);
    Tensor out = gpu_empty({t, kHidden});
    ops::moe_experts_clamped(to_gpu(x), ggu, gdown, ids.to(Device::kCuda), w.to(Device::kCuda), kLimit, out);
    expect_close(out, ref, kBf16Tol, "moe_experts_clamped (" + std::to_string(t) + " tokens)");
    // Without the clamp the result is another one: the limit is applied.
    Tensor unclamped = Tensor::empty({t, kHidden}, DType::kF32);
    ops::moe_experts_clamped(x, gu, down, ids, w, 1e30f, unclamped);
    EXPECT_GT(rel_err(unclamped, ref), 10 * kBf16Tol) << "the fixture does not reach the limit";
  }
}

}  // namespace
}  // namespace strata::testing
