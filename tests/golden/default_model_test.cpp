// strata's embedded default model (models/default, trained by tools/train/run_on_device.sh)
// against the fp32 transformers reference saved with it in models/default/reference/: logits
// in full and stepwise modes, the 16 greedy ids, and the tokenizer's ids for the prompt text.
// A missing model is a failure, not a skip: the default model ships with strata.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "golden_util.h"
#include "strata/core/error.h"
#include "strata/models/model.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

const std::string& default_dir() {
  static const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/default";
  return dir;
}

// Empty when everything the tests read is there, else what is missing.
std::string missing_files() {
  std::string missing;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "reference/reference.json", "reference/logits.npy"}) {
    if (!std::filesystem::exists(default_dir() + "/" + f)) missing += std::string(" ") + f;
  }
  if (missing.empty()) return "";
  return default_dir() + " lacks" + missing +
         ": the default model is made by tools/train/run_on_device.sh on the GPU machine "
         "(see tools/train/README.md)";
}

struct Reference {
  std::vector<int32_t> prompt, greedy;
  std::string prompt_text;
  Tensor logits;  // [T, vocab]
  double tolerance = 0;
};

Reference load_reference() {
  Reference r;
  const std::string ref_dir = default_dir() + "/reference";
  nlohmann::json j = read_json_file(ref_dir + "/reference.json");
  r.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  r.greedy = j.at("greedy_ids").get<std::vector<int32_t>>();
  r.prompt_text = j.value("prompt_text", "");
  r.logits = read_npy(ref_dir + "/logits.npy");
  // as the HF fixtures: max|d| <= 2e-3 * max(1, std(reference))
  const float* p = r.logits.data<float>();
  const int64_t n = r.logits.numel();
  double mean = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) mean += p[i];
  mean /= double(n);
  for (int64_t i = 0; i < n; ++i) sq += (p[i] - mean) * (p[i] - mean);
  r.tolerance = 2e-3 * std::max(1.0, std::sqrt(sq / double(n)));
  return r;
}

TEST(DefaultModel, LogitsMatchReferenceFullAndStepwise) {
  const std::string missing = missing_files();
  ASSERT_TRUE(missing.empty()) << missing;
  Reference ref = load_reference();
  auto model = load_model(default_dir());
  ASSERT_EQ(ref.logits.dim(0), int64_t(ref.prompt.size()));
  ASSERT_EQ(ref.logits.dim(1), model->info().vocab_size);
  for (const std::string mode : {"full", "stepwise"}) {
    Tensor logits = sequence_logits(*model, ref.prompt, mode);
    const double d = max_abs_diff(logits, ref.logits);
    std::printf("  default model %-8s max|d| = %.3g (tolerance %.3g)\n", mode.c_str(), d,
                ref.tolerance);
    EXPECT_LE(d, ref.tolerance) << "mode " << mode;
  }
}

// One sequence's batch: `ids` at positions [start, start + ids.size()), every row's logits.
ForwardBatch sequence_batch(const std::vector<int32_t>& ids, int32_t start, int32_t pages) {
  ForwardBatch b;
  b.token_ids = ids;
  SeqInBatch s;
  s.q_len = int32_t(ids.size());
  s.ctx_len = start;
  for (int32_t i = 0; i < pages; ++i) s.block_table.push_back(i);
  s.state_slot = 0;
  b.seqs.push_back(s);
  for (int32_t i = 0; i < int32_t(ids.size()); ++i) {
    b.positions.push_back(start + i);
    b.logit_rows.push_back(i);
  }
  return b;
}

// The multi-token-prediction head (mtp.*) against transformers' mtp_logits.npy: row t is the
// head over the main model's final-norm state at t and the token at t + 1 (reference.json's
// "mtp_logits"). Full: the prompt through the model, then the head over every row at once;
// stepwise: one main step, then one head step, position by position (both through the caches).
// The default model with its MTP head.
std::unique_ptr<Model> load_with_head() {
  LoadOptions options;
  options.mtp = true;
  return load_model(default_dir(), options);
}

TEST(DefaultModel, MtpHeadMatchesReferenceFullAndStepwise) {
  const std::string missing = missing_files();
  ASSERT_TRUE(missing.empty()) << missing;
  Reference ref = load_reference();
  auto model = load_with_head();
  ASSERT_EQ(model->info().mtp_layers, 1);
  const Tensor want = read_npy(default_dir() + "/reference/mtp_logits.npy");
  const int32_t t = int32_t(ref.prompt.size()), pages = (t + 15) / 16;
  const int64_t vocab = model->info().vocab_size, hsz = model->info().hidden_size;
  ASSERT_EQ(want.shape(), Shape({t - 1, vocab}));
  const std::vector<int32_t> next(ref.prompt.begin() + 1, ref.prompt.end());
  for (const std::string mode : {"full", "stepwise"}) {
    Caches caches = model->allocate_caches(pages, 16, 1, true);
    Tensor got = Tensor::empty({t - 1, vocab}, DType::kF32);
    Tensor logits, hidden, draft;
    if (mode == "full") {
      model->forward_with_hidden(sequence_batch(ref.prompt, 0, pages), caches, logits, hidden);
      Tensor rows = Tensor::empty({t - 1, hsz}, hidden.dtype());
      std::memcpy(rows.raw(), hidden.raw(), rows.nbytes());
      model->mtp_forward(sequence_batch(next, 0, pages), rows, caches, got);
    } else {
      for (int32_t p = 0; p + 1 < t; ++p) {
        model->forward_with_hidden(sequence_batch({ref.prompt[size_t(p)]}, p, pages), caches, logits, hidden);
        model->mtp_forward(sequence_batch({next[size_t(p)]}, p, pages), hidden, caches, draft);
        std::memcpy(got.data<float>() + int64_t(p) * vocab, draft.raw(), draft.nbytes());
      }
    }
    const double d = max_abs_diff(got, want);
    std::printf("  default model MTP head %-8s max|d| = %.3g (tolerance %.3g)\n", mode.c_str(), d, ref.tolerance);
    EXPECT_LE(d, ref.tolerance) << "mode " << mode;
  }
}

