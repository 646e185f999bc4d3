// The sampler on hand-made logits, and the validation of sampling parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "strata/core/error.h"
#include "strata/engine/sampler.h"
#include "strata/engine/sampling_params.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 8;

ResolvedSampling resolve(const SamplingParams& p) {
  return resolve_sampling(p, GenerationDefaults{}, {7}, kVocab);
}

struct Seq {
  Seq(std::vector<int32_t> t, int32_t p) : tokens(std::move(t)), prompt_len(p) {}
  std::vector<int32_t> tokens;
  int32_t prompt_len = 0;
  std::unordered_map<int32_t, int32_t> counts;
  std::mt19937_64 rng{1};
  SamplerInput input() { return {&tokens, prompt_len, &counts, &rng}; }
};

TEST(EngineSampler, GreedyPicksTheLowestArgMax) {
  Sampler s(kVocab, LogprobsMode::kProcessed);
  SamplingParams p;
  p.temperature = 0.0;
  p.logprobs = 3;
  Seq q{{1, 2}, 2};
  const std::vector<float> logits = {0, 3, 1, 3, -1, 0, 0, 2};
  SampleResult r = s.sample(logits.data(), resolve(p), q.input());
  EXPECT_EQ(r.token, 1);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token_id, 1);
  EXPECT_EQ(r.top[1].token_id, 3);
  EXPECT_EQ(r.top[2].token_id, 7);
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  EXPECT_NEAR(r.logprob, 3 - std::log(total), 1e-5);
}

TEST(EngineSampler, PenaltiesAndBiasFollowVllm) {
  Sampler s(kVocab, LogprobsMode::kProcessed);
  SamplingParams p;
  p.temperature = 0.0;
  p.logprobs = 0;
  // Token 1: positive logit, in the prompt -> divided by 2. Token 2: negative, generated twice
  // -> multiplied by 2, then frequency 0.5 * 2 and presence 0.25.
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  p.logit_bias = {{5, 10.0}};
  Seq q{{1, 2, 2}, 1};
  q.counts = {{2, 2}};
  const std::vector<float> logits = {0, 4, -1, 0, 0, -20, 0, 0};
  SampleResult r = s.sample(logits.data(), resolve(p), q.input());
  // Processed logits: {0, 2, -2 - 1 - 0.25, 0, 0, -10, 0, 0}
  EXPECT_EQ(r.token, 1);
  std::vector<double> x = {0, 2, -3.25, 0, 0, -10, 0, 0};
  double total = 0;
  for (double v : x) total += std::exp(v);
  EXPECT_NEAR(r.logprob, 2 - std::log(total), 1e-5);
  // Raw mode reports the model's own distribution.
  Sampler raw(kVocab, LogprobsMode::kRaw);
  r = raw.sample(logits.data(), resolve(p), q.input());
  total = 0;
  for (float v : logits) total += std::exp(double(v));
  EXPECT_NEAR(r.logprob, 4 - std::log(total), 1e-5);
}

TEST(EngineSampler, MinTokensMasksEos) {
  Sampler s(kVocab, LogprobsMode::kProcessed);
  SamplingParams p;
  p.temperature = 0.0;
  p.min_tokens = 2;
  p.stop_token_ids = {6};
  Seq q{{1}, 1};
  const std::vector<float> logits = {0, 0, 0, 0, 0, 0, 9, 10};  // eos 7 and stop id 6 lead
  EXPECT_EQ(s.sample(logits.data(), resolve(p), q.input()).token, 0);
  q.tokens = {1, 0, 0};
  EXPECT_EQ(s.sample(logits.data(), resolve(p), q.input()).token, 7);
}

TEST(EngineSampler, TopKTopPMinPRestrictTheDraw) {
  Sampler s(kVocab, LogprobsMode::kProcessed);
  const std::vector<float> logits = {3, 2.5f, 2, 1, 0, -1, -2, -3};
  auto histogram = [&](const SamplingParams& p) {
    Seq q{{0}, 1};
    std::map<int32_t, int> h;
    const ResolvedSampling r = resolve(p);
    for (int i = 0; i < 400; ++i) ++h[s.sample(logits.data(), r, q.input()).token];
    return h;
  };
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  auto h = histogram(p);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
  p.top_k = 1;
  EXPECT_EQ(histogram(p), (std::map<int32_t, int>{{0, 400}}));
  p.top_k = -1;
  p.top_p = 0.5;  // p(0) = 0.46, p(1) = 0.28: the smallest set reaching 0.5 is {0, 1}
  h = histogram(p);
  EXPECT_EQ(h.size(), 2u);
  p.top_p = 1.0;
  p.min_p = 0.5;  // keeps tokens with p >= 0.5 p(0): tokens 0 and 1 (e^-0.5 = 0.61)
  h = histogram(p);
  EXPECT_EQ(h.size(), 2u);
  p.min_p = 0.0;
  p.temperature = 1.0;
  h = histogram(p);
  EXPECT_GE(h.size(), 5u);
  EXPECT_GT(h[0], h[3]);
}

