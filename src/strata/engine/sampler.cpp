#include "strata/engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace strata {

void Sampler::log_softmax(const std::vector<float>& x, std::vector<float>& out) const {
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - double(mx));
  const double lse = double(mx) + std::log(sum);
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float(double(x[i]) - lse);
}

void Sampler::top_logprobs(const std::vector<float>& lp, int n, std::vector<TokenLogprob>& out) {
  out.clear();
  if (n <= 0) return;
  order_.resize(lp.size());
  for (size_t i = 0; i < lp.size(); ++i) order_[i] = int32_t(i);
  const size_t k = std::min(size_t(n), lp.size());
  std::partial_sort(order_.begin(), order_.begin() + ptrdiff_t(k), order_.end(),
                    [&](int32_t a, int32_t b) { return lp[size_t(a)] > lp[size_t(b)] || (lp[size_t(a)] == lp[size_t(b)] && a < b); });
  for (size_t i = 0; i < k; ++i) out.push_back({order_[i], lp[size_t(order_[i])]});
}

SampleResult Sampler::sample(const float* logits, const ResolvedSampling& p, const SamplerInput& in) {
  const SamplingParams& sp = p.params;
  const size_t v = size_t(vocab_);
  const bool want_logprobs = sp.logprobs.has_value();
  x_.assign(logits, logits + v);
  SampleResult r;
  if (want_logprobs && mode_ == LogprobsMode::kRaw) log_softmax(x_, lp_);

  // 1. Bias and min_tokens.
  for (const auto& [id, bias] : sp.logit_bias) x_[size_t(id)] += float(bias);
  const int32_t generated = int32_t(in.tokens->size()) - in.prompt_len;
  if (generated < sp.min_tokens) {
    for (int32_t id : p.eos_ids) x_[size_t(id)] = -INFINITY;
    for (int32_t id : sp.stop_token_ids) x_[size_t(id)] = -INFINITY;
  }
  // 2. Penalties.
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

  if (p.greedy()) {
    r.token = int32_t(std::max_element(x_.begin(), x_.end()) - x_.begin());
  } else {
    // 4. Temperature, then the distribution.
    const float inv_t = float(1.0 / p.temperature);
    for (float& z : x_) z *= inv_t;
  }
  if (want_logprobs && mode_ == LogprobsMode::kProcessed) log_softmax(x_, lp_);

  if (!p.greedy()) {
    float mx = -INFINITY;
    for (float z : x_) mx = std::max(mx, z);
    probs_.resize(v);
    for (size_t i = 0; i < v; ++i) probs_[i] = std::exp(double(x_[i]) - double(mx));
    // 5. min-p: drop tokens below min_p times the most likely one (whose weight is 1 here).
    if (p.min_p > 0) {
      for (size_t i = 0; i < v; ++i) {
        if (probs_[i] < p.min_p) probs_[i] = 0;
      }
    }
    const bool sorted = p.top_k > 0 || p.top_p < 1.0;
    order_.clear();
    for (size_t i = 0; i < v; ++i) {
      if (probs_[i] > 0) order_.push_back(int32_t(i));
    }
    if (sorted) {
      auto more_likely = [&](int32_t a, int32_t b) {
        return probs_[size_t(a)] > probs_[size_t(b)] || (probs_[size_t(a)] == probs_[size_t(b)] && a < b);
      };
      // 6. top-k.
      if (p.top_k > 0 && size_t(p.top_k) < order_.size()) {
        std::partial_sort(order_.begin(), order_.begin() + p.top_k, order_.end(), more_likely);
        order_.resize(size_t(p.top_k));
      } else {
        std::sort(order_.begin(), order_.end(), more_likely);
      }
      // 7. top-p over what is left, renormalised.
      if (p.top_p < 1.0) {
        double kept = 0;
        for (int32_t id : order_) kept += probs_[size_t(id)];
        double cum = 0;
        size_t keep = 0;
        while (keep < order_.size() && cum < p.top_p * kept) cum += probs_[size_t(order_[keep++])];
        order_.resize(std::max<size_t>(keep, 1));
      }
    }
    if (order_.empty()) order_.push_back(int32_t(std::max_element(x_.begin(), x_.end()) - x_.begin()));
    double mass = 0;
    for (int32_t id : order_) mass += probs_[size_t(id)];
    const double u = uniform01(*in.rng) * mass;
    double cum = 0;
    r.token = order_.back();
    for (int32_t id : order_) {
      cum += probs_[size_t(id)];
      if (u < cum) {
        r.token = id;
        break;
      }
    }
  }
  if (want_logprobs) {
    r.logprob = lp_[size_t(r.token)];
    top_logprobs(lp_, *sp.logprobs, r.top);
  }
  return r;
}

}  // namespace strata
