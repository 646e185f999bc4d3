// Structured outputs on CUDA (docs/GRAMMAR.md): the engine masks its draws on the device.
// On the tiny fixture, constrained and plain requests share batches with overlapped scheduling
// on. On the trained default model, a JSON schema, a regex and a guided_choice at temperature 0
// and 1 with n = 2: every output ends with "stop" and is accepted by its grammar (the JSON
// parses). The greedy outputs are checked against the CPU, teacher forced: each CUDA output runs
// through the CPU and the CUDA model in one forward, and at every position the CPU's masked pick
// (the arg max over the tokens the grammar allows there) must be the CUDA engine's token when
// the CPU's masked top-2 margin exceeds three times that position's largest logit difference
// (twice covers two tokens moving apart in one forward; the engine's decode steps round
// differently from the one forward, by the same order, hence three), and always where the mask
// leaves one token. The CPU engine's output for the same request must
// equal the CUDA one up to the first position where the margin is unclear. The GPU machine has
// no ICU (the tokenizer's normalizer), so the vocabulary's bytes come from tokenizer.json's
// byte-level entries (checked against the tokenizer's where ICU is there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "../engine/engine_test_util.h"
#include "cuda_test_util.h"
#include "vocabulary_bytes.h"
#include "strata/engine/single_sequence.h"
#include "strata/engine/structured_output.h"
#include "strata/grammar/json_schema.h"
#include "strata/io/config.h"
#include "strata/server/guided.h"
#include "strata/tokenizer/decoder.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

const std::string kDefault = std::string(STRATA_SOURCE_DIR) + "/models/default";

std::string text_of(const grammar::TokenVocabulary& v, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (id < v.size()) s += v.bytes(id);
  }
  return s;
}

TEST(CudaStructuredOutput, TokenizerFreeVocabularyIsTheTokenizers) {
  std::optional<Tokenizer> tok;
  try {
    tok.emplace(Tokenizer::load(kDefault));
  } catch (const Error& e) {
    GTEST_SKIP() << "no tokenizer here: " << e.what();
  }
  const std::vector<std::string> bytes = vocabulary_bytes(kDefault);
  const grammar::TokenVocabulary want = grammar::TokenVocabulary::from_tokenizer(*tok, {});
  ASSERT_EQ(int32_t(bytes.size()), want.size());
  for (int32_t id = 0; id < want.size(); ++id) EXPECT_EQ(bytes[size_t(id)], want.bytes(id)) << "token " << id;
}

// The tiny fixture (random weights) with a vocabulary of one letter a token (the EOS ids none):
// "[a-c]{5}" allows the ids of a, b and c only and ends after five of them; plain requests in
// the same batches are not masked.
TEST(CudaStructuredOutput, EngineMasksOnTheDevice) {
  STRATA_REQUIRE_GPU();
  const std::string fixture = "qwen3_5_tiny";
  auto model = std::shared_ptr<Model>(load_model(engine_fixture_dir(fixture), Device::kCuda));
  Engine engine(model, test_config(fixture), GenerationDefaults::load(engine_fixture_dir(fixture)));
  const int64_t vocab = model->info().vocab_size;
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) bytes[size_t(i)] = std::string(1, char('a' + i % 26));
  for (int32_t e : engine.eos_ids()) bytes[size_t(e)] = "";  // never allowed: the grammar cannot end early
  auto so = StructuredOutput::make(
      grammar::from_regex("[a-c]{5}"), std::make_shared<grammar::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{}));
  std::map<std::string, RequestOutput> out;
  for (int i = 0; i < 8; ++i) {
    SamplingParams p;
    p.n = 2;
    p.temperature = i % 2 ? 1.0 : 0.0;
    p.seed = i;
    p.max_tokens = 12;
    if (i < 6) p.structured = so;
    p.ignore_eos = i >= 6;
    engine.add_request("r" + std::to_string(i), {5 + i, 6, 7, 8}, p);
  }
  while (engine.has_unfinished()) {
    for (const RequestOutput& d : engine.step()) accumulate_output(out[d.request_id], d);
  }
  int outside = 0;  // plain outputs' tokens outside a-c (nearly all of them)
  for (int i = 0; i < 8; ++i) {
    const RequestOutput& o = out["r" + std::to_string(i)];
    ASSERT_EQ(o.outputs.size(), 2u);
    for (const CompletionOutput& c : o.outputs) {
      if (i >= 6) {
        for (int32_t id : c.token_ids) outside += id % 26 >= 3;
        continue;
      }
      EXPECT_EQ(c.finish_reason, "stop") << "request " << i;
      ASSERT_EQ(c.token_ids.size(), 5u) << "request " << i;
      for (int32_t id : c.token_ids) EXPECT_LT(id % 26, 3) << "request " << i << " drew " << id;
    }
  }
  EXPECT_GE(outside, 24) << "of the 48 plain tokens";
  EXPECT_EQ(engine.stats().grammar_masks, 6 * 2 * 5);
}

