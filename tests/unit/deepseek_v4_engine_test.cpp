// DeepSeek-V4 through the serving engine on the random tiny checkpoint: a request's tokens and
// logprobs do not depend on the rest of the batch, the prefill chunk size, prefix caching
// (a shared prefix that ends inside a 128-token compression window, pages of 16) or preemption.
// The CPU forward is batch- and chunk-invariant, so outputs must be bitwise equal.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "deepseek_v4_test_util.h"
#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/models/model.h"

using namespace strata;
using namespace strata::dsv4_testing;

namespace {

class Dsv4Engine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_checkpoint(*dir_, published_weights(21));
    model_ = std::shared_ptr<Model>(load_model(dir_->dir()));
  }
  static void TearDownTestSuite() {
    model_.reset();
    delete dir_;
  }

  static EngineConfig config() {
    EngineConfig c;
    c.model = dir_->dir();
    c.block_size = 16;
    c.kv_cache_memory = size_t(64) << 20;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 512;
    c.max_model_len = 1024;
    c.log_capacity = false;
    return c;
  }

  static std::vector<RequestOutput> run(const EngineConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<SamplingParams>& params, EngineStats* stats = nullptr) {
    Engine engine(model_, c);
    std::vector<RequestOutput> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) engine.add_request("r" + std::to_string(i), prompts[i], params[i]);
    while (engine.has_unfinished()) {
      for (const RequestOutput& d : engine.step()) accumulate_output(out[std::stoul(d.request_id.substr(1))], d);
    }
    if (stats) *stats = engine.stats();
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.cache.used_blocks, 0);
    EXPECT_EQ(s.cache.free_seq_slots, s.cache.seq_slots);
    return out;
  }

  static SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0.0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.logprobs = 2;
    return p;
  }

  static void expect_same(const RequestOutput& a, const RequestOutput& b, const std::string& what) {
    ASSERT_EQ(a.outputs.size(), 1u) << what;
    ASSERT_EQ(b.outputs.size(), 1u) << what;
    EXPECT_EQ(a.outputs[0].token_ids, b.outputs[0].token_ids) << what;
    EXPECT_EQ(a.outputs[0].logprobs, b.outputs[0].logprobs) << what;
  }

  static TempDir* dir_;
  static std::shared_ptr<Model> model_;
};

TempDir* Dsv4Engine::dir_ = nullptr;
std::shared_ptr<Model> Dsv4Engine::model_;

std::vector<int32_t> random_ids(std::mt19937_64& rng, int len) {
  std::vector<int32_t> ids;
  for (int i = 0; i < len; ++i) ids.push_back(int32_t(3 + rng() % uint64_t(kVocab - 3)));
  return ids;
}

}  // namespace

TEST_F(Dsv4Engine, OutputIgnoresTheBatchAndTheChunkSize) {
  std::mt19937_64 rng(5);
  const std::vector<int32_t> target = random_ids(rng, 150);  // one ratio-128 entry in the prompt
  const RequestOutput alone = run(config(), {target}, {greedy(12)})[0];
  ASSERT_EQ(alone.outputs[0].token_ids.size(), 12u);
  std::vector<std::vector<int32_t>> prompts = {random_ids(rng, 40), target, random_ids(rng, 131),
                                               random_ids(rng, 7)};
  std::vector<SamplingParams> params = {greedy(5), greedy(12), greedy(20), greedy(3)};
  for (int chunk : {2, 33, 512}) {
    for (bool caching : {false, true}) {
      EngineConfig c = config();
      c.max_num_batched_tokens = chunk;
      c.enable_prefix_caching = caching;
      const auto outs = run(c, prompts, params);
      expect_same(outs[1], alone, cat("chunk ", chunk, caching ? " cached" : ""));
    }
  }
}

TEST_F(Dsv4Engine, PrefixCacheHitsInsideACompressionWindow) {
  // B shares A's first 200 tokens: the hit ends inside the second 128-token window, whose first
  // pages A has already filled. A's later requests must not see B's entries and vice versa.
  std::mt19937_64 rng(6);
  const std::vector<int32_t> a = random_ids(rng, 270);
  std::vector<int32_t> b(a.begin(), a.begin() + 200);
  for (int32_t t : random_ids(rng, 60)) b.push_back(t);
  EngineConfig off = config();
  off.enable_prefix_caching = false;
  const RequestOutput a_alone = run(off, {a}, {greedy(10)})[0];
  const RequestOutput b_alone = run(off, {b}, {greedy(10)})[0];
  EngineConfig on = config();
  on.prefix_state_interval = 1;  // snapshots at every page boundary: hits can land anywhere
  EngineStats stats;
  Engine engine(model_, on);
  auto run_one = [&](const std::string& id, const std::vector<int32_t>& p) {
    RequestOutput out;
    engine.add_request(id, p, greedy(10));
    while (engine.has_unfinished()) {
      for (const RequestOutput& d : engine.step()) accumulate_output(out, d);
    }
    return out;
  };
  expect_same(run_one("a1", a), a_alone, "A first");
  expect_same(run_one("b1", b), b_alone, "B after A (prefix hit)");
  expect_same(run_one("a2", a), a_alone, "A again after B");
  stats = engine.stats();
  EXPECT_GE(stats.prefix_hits, 192) << "no prefix hit: the test did not exercise the cache";
  std::printf("  prefix hits %lld tokens, snapshots restored %lld\n", (long long)stats.prefix_hits,
              (long long)stats.snapshots_restored);
}

TEST_F(Dsv4Engine, OutputSurvivesPreemption) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_ids(rng, 60 + int(rng() % 90)));
  std::vector<SamplingParams> params(prompts.size(), greedy(30));
  std::vector<RequestOutput> alone;
  for (size_t i = 0; i < prompts.size(); ++i) alone.push_back(run(config(), {prompts[i]}, {params[i]})[0]);
  for (bool caching : {false, true}) {
    EngineConfig tight = config();
    tight.max_num_seqs = 6;
    tight.prefix_state_slots = 3;
    tight.enable_prefix_caching = caching;
    const CacheSpec& spec = model_->info().cache;
    const int slots = tight.max_num_seqs + (caching ? tight.prefix_state_slots : 0);
    tight.kv_cache_memory = size_t(slots) * spec.bytes_per_slot() + size_t(30) * spec.bytes_per_block(16);
    EngineStats stats;
    const auto outs = run(tight, prompts, params, &stats);
    EXPECT_GT(stats.preemptions, 0) << "the budget did not force preemption";
    for (size_t i = 0; i < prompts.size(); ++i) expect_same(outs[i], alone[i], cat("request ", i, caching ? " cached" : ""));
  }
}
