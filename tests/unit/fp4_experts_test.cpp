// NVFP4 and MXFP4 routed experts kept compressed (WeightLoader::keep_fp4_experts, step S2 of
// docs/plans/fp4_kernels.md): of the qwen3_5_moe_tiny fixture quantised here by `strata quantize`'s
// recipes, the kept codes with their scales (NVFP4: a global a row, gate's and up's apart) mean
// exactly the weights dequantising at load gives, whole and as expert- and tensor-parallel shards
// (a shard off the 32-column grid loads as floats); the CPU's MoE ops on them equal the ops on
// their floats; a bad scale is named by tensor, row and group; dummy loads make kept codes that
// are, as floats, the CPU's dummy model. (The CUDA kernels that read them are tested against these
// ops in tests/cuda.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "expect_error.h"
#include "expect_bitwise_equal.h"
#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/io/quant_config.h"
#include "strata/io/quantise_checkpoint.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"
#include "strata/models/weights.h"
#include "strata/ops/ops.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

const std::string kSource = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen3_5_moe_tiny";
constexpr int64_t kExperts = 8, kInter = 32, kHidden = 64;

// The fixture quantised once per format into a temporary folder.
class Fp4Experts : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("strata_fp4_experts_" + std::to_string(rd()));
    for (const char* f : {"nvfp4", "mxfp4"}) quantise_checkpoint(kSource, (dir_ / f).string(), parse_checkpoint_quant(f, "--format"));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  std::string folder() const { return (dir_ / GetParam()).string(); }
  bool nvfp4() const { return std::string(GetParam()) == "nvfp4"; }

  // Layer 0's routed experts, dequantised at load (keep false) or kept.
  static WeightLoader::RoutedExperts load(const Checkpoint& ckpt, bool keep, WeightLoader::Range experts,
                                          WeightLoader::Range inter) {
    WeightLoader w(ckpt, WeightLoader::detect_prefix(ckpt), Device::kCpu, false);
    w.accept_quant(weight_quant_of(ckpt));
    w.keep_fp4_experts(keep);
    WeightLoader::RoutedExperts r = w.get_routed_experts("layers.0.mlp.", {kExperts, 2 * kInter, kHidden}, experts, inter);
    w.finish();
    return r;
  }

  // A copy of the quantised folder with `edit` applied to the tensor `name`'s bytes.
  std::string broken(const std::string& name, const std::function<void(Tensor&)>& edit) const {
    const fs::path out = dir_ / (std::string(GetParam()) + "_broken");
    fs::remove_all(out);
    fs::create_directories(out);
    for (const auto& f : fs::directory_iterator(folder())) {
      if (f.path().extension() != ".safetensors") fs::copy_file(f.path(), out / f.path().filename());
    }
    const Checkpoint src = Checkpoint::open(folder());
    std::vector<std::pair<std::string, Tensor>> tensors;
    bool found = false;
    for (const std::string& n : src.names()) {
      const Tensor t = src.get(n);
      Tensor copy = Tensor::empty(t.shape(), t.dtype());
      std::memcpy(copy.raw(), t.raw(), t.nbytes());
      if (n == name) {
        edit(copy);
        found = true;
      }
      tensors.emplace_back(n, copy);
    }
    EXPECT_TRUE(found) << name;
    write_safetensors((out / "model.safetensors").string(), tensors);
    return out.string();
  }

  static fs::path dir_;
};

fs::path Fp4Experts::dir_;

const std::string kLayer0 = "model.language_model.layers.0.mlp.experts.";

