// The device sampler with structured-output masks (SampleBatch::allow) against the CPU sampler
// at Qwen3.5's vocabulary: random logits and random masks (one token allowed, a few, a sparse
// and a dense random set, none), greedy and seeded sampled draws with top-k / top-p / min-p,
// penalties and biases (also on refused tokens), log-probabilities in both modes. Greedy ids
// equal the CPU's; every draw is an allowed token; a sampled id may differ from the CPU's only
// where its draw falls within float rounding of a boundary (the rule of
// CudaDense.SampleTokensMatchesTheCpuAtProductionShapes, 1 in 100), never when one token is
// allowed; the chosen token's log-probability agrees within 1e-4 (the top ones within 2e-4, as
// unmasked); the top log-probabilities are the CPU's ids, and in the processed mode allowed
// tokens only, unless fewer than asked are allowed: then the rest are -inf (refused tokens,
// lower ids first, as on the CPU). The bare greedy draws (no adjustments, no log-probabilities),
// which take the multi-block arg max reading their masks, are also checked over edge masks at
// batch 1 and 256, alone and among draws that keep the processed copy; GreedyTimesAtBatch256
// prints what a mask costs a greedy step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"

#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/runtime.h"
#endif

namespace strata::testing {
namespace {

constexpr int64_t kVocab = 248320;

bool allowed(const ops::SampleBatch& b, const ops::SampleSpec& s, int32_t id) {
  if (s.allow_row < 0) return true;
  const uint64_t w = b.allow[size_t(s.allow_row) * size_t(b.allow_words) + size_t(id >> 6)];
  return (w >> (id & 63)) & 1;
}

int64_t allowed_count(const ops::SampleBatch& b, const ops::SampleSpec& s) {
  if (s.allow_row < 0) return kVocab;
  int64_t c = 0;
  for (int64_t w = 0; w < b.allow_words; ++w) c += __builtin_popcountll(b.allow[size_t(s.allow_row * b.allow_words + w)]);
  return c;
}

// Mask kinds: 0 none, 1 one token, 2 three tokens, 3 about 1% of the vocabulary, 4 about half.
int32_t add_mask(ops::SampleBatch& b, int kind, std::mt19937& rng) {
  if (kind == 0) return -1;
  const int32_t row = int32_t(b.allow.size() / size_t(b.allow_words));
  b.allow.resize(b.allow.size() + size_t(b.allow_words), 0);
  uint64_t* w = b.allow.data() + size_t(row) * size_t(b.allow_words);
  auto set = [&](int64_t id) { w[id >> 6] |= uint64_t(1) << (id & 63); };
  std::uniform_int_distribution<int64_t> any(0, kVocab - 1);
  if (kind == 1) set(any(rng));
  if (kind == 2) {
    for (int i = 0; i < 3; ++i) set(any(rng));
  }
  for (int64_t id = 0; id < kVocab && kind >= 3; ++id) {
    if (rng() % (kind == 3 ? 100 : 2) == 0) set(id);
  }
  return row;
}

ops::SampleBatch masked_batch(int64_t rows, bool raw, std::mt19937& rng) {
  ops::SampleBatch b;
  b.raw_logprobs = raw;
  b.allow_words = (kVocab + 63) / 64;
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int i = 0; i < 96; ++i) {
    ops::SampleSpec s;
    s.logits_row = int32_t(i % rows);  // draws 64.. share rows with earlier draws (n > 1)
    const int kind = i % 6;           // the draw's parameters
    s.greedy = kind == 0 || kind == 1;
    s.inv_temperature = kind == 3 ? 1.f / 0.7f : 1.f;
    s.top_k = kind == 2 ? 8 : kind == 4 ? 1000 : 0;  // 8: the many-block top-k path where it can
    s.top_p = kind == 3 || kind == 4 ? 0.9f : 1.f;
    s.min_p = kind == 5 ? 0.05f : 0.f;
    s.num_top_logprobs = kind == 1 || kind == 2 ? 5 : kind == 3 ? 20 : kind == 4 ? 0 : -1;
    s.uniform = u(rng) * 0.9999f;
    s.allow_row = add_mask(b, (i / 6) % 5, rng);
    if (i % 4 == 1) {  // penalties and biases on 200 ids, refused ones among them
      s.repetition_penalty = 1.3f;
      s.adjust_begin = int32_t(b.adjust.size());
      for (int j = 0; j < 200; ++j) {
        ops::LogitAdjust a;
        a.id = int32_t((j * 1237 + i) % kVocab);
        a.bias = j % 7 == 0 ? 60.f : j % 5 == 0 ? 2.f : 0.f;  // 60: above every logit
        a.mask = j % 19 == 0;
        a.repeat = j % 2;
        a.subtract = j % 3 == 0 ? 0.4f : 0.f;
        b.adjust.push_back(a);
      }
      s.adjust_count = 200;
    }
    b.rows.push_back(s);
  }
  return b;
}

void check_masked(const ops::SampleBatch& b, const ops::SampledTokens& want, const ops::SampledTokens& got,
                  const char* what) {
  int differ = 0, sampled = 0;
  double max_lp = 0, max_top = 0;  // the chosen token's, the top ones'
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const ops::SampleSpec& s = b.rows[i];
    SCOPED_TRACE(std::string(what) + ": draw " + std::to_string(i));
    ASSERT_GE(got.ids[i], 0);
    ASSERT_LT(got.ids[i], kVocab);
    EXPECT_TRUE(allowed(b, s, got.ids[i])) << "the device drew refused token " << got.ids[i];
    ASSERT_TRUE(allowed(b, s, want.ids[i])) << "the CPU drew refused token " << want.ids[i];
    const int64_t n_allowed = allowed_count(b, s);
    if (s.greedy || n_allowed == 1) {
      EXPECT_EQ(got.ids[i], want.ids[i]);
    } else {
      ++sampled;
      differ += got.ids[i] != want.ids[i];
    }
    if (s.num_top_logprobs < 0) continue;
    if (got.ids[i] == want.ids[i]) {
      EXPECT_TRUE(std::isfinite(got.logprobs[i]));
      max_lp = std::max(max_lp, double(std::fabs(got.logprobs[i] - want.logprobs[i])));
    }
    for (int k = 0; k < s.num_top_logprobs; ++k) {
      const size_t at = i * ops::kMaxTopLogprobs + size_t(k);
      EXPECT_EQ(got.top_ids[at], want.top_ids[at]) << "top " << k;
      const float g = got.top_logprobs[at], w = want.top_logprobs[at];
      if (std::isinf(w)) {
        EXPECT_EQ(g, w) << "top " << k;
      } else {
        max_top = std::max(max_top, double(std::fabs(g - w)));
      }
      if (b.raw_logprobs) continue;  // raw: the model's own, masks aside
      if (k < n_allowed) {
        EXPECT_TRUE(allowed(b, s, got.top_ids[at])) << "top " << k << " is refused token " << got.top_ids[at];
      } else {
        EXPECT_EQ(g, -INFINITY) << "top " << k << " past the " << n_allowed << " allowed tokens";
      }
    }
  }
  std::printf("masked sample_tokens (%s, raw %d): %d of %d sampled ids differ, max |d logprob| %.3g chosen, "
              "%.3g top\n", what, int(b.raw_logprobs), differ, sampled, max_lp, max_top);
  EXPECT_LE(differ, std::max(1, sampled / 100));
  EXPECT_LE(max_lp, 1e-4);
  EXPECT_LE(max_top, 2e-4);  // CudaDense.SampleTokensMatchesTheCpuAtProductionShapes's bound
}

