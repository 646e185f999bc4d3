// DeepSeek-V4's multi-token-prediction head (mtp.0.*) and speculative decoding with it, on the
// random tiny checkpoint with an MTP block added: greedy outputs are those without speculation,
// token for token and logprob for logprob (the CPU forward is batch- and chunk-invariant, and
// the rollback restores the compressors' and indexers' partial windows), through chunked
// prefill, prefix-cache hits, the ratio-4 and ratio-128 windows closing on draft tokens, fixed
// and dynamic draft lengths; the head's input at position 0 carries no token embedding; and a
// checkpoint with a missing, extra or undeclared head is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../engine/speculation_test_util.h"
#include "deepseek_v4_test_util.h"
#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/models/model.h"

using namespace strata;
using namespace strata::dsv4_testing;

namespace {

class Dsv4Mtp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    TensorMap w = published_weights(21);
    add_mtp_weights(w, 22);
    write_checkpoint(*dir_, w, config_json_with_mtp());
    LoadOptions o;
    o.mtp = true;
    model_ = std::shared_ptr<Model>(load_model(dir_->dir(), o));
  }
  static void TearDownTestSuite() {
    model_.reset();
    delete dir_;
  }

  static EngineConfig config(int k, bool dynamic = false) {
    EngineConfig c;
    c.model = dir_->dir();
    c.block_size = 16;
    c.kv_cache_memory = size_t(64) << 20;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 48;  // prompts are prefilled in chunks
    c.max_model_len = 1024;
    c.prefix_state_interval = 1;
    c.log_capacity = false;
    return strata::testing::with_speculation(c, k, dynamic);
  }

  static std::vector<RequestOutput> run(const EngineConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                                        EngineStats* stats) {
    return strata::testing::run_two_rounds(model_, c, prompts, 40, stats);
  }

  static TempDir* dir_;
  static std::shared_ptr<Model> model_;
};

std::vector<std::vector<int32_t>> random_prompts(uint64_t seed, const std::vector<int>& lens) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : lens) {
    std::vector<int32_t> ids;
    for (int i = 0; i < len; ++i) ids.push_back(int32_t(3 + rng() % uint64_t(kVocab - 3)));
    prompts.push_back(ids);
  }
  return prompts;
}

TempDir* Dsv4Mtp::dir_ = nullptr;
std::shared_ptr<Model> Dsv4Mtp::model_;

TEST_F(Dsv4Mtp, HeadIsLoadedWithItsWindowCache) {
  const ModelInfo& info = model_->info();
  EXPECT_EQ(info.mtp_layers, 1);
  ASSERT_EQ(info.mtp_cache.size(), 1u);
  ASSERT_EQ(info.mtp_cache[0].paged.size(), 1u);  // the window's keys and values only
  EXPECT_EQ(info.mtp_cache[0].paged[0].name, "kv");
  EXPECT_TRUE(info.mtp_cache[0].slots.empty());
}

// Greedy speculation is lossless: prompts longer than the 8-token window, decoding across the
// ratio-4 and ratio-128 windows' ends (positions 120 .. 340), chunked prefill and a second round
// of prefix hits, at K = 1 and 3 and with dynamic draft lengths.
TEST_F(Dsv4Mtp, GreedySpeculationEqualsNoSpeculation) {
  const auto prompts = random_prompts(5, {90, 17, 300});
  EngineStats plain_stats;
  const auto plain = run(config(0), prompts, &plain_stats);
  for (const auto& [k, dynamic] : {std::pair{1, false}, std::pair{3, false}, std::pair{3, true}}) {
    EngineStats s;
    const auto spec = run(config(k, dynamic), prompts, &s);
    const std::string at = "K=" + std::to_string(k) + (dynamic ? " dynamic" : "");
    strata::testing::expect_same_tokens(plain, spec, at);
    EXPECT_GT(s.prefix_hits, 0) << at;
    std::printf("  %s: %lld drafts verified, %lld accepted, %lld tokens replayed\n", at.c_str(),
                (long long)s.spec_draft_tokens, (long long)s.spec_accepted_tokens, (long long)s.spec_replayed_tokens);
    if (!dynamic) {
      EXPECT_GT(s.spec_draft_tokens, 0) << at;
    }
    EXPECT_GT(s.spec_replayed_tokens, 0) << at << ": no rejection was rolled back (the test checks little)";
  }
}

TEST_F(Dsv4Mtp, AcceptedAndRejectedDraftsKeepTheOutputExact) {
  strata::testing::expect_oracle_speculation_exact(model_, [](int k) { return config(k); },
                                                   random_prompts(6, {70, 140, 9}), 40);
}

// The head reads the target's pre-head streams ([T, hc_mult x hidden]); at position 0 the token's
// embedding is zeroed (vLLM's DeepSeek MTP), so that row's logits do not depend on its token.
TEST_F(Dsv4Mtp, PositionZeroCarriesNoTokenEmbedding) {
  Caches caches = model_->allocate_caches(4, 16, 1, true);
  const ForwardBatch b = strata::testing::one_sequence_batch({5, 9, 14});
  Tensor logits, hidden;
  model_->forward_with_hidden(b, caches, logits, hidden);
  EXPECT_EQ(hidden.shape(), Shape({3, kStreams * kHidden}));
  auto head = [&](std::vector<int32_t> ids) {
    Caches c = model_->allocate_caches(4, 16, 1, true);
    ForwardBatch h = b;
    h.token_ids = ids;
    Tensor out;
    model_->mtp_forward(h, hidden, c, out);
    return out;
  };
  const Tensor a = head({20, 21, 22}), other_first = head({30, 21, 22}), other_second = head({20, 31, 22});
  const int64_t v = kVocab;
  EXPECT_EQ(std::memcmp(a.data<float>(), other_first.data<float>(), v * sizeof(float)), 0)
      << "the token at position 0 reached the head";
  double d = 0;
  for (int64_t j = 0; j < v; ++j) d = std::max(d, double(std::fabs(a.data<float>()[v + j] - other_second.data<float>()[v + j])));
  EXPECT_GT(d, 0.0) << "the token at position 1 did not reach the head";
}

TEST(Dsv4MtpLoad, MissingExtraAndUndeclaredHeadsAreNamed) {
  auto load_error = [](const TensorMap& w, const std::string& config) {
    TempDir dir;
    write_checkpoint(dir, w, config);
    LoadOptions o;
    o.mtp = true;
    try {
      load_model(dir.dir(), o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TensorMap w = published_weights(3);
  EXPECT_NE(load_error(w, config_json_with_mtp()).find("no multi-token-prediction head"), std::string::npos);
  add_mtp_weights(w, 4);
  EXPECT_NE(load_error(w, config_json()).find("num_nextn_predict_layers"), std::string::npos);
  TensorMap missing = w;
  missing.erase("mtp.0.hnorm.weight");
  EXPECT_NE(load_error(missing, config_json_with_mtp()).find("mtp.0.hnorm.weight"), std::string::npos);
  TensorMap extra = w;
  extra["mtp.0.unknown.weight"] = Tensor::zeros({2}, DType::kF32);
  EXPECT_NE(load_error(extra, config_json_with_mtp()).find("mtp.0.unknown.weight"), std::string::npos);
  EXPECT_EQ(load_error(w, config_json_with_mtp()), "");
}

}  // namespace

