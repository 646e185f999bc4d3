// The engine's batched sampling (BatchSampler over ops::sample_tokens) against the per-row
// reference Sampler on the CPU: the same tokens, log-probabilities and top log-probabilities,
// bit for bit, and the same RNG state afterwards, for every parameter the server accepts.
#include <gtest/gtest.h>

#include <random>

#include "strata/engine/batch_sampler.h"
#include "strata/engine/sampler.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 1000;

struct Case {
  std::unique_ptr<Request> req;
  std::unique_ptr<Sequence> seq;
};

Case make_case(const SamplingParams& p, std::mt19937& rng, uint64_t seed) {
  Case c;
  c.req = std::make_unique<Request>();
  c.req->sampling = resolve_sampling(p, GenerationDefaults{}, {3, 7}, kVocab);
  c.seq = std::make_unique<Sequence>();
  c.seq->request = c.req.get();
  const int prompt = 5 + int(rng() % 20), out = int(rng() % 6);
  for (int i = 0; i < prompt + out; ++i) {
    const int32_t t = int32_t(rng() % 40);  // repeats, so penalties hit tokens several times
    c.seq->tokens.push_back(t);
    if (i >= prompt) ++c.seq->output_counts[t];
  }
  c.seq->prompt_len = prompt;
  c.seq->rng.seed(seed);
  return c;
}

std::vector<SamplingParams> parameter_mix() {
  std::vector<SamplingParams> v;
  SamplingParams g;
  g.temperature = 0.0;
  v.push_back(g);
  g.logprobs = 5;
  v.push_back(g);
  SamplingParams t;
  t.temperature = 0.8;
  v.push_back(t);
  t.top_k = 20;
  t.top_p = 0.9;
  t.logprobs = 3;
  v.push_back(t);
  SamplingParams m;
  m.temperature = 1.3;
  m.min_p = 0.05;
  m.logprobs = 0;
  v.push_back(m);
  SamplingParams pen;
  pen.temperature = 1.0;
  pen.top_p = 0.5;
  pen.repetition_penalty = 1.3;
  pen.frequency_penalty = 0.4;
  pen.presence_penalty = -0.3;
  pen.logit_bias = {{11, 5.0}, {12, -100.0}, {3, 2.0}};
  pen.min_tokens = 8;
  pen.max_tokens = 20;
  pen.stop_token_ids = {9};
  pen.logprobs = 20;
  v.push_back(pen);
  pen.temperature = 0.0;
  v.push_back(pen);
  return v;
}

void compare(LogprobsMode mode) {
  std::mt19937 rng(3);
  const std::vector<SamplingParams> mix = parameter_mix();
  std::vector<Case> a, b;
  for (int i = 0; i < 28; ++i) {
    const SamplingParams& p = mix[size_t(i) % mix.size()];
    std::mt19937 r1(i), r2(i);
    a.push_back(make_case(p, r1, 100 + i));
    b.push_back(make_case(p, r2, 100 + i));
  }
  // Logits rows with a few exact ties, the draws mapped over them out of order.
  const int64_t rows = 9;
  Tensor logits = Tensor::empty({rows, kVocab}, DType::kF32);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = nd(rng);
  logits.data<float>()[5] = logits.data<float>()[6] = 9.f;
  std::vector<SampleJob> jobs;
  for (size_t i = 0; i < a.size(); ++i) jobs.push_back({a[i].seq.get(), int32_t((i * 5) % rows)});
  BatchSampler batched(kVocab, mode);
  Sampler reference(kVocab, mode);
  for (int step = 0; step < 3; ++step) {
    const std::vector<SampleResult> got = batched.sample(logits, jobs);
    ASSERT_EQ(got.size(), jobs.size());
    for (size_t i = 0; i < b.size(); ++i) {
      Sequence& s = *b[i].seq;
      const SampleResult want = reference.sample(logits.data<float>() + jobs[i].logits_row * kVocab,
                                                 s.request->sampling,
                                                 {&s.tokens, s.prompt_len, &s.output_counts, &s.rng});
      EXPECT_EQ(got[i].token, want.token) << "draw " << i << " step " << step;
      EXPECT_EQ(got[i].logprob, want.logprob) << "draw " << i;
      ASSERT_EQ(got[i].top.size(), want.top.size()) << "draw " << i;
      for (size_t k = 0; k < want.top.size(); ++k) {
        EXPECT_EQ(got[i].top[k].token_id, want.top[k].token_id) << "draw " << i << " top " << k;
        EXPECT_EQ(got[i].top[k].logprob, want.top[k].logprob) << "draw " << i << " top " << k;
      }
      EXPECT_EQ(a[i].seq->rng, s.rng) << "draw " << i;
      // Both sequences take the token, so later steps see the same penalties.
      for (Sequence* q : {a[i].seq.get(), &s}) {
        q->tokens.push_back(want.token);
        ++q->output_counts[want.token];
      }
    }
  }
}

TEST(BatchSampler, EqualsTheReferenceSamplerOnTheCpu) { compare(LogprobsMode::kProcessed); }
TEST(BatchSampler, EqualsTheReferenceSamplerWithRawLogprobs) { compare(LogprobsMode::kRaw); }

TEST(BatchSampler, AdjustmentsReachTheDraw) {
  // A bias of +100 on one token makes a greedy draw pick it; min_tokens masks eos.
  std::mt19937 rng(1);
  SamplingParams p;
  p.temperature = 0.0;
  p.logit_bias = {{42, 100.0}};
  Case c = make_case(p, rng, 1);
  Tensor logits = Tensor::zeros({1, kVocab}, DType::kF32);
  BatchSampler s(kVocab, LogprobsMode::kProcessed);
  EXPECT_EQ(s.sample(logits, {{c.seq.get(), 0}})[0].token, 42);
  SamplingParams q;
  q.temperature = 0.0;
  q.min_tokens = 100;
  q.max_tokens = 200;
  Case d = make_case(q, rng, 1);
  logits.data<float>()[7] = 50.f;  // eos
  EXPECT_NE(s.sample(logits, {{d.seq.get(), 0}})[0].token, 7);
}

}  // namespace
}  // namespace strata
