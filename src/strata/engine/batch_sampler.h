// BatchSampler: the draws of one engine step, on the device that holds the logits (ops.h's
// sample_tokens): each draw's processing (logit bias, min_tokens, penalties) becomes a short
// list of per-token adjustments, its random number comes from its sequence's RNG on the host,
// and only the tokens and the log-probabilities asked for come back. The results equal
// Sampler's (engine/sampler.h) bit for bit on the CPU; see docs/ENGINE.md for CUDA.
#pragma once

#include <array>
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

  // sample in two halves (overlapped scheduling): begin queues the draws in `slot` (0 or 1) and
  // returns; end(slot) waits for them. A draw counts the sequence's pending draws as generated
  // (min_tokens); its penalties and its grammar mask read the tokens on the host, so a step
  // whose draws use them must be ended before the next step's draws of the same sequences
  // begin. begin fills the masks on the host first; queued after a forward, it overlaps it.
  void begin(const Tensor& logits, const std::vector<SampleJob>& jobs, int slot);
  std::vector<SampleResult> end(int slot);
  // The device ids of slot's draws, in job order (ForwardBatch::feed_ids).
  const Tensor& draw_ids(int slot) const { return slots_[size_t(slot)].draws.ids; }
  // A sequence whose next draw needs its latest token on the host (repetition, presence or
  // frequency penalties; a structured output, whose mask follows the grammar's state).
  static bool reads_tokens(const Sequence& seq);
  // Structured-output masks filled so far, and the host (wall) time they took.
  int64_t grammar_masks() const { return grammar_masks_; }
  double grammar_mask_seconds() const { return grammar_mask_seconds_; }

 private:
  struct Slot {
    ops::DrawsInFlight draws;
    std::vector<int32_t> num_top;  // per draw: num_top_logprobs
  };
  void add_adjustments(const Sequence& seq, ops::SampleSpec& spec);
  void fill_masks(const std::vector<SampleJob>& jobs);  // the structured draws' allow rows
  ops::LogitAdjust& entry(int32_t id);

  int64_t vocab_;
  LogprobsMode mode_;
  ops::SampleBatch batch_;
  ops::SampledTokens out_;
  std::array<Slot, 2> slots_;
  int64_t grammar_masks_ = 0;
  double grammar_mask_seconds_ = 0;
  std::vector<int32_t> where_;  // token id -> its entry in the row being built, or -1
};

}  // namespace strata