struct Constraint {
  const char* name;
  std::shared_ptr<const StructuredOutput> so;
};

EngineConfig default_config() {
  EngineConfig c;
  c.model = kDefault;
  c.kv_cache_memory = size_t(256) << 20;
  c.max_num_seqs = 64;
  c.max_model_len = 512;
  c.log_capacity = false;
  return c;
}

std::vector<std::vector<int32_t>> default_prompts(size_t n) {
  const nlohmann::json j = read_json_file(std::string(STRATA_SOURCE_DIR) + "/tests/cuda/default_model_prompts.json");
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : j.at("prompts")) {
    if (out.size() < n) out.push_back(p.at("ids").get<std::vector<int32_t>>());
  }
  return out;
}

// Every constraint on every prompt at temperatures 0 and 1, n = 2, all in one engine run, with
// a plain request beside them; the outputs by request id.
std::map<std::string, RequestOutput> run_constrained(const std::shared_ptr<Model>& model,
                                                     const std::vector<Constraint>& cs,
                                                     const std::vector<std::vector<int32_t>>& prompts,
                                                     bool greedy_only) {
  Engine engine(model, default_config(), GenerationDefaults::load(kDefault));
  for (size_t ci = 0; ci < cs.size(); ++ci) {
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      for (int t : {0, 1}) {
        if (greedy_only && t) continue;
        SamplingParams p;
        p.n = 2;
        p.temperature = t;
        p.seed = 100 + pi;
        p.max_tokens = 200;  // the schema's longest output (escaped name characters) fits
        p.structured = cs[ci].so;
        engine.add_request(std::to_string(ci) + "/" + std::to_string(pi) + "/" + std::to_string(t), prompts[pi], p);
      }
    }
  }
  SamplingParams plain;
  plain.max_tokens = 40;
  engine.add_request("plain", prompts[0], plain);
  std::map<std::string, RequestOutput> out;
  while (engine.has_unfinished()) {
    for (const RequestOutput& d : engine.step()) accumulate_output(out[d.request_id], d);
  }
  return out;
}

// The teacher-forced check of one greedy CUDA output (see the top); counts the positions.
struct MarginCounts {
  int positions = 0, compared = 0, forced = 0, agree_with_cpu_engine = 0;
};

void check_greedy_against_cpu(Model& cpu, Model& gpu, const StructuredOutput& so, const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& got, const std::vector<int32_t>& cpu_engine,
                              const std::string& what, MarginCounts& n) {
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), got.begin(), got.end());
  ids.pop_back();  // the last token's logits are not needed
  const Tensor a = sequence_logits(cpu, ids, "full"), b = sequence_logits(gpu, ids, "full");
  const int64_t v = a.dim(1);
  grammar::GrammarMatcher m(so.grammar);
  const auto& ends = so.vocab->end_ids();
  std::vector<uint64_t> allow((size_t(v) + 63) / 64);
  bool clear_so_far = true;
  for (size_t k = 0; k < got.size(); ++k) {
    const int64_t t = int64_t(prompt.size() + k) - 1;  // the row that scores output token k
    so.fill_allowed(m, allow.size(), allow.data());
    const float *ra = a.data<float>() + t * v, *rb = b.data<float>() + t * v;
    int32_t best = -1;
    int allowed = 0;
    double err = 0;  // over the whole row: the position's error scale, however few are allowed
    for (int64_t i = 0; i < v; ++i) {
      err = std::max(err, double(std::fabs(ra[i] - rb[i])));
      if (!((allow[size_t(i >> 6)] >> (i & 63)) & 1)) continue;
      ++allowed;
      if (best < 0 || ra[i] > ra[best]) best = int32_t(i);
    }
    ASSERT_GE(best, 0) << what << ": the grammar allows nothing at output position " << k;
    float second = -INFINITY;
    for (int64_t i = 0; i < v; ++i) {
      if (i != best && ((allow[size_t(i >> 6)] >> (i & 63)) & 1)) second = std::max(second, ra[i]);
    }
    const double margin = double(ra[best]) - double(second);  // inf when one token is allowed
    ++n.positions;
    const bool clear = allowed == 1 || margin > 3 * err;
    if (clear) {
      ++n.compared;
      n.forced += allowed == 1;
      EXPECT_EQ(got[k], best) << what << ": output position " << k << ", CPU masked margin " << margin
                              << ", largest logit difference " << err << ", " << allowed << " allowed";
    }
    clear_so_far = clear_so_far && clear;
    if (clear_so_far) {
      ASSERT_LT(k, cpu_engine.size()) << what << ": the CPU engine's output is shorter";
      EXPECT_EQ(cpu_engine[k], got[k]) << what << ": the CPU engine's output differs at " << k
                                       << " before any unclear margin";
    }
    if (std::find(ends.begin(), ends.end(), got[k]) == ends.end()) {
      ASSERT_TRUE(m.accept_token(so.vocab->bytes(got[k]))) << what << ": refused token " << got[k];
    }
  }
  n.agree_with_cpu_engine += cpu_engine == got;
}

