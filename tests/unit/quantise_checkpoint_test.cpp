// io/quantise.h's encoders (nearest code, ties to even, as an exhaustive search finds) and
// io/quantise_checkpoint.h (`strata quantize`): qwen3_5_moe_tiny copied as FP8 and NVFP4 holds
// every quantised weight (fused experts one tensor per expert) within its format's rounding and
// every other tensor as stored, lists the modules left bf16, and loads; the default model's copies
// keep its NLL near; refusals name the folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <algorithm>

#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/engine/perplexity.h"
#include "strata/io/checkpoint.h"
#include "strata/io/quant.h"
#include "strata/io/quantise.h"
#include "strata/io/quantise_checkpoint.h"
#include "strata/models/model.h"
#include "strata/tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

// The code whose value is nearest to x over `codes` codes (sign bit `sign`), ties to the even.
uint8_t search(float x, int codes, float (*value)(uint8_t), uint8_t sign) {
  const float a = std::fabs(x);
  int best = 0;
  for (int c = 1; c < codes; ++c) {
    const float d = std::fabs(value(uint8_t(c)) - a), e = std::fabs(value(uint8_t(best)) - a);
    if (d < e || (d == e && (c & 1) == 0)) best = c;
  }
  return uint8_t(best | (x < 0 && best ? sign : 0));
}

TEST(Quantise, EncodersPickTheNearestCodeTiesToEven) {
  std::vector<float> xs = {0.f, 1e-30f, 500.f, 1e9f, 7.f, 0.25f, 0.75f, 5.f, 2.5f};
  for (int c = 0; c < 0x7f; ++c) {
    const float v = f8e4m3_to_f32(uint8_t(c)), next = f8e4m3_to_f32(uint8_t(c + 1 < 0x7f ? c + 1 : c));
    for (float x : {v, (v + next) / 2, std::nextafter((v + next) / 2, 0.f), std::nextafter((v + next) / 2, 1e9f)}) {
      xs.push_back(x);
    }
  }
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-7, 7);
  for (int i = 0; i < 2000; ++i) xs.push_back(std::ldexp(u(gen), int(gen() % 24) - 12));
  for (float x : xs) {
    for (float s : {x, -x}) {
      EXPECT_EQ(f32_to_e4m3(s), search(std::min(std::fabs(s), 448.f) * (s < 0 ? -1 : 1), 0x7f, f8e4m3_to_f32, 0x80))
          << s;
      EXPECT_EQ(f32_to_e2m1(s), search(std::min(std::fabs(s), 6.f) * (s < 0 ? -1 : 1), 8, f4e2m1_to_f32, 8)) << s;
    }
  }
}

class QuantiseCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("strata_quantise_" + std::to_string(rd()));
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  const std::string src_ = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen3_5_moe_tiny";
};

// |w - dequantised| within the format's rounding: FP8 half an e4m3 step (|w| / 16, or the
// subnormal step of the block scale); NVFP4 half an e2m1 step of the block's scale (at most the
// scale at the top of the range) plus the e4m3 rounding of that scale (|w| / 8).
void expect_within_rounding(const Checkpoint& q, const std::string& name, const Tensor& w32, bool fp8) {
  const Tensor d = fp8 ? dequant_fp8_block(q.get(name), q.get(name + "_scale_inv"), 128, 128, name)
                       : dequant_nvfp4(q.get(name), q.get(name + "_scale"), q.get(name + "_scale_2").data<float>()[0], name);
  ASSERT_EQ(d.shape(), w32.shape()) << name;
  const int64_t k = w32.dim(1);
  int bad = 0;
  for (int64_t i = 0; i < w32.numel() && bad < 3; ++i) {
    const float w = w32.data<float>()[i], y = d.data<float>()[i];
    const int64_t r = i / k, c = i % k;
    const float bound =
        fp8 ? std::fabs(w) / 16 + q.get(name + "_scale_inv").data<float>()[(r / 128) * ((k + 127) / 128) + c / 128] / 512
            : f8e4m3_to_f32(static_cast<const uint8_t*>(q.get(name + "_scale").raw())[r * (k / 16) + c / 16]) *
                      q.get(name + "_scale_2").data<float>()[0] * 1.0001f + std::fabs(w) / 8;
    if (std::fabs(w - y) > bound) {
      ADD_FAILURE() << name << "[" << r << ", " << c << "]: " << w << " -> " << y;
      ++bad;
    }
  }
}

