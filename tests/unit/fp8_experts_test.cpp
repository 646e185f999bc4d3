// FP8 experts kept compressed (WeightLoader::keep_fp8_experts, Tensor::with_scale): the codes and
// their per-row block scales mean exactly the weights that dequantising at load gives, for the
// whole model and for expert- and tensor-parallel shards; the CPU's MoE ops on them equal the ops
// on their dequantised floats; a NaN code is named; dummy loads make scaled codes. (The CUDA MoE
// kernels that read them are tested against these ops in tests/cuda.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "expect_bitwise_equal.h"
#include "strata/core/error.h"
#include "strata/io/checkpoint.h"
#include "strata/io/quant_config.h"
#include "strata/io/safetensors.h"
#include "strata/models/weights.h"
#include "strata/ops/deepseek_v4_ops.h"
#include "strata/ops/ops.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

const std::string kFixture = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen3_5_moe_fp8_tiny";
constexpr int64_t kExperts = 2, kInter = 192, kHidden = 256;

// Layer 0's routed experts of the fixture, dequantised at load (keep false) or kept.
WeightLoader::RoutedExperts load_experts(const Checkpoint& ckpt, bool keep, WeightLoader::Range experts,
                                         WeightLoader::Range inter) {
  WeightLoader w(ckpt, WeightLoader::detect_prefix(ckpt), Device::kCpu, false);
  w.accept_quant(weight_quant_of(ckpt));
  w.keep_fp8_experts(keep);
  WeightLoader::RoutedExperts r =
      w.get_routed_experts("layers.0.mlp.", {kExperts, 2 * kInter, kHidden}, experts, inter);
  w.finish();
  return r;
}

TEST(Fp8Experts, KeptExpertsMeanTheirDequantisedWeights) {
  const Checkpoint ckpt = Checkpoint::open(kFixture);
  const auto plain = load_experts(ckpt, false, {0, kExperts}, {0, kInter});
  const auto kept = load_experts(ckpt, true, {0, kExperts}, {0, kInter});
  ASSERT_FALSE(plain.gate_up.scaled());
  ASSERT_TRUE(kept.gate_up.scaled());
  ASSERT_TRUE(kept.down.scaled());
  EXPECT_EQ(kept.gate_up.dtype(), DType::kF8E4M3);
  EXPECT_EQ(kept.gate_up.scale_group(), 128);
  // Every row its own scales: 384 gate and up rows of 2 column blocks; the down rows' 192
  // columns make a whole block and a half one.
  EXPECT_EQ(kept.gate_up.scale().shape(), Shape({kExperts, 2 * kInter, 2}));
  EXPECT_EQ(kept.down.scale().shape(), Shape({kExperts, kHidden, 2}));
  expect_bitwise_equal(kept.gate_up.to_f32(), plain.gate_up, "gate_up");
  expect_bitwise_equal(kept.down.to_f32(), plain.down, "down");
}

TEST(Fp8Experts, ShardsKeepOrFallBackByBlockAlignment) {
  const Checkpoint ckpt = Checkpoint::open(kFixture);
  const auto whole = load_experts(ckpt, false, {0, kExperts}, {0, kInter});
  // Expert parallel: expert 1 alone.
  const auto ep = load_experts(ckpt, true, {1, 1}, {0, kInter});
  ASSERT_TRUE(ep.gate_up.scaled());
  expect_bitwise_equal(ep.gate_up.to_f32(), whole.gate_up.rows(1, 2).to_f32(), "expert 1 gate_up");
  expect_bitwise_equal(ep.down.to_f32(), whole.down.rows(1, 2).to_f32(), "expert 1 down");
  // Tensor parallel, first half: down's columns start on a block, so the shard stays FP8 (its 96
  // columns one partial group).
  const auto tp0 = load_experts(ckpt, true, {0, kExperts}, {0, kInter / 2});
  ASSERT_TRUE(tp0.down.scaled());
  EXPECT_EQ(tp0.down.scale().shape(), Shape({kExperts, kHidden, 1}));
  const auto tp0_plain = load_experts(ckpt, false, {0, kExperts}, {0, kInter / 2});
  expect_bitwise_equal(tp0.gate_up.to_f32(), tp0_plain.gate_up, "tp rank 0 gate_up");
  expect_bitwise_equal(tp0.down.to_f32(), tp0_plain.down, "tp rank 0 down");
  // Second half: its columns start at 96, inside a block: loaded as floats.
  const auto tp1 = load_experts(ckpt, true, {0, kExperts}, {kInter / 2, kInter / 2});
  EXPECT_FALSE(tp1.down.scaled());
  const auto tp1_plain = load_experts(ckpt, false, {0, kExperts}, {kInter / 2, kInter / 2});
  expect_bitwise_equal(tp1.down, tp1_plain.down, "tp rank 1 down");
}