Tensor random_logits(int64_t rows, std::mt19937& rng) {
  Tensor logits = Tensor::empty({rows, kVocab}, DType::kF32);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = 1.f + float(r % 4) * 1.5f;  // flat to peaked
    for (int64_t i = 0; i < kVocab; ++i) logits.data<float>()[r * kVocab + i] = nd(rng) * scale;
  }
  return logits;
}

TEST(CudaMaskedSampling, MasksMatchTheCpuAtProductionShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(21);
  const int64_t rows = 64;
  const Tensor logits = random_logits(rows, rng);
  const Tensor glogits = logits.to(Device::kCuda);
  for (bool raw : {false, true}) {
    const ops::SampleBatch b = masked_batch(rows, raw, rng);
    ops::SampledTokens want, got;
    ops::sample_tokens(logits, b, want);
    ops::sample_tokens(glogits, b, got);
    check_masked(b, want, got, "mixed");
  }
  // All greedy without adjustments or log-probabilities: every draw takes the multi-block arg
  // max, the masked ones reading their mask bits.
  ops::SampleBatch g;
  g.allow_words = (kVocab + 63) / 64;
  for (int i = 0; i < 40; ++i) {
    ops::SampleSpec s;
    s.logits_row = int32_t(i % rows);
    s.allow_row = add_mask(g, i % 5, rng);
    g.rows.push_back(s);
  }
  ops::SampledTokens want, got;
  ops::sample_tokens(logits, g, want);
  ops::sample_tokens(glogits, g, got);
  check_masked(g, want, got, "greedy");
  int moved = 0;  // the masks change the pick (the test sees them applied)
  for (size_t i = 0; i < g.rows.size(); ++i) {
    int32_t best = 0;
    const float* l = logits.data<float>() + int64_t(g.rows[i].logits_row) * kVocab;
    for (int64_t k = 1; k < kVocab; ++k) best = l[k] > l[best] ? int32_t(k) : best;
    moved += got.ids[i] != best;
  }
  EXPECT_GE(moved, 20) << "of the 32 masked greedy draws";
}

