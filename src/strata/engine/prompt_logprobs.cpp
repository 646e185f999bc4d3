#include "strata/engine/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace strata {

double log_partition(const float* row, int64_t vocab) {
  float max = row[0];
  for (int64_t v = 1; v < vocab; ++v) max = std::max(max, row[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max);
  return double(max) + std::log(sum);
}

double token_logprob(const float* row, int64_t vocab, int32_t target) {
  return double(row[target]) - log_partition(row, vocab);
}

void append_prompt_logprob(const float* row, int64_t vocab, int32_t target, int top,
                           std::vector<float>& logprobs,
                           std::vector<std::vector<TokenLogprob>>& top_logprobs) {
  const double log_z = log_partition(row, vocab);
  logprobs.push_back(float(double(row[target]) - log_z));
  std::vector<TokenLogprob> best;
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) ids[size_t(v)] = int32_t(v);
    const size_t k = std::min<size_t>(size_t(top), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
      return row[a] != row[b] ? row[a] > row[b] : a < b;
    });
    for (size_t i = 0; i < k; ++i) best.push_back({ids[i], float(double(row[ids[i]]) - log_z)});
  }
  top_logprobs.push_back(std::move(best));
}

}  // namespace strata
