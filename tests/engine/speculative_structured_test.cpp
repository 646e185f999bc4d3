// Structured outputs under speculative decoding (engine/spec_grammar.h): drafts follow the
// grammar, verify rows are masked by the grammar after the accepted drafts, and rejected drafts
// leave the grammar as they found it. So greedy constrained outputs with drafts are the outputs
// without, token for token and logprob for logprob (a JSON schema, a regex, a choice), one
// request at a time and batched with unconstrained requests; seeded sampling stays inside the
// grammar; n > 1 (which decodes without drafts) is unchanged.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/engine/structured_output.h"
#include "strata/grammar/json_schema.h"
#include "strata/models/model.h"
#include "strata/server/guided.h"
#include "strata/tokenizer/tokenizer.h"

#include "engine_test_util.h"

namespace strata::testing {
namespace {

std::shared_ptr<const grammar::TokenVocabulary> vocab() {
  static const auto v = [] {
    std::vector<int32_t> eos;
    for (int64_t e : default_mtp_model()->info().eos_token_ids) eos.push_back(int32_t(e));
    for (int64_t e : GenerationDefaults::load(default_model_dir()).eos_token_ids) eos.push_back(int32_t(e));
    return std::make_shared<const grammar::TokenVocabulary>(grammar::TokenVocabulary::from_tokenizer(default_tokenizer(), eos));
  }();
  return v;
}

EngineConfig config(int k) {
  EngineConfig c;
  c.model = default_model_dir();
  c.kv_cache_memory = size_t(64) << 20;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 512;
  c.log_capacity = false;
  if (k > 0) c.speculative = {"mtp", k};
  return c;
}

struct Case {
  std::string prompt;
  SamplingParams params;
};

std::shared_ptr<const StructuredOutput> json_schema() {
  return StructuredOutput::make(
      grammar::from_json_schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
                                R"("ok":{"type":"boolean"},"size":{"enum":[1,2,3]}},"required":["name","ok","size"],)"
                                R"("additionalProperties":false})"),
      vocab());
}
std::shared_ptr<const StructuredOutput> regex() {
  return StructuredOutput::make(grammar::from_regex("(red|green|blue)-[0-9]{2}"), vocab());
}
std::shared_ptr<const StructuredOutput> choice() {
  return StructuredOutput::make(
      server::choice_grammar({"The Linux kernel is free software", "Debian packages", "a file system"}), vocab());
}

SamplingParams params(std::shared_ptr<const StructuredOutput> so, int max_tokens, bool logprobs) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  if (logprobs) p.logprobs = 1;
  p.structured = std::move(so);
  return p;
}

// Constrained and unconstrained requests, greedy, some with log-probabilities (the host path of
// the verify) and some without (the path that reads only arg maxes when unconstrained).
std::vector<Case> greedy_cases() {
  return {
      {"The answer, as JSON:", params(json_schema(), 120, true)},
      {"The kernel", params(nullptr, 30, false)},
      {"Pick one:", params(regex(), 40, false)},
      {"Debian is a free operating system. It", params(nullptr, 25, true)},
      {"What is Debian? In one phrase:", params(choice(), 40, false)},
      {"A JSON object describing a package:", params(json_schema(), 120, false)},
  };
}

struct Outcome {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
};

// batched: every request added at once; otherwise one after another, each run to its end.
Outcome run(int k, const std::vector<Case>& cases, bool batched) {
  Engine engine(default_mtp_model(), config(k), GenerationDefaults::load(default_model_dir()));
  Outcome r;
  r.outputs.resize(cases.size());
  const auto drain = [&] {
    while (engine.has_unfinished()) {
      for (const RequestOutput& d : engine.step()) accumulate_output(r.outputs[std::stoul(d.request_id.substr(1))], d);
    }
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    engine.add_request("r" + std::to_string(i), default_tokenizer().encode(cases[i].prompt), cases[i].params);
    if (!batched) drain();
  }
  drain();
  r.stats = engine.stats();
  EXPECT_EQ(r.stats.cache.page_refs, 0) << "pages left referenced";
  EXPECT_EQ(r.stats.cache.free_seq_slots, r.stats.cache.seq_slots) << "state slots left taken";
  return r;
}

// A constrained completion is its grammar's whole sentence: the text is accepted, the grammar
// can end there, and the completion stopped.
void expect_in_grammar(const StructuredOutput& so, const CompletionOutput& c, const std::string& what) {
  std::string text;
  for (int32_t id : c.token_ids) {
    if (!so.is_end(id)) text += so.vocab->bytes(id);
  }
  grammar::GrammarMatcher m(so.grammar);
  EXPECT_TRUE(m.accept_token(text) && m.can_end()) << what << ": " << text;
  EXPECT_EQ(c.finish_reason, "stop") << what << ": " << text;
}

