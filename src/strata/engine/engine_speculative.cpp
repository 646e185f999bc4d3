// Speculative decoding with the model's multi-token-prediction head (EngineConfig::speculative).
//
// Each step, a decoding sequence with drafts d1..dk computes its last token and the drafts in one
// target forward (forward_with_hidden): row i's logits verify d(i+1), and the row after the last
// accepted draft gives the target's own token (the correction, or the bonus token when all are
// accepted). The tokens are emitted one at a time through the stop rules, so a token past a stop
// or max_tokens is never emitted.
//
// Rollback of what rejected drafts touched:
//   - attention KV (main and head layers): the sequence's computed length goes back to the
//     accepted tokens, and pages beyond its tokens go back to the pool; entries past the
//     computed length are never read and are overwritten later;
//   - the Gated DeltaNet recurrent and conv states (one slot per sequence, updated in place by
//     every token of the verify): where the model stores per-token states
//     (ModelInfo::state_step_tokens; the Qwen3.5 family, for verify batches of sequences of up
//     to 16 tokens), the verify also writes the state after each of its tokens but the last to
//     K slots of the sequence (ForwardBatch::state_steps), and a rejection copies the one after
//     the last accepted token back: no second forward. Otherwise (other families, or a batch
//     with a long prefill chunk) the slot is checkpointed before the verify, and after a
//     rejection it is restored and the accepted tokens are replayed through the model (a
//     second, shorter forward). Both are exact on the CPU: its forward is batch- and
//     chunk-invariant, so the state either way is bitwise the state of a run that never drafted.
// Page registration and state snapshots (prefix caching) happen after the rollback, so only
// accepted state is ever cached.
//
// Drafting: after the step's tokens are known, the head runs over every position the step
// finalised (prefill chunks too, so its own KV covers the whole sequence): position p pairs the
// target's final hidden state at p with the token at p + 1. The last position's logits give d1;
// d(j+1) comes from the head at the next position, fed d(j) and the head's own hidden state
// (the target's is not known there), one head forward per depth for all drafting sequences.
// On CUDA a head forward whose sequences bring the same number of tokens replays a head graph
// (ModelRunner::run_head; sequences that draft nothing then ask for their last row's logits
// too): depths 2..K always (one token a sequence), depth 1 when every sequence accepted as many
// tokens (always at batch 1).
// Structured outputs (spec_grammar.h): drafts are picked under the grammar's mask after the
// drafts before them (drafting stops at an end token or a complete grammar), and verify rows
// under the mask after the tokens emitted so far; the grammar ends at the emitted tokens' state.
//
// On CUDA the forwards stay on the device and the host reads only what the acceptance needs
// (ops::rows_to_host / argmax_rows_to_host, through pinned memory): a greedy draft is the head's
// arg max, computed on the device, so only its id comes back; a greedy verify row whose request
// processes nothing (no logit bias, penalties, pending min_tokens or log-probabilities) is the
// target's arg max, likewise an id; the other rows (sampled requests, processed greedy ones)
// come back whole, K + 1 rows a verifying sequence and one a drafter, for the host's Sampler.
// A step with a single-completion sequence runs forward_with_hidden (the draft head needs the
// hidden state of every row): as a verify graph when every sequence brings the same number of
// tokens and wants every row's logits (ModelRunner::run_with_hidden), else eagerly; a step of
// only multi-completion sequences, which never draft, keeps its decode graph (launch_step).
#include <algorithm>
#include <cstring>

#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/engine/spec_accept.h"
#include "strata/engine/spec_grammar.h"
#include "strata/ops/host_read.h"

