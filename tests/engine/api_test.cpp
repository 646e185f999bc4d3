// The engine's API: HF greedy ids, bad input, seeds, n > 1, stop rules, aborts, threads, and
// no leaks after mixed workloads.
#include <gtest/gtest.h>

#include <random>
#include <functional>
#include <thread>

#include "engine_test_util.h"
#include "strata/io/config.h"

namespace strata::testing {
namespace {

constexpr const char* kModel = "qwen3_5_tiny";

class EngineGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineGolden, GreedyIdsMatchHf) {
  const std::string dir = engine_fixture_dir(GetParam());
  const nlohmann::json ref = read_json_file(dir + "/reference.json");
  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  const auto expected = ref.at("greedy_ids").get<std::vector<int32_t>>();
  LLM llm(fixture_model(GetParam()), test_config(GetParam()), GenerationDefaults::load(dir));
  // Alone, and in a batch with other prompts.
  std::mt19937_64 rng(1);
  const int64_t vocab = llm.engine().model_info().vocab_size;
  const auto outs = llm.generate({random_ids(rng, 33, vocab), prompt, random_ids(rng, 70, vocab)},
                                 greedy_params(int(expected.size())));
  EXPECT_EQ(outs[1].outputs[0].token_ids, expected);
  EXPECT_EQ(llm.generate({prompt}, greedy_params(int(expected.size())))[0].outputs[0].token_ids, expected);
}

INSTANTIATE_TEST_SUITE_P(Engine, EngineGolden,
                         ::testing::Values("qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny"));

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(EngineApi, BadInputIsAClearError) {
  EngineConfig c = test_config(kModel);
  c.max_model_len = 256;
  auto engine = make_engine(kModel, c);
  const SamplingParams ok = greedy_params(4);
  expect_error([&] { engine->add_request("a", {}, ok); }, "prompt: no tokens");
  expect_error([&] { engine->add_request("a", std::vector<int32_t>(256, 5), ok); }, "context length of 256");
  expect_error([&] { engine->add_request("a", {5, 384}, ok); }, "token id 384 at position 1");
  expect_error([&] { engine->add_request("a", {5, -1}, ok); }, "outside the vocabulary");
  SamplingParams bad = ok;
  bad.max_tokens = 0;
  expect_error([&] { engine->add_request("a", {5}, bad); }, "max_tokens");
  bad = ok;
  bad.temperature = -0.5;
  expect_error([&] { engine->add_request("a", {5}, bad); }, "temperature");
  bad = ok;
  bad.top_p = 0.0;
  expect_error([&] { engine->add_request("a", {5}, bad); }, "top_p");
  bad = ok;
  bad.stop = {"x"};
  expect_error([&] { engine->add_request("a", {5}, bad); }, "detokenizer");
  engine->add_request("a", {5, 6}, ok);
  expect_error([&] { engine->add_request("a", {5}, ok); }, "already in use");
  // LLM checks every prompt before running any.
  LLM llm(fixture_model(kModel), c);
  expect_error([&] { llm.generate({{5, 6}, {}}, ok); }, "prompt 1: prompt: no tokens");
  EXPECT_FALSE(llm.engine().has_unfinished());
  // A request that could never fit in the page pool.
  EngineConfig small = c;
  small.kv_cache_memory = size_t(2 * c.max_num_seqs) * fixture_model(kModel)->info().cache.bytes_per_slot() +
                          4 * fixture_model(kModel)->info().cache.bytes_per_block(16);
  auto tiny = make_engine(kModel, small);
  expect_error([&] { tiny->add_request("b", std::vector<int32_t>(60, 5), greedy_params(20)); }, "KV pages");
  while (engine->has_unfinished()) engine->step();
  expect_no_leak(*engine);
}

TEST(EngineApi, SeedsAreReproducible) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(31);
  const auto prompt = random_ids(rng, 24, vocab);
  SamplingParams p;
  p.temperature = 1.5;  // a flat distribution so that different seeds differ quickly
  p.max_tokens = 24;
  p.ignore_eos = true;
  auto sample = [&](uint64_t seed, int n) {
    p.seed = seed;
    p.n = n;
    auto engine = make_engine(kModel, test_config(kModel));
    auto out = run_all(*engine, {prompt, random_ids(rng, 40, vocab)}, p)[0];
    expect_no_leak(*engine);
    return out;
  };
  const RequestOutput a = sample(7, 1), b = sample(7, 1), c = sample(8, 1);
  EXPECT_EQ(a.outputs[0].token_ids, b.outputs[0].token_ids);
  EXPECT_NE(a.outputs[0].token_ids, c.outputs[0].token_ids);
  // n = 3: completion 0 is the n = 1 completion of the same seed; the others differ.
  const RequestOutput m = sample(7, 3);
  ASSERT_EQ(m.outputs.size(), 3u);
  EXPECT_EQ(m.outputs[0].token_ids, a.outputs[0].token_ids);
  EXPECT_NE(m.outputs[1].token_ids, m.outputs[0].token_ids);
  EXPECT_NE(m.outputs[2].token_ids, m.outputs[1].token_ids);
  EXPECT_EQ(sample(7, 3).outputs[2].token_ids, m.outputs[2].token_ids);
}

