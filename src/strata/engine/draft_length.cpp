#include "strata/engine/draft_length.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

DraftCosts DraftCosts::from_step_times(double decode, double speculating, int32_t k) {
  STRATA_CHECK(decode > 0 && speculating > 0 && k >= 1, "DraftCosts: bad step times ", decode, ", ", speculating,
               " at k = ", k);
  DraftCosts c;
  c.verify_row = std::max(0.0, speculating / decode - 1) / k;
  c.head_row = 0;
  c.replay_row = 0;
  c.forward = 0;
  c.replays = false;
  return c;
}

int32_t StepCostMeter::bucket(int32_t seqs) {
  int32_t b = 1;
  while (b < seqs) b *= 2;
  return b;
}

double StepCostMeter::Samples::mean() const {
  const int32_t n = std::min(count, kSamples);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += last[i];
  return sum / n;
}

double StepCostMeter::Samples::least() const {
  double m = last[0];
  for (int32_t i = 1; i < std::min(count, kSamples); ++i) m = std::min(m, last[i]);
  return m;
}

void StepCostMeter::decode(int32_t seqs, double seconds) {
  if (seqs > 0 && seconds > 0) decode_[bucket(seqs)].add(seconds);
}

void StepCostMeter::speculating(int32_t seqs, int32_t k, double seconds) {
  if (seqs > 0 && k > 0 && seconds > 0) speculating_[{bucket(seqs), k}].add(seconds);
}

std::vector<BatchCosts> StepCostMeter::costs() const {
  std::vector<BatchCosts> out;
  for (const auto& [b, plain] : decode_) {
    BatchCosts bc{b, DraftCosts::from_step_times(1, 1, 1)};
    for (auto it = speculating_.lower_bound({b, 0}); it != speculating_.end() && it->first.first == b; ++it) {
      const int32_t k = it->first.second;
      if (it->second.count < kTrusted) continue;
      if (int32_t(bc.costs.step_ratio.size()) <= k) bc.costs.step_ratio.resize(size_t(k) + 1, 0.0);
      bc.costs.step_ratio[size_t(k)] = it->second.least() / plain.mean();
    }
    if (!bc.costs.step_ratio.empty()) out.push_back(bc);
  }
  return out;
}

DraftLengthPolicy::DraftLengthPolicy(int32_t max_k, const DraftCosts& costs) : max_k_(max_k), costs_(costs) {
  STRATA_CHECK(max_k >= 1, "DraftLengthPolicy: the maximum draft length must be positive, got ", max_k);
}

void DraftLengthPolicy::set_costs_by_batch(std::vector<BatchCosts> table) {
  for (size_t i = 0; i < table.size(); ++i) {
    STRATA_CHECK(table[i].seqs > 0 && (i == 0 || table[i].seqs > table[i - 1].seqs),
                 "DraftLengthPolicy: batch costs must be by ascending batch size");
  }
  by_batch_ = std::move(table);
}

const DraftCosts& DraftLengthPolicy::costs_for(int32_t rows) const {
  const int32_t b = StepCostMeter::bucket(rows);
  for (const BatchCosts& c : by_batch_) {
    if (c.seqs == b) return c.costs;
  }
  return costs_;
}

double DraftLengthPolicy::expected_tokens(double a, int32_t k) const {
  double tokens = 1, run = 1;
  for (int32_t j = 1; j <= k; ++j) tokens += run *= a;
  return tokens;
}

double DraftLengthPolicy::cost(double a, int32_t k, const DraftCosts& c) const {
  if (k == 0) return 1;
  const int32_t n = int32_t(c.step_ratio.size());
  for (int32_t j = std::min(k, n - 1); j >= 1; --j) {
    if (c.step_ratio[size_t(j)] > 0) return c.step_ratio[size_t(j)];
  }
  for (int32_t j = k + 1; j < n; ++j) {
    if (c.step_ratio[size_t(j)] > 0) return c.step_ratio[size_t(j)];
  }
  double replayed = 0, run = 1;  // run: a^j, every draft before j accepted
  for (int32_t j = 0; j < k; ++j) {
    replayed += run * (1 - a) * (j + 1);
    run *= a;
  }
  return 1 + c.verify_row * k + c.head_row * (k - 1) + (c.replays ? c.replay_row * replayed : 0.0);
}

int32_t DraftLengthPolicy::best(double a, int32_t limit, const DraftCosts& c) const {
  int32_t best_k = 0;
  double best_rate = 1;
  for (int32_t k = 1; k <= std::min(limit, max_k_); ++k) {
    const double rate = expected_tokens(a, k) / cost(a, k, c);
    if (rate > best_rate) {
      best_rate = rate;
      best_k = k;
    }
  }
  return best_k;
}

double DraftLengthPolicy::batch_gain(const std::vector<DraftHistory*>& histories, const std::vector<int32_t>& ks,
                                     int32_t plain_rows) const {
  STRATA_CHECK(histories.size() == ks.size(), "DraftLengthPolicy: one draft count per history");
  const double rows = double(plain_rows) + double(histories.size());
  const DraftCosts& c = costs_for(int32_t(rows));
  double tokens = plain_rows, spent = c.forward + plain_rows, all_accepted = 1;
  int32_t deepest = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    const double a = acceptance(*histories[i]);
    tokens += expected_tokens(a, ks[i]);
    spent += cost(a, ks[i], c);
    for (int32_t j = 0; j < ks[i]; ++j) all_accepted *= a;
    deepest = std::max(deepest, ks[i]);
  }
  if (deepest == 0 || rows == 0) return 1;
  // The replay (where rejections replay), the deeper head forwards.
  spent += c.forward * ((c.replays ? 1 - all_accepted : 0.0) + (deepest - 1));
  return (tokens / spent) / (rows / (c.forward + rows));
}