void expect_same(const Outcome& want, const Outcome& got, const std::vector<Case>& cases, const std::string& what) {
  ASSERT_EQ(want.outputs.size(), got.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    ASSERT_EQ(want.outputs[i].outputs.size(), got.outputs[i].outputs.size()) << what << ", request " << i;
    for (size_t j = 0; j < want.outputs[i].outputs.size(); ++j) {
      const CompletionOutput& w = want.outputs[i].outputs[j];
      const CompletionOutput& g = got.outputs[i].outputs[j];
      const std::string where = what + ", request " + std::to_string(i) + "." + std::to_string(j);
      EXPECT_EQ(w.token_ids, g.token_ids) << where;
      EXPECT_EQ(w.logprobs, g.logprobs) << where;
      EXPECT_EQ(w.finish_reason, g.finish_reason) << where;
      if (cases[i].params.structured) {
        expect_in_grammar(*cases[i].params.structured, w, where + " (plain)");
        expect_in_grammar(*cases[i].params.structured, g, where + " (speculative)");
      }
    }
  }
}

void print_stats(const char* what, const EngineStats& s) {
  std::printf("  %s: %lld steps, %lld verifies, %lld drafts, %lld accepted (rate %.3f), %lld rollbacks (%lld "
              "replays)\n", what, (long long)s.steps, (long long)s.spec_verifies, (long long)s.spec_draft_tokens,
              (long long)s.spec_accepted_tokens, s.spec_acceptance_rate(), (long long)s.spec_rollbacks,
              (long long)s.spec_replays);
}

TEST(SpeculativeStructured, GreedyOutputsEqualTheTargetsOneAtATime) {
  std::vector<Case> cases;
  for (const Case& c : greedy_cases()) {
    if (c.params.structured) cases.push_back(c);
  }
  const Outcome plain = run(0, cases, false);
  const Outcome spec = run(3, cases, false);
  expect_same(plain, spec, cases, "one at a time, K=3");
  print_stats("plain", plain.stats);
  print_stats("K=3", spec.stats);
  EXPECT_GT(spec.stats.spec_accepted_tokens, 0) << "no draft under a grammar was accepted";
  EXPECT_GT(spec.stats.spec_rollbacks, 0) << "no draft under a grammar was rejected: the rollback is untested";
  EXPECT_LT(spec.stats.steps, plain.stats.steps) << "speculation did not save target forwards";
}

TEST(SpeculativeStructured, GreedyOutputsEqualTheTargetsBatchedWithUnconstrained) {
  const std::vector<Case> cases = greedy_cases();
  const Outcome plain = run(0, cases, true);
  for (int k : {1, 3}) {
    const Outcome spec = run(k, cases, true);
    expect_same(plain, spec, cases, "batched, K=" + std::to_string(k));
    print_stats(k == 1 ? "K=1" : "K=3", spec.stats);
    EXPECT_GT(spec.stats.spec_accepted_tokens, 0);
  }
}

// Sampled constrained requests draft from the masked head and verify against the masked
// target: the outputs stay in the grammar, and a seed gives one output.
TEST(SpeculativeStructured, SeededSamplingStaysInTheGrammar) {
  std::vector<Case> cases;
  for (uint64_t seed : {1, 2, 3}) {
    for (auto so : {json_schema(), regex(), choice()}) {
      SamplingParams p = params(so, 150, seed == 2);
      p.temperature = 1.0;
      p.top_p = 1.0;
      p.top_k = 0;
      p.seed = seed;
      cases.push_back({"Some output:", p});
    }
  }
  const Outcome a = run(3, cases, true);
  const Outcome b = run(3, cases, true);
  EXPECT_GT(a.stats.spec_verifies, 0);
  print_stats("sampled, K=3", a.stats);
  for (size_t i = 0; i < cases.size(); ++i) {
    const CompletionOutput& c = a.outputs[i].outputs.at(0);
    expect_in_grammar(*cases[i].params.structured, c, "request " + std::to_string(i));
    EXPECT_EQ(c.token_ids, b.outputs[i].outputs.at(0).token_ids) << "request " << i << ": the seed gave two outputs";
    EXPECT_EQ(c.logprobs, b.outputs[i].outputs.at(0).logprobs) << "request " << i;
  }
}

// n > 1 decodes a token a step without drafts (draft_budget), under the batched sampler's mask:
// seeded sampled completions are those of the plain engine, beside a drafting request.
TEST(SpeculativeStructured, SeveralCompletionsAreUnchanged) {
  SamplingParams n3 = params(json_schema(), 150, true);
  n3.n = 3;
  n3.temperature = 1.0;
  n3.seed = 4;
  SamplingParams greedy_n2 = params(regex(), 40, false);
  greedy_n2.n = 2;
  const std::vector<Case> cases = {
      {"The answer, as JSON:", n3},
      {"Pick one:", greedy_n2},
      {"Pick one:", params(regex(), 40, false)},  // a single completion: it drafts
  };
  const Outcome plain = run(0, cases, true);
  const Outcome spec = run(3, cases, true);
  expect_same(plain, spec, cases, "n > 1, K=3");
  EXPECT_GT(spec.stats.spec_verifies, 0);
}

}  // namespace
}  // namespace strata::testing
