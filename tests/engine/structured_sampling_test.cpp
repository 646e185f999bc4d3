// The structured-output mask in the batched CPU sampler: over a synthetic vocabulary, every
// draw (greedy or sampled, whatever the logits prefer) is a token the grammar allows, the end
// id only where the grammar can end, and each sequence follows its own matcher.
#include <gtest/gtest.h>

#include <random>

#include "strata/core/error.h"
#include "strata/engine/batch_sampler.h"
#include "strata/engine/spec_grammar.h"
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

// Speculative decoding verifies rows with the reference Sampler under the grammar's mask
// (SamplerInput::allow, from grammar_allow): its draws and log-probabilities are the batched
// sampler's, greedy and sampled, where the logits prefer refused tokens.
TEST(StructuredSampling, ReferenceSamplerMasksAsTheBatchedOne) {
  auto so = StructuredOutput::make(grammar::from_regex("[0-9]{2}(x|ab)?"), vocab());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-5.f, 5.f);
  BatchSampler batched(kVocab, LogprobsMode::kProcessed);
  Sampler reference(kVocab, LogprobsMode::kProcessed);
  std::vector<uint64_t> words;
  for (int trial = 0; trial < 40; ++trial) {
    Seq a = make(so, trial % 2 ? 1.0 : 0.0, uint64_t(trial)), b = make(so, trial % 2 ? 1.0 : 0.0, uint64_t(trial));
    a.req->sampling.params.logprobs = 2;
    b.req->sampling.params.logprobs = 2;
    if (trial % 3 == 0) {  // a prefix already accepted
      ASSERT_TRUE(a.seq->matcher->accept_token("4") && b.seq->matcher->accept_token("4"));
    }
    Tensor logits = Tensor::empty({1, kVocab}, DType::kF32);
    for (int64_t t = 0; t < kVocab; ++t) logits.data<float>()[t] = u(rng);
    logits.data<float>()[20] = 30.f;  // 'k': never allowed
    const SampleResult want = batched.sample(logits, {{a.seq.get(), 0}})[0];
    SamplerInput in{&b.seq->tokens, b.seq->prompt_len, &b.seq->output_counts, &b.seq->rng};
    in.allow = grammar_allow(*b.seq, kVocab, words);
    ASSERT_NE(in.allow, nullptr);
    const SampleResult got = reference.sample(logits.data<float>(), b.req->sampling, in);
    EXPECT_EQ(got.token, want.token) << "trial " << trial;
    EXPECT_EQ(got.logprob, want.logprob) << "trial " << trial;
    ASSERT_EQ(got.top.size(), want.top.size());
    for (size_t i = 0; i < got.top.size(); ++i) EXPECT_EQ(got.top[i].token_id, want.top[i].token_id) << "trial " << trial;
    EXPECT_TRUE(a.seq->matcher->can_accept(so->vocab->bytes(got.token))) << "token " << got.token;
  }
}

// Drafting advances the sequence's grammar by each draft and stops where no draft may follow
// (an end token, a complete grammar); the rewind gives back the state before the drafts.
TEST(StructuredSampling, DraftGrammarAdvancesStopsAndRewinds) {
  auto so = StructuredOutput::make(grammar::from_regex("[0-9]{2}(x|ab)?"), vocab());
  Seq s = make(so, 0.0, 1);
  std::vector<uint64_t> before, after;
  grammar_allow(*s.seq, kVocab, before);
  int32_t advanced = 0;
  EXPECT_TRUE(advance_draft_grammar(*s.seq, 3, advanced));    // "3"
  EXPECT_TRUE(advance_draft_grammar(*s.seq, 4, advanced));    // "34": may end, "x" or "ab" may follow
  EXPECT_FALSE(advance_draft_grammar(*s.seq, 33, advanced));  // "x": complete
  EXPECT_EQ(advanced, 3);
  EXPECT_TRUE(s.seq->matcher->is_terminated());
  rewind_draft_grammar(*s.seq, advanced);
  EXPECT_EQ(advanced, 0);
  grammar_allow(*s.seq, kVocab, after);
  EXPECT_EQ(after, before) << "the rewind left a trace";
  EXPECT_TRUE(advance_draft_grammar(*s.seq, 1, advanced));
  EXPECT_TRUE(advance_draft_grammar(*s.seq, 2, advanced));
  EXPECT_FALSE(advance_draft_grammar(*s.seq, kEnd, advanced));  // an end token: not fed to the grammar
  EXPECT_EQ(advanced, 2);
  EXPECT_THROW(advance_draft_grammar(*s.seq, 20, advanced), Error);  // 'k': refused
  // The masked arg max: the most likely allowed id, the lowest on a tie, -1 when none is allowed.
  std::vector<float> logits(size_t(kVocab), 0.f);
  logits[20] = 9.f;
  logits[7] = 2.f;
  logits[8] = 2.f;
  std::vector<uint64_t> digits(size_t((kVocab + 63) / 64), 0);
  digits[0] = (uint64_t(1) << 10) - 1;  // ids 0-9
  EXPECT_EQ(masked_argmax(logits.data(), kVocab, digits.data()), 7);
  std::fill(digits.begin(), digits.end(), 0);
  EXPECT_EQ(masked_argmax(logits.data(), kVocab, digits.data()), -1);
}

}  // namespace
}  // namespace strata
