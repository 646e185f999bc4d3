#include "strata/engine/draft_length.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

DraftLengthPolicy::DraftLengthPolicy(int32_t max_k, const DraftCosts& costs) : max_k_(max_k), costs_(costs) {
  STRATA_CHECK(max_k >= 1, "DraftLengthPolicy: the maximum draft length must be positive, got ", max_k);
}

double DraftLengthPolicy::expected_tokens(double a, int32_t k) const {
  double tokens = 1, run = 1;
  for (int32_t j = 1; j <= k; ++j) tokens += run *= a;
  return tokens;
}

double DraftLengthPolicy::cost(double a, int32_t k) const {
  if (k == 0) return 1;
  double replayed = 0, run = 1;  // run: a^j, every draft before j accepted
  for (int32_t j = 0; j < k; ++j) {
    replayed += run * (1 - a) * (j + 1);
    run *= a;
  }
  return 1 + costs_.verify_row * k + costs_.head_row * (k - 1) + (costs_.replays ? costs_.replay_row * replayed : 0.0);
}

int32_t DraftLengthPolicy::best(double a, int32_t limit) const {
  int32_t best_k = 0;
  double best_rate = 1;
  for (int32_t k = 1; k <= std::min(limit, max_k_); ++k) {
    const double rate = expected_tokens(a, k) / cost(a, k);
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
  double tokens = plain_rows, spent = costs_.forward + plain_rows, all_accepted = 1;
  int32_t deepest = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    const double a = acceptance(*histories[i]);
    tokens += expected_tokens(a, ks[i]);
    spent += cost(a, ks[i]);
    for (int32_t j = 0; j < ks[i]; ++j) all_accepted *= a;
    deepest = std::max(deepest, ks[i]);
  }
  if (deepest == 0 || rows == 0) return 1;
  // The replay (where rejections replay), the deeper head forwards.
  spent += costs_.forward * ((costs_.replays ? 1 - all_accepted : 0.0) + (deepest - 1));
  return (tokens / spent) / (rows / (costs_.forward + rows));
}

std::vector<int32_t> DraftLengthPolicy::plan(const std::vector<DraftHistory*>& histories,
                                             const std::vector<int32_t>& limits, int32_t plain_rows) const {
  STRATA_CHECK(histories.size() == limits.size(), "DraftLengthPolicy: one limit per history");
  std::vector<int32_t> ks(histories.size(), 0);
  std::vector<bool> probe(histories.size(), false);
  for (size_t i = 0; i < histories.size(); ++i) {
    ks[i] = best(acceptance(*histories[i]), limits[i]);
    // Idle long enough (by its own choice or the batch rule's): it drafts whatever the batch.
    probe[i] = limits[i] > 0 && histories[i]->idle_steps + 1 >= kProbeInterval;
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
  for (size_t i = 0; i < histories.size(); ++i) {
    if (limits[i] == 0) continue;  // it could not draft: not a step at k = 0 by choice
    histories[i]->idle_steps = ks[i] > 0 ? 0 : histories[i]->idle_steps + 1;
  }
  return ks;
}

void DraftLengthPolicy::observe(DraftHistory& h, int32_t reached, int32_t accepted) const {
  STRATA_CHECK(reached >= 0 && accepted >= 0 && accepted <= reached, "DraftLengthPolicy: bad verify outcome ",
               accepted, " of ", reached);
  if (reached == 0) return;
  h.reached = kDecay * h.reached + reached;
  h.accepted = kDecay * h.accepted + accepted;
}

}  // namespace strata