// The engine's two slots: a masked step begun while the other slot's draws are in flight keeps
// its own staging (the masks of one do not leak into the other).
TEST(CudaMaskedSampling, TwoSlotsInFlightKeepTheirMasks) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(22);
  const int64_t rows = 16;
  const Tensor logits = random_logits(rows, rng);
  const Tensor glogits = logits.to(Device::kCuda);
  std::vector<ops::SampleBatch> batches;
  for (int k = 0; k < 4; ++k) batches.push_back(masked_batch(rows, false, rng));
  ops::DrawsInFlight slot[2];
  std::vector<ops::SampledTokens> got(4), want(4);
  for (int k = 0; k < 4; ++k) {
    if (k >= 2) ops::sample_tokens_end(slot[k % 2], got[size_t(k - 2)]);
    ops::sample_tokens_begin(glogits, batches[size_t(k)], slot[k % 2]);
  }
  ops::sample_tokens_end(slot[0], got[2]);
  ops::sample_tokens_end(slot[1], got[3]);
  for (int k = 0; k < 4; ++k) {
    ops::sample_tokens(logits, batches[size_t(k)], want[size_t(k)]);
    check_masked(batches[size_t(k)], want[size_t(k)], got[size_t(k)], "two slots");
  }
}

// ---- the bare greedy path: a greedy draw without adjustments or log-probabilities takes the
// multi-block arg max, reading its mask bits (no processed copy) ----

constexpr int32_t kEos = 248044;  // Qwen3.5's EOS id
constexpr int kEdgeKinds = 10;

