// The DeepSeek-V4 family against HF transformers' fp32 token-by-token logits, in every mode, and
// HF's greedy ids. Fixtures come from tools/fixtures/make_fixtures_deepseek_v4.py (run on the GPU
// machine); a missing fixture is a failure, not a skip, except deepseek_v4_hf_tiny (the folder
// transformers' save_pretrained writes, from make_fixtures_deepseek_v4_hf_names.py), skipped
// until it is generated and committed.
#include <cstdio>
#include <filesystem>

#include "golden_util.h"
#include "strata/io/config.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

const std::string kSavePretrainedFixture = "deepseek_v4_hf_tiny";

class DeepseekV4Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = fixture_dir(GetParam());
    if (GetParam() == kSavePretrainedFixture && !std::filesystem::exists(dir)) {
      GTEST_SKIP() << "fixture " << dir << " is not generated yet: run `cd tools/fixtures && python3 "
                   << "make_fixtures_deepseek_v4_hf_names.py OUT_DIR` with transformers 5.17 and copy "
                   << "OUT_DIR/" << kSavePretrainedFixture << " into tests/fixtures/";
    }
    ASSERT_TRUE(std::filesystem::exists(dir + "/reference.json"))
        << "fixture " << dir << " is missing: run `cd tools/fixtures && python3 "
        << "make_fixtures_deepseek_v4.py OUT_DIR` with transformers 5.17 and copy OUT_DIR/* into "
        << "tests/fixtures/";
  }
};

TEST_P(DeepseekV4Golden, FixtureIsTieFree) {
  const nlohmann::json ref = read_json_file(fixture_dir(GetParam()) + "/reference.json");
  std::printf("  %s: indexer gap %s (%s of %s rows select), router gap %s, clamped %s, HF full-vs-step %s\n",
              GetParam().c_str(), ref.value("indexer_min_gap", nlohmann::json()).dump().c_str(),
              ref.value("indexer_rows_selecting", nlohmann::json()).dump().c_str(),
              ref.value("indexer_rows", nlohmann::json()).dump().c_str(),
              ref.value("router_min_gap", nlohmann::json()).dump().c_str(),
              ref.value("swiglu_clamped", nlohmann::json()).dump().c_str(),
              ref.value("hf_full_vs_stepwise_max_abs", nlohmann::json()).dump().c_str());
  // The generator's thresholds (MIN_INDEX_GAP, MIN_ROUTER_GAP): fp32 indexer scores differ by
  // ~1e-6 at |score| ~ 5 between HF and strata, router scores by ~1e-7.
  if (ref.contains("indexer_min_gap") && ref["indexer_min_gap"].is_number()) {
    EXPECT_GT(ref["indexer_min_gap"].get<double>(), 5e-5);
  } else {
    EXPECT_TRUE(ref.value("indexer_topk_covers_all", false)) << "no indexer gap recorded";
  }
  if (ref.contains("router_min_gap") && ref["router_min_gap"].is_number()) {
    EXPECT_GT(ref["router_min_gap"].get<double>(), 2e-5);
  }
  // The clamped SwiGLU must have clamped something, in routed and in shared experts.
  const nlohmann::json clamp = ref.at("swiglu_clamped");
  EXPECT_GT(clamp.at("routed_gate").get<int64_t>() + clamp.at("routed_up").get<int64_t>(), 0);
  EXPECT_GT(clamp.at("shared_gate").get<int64_t>() + clamp.at("shared_up").get<int64_t>(), 0);
  for (double m : ref.at("greedy_margins").get<std::vector<double>>()) EXPECT_GT(m, 2e-2);
}

TEST_P(DeepseekV4Golden, LogitsMatchHfInEveryMode) {
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir);
  for (const std::string mode : {"full", "stepwise", "chunked:7", "chunked:64"}) {
    Tensor logits = sequence_logits(*model, f.prompt, mode);
    const double d = max_abs_diff(logits, f.logits);
    std::printf("  %s %-10s max|d| = %.3g (tolerance %.3g)\n", GetParam().c_str(), mode.c_str(), d,
                f.tolerance);
    EXPECT_LE(d, f.tolerance) << GetParam() << " mode " << mode;
  }
}

TEST_P(DeepseekV4Golden, GreedyIdsMatchHf) {
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir);
  EXPECT_EQ(greedy_ids(*model, f.prompt, f.greedy.size()), f.greedy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekV4Golden,
                         ::testing::Values("deepseek_v4_tiny", "deepseek_v4_topk_all", "deepseek_v4_quant",
                                           kSavePretrainedFixture));

}  // namespace
}  // namespace strata::testing
