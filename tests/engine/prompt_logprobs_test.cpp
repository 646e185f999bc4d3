// SamplingParams::prompt_logprobs: every prompt token's logprob equals the log-softmax of a full
// forward's logits at the position before it, in one prefill and in chunks, past a warm prefix
// cache, next to other requests, and for n > 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine_test_util.h"
#include "strata/engine/single_sequence.h"

namespace strata::testing {
namespace {

constexpr int kTop = 3;

struct Reference {
  std::vector<float> logprobs;                      // of prompt tokens 1..
  std::vector<std::vector<int32_t>> top_ids;        // the kTop best at each position
  std::vector<std::vector<float>> top_logprobs;
};

Reference reference(Model& model, const std::vector<int32_t>& prompt) {
  const Tensor logits = sequence_logits(model, prompt, "full");
  const int64_t vocab = logits.dim(1);
  Reference ref;
  for (size_t pos = 0; pos + 1 < prompt.size(); ++pos) {
    const float* row = logits.data<float>() + pos * size_t(vocab);
    double max = row[0];
    for (int64_t v = 0; v < vocab; ++v) max = std::max(max, double(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max);
    const double log_z = max + std::log(sum);
    ref.logprobs.push_back(float(row[prompt[pos + 1]] - log_z));
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) ids[size_t(v)] = int32_t(v);
    std::partial_sort(ids.begin(), ids.begin() + kTop, ids.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    ids.resize(kTop);
    std::vector<float> lps;
    for (int32_t id : ids) lps.push_back(float(row[id] - log_z));
    ref.top_ids.push_back(ids);
    ref.top_logprobs.push_back(lps);
  }
  return ref;
}

void expect_matches(const RequestOutput& out, const Reference& ref) {
  ASSERT_EQ(out.prompt_logprobs.size(), ref.logprobs.size());
  ASSERT_EQ(out.prompt_top_logprobs.size(), ref.logprobs.size());
  for (size_t i = 0; i < ref.logprobs.size(); ++i) {
    EXPECT_NEAR(out.prompt_logprobs[i], ref.logprobs[i], 2e-3) << "prompt token " << i + 1;
    const auto& top = out.prompt_top_logprobs[i];
    ASSERT_EQ(top.size(), size_t(kTop)) << "prompt token " << i + 1;
    for (int k = 0; k < kTop; ++k) {
      EXPECT_EQ(top[size_t(k)].token_id, ref.top_ids[i][size_t(k)]) << "prompt token " << i + 1 << " rank " << k;
      EXPECT_NEAR(top[size_t(k)].logprob, ref.top_logprobs[i][size_t(k)], 2e-3);
    }
  }
}

SamplingParams prompt_logprob_params() {
  SamplingParams p = greedy_params(3);
  p.prompt_logprobs = kTop;
  return p;
}

class PromptLogprobs : public ::testing::TestWithParam<const char*> {};

TEST_P(PromptLogprobs, EqualFullForwardInOnePrefillAndInChunks) {
  std::mt19937_64 rng(7);
  Model& model = *fixture_model(GetParam());
  const std::vector<int32_t> prompt = random_ids(rng, 70, model.info().vocab_size);
  const Reference ref = reference(model, prompt);
  for (int32_t budget : {512, 16, 7}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    EngineConfig c = test_config(GetParam());
    c.max_num_batched_tokens = budget;
    auto engine = make_engine(GetParam(), c);
    const RequestOutput out = run_all(*engine, {prompt}, prompt_logprob_params())[0];
    expect_matches(out, ref);
    ASSERT_EQ(out.outputs.size(), 1u);
    EXPECT_EQ(out.outputs[0].token_ids.size(), 3u);
    expect_no_leak(*engine);
  }
}

TEST_P(PromptLogprobs, ComputeTheWholePromptPastAWarmPrefixCache) {
  std::mt19937_64 rng(8);
  Model& model = *fixture_model(GetParam());
  const std::vector<int32_t> prompt = random_ids(rng, 90, model.info().vocab_size);
  auto engine = make_engine(GetParam(), test_config(GetParam()));
  const RequestOutput plain = run_all(*engine, {prompt}, greedy_params(3), "warm")[0];
  const int64_t hits_before = engine->stats().prefix_hits;
  const RequestOutput out = run_all(*engine, {prompt}, prompt_logprob_params())[0];
  EXPECT_EQ(engine->stats().prefix_hits, hits_before);
  EXPECT_EQ(out.metrics.num_cached_tokens, 0);
  expect_matches(out, reference(model, prompt));
  EXPECT_EQ(out.outputs[0].token_ids, plain.outputs[0].token_ids);
  // A later plain request still finds the prefix cached.
  (void)run_all(*engine, {prompt}, greedy_params(1), "again");
  EXPECT_GT(engine->stats().prefix_hits, hits_before);
  expect_no_leak(*engine);
}

TEST_P(PromptLogprobs, LeaveOtherRequestsInTheBatchAlone) {
  std::mt19937_64 rng(9);
  Model& model = *fixture_model(GetParam());
  const int64_t vocab = model.info().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {random_ids(rng, 40, vocab), random_ids(rng, 25, vocab),
                                                     random_ids(rng, 33, vocab)};
  EngineConfig c = test_config(GetParam());
  c.max_num_batched_tokens = 48;
  auto alone = make_engine(GetParam(), c);
  const auto expected = run_all(*alone, prompts, greedy_params(4, 2));
  auto engine = make_engine(GetParam(), c);
  SamplingParams with = greedy_params(4, 2);
  with.prompt_logprobs = kTop;
  engine->add_request("p", prompts[1], with);
  for (size_t i = 0; i < prompts.size(); ++i) engine->add_request("r" + std::to_string(i), prompts[i], greedy_params(4, 2));
  std::vector<RequestOutput> got(prompts.size());
  RequestOutput p;
  while (engine->has_unfinished()) {
    for (const RequestOutput& d : engine->step()) {
      accumulate_output(d.request_id == "p" ? p : got[std::stoul(d.request_id.substr(1))], d);
    }
  }
  expect_matches(p, reference(model, prompts[1]));
  EXPECT_EQ(p.outputs[0].token_ids, expected[1].outputs[0].token_ids);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].outputs[0].token_ids, expected[i].outputs[0].token_ids) << i;
    EXPECT_TRUE(got[i].prompt_logprobs.empty());
  }
  expect_no_leak(*engine);
}

