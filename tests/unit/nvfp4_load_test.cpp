// NVFP4 checkpoints of the Qwen3.5 family in NVIDIA ModelOpt's layout (U8 e2m1 pairs, F8_E4M3
// scales per 16 elements, an F32 global scale a tensor; quantization_config or
// hf_quant_config.json): the qwen3_5_tiny fixture quantised here by ModelOpt's recipe loads to
// the model of its dequantised weights, and each broken variant fails with an error naming the
// tensor or field. Also the dequantisation's round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/quant.h"
#include "strata/io/quantise.h"
#include "strata/io/quant_config.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"
#include "quant_checkpoint_util.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

// ModelOpt's recipe (io/quantise.h).
Nvfp4Weight quantise(const Tensor& w32) { return quantise_nvfp4(w32, "test weight"); }

// qwen3_5_tiny with its projections quantised: quant/ (ModelOpt's tensors) and plain/ (the
// dequantised weights as F32: the model the NVFP4 file means).
class Nvfp4Checkpoint : public QuantisedCheckpoint {
 protected:
  void SetUp() override {
    make("nvfp4", [](const TensorInfo& t) { return t.shape[1] % kNvfp4Group == 0; },
         [](const std::string& name, const Tensor& w) {
           const Nvfp4Weight q = quantise(w);
           Tensor input_scale = Tensor::empty({}, DType::kF32);
           input_scale.data<float>()[0] = 0.01f;
           const std::string module = name.substr(0, name.size() - 6);  // without "weight"
           return Quantised{{{name, q.packed}, {name + "_scale", q.scale}, {name + "_scale_2", q.global},
                             {module + "input_scale", input_scale}},
                            dequant_nvfp4(q.packed, q.scale, q.global.data<float>()[0], name)};
         });
    config_["quantization_config"] = {{"quant_method", "modelopt"},
                                      {"quant_algo", "NVFP4"},
                                      {"group_size", 16},
                                      {"kv_cache_quant_algo", nullptr},
                                      {"ignore", {"lm_head", "model.layers.*.linear_attn.in_proj_a*",
                                                  "model.layers.*.linear_attn.in_proj_b*"}}};
  }
};

TEST_F(Nvfp4Checkpoint, LoadsAsItsDequantisedWeights) {
  ASSERT_GT(quantised_, 4);
  write(quant_);
  expect_same_logits();
}

// ModelOpt's own file when config.json says nothing: hf_quant_config.json's "quantization".
TEST_F(Nvfp4Checkpoint, ReadsHfQuantConfigJson) {
  const nlohmann::json q = config_["quantization_config"];
  config_.erase("quantization_config");
  write(quant_);
  nlohmann::json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.39.0"}}},
                       {"quantization", {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr},
                                         {"group_size", 16}, {"exclude_modules", q["ignore"]}}}};
  std::ofstream(dir_ / "quant" / "hf_quant_config.json") << hf.dump(2);
  expect_same_logits();
  hf["quantization"]["group_size"] = 32;
  std::ofstream(dir_ / "quant" / "hf_quant_config.json") << hf.dump(2);
  expect_load_error({"hf_quant_config.json", "quantization.group_size"});
}

TEST_F(Nvfp4Checkpoint, MissingGlobalScaleIsNamed) {
  const std::string name = find("mlp.down_proj.weight").first;
  std::erase_if(quant_, [&](const auto& t) { return t.first == name + "_scale_2"; });
  expect_load_error({name + "_scale_2", "NVFP4"});
}

TEST_F(Nvfp4Checkpoint, WrongBlockScaleShapeAndDtypeAreNamed) {
  auto& s = find("mlp.down_proj.weight_scale");
  const Tensor good = s.second;
  s.second = Tensor::zeros({good.dim(0), good.dim(1) + 1}, DType::kF8E4M3);
  expect_load_error({s.first, "expected shape"});
  s.second = Tensor::zeros(good.shape(), DType::kBF16);
  expect_load_error({s.first, "must be F8_E4M3"});
}

TEST_F(Nvfp4Checkpoint, NanBlockScaleIsNamed) {
  auto& s = find("mlp.down_proj.weight_scale");
  static_cast<uint8_t*>(s.second.raw())[3] = 0x7f;
  expect_load_error({find("mlp.down_proj.weight").first, "NaN"});
}

TEST_F(Nvfp4Checkpoint, PackedWeightOfTheWrongShapeIsNamed) {
  auto& w = find("mlp.down_proj.weight");
  w.second = Tensor::zeros({w.second.dim(0), w.second.dim(1) + 8}, DType::kU8);
  expect_load_error({w.first, "expected shape"});
}

// A pattern of the ignore list ('*' included) covers a weight that is NVFP4 anyway.
TEST_F(Nvfp4Checkpoint, QuantisedWeightListedAsIgnoredIsNamed) {
  const std::string name = find("mlp.down_proj.weight").first;
  config_["quantization_config"]["ignore"].push_back("model.layers.*.mlp.down_proj");
  expect_load_error({name, "not quantised"});
}

