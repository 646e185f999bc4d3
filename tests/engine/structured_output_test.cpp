// Structured outputs in the engine (issue 21 phase 2): generation on the default model under
// JSON schemas, sampled at temperature 1 with several seeds and n > 1, always follows the
// schema's grammar to its end ("stop"), and the text parses as JSON. The ajv check of the same
// outputs is tests/grammar/check_outputs.mjs (ctest grammar_outputs_ajv), which runs this test
// with STRATA_STRUCTURED_OUT set to the file the outputs are written to.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/engine/llm.h"
#include "strata/engine/structured_output.h"
#include "strata/grammar/json_schema.h"
#include "strata/models/model.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

const std::string& default_dir() {
  static const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/default";
  return dir;
}

// Bounded schemas (every string, array and number has a bounded length), so that a complete
// output fits in max_tokens whatever the model samples.
const std::vector<std::string>& schemas() {
  static const std::vector<std::string> s = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"ok":{"type":"boolean"},"size":{"enum":[1,2,3]}},"required":["name","ok","size"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":"string","minLength":1,"maxLength":6},"minItems":1,"maxItems":4})",
      R"({"type":"object","properties":{"when":{"type":"string","format":"date"},"tags":{"type":"array","items":{"enum":["a","bc",null]},"maxItems":3},"child":{"anyOf":[{"type":"null"},{"type":"object","properties":{"id":{"const":7}},"required":["id"],"additionalProperties":false}]}},"required":["when","child"],"additionalProperties":false})",
  };
  return s;
}

struct Fixture {
  std::shared_ptr<Model> model;
  Tokenizer tok;
  std::shared_ptr<const grammar::TokenVocabulary> vocab;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* x = new Fixture{std::shared_ptr<Model>(load_model(default_dir())), Tokenizer::load(default_dir()), nullptr};
    std::vector<int32_t> eos;
    for (int64_t e : x->model->info().eos_token_ids) eos.push_back(int32_t(e));
    for (int64_t e : GenerationDefaults::load(default_dir()).eos_token_ids) eos.push_back(int32_t(e));
    x->vocab = std::make_shared<grammar::TokenVocabulary>(grammar::TokenVocabulary::from_tokenizer(x->tok, eos));
    return x;
  }();
  return *f;
}

EngineConfig config() {
  EngineConfig c;
  c.model = default_dir();
  c.kv_cache_memory = size_t(32) << 20;
  c.max_model_len = 1024;
  c.log_capacity = false;
  return c;
}

bool have_model() { return std::filesystem::exists(default_dir() + "/model.safetensors"); }

TEST(StructuredOutput, DefaultModelFollowsJsonSchemas) {
  if (!have_model()) GTEST_SKIP() << default_dir() << " has no model.safetensors";
  Fixture& f = fixture();
  LLM llm(f.model, config(), GenerationDefaults::load(default_dir()));
  nlohmann::json record = nlohmann::json::array();
  const std::vector<int32_t> prompt = f.tok.encode("The answer, as JSON:");
  int outputs = 0;
  for (size_t si = 0; si < schemas().size(); ++si) {
    auto so = StructuredOutput::make(grammar::from_json_schema(schemas()[si]), f.vocab);
    for (uint64_t seed : {1, 2, 3}) {
      SamplingParams p;
      p.n = 3;
      p.temperature = 1.0;
      p.top_p = 1.0;
      p.top_k = 0;
      p.seed = seed;
      p.max_tokens = 400;
      p.structured = so;
      const auto outs = llm.generate({prompt}, p);
      ASSERT_EQ(outs.size(), 1u);
      ASSERT_EQ(outs[0].outputs.size(), 3u);
      for (const CompletionOutput& c : outs[0].outputs) {
        std::string text;
        for (int32_t id : c.token_ids) {
          if (id < f.vocab->size()) text += f.vocab->bytes(id);
        }
        SCOPED_TRACE("schema " + std::to_string(si) + " seed " + std::to_string(seed) + ": " + text);
        EXPECT_EQ(c.finish_reason, "stop");
        grammar::GrammarMatcher m(so->grammar);
        EXPECT_TRUE(m.accept_token(text) && m.can_end());
        EXPECT_TRUE(nlohmann::json::accept(text));
        record.push_back({{"schema", nlohmann::json::parse(schemas()[si])}, {"text", text}});
        ++outputs;
      }
    }
  }
  EXPECT_EQ(outputs, 27);
  if (const char* path = std::getenv("STRATA_STRUCTURED_OUT")) {
    std::ofstream(path) << record.dump() << "\n";
  }
}

