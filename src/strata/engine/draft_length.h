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
// Recovery: a sequence that has had k = 0 for its probe interval (by its own choice or the batch
// rule's) drafts at least one token (a probe, exempt from the batch rule), so its estimate
// follows the text. Every other sequence of the step that may draft probes with it, so that idle
// sequences probe in the same steps and the steps between verify no draft at all. The interval
// starts at kProbeInterval steps and doubles after each verify that leaves the sequence at k = 0
// (up to kMaxProbeInterval), or grows four times when the engine-wide acceptance (the prior,
// below) would not draft either, so that a text the head cannot predict costs ever fewer probes
// (at batch 64 of random weights, two probes in 256 steps instead of five); a verify after which
// it drafts again resets it. A new sequence starts at the interval of the
// last verify of any sequence (probes drag the whole batch in: a newcomer must not probe the
// batch at the first interval while the others have backed off).
// Prior: a sequence's estimate blends its own decayed counts with one pseudo-verify at the
// engine's acceptance over recent verifies of every sequence (the first sequences: a = 1), so
// that a new request starts where the others are, not at K. Until the engine's first verify, k
// is at most 1: the first verifies measure the acceptance at the least price (at a large batch
// of a MoE model a verify of K + 1 tokens a sequence reads several times a decode step's experts,
// one of two tokens about twice).
// Costs by batch size: what a verify row costs against a decode row depends on the device and the
// batch (on the CPU about one; on a GPU at batch 1 a fraction), so the engine measures them as it
// runs (StepCostMeter: the wall time of its decode steps and of its speculating steps, by batch
// size) and the policy uses them where measured (set_costs_by_batch), the configured costs
// elsewhere.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
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
  // Measured (StepCostMeter): step_ratio[k] > 0 is what a step verifying k drafts a sequence
  // costs against a decode step, the head forwards, the acceptance, rejections and the lost
  // overlap included; cost(a, k) is then that ratio, at an unmeasured k the ratio of the
  // nearest measured k below it, else above it (a speculating step's cost is mostly its fixed
  // part: the policy tries the deeper k and measures it). The fields above are not used then.
  std::vector<double> step_ratio;
  // From measured times of whole steps of a batch: `decode` a decode step (one token a
  // sequence), `speculating` a step verifying k drafts a sequence. The linear model through them:
  // verify_row the slope in k, the fixed part inside it (forward 0, head_row 0), no replays.
  static DraftCosts from_step_times(double decode, double speculating, int32_t k);
};

// Costs measured for batches of (seqs / 2, seqs] sequences (DraftLengthPolicy::set_costs_by_batch).
struct BatchCosts {
  int32_t seqs = 0;
  DraftCosts costs;
};

// The engine's measured step times by batch size (powers of two), the last few samples of each
// kind: of speculating steps the least counts, once there are kTrusted (a run's first
// speculating steps measured 9.5 and 5.1 ms against a fixed-K step's 1.3 at batch 16 of the
// default model on an H100, the cause not isolated; until then the policy keeps trying that k),
// of decode steps the mean (overlapped steps' times scatter around it both ways).
class StepCostMeter {
 public:
  static constexpr int kSamples = 4;
  static constexpr int kTrusted = 3;
  // A decode step of `seqs` sequences that drafted nothing, and a step whose `seqs` sequences
  // verified up to k drafts (the head forwards that drafted them included).
  void decode(int32_t seqs, double seconds);
  void speculating(int32_t seqs, int32_t k, double seconds);
  bool decode_measured(int32_t seqs) const { return decode_.count(bucket(seqs)) > 0; }
  // Costs for every batch size with both kinds measured (DraftCosts::step_ratio), ascending.
  std::vector<BatchCosts> costs() const;
  static int32_t bucket(int32_t seqs);

 private:
  struct Samples {
    double last[kSamples] = {};
    int32_t count = 0;
    void add(double seconds) { last[count++ % kSamples] = seconds; }
    double least() const;
    double mean() const;
  };
  std::map<int32_t, Samples> decode_;
  std::map<std::pair<int32_t, int32_t>, Samples> speculating_;  // by (bucket, k)
};

