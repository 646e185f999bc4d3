// Overlapped scheduling (EngineConfig::async_scheduling) changes when outputs reach the host,
// never what they are: the same requests give bitwise the same tokens, logprobs, text and
// finish reasons as the synchronous engine, through stop tokens and strings, eos with
// min_tokens, max_tokens, the context length, n > 1, penalties, preemption and aborts.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine_test_util.h"

namespace strata::testing {
namespace {

constexpr const char* kModel = "qwen3_5_moe_tiny";

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};

// Every stop rule and sampling kind, mixed; `stop_ids` are tokens a greedy run of the prompts
// emits (so that stops really fire mid-run).
// `penalties`: some requests use them (their steps do not overlap, BatchSampler::reads_tokens).
Workload mixed_workload(int64_t vocab, const std::vector<int32_t>& stop_ids, bool penalties = true) {
  std::mt19937_64 rng(77);
  Workload w;
  for (int i = 0; i < 24; ++i) {
    SamplingParams p;
    p.max_tokens = 3 + int(rng() % 28);
    p.ignore_eos = true;
    switch (i % 8) {
      case 0: p.temperature = 0.0; break;
      case 1: p.temperature = 0.9; p.top_k = 40; p.top_p = 0.9; p.seed = uint64_t(i); break;
      case 2: p.temperature = 0.0; p.stop_token_ids = stop_ids; break;
      case 3: p.temperature = 0.0; p.stop = {"<" + std::to_string(stop_ids[0]) + ">"}; break;
      case 4: p.temperature = 0.7; p.seed = uint64_t(i); p.ignore_eos = false; p.logit_bias = {{2, 4.0}};
              p.min_tokens = 2; break;
      case 5: p.temperature = 0.8; p.seed = uint64_t(i); p.n = 3; p.logprobs = 2; break;
      case 6:
        p.temperature = 0.0;
        if (penalties) {
          p.repetition_penalty = 1.3;
          p.frequency_penalty = 0.5;
        }
        break;
      case 7: p.temperature = 0.0; p.logprobs = 3; p.max_tokens = 200; break;  // ends at max_model_len
    }
    w.params.push_back(p);
    w.prompts.push_back(random_ids(rng, 4 + int(rng() % 50), vocab));
  }
  return w;
}

std::map<std::string, RequestOutput> run(Engine& engine, const Workload& w,
                                         const std::vector<std::pair<int, std::string>>& aborts = {}) {
  std::map<std::string, RequestOutput> outs;
  for (size_t i = 0; i < w.prompts.size(); ++i) engine.add_request(cat("r", i), w.prompts[i], w.params[i]);
  int steps = 0;
  while (engine.has_unfinished()) {
    for (const auto& [at, id] : aborts) {
      if (at == steps) engine.abort(id);
    }
    for (const RequestOutput& d : engine.step()) accumulate_output(outs[d.request_id], d);
    ++steps;
  }
  return outs;
}

EngineConfig config(bool async, bool small_pool) {
  EngineConfig c = test_config(kModel);
  c.async_scheduling = async;
  c.max_model_len = 64;
  c.max_num_batched_tokens = 96;
  if (small_pool) {  // pages for far fewer tokens than the workload needs at once: preemption
    const CacheSpec& spec = fixture_model(kModel)->info().cache;
    c.max_num_seqs = 12;
    c.prefix_state_slots = 2;
    c.kv_cache_memory = 14 * spec.bytes_per_slot() + 24 * spec.bytes_per_block(16);
  }
  return c;
}

void expect_equal(const std::map<std::string, RequestOutput>& a, const std::map<std::string, RequestOutput>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [id, o] : a) {
    const RequestOutput& p = b.at(id);
    EXPECT_TRUE(o.finished && p.finished) << id;
    expect_same_outputs(o, p, id);
    for (size_t j = 0; j < o.outputs.size() && j < p.outputs.size(); ++j) {
      EXPECT_EQ(o.outputs[j].text, p.outputs[j].text) << id;
      EXPECT_EQ(o.outputs[j].stop_reason, p.outputs[j].stop_reason) << id;
      EXPECT_EQ(o.outputs[j].top_logprobs.size(), p.outputs[j].top_logprobs.size()) << id;
    }
  }
}

