// The dynamic draft length policy (draft_length.h): a sequence whose drafts are all rejected goes
// down to k = 0 and is re-probed, ever less often while its probes fail; one whose drafts are all
// accepted stays at K; a step whose speculation would cost more than it saves runs without
// drafts; a new sequence starts at the others' acceptance; the CPU's costs and measured ones.
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
  DraftLengthPolicy p(3, cheap_costs());
  DraftHistory h;
  EXPECT_EQ(plan_one(p, h), 1) << "before the engine's first verify: one draft";
  int32_t steps = 0, k = 1;
  while (k > 0 && steps < 20) {
    p.observe(h, 1, 0);  // the first draft rejected: the rest were not reached
    k = plan_one(p, h);
    ++steps;
  }
  ASSERT_EQ(k, 0) << "still drafting after 20 steps of rejections";
  EXPECT_LE(steps, 6);
  EXPECT_EQ(h.probe_interval, 2 * DraftLengthPolicy::kProbeInterval) << "the verify that stopped it";
  // Idle steps until the probe: one draft, then idle again while it is rejected, each wait
  // twice the last, four times once the engine's recent acceptance (the prior: here this
  // sequence's) would not draft either, up to the longest.
  int32_t quadrupled = 0;
  for (int32_t interval = h.probe_interval, probe = 0; probe < 6; ++probe) {
    // Idle plans before the probe: interval - 1 (the first round: one was made above; the plan
    // after a verify applies its back-off).
    if (probe > 0) {
      ASSERT_EQ(plan_one(p, h), 0) << "probe " << probe << ", step 1";
      EXPECT_EQ(h.probe_interval, interval) << "probe " << probe;
    }
    for (int32_t i = 2; i < interval; ++i) {
      ASSERT_EQ(plan_one(p, h), 0) << "probe " << probe << ", step " << i;
    }
    ASSERT_EQ(plan_one(p, h), 1) << "no probe after " << interval << " idle steps";
    EXPECT_EQ(h.idle_steps, 0);
    p.observe(h, 1, 0);
    const int32_t growth = p.best(p.prior(), 3) == 0 ? 4 : 2;
    quadrupled += growth == 4 && interval < DraftLengthPolicy::kMaxProbeInterval;
    interval = std::min(growth * interval, DraftLengthPolicy::kMaxProbeInterval);
  }
  EXPECT_GT(quadrupled, 0) << "the prior fell below drafting, and the waits still doubled";
  EXPECT_EQ(plan_one(p, h), 0);
  // Probes that are accepted bring it back.
  for (int32_t probe = 0; probe < 6 && k < 3; ++probe) {
    while ((k = plan_one(p, h)) == 0) {
    }
    p.observe(h, k, k);
  }
  EXPECT_GE(plan_one(p, h), 2) << "accepted probes did not raise k (a = " << p.acceptance(h) << ")";
  EXPECT_EQ(h.probe_interval, DraftLengthPolicy::kProbeInterval) << "drafting again: the first interval";
}

// A new sequence's estimate is the acceptance of recent verifies (one pseudo-verify), not 1:
// after many rejections elsewhere it starts at k = 0; after acceptances, at K.
TEST(DraftLength, NewSequencesStartAtTheOthersAcceptance) {
  DraftLengthPolicy p(3, cheap_costs());
  EXPECT_DOUBLE_EQ(p.prior(), 1.0);
  DraftHistory old;
  for (int32_t i = 0; i < 200; ++i) {
    p.observe(old, 3, 0);
    plan_one(p, old);  // applies the verify's back-off
  }
  EXPECT_LT(p.prior(), 0.02);
  DraftHistory fresh;
  EXPECT_DOUBLE_EQ(p.acceptance(fresh), p.prior());
  EXPECT_EQ(plan_one(p, fresh), 0) << "a new sequence after rejections everywhere";
  // ... and it probes no sooner than the others, who have backed off to the longest interval.
  for (int32_t i = 2; i < DraftLengthPolicy::kMaxProbeInterval; ++i) ASSERT_EQ(plan_one(p, fresh), 0) << "step " << i;
  EXPECT_EQ(plan_one(p, fresh), 1);
  for (int32_t i = 0; i < 400; ++i) p.observe(old, 3, 3);
  EXPECT_GT(p.prior(), 0.95);
  DraftHistory later;
  EXPECT_EQ(plan_one(p, later), 3) << "a new sequence after acceptances everywhere";
  // Its own counts outweigh the prior quickly: two verifies of three drafts all rejected.
  p.observe(later, 1, 0);
  p.observe(later, 1, 0);
  EXPECT_LT(p.acceptance(later), 0.4);
}

