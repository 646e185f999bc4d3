// Helpers of the speculative-decoding tests of the families without a trained head (DeepSeek-V4,
// Qwen4-Exp): engine runs of two rounds (the second hits the prefix cache), and
// OracleDrafter, a drafter that knows the answers, for models whose random
// multi-token-prediction heads accept nothing: the real model (target forwards and the caches)
// whose head forwards are replaced by an oracle built from a run without speculation. Its draft
// is the token that run had at p + 2, except at every fifth (position + token) where it is
// wrong on purpose, so that verify steps accept whole and partial draft runs and roll back the
// rest. The head's own caches are left untouched (the oracle reads none). CPU models only.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/models/model.h"

namespace strata::testing {

// `c` with greedy-lossless MTP speculation of k drafts (none for k = 0).
inline EngineConfig with_speculation(EngineConfig c, int k, bool dynamic = false) {
  if (k > 0) {
    c.speculative.method = "mtp";
    c.speculative.num_speculative_tokens = k;
    c.speculative.dynamic = dynamic;
  }
  return c;
}

// The prompts run twice through one engine, greedy with top-2 logprobs (the second round hits
// the prefix cache); the outputs in order, round by round, and the engine's stats. Every page
// and sequence slot is back at the end.
inline std::vector<RequestOutput> run_two_rounds(const std::shared_ptr<Model>& model, const EngineConfig& c,
                                                 const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                                                 EngineStats* stats) {
  Engine engine(model, c);
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  std::vector<RequestOutput> out(2 * prompts.size());
  for (size_t round = 0; round < 2; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      engine.add_request("r" + std::to_string(round * prompts.size() + i), prompts[i], p);
    }
    while (engine.has_unfinished()) {
      for (const RequestOutput& d : engine.step()) accumulate_output(out[std::stoul(d.request_id.substr(1))], d);
    }
  }
  *stats = engine.stats();
  EXPECT_EQ(stats->cache.used_blocks, 0);
  EXPECT_EQ(stats->cache.free_seq_slots, stats->cache.seq_slots);
  return out;
}

// Same tokens and logprobs, request by request.
inline void expect_same_tokens(const std::vector<RequestOutput>& want, const std::vector<RequestOutput>& got,
                               const std::string& at) {
  ASSERT_EQ(want.size(), got.size()) << at;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].outputs.size(), 1u) << at;
    EXPECT_EQ(got[i].outputs[0].token_ids, want[i].outputs[0].token_ids) << at << ", request " << i;
    EXPECT_EQ(got[i].outputs[0].logprobs, want[i].outputs[0].logprobs) << at << ", request " << i;
  }
}

// Each prompt followed by its output (the first round's): an OracleDrafter's answers.
inline std::vector<std::vector<int32_t>> prompts_with_outputs(const std::vector<std::vector<int32_t>>& prompts,
                                                              const std::vector<RequestOutput>& outputs) {
  std::vector<std::vector<int32_t>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> seq = prompts[i];
    seq.insert(seq.end(), outputs[i].outputs[0].token_ids.begin(), outputs[i].outputs[0].token_ids.end());
    seqs.push_back(seq);
  }
  return seqs;
}