// One logits row and its mask of edge kind `kind` (0: none; else the allowed tokens: 1 one at
// random, 2 the last id, 3 the first id, 4 half at random, 5 EOS only, 6 none at all, 7 all but
// the row's arg max, 8 half at random plus three tied at the top (ids a < a + 7 < a + 40000),
// 9 three whose logits are -inf). Kinds 8 and 9 write into the row. Returns the id the CPU's
// arg max of the masked row must give where the kind decides it, else -1.
int32_t edge_mask(int kind, float* row, std::vector<uint64_t>& words, std::mt19937& rng) {
  words.assign(size_t((kVocab + 63) / 64), 0);
  auto set = [&](int64_t id) { words[size_t(id >> 6)] |= uint64_t(1) << (id & 63); };
  auto clear = [&](int64_t id) { words[size_t(id >> 6)] &= ~(uint64_t(1) << (id & 63)); };
  std::uniform_int_distribution<int64_t> any(0, kVocab - 1);
  switch (kind) {
    case 1: set(any(rng)); return -1;
    case 2: set(kVocab - 1); return int32_t(kVocab - 1);
    case 3: set(0); return 0;
    case 5: set(kEos); return kEos;
    case 6: return 0;  // every token refused: the CPU's arg max of an all -inf row
    case 7: {
      int64_t best = 0;
      for (int64_t i = 1; i < kVocab; ++i) best = row[i] > row[best] ? i : best;
      for (int64_t i = 0; i < kVocab; ++i) set(i);
      clear(best);
      return -1;
    }
    case 9: {
      for (int j = 0; j < 3; ++j) {
        const int64_t id = 1 + any(rng) % (kVocab - 1);  // not 0: the pick must still be 0
        set(id);
        row[id] = -INFINITY;
      }
      return 0;  // all allowed are -inf: the lowest id of the (-inf) row, refused or not
    }
    default: break;
  }
  if (kind == 4 || kind == 8) {
    for (int64_t id = 0; id < kVocab; ++id) {
      if (rng() % 2) set(id);
    }
  }
  if (kind == 8) {
    const int64_t a = any(rng) % (kVocab - 40001);
    for (int64_t id : {a + 40000, a + 7, a}) {
      set(id);
      row[id] = 50.f;  // above every normal logit
    }
    return int32_t(a);
  }
  return -1;
}

// Random logits [256, V] with each row's edge kind (r % kEdgeKinds) applied, the masks and the
// ids the kinds decide.
struct EdgeRows {
  Tensor logits;
  std::vector<std::vector<uint64_t>> masks;
  std::vector<int32_t> decided;
};

EdgeRows edge_rows(int64_t rows, std::mt19937& rng) {
  EdgeRows e;
  e.logits = random_logits(rows, rng);
  e.masks.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    e.decided.push_back(edge_mask(int(r % kEdgeKinds), e.logits.data<float>() + r * kVocab, e.masks[size_t(r)], rng));
  }
  return e;
}

// Draw s reads row `row` and, when `masked` and its kind has one, its mask.
ops::SampleSpec edge_draw(ops::SampleBatch& b, const EdgeRows& e, int32_t row, bool masked) {
  ops::SampleSpec s;
  s.logits_row = row;
  if (masked && row % kEdgeKinds != 0) {
    s.allow_row = int32_t(b.allow.size() / size_t(b.allow_words));
    b.allow.insert(b.allow.end(), e.masks[size_t(row)].begin(), e.masks[size_t(row)].end());
  }
  return s;
}

// Every greedy id equals the CPU's, and the id the draw's kind decides.
void check_greedy(const ops::SampleBatch& b, const EdgeRows& e, const ops::SampledTokens& want,
                  const ops::SampledTokens& got, const char* what) {
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const ops::SampleSpec& s = b.rows[i];
    if (!s.greedy) continue;
    SCOPED_TRACE(std::string(what) + ": draw " + std::to_string(i) + ", row " + std::to_string(s.logits_row) +
                 ", kind " + std::to_string(s.logits_row % kEdgeKinds) + (s.allow_row >= 0 ? ", masked" : ""));
    EXPECT_EQ(got.ids[i], want.ids[i]);
    const int32_t decided = e.decided[size_t(s.logits_row)];
    if (s.allow_row >= 0 && s.adjust_count == 0 && decided >= 0) {
      EXPECT_EQ(want.ids[i], decided);
    }
    if (s.allow_row >= 0 && s.logits_row % kEdgeKinds != 6 && s.logits_row % kEdgeKinds != 9) {
      EXPECT_TRUE(allowed(b, s, got.ids[i])) << "refused token " << got.ids[i];
    }
  }
}