// Model::mtp_write_kv (the head's KV alone, for positions whose drafts are not wanted: dynamic
// K's deferred and prompt rows) writes the head layer's cache exactly as the head's full forward
// does, from the k and v rows of its projection alone.
TEST(DefaultModel, MtpWriteKvWritesTheHeadsForwardKv) {
  ASSERT_TRUE(missing_files().empty()) << missing_files();
  const std::vector<int32_t> prompt = load_reference().prompt;
  auto model = load_with_head();
  const int32_t t = int32_t(prompt.size()), pages = (t + 15) / 16;
  const int64_t hsz = model->info().hidden_size;
  const std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  Caches full = model->allocate_caches(pages, 16, 1, true), kv_only = model->allocate_caches(pages, 16, 1, true);
  for (Caches* c : {&full, &kv_only}) {
    Tensor logits, hidden, head_logits;
    model->forward_with_hidden(sequence_batch(prompt, 0, pages), *c, logits, hidden);
    Tensor rows = Tensor::empty({t - 1, hsz}, hidden.dtype());
    std::memcpy(rows.raw(), hidden.raw(), rows.nbytes());
    if (c == &full) {
      model->mtp_forward(sequence_batch(next, 0, pages), rows, *c, head_logits);
    } else {
      model->mtp_write_kv(sequence_batch(next, 0, pages), rows, *c);
    }
  }
  const LayerCaches &a = full.layers.back(), &b = kv_only.layers.back();
  ASSERT_EQ(a.paged.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {  // k, v: [pages, 16, kv heads, head dim]
    const int64_t row = a.paged[i].numel() / (int64_t(pages) * 16);
    bool any = false;
    for (int64_t j = 0; j < (t - 1) * row; ++j) any = any || a.paged[i].data<float>()[j] != 0.f;
    EXPECT_TRUE(any) << "the head's forward wrote no " << (i ? "v" : "k");
    EXPECT_EQ(std::memcmp(a.paged[i].raw(), b.paged[i].raw(), size_t((t - 1) * row) * sizeof(float)), 0)
        << "the head's " << (i ? "values" : "keys") << " differ at some of the " << t - 1 << " positions";
  }
}

// Loading without the head leaves it out; asking a model without one for it names the field.
TEST(DefaultModel, MtpHeadIsLoadedOnlyWhenAsked) {
  auto model = load_model(default_dir());
  EXPECT_EQ(model->info().mtp_layers, 0);
  Tensor logits, hidden;
  Caches caches = model->allocate_caches(1, 16, 1);
  EXPECT_THROW(model->forward_with_hidden(sequence_batch({5, 6}, 0, 1), caches, logits, hidden), Error);
  EXPECT_THROW(model->allocate_caches(1, 16, 1, true), Error);
}

TEST(DefaultModel, GreedyIdsMatchReference) {
  const std::string missing = missing_files();
  ASSERT_TRUE(missing.empty()) << missing;
  Reference ref = load_reference();
  auto model = load_model(default_dir());
  EXPECT_EQ(greedy_ids(*model, ref.prompt, ref.greedy.size()), ref.greedy);
}

TEST(DefaultModel, TokenizerGivesTheReferencePromptIds) {
  const std::string missing = missing_files();
  ASSERT_TRUE(missing.empty()) << missing;
  Reference ref = load_reference();
  ASSERT_FALSE(ref.prompt_text.empty()) << "reference.json has no prompt_text";
  Tokenizer tok = Tokenizer::load(default_dir());
  std::vector<int32_t> ids = tok.encode(ref.prompt_text);
  // the reference keeps at most the first 100 tokens of the text
  if (ids.size() > ref.prompt.size()) ids.resize(ref.prompt.size());
  EXPECT_EQ(ids, ref.prompt);
}

// tests/cuda/default_model_prompts.json, the CUDA comparison's prompts, holds their text and the
// tokenizer's ids (the GPU machine cannot run the tokenizer: it has no ICU).
TEST(DefaultModel, CudaComparisonPromptIdsAreTheTokenizers) {
  const Tokenizer tok = Tokenizer::load(default_dir());
  const nlohmann::json j = read_json_file(std::string(STRATA_SOURCE_DIR) + "/tests/cuda/default_model_prompts.json");
  ASSERT_EQ(j.at("prompts").size(), 32u);
  for (const auto& p : j.at("prompts")) {
    EXPECT_EQ(tok.encode(p.at("text").get<std::string>()), p.at("ids").get<std::vector<int32_t>>()) << p.at("text");
  }
}

}  // namespace
}  // namespace strata::testing