class OracleDrafter final : public Model {
 public:
  // `sequences`: the run's prompts with their outputs.
  OracleDrafter(std::shared_ptr<Model> real, const std::vector<std::vector<int32_t>>& sequences)
      : real_(std::move(real)) {
    for (const auto& seq : sequences) {
      for (size_t j = 1; j + 1 < seq.size(); ++j) next_[{int32_t(j), seq[j]}] = seq[j + 1];
    }
  }
  const ModelInfo& info() const override { return real_->info(); }
  Device device() const override { return real_->device(); }
  void forward(const ForwardBatch& b, Caches& c, Tensor& logits) override { real_->forward(b, c, logits); }
  Caches allocate_caches(int num_blocks, int block_size, int num_slots) const override {
    return real_->allocate_caches(num_blocks, block_size, num_slots);
  }
  void forward_with_hidden(const ForwardBatch& b, Caches& c, Tensor& logits, Tensor& hidden) override {
    real_->forward_with_hidden(b, c, logits, hidden);
  }
  void mtp_forward(const ForwardBatch& b, const Tensor& hidden, Caches& c, Tensor& logits) override {
    Tensor unused;
    mtp_forward_with_hidden(b, hidden, c, logits, unused);
  }
  // Row i pairs the target's state at positions[i] = p with token_ids[i], the token at p + 1.
  void mtp_forward_with_hidden(const ForwardBatch& b, const Tensor& hidden, Caches&, Tensor& logits,
                               Tensor& hidden_out) override {
    const int64_t v = info().vocab_size, n = int64_t(b.logit_rows.size());
    logits = Tensor::zeros({n, v}, DType::kF32);
    for (int64_t r = 0; r < n; ++r) {
      const size_t row = size_t(b.logit_rows[size_t(r)]);
      const int32_t pos = b.positions[row] + 1, token = b.token_ids[row];
      const auto it = next_.find({pos, token});
      int32_t draft = it == next_.end() ? 3 : it->second;
      if ((pos + token) % 5 == 0) draft = 3 + (draft + 1 - 3) % int32_t(v - 3);  // wrong on purpose
      logits.data<float>()[r * v + draft] = 10.f;
    }
    hidden_out = hidden;
  }

 private:
  std::shared_ptr<Model> real_;
  std::map<std::pair<int32_t, int32_t>, int32_t> next_;
};

// Greedy outputs with an OracleDrafter in front of `model`, at K = 1 and 3 (`config(k)`), equal
// those without speculation, with most drafts accepted and some rejected after acceptances.
inline void expect_oracle_speculation_exact(const std::shared_ptr<Model>& model,
                                            const std::function<EngineConfig(int)>& config,
                                            const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  EngineStats plain_stats;
  const auto plain = run_two_rounds(model, config(0), prompts, max_tokens, &plain_stats);
  const auto oracle = std::make_shared<OracleDrafter>(model, prompts_with_outputs(prompts, plain));
  for (int k : {1, 3}) {
    EngineStats s;
    expect_same_tokens(plain, run_two_rounds(oracle, config(k), prompts, max_tokens, &s),
                       "oracle K=" + std::to_string(k));
    std::printf("  oracle K=%d: %lld drafts, %lld accepted, %lld rollbacks, %lld replays of %lld tokens\n", k,
                (long long)s.spec_draft_tokens, (long long)s.spec_accepted_tokens, (long long)s.spec_rollbacks,
                (long long)s.spec_replays, (long long)s.spec_replayed_tokens);
    EXPECT_GT(s.spec_accepted_tokens, s.spec_draft_tokens / 2) << "K=" << k << ": the oracle should mostly be right";
    EXPECT_GT(s.spec_rollbacks, 0) << "K=" << k << ": no rejection after an acceptance";
    // Without per-token states every rollback of a recurrent state is a replay.
    if (model->info().state_step_tokens == 0 && model->info().cache.bytes_per_slot() > 0) {
      EXPECT_EQ(s.spec_replays, s.spec_rollbacks) << "K=" << k;
    }
  }
}

// One fresh sequence of `ids` at positions 0.., in page 0, every row's logits.
inline ForwardBatch one_sequence_batch(const std::vector<int32_t>& ids) {
  ForwardBatch b;
  b.token_ids = ids;
  SeqInBatch s;
  s.q_start = 0;
  s.q_len = int32_t(ids.size());
  s.ctx_len = 0;
  s.state_slot = 0;
  s.block_table = {0};
  b.seqs = {s};
  for (size_t i = 0; i < ids.size(); ++i) {
    b.positions.push_back(int32_t(i));
    b.logit_rows.push_back(int32_t(i));
  }
  return b;
}

}  // namespace strata::testing