TEST(DraftLength, AllAcceptedStaysAtK) {
  DraftLengthPolicy p(4, cheap_costs());
  DraftHistory h;
  for (int32_t step = 0; step < 50; ++step) {
    const int32_t k = plan_one(p, h, 4);
    ASSERT_EQ(k, step == 0 ? 1 : 4) << "step " << step << " (the engine's first verify: one draft)";
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
  h.reached = 9;
  h.accepted = 3;  // with the prior's pseudo-verify (a fresh policy: 1), a = 0.4: alone, k = 1 gains 1.4 / 1.17 per row
  ASSERT_DOUBLE_EQ(p.acceptance(h), 0.4);
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
  DraftLengthPolicy p(3, cheap_costs());
  std::vector<DraftHistory> hs(3);
  for (size_t i = 0; i < hs.size(); ++i) {
    hs[i].reached = 10;
    hs[i].accepted = 0;  // hopeless: k = 0 unless probing
    hs[i].idle_steps = int32_t(i) * 5;  // staggered
  }
  std::vector<DraftHistory*> ptrs{&hs[0], &hs[1], &hs[2]};
  const std::vector<int32_t> limits(3, 3);
  std::vector<int32_t> probe_steps;
  for (int32_t step = 0; step < 16 * DraftLengthPolicy::kProbeInterval; ++step) {
    const std::vector<int32_t> ks = p.plan(ptrs, limits, 0);
    const int32_t drafting = int32_t(std::count_if(ks.begin(), ks.end(), [](int32_t k) { return k > 0; }));
    ASSERT_TRUE(drafting == 0 || drafting == 3) << "step " << step << ": " << drafting << " of 3 probe";
    if (drafting == 3) {
      probe_steps.push_back(step);
      for (DraftHistory* h : ptrs) p.observe(*h, 1, 0);
    }
  }
  // At 5, then 5 + 64 (each fruitless probe quadruples the wait: the prior, over all three
  // sequences' verifies, would not draft either), and 69 + 256 is past the end.
  ASSERT_EQ(probe_steps.size(), 2u);
  EXPECT_EQ(probe_steps[0], DraftLengthPolicy::kProbeInterval - 1 - 10) << "the longest idle is due first";
  EXPECT_EQ(probe_steps[1] - probe_steps[0], 4 * DraftLengthPolicy::kProbeInterval);
}

// The back-off of a step's verifies is decided after all of them, on the prior they make
// together: at batch 64, the first fruitless verify of a fresh engine sees a prior near 1 and
// the last one near 0, and all 64 wait four times the first interval (one that doubled would
// bring the whole batch's next probe forward).
TEST(DraftLength, OneStepsVerifiesBackOffTogether) {
  DraftLengthPolicy p(3, cheap_costs());
  std::vector<DraftHistory> hs(64);
  std::vector<DraftHistory*> ptrs;
  for (DraftHistory& h : hs) ptrs.push_back(&h);
  const std::vector<int32_t> limits(64, 3);
  EXPECT_EQ(p.plan(ptrs, limits, 0), std::vector<int32_t>(64, 1)) << "a fresh engine drafts one token";
  for (DraftHistory* h : ptrs) p.observe(*h, 1, 0);
  EXPECT_LT(p.prior(), 0.05);
  EXPECT_EQ(p.plan(ptrs, limits, 0), std::vector<int32_t>(64, 0));
  for (const DraftHistory& h : hs) ASSERT_EQ(h.probe_interval, 4 * DraftLengthPolicy::kProbeInterval);
}

// Measured step ratios (DraftCosts::step_ratio) by batch size: at batch 1 a step verifying
// three drafts costs 1.5 decode steps, so a typical acceptance drafts K; at batch 64 it costs
// four, and the same acceptance drafts nothing. An unmeasured k costs what the nearest measured
// one below it does (else above); an unmeasured batch size, the configured costs.
TEST(DraftLength, MeasuredCostsByBatchSize) {
  DraftCosts small, large;
  small.step_ratio = {0, 1.4, 0, 1.5};
  large.step_ratio = {0, 2.5, 0, 4.0};
  DraftLengthPolicy p(3, DraftCosts{});
  p.set_costs_by_batch({{1, small}, {64, large}});
  EXPECT_DOUBLE_EQ(p.cost(0.7, 3, p.costs_for(1)), 1.5);
  EXPECT_DOUBLE_EQ(p.cost(0.7, 2, p.costs_for(1)), 1.4) << "k = 2 unmeasured: k = 1's";
  EXPECT_DOUBLE_EQ(p.cost(0.7, 0, p.costs_for(1)), 1.0);
  DraftCosts above;
  above.step_ratio = {0, 0, 0, 2.0};
  EXPECT_DOUBLE_EQ(p.cost(0.7, 1, above), 2.0) << "nothing measured below: the nearest above";
  EXPECT_EQ(&p.costs_for(33), &p.costs_for(64)) << "a batch size takes its power-of-two bucket";
  EXPECT_DOUBLE_EQ(p.cost(0.5, 2, p.costs_for(2)), p.cost(0.5, 2)) << "unmeasured: the configured costs";
  EXPECT_DOUBLE_EQ(p.cost(0.5, 2, p.costs_for(500)), p.cost(0.5, 2));
  std::vector<DraftHistory> hs(64);
  std::vector<DraftHistory*> ptrs;
  for (DraftHistory& h : hs) {
    h.reached = 9;
    h.accepted = 6;  // a = 0.7 with the prior's pseudo-verify
    ptrs.push_back(&h);
  }
  DraftHistory first;
  p.observe(first, 1, 1);  // the engine's first verify (before it, one draft at most), at the prior's 1
  EXPECT_EQ(p.plan({ptrs[0]}, {3}, 0), std::vector<int32_t>{3}) << "batch 1";
  EXPECT_EQ(p.plan(ptrs, std::vector<int32_t>(64, 3), 0), std::vector<int32_t>(64, 0)) << "batch 64";
  EXPECT_THROW(p.set_costs_by_batch({{64, large}, {1, small}}), Error);
  const DraftCosts linear = DraftCosts::from_step_times(1.0, 1.3, 3);
  EXPECT_DOUBLE_EQ(linear.verify_row, 0.1);
  EXPECT_FALSE(linear.replays);
  EXPECT_THROW(DraftCosts::from_step_times(0.0, 1.0, 3), Error);
}

// The meter: of speculating steps the least of the last samples (kTrusted at least), of decode
// steps their mean, by power-of-two batch size and k; costs only where both kinds were measured.
TEST(DraftLength, StepCostMeterRatiosByBatchSizeAndK) {
  StepCostMeter m;
  EXPECT_TRUE(m.costs().empty());
  m.decode(3, 2.0);  // bucket 4
  m.decode(4, 4.0);
  EXPECT_TRUE(m.decode_measured(3));
  EXPECT_FALSE(m.decode_measured(5));
  EXPECT_TRUE(m.costs().empty()) << "no speculating step measured";
  m.speculating(4, 1, 9.0);  // a run's first speculating steps
  m.speculating(4, 1, 5.0);
  EXPECT_TRUE(m.costs().empty()) << "two samples: not trusted yet";
  m.speculating(4, 1, 4.5);
  for (int i = 0; i < StepCostMeter::kTrusted; ++i) m.speculating(1, 3, 5.0);  // bucket 1: no decode step there
  std::vector<BatchCosts> c = m.costs();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].seqs, 4);
  EXPECT_EQ(c[0].costs.step_ratio, (std::vector<double>{0, 1.5})) << "4.5 against the mean 3";
  m.speculating(3, 3, 6.0);
  m.speculating(3, 3, 7.0);
  EXPECT_EQ(m.costs()[0].costs.step_ratio.size(), 2u) << "two samples of k = 3: not trusted yet";
  m.speculating(3, 3, 8.0);
  for (int i = 0; i < StepCostMeter::kSamples; ++i) m.speculating(4, 1, 6.0);  // the 4.5 goes
  c = m.costs();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].costs.step_ratio, (std::vector<double>{0, 2.0, 0, 2.0}));
  m.decode(64, 10.0);
  m.speculating(40, 2, 12.0);
  m.speculating(40, 2, 13.0);
  m.speculating(40, 2, 14.0);
  c = m.costs();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].seqs, 64);
  EXPECT_EQ(c[1].costs.step_ratio, (std::vector<double>{0, 0, 1.2}));
}

