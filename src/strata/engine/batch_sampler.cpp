#include "strata/engine/batch_sampler.h"

#include <algorithm>
#include <chrono>

#include "strata/core/error.h"
#include "strata/core/parallel.h"
#include "strata/engine/structured_output.h"

namespace strata {

ops::LogitAdjust& BatchSampler::entry(int32_t id) {
  int32_t& w = where_[size_t(id)];
  if (w < 0) {
    w = int32_t(batch_.adjust.size());
    batch_.adjust.push_back({});
    batch_.adjust.back().id = id;
  }
  return batch_.adjust[size_t(w)];
}

// Sampler::sample's steps 1 and 2 as adjustments, one entry per token id.
void BatchSampler::add_adjustments(const Sequence& seq, ops::SampleSpec& spec) {
  const ResolvedSampling& p = seq.request->sampling;
  const SamplingParams& sp = p.params;
  spec.adjust_begin = int32_t(batch_.adjust.size());
  if (where_.empty()) where_.assign(size_t(vocab_), -1);
  for (const auto& [id, bias] : sp.logit_bias) entry(id).bias = float(bias);
  if (seq.num_generated_drawn() < sp.min_tokens) {
    for (int32_t id : p.eos_ids) entry(id).mask = 1;
    for (int32_t id : sp.stop_token_ids) entry(id).mask = 1;
  }
  if (p.repetition_penalty != 1.0) {
    for (int32_t t : seq.tokens) entry(t).repeat = 1;
  }
  if (sp.frequency_penalty != 0.0 || sp.presence_penalty != 0.0) {
    for (const auto& [id, count] : seq.output_counts) {
      entry(id).subtract = float(sp.frequency_penalty * count + sp.presence_penalty);
    }
  }
  spec.adjust_count = int32_t(batch_.adjust.size()) - spec.adjust_begin;
  for (size_t i = size_t(spec.adjust_begin); i < batch_.adjust.size(); ++i) {
    where_[size_t(batch_.adjust[i].id)] = -1;
  }
}

// The rows of one mask cache one after another (a fill holds the cache's lock), different caches
// (grammars) in parallel. The time counted is the wall time of the whole fill.
void BatchSampler::fill_masks(const std::vector<SampleJob>& jobs) {
  std::vector<const StructuredOutput*> grammars;
  std::vector<std::vector<size_t>> draws;  // per grammar: its draws
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].seq->matcher) continue;
    const StructuredOutput* so = jobs[i].seq->request->sampling.params.structured.get();
    size_t g = 0;
    while (g < grammars.size() && grammars[g]->masks != so->masks) ++g;
    if (g == grammars.size()) {
      grammars.push_back(so);
      draws.emplace_back();
    }
    draws[g].push_back(i);
  }
  if (grammars.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t words = size_t(batch_.allow_words);
  parallel_for(int64_t(grammars.size()), [&](int64_t g) {
    for (size_t i : draws[size_t(g)]) {
      uint64_t* row = batch_.allow.data() + size_t(batch_.rows[i].allow_row) * words;
      grammars[size_t(g)]->fill_allowed(*jobs[i].seq->matcher, words, row);
    }
  });
  grammar_mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& d : draws) grammar_masks_ += int64_t(d.size());
}

bool BatchSampler::reads_tokens(const Sequence& seq) {
  const ResolvedSampling& p = seq.request->sampling;
  return seq.matcher != nullptr || p.repetition_penalty != 1.0 || p.params.frequency_penalty != 0.0 || p.params.presence_penalty != 0.0;
}

void BatchSampler::begin(const Tensor& logits, const std::vector<SampleJob>& jobs, int slot) {
  Slot& sl = slots_.at(size_t(slot));
  batch_.rows.clear();
  batch_.adjust.clear();
  batch_.allow.clear();
  batch_.allow_words = (vocab_ + 63) / 64;
  batch_.raw_logprobs = mode_ == LogprobsMode::kRaw;
  std::vector<int32_t> num_top;
  for (const SampleJob& j : jobs) {
    STRATA_CHECK(j.seq->pending_draws == 0 || !reads_tokens(*j.seq),
                 "sampler: a penalised draw while the sequence's previous token is in flight");
    ops::SampleSpec s = sample_spec(j.seq->request->sampling);
    s.logits_row = j.logits_row;
    if (!s.greedy) s.uniform = uniform01f(j.seq->rng);
    add_adjustments(*j.seq, s);
    if (j.seq->matcher) {
      s.allow_row = int32_t(batch_.allow.size() / size_t(batch_.allow_words));
      batch_.allow.resize(batch_.allow.size() + size_t(batch_.allow_words));
    }
    batch_.rows.push_back(s);
    num_top.push_back(s.num_top_logprobs);
  }
  fill_masks(jobs);
  sl.num_top.clear();
  if (!jobs.empty()) ops::sample_tokens_begin(logits, batch_, sl.draws);
  sl.num_top = std::move(num_top);
}

std::vector<SampleResult> BatchSampler::end(int slot) {
  Slot& sl = slots_.at(size_t(slot));
  if (sl.num_top.empty()) return {};
  ops::sample_tokens_end(sl.draws, out_);
  std::vector<SampleResult> results(sl.num_top.size());
  for (size_t r = 0; r < results.size(); ++r) {
    SampleResult& res = results[r];
    res.token = out_.ids[r];
    const int n = sl.num_top[r];
    if (n < 0) continue;
    res.logprob = out_.logprobs[r];
    for (int k = 0; k < n && k < int(vocab_); ++k) {
      res.top.push_back({out_.top_ids[r * ops::kMaxTopLogprobs + size_t(k)],
                         out_.top_logprobs[r * ops::kMaxTopLogprobs + size_t(k)]});
    }
  }
  return results;
}

std::vector<SampleResult> BatchSampler::sample(const Tensor& logits, const std::vector<SampleJob>& jobs) {
  begin(logits, jobs, 0);
  return end(0);
}

}  // namespace strata
