// Shared helpers for the golden tests against HF fixtures (tests/fixtures/<name>/).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/config.h"
#include "strata/io/npy.h"

namespace strata::testing {

inline std::string fixture_dir(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

struct Fixture {
  std::string dir;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  Tensor logits;  // [T, vocab] fp32 HF reference
  double tolerance = 0;
};

inline Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.dir = fixture_dir(name);
  nlohmann::json ref = read_json_file(f.dir + "/reference.json");
  f.prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  f.greedy = ref.at("greedy_ids").get<std::vector<int32_t>>();
  f.logits = read_npy(f.dir + "/logits.npy");
  // max|d| <= 2e-3 * max(1, std(ref))
  const float* p = f.logits.data<float>();
  const int64_t n = f.logits.numel();
  double mean = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) mean += p[i];
  mean /= double(n);
  for (int64_t i = 0; i < n; ++i) sq += (p[i] - mean) * (p[i] - mean);
  f.tolerance = 2e-3 * std::max(1.0, std::sqrt(sq / double(n)));
  return f;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  }
  return m;
}

// The first n greedy ids after `prompt` (arg max, the lower id on a tie), one token at a time
// through SingleSequence: what HF's greedy_ids record.
inline std::vector<int32_t> greedy_ids(Model& model, const std::vector<int32_t>& prompt, size_t n) {
  SingleSequence seq(model, int64_t(prompt.size() + n));
  Tensor logits = seq.append(prompt, false);
  std::vector<int32_t> got;
  const int64_t vocab = model.info().vocab_size;
  while (got.size() < n) {
    const float* l = logits.data<float>();
    got.push_back(int32_t(std::max_element(l, l + vocab) - l));
    logits = seq.append({got.back()}, false);
  }
  return got;
}

}  // namespace strata::testing