// Rows [r0, r0 + rows) of expert e of fused experts [E, R, C].
Tensor expert_rows(const Tensor& fused32, int64_t e, int64_t r0, int64_t rows) {
  const int64_t r = fused32.dim(1);
  return fused32.reshape({fused32.dim(0) * r, fused32.dim(2)}).rows(e * r + r0, e * r + r0 + rows);
}

TEST_F(QuantiseCheckpoint, WritesEveryWeightWithinItsFormatsRounding) {
  const Checkpoint src = Checkpoint::open(src_);
  for (const auto& [format, dtype] : {std::pair{"fp8", DType::kF8E4M3}, std::pair{"nvfp4", DType::kU8}}) {
    SCOPED_TRACE(format);
    const bool fp8 = std::string(format) == "fp8";
    const std::string out = (dir_ / format).string();
    const QuantiseSummary s = quantise_checkpoint(src_, out, parse_checkpoint_quant(format, "--format"));
    EXPECT_GT(s.quantised, 10);
    EXPECT_LT(s.bytes_out, s.bytes_in);
    const Checkpoint q = Checkpoint::open(out);
    int64_t quantised = 0;
    for (const std::string& name : src.names()) {
      const Tensor t = src.get(name);
      if (name.ends_with("mlp.experts.gate_up_proj") && q.has(name.substr(0, name.size() - 12) + "0.up_proj.weight")) {
        const std::string base = name.substr(0, name.size() - 12);
        EXPECT_FALSE(q.has(name));
        const int64_t inter = t.dim(1) / 2;
        for (int64_t e = 0; e < t.dim(0); ++e) {
          expect_within_rounding(q, cat(base, e, ".gate_proj.weight"), expert_rows(t.to_f32(), e, 0, inter), fp8);
          expect_within_rounding(q, cat(base, e, ".up_proj.weight"), expert_rows(t.to_f32(), e, inter, inter), fp8);
          quantised += 2;
        }
      } else if (name.ends_with("mlp.experts.down_proj") && q.has(name.substr(0, name.size() - 9) + "0.down_proj.weight")) {
        for (int64_t e = 0; e < t.dim(0); ++e) {
          expect_within_rounding(q, cat(name.substr(0, name.size() - 9), e, ".down_proj.weight"),
                                 expert_rows(t.to_f32(), e, 0, t.dim(1)), fp8);
          ++quantised;
        }
      } else if (q.info(name).dtype == dtype) {
        EXPECT_TRUE(quantised_by_recipe(name)) << name;
        expect_within_rounding(q, name, t.to_f32(), fp8);
        ++quantised;
      } else {  // as stored
        ASSERT_EQ(q.info(name).dtype, t.dtype()) << name;
        EXPECT_EQ(std::memcmp(q.data(name), t.raw(), t.nbytes()), 0) << name;
      }
    }
    EXPECT_EQ(quantised, s.quantised);
    const std::string layer = "model.language_model.layers.0.";
    EXPECT_EQ(q.info(layer + "linear_attn.in_proj_qkv.weight").dtype, dtype);
    EXPECT_EQ(q.info(layer + "linear_attn.in_proj_a.weight").dtype, DType::kBF16);
    const nlohmann::json& qc = q.config().at("quantization_config");
    const nlohmann::json& listed = qc.contains("ignore") ? qc["ignore"] : qc["modules_to_not_convert"];
    for (const std::string m : {"lm_head", "mlp.gate", "linear_attn.in_proj_b", "mlp.shared_expert_gate"}) {
      const std::string module = m == "lm_head" ? m : layer + m;
      EXPECT_NE(std::find(listed.begin(), listed.end(), module), listed.end()) << module << " " << qc.dump();
    }
    EXPECT_NO_THROW(load_model(out));
  }
}

