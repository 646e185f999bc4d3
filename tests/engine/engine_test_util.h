// Shared helpers of the engine tests: fixture models loaded once, small engine configs, random
// prompts, and the pool checks that every test ends with.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/models/model.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {

inline std::string engine_fixture_dir(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

inline const std::string& default_model_dir() {
  static const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/default";
  return dir;
}

// The default model with its MTP head, loaded once per test binary: engines with and without
// speculation run the same weights (forward() never reads the head).
inline std::shared_ptr<Model> default_mtp_model() {
  static std::shared_ptr<Model> m = [] {
    LoadOptions o;
    o.mtp = true;
    return std::shared_ptr<Model>(load_model(default_model_dir(), o));
  }();
  return m;
}

inline const Tokenizer& default_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(default_model_dir());
  return tok;
}

// Each fixture model is loaded once per test binary (and recurrent-state and KV dtype).
inline std::shared_ptr<Model> fixture_model(const std::string& name, DType ssm_dtype = DType::kF32,
                                            KvCacheDtype kv = KvCacheDtype::kAuto) {
  static std::map<std::tuple<std::string, DType, KvCacheDtype>, std::shared_ptr<Model>> loaded;
  auto& m = loaded[{name, ssm_dtype, kv}];
  if (!m) {
    LoadOptions o;
    o.ssm_state_dtype = ssm_dtype;
    o.kv_cache_dtype = kv;
    m = std::shared_ptr<Model>(load_model(engine_fixture_dir(name), o));
  }
  return m;
}

// The default model's engine for the speculative and state-dtype tests: small pools, prompts
// prefilled in 40-token chunks, a prefix snapshot at every page; MTP with k drafts when k > 0.
inline EngineConfig default_model_config(int k, DType ssm = DType::kF32) {
  EngineConfig c;
  c.model = default_model_dir();
  c.kv_cache_memory = size_t(64) << 20;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 40;  // prompts are prefilled in chunks
  c.max_model_len = 512;
  c.prefix_state_interval = 1;    // a snapshot at every page of prefill
  c.log_capacity = false;
  c.ssm_state_dtype = ssm;
  if (k > 0) c.speculative = {"mtp", k};
  return c;
}

inline EngineConfig test_config(const std::string& name) {
  EngineConfig c;
  c.model = engine_fixture_dir(name);
  c.kv_cache_memory = size_t(16) << 20;
  c.max_num_seqs = 48;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 1024;
  c.log_capacity = false;
  return c;
}

inline std::unique_ptr<Engine> make_engine(const std::string& name, const EngineConfig& c) {
  return std::make_unique<Engine>(fixture_model(name, c.ssm_state_dtype, c.kv_cache_dtype), c,
                                  GenerationDefaults::load(engine_fixture_dir(name)));
}

// Greedy decoding of max_tokens tokens past any EOS, with the top `logprobs` alternatives (unset:
// none asked).
inline SamplingParams greedy_params(int max_tokens, std::optional<int> logprobs = std::nullopt) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  return p;
}

inline std::vector<int32_t> random_ids(std::mt19937_64& rng, int len, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < len; ++i) ids.push_back(int32_t(3 + rng() % uint64_t(vocab - 3)));
  return ids;
}

// Runs prompts to completion on `engine`, returning whole outputs in prompt order.
inline std::vector<RequestOutput> run_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                          const SamplingParams& params, const std::string& tag = "r") {
  std::vector<RequestOutput> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine.add_request(tag + std::to_string(i), prompts[i], params);
  }
  while (engine.has_unfinished()) {
    for (const RequestOutput& d : engine.step()) {
      const size_t i = std::stoul(d.request_id.substr(tag.size()));
      accumulate_output(out[i], d);
    }
  }
  return out;
}

// Every page and state slot is back in its pool; cached pages are free and reclaimable, and
// dropping the prefix cache leaves nothing behind.
inline void expect_no_leak(Engine& engine) {
  EngineStats s = engine.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.cache.used_blocks, 0);
  EXPECT_EQ(s.cache.page_refs, 0);
  EXPECT_EQ(s.cache.free_blocks, s.cache.num_blocks);
  EXPECT_EQ(s.cache.free_seq_slots, s.cache.seq_slots);
  EXPECT_LE(s.cache.snapshots, s.cache.snapshot_slots);
  engine.clear_prefix_cache();
  s = engine.stats();
  EXPECT_EQ(s.cache.cached_blocks, 0);
  EXPECT_EQ(s.cache.snapshots, 0);
  EXPECT_EQ(s.cache.free_blocks, s.cache.num_blocks);
}

// Ids to text: "<id>" per token.
class FakeDetokenizer : public Detokenizer {
 public:
  std::string decode(const std::vector<int32_t>& ids) override {
    std::string s;
    for (int32_t id : ids) s += "<" + std::to_string(id) + ">";
    return s;
  }
};

inline void expect_same_outputs(const RequestOutput& a, const RequestOutput& b, const std::string& what) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
  for (size_t j = 0; j < a.outputs.size(); ++j) {
    EXPECT_EQ(a.outputs[j].token_ids, b.outputs[j].token_ids) << what << " completion " << j;
    EXPECT_EQ(a.outputs[j].logprobs, b.outputs[j].logprobs) << what << " completion " << j;
    EXPECT_EQ(a.outputs[j].finish_reason, b.outputs[j].finish_reason) << what;
  }
}

// The default model's three greedy-test prompts (plain English the model was trained on).
inline std::vector<std::vector<int32_t>> default_greedy_prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"The kernel", "To install a package on Debian, run apt-get install followed by the name of the "
                           "package. The", "Debian is a free operating system. It uses the Linux kernel and provides "
                           "thousands of packages that"}) {
    prompts.push_back(default_tokenizer().encode(text));
  }
  return prompts;
}

// Greedy tokens of `got` against `want` (run with top-2 logprobs), each request up to the first
// position where want's top two log-probabilities are within `tie` (where a rounding may flip
// the choice): they must be equal. Returns the tokens compared.
inline int expect_greedy_agrees_where_clear(const std::vector<RequestOutput>& want, const std::vector<RequestOutput>& got,
                                            double tie = 0.05) {
  int agreed = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const CompletionOutput& w = want[i].outputs[0];
    const CompletionOutput& g = got[i].outputs[0];
    for (size_t t = 0; t < w.token_ids.size(); ++t) {
      const auto& top = w.top_logprobs[t];
      const double margin = top.size() >= 2 ? top[0].logprob - top[1].logprob : 1e9;
      if (margin < tie) break;  // a near tie: no claim from here on
      if (t >= g.token_ids.size()) {
        ADD_FAILURE() << "prompt " << i << ": " << g.token_ids.size() << " tokens";
        break;
      }
      EXPECT_EQ(w.token_ids[t], g.token_ids[t]) << "prompt " << i << ", token " << t << " (margin " << margin << ")";
      if (w.token_ids[t] != g.token_ids[t]) break;
      ++agreed;
    }
  }
  std::printf("  greedy: %d tokens compared (clear margin) over %zu prompts\n", agreed, want.size());
  return agreed;
}

}  // namespace strata::testing
