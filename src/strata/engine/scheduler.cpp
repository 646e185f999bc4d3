#include "strata/engine/scheduler.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

Scheduler::Scheduler(const SchedulerConfig& config, CacheManager& cache)
    : config_(config), cache_(cache) {
  STRATA_CHECK(config.max_num_seqs > 0, "--max-num-seqs must be positive, got ", config.max_num_seqs);
  STRATA_CHECK(config.max_num_batched_tokens > 0, "--max-num-batched-tokens must be positive, got ",
               config.max_num_batched_tokens);
}

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, older), seq);
}

void Scheduler::add_running(Sequence* seq) {
  seq->status = SeqStatus::kRunning;
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, older), seq);
}

void Scheduler::remove(Sequence* seq) {
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
  auto r = std::find(running_.begin(), running_.end(), seq);
  if (r != running_.end()) {
    running_.erase(r);
    cache_.free(*seq);
  }
}

void Scheduler::finish(Sequence* seq) {
  remove(seq);
  seq->status = SeqStatus::kFinished;
}

void Scheduler::preempt(Sequence* seq) {
  auto r = std::find(running_.begin(), running_.end(), seq);
  running_.erase(r);
  cache_.free(*seq);
  ++counters_.preemptions;
  ++seq->request->metrics.num_preemptions;
  add(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;
  // 1. Running sequences, oldest first; the youngest make room when pages run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    if (s->ends_with_pending()) {
      ++i;
      continue;
    }
    const int32_t from = s->num_computed;
    // Speculative decoding: a decode also computes its drafts (as many as the budget allows).
    const int32_t want = s->num_tokens_drawn() + int32_t(s->drafts.size());
    const int32_t to = cache_.cut_chunk(*s, from, std::min(want, from + budget));
    bool preempted_self = false;
    while (!cache_.can_grow(*s, to)) {
      Sequence* victim = running_.back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == s) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    cache_.grow(*s, to);
    out.chunks.push_back({s, from, to - from, to >= s->num_tokens_drawn()});
    budget -= to - from;
    ++i;
  }
  // 2. Waiting sequences, first come first served.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 && can_run_more()) {
    Sequence* s = waiting_.front();
    STRATA_CHECK(s->pending_draws == 0, "scheduler: a waiting sequence has draws in flight");
    PrefixHit hit = cache_.find_prefix(*s);
    const int32_t from = hit.tokens;
    s->branch_point = hit.branch_point;  // cut_chunk reads it
    const int32_t to = cache_.cut_chunk(*s, from, std::min(s->num_tokens(), from + budget));
    if (!cache_.admit(*s, hit, to)) break;
    waiting_.pop_front();
    s->status = SeqStatus::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, older), s);
    counters_.prefix_queries += s->num_tokens();
    counters_.prefix_hits += hit.tokens;
    Request& req = *s->request;
    if (!req.first_admission_done) {
      req.first_admission_done = true;
      req.metrics.num_cached_tokens = hit.tokens;
    }
    out.chunks.push_back({s, from, to - from, to == s->num_tokens()});
    budget -= to - from;
  }
  for (const ScheduledChunk& c : out.chunks) out.num_tokens += c.q_len;
  return out;
}

}  // namespace strata
