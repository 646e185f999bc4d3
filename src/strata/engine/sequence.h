// The engine's inner view of a request: one Sequence per completion (n of them), each with its
// tokens, pages, state slot and sampling state.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/engine/block_pool.h"
#include "strata/engine/draft_length.h"
#include "strata/engine/output.h"
#include "strata/engine/sampling_params.h"
#include "strata/grammar/matcher.h"

namespace strata {

struct Request;

enum class SeqStatus {
  kWaiting,      // in the scheduler's waiting queue (new or preempted)
  kRunning,      // holds pages and a state slot
  kPendingFork,  // completion i > 0 waiting for completion 0's prompt, to share it
  kFinished,
};

struct Sequence {
  Request* request = nullptr;
  int index = 0;  // completion index within the request
  SeqStatus status = SeqStatus::kWaiting;

  std::vector<int32_t> tokens;  // prompt + generated
  int32_t prompt_len = 0;
  int32_t num_computed = 0;     // tokens whose caches are written
  // Overlapped scheduling: draws made on the device whose tokens are not in `tokens` yet, and
  // the latest one's index among its step's draws (the next step's batch feeds it there).
  int32_t pending_draws = 0;
  int32_t pending_draw = -1;
  int32_t token_limit = 0;      // prompt + max_tokens, within max_model_len
  std::vector<int32_t> block_table;

  // Prefix cache: the hash of every full page of tokens, and the cached identity of every
  // computed full page (the page a lookup of that prefix finds).
  std::vector<uint64_t> page_hashes;
  std::vector<PageId> chain;
  int32_t state_slot = -1;
  // The snapshot slot with this sequence's latest decode-boundary state, and its key.
  int32_t tail_slot = -1;
  uint64_t tail_hash = 0;
  PageId tail_page;
  int32_t branch_point = 0;  // a snapshot point where this prompt leaves the cached prefixes

  // Speculative decoding (engine_speculative.cpp): the draft tokens for positions num_tokens(),
  // num_tokens() + 1, ..., which the next step verifies, and for sampled requests each draft's
  // distribution q over the vocabulary (empty rows when greedy). Cleared when the caches go
  // back (CacheManager::free: preemption, finish).
  std::vector<int32_t> drafts;
  std::vector<std::vector<double>> draft_probs;
  DraftHistory draft_history;  // its acceptance, for "draft_length": "dynamic" (draft_length.h)
  // Dynamic draft length: the positions before num_computed's latest chunk whose head KV is not
  // written yet (steps where it drafted nothing skip the head); their target hidden states wait in
  // the engine's head_pending_ rows of its state slot, and the head covers them when it next runs
  // over the sequence. Reset when the caches go back.
  int32_t head_pending = 0;

  // Prompt logprobs (completion 0 of a request that asks for them): those computed so far, for
  // prompt tokens 1.. in order, and whether they were reported.
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  bool prompt_logprobs_reported = false;
  // Prompt positions whose logits give prompt logprobs still to compute: the prefix cache must
  // not skip them.
  bool needs_prompt_logits() const {
    return index == 0 && request_wants_prompt_logprobs &&
           int32_t(prompt_logprobs.size()) < prompt_len - 1;
  }
  bool request_wants_prompt_logprobs = false;

  // Sampling.
  std::mt19937_64 rng;
  std::unordered_map<int32_t, int32_t> output_counts;
  // Structured output: the grammar's state after the generated tokens (null without one).
  std::unique_ptr<grammar::GrammarMatcher> matcher;

  // Output not yet reported by Engine::step.
  size_t reported_tokens = 0;
  std::vector<float> new_logprobs;
  std::vector<std::vector<TokenLogprob>> new_top_logprobs;
  std::string text;  // the decoded output so far (stop strings cut it)
  // Incremental detokenization: output tokens [detok_prefix, detok_read) are the context
  // window of the next decode; tokens from detok_read on are not in `text` yet.
  int32_t detok_prefix = 0, detok_read = 0;
  size_t reported_text = 0;
  std::string finish_reason, stop_reason;
  bool finish_reported = false;

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_generated() const { return num_tokens() - prompt_len; }
  // With the pending draws: what the scheduler computes towards and a new draw counts from.
  int32_t num_tokens_drawn() const { return num_tokens() + pending_draws; }
  int32_t num_generated_drawn() const { return num_generated() + pending_draws; }
  // Its pending draws end it by length, whatever their tokens: nothing more to compute.
  bool ends_with_pending() const { return pending_draws > 0 && num_tokens_drawn() >= token_limit; }
  bool is_finished() const { return status == SeqStatus::kFinished; }
};

struct Request {
  std::string id;
  uint64_t arrival = 0;  // admission order (FCFS)
  ResolvedSampling sampling;
  RequestMetrics metrics;
  bool first_admission_done = false;
  std::vector<std::unique_ptr<Sequence>> seqs;
  bool aborted = false;
  bool finished_reported = false;
};

// FCFS order: older requests first, then completion index.
inline bool older(const Sequence* a, const Sequence* b) {
  if (a->request->arrival != b->request->arrival) return a->request->arrival < b->request->arrival;
  return a->index < b->index;
}

}  // namespace strata