TEST(CudaMaskedSampling, BareGreedyReadsTheMaskAtBatch1And256) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(23);
  const int64_t rows = 256;
  const EdgeRows e = edge_rows(rows, rng);
  const Tensor glogits = e.logits.to(Device::kCuda);
  auto run = [&](const ops::SampleBatch& b, const char* what) {
    ops::SampledTokens want, got;
    ops::sample_tokens(e.logits, b, want);
    ops::sample_tokens(glogits, b, got);
    check_greedy(b, e, want, got, what);
    return got;
  };
  for (int32_t row = 0; row < 2 * kEdgeKinds; ++row) {  // batch 1, each kind twice
    ops::SampleBatch b;
    b.allow_words = (kVocab + 63) / 64;
    b.rows.push_back(edge_draw(b, e, row, true));
    run(b, "batch 1");
  }
  ops::SampleBatch all;  // batch 256, every draw bare greedy: only ids come back
  all.allow_words = (kVocab + 63) / 64;
  for (int32_t row = 0; row < rows; ++row) all.rows.push_back(edge_draw(all, e, row, true));
  const ops::SampledTokens got = run(all, "batch 256");
  int moved = 0;  // kind 7 refuses the row's arg max: the mask is read
  for (int32_t row = 7; row < rows; row += kEdgeKinds) {
    int32_t best = 0;
    const float* l = e.logits.data<float>() + int64_t(row) * kVocab;
    for (int64_t k = 1; k < kVocab; ++k) best = l[k] > l[best] ? int32_t(k) : best;
    moved += got.ids[size_t(row)] != best;
  }
  EXPECT_EQ(moved, int((rows - 7 + kEdgeKinds - 1) / kEdgeKinds));
}

// Bare greedy draws among draws that keep the processed copy (masked with adjustments, with
// log-probabilities, sampled) and unmasked ones, at batch 256.
TEST(CudaMaskedSampling, BareGreedyAmongOtherDrawsAtBatch256) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(24);
  const int64_t rows = 256;
  const EdgeRows e = edge_rows(rows, rng);
  const Tensor glogits = e.logits.to(Device::kCuda);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (bool raw : {false, true}) {
    ops::SampleBatch b;
    b.raw_logprobs = raw;
    b.allow_words = (kVocab + 63) / 64;
    for (int32_t row = 0; row < rows; ++row) {
      const int kind = row % kEdgeKinds;
      int cat = (row / kEdgeKinds + (raw ? 3 : 0)) % 6;
      const bool nothing_drawable = kind == 6 || kind == 9;  // no finite allowed logit
      if (nothing_drawable && (cat == 3 || cat == 4)) cat = 0;
      // 0 masked bare greedy, 1 masked greedy with adjustments, 2 unmasked bare greedy, 3 masked
      // greedy with log-probabilities, 4 masked sampled, 5 unmasked greedy with adjustments.
      ops::SampleSpec s = edge_draw(b, e, row, cat != 2 && cat != 5);
      if (cat == 1 || cat == 5) {
        s.repetition_penalty = 1.2f;
        s.adjust_begin = int32_t(b.adjust.size());
        for (int j = 0; j < 50; ++j) {
          ops::LogitAdjust a;
          a.id = int32_t((int64_t(j) * 4957 + row) % kVocab);
          a.bias = j % 9 == 0 ? 60.f : 0.f;  // 60: above every logit, refused or not
          a.repeat = j % 2;
          a.subtract = j % 3 == 0 ? 0.3f : 0.f;
          b.adjust.push_back(a);
        }
        s.adjust_count = 50;
      }
      if (cat == 3) s.num_top_logprobs = 3;
      if (cat == 4) {
        s.greedy = false;
        s.inv_temperature = 1.f / 0.8f;
        s.top_p = 0.95f;
        s.uniform = u(rng) * 0.9999f;
      }
      b.rows.push_back(s);
    }
    ops::SampledTokens want, got;
    ops::sample_tokens(e.logits, b, want);
    ops::sample_tokens(glogits, b, got);
    check_greedy(b, e, want, got, raw ? "mixed, raw" : "mixed");
    int sampled = 0, differ = 0;
    double max_lp = 0;
    for (size_t i = 0; i < b.rows.size(); ++i) {
      const ops::SampleSpec& s = b.rows[i];
      SCOPED_TRACE("draw " + std::to_string(i));
      if (!s.greedy) {
        ++sampled;
        differ += got.ids[i] != want.ids[i];
        EXPECT_TRUE(allowed(b, s, got.ids[i])) << "drew refused token " << got.ids[i];
      }
      if (s.num_top_logprobs >= 0 && got.ids[i] == want.ids[i]) {
        max_lp = std::max(max_lp, double(std::fabs(got.logprobs[i] - want.logprobs[i])));
        for (int k = 0; k < s.num_top_logprobs; ++k) {
          const size_t at = i * ops::kMaxTopLogprobs + size_t(k);
          EXPECT_EQ(got.top_ids[at], want.top_ids[at]) << "top " << k;
        }
      }
    }
    EXPECT_LE(differ, std::max(1, sampled / 100)) << "of " << sampled << " sampled draws";
    EXPECT_LE(max_lp, 1e-4);
  }
}