// On the trained default model the copies keep its predictions: the NLL of a sentence moves by
// little (FP8) or a little more (NVFP4, MXFP4), and not by nothing.
TEST_F(QuantiseCheckpoint, DefaultModelCopiesKeepItsNll) {
  const std::string model = std::string(STRATA_SOURCE_DIR) + "/models/default";
  const std::vector<int32_t> ids = Tokenizer::load(model).encode(
      "The kill() system call can be used to send any signal to any process group or process. If the signal is "
      "zero, no signal is sent, but error checking is still performed. The shell prints the modification time of "
      "every file with the long listing format.", false);
  PerplexityOptions o;
  o.ctx_size = int64_t(ids.size());
  o.score_all = true;
  auto bf16 = load_model(model);
  const double base = perplexity(*bf16, ids, o).mean_nll();
  for (const auto& [format, bound] : {std::pair{"fp8", 0.02}, std::pair{"nvfp4", 0.1}, std::pair{"mxfp4", 0.1}}) {
    const std::string out = (dir_ / format).string();
    quantise_checkpoint(model, out, parse_checkpoint_quant(format, "--format"));
    auto q = load_model(out);
    const double nll = perplexity(*q, ids, o).mean_nll();
    std::printf("  %s: mean NLL %.6f (bf16 %.6f) over %zu tokens\n", format, nll, base, ids.size() - 1);
    EXPECT_NE(nll, base) << format;
    EXPECT_LT(std::fabs(nll - base), bound * base) << format;
  }
}

// MXFP4 in compressed-tensors' layout: the projections as weight_packed + weight_scale, the rest
// as stored, and the copy loads.
TEST_F(QuantiseCheckpoint, Mxfp4CopyUsesTheCompressedTensorsLayout) {
  const std::string out = (dir_ / "mxfp4").string();
  const QuantiseSummary s = quantise_checkpoint(src_, out, CheckpointQuant::kMxfp4);
  EXPECT_GT(s.quantised, 10);
  const Checkpoint q = Checkpoint::open(out);
  const std::string layer = "model.language_model.layers.0.";
  EXPECT_FALSE(q.has(layer + "linear_attn.in_proj_qkv.weight"));
  EXPECT_EQ(q.info(layer + "linear_attn.in_proj_qkv.weight_packed").dtype, DType::kU8);
  EXPECT_EQ(q.info(layer + "linear_attn.in_proj_qkv.weight_scale").dtype, DType::kU8);
  EXPECT_EQ(q.info(layer + "linear_attn.in_proj_a.weight").dtype, DType::kBF16);
  EXPECT_TRUE(q.has(layer + "mlp.experts.0.down_proj.weight_packed"));
  const nlohmann::json& qc = q.config().at("quantization_config");
  EXPECT_EQ(qc.at("quant_method"), "compressed-tensors");
  EXPECT_EQ(qc.at("format"), "mxfp4-pack-quantized");
  EXPECT_NO_THROW(load_model(out));
}

TEST_F(QuantiseCheckpoint, RefusalsNameTheFolder) {
  const std::string out = (dir_ / "fp8").string();
  quantise_checkpoint(src_, out, CheckpointQuant::kFp8Block);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { quantise_checkpoint(out, (dir_ / "again").string(), CheckpointQuant::kNvfp4); })
                .find("quantised already"),
            std::string::npos);
  EXPECT_NE(message([&] { quantise_checkpoint(src_, out, CheckpointQuant::kNvfp4); }).find("holds a config.json"),
            std::string::npos);
  const std::string dsv4 = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/deepseek_v4_tiny";
  EXPECT_NE(message([&] { quantise_checkpoint(dsv4, (dir_ / "d").string(), CheckpointQuant::kFp8Block); })
                .find("not of the Qwen3.5 family"),
            std::string::npos);
  EXPECT_NE(message([] { parse_checkpoint_quant("int4", "--format"); }).find("--format: expected fp8, nvfp4 or mxfp4"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