TEST(EngineApi, CompletionsShareThePromptPages) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(32);
  const auto prompt = random_ids(rng, 53, vocab);
  SamplingParams p = greedy_params(10);
  p.n = 4;
  p.logprobs = 1;
  auto engine = make_engine(kModel, test_config(kModel));
  const RequestOutput out = run_all(*engine, {prompt}, p)[0];
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.forks, 3);
  EXPECT_EQ(st.computed_prompt_tokens, 53);  // the prompt ran once for four completions
  ASSERT_EQ(out.outputs.size(), 4u);
  for (const CompletionOutput& c : out.outputs) {
    EXPECT_EQ(c.token_ids, out.outputs[0].token_ids);  // greedy: all equal
    EXPECT_EQ(c.logprobs, out.outputs[0].logprobs);
  }
  expect_no_leak(*engine);
}

TEST(EngineApi, StopRules) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(33);
  const auto prompt = random_ids(rng, 30, vocab);
  auto engine = make_engine(kModel, test_config(kModel));
  engine->set_detokenizer(std::make_shared<FakeDetokenizer>());
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 3;
  p.max_tokens = 20;
  p.ignore_eos = true;
  const RequestOutput free_run = run_all(*engine, {prompt}, p, "free")[0];
  const std::vector<int32_t> ids = free_run.outputs[0].token_ids;
  ASSERT_EQ(ids.size(), 20u);
  EXPECT_EQ(free_run.outputs[0].finish_reason, "length");
  EXPECT_EQ(free_run.outputs[0].text, FakeDetokenizer().decode(ids));
  // A stop token: ends at its first occurrence, kept in the ids.
  SamplingParams q = p;
  q.stop_token_ids = {ids[5]};
  const size_t first = size_t(std::find(ids.begin(), ids.end(), ids[5]) - ids.begin());
  RequestOutput o = run_all(*engine, {prompt}, q, "tok")[0];
  EXPECT_EQ(o.outputs[0].token_ids, std::vector<int32_t>(ids.begin(), ids.begin() + ptrdiff_t(first) + 1));
  EXPECT_EQ(o.outputs[0].finish_reason, "stop");
  EXPECT_EQ(o.outputs[0].stop_reason, std::to_string(ids[5]));
  // A stop string spanning two tokens: the text ends before it.
  q = p;
  q.stop = {"><" + std::to_string(ids[8]) + ">"};
  o = run_all(*engine, {prompt}, q, "str")[0];
  const std::string full = FakeDetokenizer().decode(ids);
  const size_t at = full.find(q.stop[0]);
  EXPECT_EQ(o.outputs[0].text, full.substr(0, at));
  EXPECT_EQ(o.outputs[0].finish_reason, "stop");
  EXPECT_EQ(o.outputs[0].stop_reason, q.stop[0]);
  EXPECT_LE(o.outputs[0].token_ids.size(), 9u);
  // eos from the model config (2): forced by a logit bias, ignored with ignore_eos.
  q = p;
  q.ignore_eos = false;
  q.logit_bias = {{2, 100.0}};
  o = run_all(*engine, {prompt}, q, "eos")[0];
  EXPECT_EQ(o.outputs[0].token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(o.outputs[0].finish_reason, "stop");
  q.min_tokens = 3;
  o = run_all(*engine, {prompt}, q, "min")[0];
  EXPECT_EQ(o.outputs[0].token_ids.size(), 4u);
  EXPECT_EQ(o.outputs[0].token_ids.back(), 2);
  // The context length ends a request with "length".
  EngineConfig c = test_config(kModel);
  c.max_model_len = 40;
  auto short_ctx = make_engine(kModel, c);
  o = run_all(*short_ctx, {prompt}, p, "ctx")[0];
  EXPECT_EQ(o.outputs[0].token_ids.size(), 10u);
  EXPECT_EQ(o.outputs[0].finish_reason, "length");
  expect_no_leak(*engine);
  expect_no_leak(*short_ctx);
}

// Even ids are the lead byte of a two-byte character (0xC3), odd ids its continuation (0xA9):
// "é" needs two tokens, and a lone byte decodes to U+FFFD, as a lossy UTF-8 decoder does.
class SplitCharDetokenizer : public Detokenizer {
 public:
  std::string decode(const std::vector<int32_t>& ids) override {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] % 2 == 0 && i + 1 < ids.size() && ids[i + 1] % 2 == 1) {
        s += "\xC3\xA9";
        ++i;
      } else {
        s += "\xEF\xBF\xBD";
      }
    }
    return s;
  }
};