#if defined(STRATA_WITH_CUDA)
// What a mask costs a greedy step at batch 256 (printed for the record, nothing checked): per
// step with uploads and all (the ids back on the host), and the device's own time (ten steps
// queued behind a stalled stream, so the host's staging is off the clock).
TEST(CudaMaskedSampling, GreedyTimesAtBatch256) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(25);
  const Tensor wide = random_logits(256, rng).to(Device::kCuda);
  constexpr int kSteps = 10;
  auto time_batch = [&](const ops::SampleBatch& b, float* device_ms) {
    ops::SampledTokens out;
    ops::sample_tokens(wide, b, out);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, ops::cuda::stream());
    for (int k = 0; k < kSteps; ++k) ops::sample_tokens(wide, b, out);
    cudaEventRecord(e1, ops::cuda::stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    std::vector<ops::DrawsInFlight> slots(kSteps);
    for (auto& slot : slots) {  // their buffers allocated before the clock starts
      ops::sample_tokens_begin(wide, b, slot);
      ops::sample_tokens_end(slot, out);
    }
    ops::cuda::stall_stream(50.0);
    cudaEventRecord(e0, ops::cuda::stream());
    for (auto& slot : slots) ops::sample_tokens_begin(wide, b, slot);
    cudaEventRecord(e1, ops::cuda::stream());
    for (auto& slot : slots) ops::sample_tokens_end(slot, out);
    cudaEventElapsedTime(device_ms, e0, e1);
    *device_ms /= kSteps;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / kSteps;
  };
  // Masks of half the vocabulary (every sector of logits read) and of one token; the last
  // batch's zero-bias entry on each draw sends it through the processed copy (the path masked
  // greedy draws took before).
  ops::SampleBatch plain, half, one, copied;
  for (ops::SampleBatch* b : {&half, &one, &copied}) b->allow_words = (kVocab + 63) / 64;
  for (int r = 0; r < 256; ++r) {
    ops::SampleSpec s;
    s.logits_row = r;
    plain.rows.push_back(s);
    s.allow_row = add_mask(half, 4, rng);
    half.rows.push_back(s);
    copied.rows.push_back(s);
    s.allow_row = add_mask(one, 1, rng);
    one.rows.push_back(s);
    ops::LogitAdjust a;
    a.id = r;
    copied.rows.back().adjust_begin = int32_t(copied.adjust.size());
    copied.rows.back().adjust_count = 1;
    copied.adjust.push_back(a);
  }
  copied.allow = half.allow;
  const std::pair<const char*, const ops::SampleBatch*> cases[] = {
      {"unmasked", &plain}, {"masked, half the vocabulary", &half}, {"masked, one token", &one},
      {"masked through the processed copy", &copied}};
  for (const auto& [what, b] : cases) {
    float device_ms = 0;
    const float ms = time_batch(*b, &device_ms);
    std::printf("sample_tokens at batch 256, greedy, %s: %.3f ms a step, %.3f ms on the device\n", what, ms,
                device_ms);
  }
}
#endif

}  // namespace
}  // namespace strata::testing