TEST(CudaStructuredOutput, DefaultModelSchemaRegexAndChoiceFollowTheCpu) {
  STRATA_REQUIRE_GPU();
  ASSERT_TRUE(std::filesystem::exists(kDefault + "/model.safetensors"))
      << kDefault << "/model.safetensors is missing (unpacked from weights.tar.xz at configure time)";
  auto cpu = std::shared_ptr<Model>(load_model(kDefault, Device::kCpu));
  auto gpu = std::shared_ptr<Model>(load_model(kDefault, Device::kCuda));
  std::vector<int32_t> eos;
  {
    Engine probe(cpu, default_config(), GenerationDefaults::load(kDefault));
    eos = probe.eos_ids();
  }
  auto vocab = std::make_shared<const grammar::TokenVocabulary>(vocabulary_bytes(kDefault), eos);
  const std::vector<std::string> choices = {"yes", "no", "maybe later", "not sure"};
  const std::vector<Constraint> cs = {
      {"schema", StructuredOutput::make(grammar::from_json_schema(
                     R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"ok":{"type":"boolean"},)"
                     R"("size":{"enum":[1,2,3]}},"required":["name","ok","size"],"additionalProperties":false})"),
                 vocab)},
      {"regex", StructuredOutput::make(grammar::from_regex("(red|green|blue)-[0-9]{2}"), vocab)},
      {"choice", StructuredOutput::make(server::choice_grammar(choices), vocab)},
  };
  const auto prompts = default_prompts(4);
  const auto got = run_constrained(gpu, cs, prompts, false);
  const auto want = run_constrained(cpu, cs, prompts, true);
  EXPECT_FALSE(got.at("plain").outputs.at(0).token_ids.empty());
  MarginCounts n;
  int outputs = 0;
  for (size_t ci = 0; ci < cs.size(); ++ci) {
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      for (int t : {0, 1}) {
        const std::string id = std::to_string(ci) + "/" + std::to_string(pi) + "/" + std::to_string(t);
        const RequestOutput& o = got.at(id);
        ASSERT_EQ(o.outputs.size(), 2u) << id;
        for (const CompletionOutput& c : o.outputs) {
          const std::string text = text_of(*vocab, c.token_ids);
          const std::string what = std::string(cs[ci].name) + " " + id + " #" + std::to_string(c.index) + ": " + text;
          ++outputs;
          EXPECT_EQ(c.finish_reason, "stop") << what;
          grammar::GrammarMatcher m(cs[ci].so->grammar);
          EXPECT_TRUE(m.accept_token(text) && m.can_end()) << what;
          if (ci == 0) EXPECT_TRUE(nlohmann::json::accept(text)) << what;
          if (ci == 2) EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << what;
          if (t == 0 && !c.token_ids.empty()) {
            const auto& cpu_out = want.at(id).outputs.at(size_t(c.index)).token_ids;
            check_greedy_against_cpu(*cpu, *gpu, *cs[ci].so, prompts[pi], c.token_ids, cpu_out, what, n);
          }
        }
      }
    }
  }
  std::printf("default model, structured on CUDA: %d outputs; greedy: %d of %d positions compared with the CPU "
              "(%d forced by the mask), %d of %d greedy outputs equal the CPU engine's\n",
              outputs, n.compared, n.positions, n.forced, n.agree_with_cpu_engine, outputs / 2);
  EXPECT_EQ(outputs, int(cs.size() * prompts.size()) * 2 * 2);
  EXPECT_GE(n.compared, n.positions / 2);  // most margins of a trained model are clear
  EXPECT_GE(n.forced, 1);                  // the schema's `{"name":"` and its keys leave one token
}

}  // namespace
}  // namespace strata::testing
