// The quantised Qwen3.5 MoE checkpoints against HF transformers' fp32 logits on their dequantised
// weights, in every mode, and HF's greedy ids: FP8 block-scale
// (tools/fixtures/make_fixtures_qwen3_5_fp8.py), NVFP4 (ModelOpt's layout) and MXFP4
// (compressed-tensors' layout), both by tools/fixtures/make_fixtures_qwen3_5_nvfp4.py: on the CPU
// every weight is dequantised at load, so the bound is the bf16 fixtures' exact one. Each skips while its fixture folder is absent (it is made on the GPU machine
// and committed after).
#include <cstdio>
#include <filesystem>
#include <string>

#include "golden_util.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

const char kFp8Fixture[] = "qwen3_5_moe_fp8_tiny";
const char kNvfp4Fixture[] = "qwen3_5_moe_nvfp4_tiny";
const char kMxfp4Fixture[] = "qwen3_5_moe_mxfp4_tiny";

#define SKIP_WITHOUT_FIXTURE(fixture, script)                                                   \
  if (!std::filesystem::exists(fixture_dir(fixture) + "/reference.json")) {                     \
    GTEST_SKIP() << fixture_dir(fixture) << " is absent: make it with "                         \
                 << "tools/fixtures/" << script << " on a machine with torch and transformers"; \
  }

void expect_logits_match_hf(const std::string& name) {
  Fixture f = load_fixture(name);
  auto model = load_model(f.dir);
  for (const std::string mode : {"full", "stepwise", "chunked:7", "chunked:64"}) {
    Tensor logits = sequence_logits(*model, f.prompt, mode);
    const double d = max_abs_diff(logits, f.logits);
    std::printf("  %s %-10s max|d| = %.3g (tolerance %.3g)\n", name.c_str(), mode.c_str(), d, f.tolerance);
    EXPECT_LE(d, f.tolerance) << name << " mode " << mode;
  }
}

void expect_greedy_ids_match_hf(const std::string& name) {
  Fixture f = load_fixture(name);
  auto model = load_model(f.dir);
  EXPECT_EQ(greedy_ids(*model, f.prompt, f.greedy.size()), f.greedy);
}

TEST(Qwen35Fp8Golden, LogitsMatchHfInEveryMode) {
  SKIP_WITHOUT_FIXTURE(kFp8Fixture, "make_fixtures_qwen3_5_fp8.py");
  expect_logits_match_hf(kFp8Fixture);
}

TEST(Qwen35Fp8Golden, GreedyIdsMatchHf) {
  SKIP_WITHOUT_FIXTURE(kFp8Fixture, "make_fixtures_qwen3_5_fp8.py");
  expect_greedy_ids_match_hf(kFp8Fixture);
}

TEST(Qwen35Nvfp4Golden, LogitsMatchHfInEveryMode) {
  SKIP_WITHOUT_FIXTURE(kNvfp4Fixture, "make_fixtures_qwen3_5_nvfp4.py");
  expect_logits_match_hf(kNvfp4Fixture);
}

TEST(Qwen35Nvfp4Golden, GreedyIdsMatchHf) {
  SKIP_WITHOUT_FIXTURE(kNvfp4Fixture, "make_fixtures_qwen3_5_nvfp4.py");
  expect_greedy_ids_match_hf(kNvfp4Fixture);
}

TEST(Qwen35Mxfp4Golden, LogitsMatchHfInEveryMode) {
  SKIP_WITHOUT_FIXTURE(kMxfp4Fixture, "make_fixtures_qwen3_5_nvfp4.py --format mxfp4");
  expect_logits_match_hf(kMxfp4Fixture);
}

TEST(Qwen35Mxfp4Golden, GreedyIdsMatchHf) {
  SKIP_WITHOUT_FIXTURE(kMxfp4Fixture, "make_fixtures_qwen3_5_nvfp4.py --format mxfp4");
  expect_greedy_ids_match_hf(kMxfp4Fixture);
}

}  // namespace
}  // namespace strata::testing
