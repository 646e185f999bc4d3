// Sampler: the reference for one token from one row of logits, with vLLM's processing order:
//   1. logit bias; min_tokens masks eos and stop ids;
//   2. penalties: repetition (prompt + generated: positive logits divided, negative
//      multiplied), then frequency and presence (generated tokens only); then a structured
//      output's grammar mask (SamplerInput::allow), as the batched sampler applies it;
//   3. greedy (temperature < 1e-5): the arg max, the lowest id winning a tie; else
//      4. temperature, then the kept set and the draw of ops.h's SampleSpec: min-p (against
//      the most likely token), top-k and top-p as thresholds (ties at a cut kept), and the
//      first kept token in id order at which the running mass exceeds one uniform number from
//      the sequence's own RNG times the kept mass.
// Log-probabilities are the log-softmax of either the raw model logits (LogprobsMode::kRaw) or
// the processed ones after step 2 and the temperature, before min-p / top-k / top-p
// (kProcessed, the default), so every token has a finite log-probability.
// The engine samples whole batches on the logits' device (engine/batch_sampler.h); this class
// is the per-row reference that path is tested against.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "strata/engine/output.h"
#include "strata/engine/sampling_params.h"
#include "strata/ops/ops.h"

namespace strata {

enum class LogprobsMode { kProcessed, kRaw };

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.f;               // when logprobs were asked
  std::vector<TokenLogprob> top;     // the top-N, most likely first (ties: lower id first)
};

// What the sampler reads of a sequence.
struct SamplerInput {
  const std::vector<int32_t>* tokens = nullptr;  // prompt + generated
  int32_t prompt_len = 0;
  const std::unordered_map<int32_t, int32_t>* output_counts = nullptr;
  std::mt19937_64* rng = nullptr;
  // A structured output's allowed tokens (bit t of word t / 64, as ops::SampleBatch::allow):
  // the others are masked after step 2. nullptr: no constraint.
  const uint64_t* allow = nullptr;
};

class Sampler {
 public:
  Sampler(int64_t vocab_size, LogprobsMode mode) : vocab_(vocab_size), mode_(mode) {}
  SampleResult sample(const float* logits, const ResolvedSampling& p, const SamplerInput& in);

  // Speculative decoding with sampling (non-greedy p): the distribution sample() would draw
  // from (steps 1-4: ops::kept_distribution of the processed row), without drawing; then
  // result_for gives a chosen token's log-probabilities as sample() reports them.
  void distribution(const float* logits, const ResolvedSampling& p, const SamplerInput& in, std::vector<double>& probs);
  SampleResult result_for(int32_t token, const ResolvedSampling& p);

 private:
  void process(const float* logits, const ResolvedSampling& p, const SamplerInput& in);  // steps 1 and 2

  int64_t vocab_;
  LogprobsMode mode_;
  std::vector<float> x_, lp_, raw_;
  std::vector<uint8_t> seen_;
};

// The draw parameters of `p` (SampleSpec's fields but the row, the uniform number and the
// adjustments).
ops::SampleSpec sample_spec(const ResolvedSampling& p);

// A uniform double in [0, 1) from 53 bits of the generator (the same on every platform).
inline double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }
// A uniform float in [0, 1) from 24 bits of the generator: the draw of one sampled token.
inline float uniform01f(std::mt19937_64& rng) { return float(rng() >> 40) * 0x1.0p-24f; }

}  // namespace strata
