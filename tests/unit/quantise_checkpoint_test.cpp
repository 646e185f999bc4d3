// io/quantise.h's encoders (nearest code, ties to even, as an exhaustive search finds) and
// io/quantise_checkpoint.h (`strata quantize`): qwen3_5_moe_tiny copied as FP8 and NVFP4 loads,
// with fused experts written one tensor per expert, the published bf16 modules left bf16 and
// listed, and logits near the bf16 model's; refusals name the folder.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <algorithm>

#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/io/quantise.h"
#include "strata/io/quantise_checkpoint.h"
#include "strata/models/model.h"

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
      EXPECT_EQ(f32_to_e2m1(s), search(s, 8, f4e2m1_to_f32, 8)) << s;
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

TEST_F(QuantiseCheckpoint, Fp8AndNvfp4CopiesLoadNearTheBf16Model) {
  const std::vector<int32_t> ids = {5, 17, 3, 99, 42, 7, 11, 64};
  auto bf16 = load_model(src_);
  const Tensor ref = sequence_logits(*bf16, ids, "full");
  double mean_sq = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) mean_sq += double(ref.data<float>()[i]) * ref.data<float>()[i];
  const double rms = std::sqrt(mean_sq / double(ref.numel()));
  for (const auto& [format, dtype, bound] : {std::tuple{"fp8", DType::kF8E4M3, 0.1}, std::tuple{"nvfp4", DType::kU8, 0.5}}) {
    const std::string out = (dir_ / format).string();
    const QuantiseSummary s = quantise_checkpoint(src_, out, parse_checkpoint_quant(format, "--format"));
    EXPECT_GT(s.quantised, 10);
    EXPECT_LT(s.bytes_out, s.bytes_in);
    const Checkpoint q = Checkpoint::open(out);
    const std::string layer = "model.language_model.layers.0.";
    EXPECT_FALSE(q.has(layer + "mlp.experts.gate_up_proj"));
    EXPECT_EQ(q.info(layer + "mlp.experts.1.up_proj.weight").dtype, dtype) << format;
    EXPECT_EQ(q.info(layer + "mlp.experts.1.down_proj.weight").dtype, dtype) << format;
    EXPECT_EQ(q.info(layer + "mlp.gate.weight").dtype, DType::kBF16) << format;
    EXPECT_EQ(q.info(layer + "linear_attn.in_proj_a.weight").dtype, DType::kBF16) << format;
    EXPECT_EQ(q.info(layer + "linear_attn.in_proj_qkv.weight").dtype, dtype) << format;
    const nlohmann::json& qc = q.config().at("quantization_config");
    const nlohmann::json& listed = qc.contains("ignore") ? qc["ignore"] : qc["modules_to_not_convert"];
    EXPECT_NE(std::find(listed.begin(), listed.end(), layer + "mlp.gate"), listed.end()) << qc.dump();
    EXPECT_NE(std::find(listed.begin(), listed.end(), layer + "linear_attn.in_proj_b"), listed.end()) << qc.dump();
    auto model = load_model(out);
    const Tensor got = sequence_logits(*model, ids, "full");
    double worst = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      worst = std::max(worst, double(std::fabs(got.data<float>()[i] - ref.data<float>()[i])));
    }
    std::printf("  %s: max|d| logits %.3g (rms %.3g)\n", format, worst, rms);
    EXPECT_GT(worst, 0) << format;
    EXPECT_LT(worst, bound * rms) << format;
  }
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
  EXPECT_NE(message([] { parse_checkpoint_quant("int4", "--format"); }).find("--format: expected fp8 or nvfp4"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
