#include "strata/engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"

namespace strata {

ops::SampleSpec sample_spec(const ResolvedSampling& p) {
  ops::SampleSpec s;
  s.greedy = p.greedy();
  s.inv_temperature = s.greedy ? 1.f : float(1.0 / p.temperature);
  s.top_k = p.top_k;
  s.top_p = float(p.top_p);
  s.min_p = float(p.min_p);
  s.repetition_penalty = float(p.repetition_penalty);
  s.num_top_logprobs = p.params.logprobs ? *p.params.logprobs : -1;
  return s;
}

SampleResult Sampler::sample(const float* logits, const ResolvedSampling& p, const SamplerInput& in) {
  const SamplingParams& sp = p.params;
  const bool want_logprobs = sp.logprobs.has_value();
  const bool raw = mode_ == LogprobsMode::kRaw;
  ops::RowDraw d;
  if (want_logprobs && raw) {
    x_.assign(logits, logits + size_t(vocab_));
    ops::log_softmax_row(x_, lp_);
    ops::top_entries(lp_, *sp.logprobs, d.top);
  }

  // 1-2. Bias, min_tokens and penalties (process() starts again from the logits).
  process(logits, p, in);
  // 3-7. The draw (ops.h's definition), one uniform number from the sequence's RNG.
  ops::SampleSpec spec = sample_spec(p);
  if (!spec.greedy) spec.uniform = uniform01f(*in.rng);
  ops::sample_processed_row(x_, spec, raw, d);
  SampleResult r;
  r.token = d.token;
  if (want_logprobs) {
    r.logprob = raw ? lp_[size_t(d.token)] : d.logprob;
    for (const auto& [id, lp] : d.top) r.top.push_back({id, lp});
  }
  return r;
}

void Sampler::process(const float* logits, const ResolvedSampling& p, const SamplerInput& in) {
  const SamplingParams& sp = p.params;
  const size_t v = size_t(vocab_);
  x_.assign(logits, logits + v);
  for (const auto& [id, bias] : sp.logit_bias) x_[size_t(id)] += float(bias);
  const int32_t generated = int32_t(in.tokens->size()) - in.prompt_len;
  if (generated < sp.min_tokens) {
    for (int32_t id : p.eos_ids) x_[size_t(id)] = -INFINITY;
    for (int32_t id : sp.stop_token_ids) x_[size_t(id)] = -INFINITY;
  }
  if (p.repetition_penalty != 1.0) {
    seen_.assign(v, 0);
    for (int32_t t : *in.tokens) seen_[size_t(t)] = 1;
    const float rp = float(p.repetition_penalty);
    for (size_t i = 0; i < v; ++i) {
      if (seen_[i]) x_[i] = x_[i] > 0 ? x_[i] / rp : x_[i] * rp;
    }
  }
  if (sp.frequency_penalty != 0.0 || sp.presence_penalty != 0.0) {
    for (const auto& [id, count] : *in.output_counts) {
      x_[size_t(id)] -= float(sp.frequency_penalty * count + sp.presence_penalty);
    }
  }
  if (in.allow) {
    for (size_t i = 0; i < v; ++i) {
      if (!((in.allow[i >> 6] >> (i & 63)) & 1)) x_[i] = -INFINITY;
    }
  }
}

void Sampler::distribution(const float* logits, const ResolvedSampling& p, const SamplerInput& in,
                           std::vector<double>& probs) {
  STRATA_CHECK(!p.greedy(), "sampler: distribution() is for non-greedy requests");
  if (p.params.logprobs && mode_ == LogprobsMode::kRaw) raw_.assign(logits, logits + size_t(vocab_));
  process(logits, p, in);
  ops::kept_distribution(x_, sample_spec(p), probs);  // x_ is z now
}

SampleResult Sampler::result_for(int32_t token, const ResolvedSampling& p) {
  SampleResult r;
  r.token = token;
  if (!p.params.logprobs) return r;
  ops::log_softmax_row(mode_ == LogprobsMode::kRaw ? raw_ : x_, lp_);
  r.logprob = lp_[size_t(token)];
  std::vector<std::pair<int32_t, float>> top;
  ops::top_entries(lp_, *p.params.logprobs, top);
  for (const auto& [id, lp] : top) r.top.push_back({id, lp});
  return r;
}

}  // namespace strata
