// The greedy draft chain: a speculative step's acceptance, rollback and next drafts queued on the
// model's device behind the verify, with one read back at the end (engine_speculative.cpp does
// the same on the host, one read back per draft depth plus the verify's).
//
// A step takes it when every sequence of the batch verifies the same number k of drafts with
// stored per-token states, is greedy with nothing that changes its logits (verified_on_device, no
// grammar), and has room for K more drafts after keeping all of these. Then, on the device:
//   1. the target's picks t = argmax of each verify row, and a = the drafts accepted (the longest
//      prefix with d(j + 1) == t(j));
//   2. the recurrent state after the last kept token copied into each sequence's slot (a < K);
//   3. the head over all K + 1 positions of the verify, fed t: row j pairs the target's hidden
//      state at ctx + j with t(j), the token at ctx + j + 1 wherever j <= a (rows past a write head
//      KV that later steps overwrite before any query reads it); its logits only of row a
//      (ForwardBatch::pick), whose arg max is the first draft, and row a's hidden state feeds
//      the next depth;
//   4. depths 2..K, one token a sequence at position ctx + a + depth - 1: the host's batch says
//      ctx + depth - 1 and the device adds a (ForwardBatch::shift), the token fed from the
//      previous depth's arg max.
// Then a, t and the drafts come back in one copy, and verify_drafts emits the tokens through the
// stop rules as the host path does (it checks that it accepts a drafts too). Each sequence keeps
// as many of the K drafts as the host path would make (wanted_drafts: K, or under dynamic K the
// policy's choice after this step's acceptance; draft_budget), so the chain changes no batch. chain_ready gives
// each sequence the pages for the furthest position the chain may write (ctx + k + K - 1), or sends
// the step to the host path; the verify gives back those past the kept tokens after. The head runs K + 1 rows at depth 1 where the host path runs a + 1:
// on the CPU (batch-invariant) the drafts are the same bit for bit.
#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/ops/ops.h"

