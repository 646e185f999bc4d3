// The Qwen4-Exp family against HF transformers 5.17: fp32 logits in every mode, greedy ids, the
// hashed n-gram ids of each PLE layer, and the PLE hash constants of the real config. Fixtures
// come from tools/fixtures/make_fixtures_qwen4_exp.py (run on the GPU machine); without them
// these tests fail, naming the missing folder.
#include <cstdio>
#include <filesystem>

#include "golden_util.h"
#include "strata/models/model.h"
#include "strata/models/qwen4_exp_config.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::testing {
namespace {

std::string require_fixture(const std::string& name) {
  const std::string dir = fixture_dir(name);
  if (!std::filesystem::exists(dir + "/reference.json")) {
    ADD_FAILURE() << "fixture " << dir << " is missing: run `cd tools/fixtures && python3 "
                  << "make_fixtures_qwen4_exp.py OUT_DIR` with transformers 5.17 and copy OUT_DIR/* "
                  << "into tests/fixtures/";
    return "";
  }
  return dir;
}

// Our n-gram ids for `tokens` in one step from a fresh context.
std::vector<std::vector<int64_t>> our_ngram_ids(const ops::NgramHashSpec& spec, int64_t vocab,
                                                const std::vector<int32_t>& tokens) {
  ForwardBatch b;
  b.token_ids = tokens;
  SeqInBatch s;
  s.q_len = int32_t(tokens.size());
  s.state_slot = 0;
  b.seqs.push_back(s);
  for (size_t i = 0; i < tokens.size(); ++i) b.positions.push_back(int32_t(i));
  Tensor context = Tensor::zeros({1, spec.ngram_size - 1}, DType::kI32);
  Tensor ids = Tensor::empty({int64_t(tokens.size()), spec.heads()}, DType::kI64);
  ops::ngram_ids(b, spec, vocab, context, ids);
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    out.emplace_back(ids.data<int64_t>() + i * spec.heads(), ids.data<int64_t>() + (i + 1) * spec.heads());
  }
  return out;
}

void expect_layout_matches(const NgramTableLayout& ours, const nlohmann::json& hf) {
  EXPECT_EQ(ours.hash.multipliers, hf.at("multipliers").get<std::vector<int64_t>>());
  EXPECT_EQ(ours.hash.head_vocab_sizes, hf.at("head_vocab_sizes").get<std::vector<int64_t>>());
  EXPECT_EQ(ours.hash.head_offsets, hf.at("head_offsets").get<std::vector<int64_t>>());
  EXPECT_EQ(ours.total_rows, hf.at("total_vocab_size").get<int64_t>());
  EXPECT_EQ(ours.padded_rows, hf.at("padded_rows").get<int64_t>());
}

class Qwen4ExpGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen4ExpGolden, LogitsMatchHfInEveryMode) {
  if (require_fixture(GetParam()).empty()) return;
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir);
  for (const std::string mode : {"full", "stepwise", "chunked:7", "chunked:64"}) {
    Tensor logits = sequence_logits(*model, f.prompt, mode);
    const double d = max_abs_diff(logits, f.logits);
    std::printf("  %s %-10s max|d| = %.3g (tolerance %.3g)\n", GetParam().c_str(), mode.c_str(), d,
                f.tolerance);
    EXPECT_LE(d, f.tolerance) << GetParam() << " mode " << mode;
  }
}

TEST_P(Qwen4ExpGolden, GreedyIdsMatchHf) {
  if (require_fixture(GetParam()).empty()) return;
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir);
  EXPECT_EQ(greedy_ids(*model, f.prompt, f.greedy.size()), f.greedy);
}

// Every PLE layer: HF's constants and HF's n-gram ids of the prompt (with its EOS resets).
TEST_P(Qwen4ExpGolden, NgramIdsMatchHf) {
  const std::string dir = require_fixture(GetParam());
  if (dir.empty()) return;
  const nlohmann::json ref = read_json_file(dir + "/reference.json");
  const Qwen4ExpConfig c = parse_qwen4_exp_config(read_json_file(dir + "/config.json"), dir + "/config.json");
  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  ASSERT_FALSE(ref.at("ple").empty());
  for (const nlohmann::json& layer : ref.at("ple")) {
    const int64_t idx = layer.at("layer").get<int64_t>();
    const int rank = c.ple_rank(idx);
    ASSERT_EQ(rank, layer.at("ple_layer_index").get<int>()) << "layer " << idx;
    const NgramTableLayout ours = ngram_table_layout(c, rank);
    EXPECT_EQ(ours.hash.eos, layer.at("eos_token_id").get<int64_t>());
    expect_layout_matches(ours, layer);
    EXPECT_EQ(our_ngram_ids(ours.hash, c.vocab, prompt),
              layer.at("prompt_ngram_ids").get<std::vector<std::vector<int64_t>>>())
        << "layer " << idx;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen4ExpGolden,
                         ::testing::Values("qwen4_exp_tiny", "qwen4_exp_vl_tiny"));

// The real config (Qwen4ExpTextConfig() defaults): HF's primes, offsets, multipliers and ids.
TEST(Qwen4ExpHashGolden, RealConfigConstantsMatchHf) {
  const std::string dir = require_fixture("qwen4_exp_hash");
  if (dir.empty()) return;
  const nlohmann::json ref = read_json_file(dir + "/reference.json");
  const nlohmann::json& hc = ref.at("config");
  Qwen4ExpConfig c;
  c.vocab = hc.at("vocab_size").get<int64_t>();
  c.hidden = hc.at("hidden_size").get<int64_t>();
  c.ngram_size = hc.at("ngram_size").get<int64_t>();
  c.heads_per_ngram = hc.at("heads_per_ngram").get<int64_t>();
  c.ngram_vocab_base = hc.at("ngram_vocab_size_base").get<int64_t>();
  c.ngram_vocab_divisor = hc.at("make_ngram_vocab_size_divisible_by").get<int64_t>();
  c.seed = hc.at("seed").get<int64_t>();
  c.ple_embed_dim = hc.at("ple_embed_dim").get<int64_t>();
  ASSERT_EQ(ref.at("layers").size(), 2u);
  for (const nlohmann::json& layer : ref.at("layers")) {
    const int rank = layer.at("ple_layer_index").get<int>();
    c.eos = {layer.value("eos_token_id", int64_t(0))};
    const NgramTableLayout ours = ngram_table_layout(c, rank);
    expect_layout_matches(ours, layer);
    ASSERT_TRUE(layer.contains("sample_ngram_ids")) << "the fixture lacks HF's sample ids";
    EXPECT_EQ(our_ngram_ids(ours.hash, c.vocab, layer.at("sample_token_ids").get<std::vector<int32_t>>()),
              layer.at("sample_ngram_ids").get<std::vector<std::vector<int64_t>>>())
        << "rank " << rank;
  }
}

}  // namespace
}  // namespace strata::testing
