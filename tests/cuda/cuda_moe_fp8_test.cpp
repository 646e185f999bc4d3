// FP8 experts kept compressed on the GPU (F8_E4M3 codes with per-row scales per 128 columns,
// Tensor::with_scale) through every MoE path: the decode GEMVs (routing inside or given, the
// shared expert fused) against the CPU op on the same scaled experts; the grouped mma.sync tiles
// (codes dequantised into their shared-memory stages) bit for bit against the bf16 path on the
// dequantised weights rounded to bf16, which is what they compute; the wgmma tiles (W8A8: the
// activations quantised per row and per 128 columns, quantize_fp8_rows) against that composition
// on the CPU. At the Qwen3.5-35B-A3B expert shape (256 experts, hidden 2048, intermediate 512, top
// 8) and at edges: K of 32 mod 64, partial scale groups, partial column blocks.
#include <cmath>
#include <cstring>
#include <random>

#include "strata/core/parallel.h"

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

// rms(got - ref) / rms(ref).
double rms_err(const Tensor& got, const Tensor& ref) {
  double d2 = 0, r2 = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double d = double(got.data<float>()[i]) - ref.data<float>()[i];
    d2 += d * d;
    r2 += double(ref.data<float>()[i]) * ref.data<float>()[i];
  }
  return std::sqrt(d2 / std::max(r2, 1e-30));
}

// bf16 activations and output (the GEMVs keep the weights exact): a few roundings of 2^-9.
constexpr double kTol = 1e-2;
// The W8A8 tiles against the unquantised CPU op: e4m3 keeps 4 significant bits of each activation
// (a relative error up to 2^-4), a few percent of the largest output.
constexpr double kW8A8GapTol = 0.1;
// Against the W8A8 composition on the CPU: its act is quantised from the CPU's gate/up sums, the
// GPU's from its own (another order of the same products, and Hopper's FP8 accumulation), and
// where those round to different bf16 values near an e4m3 boundary an act code is one step (2^-3)
// apart: a few large output errors, so the largest is bounded loosely, and the rms, which those
// few leave small, against the quantisation's own (H100, session 34: 0.10-0.12 of it at the small
// shapes, 0.32 at the production shape, where bf16's roundings are most of it; a tile that skipped
// the quantisation of x or of act would keep the other's share, about 0.7 of it by their similar
// sizes (an estimate), and a misapplied scale moves whole rows or columns).
constexpr double kW8A8MaxTol = 0.08, kW8A8RmsShare = 0.5;

// An output of quantize_fp8_rows for [rows, cols] on `device`: codes with F32 scales per 128 columns.
Tensor fp8_rows(int64_t rows, int64_t cols, Device device = Device::kCpu) {
  return Tensor::empty({rows, cols}, DType::kF8E4M3, device)
      .with_scale(Tensor::empty({rows, (cols + 127) / 128}, DType::kF32, device), 128);
}

// x (F32 of bf16 values) quantised per row and per 128 columns by the CPU op, and dequantised.
Tensor fp8_round_trip(const Tensor& x) {
  Tensor q = fp8_rows(x.dim(0), x.dim(1));
  ops::quantize_fp8_rows(x, q);
  return q.to_f32();
}

