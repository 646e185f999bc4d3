// Scheduler: continuous batching with chunked prefill, as vLLM V1.
//
// Each step has a budget of max_num_batched_tokens. Running sequences go first, oldest first:
// each catches up on its uncomputed tokens (one for a decode, a chunk for an unfinished
// prefill). When pages run out, the youngest running sequence is preempted: its pages and slot
// go back and it re-enters the waiting queue, to recompute its prompt and generated tokens
// later (prefix caching often makes that cheap). Then, if no sequence was preempted in this
// step, waiting sequences are admitted first come first served while the budget, the pages and
// max_num_seqs allow; the first one that does not fit blocks the ones behind it.
//
// With overlapped scheduling a running sequence may have a draw in flight (Sequence::
// pending_draws): it is scheduled as if that token were known (the batch feeds it from the
// device), unless the draw ends it by length.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "strata/engine/cache_manager.h"
#include "strata/engine/sequence.h"

namespace strata {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t ctx_len = 0;  // tokens already in the caches
  int32_t q_len = 0;    // tokens computed in this step
  bool samples = false;  // reaches the last token: its logits give the next token
  // Speculative decoding: a sampling chunk may run past num_tokens() over the sequence's drafts
  // (Sequence::drafts, as many as fit); each position's logits then verify the next token.
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;
  int32_t num_tokens = 0;
};

struct SchedulerCounters {
  int64_t preemptions = 0;
  int64_t prefix_queries = 0;  // tokens looked up at admission
  int64_t prefix_hits = 0;     // tokens served from the prefix cache at admission
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, CacheManager& cache);

  void add(Sequence* seq);      // to the waiting queue, in FCFS order
  void remove(Sequence* seq);   // from either queue, freeing what it holds
  // A running sequence that finished (its resources are freed).
  void finish(Sequence* seq);
  // A completion forked from a running one (already holding its pages and slot).
  void add_running(Sequence* seq);
  SchedulerOutput schedule();

  int32_t num_running() const { return int32_t(running_.size()); }
  int32_t num_waiting() const { return int32_t(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  bool can_run_more() const { return int32_t(running_.size()) < config_.max_num_seqs; }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  void preempt(Sequence* seq);

  SchedulerConfig config_;
  CacheManager& cache_;
  std::deque<Sequence*> waiting_;  // oldest first
  std::vector<Sequence*> running_; // oldest first
  SchedulerCounters counters_;
};

}  // namespace strata