TEST(EngineApi, StreamedTextEqualsTheWholeDecode) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(36);
  auto engine = make_engine(kModel, test_config(kModel));
  auto detok = std::make_shared<SplitCharDetokenizer>();
  engine->set_detokenizer(detok);
  SamplingParams p;
  p.temperature = 1.5;
  p.max_tokens = 40;
  p.ignore_eos = true;
  p.seed = 9;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_ids(rng, 12, vocab));
  std::vector<std::string> streamed(prompts.size());
  std::vector<RequestOutput> outs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) engine->add_request(cat("s", i), prompts[i], p);
  while (engine->has_unfinished()) {
    for (const RequestOutput& d : engine->step()) {
      const size_t i = std::stoul(d.request_id.substr(1));
      accumulate_output(outs[i], d);
      for (const CompletionOutput& c : d.outputs) {
        if (!c.finished() && c.text.size() >= 3) {
          EXPECT_NE(c.text.compare(c.text.size() - 3, 3, "\xEF\xBF\xBD"), 0) << "a delta ends in U+FFFD";
        }
      }
    }
  }
  int chars = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(outs[i].outputs[0].text, detok->decode(outs[i].outputs[0].token_ids)) << i;
    for (size_t k = 0; k + 1 < outs[i].outputs[0].text.size(); ++k) chars += outs[i].outputs[0].text.compare(k, 2, "\xC3\xA9") == 0;
  }
  EXPECT_GT(chars, 5) << "the test never split a character across tokens";
  // A stop string made of a split character.
  p.stop = {"\xC3\xA9"};
  const RequestOutput o = run_all(*engine, {prompts[0]}, p, "x")[0];
  const std::string whole = detok->decode(outs[0].outputs[0].token_ids);
  EXPECT_EQ(o.outputs[0].text, whole.substr(0, whole.find("\xC3\xA9")));
  EXPECT_EQ(o.outputs[0].finish_reason, "stop");
  expect_no_leak(*engine);
}

TEST(EngineApi, AbortsAndMixedWorkloadsLeakNothing) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  std::mt19937_64 rng(34);
  EngineConfig c = test_config(kModel);
  c.max_num_seqs = 6;
  c.prefix_state_slots = 3;
  const CacheSpec& spec = fixture_model(kModel)->info().cache;
  c.kv_cache_memory = 9 * spec.bytes_per_slot() + 20 * spec.bytes_per_block(16);
  auto engine = make_engine(kModel, c);
  const auto shared = random_ids(rng, 40, vocab);
  std::map<std::string, RequestOutput> outs;
  int added = 0;
  for (int round = 0; round < 40; ++round) {
    if (round < 20) {
      SamplingParams p;
      p.temperature = round % 2 ? 0.0 : 0.8;
      p.seed = uint64_t(round);
      p.max_tokens = 1 + int(rng() % 30);
      p.n = round % 5 == 0 ? 3 : 1;
      auto prompt = round % 3 ? random_ids(rng, 5 + int(rng() % 60), vocab) : shared;
      engine->add_request(cat("m", added++), prompt, p);
    }
    if (round % 7 == 3) engine->abort(cat("m", round / 2));
    for (const RequestOutput& d : engine->step()) accumulate_output(outs[d.request_id], d);
  }
  engine->abort("no-such-request");
  while (engine->has_unfinished()) {
    for (const RequestOutput& d : engine->step()) accumulate_output(outs[d.request_id], d);
  }
  EXPECT_EQ(outs.size(), size_t(added));
  int aborted = 0;
  for (const auto& [id, o] : outs) {
    EXPECT_TRUE(o.finished) << id;
    for (const CompletionOutput& comp : o.outputs) aborted += comp.finish_reason == "abort";
  }
  const EngineStats st = engine->stats();
  std::printf("  mixed workload: %d requests, %d aborted completions, %lld preemptions, %lld forks\n",
              added, aborted, (long long)st.preemptions, (long long)st.forks);
  EXPECT_GT(aborted, 0);
  EXPECT_GT(st.preemptions, 0);
  expect_no_leak(*engine);
}

TEST(EngineApi, RequestsFromAnotherThread) {
  const int64_t vocab = fixture_model(kModel)->info().vocab_size;
  auto engine = make_engine(kModel, test_config(kModel));
  std::mt19937_64 rng(35);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i) prompts.push_back(random_ids(rng, 10 + i, vocab));
  std::atomic<int> submitted{0};
  std::thread client([&] {
    for (int i = 0; i < 16; ++i) {
      engine->add_request(cat("t", i), prompts[size_t(i)], greedy_params(5));
      ++submitted;
      std::this_thread::yield();
    }
  });
  std::map<std::string, RequestOutput> outs;
  while (submitted.load() < 16 || engine->has_unfinished()) {
    if (!engine->has_unfinished()) engine->wait_for_work(0.01);
    for (const RequestOutput& d : engine->step()) accumulate_output(outs[d.request_id], d);
  }
  EXPECT_FALSE(engine->wait_for_work(0.001));  // nothing left: times out
  client.join();
  EXPECT_EQ(outs.size(), 16u);
  // Each equals its run alone.
  for (int i = 0; i < 16; i += 5) {
    auto alone = make_engine(kModel, test_config(kModel));
    expect_same_outputs(outs[cat("t", i)], run_all(*alone, {prompts[size_t(i)]}, greedy_params(5))[0], cat("t", i));
  }
  expect_no_leak(*engine);
}

}  // namespace
}  // namespace strata::testing
