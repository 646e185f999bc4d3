// Qwen4-Exp's multi-token-prediction head (mtp.*: vLLM's names) and speculative decoding with it,
// on the random tiny checkpoint with a one-layer head: greedy outputs are those without
// speculation, token for token and logprob for logprob (the CPU forward is batch- and
// chunk-invariant, and the rollback restores the GDN, conv, PLE conv and n-gram context slots
// and the QSA indexer's trailing keys), through chunked prefill and prefix-cache hits, with the
// random head (it accepts nothing) and an oracle drafter (whole and partial acceptances); the
// head reads the streams before the exit mixer; a checkpoint with an extra or undeclared head
// is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../engine/speculation_test_util.h"
#include "qwen4_exp_tiny_checkpoint.h"
#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/io/checkpoint.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("strata_q4mtp_" + tag + "_" + std::to_string(::getpid()) + "_" +
                                                  std::to_string(std::random_device{}()));
  fs::create_directories(p);
  return p.string();
}

TinyQwen4Exp with_head() {
  TinyQwen4Exp o;
  o.mtp = true;
  o.extra_ignored = false;
  return o;
}

class Qwen4ExpMtp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(write_tiny_qwen4_exp(temp_dir("suite"), with_head()));
    LoadOptions o;
    o.mtp = true;
    model_ = std::shared_ptr<Model>(load_model(*dir_, o));
  }
  static void TearDownTestSuite() {
    model_.reset();
    fs::remove_all(*dir_);
    delete dir_;
  }

  static EngineConfig config(int k, bool dynamic = false) {
    EngineConfig c;
    c.model = *dir_;
    c.kv_cache_memory = size_t(32) << 20;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 24;  // prompts are prefilled in chunks
    c.max_model_len = 512;
    c.prefix_state_interval = 1;
    c.log_capacity = false;
    return with_speculation(c, k, dynamic);
  }

  static std::vector<RequestOutput> run(const EngineConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                                        EngineStats* stats) {
    return run_two_rounds(model_, c, prompts, 30, stats);
  }

  static std::vector<std::vector<int32_t>> prompts() {
    std::mt19937_64 rng(9);
    std::vector<std::vector<int32_t>> p;
    for (int len : {40, 7, 65}) {
      std::vector<int32_t> ids;
      for (int i = 0; i < len; ++i) ids.push_back(int32_t(3 + rng() % 61));
      p.push_back(ids);
    }
    return p;
  }

  static std::string* dir_;
  static std::shared_ptr<Model> model_;
};

std::string* Qwen4ExpMtp::dir_ = nullptr;
std::shared_ptr<Model> Qwen4ExpMtp::model_;

TEST_F(Qwen4ExpMtp, HeadIsLoadedWithItsQsaCaches) {
  const ModelInfo& info = model_->info();
  EXPECT_EQ(info.mtp_layers, 1);
  ASSERT_EQ(info.mtp_cache.size(), 1u);
  ASSERT_EQ(info.mtp_cache[0].paged.size(), 3u);  // keys, values, the indexer's block keys
  EXPECT_EQ(info.mtp_cache[0].slots.size(), 1u);  // the indexer's trailing keys
}

TEST_F(Qwen4ExpMtp, GreedySpeculationEqualsNoSpeculation) {
  const auto p = prompts();
  EngineStats plain_stats;
  const auto plain = run(config(0), p, &plain_stats);
  for (const auto& [k, dynamic] : {std::pair{1, false}, std::pair{3, false}, std::pair{3, true}}) {
    EngineStats s;
    const std::string at = "K=" + std::to_string(k) + (dynamic ? " dynamic" : "");
    expect_same_tokens(plain, run(config(k, dynamic), p, &s), at);
    EXPECT_GT(s.prefix_hits, 0) << at;
    std::printf("  %s: %lld drafts, %lld accepted, %lld tokens replayed\n", at.c_str(), (long long)s.spec_draft_tokens,
                (long long)s.spec_accepted_tokens, (long long)s.spec_replayed_tokens);
    EXPECT_GT(s.spec_replayed_tokens, 0) << at << ": no rejection was rolled back (the test checks little)";
  }
}

TEST_F(Qwen4ExpMtp, AcceptedAndRejectedDraftsKeepTheOutputExact) {
  expect_oracle_speculation_exact(model_, [](int k) { return config(k); }, prompts(), 30);
}

TEST_F(Qwen4ExpMtp, HeadReadsTheStreamsBeforeTheExitMixer) {
  Caches caches = model_->allocate_caches(4, 16, 1, true);
  const ForwardBatch b = one_sequence_batch({5, 9, 14});
  Tensor logits, hidden;
  model_->forward_with_hidden(b, caches, logits, hidden);
  const Qwen4ExpConfig c = parse_qwen4_exp_config(Checkpoint::open_config_only(*dir_).config(), "config.json");
  EXPECT_EQ(hidden.shape(), Shape({3, c.hc * c.hidden}));
  Tensor draft, head_hidden;
  model_->mtp_forward_with_hidden(b, hidden, caches, draft, head_hidden);
  EXPECT_EQ(draft.shape(), Shape({3, c.vocab}));
  EXPECT_EQ(head_hidden.shape(), hidden.shape());
}

TEST(Qwen4ExpMtpLoad, ExtraAndUndeclaredHeadsAreNamed) {
  auto load_error = [](const TinyQwen4Exp& o) {
    const std::string dir = write_tiny_qwen4_exp(temp_dir("load"), o);
    LoadOptions lo;
    lo.mtp = true;
    std::string err;
    try {
      load_model(dir, lo);
    } catch (const Error& e) {
      err = e.what();
    }
    fs::remove_all(dir);
    return err;
  };
  TinyQwen4Exp none;
  none.extra_ignored = false;
  EXPECT_NE(load_error(none).find("mtp_num_hidden_layers"), std::string::npos);
  TinyQwen4Exp stray = none;
  stray.extra_ignored = true;  // an mtp.fc.weight (Qwen3.5's name) beside no declared head
  EXPECT_NE(load_error(stray).find("mtp_num_hidden_layers"), std::string::npos);
  TinyQwen4Exp both = with_head();
  both.extra_ignored = true;  // the head and a stray mtp.fc.weight
  EXPECT_NE(load_error(both).find("mtp.fc.weight"), std::string::npos);
  EXPECT_EQ(load_error(with_head()), "");
}

}  // namespace
}  // namespace strata::testing
