// The structured-output mask in the batched CPU sampler: over a synthetic vocabulary, every
// draw (greedy or sampled, whatever the logits prefer) is a token the grammar allows, the end
// id only where the grammar can end, and each sequence follows its own matcher.
#include <gtest/gtest.h>

#include <random>

#include "strata/core/error.h"
#include "strata/engine/batch_sampler.h"
#include "strata/engine/structured_output.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 300;
constexpr int32_t kEnd = 299;

// Ids 0-9: the digits; 10-35: the letters a-z; 36..: "ab", "aab", ...; kEnd: no bytes.
std::shared_ptr<const grammar::TokenVocabulary> vocab() {
  std::vector<std::string> bytes(static_cast<size_t>(kVocab));
  for (int i = 0; i < 10; ++i) bytes[size_t(i)] = std::string(1, char('0' + i));
  for (int i = 0; i < 26; ++i) bytes[size_t(10 + i)] = std::string(1, char('a' + i));
  for (int i = 36; i < kEnd; ++i) bytes[size_t(i)] = std::string(size_t(i - 35), 'a') + "b";
  return std::make_shared<grammar::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{kEnd});
}

struct Seq {
  std::unique_ptr<Request> req;
  std::unique_ptr<Sequence> seq;
};

Seq make(const std::shared_ptr<const StructuredOutput>& so, double temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.structured = so;
  Seq s{std::make_unique<Request>(), std::make_unique<Sequence>()};
  s.req->sampling = resolve_sampling(p, GenerationDefaults{}, {kEnd}, kVocab);
  s.seq->request = s.req.get();
  s.seq->tokens = {1, 2};
  s.seq->prompt_len = 2;
  s.seq->rng.seed(seed);
  s.seq->matcher = std::make_unique<grammar::GrammarMatcher>(so->grammar);
  return s;
}

TEST(StructuredSampling, DrawsOnlyWhatTheGrammarAllows) {
  auto so = StructuredOutput::make(grammar::from_regex("[0-9]{2}(x|ab)?"), vocab());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-5.f, 5.f);
  BatchSampler sampler(kVocab, LogprobsMode::kProcessed);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<Seq> seqs;
    for (int i = 0; i < 4; ++i) seqs.push_back(make(so, i % 2 ? 1.0 : 0.0, uint64_t(trial * 4 + i)));
    std::vector<std::string> text(seqs.size());
    for (int step = 0; step < 6; ++step) {
      Tensor logits = Tensor::empty({1, kVocab}, DType::kF32);
      for (int64_t t = 0; t < kVocab; ++t) logits.data<float>()[t] = u(rng);
      logits.data<float>()[20] = 30.f;  // 'k': never allowed, and far the most likely
      std::vector<SampleJob> jobs;
      for (Seq& s : seqs) {
        if (!s.seq->is_finished()) jobs.push_back({s.seq.get(), 0});
      }
      if (jobs.empty()) break;
      const auto results = sampler.sample(logits, jobs);
      for (size_t j = 0; j < jobs.size(); ++j) {
        Sequence& q = *jobs[j].seq;
        const int32_t tok = results[j].token;
        if (tok == kEnd) {
          EXPECT_TRUE(q.matcher->can_end()) << "end drawn where the grammar cannot end";
          q.status = SeqStatus::kFinished;
          continue;
        }
        ASSERT_TRUE(q.matcher->accept_token(so->vocab->bytes(tok))) << "token " << tok << " refused";
        if (q.matcher->is_terminated()) q.status = SeqStatus::kFinished;
      }
    }
    for (Seq& s : seqs) {
      EXPECT_TRUE(s.seq->is_finished()) << "trial " << trial;
      EXPECT_TRUE(s.seq->matcher->can_end());
    }
  }
  EXPECT_GT(sampler.grammar_masks(), 0);
}

// Draws of three grammars interleaved with plain ones in one batch (BatchSampler fills the
// grammars' masks in parallel): each row gets its own grammar's mask.
TEST(StructuredSampling, SeveralGrammarsInOneBatch) {
  const auto v = vocab();
  const std::vector<std::shared_ptr<const StructuredOutput>> grammars = {
      StructuredOutput::make(grammar::from_regex("[0-9]+"), v), StructuredOutput::make(grammar::from_regex("[a-z]+"), v),
      StructuredOutput::make(grammar::from_regex("a+b"), v)};
  Tensor logits = Tensor::zeros({1, kVocab}, DType::kF32);
  logits.data<float>()[5] = 30.f;   // '5'
  logits.data<float>()[15] = 20.f;  // 'f'
  logits.data<float>()[37] = 10.f;  // "aab"
  const int32_t want[] = {5, 15, 37, 5};  // digits, letters, a+b, no grammar
  std::vector<Seq> seqs;
  std::vector<SampleJob> jobs;
  for (int i = 0; i < 16; ++i) {
    seqs.push_back(make(grammars[size_t(i % 3)], 0.0, uint64_t(i)));
    if (i % 4 == 3) {  // a plain draw
      seqs.back().seq->matcher = nullptr;
      seqs.back().req->sampling.params.structured = nullptr;
    }
  }
  for (Seq& s : seqs) jobs.push_back({s.seq.get(), 0});
  BatchSampler sampler(kVocab, LogprobsMode::kProcessed);
  const auto results = sampler.sample(logits, jobs);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(results[size_t(i)].token, want[i % 4 == 3 ? 3 : i % 3]) << "draw " << i;
  }
  EXPECT_EQ(sampler.grammar_masks(), 12);
}

TEST(StructuredSampling, MaskRowsAreChecked) {
  Tensor logits = Tensor::zeros({1, kVocab}, DType::kF32);
  ops::SampleBatch b;
  ops::SampleSpec s;
  s.allow_row = 0;
  b.rows.push_back(s);
  b.allow_words = (kVocab + 63) / 64;  // no words: row 0 is outside
  ops::SampledTokens out;
  EXPECT_THROW(ops::sample_tokens(logits, b, out), Error);
  b.allow.assign(size_t(b.allow_words), 0);
  b.allow[2] = uint64_t(1) << 5;  // only token 133
  ops::sample_tokens(logits, b, out);
  EXPECT_EQ(out.ids[0], 133);
}

}  // namespace
}  // namespace strata
