// Qwen4-Exp tensor and expert parallelism on the CPU (LocalGroup ranks as threads): GDN, QSA
// attention and indexer heads, experts (or their columns), shared-expert columns and lm_head's
// vocabulary split; hyper-connections, PLE layers and the exit mixer replicated. Rank 0's logits
// must match the single-device model's in every mode, and every rank must see the same logits.
#include <gtest/gtest.h>

#include <cstdio>

#include "tensor_parallel_util.h"

namespace strata::testing {
namespace {

// The shards only reorder float32 sums (the all-reduces, the indexer's summed scores).
constexpr double kRounding = 1e-4;

// Both fixtures divide by 2 everywhere: 2 GDN key heads, 4 query and 2 kv heads, 8 or 6
// indexer heads and experts, 16 expert columns, 24 shared-expert columns.
class TensorParallelQwen4Exp : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelQwen4Exp, TwoRanksMatchTheSingleDeviceModel) {
  const Fixture f = load_fixture(GetParam());
  auto single = load_model(f.dir);
  for (const std::string mode : {"full", "stepwise", "chunked:7"}) {
    const Tensor ref = sequence_logits(*single, f.prompt, mode);
    for (bool ep : {false, true}) {
      const double d = max_abs_diff(sharded_logits(f.dir, 2, f.prompt, mode, ep), ref);
      std::printf("  %s TP=2 %s %-10s max|d| vs TP=1 = %.3g\n", GetParam().c_str(), ep ? "EP" : "  ", mode.c_str(), d);
      EXPECT_LE(d, kRounding) << GetParam() << " " << mode << (ep ? " EP" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelQwen4Exp, ::testing::Values("qwen4_exp_tiny", "qwen4_exp_vl_tiny"));

// qwen4_exp_tiny widened to 4 GDN key heads (8 value heads): over 4 ranks one query head each,
// the 2 kv heads replicated, 2 indexer heads, 2 experts (or 4 columns of every expert), 6
// shared-expert columns and 64 vocabulary rows per rank.
TEST(TensorParallelQwen4Exp, FourRanksMatchOneOnAWiderModel) {
  const Fixture f = load_fixture("qwen4_exp_tiny");
  const WidenedModel wide("qwen4_exp_tiny", 4, 8);
  auto single = load_model(wide.dir);
  for (const std::string mode : {"full", "stepwise", "chunked:7"}) {
    const Tensor ref = sequence_logits(*single, f.prompt, mode);
    for (bool ep : {false, true}) {
      const double d = max_abs_diff(sharded_logits(wide.dir, 4, f.prompt, mode, ep), ref);
      std::printf("  widened qwen4_exp_tiny TP=4 %s %-10s max|d| vs TP=1 = %.3g\n", ep ? "EP" : "  ", mode.c_str(), d);
      EXPECT_LE(d, kRounding) << "TP=4 " << mode << (ep ? " EP" : "");
    }
  }
}

TEST(TensorParallelQwen4Exp, ShardsThatDoNotDivideAreRefusedByName) {
  const std::string vl = load_fixture("qwen4_exp_vl_tiny").dir;
  const std::string key_heads = sharded_load_error(vl, 4);
  EXPECT_NE(key_heads.find("'linear_num_key_heads' (2) is not divisible by the 4"), std::string::npos) << key_heads;
  // With 4 GDN key and value heads, the 6 indexer heads are next.
  const WidenedModel wide_vl("qwen4_exp_vl_tiny", 4, 4);
  const std::string indexer = sharded_load_error(wide_vl.dir, 4);
  EXPECT_NE(indexer.find("'indexer_n_heads' (6) is not divisible by the 4"), std::string::npos) << indexer;
  // qwen4_exp_tiny at 3 ranks: 2 key heads.
  const std::string three = sharded_load_error(load_fixture("qwen4_exp_tiny").dir, 3, true);
  EXPECT_NE(three.find("'linear_num_key_heads' (2) is not divisible by the 3"), std::string::npos) << three;
  // Tensor parallelism is CPU-only.
  const std::string cuda = sharded_load_error(vl, 2, false, Device::kCuda);
  EXPECT_NE(cuda.find("runs on the CPU only"), std::string::npos) << cuda;
}

}  // namespace
}  // namespace strata::testing
