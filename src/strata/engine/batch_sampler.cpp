#include "strata/engine/batch_sampler.h"

#include <algorithm>

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
  if (seq.num_generated() < sp.min_tokens) {
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

std::vector<SampleResult> BatchSampler::sample(const Tensor& logits, const std::vector<SampleJob>& jobs) {
  batch_.rows.clear();
  batch_.adjust.clear();
  batch_.raw_logprobs = mode_ == LogprobsMode::kRaw;
  for (const SampleJob& j : jobs) {
    ops::SampleSpec s = sample_spec(j.seq->request->sampling);
    s.logits_row = j.logits_row;
    if (!s.greedy) s.uniform = uniform01f(j.seq->rng);
    add_adjustments(*j.seq, s);
    batch_.rows.push_back(s);
  }
  std::vector<SampleResult> results(jobs.size());
  if (jobs.empty()) return results;
  ops::sample_tokens(logits, batch_, out_);
  for (size_t r = 0; r < jobs.size(); ++r) {
    SampleResult& res = results[r];
    res.token = out_.ids[r];
    const int n = batch_.rows[r].num_top_logprobs;
    if (n < 0) continue;
    res.logprob = out_.logprobs[r];
    for (int k = 0; k < n && k < int(vocab_); ++k) {
      res.top.push_back({out_.top_ids[r * ops::kMaxTopLogprobs + size_t(k)],
                         out_.top_logprobs[r * ops::kMaxTopLogprobs + size_t(k)]});
    }
  }
  return results;
}

}  // namespace strata