TEST_P(PromptLogprobs, ReportedOnceForSeveralCompletions) {
  std::mt19937_64 rng(10);
  Model& model = *fixture_model(GetParam());
  const std::vector<int32_t> prompt = random_ids(rng, 30, model.info().vocab_size);
  auto engine = make_engine(GetParam(), test_config(GetParam()));
  SamplingParams p = prompt_logprob_params();
  p.n = 3;
  engine->add_request("n", prompt, p);
  int reports = 0;
  RequestOutput whole;
  while (engine->has_unfinished()) {
    for (const RequestOutput& d : engine->step()) {
      reports += !d.prompt_logprobs.empty();
      accumulate_output(whole, d);
    }
  }
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(whole.outputs.size(), 3u);
  expect_matches(whole, reference(model, prompt));
  expect_no_leak(*engine);
}

TEST(PromptLogprobsValidation, OutOfRangeNamesTheField) {
  auto engine = make_engine("qwen3_5_tiny", test_config("qwen3_5_tiny"));
  SamplingParams p = greedy_params(1);
  p.prompt_logprobs = 21;
  try {
    engine->add_request("bad", {5, 6, 7}, p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_logprobs"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Engine, PromptLogprobs, ::testing::Values("qwen3_5_tiny", "qwen3_next_tiny"));

}  // namespace
}  // namespace strata::testing
