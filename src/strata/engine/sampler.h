// Sampler: one token from one row of logits, with vLLM's processing order:
//   1. logit bias; min_tokens masks eos and stop ids;
//   2. penalties: repetition (prompt + generated: positive logits divided, negative
//      multiplied), then frequency and presence (generated tokens only);
//   3. greedy (temperature < 1e-5): the arg max, the lowest id winning a tie; else
//      4. temperature, 5. min-p (against the most likely token), 6. top-k, 7. top-p (the
//      smallest set, most likely first, whose mass reaches top_p), and a draw from what is
//      left with one uniform number from the sequence's own RNG.
// Log-probabilities are the log-softmax of either the raw model logits (LogprobsMode::kRaw) or
// the processed ones after step 2 and the temperature, before min-p / top-k / top-p
// (kProcessed, the default), so every token has a finite log-probability.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "strata/engine/output.h"
#include "strata/engine/sampling_params.h"

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
};

class Sampler {
 public:
  Sampler(int64_t vocab_size, LogprobsMode mode) : vocab_(vocab_size), mode_(mode) {}
  SampleResult sample(const float* logits, const ResolvedSampling& p, const SamplerInput& in);

 private:
  void log_softmax(const std::vector<float>& x, std::vector<float>& out) const;
  void top_logprobs(const std::vector<float>& lp, int n, std::vector<TokenLogprob>& out);

  int64_t vocab_;
  LogprobsMode mode_;
  std::vector<float> x_, lp_;
  std::vector<double> probs_;
  std::vector<int32_t> order_;
  std::vector<uint8_t> seen_;
};

// A uniform double in [0, 1) from 53 bits of the generator (the same on every platform).
inline double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

}  // namespace strata