TEST_F(Nvfp4Checkpoint, BadQuantizationFieldsAreNamed) {
  const struct {
    const char* key;
    nlohmann::json value;
  } cases[] = {{"quant_method", "awq"}, {"quant_algo", "FP8"}, {"group_size", 32}, {"kv_cache_quant_algo", "FP8"}};
  for (const auto& c : cases) {
    nlohmann::json saved = config_;
    config_["quantization_config"][c.key] = c.value;
    expect_load_error({"config.json", std::string("quantization_config.") + c.key});
    config_ = saved;
  }
}

// Without a quantization config a packed weight is an error naming it.
TEST_F(Nvfp4Checkpoint, PackedWeightWithoutQuantizationConfigIsNamed) {
  config_.erase("quantization_config");
  expect_load_error({"linear_attn.in_proj_qkv.weight"});
}

// By hand: byte 0x2f holds -6 (low nibble 0xf) then 1 (0x2); e4m3 0x38 is 1, 0x40 is 2; the
// global scale 0.5 multiplies last.
TEST(Nvfp4Dequant, HandPackedBytesLowNibbleFirst) {
  Tensor packed = Tensor::zeros({2, 8}, DType::kU8), scale = Tensor::empty({2, 1}, DType::kF8E4M3);
  static_cast<uint8_t*>(packed.raw())[0] = 0x2f;
  static_cast<uint8_t*>(packed.raw())[8 + 7] = 0x9d;  // row 1, elements 14 and 15: 3 (0xd & 7 = 5), -0.5 (0x9)
  static_cast<uint8_t*>(scale.raw())[0] = 0x38;
  static_cast<uint8_t*>(scale.raw())[1] = 0x40;
  const Tensor d = dequant_nvfp4(packed, scale, 0.5f, "w");
  const float* o = d.data<float>();
  EXPECT_EQ(o[0], -3.f);
  EXPECT_EQ(o[1], 0.5f);
  EXPECT_EQ(o[2], 0.f);
  EXPECT_EQ(o[16 + 14], -3.f);  // nibble 0xd: sign set, magnitude code 5 = 3; times 2 * 0.5
  EXPECT_EQ(o[16 + 15], -0.5f); // nibble 0x9: sign set, code 1 = 0.5
  static_cast<uint8_t*>(scale.raw())[1] = 0xc0;  // -2: a negative block scale is refused
  EXPECT_THROW(dequant_nvfp4(packed, scale, 0.5f, "w"), Error);
  static_cast<uint8_t*>(scale.raw())[1] = 0x80;  // -0: a zero block
  EXPECT_EQ(dequant_nvfp4(packed, scale, 0.5f, "w").data<float>()[16 + 14], 0.f);
}

// Magnitudes 1000x apart between neighbouring rows: each 16-element block keeps its own scale;
// the dequantised value is within half an e2m1 step (at most 1 at the top of the range) of the
// block scale, plus the e4m3 rounding of that scale.
TEST(Nvfp4Dequant, RoundTripsWithinHalfAStep) {
  const int64_t n = 6, k = 64;
  Tensor w = Tensor::empty({n, k}, DType::kF32);
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) w.data<float>()[i * k + j] = u(gen) * (i % 2 ? 1000.f : 1.f);
  }
  const Nvfp4Weight q = quantise(w);
  const float g = q.global.data<float>()[0];
  const Tensor d = dequant_nvfp4(q.packed, q.scale, g, "w");
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const float s = f8e4m3_to_f32(static_cast<const uint8_t*>(q.scale.raw())[i * (k / 16) + j / 16]) * g;
      const float x = w.data<float>()[i * k + j], y = d.data<float>()[i * k + j];
      EXPECT_LE(std::fabs(x - y), s * 1.0001f + std::fabs(x) / 8.f) << i << "," << j;
    }
  }
  EXPECT_THROW(dequant_nvfp4(q.packed, q.scale, 0.f, "w"), Error);
  EXPECT_THROW(dequant_nvfp4(q.packed, q.scale, std::nanf(""), "w"), Error);
}

TEST(QuantConfig, ModelOptIgnorePatternsMatchWholeNames) {
  const WeightQuant q = parse_weight_quant(nlohmann::json::parse(R"({"quantization_config":
      {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head",
       "model.layers.1.linear_attn*"]}})"), "c.json");
  EXPECT_EQ(q.method, WeightQuant::Method::kNvfp4);
  EXPECT_TRUE(q.listed_not_converted("lm_head.weight"));
  EXPECT_TRUE(q.listed_not_converted("model.layers.1.linear_attn.in_proj_qkvz.weight"));
  EXPECT_FALSE(q.listed_not_converted("model.layers.10.linear_attn.in_proj_qkvz.weight"));
  EXPECT_FALSE(q.listed_not_converted("model.layers.1.mlp.down_proj.weight"));
}

}  // namespace
}  // namespace strata