TEST_P(Fp4Experts, KeptExpertsMeanTheirDequantisedWeights) {
  const Checkpoint ckpt = Checkpoint::open(folder());
  const auto plain = load(ckpt, false, {0, kExperts}, {0, kInter});
  const auto kept = load(ckpt, true, {0, kExperts}, {0, kInter});
  ASSERT_FALSE(plain.gate_up.scaled());
  ASSERT_TRUE(kept.gate_up.scaled() && kept.down.scaled());
  EXPECT_EQ(kept.gate_up.dtype(), DType::kF4E2M1);
  EXPECT_EQ(kept.gate_up.shape(), Shape({kExperts, 2 * kInter, kHidden}));
  EXPECT_EQ(kept.gate_up.nbytes(), size_t(kExperts * 2 * kInter * kHidden / 2));
  const int64_t group = nvfp4() ? 16 : 32;
  EXPECT_EQ(kept.gate_up.scale_group(), group);
  EXPECT_EQ(kept.gate_up.scale().shape(), Shape({kExperts, 2 * kInter, kHidden / group}));
  EXPECT_EQ(kept.down.scale().shape(), Shape({kExperts, kHidden, kInter / group}));
  EXPECT_EQ(kept.gate_up.scale().dtype(), nvfp4() ? DType::kF8E4M3 : DType::kUE8M0);
  if (nvfp4()) {
    // Each expert's gate and up rows carry their own tensor's weight_scale_2.
    const Tensor g = kept.gate_up.global_scale();
    ASSERT_EQ(g.shape(), Shape({kExperts, 2 * kInter}));
    const Checkpoint& c = ckpt;
    for (int64_t e = 0; e < kExperts; ++e) {
      const float gate = c.get(cat(kLayer0, e, ".gate_proj.weight_scale_2")).data<float>()[0];
      const float up = c.get(cat(kLayer0, e, ".up_proj.weight_scale_2")).data<float>()[0];
      EXPECT_EQ(g.data<float>()[e * 2 * kInter], gate) << e;
      EXPECT_EQ(g.data<float>()[e * 2 * kInter + kInter], up) << e;
    }
  } else {
    EXPECT_FALSE(kept.gate_up.global_scale().defined());
  }
  expect_bitwise_equal(kept.gate_up.to_f32(), plain.gate_up, "gate_up");
  expect_bitwise_equal(kept.down.to_f32(), plain.down, "down");
}

TEST_P(Fp4Experts, ShardsKeepOrFallBackByTheColumnGrid) {
  const Checkpoint ckpt = Checkpoint::open(folder());
  const auto whole = load(ckpt, false, {0, kExperts}, {0, kInter});
  // Expert parallel: experts 3 and 4; the others' tensors are checked, not loaded.
  const auto ep = load(ckpt, true, {3, 2}, {0, kInter});
  ASSERT_TRUE(ep.gate_up.scaled());
  expect_bitwise_equal(ep.gate_up.to_f32(), whole.gate_up.rows(3, 5).to_f32(), "experts 3-4 gate_up");
  expect_bitwise_equal(ep.down.to_f32(), whole.down.rows(3, 5).to_f32(), "experts 3-4 down");
  // Tensor parallel over 2: 16 intermediate columns a rank, off the 32-column grid: floats.
  for (int64_t rank = 0; rank < 2; ++rank) {
    const auto tp = load(ckpt, true, {0, kExperts}, {rank * kInter / 2, kInter / 2});
    EXPECT_FALSE(tp.gate_up.scaled());
    EXPECT_FALSE(tp.down.scaled());
    const auto tp_plain = load(ckpt, false, {0, kExperts}, {rank * kInter / 2, kInter / 2});
    expect_bitwise_equal(tp.gate_up, tp_plain.gate_up, cat("tp rank ", rank, " gate_up"));
    expect_bitwise_equal(tp.down, tp_plain.down, cat("tp rank ", rank, " down"));
  }
}

TEST_P(Fp4Experts, CpuMoeOpsOnKeptExpertsEqualTheirFloats) {
  const Checkpoint ckpt = Checkpoint::open(folder());
  const auto kept = load(ckpt, true, {0, kExperts}, {0, kInter});
  const int64_t t = 7, k = 3;
  Tensor x = Tensor::empty({t, kHidden}, DType::kF32);
  ops::fill_random_uniform(x, 11, 1.f);
  Tensor ids = Tensor::empty({t, k}, DType::kI32), weights = Tensor::empty({t, k}, DType::kF32);
  for (int64_t i = 0; i < t * k; ++i) {
    ids.data<int32_t>()[i] = int32_t((i * 5 + i / k) % kExperts);
    weights.data<float>()[i] = 0.2f + 0.1f * float(i % 4);
  }
  const Tensor gu32 = kept.gate_up.to_f32(), down32 = kept.down.to_f32();
  Tensor a = Tensor::empty({t, kHidden}, DType::kF32), b = Tensor::empty({t, kHidden}, DType::kF32);
  ops::moe_experts(x, kept.gate_up, kept.down, ids, weights, a);
  ops::moe_experts(x, gu32, down32, ids, weights, b);
  expect_bitwise_equal(a, b, "moe_experts");
  // An expert-parallel shard: experts [2, 5) of 8 held.
  const ops::ExpertShard shard{2, kExperts};
  ops::moe_experts(x, kept.gate_up.rows(2, 5), kept.down.rows(2, 5), ids, weights, a, shard);
  ops::moe_experts(x, gu32.rows(2, 5), down32.rows(2, 5), ids, weights, b, shard);
  expect_bitwise_equal(a, b, "moe_experts, a shard");
}

