// Speculative sampling (temperature > 0): the acceptance rule of engine/spec_accept.h on
// hand-made distributions, exactly; and through the engine with the default model's head, a
// chi-square test that the first speculative position's tokens follow the target's processed
// distribution (temperature and top-k applied to p and q alike).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/engine/engine.h"
#include "strata/engine/sampler.h"
#include "strata/engine/single_sequence.h"
#include "strata/engine/spec_accept.h"
#include "strata/models/model.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

TEST(SpecAccept, DrawFromFollowsTheWeightsInIdOrder) {
  const std::vector<double> w = {0.0, 0.25, 0.0, 0.75};
  EXPECT_EQ(draw_from(w, 0.0), 1);
  EXPECT_EQ(draw_from(w, 0.2499), 1);
  EXPECT_EQ(draw_from(w, 0.25), 3);
  EXPECT_EQ(draw_from(w, 0.999999), 3);
  EXPECT_EQ(draw_from({0.0, 0.0}, 0.5), -1);
  EXPECT_EQ(draw_from({2.0, 6.0}, 0.3), 1);  // unnormalised: 0.3 * 8 = 2.4 > 2
}

TEST(SpecAccept, AcceptsWithProbabilityMinOfOneAndTheRatio) {
  const std::vector<double> p = {0.5, 0.5, 0.0}, q = {0.25, 0.25, 0.5};
  // p(0) / q(0) = 2: always accepted.
  EXPECT_TRUE(verify_draft(p, q, 0, 0.999, 0.5).accepted);
  // p(2) = 0: never; the residual max(0, p - q) = {0.25, 0.25, 0} decides.
  SpecVerdict v = verify_draft(p, q, 2, 0.0, 0.3);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.token, 0);
  EXPECT_EQ(verify_draft(p, q, 2, 0.0, 0.7).token, 1);
  // p(1) / q(1) = 0.5 against {0.2, 0.8}: accepted below u = 0.5 only.
  const std::vector<double> q2 = {0.2, 0.8, 0.0};
  EXPECT_TRUE(verify_draft(p, q2, 1, 0.6, 0.1).accepted);
  SpecVerdict r = verify_draft(p, q2, 1, 0.7, 0.1);
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.token, 0);  // the residual {0.3, 0, 0}
  // Equal distributions: always accepted.
  for (double u : {0.0, 0.5, 0.999}) EXPECT_TRUE(verify_draft(p, p, 1, u, 0.5).accepted);
}

// The emitted distribution, integrated over x ~ q and both uniforms on a fine grid, is p.
TEST(SpecAccept, EmittedDistributionIsTheTargetsExactly) {
  const std::vector<std::pair<std::vector<double>, std::vector<double>>> cases = {
      {{0.1, 0.2, 0.3, 0.4}, {0.4, 0.3, 0.2, 0.1}},
      {{0.0, 0.0, 1.0, 0.0}, {0.25, 0.25, 0.25, 0.25}},
      {{0.5, 0.5, 0.0, 0.0}, {0.0, 0.1, 0.0, 0.9}},
      {{0.3, 0.3, 0.2, 0.2}, {0.3, 0.3, 0.2, 0.2}},
  };
  const int grid = 400;
  for (const auto& [p, q] : cases) {
    std::vector<double> emitted(p.size(), 0.0);
    for (size_t x = 0; x < q.size(); ++x) {
      if (q[x] == 0) continue;
      for (int a = 0; a < grid; ++a) {
        for (int b = 0; b < grid; ++b) {
          const SpecVerdict v = verify_draft(p, q, int32_t(x), (a + 0.5) / grid, (b + 0.5) / grid);
          emitted[size_t(v.token)] += q[x] / (double(grid) * grid);
        }
      }
    }
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(emitted[i], p[i], 2.0 / grid) << "token " << i;
  }
}