std::vector<int32_t> frequent_greedy_tokens(const Workload& w) {
  auto engine = make_engine(kModel, config(false, false));
  std::map<int32_t, int> count;
  for (const RequestOutput& o : run_all(*engine, w.prompts, greedy_params(12))) {
    for (int32_t t : o.outputs[0].token_ids) ++count[t];
  }
  std::vector<std::pair<int, int32_t>> by;
  for (const auto& [t, n] : count) by.push_back({-n, t});
  std::sort(by.begin(), by.end());
  return {by[0].second, by[1].second};
}

TEST(AsyncScheduling, OutputsEqualTheSynchronousEngine) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  const std::vector<int32_t> stops = frequent_greedy_tokens(mixed_workload(vocab, {0}));
  for (int variant = 0; variant < 3; ++variant) {
    const bool small_pool = variant == 1, penalties = variant < 2;
    const char* what[] = {"a large page pool", "a small page pool", "no penalties"};
    SCOPED_TRACE(what[variant]);
    const Workload w = mixed_workload(vocab, stops, penalties);
    auto sync = make_engine(kModel, config(false, small_pool));
    auto async = make_engine(kModel, config(true, small_pool));
    sync->set_detokenizer(std::make_shared<FakeDetokenizer>());
    async->set_detokenizer(std::make_shared<FakeDetokenizer>());
    const auto a = run(*sync, w), b = run(*async, w);
    expect_equal(a, b);
    const EngineStats ss = sync->stats(), as = async->stats();
    std::printf("  %s: %lld steps sync, %lld async (%lld overlapped, %lld draws dropped), preemptions %lld / %lld\n",
                what[variant], (long long)ss.steps, (long long)as.steps, (long long)as.overlapped_steps,
                (long long)as.dropped_draws, (long long)ss.preemptions, (long long)as.preemptions);
    EXPECT_EQ(ss.overlapped_steps, 0);
    EXPECT_EQ(ss.dropped_draws, 0);
    EXPECT_GT(as.overlapped_steps, 0);
    // Without penalties nearly every step overlaps the one before it.
    if (!penalties) EXPECT_GE(as.overlapped_steps, as.steps * 9 / 10);
    if (!penalties) EXPECT_GT(as.dropped_draws, 0) << "no sequence ended while its next step was in flight";
    if (small_pool) {
      EXPECT_GT(ss.preemptions, 0);
      EXPECT_GT(as.preemptions, 0);
    }
    int stopped = 0, by_string = 0;
    for (const auto& [id, o] : a) {
      for (const CompletionOutput& c : o.outputs) {
        stopped += c.finish_reason == "stop";
        by_string += !c.stop_reason.empty() && c.stop_reason[0] == '<';
      }
    }
    EXPECT_GT(stopped, 3) << "too few stops fired to test them";
    EXPECT_GT(by_string, 0) << "no stop string fired";
    expect_no_leak(*sync);
    expect_no_leak(*async);
  }
}

// An abort ends a request at once, whatever is in flight: "abort" is its finish reason, what it
// had emitted is the start of its unaborted output, and nothing leaks.
TEST(AsyncScheduling, AbortsEndRequestsWithDrawsInFlight) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  const Workload w = mixed_workload(vocab, {5, 6});
  auto whole = make_engine(kModel, config(true, false));
  whole->set_detokenizer(std::make_shared<FakeDetokenizer>());
  const auto full = run(*whole, w);
  auto engine = make_engine(kModel, config(true, false));
  engine->set_detokenizer(std::make_shared<FakeDetokenizer>());
  const std::vector<std::pair<int, std::string>> aborts = {{0, "r1"}, {3, "r5"}, {4, "r7"}, {6, "r15"}};
  const auto cut = run(*engine, w, aborts);
  for (const auto& [at, id] : aborts) {
    const CompletionOutput& c = cut.at(id).outputs[0];
    const CompletionOutput& f = full.at(id).outputs[0];
    EXPECT_TRUE(cut.at(id).finished) << id;
    EXPECT_EQ(c.finish_reason, "abort") << id;
    EXPECT_LT(c.token_ids.size(), f.token_ids.size()) << id;
    EXPECT_EQ(c.token_ids, std::vector<int32_t>(f.token_ids.begin(), f.token_ids.begin() + ptrdiff_t(c.token_ids.size())))
        << id;
  }
  for (const auto& [id, o] : cut) {
    if (id != "r1" && id != "r5" && id != "r7" && id != "r15") expect_same_outputs(o, full.at(id), id);
  }
  expect_no_leak(*engine);
}

}  // namespace
}  // namespace strata::testing
