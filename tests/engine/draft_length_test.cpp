// The dynamic draft length policy (draft_length.h): a sequence whose drafts are all rejected goes
// down to k = 0 and is re-probed; one whose drafts are all accepted stays at K; a step whose
// speculation would cost more than it saves runs without drafts; the CPU's costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "strata/core/error.h"
#include "strata/engine/draft_length.h"

namespace strata::testing {
namespace {

// Verify rows nearly free (a GPU at small batch): drafting pays from a modest acceptance.
DraftCosts cheap_costs() {
  DraftCosts c;
  c.verify_row = 0.1;
  c.head_row = 0.05;
  c.replay_row = 0.5;
  c.forward = 0.25;
  return c;
}

int32_t plan_one(const DraftLengthPolicy& p, DraftHistory& h, int32_t limit = 3) {
  return p.plan({&h}, {limit}, 0)[0];
}

TEST(DraftLength, AllRejectedGoesToZeroAndReprobes) {
  const DraftLengthPolicy p(3, cheap_costs());
  DraftHistory h;
  EXPECT_EQ(plan_one(p, h), 3) << "a new sequence starts at K";
  int32_t steps = 0, k = 3;
  while (k > 0 && steps < 20) {
    p.observe(h, 1, 0);  // the first draft rejected: the rest were not reached
    k = plan_one(p, h);
    ++steps;
  }
  ASSERT_EQ(k, 0) << "still drafting after 20 steps of rejections";
  EXPECT_LE(steps, 6);
  // Idle steps until the probe: one draft, then idle again while it is rejected.
  for (int32_t i = 2; i < DraftLengthPolicy::kProbeInterval; ++i) EXPECT_EQ(plan_one(p, h), 0) << "step " << i;
  EXPECT_EQ(plan_one(p, h), 1) << "no probe after " << DraftLengthPolicy::kProbeInterval << " idle steps";
  EXPECT_EQ(h.idle_steps, 0);
  p.observe(h, 1, 0);
  EXPECT_EQ(plan_one(p, h), 0);
  // Probes that are accepted bring it back.
  for (int32_t probe = 0; probe < 6 && k < 3; ++probe) {
    while ((k = plan_one(p, h)) == 0) {
    }
    p.observe(h, k, k);
  }
  EXPECT_GE(plan_one(p, h), 2) << "accepted probes did not raise k (a = " << p.acceptance(h) << ")";
}

TEST(DraftLength, AllAcceptedStaysAtK) {
  const DraftLengthPolicy p(4, cheap_costs());
  DraftHistory h;
  for (int32_t step = 0; step < 50; ++step) {
    const int32_t k = plan_one(p, h, 4);
    ASSERT_EQ(k, 4) << "step " << step;
    p.observe(h, k, k);
  }
  EXPECT_DOUBLE_EQ(p.acceptance(h), 1.0);
  EXPECT_EQ(plan_one(p, h, 2), 2) << "the limit (max_tokens, the context) caps k";
  EXPECT_EQ(plan_one(p, h, 0), 0);
}

TEST(DraftLength, ExpectedTokensAndCost) {
  DraftCosts c;
  c.verify_row = 0.5;
  c.head_row = 0.25;
  c.replay_row = 1.0;
  const DraftLengthPolicy p(3, c);
  EXPECT_DOUBLE_EQ(p.expected_tokens(0.5, 0), 1.0);
  EXPECT_DOUBLE_EQ(p.expected_tokens(0.5, 2), 1.75);
  EXPECT_DOUBLE_EQ(p.cost(0.5, 0), 1.0);
  // k = 2: 1 + 2 verify rows + 1 head row + replays (0.5 * 1 + 0.25 * 2).
  EXPECT_DOUBLE_EQ(p.cost(0.5, 2), 1 + 1.0 + 0.25 + 1.0);
  EXPECT_DOUBLE_EQ(p.cost(1.0, 3), 1 + 1.5 + 0.5);  // nothing replayed
  c.replays = false;  // per-token states: a rejection is a slot copy
  const DraftLengthPolicy q(3, c);
  EXPECT_DOUBLE_EQ(q.cost(0.5, 2), 1 + 1.0 + 0.25);
}

// The fixed cost of a speculating step (the replay, the deeper head forwards) is shared by the
// batch: alone a sequence does not win it back, in a batch of 16 such sequences it does.
TEST(DraftLength, BatchRuleDropsSpeculationThatCostsMore) {
  DraftCosts c;
  c.verify_row = 0.05;
  c.head_row = 0.05;
  c.replay_row = 0.2;
  c.forward = 2.0;
  const DraftLengthPolicy p(2, c);
  DraftHistory h;
  h.reached = 10;
  h.accepted = 4;  // a = 0.4: alone, k = 1 gains 1.4 / 1.17 per row
  ASSERT_EQ(p.best(0.4, 2), 1);
  EXPECT_LT(p.batch_gain({&h}, {1}, 0), 1.0);
  EXPECT_EQ(p.plan({&h}, {2}, 0), std::vector<int32_t>{0}) << "one sequence: the step's fixed cost is not won back";
  EXPECT_EQ(h.idle_steps, 1);
  // Without replays (per-token states) the same sequence alone wins its step back:
  // (1.4 / (2 + 1.05)) / (1 / 3) = 1.38, against 0.96 with the replay charged.
  DraftCosts no_replay = c;
  no_replay.replays = false;
  const DraftLengthPolicy states(2, no_replay);
  EXPECT_NEAR(states.batch_gain({&h}, {1}, 0), 1.4 / 3.05 * 3, 1e-12);
  EXPECT_NEAR(p.batch_gain({&h}, {1}, 0), 1.4 / (2 + 1.05 + 0.2 * 0.6 + 2 * 0.6) * 3, 1e-12);
  std::vector<DraftHistory> many(16, h);
  std::vector<DraftHistory*> ptrs;
  for (DraftHistory& m : many) ptrs.push_back(&m);
  const std::vector<int32_t> ks = p.plan(ptrs, std::vector<int32_t>(16, 2), 0);
  EXPECT_EQ(ks, std::vector<int32_t>(16, 1)) << "16 sequences share the fixed cost";
  EXPECT_GT(p.batch_gain(ptrs, ks, 0), 1.0);
  // Plain rows (sequences that cannot draft) dilute the gain: with 200 of them it goes.
  EXPECT_LT(p.batch_gain(ptrs, ks, 200), p.batch_gain(ptrs, ks, 0));
  // A probe runs even when the batch rule drops the others, and the others probe with it.
  DraftHistory hopeless;
  hopeless.reached = 10;
  hopeless.accepted = 0;
  hopeless.idle_steps = DraftLengthPolicy::kProbeInterval - 1;
  EXPECT_EQ(p.plan({&h, &hopeless}, {2, 2}, 0), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(h.idle_steps, 0);
  // One that cannot draft now (limit 0) does not.
  hopeless.idle_steps = DraftLengthPolicy::kProbeInterval - 1;
  EXPECT_EQ(p.plan({&h, &hopeless}, {0, 2}, 0), (std::vector<int32_t>{0, 1}));
}

// Sequences that went idle at different steps probe together after the first probe: the steps
// between probes then verify no draft at all (uniform batches, which graphs replay).
TEST(DraftLength, IdleSequencesProbeInTheSameSteps) {
  const DraftLengthPolicy p(3, cheap_costs());
  std::vector<DraftHistory> hs(3);
  for (size_t i = 0; i < hs.size(); ++i) {
    hs[i].reached = 10;
    hs[i].accepted = 0;  // hopeless: k = 0 unless probing
    hs[i].idle_steps = int32_t(i) * 5;  // staggered
  }
  std::vector<DraftHistory*> ptrs{&hs[0], &hs[1], &hs[2]};
  const std::vector<int32_t> limits(3, 3);
  std::vector<int32_t> probe_steps;
  for (int32_t step = 0; step < 3 * DraftLengthPolicy::kProbeInterval; ++step) {
    const std::vector<int32_t> ks = p.plan(ptrs, limits, 0);
    const int32_t drafting = int32_t(std::count_if(ks.begin(), ks.end(), [](int32_t k) { return k > 0; }));
    ASSERT_TRUE(drafting == 0 || drafting == 3) << "step " << step << ": " << drafting << " of 3 probe";
    if (drafting == 3) {
      probe_steps.push_back(step);
      for (DraftHistory* h : ptrs) p.observe(*h, 1, 0);
    }
  }
  ASSERT_GE(probe_steps.size(), 2u);
  EXPECT_EQ(probe_steps[0], DraftLengthPolicy::kProbeInterval - 1 - 10) << "the longest idle is due first";
  for (size_t i = 1; i < probe_steps.size(); ++i) {
    EXPECT_EQ(probe_steps[i] - probe_steps[i - 1], DraftLengthPolicy::kProbeInterval) << "probe " << i;
  }
}

// The CPU's measured costs: a verify row costs about a decode row, so only a sequence whose
// drafts are nearly always accepted drafts (one token), and a typical one (a = 0.75) does not.
TEST(DraftLength, CpuCostsDraftOnlyNearCertainTokens) {
  const DraftLengthPolicy p(3, DraftCosts{});
  EXPECT_EQ(p.best(0.75, 3), 0);
  EXPECT_EQ(p.best(0.92, 3), 0);
  EXPECT_EQ(p.best(1.0, 3), 1);
}

TEST(DraftLength, BadArgumentsAreRefused) {
  EXPECT_THROW(DraftLengthPolicy(0, DraftCosts{}), Error);
  const DraftLengthPolicy p(2, DraftCosts{});
  DraftHistory h;
  EXPECT_THROW(p.observe(h, 1, 2), Error);
  EXPECT_THROW(p.plan({&h}, {}, 0), Error);
}

}  // namespace
}  // namespace strata::testing
