// Prefix caching on a hybrid model (GDN state + attention pages): shared prefixes are served
// from cached pages and state snapshots, only the rest is computed, and the outputs equal a
// cold run.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace strata::testing {
namespace {

constexpr const char* kModel = "qwen3_next_tiny";

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

RequestOutput cold_run(const EngineConfig& c, const std::vector<int32_t>& prompt, const SamplingParams& p) {
  auto engine = make_engine(kModel, c);
  RequestOutput o = run_all(*engine, {prompt}, p)[0];
  EXPECT_EQ(o.metrics.num_cached_tokens, 0);
  return o;
}

TEST(EnginePrefixCache, SharedPrefixComputesOnlyTheSuffix) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(21);
  EngineConfig c = test_config(kModel);
  c.prefix_state_interval = 4;  // a state snapshot every 64 tokens of prefill
  const std::vector<int32_t> shared = random_ids(rng, 256, vocab);
  const auto a = concat(shared, random_ids(rng, 30, vocab));
  const auto b = concat(shared, random_ids(rng, 37, vocab));
  auto engine = make_engine(kModel, c);
  const RequestOutput out_a = run_all(*engine, {a}, greedy_params(8, 1), "a")[0];
  EXPECT_EQ(out_a.metrics.num_computed_prompt_tokens, int64_t(a.size()));
  const EngineStats before = engine->stats();
  const RequestOutput out_b = run_all(*engine, {b}, greedy_params(8, 1), "b")[0];
  const EngineStats after = engine->stats();
  std::printf("  shared 256 of %zu: cached %d, computed %lld prompt tokens\n", b.size(),
              out_b.metrics.num_cached_tokens, (long long)out_b.metrics.num_computed_prompt_tokens);
  EXPECT_EQ(out_b.metrics.num_cached_tokens, 256);
  EXPECT_EQ(out_b.metrics.num_computed_prompt_tokens, 37);
  EXPECT_EQ(after.computed_prompt_tokens - before.computed_prompt_tokens, 37);
  EXPECT_EQ(after.prefix_hits - before.prefix_hits, 256);
  EXPECT_EQ(after.snapshots_restored - before.snapshots_restored, 1);
  expect_same_outputs(out_b, cold_run(c, b, greedy_params(8, 1)), "prefix hit vs cold");
  expect_no_leak(*engine);
}

TEST(EnginePrefixCache, BranchPointSnapshotServesTheNextRequest) {
  // A shared prefix of 230 tokens: not on an interval snapshot. The second request resumes
  // from the last interval snapshot (192) and leaves a snapshot at the branch (224, the last
  // shared full page); the third resumes there.
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(22);
  EngineConfig c = test_config(kModel);
  c.prefix_state_interval = 4;
  const std::vector<int32_t> shared = random_ids(rng, 230, vocab);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {30, 37, 41}) prompts.push_back(concat(shared, random_ids(rng, len, vocab)));
  auto engine = make_engine(kModel, c);
  std::vector<RequestOutput> outs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    outs.push_back(run_all(*engine, {prompts[i]}, greedy_params(6, 1), cat("q", i, "-"))[0]);
  }
  EXPECT_EQ(outs[0].metrics.num_cached_tokens, 0);
  EXPECT_EQ(outs[1].metrics.num_cached_tokens, 192);
  EXPECT_EQ(outs[1].metrics.num_computed_prompt_tokens, int64_t(prompts[1].size()) - 192);
  EXPECT_EQ(outs[2].metrics.num_cached_tokens, 224);
  EXPECT_EQ(outs[2].metrics.num_computed_prompt_tokens, int64_t(prompts[2].size()) - 224);
  for (size_t i = 1; i < prompts.size(); ++i) {
    expect_same_outputs(outs[i], cold_run(c, prompts[i], greedy_params(6, 1)), cat("request ", i));
  }
  // A repeated prompt recomputes only what follows the last page boundary before its end.
  const RequestOutput again = run_all(*engine, {prompts[2]}, greedy_params(6, 1), "again")[0];
  EXPECT_EQ(again.metrics.num_cached_tokens, int32_t((prompts[2].size() - 1) / 16 * 16));
  expect_same_outputs(again, outs[2], "repeat");
  expect_no_leak(*engine);
}

TEST(EnginePrefixCache, MultiTurnChatHitsTheWholeHistory) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(23);
  const EngineConfig c = test_config(kModel);
  auto engine = make_engine(kModel, c);
  std::vector<int32_t> prompt = random_ids(rng, 200, vocab);
  RequestOutput last;
  for (int turn = 0; turn < 6; ++turn) {
    const RequestOutput out = run_all(*engine, {prompt}, greedy_params(24, 1), cat("turn", turn, "-"))[0];
    if (turn > 0) {
      const size_t shared = last.metrics.num_prompt_tokens + last.outputs[0].token_ids.size();
      const double rate = double(out.metrics.num_cached_tokens) / double(shared);
      std::printf("  turn %d: prompt %zu, shared %zu, cached %d (%.1f%%), computed %lld\n", turn,
                  prompt.size(), shared, out.metrics.num_cached_tokens, 100 * rate,
                  (long long)out.metrics.num_computed_prompt_tokens);
      EXPECT_GE(rate, 0.9) << "turn " << turn;
      EXPECT_EQ(out.metrics.num_computed_prompt_tokens,
                int64_t(prompt.size()) - out.metrics.num_cached_tokens);
    }
    last = out;
    prompt = concat(concat(prompt, out.outputs[0].token_ids), random_ids(rng, 20, vocab));
  }
  // The last turn's answer equals a cold run of the same conversation.
  std::vector<int32_t> last_prompt(prompt.begin(), prompt.end() - 20 - 24);
  expect_same_outputs(last, cold_run(c, last_prompt, greedy_params(24, 1)), "last turn vs cold");
  expect_no_leak(*engine);
}

TEST(EnginePrefixCache, DisabledCachingComputesEverything) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(24);
  EngineConfig c = test_config(kModel);
  c.enable_prefix_caching = false;
  auto engine = make_engine(kModel, c);
  const auto p = random_ids(rng, 100, vocab);
  run_all(*engine, {p}, greedy_params(4, 1), "x");
  const RequestOutput again = run_all(*engine, {p}, greedy_params(4, 1), "y")[0];
  EXPECT_EQ(again.metrics.num_cached_tokens, 0);
  EXPECT_EQ(again.metrics.num_computed_prompt_tokens, 100);
  EXPECT_EQ(engine->stats().cache.snapshot_slots, 0);
  expect_no_leak(*engine);
}

}  // namespace
}  // namespace strata::testing
