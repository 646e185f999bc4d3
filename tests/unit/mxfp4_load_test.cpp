// MXFP4 checkpoints of the Qwen3.5 family in llm-compressor's compressed-tensors layout (U8
// `weight_packed` e2m1 pairs, U8 `weight_scale` UE8M0 exponents per 32 elements; the
// quantization_config vLLM loads as CompressedTensorsW4A16Mxfp4): the qwen3_5_tiny fixture
// quantised here by the OCP MX recipe loads to the model of its dequantised weights; the
// "re:" patterns of the ignore list match as Python's re.match does; each broken variant fails
// with an error naming the tensor or field; and the recipe's rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "quant_checkpoint_util.h"
#include "strata/core/error.h"
#include "strata/io/quant.h"
#include "strata/io/quant_config.h"
#include "strata/io/quantise.h"
#include "strata/io/quantise_checkpoint.h"

namespace strata {
namespace {

class Mxfp4Checkpoint : public QuantisedCheckpoint {
 protected:
  void SetUp() override {
    make("mxfp4", [](const TensorInfo& t) { return t.shape[1] % kMxfp4Group == 0; },
         [](const std::string& name, const Tensor& w) {
           Mxfp4Weight q = quantise_mxfp4(w, name);
           Tensor d = dequant_mxfp4(q.packed, q.scale, name);
           return Quantised{{{name + "_packed", q.packed}, {name + "_scale", q.scale}}, d};
         });
    config_["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "mxfp4-pack-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights", {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}}},
            {"input_activations", nullptr}}}}},
        {"ignore", {"lm_head", "re:.*linear_attn\\.in_proj_[ab]$"}}};
  }
};

TEST_F(Mxfp4Checkpoint, LoadsAsItsDequantisedWeights) {
  ASSERT_GT(quantised_, 4);
  write(quant_);
  expect_same_logits();
}

TEST_F(Mxfp4Checkpoint, MissingOrWrongScaleIsNamed) {
  const std::string name = find("mlp.down_proj.weight_packed").first;
  const std::string scale = name.substr(0, name.size() - 7) + "_scale";
  auto& s = find("mlp.down_proj.weight_scale");
  const Tensor good = s.second;
  s.second = Tensor::zeros(good.shape(), DType::kBF16);
  expect_load_error({scale, "must be U8 or F8_E8M0"});
  s.second = Tensor::zeros({good.dim(0), good.dim(1) + 1}, DType::kU8);
  expect_load_error({scale, "expected shape"});
  static_cast<uint8_t*>(good.raw())[2] = 0xff;
  s.second = good;
  expect_load_error({name, "NaN"});
  std::erase_if(quant_, [&](const auto& t) { return t.first == scale; });
  expect_load_error({name, "has no", scale});
}

TEST_F(Mxfp4Checkpoint, QuantisedWeightListedAsIgnoredIsNamed) {
  const std::string name = find("mlp.down_proj.weight_packed").first;
  config_["quantization_config"]["ignore"].push_back("re:model\\.layers\\.\\d\\.mlp\\.down_proj$");
  expect_load_error({"quantization_config.ignore"});  // \d is not read: named, not guessed
  config_["quantization_config"]["ignore"].back() = "re:model\\.layers\\.[0123456789]\\.mlp\\.down_proj$";
  expect_load_error({name, "ignore"});
}

