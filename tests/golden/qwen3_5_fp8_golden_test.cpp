// An FP8 block-scale Qwen3.5 MoE checkpoint (tools/fixtures/make_fixtures_qwen3_5_fp8.py) against
// HF transformers' fp32 logits on its dequantised weights, in every mode, and HF's greedy ids.
// Skips while the fixture folder is absent (it is made on the GPU machine and committed after).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "golden_util.h"
#include "strata/engine/single_sequence.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

const char kFp8Fixture[] = "qwen3_5_moe_fp8_tiny";

#define SKIP_WITHOUT_FP8_FIXTURE()                                                                         \
  if (!std::filesystem::exists(fixture_dir(kFp8Fixture) + "/reference.json")) {                            \
    GTEST_SKIP() << fixture_dir(kFp8Fixture) << " is absent: make it with "                                \
                 << "tools/fixtures/make_fixtures_qwen3_5_fp8.py on a machine with torch and transformers"; \
  }

TEST(Qwen35Fp8Golden, LogitsMatchHfInEveryMode) {
  SKIP_WITHOUT_FP8_FIXTURE();
  Fixture f = load_fixture(kFp8Fixture);
  auto model = load_model(f.dir);
  for (const std::string mode : {"full", "stepwise", "chunked:7", "chunked:64"}) {
    Tensor logits = sequence_logits(*model, f.prompt, mode);
    const double d = max_abs_diff(logits, f.logits);
    std::printf("  %s %-10s max|d| = %.3g (tolerance %.3g)\n", kFp8Fixture, mode.c_str(), d, f.tolerance);
    EXPECT_LE(d, f.tolerance) << "mode " << mode;
  }
}

TEST(Qwen35Fp8Golden, GreedyIdsMatchHf) {
  SKIP_WITHOUT_FP8_FIXTURE();
  Fixture f = load_fixture(kFp8Fixture);
  auto model = load_model(f.dir);
  SingleSequence seq(*model, int64_t(f.prompt.size() + f.greedy.size()));
  Tensor logits = seq.append(f.prompt, false);
  std::vector<int32_t> got;
  const int64_t vocab = model->info().vocab_size;
  while (got.size() < f.greedy.size()) {
    const float* l = logits.data<float>();
    got.push_back(int32_t(std::max_element(l, l + vocab) - l));
    logits = seq.append({got.back()}, false);
  }
  EXPECT_EQ(got, f.greedy);
}

}  // namespace
}  // namespace strata::testing
