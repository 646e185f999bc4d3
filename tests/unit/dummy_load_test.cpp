// --load-format dummy on the CPU: every family loads a folder holding only config.json, with
// seeded random weights of the real shapes, and runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/models/model.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

class DummyLoad : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("strata_dummy_" + std::to_string(rd()));
    fs::create_directories(dir_);
    fs::copy_file(fixture() + "/config.json", dir_ / "config.json");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string fixture() const { return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + GetParam(); }

  fs::path dir_;
};

TEST_P(DummyLoad, ConfigAloneLoadsAndRunsTheSameEveryTime) {
  const LoadOptions dummy{Device::kCpu, LoadFormat::kDummy, {}};
  auto a = load_model(dir_.string(), dummy);
  auto b = load_model(dir_.string(), dummy);
  EXPECT_GT(a->info().weight_bytes, 0u);
  EXPECT_EQ(a->info().weight_bytes, load_model(fixture())->info().weight_bytes) << "not the real shapes";
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7};
  const Tensor la = sequence_logits(*a, ids, "full"), lb = sequence_logits(*b, ids, "stepwise");
  ASSERT_EQ(la.shape(), (Shape{5, a->info().vocab_size}));
  for (int64_t i = 0; i < la.numel(); ++i) ASSERT_TRUE(std::isfinite(la.data<float>()[i])) << i;
  EXPECT_EQ(std::memcmp(la.raw(), lb.raw(), la.nbytes()), 0) << "seeded weights differ between loads";
  // Without the flag the same folder is refused: it has no weights.
  EXPECT_THROW(load_model(dir_.string()), Error);
}

INSTANTIATE_TEST_SUITE_P(Families, DummyLoad,
                         ::testing::Values("qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny", "deepseek_v4_tiny",
                                           "deepseek_v4_quant", "qwen4_exp_tiny", "qwen4_exp_vl_tiny"));

}  // namespace
}  // namespace strata
