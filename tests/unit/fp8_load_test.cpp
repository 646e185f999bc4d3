// FP8 block-scale checkpoints of the Qwen3.5 family (config.json quantization_config, F8_E4M3
// weights with F32 weight_scale_inv): the qwen3_5_tiny fixture quantised here by the published
// recipe loads to the model of its dequantised weights, and each broken variant fails with an
// error naming the tensor or field. Also the dequantisation at 128-block boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/quant_config.h"
#include "strata/io/quant.h"
#include "strata/io/quantise.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"
#include "quant_checkpoint_util.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

// The published recipe (io/quantise.h): {F8_E4M3 [N, K], F32 [ceil(N/128), ceil(K/128)]}.
std::pair<Tensor, Tensor> quantise(const Tensor& w32) {
  Fp8BlockWeight q = quantise_fp8_block(w32, 128, 128, "test weight");
  return {q.weight, q.scale_inv};
}

// qwen3_5_tiny with its projections quantised: quant/ (F8 weights + scales) and plain/ (the
// dequantised weights as F32: the model the FP8 file means).
class Fp8Checkpoint : public QuantisedCheckpoint {
 protected:
  void SetUp() override {
    make("fp8", [](const TensorInfo&) { return true; }, [](const std::string& name, const Tensor& w) {
      auto [q, s] = quantise(w);
      return Quantised{{{name, q}, {name + "_scale_inv", s}}, dequant_fp8_block(q, s, 128, 128, name)};
    });
    config_["quantization_config"] = {{"quant_method", "fp8"},
                                      {"fmt", "e4m3"},
                                      {"activation_scheme", "dynamic"},
                                      {"weight_block_size", {128, 128}},
                                      {"modules_to_not_convert", {"lm_head", "in_proj_a", "in_proj_b"}}};
  }
};

TEST_F(Fp8Checkpoint, LoadsAsItsDequantisedWeights) {
  ASSERT_GT(quantised_, 4);
  write(quant_);
  expect_same_logits();
}

// --load-format dummy reads the quantization_config too: a good one loads, a bad one is named.
TEST_F(Fp8Checkpoint, DummyLoadChecksTheQuantizationConfig) {
  write(quant_);
  LoadOptions o;
  o.format = LoadFormat::kDummy;
  EXPECT_NO_THROW(load_model(quant_dir(), o));
  config_["quantization_config"]["fmt"] = "e5m2";
  write(quant_);
  try {
    load_model(quant_dir(), o);
    ADD_FAILURE() << "a dummy load took fmt e5m2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantization_config.fmt"), std::string::npos) << e.what();
  }
}

TEST_F(Fp8Checkpoint, MissingScaleIsNamed) {
  const std::string name = find("mlp.down_proj.weight").first;
  std::erase_if(quant_, [&](const auto& t) { return t.first == name + "_scale_inv"; });
  expect_load_error({name + "_scale_inv", "no block scale"});
}

TEST_F(Fp8Checkpoint, WrongScaleShapeIsNamed) {
  auto& s = find("mlp.down_proj.weight_scale_inv");
  s.second = Tensor::zeros({s.second.dim(0) + 1, s.second.dim(1)}, DType::kF32);
  expect_load_error({s.first, "expected shape"});
}

TEST_F(Fp8Checkpoint, ScaleOfWrongDtypeIsNamed) {
  auto& s = find("mlp.down_proj.weight_scale_inv");
  s.second = Tensor::zeros(s.second.shape(), DType::kBF16);
  expect_load_error({s.first, "must be F32"});
}

TEST_F(Fp8Checkpoint, Fp8WeightListedAsNotConvertedIsNamed) {
  const std::string name = find("mlp.down_proj.weight").first;
  config_["quantization_config"]["modules_to_not_convert"].push_back("mlp.down_proj");
  expect_load_error({name, "modules_to_not_convert"});
}

TEST_F(Fp8Checkpoint, Fp8WeightWithoutQuantizationConfigIsNamed) {
  config_.erase("quantization_config");
  expect_load_error({"F8_E4M3", "linear_attn.in_proj_qkv.weight"});
}

TEST_F(Fp8Checkpoint, BadQuantizationFieldsAreNamed) {
  const struct {
    const char* key;
    nlohmann::json value;
  } cases[] = {{"quant_method", "awq"},       {"fmt", "e5m2"},
               {"activation_scheme", "static"}, {"weight_block_size", {64, 64}},
               {"weight_block_size", {128}}};
  for (const auto& c : cases) {
    nlohmann::json saved = config_;
    config_["quantization_config"][c.key] = c.value;
    expect_load_error({"config.json", std::string("quantization_config.") + c.key});
    config_ = saved;
  }
}

// A 130 x 257 matrix: blocks of 128 x 128, 128 x 1, 2 x 128 and 2 x 1, each with its own scale
// (magnitudes 1000x apart between neighbours), quantised by the recipe and dequantised back.
TEST(Fp8Dequant, RoundTripsAcrossPartialBlocks) {
  const int64_t n = 130, k = 257;
  Tensor w = Tensor::empty({n, k}, DType::kF32);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) w.data<float>()[i * k + j] = u(gen) * (((i / 128 + j / 128) % 2) ? 1000.f : 1.f);
  }
  auto [q, s] = quantise(w);
  ASSERT_EQ(s.shape(), (Shape{2, 3}));
  const Tensor d = dequant_fp8_block(q, s, 128, 128, "w");
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const float x = w.data<float>()[i * k + j], y = d.data<float>()[i * k + j];
      const float scale = s.data<float>()[(i / 128) * 3 + j / 128];
      // e4m3 keeps 3 mantissa bits: half an ulp is 1/16 relative; below 2^-6 the subnormal step 2^-9.
      EXPECT_LE(std::fabs(x - y), std::max(std::fabs(x) / 16.f, scale * std::ldexp(1.f, -10)) * 1.0001f)
          << i << "," << j;
    }
  }
  // The amax of each block maps to 448 exactly.
  for (int64_t b = 0; b < 6; ++b) EXPECT_GT(s.data<float>()[b], 0.f);
}

TEST(Fp8Config, AbsentMeansDisabledAndListsAreRead) {
  EXPECT_FALSE(parse_weight_quant(nlohmann::json::parse(R"({"hidden_size": 8})"), "c.json").enabled());
  const WeightQuant q = parse_weight_quant(nlohmann::json::parse(R"({"quantization_config":
      {"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head",
       "model.layers.0.linear_attn.in_proj_a"]}})"), "c.json");
  EXPECT_EQ(q.method, WeightQuant::Method::kFp8Block);
  EXPECT_TRUE(q.listed_not_converted("model.layers.0.linear_attn.in_proj_a.weight"));
  EXPECT_TRUE(q.listed_not_converted("lm_head.weight"));
  EXPECT_FALSE(q.listed_not_converted("model.layers.1.linear_attn.in_proj_a.weight"));
  EXPECT_THROW(parse_weight_quant(nlohmann::json::parse(R"({"quantization_config": {"quant_method": "fp8"}})"),
                                  "c.json"),
               Error);
}

}  // namespace
}  // namespace strata