TEST_P(Fp4Experts, BadScalesAreNamed) {
  const std::string w = kLayer0 + "5.up_proj.weight";
  const std::string scale = w + "_scale";
  const int64_t groups = kHidden / (nvfp4() ? 16 : 32);
  // Row 3, group 1 of expert 5's up projection.
  auto set = [&](uint8_t byte) {
    return broken(scale, [&](Tensor& t) { static_cast<uint8_t*>(t.raw())[3 * groups + 1] = byte; });
  };
  auto expect = [&](const std::string& dir, const std::vector<std::string>& parts) {
    const Checkpoint ckpt = Checkpoint::open(dir);
    expect_error_mentions([&] { load(ckpt, true, {0, kExperts}, {0, kInter}); }, parts);
  };
  if (nvfp4()) {
    expect(set(0x7f), {scale, "row 3, group 1", "NaN"});
    expect(set(0xc0), {scale, "row 3, group 1", "negative"});
    const std::string global = w + "_scale_2";
    expect(broken(global, [](Tensor& t) { t.data<float>()[0] = 0.f; }), {global, "not finite and positive"});
    // -0 is a zero block: loads.
    const Checkpoint ok = Checkpoint::open(set(0x80));
    EXPECT_TRUE(load(ok, true, {0, kExperts}, {0, kInter}).gate_up.scaled());
  } else {
    expect(set(0xff), {scale, "row 3, group 1", "NaN"});
  }
  // Another rank's expert is checked too.
  const Checkpoint bad = Checkpoint::open(set(nvfp4() ? 0x7f : 0xff));
  expect_error_mentions([&] { load(bad, true, {0, 2}, {0, kInter}); }, {scale});
}

TEST_P(Fp4Experts, DummyLoadMakesKeptCodes) {
  // A config-only folder of the fixture's config with the format's quantization_config.
  const fs::path out = dir_ / (std::string(GetParam()) + "_dummy");
  fs::create_directories(out);
  for (const auto& f : fs::directory_iterator(folder())) {
    if (f.path().extension() != ".safetensors") {
      fs::copy_file(f.path(), out / f.path().filename(), fs::copy_options::overwrite_existing);
    }
  }
  const Checkpoint ckpt = Checkpoint::open_config_only(out.string());
  const auto r = load(ckpt, true, {0, kExperts}, {0, kInter});
  ASSERT_TRUE(r.gate_up.scaled() && r.down.scaled());
  EXPECT_EQ(r.gate_up.dtype(), DType::kF4E2M1);
  const Tensor f = r.gate_up.to_f32();
  float amax = 0.f;
  for (int64_t i = 0; i < f.numel(); ++i) amax = std::max(amax, std::abs(f.data<float>()[i]));
  EXPECT_GT(amax, nvfp4() ? 0.03f : 0.02f);
  EXPECT_LE(amax, 0.0347f);
  // Not kept, the CPU gets the same weights as floats.
  const auto floats = load(ckpt, false, {0, kExperts}, {0, kInter});
  ASSERT_FALSE(floats.gate_up.scaled());
  expect_bitwise_equal(floats.gate_up, f, "dummy gate_up");
  expect_bitwise_equal(floats.down, r.down.to_f32(), "dummy down");
}

// The whole model of such a config loads dummy on the CPU (its experts the floats of random FP4
// codes) and runs: finite logits, a full forward of one load bit-equal to a stepwise one of another
// (as tests/unit/dummy_load_test.cpp asks of every family).
TEST_P(Fp4Experts, DummyModelRuns) {
  const fs::path out = dir_ / (std::string(GetParam()) + "_dummy_model");
  fs::create_directories(out);
  fs::copy_file(folder() + "/config.json", out / "config.json", fs::copy_options::overwrite_existing);
  const LoadOptions dummy{Device::kCpu, LoadFormat::kDummy, {}};
  auto a = load_model(out.string(), dummy);
  auto b = load_model(out.string(), dummy);
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7};
  const Tensor la = sequence_logits(*a, ids, "full"), lb = sequence_logits(*b, ids, "stepwise");
  ASSERT_EQ(la.shape(), (Shape{5, a->info().vocab_size}));
  for (int64_t i = 0; i < la.numel(); ++i) ASSERT_TRUE(std::isfinite(la.data<float>()[i])) << i;
  EXPECT_EQ(std::memcmp(la.raw(), lb.raw(), la.nbytes()), 0) << "the seeded weights or the modes differ";
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp4Experts, ::testing::Values("nvfp4", "mxfp4"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace strata