// Greedy and sampled draws both stay inside the grammar; a regex constraint ends exactly when
// the pattern is complete.
TEST(StructuredOutput, DefaultModelGreedyRegexAndChoice) {
  if (!have_model()) GTEST_SKIP() << default_dir() << " has no model.safetensors";
  Fixture& f = fixture();
  LLM llm(f.model, config(), GenerationDefaults::load(default_dir()));
  const std::vector<int32_t> prompt = f.tok.encode("Pick one:");
  auto so = StructuredOutput::make(grammar::from_regex("(red|green|blue)-[0-9]{2}"), f.vocab);
  for (double t : {0.0, 1.0}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 5;
    p.max_tokens = 50;
    p.structured = so;
    const auto outs = llm.generate({prompt}, p);
    std::string text;
    for (int32_t id : outs[0].outputs[0].token_ids) {
      if (id < f.vocab->size()) text += f.vocab->bytes(id);
    }
    EXPECT_EQ(outs[0].outputs[0].finish_reason, "stop");
    grammar::GrammarMatcher m(so->grammar);
    EXPECT_TRUE(m.accept_token(text) && m.is_terminated()) << text;
  }
}

TEST(StructuredOutput, RefusesIgnoreEos) {
  if (!have_model()) GTEST_SKIP() << default_dir() << " has no model.safetensors";
  Fixture& f = fixture();
  LLM llm(f.model, config(), GenerationDefaults::load(default_dir()));
  SamplingParams p;
  p.ignore_eos = true;
  p.structured = StructuredOutput::make(grammar::json_object_grammar(), f.vocab);
  try {
    llm.generate({f.tok.encode("x")}, p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ignore_eos"), std::string::npos) << e.what();
  }
}

// One mask per constrained draw (the engine's counters), and what the masks cost next to the
// decode steps (printed): a cold run fills the schema's mask cache, a warm one reuses it.
TEST(StructuredOutput, OneMaskPerDrawAndItsCost) {
  if (!have_model()) GTEST_SKIP() << default_dir() << " has no model.safetensors";
  Fixture& f = fixture();
  LLM llm(f.model, config(), GenerationDefaults::load(default_dir()));
  auto so = StructuredOutput::make(grammar::from_json_schema(schemas()[0]), f.vocab);
  const std::vector<int32_t> prompt = f.tok.encode("The answer, as JSON:");
  for (const char* run : {"cold", "warm", "plain"}) {
    SamplingParams p;
    p.n = 8;
    p.temperature = 1.0;
    p.seed = 9;
    p.max_tokens = 60;
    if (std::string(run) != "plain") p.structured = so;
    const EngineStats before = llm.engine().stats();
    const auto t0 = std::chrono::steady_clock::now();
    const auto outs = llm.generate({prompt}, p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats after = llm.engine().stats();
    int64_t drawn = 0;
    for (const auto& c : outs[0].outputs) drawn += int64_t(c.token_ids.size());
    const int64_t masks = after.grammar_masks - before.grammar_masks;
    EXPECT_EQ(masks, p.structured ? drawn : 0) << run;
    const double mask_s = after.grammar_mask_seconds - before.grammar_mask_seconds;
    const int64_t steps = after.steps - before.steps;
    std::printf("%s: %lld steps, %.2f ms/step; %lld masks, %.1f us/mask (%.1f%% of the run)\n", run,
                (long long)steps, s * 1e3 / double(steps), (long long)masks,
                masks ? mask_s * 1e6 / double(masks) : 0.0, 100.0 * mask_s / s);
  }
}

}  // namespace
}  // namespace strata::testing