TEST(Fp8Experts, NanCodeIsNamed) {
  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("strata_fp8_nan_" + std::to_string(rd()));
  fs::create_directories(dir);
  fs::copy_file(kFixture + "/config.json", dir / "config.json");
  const Checkpoint src = Checkpoint::open(kFixture);
  std::vector<std::pair<std::string, Tensor>> tensors;
  const std::string bad = "model.layers.0.mlp.experts.1.up_proj.weight";
  for (const std::string& n : src.names()) {
    Tensor t = src.get(n);
    Tensor copy = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(copy.raw(), t.raw(), t.nbytes());
    if (n == bad) copy.data<uint8_t>()[5 * kHidden + 7] = 0xff;
    tensors.emplace_back(n, copy);
  }
  write_safetensors((dir / "model.safetensors").string(), tensors);
  const Checkpoint ckpt = Checkpoint::open(dir.string());
  try {
    load_experts(ckpt, true, {0, kExperts}, {0, kInter});
    ADD_FAILURE() << "a NaN code loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(bad), std::string::npos) << what;
    EXPECT_NE(what.find("NaN weight code at expert 0 row 5 column 7"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

TEST(Fp8Experts, DummyLoadMakesScaledCodes) {
  const Checkpoint ckpt = Checkpoint::open_config_only(kFixture);
  const auto r = load_experts(ckpt, true, {0, kExperts}, {0, kInter});
  ASSERT_TRUE(r.gate_up.scaled());
  ASSERT_TRUE(r.down.scaled());
  const Tensor f = r.gate_up.to_f32();
  float amax = 0.f;
  for (int64_t i = 0; i < f.numel(); ++i) amax = std::max(amax, std::abs(f.data<float>()[i]));
  EXPECT_GT(amax, 0.03f);
  EXPECT_LE(amax, 0.0347f);
  // Not kept, the CPU gets the same weights as floats.
  const auto floats = load_experts(ckpt, false, {0, kExperts}, {0, kInter});
  ASSERT_FALSE(floats.gate_up.scaled());
  expect_bitwise_equal(floats.gate_up, f, "dummy gate_up");
  expect_bitwise_equal(floats.down, r.down.to_f32(), "dummy down");
}

// Random F8 experts [E, rows, cols] with random per-row block scales (partial last group).
Tensor random_scaled(int64_t e, int64_t rows, int64_t cols, uint64_t seed) {
  Tensor codes = Tensor::empty({e, rows, cols}, DType::kF8E4M3);
  ops::fill_random_uniform(codes, seed, 448.f);
  Tensor scale = Tensor::empty({e, rows, (cols + 127) / 128}, DType::kF32);
  std::mt19937 rng{unsigned(seed)};
  std::uniform_real_distribution<float> u(1e-5f, 2e-4f);
  for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] = u(rng);
  return codes.with_scale(scale, 128);
}

TEST(Fp8Experts, CpuMoeOpsOnScaledExpertsEqualTheirFloats) {
  const int64_t t = 9, e = 6, inter = 192, h = 256, k = 2;
  const Tensor gate_up = random_scaled(e, 2 * inter, h, 1), down = random_scaled(e, h, inter, 2);
  Tensor x = Tensor::empty({t, h}, DType::kF32);
  ops::fill_random_uniform(x, 3, 1.f);
  Tensor ids = Tensor::empty({t, k}, DType::kI32), weights = Tensor::empty({t, k}, DType::kF32);
  for (int64_t i = 0; i < t * k; ++i) {
    ids.data<int32_t>()[i] = int32_t((i * 5 + i / k) % e);
    weights.data<float>()[i] = 0.25f + 0.1f * float(i % 3);
  }
  const Tensor gu32 = gate_up.to_f32(), down32 = down.to_f32();
  Tensor a = Tensor::empty({t, h}, DType::kF32), b = Tensor::empty({t, h}, DType::kF32);
  ops::moe_experts(x, gate_up, down, ids, weights, a);
  ops::moe_experts(x, gu32, down32, ids, weights, b);
  expect_bitwise_equal(a, b, "moe_experts");
  ops::moe_experts_clamped(x, gate_up, down, ids, weights, 7.f, a);
  ops::moe_experts_clamped(x, gu32, down32, ids, weights, 7.f, b);
  expect_bitwise_equal(a, b, "moe_experts_clamped");
  // An expert-parallel shard: experts [2, 5) of 8 held, the others' terms left out.
  const ops::ExpertShard shard{2, 8};
  const Tensor gu_part = gate_up.rows(0, 3), down_part = down.rows(0, 3);
  ops::moe_experts(x, gu_part, down_part, ids, weights, a, shard);
  ops::moe_experts(x, gu_part.to_f32(), down_part.to_f32(), ids, weights, b, shard);
  expect_bitwise_equal(a, b, "moe_experts, a shard");
}

TEST(Fp8Experts, ScaledTensorViews) {
  const Tensor w = random_scaled(3, 5, 200, 4);
  EXPECT_EQ(w.describe(), "F8_E4M3[3, 5, 200] scaled per 128");
  // to_f32: code * scale of the row's column group.
  const Tensor f = w.to_f32();
  const float s = w.scale().data<float>()[(2 * 5 + 4) * 2 + 1];
  const uint8_t code = w.data<uint8_t>()[(2 * 5 + 4) * 200 + 150];
  EXPECT_EQ(f.data<float>()[(2 * 5 + 4) * 200 + 150], f8e4m3_to_f32(code) * s);
  // rows() and reshape() carry the scale; the last dimension must stay.
  expect_bitwise_equal(w.rows(1, 3).to_f32(), f.rows(1, 3), "rows");
  expect_bitwise_equal(w.reshape({15, 200}).to_f32(), f.reshape({15, 200}), "reshape");
  EXPECT_THROW(w.reshape({3, 1000}), Error);
  // with_scale checks what it is given.
  Tensor codes = Tensor::empty({5, 200}, DType::kF8E4M3);
  EXPECT_THROW(codes.with_scale(Tensor::empty({5, 1}, DType::kF32), 128), Error);
  EXPECT_THROW(codes.with_scale(Tensor::empty({5, 2}, DType::kBF16), 128), Error);
  EXPECT_THROW(Tensor::empty({5, 200}, DType::kBF16).with_scale(Tensor::empty({5, 2}, DType::kF32), 128), Error);
  EXPECT_NO_THROW(codes.with_scale(Tensor::empty({5, 2}, DType::kF32), 128));
}

// Dense projections kept FP8 (WeightLoader::keep_fp8_dense, get_slices_fp8): the leading run of
// FP8 parts as codes with per-row scales that mean exactly the dequantised weights, the parts
// after it as floats; a projection that must stay whole falls back to floats when a part is not
// FP8, as does every projection when not kept.
TEST(Fp8Dense, KeptProjectionsSplitAtTheFirstUnquantisedPart) {
  const Checkpoint ckpt = Checkpoint::open(kFixture);
  using Slice = WeightLoader::Slice;
  const std::vector<Slice> mixed = {{"layers.1.self_attn.k_proj.weight", {64, kHidden}, 0, 0, 64},
                                    {"layers.1.self_attn.v_proj.weight", {64, kHidden}, 0, 32, 32},
                                    {"layers.1.mlp.gate.weight", {kExperts, kHidden}, 0, 0, kExperts}};
  const std::vector<Slice> out_proj = {{"layers.0.linear_attn.out_proj.weight", {kHidden, 64}, 1, 0, 64}};
  auto load = [&](bool keep, const std::vector<Slice>& parts, bool allow_rest) {
    WeightLoader w(ckpt, WeightLoader::detect_prefix(ckpt), Device::kCpu, false);
    w.accept_quant(weight_quant_of(ckpt));
    w.keep_fp8_dense(keep);
    WeightLoader::Fp8Split s = w.get_slices_fp8(parts, allow_rest);
    w.finish();
    return s;
  };
  const WeightLoader::Fp8Split plain = load(false, mixed, true);
  ASSERT_FALSE(plain.fp8.defined());
  ASSERT_EQ(plain.rest.shape(), Shape({64 + 32 + kExperts, kHidden}));
  const WeightLoader::Fp8Split kept = load(true, mixed, true);
  ASSERT_TRUE(kept.fp8.defined() && kept.rest.defined());
  EXPECT_EQ(kept.fp8.dtype(), DType::kF8E4M3);
  EXPECT_EQ(kept.fp8.scale().shape(), Shape({96, 2}));
  expect_bitwise_equal(kept.fp8.to_f32(), plain.rest.rows(0, 96), "k and v rows");
  expect_bitwise_equal(kept.rest, plain.rest.rows(96, 96 + kExperts), "router rows");
  const WeightLoader::Fp8Split whole = load(true, mixed, false);
  EXPECT_FALSE(whole.fp8.defined());
  expect_bitwise_equal(whole.rest, plain.rest, "whole projection");
  // A column slice (row-parallel out_proj) of K = 64: one partial scale group a row.
  const WeightLoader::Fp8Split op = load(true, out_proj, false);
  ASSERT_TRUE(op.fp8.defined() && !op.rest.defined());
  EXPECT_EQ(op.fp8.scale().shape(), Shape({kHidden, 1}));
  expect_bitwise_equal(op.fp8.to_f32(), load(false, out_proj, false).rest, "out_proj");
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

Tensor fp8_rows_of(int64_t rows, int64_t cols) {
  return Tensor::empty({rows, cols}, DType::kF8E4M3)
      .with_scale(Tensor::empty({rows, (cols + 127) / 128}, DType::kF32), 128);
}

// quantize_fp8_rows (the activations of the W8A8 expert GEMMs on CUDA, which equal this op bit
// for bit): each group of 128 columns of a row gets s = amax / 448, its largest element the code
// of 448, every other element the nearest code (within half an e4m3 step of 2^-3 relative, or of
// the subnormal step 2^-9 s), a group of zeros the scale 1e-10 / 448 and codes 0; a NaN quotient
// is code 0x7f; the last group may be partial; a q of the wrong shape or scale layout is refused.
TEST(Fp8Rows, QuantizeFollowsItsFormula) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 2.f);
  const int64_t rows = 3, cols = 160;  // groups of 128 and 32
  Tensor x = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  for (int64_t c = 128; c < cols; ++c) x.data<float>()[cols + c] = 0.f;  // row 1's second group
  x.data<float>()[2 * cols + 5] = std::nanf("");
  Tensor q = fp8_rows_of(rows, cols);
  ops::quantize_fp8_rows(x, q);
  const auto* codes = static_cast<const uint8_t*>(q.raw());
  const float* s = q.scale().data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < 2; ++g) {
      float amax = 0.f;
      for (int64_t c = 128 * g; c < std::min<int64_t>(cols, 128 * (g + 1)); ++c) {
        amax = std::fmax(amax, std::fabs(x.data<float>()[r * cols + c]));
      }
      const float scale = s[r * 2 + g];
      EXPECT_EQ(scale, std::fmax(amax, 1e-10f) / 448.f) << r << "/" << g;
      for (int64_t c = 128 * g; c < std::min<int64_t>(cols, 128 * (g + 1)); ++c) {
        const float v = x.data<float>()[r * cols + c];
        const uint8_t code = codes[r * cols + c];
        if (std::isnan(v)) {
          EXPECT_EQ(code, 0x7f);
          continue;
        }
        const float back = f8e4m3_to_f32(code) * scale;
        EXPECT_LE(std::fabs(back - v), std::fmax(std::fabs(v) / 16.f, scale / 1024.f) * 1.0001f)
            << r << ", " << c << ": " << v << " -> " << back;
        if (amax > 0.f && std::fabs(v) == amax) {
          EXPECT_EQ(code & 0x7f, 0x7e) << "the largest element is 448";
        }
      }
    }
  }
  EXPECT_EQ(s[1 * 2 + 1], 1e-10f / 448.f);
  EXPECT_THROW(ops::quantize_fp8_rows(x, fp8_rows_of(rows, 128)), Error);
  Tensor unscaled = Tensor::empty({rows, cols}, DType::kF8E4M3);
  EXPECT_THROW(ops::quantize_fp8_rows(x, unscaled), Error);
}

}  // namespace
}  // namespace strata