// Uniform steps (CUDA graphs): every drafter of a step gets one k, the one with the batch's best
// gain, capped by each one's limit; a probe makes it at least one.
TEST(DraftLength, UniformStepsGiveEveryDrafterOneK) {
  DraftLengthPolicy p(3, cheap_costs());
  p.set_uniform(true);
  std::vector<DraftHistory> hs(3);
  hs[0].reached = 9, hs[0].accepted = 8;  // a = 0.9
  hs[1].reached = 9, hs[1].accepted = 6;  // 0.7
  hs[2].reached = 9, hs[2].accepted = 1;  // 0.2: alone it would draft nothing
  std::vector<DraftHistory*> ptrs{&hs[0], &hs[1], &hs[2]};
  ASSERT_EQ(p.best(p.acceptance(hs[2]), 3), 0);
  const std::vector<int32_t> ks = p.plan(ptrs, {3, 3, 3}, 0);
  EXPECT_GT(ks[0], 0);
  EXPECT_EQ(ks, std::vector<int32_t>(3, ks[0])) << "one k for the step";
  const std::vector<int32_t> capped = p.plan(ptrs, {3, 1, 0}, 0);  // the batch's k for the first
  EXPECT_GT(capped[0], 0);
  EXPECT_EQ(capped[1], std::min(capped[0], 1)) << "each at most its limit";
  EXPECT_EQ(capped[2], 0);
  DraftLengthPolicy q(3, cheap_costs());
  q.set_uniform(true);
  std::vector<DraftHistory> hopeless(2);
  for (DraftHistory& h : hopeless) h.reached = 10, h.accepted = 0;
  hopeless[1].idle_steps = 100;  // due
  EXPECT_EQ(q.plan({&hopeless[0], &hopeless[1]}, {3, 3}, 0), (std::vector<int32_t>{1, 1})) << "a probe: one each";
  EXPECT_EQ(q.plan({&hopeless[0], &hopeless[1]}, {3, 3}, 0), (std::vector<int32_t>{0, 0}));
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
  DraftLengthPolicy p(2, DraftCosts{});
  DraftHistory h;
  EXPECT_THROW(p.observe(h, 1, 2), Error);
  EXPECT_THROW(p.plan({&h}, {}, 0), Error);
}

}  // namespace
}  // namespace strata::testing
