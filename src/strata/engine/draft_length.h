// Dynamic draft length for speculative decoding (`"draft_length": "dynamic"` in
// --speculative-config): each sequence's number of drafts k in [0, K] is chosen every step from
// its recent acceptance, and a whole step drops speculation when it would cost more than it saves.
//
// Model. A sequence's drafts are accepted one after another with probability a each (its
// estimated per-draft acceptance: exponentially decayed counts of drafts reached and accepted in
// its verifies). With k drafts a step emits E(k) = 1 + a + ... + a^k tokens, and costs, in rows of
// a plain decode step (DraftCosts):
//   cost(k) = 1 + verify_row * k + head_row * (k - 1) + replay_row * R(k)
// where R(k) = sum_{j<k} a^j (1 - a) (j + 1) is the expected replayed tokens (a rejection after j
// accepted drafts replays j + 1; no replay term where the model keeps per-token states). Each
// sequence takes the k with the largest E(k) / cost(k) (k = 0: 1 / 1; ties to the smaller k).
// The head's first forward over the step's positions is in neither side (at k = 0 it is deferred
// to the sequence's next drafting step, Sequence::head_pending, and paid there).
// The batch rule adds what a speculating step pays once: `forward` (the fixed part of a forward)
// for the replay when any draft is rejected (where rejections replay) and for each head forward
// past the first. If the batch's tokens per cost with speculation, against B tokens per
// (forward + B) without, is below 1, every sequence gets k = 0 for this step.
// Recovery: a sequence that has had k = 0 for kProbeInterval steps (by its own choice or the
// batch rule's) drafts at least one token (a probe, exempt from the batch rule), so its estimate
// follows the text. Every other sequence of the step that may draft probes with it, so that idle
// sequences probe in the same steps and the steps between verify no draft at all.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

// Costs relative to one row of a plain decode step. The defaults are the default model's on the
// 2-core CPU (docs/BENCHMARKS.md "MTP speculative decoding on the CPU", `strata bench` at batch 1
// and 8, K = 1 and 3, its `speculative time:` line): a verify row costs 0.8-0.98 of a decode row
// (the CPU forward is one GEMV per row), a head row 0.22-0.23, a replayed token about one, and
// the fixed part of a forward 0.25 (the batch-1 decode step against the batch-8 per-row time).
struct DraftCosts {
  double verify_row = 0.9;
  double head_row = 0.22;
  double replay_row = 1.0;
  double forward = 0.25;
  // A rejection replays the accepted tokens (a second forward). False where the model stores the
  // verify's per-token states (ModelInfo::state_step_tokens): a rejection is then a slot copy,
  // and neither the replayed rows nor the replay's forward are charged.
  bool replays = true;
};

// One sequence's acceptance history (kept in its Sequence, across preemption).
struct DraftHistory {
  double reached = 1.0;   // decayed count of drafts verified (every earlier one accepted)
  double accepted = 1.0;  // decayed count of those accepted; 1 / 1: a new sequence starts at a = 1
  int32_t idle_steps = 0; // steps at k = 0 since it last drafted
};

class DraftLengthPolicy {
 public:
  static constexpr double kDecay = 0.8;        // per verify: the last ~5 verifies count most
  static constexpr int32_t kProbeInterval = 16;

  DraftLengthPolicy(int32_t max_k, const DraftCosts& costs);

  double acceptance(const DraftHistory& h) const { return h.accepted / h.reached; }
  double expected_tokens(double a, int32_t k) const;
  double cost(double a, int32_t k) const;
  // The k in [0, limit] (limit <= K) with the most tokens per cost.
  int32_t best(double a, int32_t limit) const;
  // The batch's tokens per cost with speculation over those without (histories[i] drafts ks[i]).
  double batch_gain(const std::vector<DraftHistory*>& histories, const std::vector<int32_t>& ks,
                    int32_t plain_rows) const;

  // This step's draft counts for the sequences that may draft (limits[i]: at most that many;
  // 0 when it cannot draft now) among `plain_rows` other rows of the step; updates idle_steps.
  std::vector<int32_t> plan(const std::vector<DraftHistory*>& histories, const std::vector<int32_t>& limits,
                            int32_t plain_rows) const;
  // A verify's outcome: `reached` drafts verified, `accepted` of them accepted.
  void observe(DraftHistory& h, int32_t reached, int32_t accepted) const;

 private:
  int32_t max_k_;
  DraftCosts costs_;
};

}  // namespace strata