TEST(EngineSampler, SameSeedSameDraws) {
  Sampler s(kVocab, LogprobsMode::kProcessed);
  const std::vector<float> logits = {1, 1, 1, 1, 1, 1, 1, 1};
  SamplingParams p;
  p.temperature = 1.0;
  const ResolvedSampling r = resolve(p);
  Seq a{{0}, 1}, b{{0}, 1}, c{{0}, 1};
  a.rng.seed(5);
  b.rng.seed(5);
  c.rng.seed(6);
  std::vector<int32_t> xa, xb, xc;
  for (int i = 0; i < 32; ++i) {
    xa.push_back(s.sample(logits.data(), r, a.input()).token);
    xb.push_back(s.sample(logits.data(), r, b.input()).token);
    xc.push_back(s.sample(logits.data(), r, c.input()).token);
  }
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

void expect_rejected(const SamplingParams& p, const std::string& field) {
  try {
    resolve(p);
    ADD_FAILURE() << "accepted a bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(EngineSampler, InvalidParamsNameTheField) {
  SamplingParams p;
  p.temperature = -1.0;
  expect_rejected(p, "temperature");
  p = {};
  p.temperature = NAN;
  expect_rejected(p, "temperature");
  p = {};
  p.top_p = 0.0;
  expect_rejected(p, "top_p");
  p.top_p = 1.5;
  expect_rejected(p, "top_p");
  p = {};
  p.top_k = -2;
  expect_rejected(p, "top_k");
  p = {};
  p.min_p = 1.5;
  expect_rejected(p, "min_p");
  p = {};
  p.n = 0;
  expect_rejected(p, "n must");
  p = {};
  p.max_tokens = 0;
  expect_rejected(p, "max_tokens");
  p = {};
  p.logprobs = 21;
  expect_rejected(p, "logprobs");
  p = {};
  p.repetition_penalty = 0.0;
  expect_rejected(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 3;
  expect_rejected(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -3;
  expect_rejected(p, "frequency_penalty");
  p = {};
  p.logit_bias = {{kVocab, 1.0}};
  expect_rejected(p, "logit_bias");
  p = {};
  p.logit_bias = {{1, 101.0}};
  expect_rejected(p, "logit_bias");
  p = {};
  p.min_tokens = 20;
  expect_rejected(p, "min_tokens");
  p = {};
  p.stop_token_ids = {-1};
  expect_rejected(p, "stop_token_ids");
  p = {};
  p.stop = {""};
  expect_rejected(p, "stop");
}

TEST(EngineSampler, DefaultsComeFromGenerationConfig) {
  GenerationDefaults d;
  d.temperature = 0.6;
  d.top_p = 0.95;
  d.top_k = 20;
  d.eos_token_ids = {5};
  SamplingParams p;
  ResolvedSampling r = resolve_sampling(p, d, {7}, kVocab);
  EXPECT_DOUBLE_EQ(r.temperature, 0.6);
  EXPECT_DOUBLE_EQ(r.top_p, 0.95);
  EXPECT_EQ(r.top_k, kVocab);  // clamped to the vocabulary
  EXPECT_EQ(r.eos_ids, (std::vector<int32_t>{5, 7}));
  p.temperature = 0.0;
  p.top_k = 0;
  p.ignore_eos = true;
  r = resolve_sampling(p, d, {7}, kVocab);
  EXPECT_TRUE(r.greedy());
  EXPECT_EQ(r.top_k, 0);
  EXPECT_TRUE(r.eos_ids.empty());
  r = resolve_sampling(SamplingParams{}, GenerationDefaults{}, {}, kVocab);
  EXPECT_DOUBLE_EQ(r.temperature, 1.0);
}

}  // namespace
}  // namespace strata
