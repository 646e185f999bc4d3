// A request's output does not depend on what it is batched with, on the prefill chunk size,
// on preemption and resume, or on prefix caching. The CPU forward is batch- and
// chunk-invariant, so tokens and logprobs must be bitwise equal.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace strata::testing {
namespace {

constexpr const char* kModel = "qwen3_5_moe_tiny";

RequestOutput run_alone(const EngineConfig& c, const std::vector<int32_t>& prompt,
                        const SamplingParams& p) {
  auto engine = make_engine(kModel, c);
  return run_all(*engine, {prompt}, p)[0];
}

TEST(EngineInvariance, OutputIgnoresTheRestOfTheBatch) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(11);
  const std::vector<int32_t> target = random_ids(rng, 45, vocab);
  const SamplingParams params = greedy_params(12, 2);
  const EngineConfig config = test_config(kModel);
  const RequestOutput alone = run_alone(config, target, params);
  ASSERT_EQ(alone.outputs[0].token_ids.size(), 12u);
  ASSERT_EQ(alone.outputs[0].logprobs.size(), 12u);
  for (int others : {1, 7, 32}) {
    auto engine = make_engine(kModel, config);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < others; ++i) prompts.push_back(random_ids(rng, 1 + int(rng() % 90), vocab));
    prompts.insert(prompts.begin() + others / 2, target);
    // Mixed output lengths: the others finish at different steps around the target.
    std::vector<RequestOutput> outs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p = params;
      if (prompts[i] != target) p.max_tokens = 1 + int(rng() % 20);
      engine->add_request("r" + std::to_string(i), prompts[i], p);
    }
    int64_t max_batch = 0;
    while (engine->has_unfinished()) {
      for (const RequestOutput& d : engine->step()) accumulate_output(outs[std::stoul(d.request_id.substr(1))], d);
      max_batch = std::max<int64_t>(max_batch, engine->stats().running);
    }
    expect_same_outputs(outs[size_t(others / 2)], alone, cat("among ", others, " others"));
    EXPECT_GE(max_batch, std::min(others + 1, 8)) << "the requests did not share steps";
    expect_no_leak(*engine);
  }
}

TEST(EngineInvariance, OutputIgnoresTheChunkSize) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(12);
  const std::vector<int32_t> prompt = random_ids(rng, 70, vocab);
  const SamplingParams params = greedy_params(8, 2);
  EngineConfig config = test_config(kModel);
  const RequestOutput reference = run_alone(config, prompt, params);
  for (int chunk : {1, 2, 5, 16, 33, 69, 70}) {
    config.max_num_batched_tokens = chunk;
    for (bool caching : {true, false}) {
      config.enable_prefix_caching = caching;
      // Two requests, so that chunks of different sequences share steps.
      auto engine = make_engine(kModel, config);
      const auto outs = run_all(*engine, {prompt, random_ids(rng, 30, vocab)}, params);
      expect_same_outputs(outs[0], reference, cat("max_num_batched_tokens ", chunk, caching ? " cached" : ""));
      expect_no_leak(*engine);
    }
  }
}

// A budget with room for the state slots and `pages` KV pages.
size_t budget_for(const EngineConfig& c, int pages) {
  const CacheSpec& spec = fixture_model(kModel)->info().cache;
  const int snapshots = !c.enable_prefix_caching ? 0
                        : c.prefix_state_slots < 0 ? c.max_num_seqs : c.prefix_state_slots;
  const int slots = c.max_num_seqs + snapshots;
  return size_t(slots) * spec.bytes_per_slot() + size_t(pages) * spec.bytes_per_block(c.block_size);
}

TEST(EngineInvariance, OutputSurvivesPreemption) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(13);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(random_ids(rng, 20 + int(rng() % 40), vocab));
  for (bool sampled : {false, true}) {
    SamplingParams params = greedy_params(40, 2);
    if (sampled) {
      params.temperature = 0.9;
      params.top_p = 0.9;
      params.seed = 77;
    }
    EngineConfig roomy = test_config(kModel);
    std::vector<RequestOutput> alone;
    for (const auto& p : prompts) alone.push_back(run_alone(roomy, p, params));
    for (bool caching : {true, false}) {
      EngineConfig tight = roomy;
      tight.max_num_seqs = 8;
      tight.prefix_state_slots = 4;
      tight.enable_prefix_caching = caching;
      tight.kv_cache_memory = budget_for(tight, 14);  // 224 tokens for 8 requests of ~80
      auto engine = make_engine(kModel, tight);
      ASSERT_EQ(engine->memory_plan().num_blocks, 14);
      const auto outs = run_all(*engine, prompts, params);
      const EngineStats st = engine->stats();
      EXPECT_GT(st.preemptions, 0) << "the budget did not force preemption";
      for (size_t i = 0; i < prompts.size(); ++i) {
        expect_same_outputs(outs[i], alone[i], cat("request ", i, sampled ? " sampled" : " greedy",
                                                   caching ? " cached" : ""));
      }
      std::printf("  preemption (%s, prefix caching %s): %lld preemptions, %lld recomputed "
                  "tokens served from the prefix cache\n",
                  sampled ? "sampled" : "greedy", caching ? "on" : "off", (long long)st.preemptions,
                  (long long)st.prefix_hits);
      expect_no_leak(*engine);
    }
  }
}

}  // namespace
}  // namespace strata::testing
