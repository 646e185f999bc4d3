// BatchSampler: the draws of one engine step, on the device that holds the logits (ops.h's
// sample_tokens): each draw's processing (logit bias, min_tokens, penalties) becomes a short
// list of per-token adjustments, its random number comes from its sequence's RNG on the host,
// and only the tokens and the log-probabilities asked for come back. The results equal
// Sampler's (engine/sampler.h) bit for bit on the CPU; see docs/ENGINE.md for CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/engine/sampler.h"
#include "strata/engine/sequence.h"
#include "strata/ops/ops.h"

namespace strata {

struct SampleJob {
  Sequence* seq = nullptr;
  int32_t logits_row = 0;
};

class BatchSampler {
 public:
  BatchSampler(int64_t vocab_size, LogprobsMode mode) : vocab_(vocab_size), mode_(mode) {}
  // One token per job from logits [rows, vocab] F32, in job order. Draws one uniform number
  // from each non-greedy job's sequence RNG.
  std::vector<SampleResult> sample(const Tensor& logits, const std::vector<SampleJob>& jobs);

 private:
  void add_adjustments(const Sequence& seq, ops::SampleSpec& spec);
  ops::LogitAdjust& entry(int32_t id);

  int64_t vocab_;
  LogprobsMode mode_;
  ops::SampleBatch batch_;
  ops::SampledTokens out_;
  std::vector<int32_t> where_;  // token id -> its entry in the row being built, or -1
};

}  // namespace strata