namespace strata {

bool Engine::chain_ready(const StepInFlight& f) {
  if (f.verifies.empty() || !f.jobs.empty() || f.verifies.size() != f.chunks.size()) return false;
  const int32_t k = f.verifies[0].drafts, depth = config_.speculative.num_speculative_tokens;
  for (size_t i = 0; i < f.verifies.size(); ++i) {
    const StepInFlight::Verify& v = f.verifies[i];
    const Sequence& seq = *v.seq;
    if (v.seq != f.chunks[i].seq || v.drafts != k || !v.stored_steps || v.first_row != int32_t(i) * (k + 1) ||
        f.batch.seqs[i].q_start != int32_t(i) * (k + 1) || seq.status != SeqStatus::kRunning ||
        seq.request->seqs.size() != 1 || !seq.request->sampling.greedy() || seq.matcher || !verified_on_device(seq)) {
      return false;
    }
    // Every draft kept and the bonus token still leave room for K more drafts.
    if (seq.token_limit < v.ctx_len + k + depth + 3) return false;
  }
  if (int64_t(f.verifies.size()) * (k + 1) != f.logits.dim(0)) return false;
  // Pages for the furthest position the chain may write (the verify gives back the unused ones).
  for (const StepInFlight::Verify& v : f.verifies) {
    if (!cache_->can_grow(*v.seq, v.ctx_len + k + depth)) return false;
    cache_->grow(*v.seq, v.ctx_len + k + depth);
  }
  return true;
}

void Engine::chain_step(StepInFlight& f) {
  const double start = now();
  // k drafts verified a sequence; `depth` (K) drafted for the next step.
  const int32_t k = f.verifies[0].drafts, depth = config_.speculative.num_speculative_tokens;
  const int32_t n = int32_t(f.verifies.size());
  const Device dev = f.logits.device();
  // accepted [n], the target's picks [n, k + 1], the drafts [depth, n]: one read back.
  const int64_t total = int64_t(n) * (k + 2 + depth);
  if (!chain_buf_.defined() || chain_buf_.numel() < total) chain_buf_ = Tensor::empty({total}, DType::kI32, dev);
  const Tensor accepted = chain_buf_.rows(0, n), target = chain_buf_.rows(n, int64_t(n) * (k + 2));
  const auto drafts_at = [&](int32_t d) {  // depth 1..K
    const int64_t at = int64_t(n) * (k + 2) + int64_t(d - 1) * n;
    return chain_buf_.rows(at, at + n);
  };
  std::vector<const Sequence*> seqs;
  std::vector<int32_t> drafts;
  ForwardBatch first;  // depth 1: every verify row
  for (const StepInFlight::Verify& v : f.verifies) {
    Sequence& seq = *v.seq;
    seqs.push_back(&seq);
    drafts.insert(drafts.end(), seq.drafts.begin(), seq.drafts.begin() + k);  // those the step verifies
    SeqInBatch s;
    s.q_start = first.num_tokens();
    s.q_len = k + 1;
    s.ctx_len = v.ctx_len;
    s.block_table = seq.block_table;
    s.state_slot = seq.state_slot;
    for (int32_t j = 0; j <= k; ++j) {
      first.feed_rows.push_back(first.num_tokens());
      first.feed_from.push_back(first.num_tokens());
      if (j == k) first.logit_rows.push_back(first.num_tokens());  // row a's, picked on the device
      first.positions.push_back(v.ctx_len + j);
      first.token_ids.push_back(0);
    }
    first.seqs.push_back(std::move(s));
  }
  first.feed_ids = target;
  first.pick = accepted;

  ops::argmax(f.logits, target);
  ops::spec_accept_greedy(target, drafts, k, accepted);
  cache_->restore_steps(seqs, accepted, k);
  Tensor head_hidden;
  const Tensor& first_logits = runner_->run_head(first, hidden_, cache_->caches(), head_hidden);
  ++stats_.spec_draft_forwards;
  ops::argmax(first_logits, drafts_at(1));
  Tensor h = Tensor::empty({n, head_hidden.dim(1)}, head_hidden.dtype(), dev);
  ops::gather_rows_selected(head_hidden, accepted, k + 1, h);
  for (int32_t d = 2; d <= depth; ++d) {
    ForwardBatch b;
    for (int32_t i = 0; i < n; ++i) {
      const StepInFlight::Verify& v = f.verifies[size_t(i)];
      SeqInBatch s;
      s.q_start = i;
      s.q_len = 1;
      s.ctx_len = v.ctx_len + d - 1;  // + a on the device
      s.block_table = v.seq->block_table;
      s.state_slot = v.seq->state_slot;
      b.token_ids.push_back(0);
      b.positions.push_back(s.ctx_len);
      b.feed_rows.push_back(i);
      b.feed_from.push_back(i);
      b.logit_rows.push_back(i);
      b.seqs.push_back(std::move(s));
    }
    b.feed_ids = drafts_at(d - 1);
    b.shift = accepted;
    const Tensor& logits = runner_->run_head(b, h, cache_->caches(), head_hidden);
    ++stats_.spec_draft_forwards;
    ops::argmax(logits, drafts_at(d));
    if (d < depth) h = head_hidden.to(dev);  // a copy: an eager head writes its hidden states where it read them
  }
  const Tensor back = chain_buf_.rows(0, total).to(Device::kCpu);
  const int32_t* p = back.data<int32_t>();
  ChainResult r;
  r.accepted.assign(p, p + n);
  r.target.assign(p + n, p + int64_t(n) * (k + 2));
  r.drafts.assign(p + int64_t(n) * (k + 2), p + total);
  stats_.spec_draft_seconds += now() - start;
  stats_.spec_draft_graphs = runner_->head_graph_steps();
  ++stats_.spec_chain_steps;

  verify_drafts(f, &r);
  // The next drafts: as many as the host path would make (K, or the dynamic policy's choice after
  // this step's acceptance; within the budget), the first of the chain's K.
  const std::vector<int32_t> wanted = wanted_drafts(f);
  for (int32_t i = 0; i < n; ++i) {
    Sequence& seq = *f.verifies[size_t(i)].seq;
    if (seq.status != SeqStatus::kRunning) continue;
    const int32_t budget = draft_budget(seq, std::min(wanted[size_t(i)], depth));
    for (int32_t j = 0; j < budget; ++j) seq.drafts.push_back(r.drafts[size_t(j) * size_t(n) + size_t(i)]);
  }
}

}  // namespace strata
