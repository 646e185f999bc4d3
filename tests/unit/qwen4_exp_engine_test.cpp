// The engine's invariants on the Qwen4-Exp fixtures (PLE n-gram context and conv state, GDN
// state, QSA pages and block-key pages, the indexer's tail slot): a request's tokens and
// logprobs do not depend on the rest of the batch, on the prefill chunk size, on preemption, or
// on a prefix-cache hit. Prompts hold EOS tokens, so the n-gram context restarts mid-prompt.
#include <gtest/gtest.h>

#include <random>

#include "../engine/engine_test_util.h"

namespace strata::testing {
namespace {

// Random ids with the first EOS id at a few places.
std::vector<int32_t> prompt_with_eos(std::mt19937_64& rng, int len, const ModelInfo& info) {
  std::vector<int32_t> ids = random_ids(rng, len, info.vocab_size);
  const int32_t eos = int32_t(info.eos_token_ids.at(0));
  for (int i = 5; i < len; i += 17 + int(rng() % 9)) ids[i] = eos;
  return ids;
}

class Qwen4ExpEngine : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& name() const { return GetParam(); }
  const ModelInfo& info() { return fixture_model(name())->info(); }
  RequestOutput run_alone(const EngineConfig& c, const std::vector<int32_t>& prompt,
                          const SamplingParams& p) {
    auto engine = make_engine(name(), c);
    return run_all(*engine, {prompt}, p)[0];
  }
};

TEST_P(Qwen4ExpEngine, OutputIgnoresTheRestOfTheBatch) {
  std::mt19937_64 rng(31);
  const std::vector<int32_t> target = prompt_with_eos(rng, 50, info());
  const SamplingParams params = greedy_params(10, 2);
  const EngineConfig config = test_config(name());
  const RequestOutput alone = run_alone(config, target, params);
  ASSERT_EQ(alone.outputs[0].token_ids.size(), 10u);
  auto engine = make_engine(name(), config);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_with_eos(rng, 1 + int(rng() % 70), info()));
  prompts.insert(prompts.begin() + 3, target);
  std::vector<RequestOutput> outs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = params;
    if (i != 3) p.max_tokens = 1 + int(rng() % 15);
    engine->add_request("r" + std::to_string(i), prompts[i], p);
  }
  int64_t max_batch = 0;
  while (engine->has_unfinished()) {
    for (const RequestOutput& d : engine->step()) accumulate_output(outs[std::stoul(d.request_id.substr(1))], d);
    max_batch = std::max<int64_t>(max_batch, engine->stats().running);
  }
  expect_same_outputs(outs[3], alone, "among 6 others");
  EXPECT_GE(max_batch, 7) << "the requests did not share steps";
  expect_no_leak(*engine);
}

TEST_P(Qwen4ExpEngine, OutputIgnoresTheChunkSize) {
  std::mt19937_64 rng(32);
  const std::vector<int32_t> prompt = prompt_with_eos(rng, 61, info());
  const SamplingParams params = greedy_params(6, 2);
  EngineConfig config = test_config(name());
  const RequestOutput reference = run_alone(config, prompt, params);
  for (int chunk : {1, 3, 7, 16, 61}) {
    config.max_num_batched_tokens = chunk;
    for (bool caching : {true, false}) {
      config.enable_prefix_caching = caching;
      auto engine = make_engine(name(), config);
      const auto outs = run_all(*engine, {prompt, prompt_with_eos(rng, 29, info())}, params);
      expect_same_outputs(outs[0], reference, cat("max_num_batched_tokens ", chunk, caching ? " cached" : ""));
      expect_no_leak(*engine);
    }
  }
}

TEST_P(Qwen4ExpEngine, OutputSurvivesPreemption) {
  std::mt19937_64 rng(33);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_with_eos(rng, 20 + int(rng() % 30), info()));
  const SamplingParams params = greedy_params(30, 2);
  EngineConfig roomy = test_config(name());
  std::vector<RequestOutput> alone;
  for (const auto& p : prompts) alone.push_back(run_alone(roomy, p, params));
  for (bool caching : {true, false}) {
    EngineConfig tight = roomy;
    tight.max_num_seqs = 6;
    tight.prefix_state_slots = 3;
    tight.enable_prefix_caching = caching;
    const CacheSpec& spec = info().cache;
    const int snapshots = caching ? tight.prefix_state_slots : 0;
    tight.kv_cache_memory = size_t(tight.max_num_seqs + snapshots) * spec.bytes_per_slot() +
                            size_t(10) * spec.bytes_per_block(tight.block_size);  // 160 tokens
    auto engine = make_engine(name(), tight);
    ASSERT_EQ(engine->memory_plan().num_blocks, 10);
    const auto outs = run_all(*engine, prompts, params);
    EXPECT_GT(engine->stats().preemptions, 0) << "the budget did not force preemption";
    for (size_t i = 0; i < prompts.size(); ++i) {
      expect_same_outputs(outs[i], alone[i], cat("request ", i, caching ? " cached" : ""));
    }
    expect_no_leak(*engine);
  }
}

TEST_P(Qwen4ExpEngine, PrefixCacheHitEqualsColdRun) {
  std::mt19937_64 rng(34);
  EngineConfig c = test_config(name());
  c.prefix_state_interval = 2;  // a state snapshot every 32 tokens of prefill
  const std::vector<int32_t> shared = prompt_with_eos(rng, 99, info());
  std::vector<int32_t> a = shared, b = shared;
  for (int32_t t : prompt_with_eos(rng, 13, info())) a.push_back(t);
  for (int32_t t : prompt_with_eos(rng, 21, info())) b.push_back(t);
  auto engine = make_engine(name(), c);
  run_all(*engine, {a}, greedy_params(5, 2), "a");
  const RequestOutput warm = run_all(*engine, {b}, greedy_params(5, 2), "b")[0];
  std::printf("  %s: %zu-token prompt, %d tokens from the prefix cache\n", name().c_str(), b.size(),
              warm.metrics.num_cached_tokens);
  EXPECT_GE(warm.metrics.num_cached_tokens, 64);
  auto cold_engine = make_engine(name(), c);
  const RequestOutput cold = run_all(*cold_engine, {b}, greedy_params(5, 2), "b")[0];
  EXPECT_EQ(cold.metrics.num_cached_tokens, 0);
  expect_same_outputs(warm, cold, "prefix hit vs cold");
  expect_no_leak(*engine);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen4ExpEngine,
                         ::testing::Values("qwen4_exp_tiny", "qwen4_exp_vl_tiny"));

}  // namespace
}  // namespace strata::testing