// One sequence's acceptance history (kept in its Sequence, across preemption).
struct DraftHistory {
  double reached = 0.0;   // decayed count of drafts verified (every earlier one accepted)
  double accepted = 0.0;  // decayed count of those accepted (the prior adds one pseudo-verify)
  int32_t idle_steps = 0; // steps at k = 0 since it last drafted
  int32_t probe_interval = 0;   // doubled by fruitless verifies; 0: the policy's (its last verify's)
  // Verified since the last plan, which sets probe_interval from the outcome (the prior then
  // counts every verify of that step).
  bool backing_off = false;
};

class DraftLengthPolicy {
 public:
  static constexpr double kDecay = 0.8;        // per verify: the last ~5 verifies count most
  static constexpr double kPriorDecay = 0.98;  // per verify of any sequence
  static constexpr int32_t kProbeInterval = 16;
  static constexpr int32_t kMaxProbeInterval = 256;

  DraftLengthPolicy(int32_t max_k, const DraftCosts& costs);
  // Costs by batch size, ascending in seqs: a step of n rows (drafters and plain rows) takes the
  // entry of n's bucket (StepCostMeter::bucket), else the constructor's costs.
  void set_costs_by_batch(std::vector<BatchCosts> table);
  const DraftCosts& costs_for(int32_t rows) const;

  // The sequence's estimated per-draft acceptance: its counts and one pseudo-verify at prior().
  double acceptance(const DraftHistory& h) const { return (h.accepted + prior()) / (h.reached + 1.0); }
  // The acceptance over recent verifies of every sequence (1 before the first).
  double prior() const { return prior_accepted_ / prior_reached_; }
  double expected_tokens(double a, int32_t k) const;
  // With the constructor's costs, or those given.
  double cost(double a, int32_t k) const { return cost(a, k, costs_); }
  double cost(double a, int32_t k, const DraftCosts& c) const;
  // The k in [0, limit] (limit <= K) with the most tokens per cost.
  int32_t best(double a, int32_t limit) const { return best(a, limit, costs_); }
  int32_t best(double a, int32_t limit, const DraftCosts& c) const;
  // The batch's tokens per cost with speculation over those without (histories[i] drafts ks[i]),
  // at the costs of a step of its size.
  double batch_gain(const std::vector<DraftHistory*>& histories, const std::vector<int32_t>& ks,
                    int32_t plain_rows) const;

  // This step's draft counts for the sequences that may draft (limits[i]: at most that many;
  // 0 when it cannot draft now) among `plain_rows` other rows of the step; updates idle_steps.
  std::vector<int32_t> plan(const std::vector<DraftHistory*>& histories, const std::vector<int32_t>& limits,
                            int32_t plain_rows) const;
  // A verify's outcome: `reached` drafts verified, `accepted` of them accepted (whether it then
  // drafts on, and its probe interval, are decided by the next plan).
  void observe(DraftHistory& h, int32_t reached, int32_t accepted);
  // Uniform steps: plan gives every drafter of a step one k (the batch's best, within each one's
  // limit), so that the step's verify and head forwards replay CUDA graphs (steps of mixed
  // lengths run eagerly: at batch 16 of the default model on an H100 the measured k = 3 step
  // fell from 7.7-8.2 decode steps with per-sequence lengths to 2.7-3.0 with one k).
  void set_uniform(bool uniform) { uniform_ = uniform; }

 private:
  // The batch rule of per-sequence plans: when the step's speculation (probes aside) gains
  // nothing, its sequences draft nothing.
  void drop_unprofitable(const std::vector<DraftHistory*>& histories, const std::vector<bool>& probe,
                         std::vector<int32_t>& ks, int32_t plain_rows) const;
  int32_t max_k_;
  DraftCosts costs_;
  std::vector<BatchCosts> by_batch_;
  double prior_reached_ = 1.0, prior_accepted_ = 1.0;
  bool verified_ = false;  // a verify was observed (before it, plans draft one token at most)
  mutable int32_t prior_interval_ = kProbeInterval;  // plan applies the verifies' back-offs
  bool uniform_ = false;
  int32_t interval(const DraftHistory& h) const { return h.probe_interval > 0 ? h.probe_interval : prior_interval_; }
  void apply_back_offs(const std::vector<DraftHistory*>& histories, const DraftCosts& c) const;
};

}  // namespace strata