TEST_F(Mxfp4Checkpoint, BadQuantizationFieldsAreNamed) {
  nlohmann::json saved = config_;
  config_["quantization_config"]["format"] = "nvfp4-pack-quantized";
  expect_load_error({"config.json", "format", "mxfp4-pack-quantized"});
  config_ = saved;
  config_["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 16;
  expect_load_error({"config.json", "weights"});
  config_ = saved;
  config_["quantization_config"]["config_groups"] = nlohmann::json::object();
  expect_load_error({"config.json", "config_groups"});
  config_ = saved;
  config_["quantization_config"]["ignore"].push_back("re:(gate|up)_proj");
  expect_load_error({"config.json", "ignore", "(gate|up)_proj"});
}

TEST(Mxfp4Config, IgnorePatternsMatchAsPythonsReMatch) {
  nlohmann::json root = {{"quantization_config",
                          {{"quant_method", "compressed-tensors"},
                           {"format", "mxfp4-pack-quantized"},
                           {"config_groups",
                            {{"g", {{"weights", {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"},
                                                 {"group_size", 32}}}}}}},
                           {"ignore", {"re:.*mlp\\.gate$", "re:model\\.layers\\.[01]\\.", "lm_head"}}}}};
  const WeightQuant q = parse_weight_quant(root, "config.json");
  EXPECT_EQ(q.method, WeightQuant::Method::kMxfp4);
  EXPECT_TRUE(q.listed_not_converted("model.layers.7.mlp.gate.weight"));
  EXPECT_FALSE(q.listed_not_converted("model.layers.7.mlp.gate_proj.weight"));  // '$' anchors
  EXPECT_TRUE(q.listed_not_converted("model.layers.1.self_attn.q_proj.weight"));  // re.match: a prefix
  EXPECT_FALSE(q.listed_not_converted("model.layers.2.self_attn.q_proj.weight"));
  EXPECT_FALSE(q.listed_not_converted("x.model.layers.1.self_attn.q_proj.weight"));  // from the start
  EXPECT_TRUE(q.listed_not_converted("lm_head.weight"));
  // Many stars cost no backtracking: the states are walked once per character.
  std::string stars = "re:";
  for (int i = 0; i < 40; ++i) stars += ".*a";
  root["quantization_config"]["ignore"] = {stars + "b$"};
  const WeightQuant slow = parse_weight_quant(root, "config.json");
  EXPECT_FALSE(slow.listed_not_converted(std::string(400, 'a') + ".weight"));
  EXPECT_TRUE(slow.listed_not_converted(std::string(400, 'a') + "b.weight"));
}

// The OCP recipe: the block's largest magnitude sets 2^(floor(log2 amax) - 2); values round to
// the nearest e2m1 step of that scale and clip at 6 of it.
TEST(Mxfp4Quantise, OcpScaleRoundsAndClips) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 1.f);
  Tensor w = Tensor::empty({4, 64}, DType::kF32);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = n(rng) * (i < 64 ? 1e-3f : 10.f);
  w.data<float>()[64 + 40] = 0.f;  // a block of its own below
  for (int64_t j = 96; j < 128; ++j) w.data<float>()[j] = 0.f;  // row 1, block 1: zeros
  const Mxfp4Weight q = quantise_mxfp4(w, "w");
  const Tensor d = dequant_mxfp4(q.packed, q.scale, "w");
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t b = 0; b < 2; ++b) {
      float amax = 0;
      for (int64_t j = b * 32; j < b * 32 + 32; ++j) amax = std::max(amax, std::fabs(w.data<float>()[r * 64 + j]));
      const int e = int(q.scale.data<uint8_t>()[r * 2 + b]) - 127;
      if (amax == 0) {
        EXPECT_EQ(e, 0);
        continue;
      }
      EXPECT_EQ(e, int(std::floor(std::log2(amax))) - 2) << r << "," << b;
      const float x = std::ldexp(1.f, e);
      for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
        const float v = w.data<float>()[r * 64 + j], got = d.data<float>()[r * 64 + j];
        const float clipped = std::clamp(v, -6 * x, 6 * x);
        // e2m1 steps: 0.5 below 2, 1 below 4, 2 above: half a step of the scaled value.
        const float step = std::fabs(clipped) < 2 * x ? 0.5f * x : std::fabs(clipped) < 4 * x ? x : 2 * x;
        EXPECT_LE(std::fabs(got - clipped), step / 2 + 1e-12f) << "element " << r << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace strata