// Wilson-Hilferty: the upper tail of chi-square with df degrees of freedom at x.
double chi_square_p_value(double x, int df) {
  const double k = double(df);
  const double z = (std::cbrt(x / k) - (1 - 2 / (9 * k))) / std::sqrt(2 / (9 * k));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

struct ChiSquare {
  double statistic = 0, p_value = 1;
  int df = 0;
};

// Counts against probabilities: bins of expected count >= 5, the rest pooled into one bin.
ChiSquare chi_square(const std::map<int32_t, int>& counts, const std::vector<double>& probs, int n) {
  ChiSquare c;
  double pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    const double e = probs[t] * n;
    const auto it = counts.find(int32_t(t));
    const double o = it == counts.end() ? 0 : it->second;
    if (e >= 5) {
      c.statistic += (o - e) * (o - e) / e;
      ++bins;
    } else {
      pooled_expected += e;
      pooled_observed += o;
    }
  }
  if (pooled_expected > 0) {
    c.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  c.df = bins - 1;
  c.p_value = chi_square_p_value(c.statistic, c.df);
  return c;
}

TEST(SpecSampling, FirstSpeculativePositionFollowsTheTargetDistribution) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/default";
  LoadOptions o;
  o.mtp = true;
  std::shared_ptr<Model> model(load_model(dir, o));
  const Tokenizer tok = Tokenizer::load(dir);
  const std::vector<int32_t> prompt = tok.encode("To install a package on Debian, run apt-get");
  SamplingParams params;
  params.temperature = 0.8;
  params.top_k = 12;
  params.max_tokens = 3;  // the first token from the prompt, the second from a verify of one draft
  params.ignore_eos = true;
  EngineConfig c;
  c.model = dir;
  c.kv_cache_memory = size_t(64) << 20;
  c.max_num_seqs = 64;
  c.max_model_len = 64;
  c.log_capacity = false;
  c.speculative = {"mtp", 1};
  Engine engine(model, c, {});
  const int n = 1200;
  for (int i = 0; i < n; ++i) {
    SamplingParams p = params;
    p.seed = uint64_t(i);
    engine.add_request("s" + std::to_string(i), prompt, p);
  }
  std::vector<std::vector<int32_t>> out(n);
  while (engine.has_unfinished()) {
    for (const RequestOutput& d : engine.step()) {
      for (const CompletionOutput& co : d.outputs) {
        auto& v = out[std::stoul(d.request_id.substr(1))];
        v.insert(v.end(), co.token_ids.begin(), co.token_ids.end());
      }
    }
  }
  const EngineStats s = engine.stats();
  ASSERT_EQ(s.spec_drafted_at.size(), 1u);
  std::printf("  first speculative position: %lld drafts, %lld accepted\n", (long long)s.spec_drafted_at[0],
              (long long)s.spec_accepted_at[0]);
  EXPECT_GT(s.spec_accepted_at[0], 0);
  EXPECT_LT(s.spec_accepted_at[0], s.spec_drafted_at[0]) << "no rejection: the residual draw is untested";
  // The second token, among the runs whose first token is the most common one.
  std::map<int32_t, int> first;
  for (const auto& v : out) {
    ASSERT_EQ(v.size(), 3u);
    ++first[v[0]];
  }
  int32_t mode = first.begin()->first;
  for (const auto& [t, k] : first) {
    if (k > first[mode]) mode = t;
  }
  std::map<int32_t, int> second;
  int m = 0;
  for (const auto& v : out) {
    if (v[0] != mode) continue;
    ++second[v[1]];
    ++m;
  }
  ASSERT_GE(m, 300) << "too few runs share the first token";
  // The target's distribution there: the model's logits after prompt + mode, processed alike.
  SingleSequence single(*model, 64);
  std::vector<int32_t> ctx = prompt;
  ctx.push_back(mode);
  const Tensor logits = single.append(ctx, false);
  auto target = [&](double temperature) {
    SamplingParams p = params;
    p.temperature = temperature;
    const ResolvedSampling r = resolve_sampling(p, {}, model->info().eos_token_ids, model->info().vocab_size);
    Sampler sampler(model->info().vocab_size, LogprobsMode::kProcessed);
    std::unordered_map<int32_t, int32_t> counts{{mode, 1}};
    std::mt19937_64 rng;
    std::vector<double> probs;
    sampler.distribution(logits.data<float>(), r, {&ctx, int32_t(prompt.size()), &counts, &rng}, probs);
    return probs;
  };
  const ChiSquare got = chi_square(second, target(0.8), m);
  std::printf("  chi-square over %d runs: %.2f with %d degrees of freedom, p = %.4f\n", m, got.statistic, got.df,
              got.p_value);
  EXPECT_GT(got.p_value, 1e-3) << "the emitted tokens do not follow the target distribution";
  // The test has the power to see a different distribution: the same counts against
  // temperature 1.5 are rejected.
  const ChiSquare other = chi_square(second, target(1.5), m);
  std::printf("  against temperature 1.5 instead: %.2f with %d degrees of freedom, p = %.2g\n", other.statistic,
              other.df, other.p_value);
  EXPECT_LT(other.p_value, 1e-3);
}

}  // namespace
}  // namespace strata::testing