namespace strata {

void Engine::init_speculation() {
  const SpeculativeConfig& sc = config_.speculative;
  if (!sc.enabled()) return;
  STRATA_CHECK(sc.method == "mtp", "--speculative-config: field 'method': only \"mtp\" is supported, got \"",
               sc.method, "\"");
  STRATA_CHECK(model_->info().mtp_layers > 0, "--speculative-config: method \"mtp\" needs the model's "
               "multi-token-prediction head, and ", model_->info().model_type, " has none loaded "
               "(mtp_num_hidden_layers or, for deepseek_v4, num_nextn_predict_layers in config.json; the model must be "
               "loaded with LoadOptions::mtp)");
  STRATA_CHECK(sc.head_defer_max >= 0 && sc.head_defer_max <= 1024, "SpeculativeConfig::head_defer_max ",
               sc.head_defer_max, " is outside [0, 1024]");
  spec_ = true;
  spec_sampler_ = std::make_unique<Sampler>(model_->info().vocab_size, config_.logprobs_mode);
  stats_.spec_drafted_at.assign(size_t(sc.num_speculative_tokens), 0);
  stats_.spec_accepted_at.assign(size_t(sc.num_speculative_tokens), 0);
}

// Fixed: K for every sequence that may draft; dynamic: the policy's k over the step's drafters
// (draft_length.h), the others counted as plain rows of the step.
std::vector<int32_t> Engine::wanted_drafts(const StepInFlight& f) {
  const int32_t max_k = config_.speculative.num_speculative_tokens;
  std::vector<int32_t> wanted(f.chunks.size(), max_k);
  if (!draft_policy_) return wanted;
  std::vector<DraftHistory*> histories;
  std::vector<int32_t> limits;
  std::vector<size_t> drafter_chunks;
  int32_t plain_rows = 0;
  for (size_t ci = 0; ci < f.chunks.size(); ++ci) {
    Sequence& seq = *f.chunks[ci].seq;
    if (seq.status != SeqStatus::kRunning || seq.num_computed <= f.chunks[ci].ctx_len) continue;
    // The tokens it has after the step (at launch: with the draws in flight).
    const int32_t tokens = seq.num_tokens_drawn();
    // A prompt's chunk (at launch, a chunk of several tokens in a step without verifies) drafts
    // nothing: its head KV is then written at launch (plan_at_launch), and the step overlaps.
    const bool prompt_chunk = f.verifies.empty() && f.chunks[ci].q_len > 1;
    if (seq.num_computed + 1 != tokens || seq.request->seqs.size() > 1 || prompt_chunk) {
      plain_rows += f.chunks[ci].samples ? 1 : 0;
      if (prompt_chunk) wanted[ci] = 0;
      continue;
    }
    histories.push_back(&seq.draft_history);
    limits.push_back(std::clamp(seq.token_limit - tokens - 1, 0, max_k));
    drafter_chunks.push_back(ci);
  }
  std::vector<int32_t> ks = draft_policy_->plan(histories, limits, plain_rows);
  // The meter needs a decode step at this batch size before speculation's costs there are known:
  // three steps without drafts (the third's call times the second, launched behind the first).
  if (config_.speculative.measure_costs && !ks.empty()) {
    if (meter_plain_steps_ == 0 && !cost_meter_.decode_measured(int32_t(ks.size()) + plain_rows)) meter_plain_steps_ = 3;
    if (meter_plain_steps_ > 0) {
      --meter_plain_steps_;
      ks.assign(ks.size(), 0);
    }
  }
  for (size_t i = 0; i < ks.size(); ++i) wanted[drafter_chunks[i]] = ks[i];
  return wanted;
}

bool Engine::defers_head(const ScheduledChunk& c, int32_t k, int32_t pending) const {
  const Sequence& seq = *c.seq;
  const int32_t end = seq.num_computed, fresh = end - c.ctx_len;
  return draft_policy_ && k == 0 && end + 1 == seq.num_tokens_drawn() && seq.request->seqs.size() == 1 &&
         pending + fresh <= config_.speculative.head_defer_max;
}

bool Engine::defers_head(const ScheduledChunk& c, int32_t k) const { return defers_head(c, k, c.seq->head_pending); }

void Engine::defer_head(const ScheduledChunk& c, int32_t row0, std::vector<int32_t>& rows, std::vector<int32_t>& at) {
  Sequence& seq = *c.seq;
  const int32_t fresh = seq.num_computed - c.ctx_len, slot_row = seq.state_slot * config_.speculative.head_defer_max;
  for (int32_t j = 0; j < fresh; ++j) {
    rows.push_back(row0 + j);
    at.push_back(slot_row + seq.head_pending + j);
  }
  seq.head_pending += fresh;
  stats_.spec_head_deferred += fresh;
}

void Engine::keep_head_rows(const std::vector<int32_t>& rows, const std::vector<int32_t>& at) {
  if (rows.empty()) return;
  const int32_t slot_rows = plan_.seq_slots * config_.speculative.head_defer_max;  // then the staging rows
  if (!head_pending_.defined()) {
    head_pending_ = Tensor::empty({2 * int64_t(slot_rows), hidden_.dim(1)}, hidden_.dtype(), hidden_.device());
  }
  const int64_t n = int64_t(rows.size());
  STRATA_CHECK(n <= slot_rows, "engine: ", n, " head rows to keep, room for ", slot_rows);
  ops::gather_rows(hidden_, rows, head_pending_.rows(slot_rows, slot_rows + n));
  std::vector<ops::SlotCopy> copies;
  for (int64_t i = 0; i < n; ++i) copies.push_back({int32_t(slot_rows + i), at[size_t(i)]});
  ops::copy_slots({head_pending_}, copies);
}

// At launch the step's hidden rows are in hidden_ until the next forward: the kept ones are
// copied out now, queued behind the forward. The plan is the one draft_tokens would make at the
// step's completion (no verify of this step changes an acceptance history; the limits count the
// draws in flight), and it is made once: the policy's probe counts advance with each plan.
// A sequence whose kept rows are full has them caught up first (catch_up_head_at_launch), so
// that its head forward does not end the overlap either.
void Engine::plan_at_launch(StepInFlight& f) {
  f.spec_work = true;
  if (!draft_policy_ || !f.verifies.empty() || f.chunks.empty()) return;
  f.spec_work = false;
  f.planned = wanted_drafts(f);
  f.kept.assign(f.chunks.size(), false);
  std::vector<const ScheduledChunk*> due;
  for (size_t ci = 0; ci < f.chunks.size(); ++ci) {
    const ScheduledChunk& c = f.chunks[ci];
    const Sequence& seq = *c.seq;
    if (seq.status != SeqStatus::kRunning || seq.num_computed <= c.ctx_len) continue;
    if (defers_head(c, f.planned[ci]) || prompt_head_at_launch(c, f.planned[ci])) continue;
    // Its head forward is due: caught up now, but for its newest kept row, when that makes room.
    if (seq.head_pending >= 2 && defers_head(c, f.planned[ci], 1)) {
      due.push_back(&c);
    } else {
      f.spec_work = true;  // it drafts, or its head forward must run at the step's completion
    }
  }
  catch_up_head_at_launch(due);
  std::vector<int32_t> rows, at;
  for (size_t ci = 0; ci < f.chunks.size(); ++ci) {
    const ScheduledChunk& c = f.chunks[ci];
    const Sequence& seq = *c.seq;
    if (seq.status != SeqStatus::kRunning || seq.num_computed <= c.ctx_len || !defers_head(c, f.planned[ci])) continue;
    defer_head(c, f.batch.seqs[ci].q_start, rows, at);
    f.kept[ci] = true;
  }
  write_prompt_head_kv_at_launch(f, rows, at);
  keep_head_rows(rows, at);
}

// A prompt's chunk too long to defer (it drafts nothing: wanted_drafts) has its head KV written
// at launch, queued behind the forward, at every position whose next token is known: all of a
// chunk the prompt goes on after, all but the last of the prompt's last chunk, whose last row is
// kept (its next token is the step's draw) as a deferred row.
bool Engine::prompt_head_at_launch(const ScheduledChunk& c, int32_t k) const {
  const Sequence& seq = *c.seq;
  const int32_t end = seq.num_computed;
  return draft_policy_ && config_.speculative.head_defer_max > 0 && k == 0 && c.q_len > 1 && end > c.ctx_len &&
         seq.head_pending == 0 && seq.request->seqs.size() == 1 &&
         (end < seq.num_tokens() || end + 1 == seq.num_tokens_drawn());
}

void Engine::write_prompt_head_kv_at_launch(StepInFlight& f, std::vector<int32_t>& rows, std::vector<int32_t>& at) {
  ForwardBatch kv;
  std::vector<int32_t> hidden_rows;
  for (size_t ci = 0; ci < f.chunks.size(); ++ci) {
    const ScheduledChunk& c = f.chunks[ci];
    Sequence& seq = *c.seq;
    if (seq.status != SeqStatus::kRunning || f.kept[ci] || !prompt_head_at_launch(c, f.planned[ci])) continue;
    const int32_t end = seq.num_computed;
    const int32_t known = std::min(end, seq.num_tokens() - 1) - c.ctx_len;  // positions whose next token is known
    const int32_t row0 = f.batch.seqs[ci].q_start;
    if (known > 0) add_head_kv_rows(seq, c.ctx_len, known, row0, kv, hidden_rows);
    if (known < end - c.ctx_len) {  // the last row waits for its next token
      rows.push_back(row0 + known);
      at.push_back(seq.state_slot * config_.speculative.head_defer_max);
      seq.head_pending = 1;
      ++stats_.spec_head_deferred;
    }
    f.kept[ci] = true;
  }
  if (kv.seqs.empty()) return;
  write_head_kv_from(hidden_, kv, hidden_rows);
  ++stats_.spec_head_prompt_writes;
}

// At a step's launch the token after each kept row but the newest is on the host (the newest's
// is drawn by the step in flight, if any), so the head's KV at those positions is written now
// (ModelRunner::write_head_kv: the head's layers up to their keys and values, where the family
// allows, eagerly), queued behind the step's forward with no host wait. The newest row then
// moves to the front of its slot's rows.
void Engine::catch_up_head_at_launch(const std::vector<const ScheduledChunk*>& due) {
  if (due.empty()) return;
  const int32_t defer_max = config_.speculative.head_defer_max;
  ForwardBatch b;
  std::vector<int32_t> in_rows;
  std::vector<ops::SlotCopy> shifts;
  for (const ScheduledChunk* c : due) {
    Sequence& seq = *c->seq;
    const int32_t n = seq.head_pending - 1, slot_row = seq.state_slot * defer_max;
    add_kept_rows(seq, c->ctx_len - seq.head_pending, n, b, in_rows);
    shifts.push_back({slot_row + n, slot_row});
    seq.head_pending = 1;
  }
  write_head_kv_from(head_pending_, b, in_rows);
  ops::copy_slots({head_pending_}, shifts);
  ++stats_.spec_head_launch_catch_ups;
}

void Engine::add_head_kv_rows(const Sequence& seq, int32_t first, int32_t n, int32_t row0, ForwardBatch& kv,
                              std::vector<int32_t>& rows) const {
  STRATA_CHECK(first + n < seq.num_tokens(), "engine: the head's catch-up needs the token after position ",
               first + n - 1);
  SeqInBatch s;
  s.q_start = kv.num_tokens();
  s.q_len = n;
  s.ctx_len = first;
  s.state_slot = seq.state_slot;
  s.block_table = seq.block_table;
  for (int32_t j = 0; j < n; ++j) {
    kv.token_ids.push_back(seq.tokens[size_t(first + j) + 1]);
    kv.positions.push_back(first + j);
    rows.push_back(row0 + j);
  }
  kv.logit_rows.push_back(s.q_start + n - 1);  // for a family whose head then runs in full
  kv.seqs.push_back(std::move(s));
}

void Engine::add_kept_rows(const Sequence& seq, int32_t first, int32_t n, ForwardBatch& kv,
                           std::vector<int32_t>& rows) const {
  add_head_kv_rows(seq, first, n, seq.state_slot * config_.speculative.head_defer_max, kv, rows);
}

void Engine::write_head_kv_from(const Tensor& source, const ForwardBatch& kv, const std::vector<int32_t>& rows) {
  Tensor hidden = Tensor::empty({kv.num_tokens(), source.dim(1)}, source.dtype(), source.device());
  ops::gather_rows(source, rows, hidden);
  runner_->write_head_kv(kv, hidden, cache_->caches());
}

void Engine::note_completed(const StepInFlight& f) {
  if (!f.spec_work) {
    cycle_.decode_rows = std::max(f.decode_rows, 0);
    return;
  }
  // A sample of speculation's steady state: every sequence of the step verified drafts and
  // drafted again (a step where a few of many rows verify costs about a decode step: priced at
  // that, it would make every sequence draft).
  bool all_drafted = f.jobs.empty() && !f.verifies.empty();
  for (const StepInFlight::Verify& v : f.verifies) {
    all_drafted = all_drafted && v.drafts > 0 && !v.seq->drafts.empty();
    cycle_.spec_k = std::max(cycle_.spec_k, v.drafts);
  }
  if (all_drafted) cycle_.spec_seqs = int32_t(f.verifies.size());
}

void Engine::measure_cycle(double now) {
  if (!draft_policy_ || !config_.speculative.measure_costs || cycle_.start < 0 || !cycle_.launched) return;
  const double seconds = now - cycle_.start;
  if (cycle_.decode_rows > 0) {
    cost_meter_.decode(cycle_.decode_rows, seconds);
  } else if (cycle_.spec_seqs > 0) {
    cost_meter_.speculating(cycle_.spec_seqs, cycle_.spec_k, seconds);
  } else {
    return;
  }
  stats_.spec_costs = cost_meter_.costs();
  draft_policy_->set_costs_by_batch(stats_.spec_costs);
}

// Drafts are made for single-completion requests; the others (n > 1) decode a token a step.
int32_t Engine::draft_budget(Sequence& seq, int32_t wanted) const {
  if (seq.request->seqs.size() > 1) return 0;
  // Every draft accepted plus the bonus token stays within max_tokens and the context.
  int32_t k = std::min(wanted, seq.token_limit - seq.num_tokens() - 1);
  // The chained head steps write their KV at positions up to num_computed + k - 2.
  while (k > 1 && !cache_->can_grow(seq, seq.num_computed + k - 1)) --k;
  if (k > 1) cache_->grow(seq, seq.num_computed + k - 1);
  return std::max(k, 0);
}

// One verify row: the target's token for the position after draft `draft_index` - 1 (the
// sequence's state holds the tokens accepted so far, so min_tokens and penalties see them),
// emitted through the stop rules. `accepted`: it equals draft `draft_index` (-1: the bonus row).
// Greedy: the target's pick, accepted when it is the draft. Sampled: speculative sampling's
// rule (spec_accept.h) with p and q processed by the same parameters over the same tokens,
// its uniforms from the sequence's generator (so a seed gives one output, which differs from
// the non-speculative engine's draws but has their distribution). A structured output masks
// the row with its grammar's state after the tokens emitted so far (spec_grammar.h).
void Engine::accept_row(Sequence& seq, const float* logits, int32_t picked, int32_t draft_index, bool& accepted) {
  const ResolvedSampling& sp = seq.request->sampling;
  SamplerInput in{&seq.tokens, seq.prompt_len, &seq.output_counts, &seq.rng};
  in.allow = grammar_allow(seq, model_->info().vocab_size, spec_allow_);
  SampleResult r;
  if (!logits) {  // verified_on_device: the arg max is the target's pick
    r.token = picked;
    accepted = draft_index >= 0 && r.token == seq.drafts[size_t(draft_index)];
  } else if (sp.greedy()) {
    r = spec_sampler_->sample(logits, sp, in);
    accepted = draft_index >= 0 && r.token == seq.drafts[size_t(draft_index)];
  } else {
    std::vector<double>& p = spec_p_;
    spec_sampler_->distribution(logits, sp, in, p);
    int32_t token;
    if (draft_index >= 0) {
      const double u_accept = uniform01(seq.rng);
      const double u_resample = uniform01(seq.rng);
      const SpecVerdict v = verify_draft(p, seq.draft_probs[size_t(draft_index)], seq.drafts[size_t(draft_index)],
                                         u_accept, u_resample);
      token = v.token;
      accepted = v.accepted;
    } else {
      token = draw_from(p, uniform01(seq.rng));
      accepted = false;
    }
    STRATA_CHECK(token >= 0, "structured output: the grammar allows no token after ", seq.num_generated(),
                 " generated tokens");
    r = spec_sampler_->result_for(token, sp);
  }
  append_token(seq, r);
  check_stop(seq, r.token);
}

// Greedy with nothing that changes the logits before the arg max, nor log-probabilities to
// report, nor a grammar mask: Sampler::sample's pick for each verify row is the row's arg max,
// which the device computes (the first verify row has the fewest generated tokens, so
// min_tokens is checked there).
bool Engine::verified_on_device(const Sequence& seq) {
  const ResolvedSampling& sp = seq.request->sampling;
  const SamplingParams& p = sp.params;
  return sp.greedy() && p.logit_bias.empty() && sp.repetition_penalty == 1.0 && p.frequency_penalty == 0.0 &&
         p.presence_penalty == 0.0 && !p.logprobs && seq.num_generated() >= p.min_tokens && !seq.matcher;
}

// The draft for the token after `context`: greedy, the head's arg max; sampled, a draw from q,
// the head's logits processed as the target's are (bias, min_tokens, penalties over the same
// tokens, temperature, min-p, top-k, top-p), kept in seq.draft_probs for the verify. A
// structured output's draft is picked under its grammar's mask after the drafts so far (greedy:
// the masked arg max of the host row `logits`) and advances the grammar (spec_grammar.h).
// False: no draft may follow this one (or none could be picked).
bool Engine::add_draft(Sequence& seq, const float* logits, int32_t picked, std::vector<int32_t>& context,
                       std::unordered_map<int32_t, int32_t>& counts, int32_t& grammar_steps) {
  const ResolvedSampling& sp = seq.request->sampling;
  const int64_t vocab = model_->info().vocab_size;
  const uint64_t* allow = grammar_allow(seq, vocab, spec_allow_);
  int32_t token;
  if (sp.greedy()) {
    token = allow ? masked_argmax(logits, vocab, allow) : picked;
  } else {
    SamplerInput in{&context, seq.prompt_len, &counts, &seq.rng};
    in.allow = allow;
    std::vector<double> q;
    spec_sampler_->distribution(logits, sp, in, q);
    token = draw_from(q, uniform01(seq.rng));
    if (token >= 0) seq.draft_probs.push_back(std::move(q));
  }
  if (token < 0) return false;
  seq.drafts.push_back(token);
  context.push_back(token);
  ++counts[token];
  return advance_draft_grammar(seq, token, grammar_steps);
}

void Engine::verify_drafts(StepInFlight& f, const ChainResult* chain) {
  if (f.verifies.empty()) return;
  const int64_t vocab = model_->info().vocab_size;
  // The host's share of the verify rows: ids for those verified on the device, whole rows
  // for the others; first[i]: where verify i's rows begin in `ids` or spec_rows_. After the
  // draft chain every verify is by ids, which it brought back.
  std::vector<int32_t> id_rows, logit_rows, first(f.verifies.size(), 0);
  std::vector<bool> on_device(f.verifies.size(), chain != nullptr);
  const std::vector<int32_t>& ids = chain ? chain->target : spec_ids_;
  for (size_t vi = 0; vi < f.verifies.size(); ++vi) {
    const StepInFlight::Verify& v = f.verifies[vi];
    if (chain) {
      first[vi] = int32_t(vi) * (v.drafts + 1);
      continue;
    }
    if (v.seq->is_finished()) continue;
    on_device[vi] = verified_on_device(*v.seq);
    std::vector<int32_t>& rows = on_device[vi] ? id_rows : logit_rows;
    first[vi] = int32_t(rows.size());
    for (int32_t i = 0; i <= v.drafts; ++i) rows.push_back(v.first_row + i);
  }
  if (!chain) {
    ops::argmax_rows_to_host(f.logits, id_rows, spec_ids_);
    ops::rows_to_host(f.logits, logit_rows, spec_rows_);
  }
  struct Replay {
    Sequence* seq;
    int32_t ctx_len;
  };
  std::vector<Replay> replays;
  std::vector<Sequence*> verified;
  for (size_t vi = 0; vi < f.verifies.size(); ++vi) {
    const StepInFlight::Verify& v = f.verifies[vi];
    Sequence& seq = *v.seq;
    if (seq.is_finished()) continue;
    ++stats_.spec_verifies;
    stats_.spec_draft_tokens += v.drafts;
    int32_t accepted = 0, reached = 0;
    for (int32_t i = 0; i <= v.drafts; ++i) {
      const bool draft = i < v.drafts;
      if (draft) {
        ++stats_.spec_drafted_at[size_t(i)];
        ++reached;
      }
      bool ok = false;
      const int32_t row = first[vi] + i;
      if (on_device[vi]) {
        accept_row(seq, nullptr, ids[size_t(row)], draft ? i : -1, ok);
      } else {
        accept_row(seq, spec_rows_.data() + int64_t(row) * vocab, -1, draft ? i : -1, ok);
      }
      if (ok) {
        ++accepted;
        ++stats_.spec_accepted_at[size_t(i)];
      }
      if (!ok || seq.is_finished()) break;
    }
    stats_.spec_accepted_tokens += accepted;
    if (draft_policy_) draft_policy_->observe(seq.draft_history, reached, accepted);
    seq.drafts.clear();
    seq.draft_probs.clear();
    if (seq.is_finished()) continue;  // its pages and slot went back with it
    // The last token (the target's) is not computed yet: positions before it are.
    seq.num_computed = seq.num_tokens() - 1;
    STRATA_CHECK(seq.num_computed == v.ctx_len + accepted + 1, "engine: verify bookkeeping");
    STRATA_CHECK(!chain || accepted == chain->accepted[vi], "engine: the device accepted ", chain->accepted[vi],
                 " drafts of sequence ", seq.request->id, ", the host ", accepted);
    if (accepted < v.drafts) {
      ++stats_.spec_rollbacks;
      if (chain) {
        // The chain restored the state on the device (CacheManager::restore_steps).
      } else if (v.stored_steps) {
        cache_->restore_step(seq, accepted);  // the state after the last kept token, stored by the verify
      } else {
        cache_->restore_state(seq);
        replays.push_back({&seq, v.ctx_len});
      }
    }
    cache_->truncate(seq, seq.num_tokens());
    verified.push_back(&seq);
  }
  if (!replays.empty()) {
    ForwardBatch b;
    for (const Replay& r : replays) {
      SeqInBatch s;
      s.q_start = b.num_tokens();
      s.ctx_len = r.ctx_len;
      s.q_len = r.seq->num_computed - r.ctx_len;
      s.block_table = r.seq->block_table;
      s.state_slot = r.seq->state_slot;
      for (int32_t p = r.ctx_len; p < r.seq->num_computed; ++p) {
        b.token_ids.push_back(r.seq->tokens[size_t(p)]);
        b.positions.push_back(p);
      }
      b.logit_rows.push_back(s.q_start + s.q_len - 1);
      ++stats_.spec_replays;
      stats_.spec_replayed_tokens += s.q_len;
      b.seqs.push_back(std::move(s));
    }
    const double start = now();
    // Replays of equal lengths (always at batch 1) may replay a verify graph: it wants every
    // row's logits, unused here, as the graph's shape does; its hidden buffer is another than
    // the verify's, whose states the head reads next (its sequences bring fewer tokens).
    ForwardBatch every_row = b;
    every_row.logit_rows.clear();
    for (int32_t r = 0; r < b.num_tokens(); ++r) every_row.logit_rows.push_back(r);
    if (runner_->graphs_with_hidden(every_row)) {
      runner_->run_with_hidden(every_row, cache_->caches(), replay_hidden_);
    } else {
      model_->forward(b, cache_->caches(), replay_logits_);
    }
    stats_.spec_replay_seconds += now() - start;
  }
  // Only now is every verified sequence's state its accepted tokens' state.
  for (Sequence* seq : verified) cache_->on_computed(*seq, true);
}

void Engine::draft_tokens(const StepInFlight& f) {
  const int64_t vocab = model_->info().vocab_size;
  struct Drafter {
    Sequence* seq;
    int32_t k;    // drafts wanted
    int32_t row;  // its row in the latest head forward
    std::vector<int32_t> context;  // sampled: the tokens with the drafts so far (penalties, min_tokens)
    std::unordered_map<int32_t, int32_t> counts;
    int32_t grammar_steps = 0;  // drafts its structured output's grammar was advanced by
  };
  // Each drafter's next draft from its row of draft_logits_: greedy ones read only the device's
  // arg max, sampled and structured ones the whole row. One that may draft no further (its
  // grammar is complete, an end token) stops at the drafts it has.
  const auto by_id = [](const Drafter* d) { return d->seq->request->sampling.greedy() && !d->seq->matcher; };
  const auto take_drafts = [&](const std::vector<Drafter*>& ds) {
    std::vector<int32_t> id_rows, logit_rows;
    for (const Drafter* d : ds) (by_id(d) ? id_rows : logit_rows).push_back(d->row);
    ops::argmax_rows_to_host(draft_logits_, id_rows, spec_ids_);
    ops::rows_to_host(draft_logits_, logit_rows, spec_rows_);
    size_t next_id = 0, next_row = 0;
    for (Drafter* d : ds) {
      const bool more = by_id(d)
          ? add_draft(*d->seq, nullptr, spec_ids_[next_id++], d->context, d->counts, d->grammar_steps)
          : add_draft(*d->seq, spec_rows_.data() + int64_t(next_row++) * vocab, -1, d->context, d->counts,
                      d->grammar_steps);
      if (!more) d->k = int32_t(d->seq->drafts.size());
    }
  };
  const std::vector<int32_t> wanted = f.planned.empty() ? wanted_drafts(f) : f.planned;
  ForwardBatch b;
  std::vector<int32_t> hidden_rows;
  std::vector<Drafter> drafters;
  // Dynamic K: a decoding sequence that drafts nothing this step skips the head, its positions'
  // hidden states kept (keep_rows of hidden_ into head_pending_ rows keep_at), until a step where
  // it drafts, or its kept rows reach head_defer_max: the head's KV is then written at the kept
  // positions (batch kv of pending_rows of head_pending_: Model::mtp_write_kv, no outputs), and
  // the head runs over the new ones. A step where no sequence drafts then runs no head forward.
  // Chunks kept at the step's launch (plan_at_launch) are done.
  std::vector<int32_t> keep_rows, keep_at, pending_rows;
  ForwardBatch kv;
  for (size_t ci = 0; ci < f.chunks.size(); ++ci) {
    const ScheduledChunk& c = f.chunks[ci];
    Sequence& seq = *c.seq;
    if (seq.status != SeqStatus::kRunning || (!f.kept.empty() && f.kept[ci])) continue;
    seq.drafts.clear();  // a chunk that verified none of them (the budget ran out) leaves them stale
    seq.draft_probs.clear();
    const int32_t end = seq.num_computed;  // positions [ctx_len, end) are final; end's token is known
    if (end <= c.ctx_len) continue;
    STRATA_CHECK(end < seq.num_tokens(), "engine: the draft head needs the token after position ", end - 1);
    const int32_t k = end + 1 == seq.num_tokens() ? draft_budget(seq, wanted[ci]) : 0;
    const int32_t row0 = f.batch.seqs[ci].q_start;
    if (defers_head(c, k)) {
      defer_head(c, row0, keep_rows, keep_at);
      continue;
    }
    if (seq.head_pending > 0) {
      add_kept_rows(seq, c.ctx_len - seq.head_pending, seq.head_pending, kv, pending_rows);
      seq.head_pending = 0;
    }
    SeqInBatch s;
    s.q_start = b.num_tokens();
    s.ctx_len = c.ctx_len;
    s.q_len = end - s.ctx_len;
    s.state_slot = seq.state_slot;
    for (int32_t p = s.ctx_len; p < end; ++p) {
      b.token_ids.push_back(seq.tokens[size_t(p) + 1]);
      b.positions.push_back(p);
      hidden_rows.push_back(row0 + p - c.ctx_len);
    }
    s.block_table = seq.block_table;  // after draft_budget's growth
    if (k > 0) {
      drafters.push_back({&seq, k, int32_t(b.logit_rows.size()), {}, {}});
      if (!seq.request->sampling.greedy()) {
        drafters.back().context = seq.tokens;
        drafters.back().counts = seq.output_counts;
      }
      b.logit_rows.push_back(s.q_start + s.q_len - 1);
    }
    b.seqs.push_back(std::move(s));
  }
  keep_head_rows(keep_rows, keep_at);  // staged after the slots' rows, then copied to them in one launch
  if (!kv.seqs.empty()) write_head_kv_from(head_pending_, kv, pending_rows);
  if (b.seqs.empty()) return;  // also every step that ran without the hidden states (only n > 1)
  // A head batch of equal-length sequences replays a head graph only when each one wants its last
  // row's logits: those that draft nothing (k = 0) then ask for theirs too, unused (the head's
  // lm_head rows cost less than an eager forward: at batch 16 of the 35B-A3B shape an eager head
  // forward took 2 ms).
  if (b.logit_rows.size() < b.seqs.size()) {
    ForwardBatch every_last = b;
    every_last.logit_rows.clear();
    for (const SeqInBatch& s : b.seqs) every_last.logit_rows.push_back(s.q_start + s.q_len - 1);
    if (runner_->graphs_for_head(every_last)) {
      const std::vector<int32_t>& rows = every_last.logit_rows;
      for (Drafter& d : drafters) {
        const int32_t at = b.logit_rows[size_t(d.row)];
        d.row = int32_t(std::lower_bound(rows.begin(), rows.end(), at) - rows.begin());
      }
      b = std::move(every_last);
    }
  }
  const double start = now();
  // The width is the model's choice (DeepSeek-V4, Qwen4-Exp: their residual streams).
  const int64_t hsz = hidden_.dim(1);
  Tensor hidden = Tensor::empty({b.num_tokens(), hsz}, hidden_.dtype(), hidden_.device());
  ops::gather_rows(hidden_, hidden_rows, hidden);
  Tensor head_hidden;
  draft_logits_ = runner_->run_head(b, hidden, cache_->caches(), head_hidden);
  ++stats_.spec_draft_forwards;
  std::vector<Drafter*> all;
  for (Drafter& d : drafters) all.push_back(&d);
  take_drafts(all);
  for (Drafter& d : drafters) d.row = b.logit_rows[size_t(d.row)];  // its row of head_hidden
  // Deeper drafts: position p = num_computed + j - 1 pairs the head's own state at p - 1 with
  // draft j (the token at p + 1).
  for (int32_t depth = 2;; ++depth) {
    ForwardBatch cb;
    hidden_rows.clear();
    std::vector<Drafter*> active;
    for (Drafter& d : drafters) {
      if (d.k < depth) continue;
      Sequence& seq = *d.seq;
      const int32_t p = seq.num_computed + depth - 2;
      SeqInBatch s;
      s.q_start = cb.num_tokens();
      s.q_len = 1;
      s.ctx_len = p;
      s.block_table = seq.block_table;
      s.state_slot = seq.state_slot;
      cb.token_ids.push_back(seq.drafts.back());
      cb.positions.push_back(p);
      hidden_rows.push_back(d.row);
      cb.logit_rows.push_back(s.q_start);
      cb.seqs.push_back(std::move(s));
      active.push_back(&d);
    }
    if (active.empty()) break;
    Tensor h = Tensor::empty({cb.num_tokens(), hsz}, head_hidden.dtype(), head_hidden.device());
    ops::gather_rows(head_hidden, hidden_rows, h);
    draft_logits_ = runner_->run_head(cb, h, cache_->caches(), head_hidden);
    ++stats_.spec_draft_forwards;
    for (size_t i = 0; i < active.size(); ++i) active[i]->row = int32_t(i);
    take_drafts(active);
  }
  // The verify advances the grammars by what it emits: they go back to the emitted tokens' state.
  for (Drafter& d : drafters) rewind_draft_grammar(*d.seq, d.grammar_steps);
  stats_.spec_draft_seconds += now() - start;
  stats_.spec_draft_graphs = runner_->head_graph_steps();
}

}  // namespace strata
