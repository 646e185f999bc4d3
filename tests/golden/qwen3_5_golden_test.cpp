// The Qwen3.5 family against HF transformers' fp32 logits, in every mode, and HF's greedy ids.
#include <cstdio>

#include "golden_util.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

class Qwen35Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen35Golden, LogitsMatchHfInEveryMode) {
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

TEST_P(Qwen35Golden, GreedyIdsMatchHf) {
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir);
  EXPECT_EQ(greedy_ids(*model, f.prompt, f.greedy.size()), f.greedy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35Golden,
                         ::testing::Values("qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny"));

}  // namespace
}  // namespace strata::testing