float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// What the wgmma tiles compute over FP8 experts, on the CPU: x quantised a token, gate/up on the
// dequantised codes, act = bf16(silu(g) * u) quantised a pair, down, each pair's output rounded
// to bf16 (the grouped path's y), summed under the routing weights; the shared expert (sgu
// defined) added in F32 under its sigmoid gate.
Tensor w8a8_reference(const Tensor& x, const Tensor& gu, const Tensor& down, const Tensor& ids, const Tensor& w,
                      const Tensor& sgu, const Tensor& sdown, const Tensor& sgate) {
  const int64_t t = x.dim(0), h = x.dim(1), k = ids.dim(1), inter = down.dim(2), pairs = t * k;
  const Tensor xd = fp8_round_trip(x), guf = gu.to_f32(), dnf = down.to_f32();
  const int32_t* id = ids.data<int32_t>();
  Tensor act = Tensor::empty({pairs, inter}, DType::kF32);
  parallel_for(pairs, [&](int64_t p) {
    const float* xr = xd.data<float>() + (p / k) * h;
    const float* we = guf.data<float>() + int64_t(id[p]) * 2 * inter * h;
    for (int64_t i = 0; i < inter; ++i) {
      const float g = dot(we + i * h, xr, h), u = dot(we + (inter + i) * h, xr, h);
      act.data<float>()[p * inter + i] = bf16_round(g / (1.f + std::exp(-g)) * u);
    }
  });
  const Tensor ad = fp8_round_trip(act);
  Tensor shared_y;
  if (sgu.ndim() == 2) {
    Tensor sact = Tensor::empty({t, sdown.dim(1)}, DType::kF32);
    ops::silu_mul(sgu, sact);
    shared_y = Tensor::empty({t, h}, DType::kF32);
    ops::linear(sact, sdown, shared_y);
  }
  Tensor ref = Tensor::empty({t, h}, DType::kF32);
  parallel_for(t, [&](int64_t tok) {
    float* o = ref.data<float>() + tok * h;
    for (int64_t c = 0; c < h; ++c) o[c] = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = tok * k + j;
      const float* we = dnf.data<float>() + int64_t(id[p]) * h * inter;
      for (int64_t c = 0; c < h; ++c) {
        o[c] += w.data<float>()[p] * bf16_round(dot(we + c * inter, ad.data<float>() + p * inter, inter));
      }
    }
    if (sgu.ndim() == 2) {
      const float gate = 1.f / (1.f + std::exp(-sgate.data<float>()[tok]));
      for (int64_t c = 0; c < h; ++c) o[c] += gate * shared_y.data<float>()[tok * h + c];
    }
  });
  return ref;
}

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
  // The grouped path's tiling (moe_tiling): wgmma tiles, W8A8, once the average expert has 32 rows.
  const bool w8a8 = c.t > 16 && c.t * c.k >= 32 * c.e;
  EXPECT_LE(err, w8a8 ? kW8A8GapTol : kTol) << at;
  if (w8a8) {
    const Tensor w8 = w8a8_reference(x, gu, down, ids, w, sgu, sdown, sgate);
    const double err8 = scaled_err(got.to_f32(), w8), gap = scaled_err(ref, w8);
    const double rms8 = rms_err(got.to_f32(), w8), rms_gap = rms_err(ref, w8);
    std::printf("  %s: against the W8A8 composition: largest error %.3g, rms %.3g; the unquantised op's %.3g, "
                "rms %.3g\n", at.c_str(), err8, rms8, gap, rms_gap);
    EXPECT_LE(err8, kW8A8MaxTol) << at;
    EXPECT_LT(rms8, kW8A8RmsShare * rms_gap) << at << ": not the W8A8 composition";
  } else if (c.t > 16) {
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
}

TEST(CudaMoeFp8, WgmmaTilesComputeTheW8A8Composition) {
  STRATA_REQUIRE_GPU();
  check({800, 8, 2, 96, 160, 0, "wgmma tiles, K of 32 mod 64, partial scale groups and column blocks"});
  check({600, 4, 2, 384, 256, 0, "wgmma tiles, several k-blocks, tiles past an expert's last rows"});
  check({2048, 256, 8, 2048, 512, 512, "wgmma tiles, production shape, shared expert"});
}

// quantize_fp8_rows on the GPU (bf16 rows) gives the CPU op's codes and scales bit for bit: random
// rows, a group of zeros, values far below their group's largest (subnormal codes), a NaN and an
// infinity (their groups' codes NaN or 0, as by the formula), K not a multiple of 128.
TEST(CudaMoeFp8, QuantizedRowsEqualTheCpuOp) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(7);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 128}, {7, 96}, {3, 160}, {33, 512}, {8192, 2048}}) {
    Tensor x = rand_bf16_values({rows, cols}, rng, 3.f);
    float* v = x.data<float>();
    for (int64_t c = 0; c < std::min<int64_t>(cols, 128); c += 5) {
      v[c] = bf16_to_f32(f32_to_bf16(v[c] * 1e-4f));  // subnormal codes (bf16 values, as the GPU's)
    }
    if (rows > 1) {
      for (int64_t c = 0; c < cols; ++c) v[cols + c] = 0.f;  // a row of zeros
    }
    if (rows > 2) {
      v[2 * cols + 3] = std::nanf("");
      v[2 * cols + cols - 1] = -INFINITY;
    }
    Tensor q = fp8_rows(rows, cols);
    ops::quantize_fp8_rows(x, q);
    Tensor gq = fp8_rows(rows, cols, Device::kCuda);
    ops::quantize_fp8_rows(to_gpu(x), gq);
    const Tensor codes = gq.to(Device::kCpu), scales = gq.scale().to(Device::kCpu);
    const std::string at = std::to_string(rows) + " x " + std::to_string(cols);
    EXPECT_EQ(std::memcmp(codes.raw(), q.raw(), q.nbytes()), 0) << at << ": codes";
    EXPECT_EQ(std::memcmp(scales.raw(), q.scale().raw(), q.scale().nbytes()), 0) << at << ": scales";
  }
}

}  // namespace
}  // namespace strata::testing