std::vector<int32_t> DraftLengthPolicy::plan(const std::vector<DraftHistory*>& histories,
                                             const std::vector<int32_t>& wanted_limits, int32_t plain_rows) const {
  STRATA_CHECK(histories.size() == wanted_limits.size(), "DraftLengthPolicy: one limit per history");
  // Before the engine's first verify, one draft at most: the first verifies measure the
  // acceptance (and the step's cost) at the least price; k grows from there as they accept.
  std::vector<int32_t> limits = wanted_limits;
  if (!verified_) {
    for (int32_t& l : limits) l = std::min(l, 1);
  }
  std::vector<int32_t> ks(histories.size(), 0);
  std::vector<bool> probe(histories.size(), false);
  const DraftCosts& c = costs_for(int32_t(histories.size()) + plain_rows);
  apply_back_offs(histories, c);
  for (size_t i = 0; i < histories.size(); ++i) {
    ks[i] = best(acceptance(*histories[i]), limits[i], c);
    // Idle long enough (by its own choice or the batch rule's): it drafts whatever the batch.
    probe[i] = limits[i] > 0 && histories[i]->idle_steps + 1 >= interval(*histories[i]);
    if (probe[i]) ks[i] = std::max(ks[i], 1);
  }
  // Probes go together: when one sequence is due, every other that may draft probes with it (one
  // draft at least), so that their idle counts stay in step and the steps between probes verify
  // no draft anywhere (a uniform batch: the verify and head graphs' shapes).
  if (std::find(probe.begin(), probe.end(), true) != probe.end()) {
    for (size_t i = 0; i < histories.size(); ++i) {
      if (limits[i] > 0 && !probe[i]) {
        probe[i] = true;
        ks[i] = std::max(ks[i], 1);
      }
    }
  }
  if (uniform_) {
    // One k for the step (each sequence at most its limit, a probe at least one): the k with the
    // largest batch gain over 1 (ties to the smaller).
    int32_t best_k = 0;
    double best_gain = 1;
    std::vector<int32_t> trial(ks.size());
    for (int32_t k = 1; k <= max_k_; ++k) {
      for (size_t i = 0; i < ks.size(); ++i) trial[i] = std::min(k, limits[i]);
      const double g = batch_gain(histories, trial, plain_rows);
      if (g > best_gain) {
        best_gain = g;
        best_k = k;
      }
    }
    const bool probing = std::find(probe.begin(), probe.end(), true) != probe.end();
    for (size_t i = 0; i < ks.size(); ++i) ks[i] = std::min(std::max(best_k, probing ? 1 : 0), limits[i]);
  } else {
    drop_unprofitable(histories, probe, ks, plain_rows);
  }
  for (size_t i = 0; i < histories.size(); ++i) {
    if (limits[i] == 0) continue;  // it could not draft: not a step at k = 0 by choice
    histories[i]->idle_steps = ks[i] > 0 ? 0 : histories[i]->idle_steps + 1;
  }
  return ks;
}

void DraftLengthPolicy::drop_unprofitable(const std::vector<DraftHistory*>& histories, const std::vector<bool>& probe,
                                          std::vector<int32_t>& ks, int32_t plain_rows) const {
  std::vector<DraftHistory*> bet_histories;
  std::vector<int32_t> bets;
  for (size_t i = 0; i < histories.size(); ++i) {
    if (probe[i]) continue;
    bet_histories.push_back(histories[i]);
    bets.push_back(ks[i]);
  }
  if (batch_gain(bet_histories, bets, plain_rows) < 1) {
    for (size_t i = 0; i < ks.size(); ++i) {
      if (!probe[i]) ks[i] = 0;
    }
  }
}

void DraftLengthPolicy::observe(DraftHistory& h, int32_t reached, int32_t accepted) {
  STRATA_CHECK(reached >= 0 && accepted >= 0 && accepted <= reached, "DraftLengthPolicy: bad verify outcome ",
               accepted, " of ", reached);
  if (reached == 0) return;
  h.reached = kDecay * h.reached + reached;
  h.accepted = kDecay * h.accepted + accepted;
  verified_ = true;
  prior_reached_ = kPriorDecay * prior_reached_ + reached;
  prior_accepted_ = kPriorDecay * prior_accepted_ + accepted;
  h.backing_off = true;
}

// Back to k = 0 after its verify: the next probe waits twice as long, four times when the
// engine's recent acceptance would not draft either (the other sequences' verifies agree);
// drafting on: the first interval. Decided at the plan after the verify, so that the prior (in
// each sequence's estimate too) has every verify of that step: at batch 64 the first of a step's
// 64 fruitless verifies sees a prior near 1, the last one near 0.
void DraftLengthPolicy::apply_back_offs(const std::vector<DraftHistory*>& histories, const DraftCosts& c) const {
  const int32_t growth = best(prior(), max_k_, c) == 0 ? 4 : 2;
  const int32_t before = prior_interval_;  // a new sequence's interval: the one before this step's verifies
  for (DraftHistory* h : histories) {
    if (!h->backing_off) continue;
    const int32_t last = h->probe_interval > 0 ? h->probe_interval : before;
    h->probe_interval = best(acceptance(*h), max_k_, c) == 0 ? std::min(growth * last, kMaxProbeInterval)
                                                             : kProbeInterval;
    h->backing_off = false;
    prior_interval_ = h->probe_interval;
  }
}

}  // namespace strata
