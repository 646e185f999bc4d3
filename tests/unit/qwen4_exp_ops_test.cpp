// The Qwen4-Exp ops and constants on hand-made inputs: the PLE hash derivation, the n-gram ids
// (EOS resets, chunking), the sharded table gather, the QSA selection rule and key pooling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "strata/core/error.h"
#include "strata/models/qwen4_exp_config.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata {
namespace {

// ---- PLE hash constants ----

// The real config (Qwen4ExpTextConfig() defaults: vocab 248320, seed 1234, ngram_size 3,
// 8 heads per order, base 20,000,000, divisor 128), derived by hand-translating HF's
// _build_layer_multipliers / _find_nth_prime_after into Python and running it; the first row
// matches the cross-check note's values from HF's own functions. The HF-produced file
// tests/fixtures/qwen4_exp_hash/reference.json is checked by the golden test.
Qwen4ExpConfig real_config() {
  Qwen4ExpConfig c;
  c.vocab = 248320;
  c.hidden = 2048;
  c.ngram_size = 3;
  c.heads_per_ngram = 8;
  c.ngram_vocab_base = 20'000'000;
  c.ngram_vocab_divisor = 128;
  c.seed = 1234;
  c.ple_embed_dim = 2048;
  c.eos = {248044};
  return c;
}

TEST(Qwen4ExpHash, MultipliersOfTheRealConfig) {
  EXPECT_EQ(ple_layer_multipliers(248320, 3, 0, 1234),
            (std::vector<int64_t>{23703573157769, 20109073645365, 8052911324071}));
  EXPECT_EQ(ple_layer_multipliers(248320, 3, 1, 1234),
            (std::vector<int64_t>{3352040966061, 19752442147475, 10742103100073}));
  // A tiny vocabulary: the bound (2^63 - 1) / vocab / 2 is large, the values stay odd.
  for (int64_t m : ple_layer_multipliers(256, 3, 0, 1234)) {
    EXPECT_EQ(m % 2, 1);
    EXPECT_LT(m, int64_t((uint64_t(1) << 63) / 256));
  }
}

TEST(Qwen4ExpHash, PrimeVocabulariesOfTheRealConfig) {
  const NgramTableLayout l0 = ngram_table_layout(real_config(), 0);
  EXPECT_EQ(l0.hash.head_vocab_sizes,
            (std::vector<int64_t>{20000003, 20000023, 20000033, 20000047, 20000059, 20000063,
                                  20000069, 20000077, 20000081, 20000093, 20000107, 20000147,
                                  20000153, 20000159, 20000161, 20000171}));
  EXPECT_EQ(l0.total_rows, 320001446);
  EXPECT_EQ(l0.padded_rows, 320001536);  // 128 shards of 2,500,012 rows in the real checkpoint
  EXPECT_EQ(l0.dim, 128);
  EXPECT_EQ(l0.hash.head_offsets[0], 0);
  EXPECT_EQ(l0.hash.head_offsets[1], 20000003);
  EXPECT_EQ(l0.hash.eos, 248044);
  // Rank 1 continues the prime walk where rank 0 stopped.
  const NgramTableLayout l1 = ngram_table_layout(real_config(), 1);
  EXPECT_GT(l1.hash.head_vocab_sizes[0], l0.hash.head_vocab_sizes.back());
  EXPECT_EQ(l1.hash.head_vocab_sizes[0], nth_prime_after(20'000'000 - 1, 17));
}

TEST(Qwen4ExpHash, NthPrimeAfter) {
  EXPECT_EQ(nth_prime_after(49, 1), 53);
  EXPECT_EQ(nth_prime_after(49, 8), 83);
  EXPECT_EQ(nth_prime_after(1, 1), 2);
  EXPECT_EQ(nth_prime_after(2, 1), 3);
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);  // the reference value of SplitMix64(0)
}

// ---- n-gram ids ----

// Multipliers 1, 2^10, 2^20 and head sizes beyond 2^30 make each id spell out its shifted
// tokens (tokens < 2^10): bigram id = t0 | t1 << 10, trigram id = t0 | t1 << 10 | t2 << 20.
ops::NgramHashSpec spelling_spec(int64_t eos) {
  ops::NgramHashSpec s;
  s.ngram_size = 3;
  s.heads_per_ngram = 2;
  s.eos = eos;
  s.multipliers = {1, 1 << 10, 1 << 20};
  const int64_t big = 1073741827;  // a prime above 2^30
  s.head_vocab_sizes = {big, big, big, big};
  s.head_offsets = {0, 0, 0, 0};
  return s;
}

ForwardBatch one_sequence(const std::vector<int32_t>& tokens, int32_t ctx_len, int slot = 0) {
  ForwardBatch b;
  b.token_ids = tokens;
  SeqInBatch s;
  s.q_start = 0;
  s.q_len = int32_t(tokens.size());
  s.ctx_len = ctx_len;
  s.state_slot = slot;
  s.block_table = {0, 1, 2, 3, 4, 5, 6, 7};
  for (size_t i = 0; i < tokens.size(); ++i) b.positions.push_back(ctx_len + int32_t(i));
  b.seqs.push_back(s);
  return b;
}

std::vector<std::vector<int64_t>> run_ngram(const std::vector<std::vector<int32_t>>& chunks,
                                            const ops::NgramHashSpec& spec) {
  Tensor context = Tensor::zeros({2, 2}, DType::kI32);
  context.data<int32_t>()[2] = 555;  // slot 1 holds junk that a fresh sequence must ignore
  std::vector<std::vector<int64_t>> rows;
  int32_t done = 0;
  for (const auto& c : chunks) {
    ForwardBatch b = one_sequence(c, done, 1);
    Tensor ids = Tensor::empty({int64_t(c.size()), 4}, DType::kI64);
    ops::ngram_ids(b, spec, 1000, context, ids);
    for (size_t i = 0; i < c.size(); ++i) {
      rows.emplace_back(ids.data<int64_t>() + i * 4, ids.data<int64_t>() + (i + 1) * 4);
    }
    done += int32_t(c.size());
  }
  return rows;
}

TEST(Qwen4ExpNgram, SegmentsRestartAfterEos) {
  const int64_t e = 2;
  const auto spec = spelling_spec(e);
  auto bi = [](int64_t a, int64_t b) { return a | b << 10; };
  auto tri = [](int64_t a, int64_t b, int64_t c) { return a | b << 10 | c << 20; };
  // tokens: 10 11 EOS 12 13 EOS EOS 14
  const std::vector<int32_t> toks = {10, 11, 2, 12, 13, 2, 2, 14};
  const auto rows = run_ngram({toks}, spec);
  // Before the start, history is EOS; an EOS keeps its own left context; after an EOS the
  // context is EOS again.
  const std::vector<std::vector<int64_t>> want = {
      {bi(10, e), bi(10, e), tri(10, e, e), tri(10, e, e)},
      {bi(11, 10), bi(11, 10), tri(11, 10, e), tri(11, 10, e)},
      {bi(2, 11), bi(2, 11), tri(2, 11, 10), tri(2, 11, 10)},
      {bi(12, e), bi(12, e), tri(12, e, e), tri(12, e, e)},
      {bi(13, 12), bi(13, 12), tri(13, 12, e), tri(13, 12, e)},
      {bi(2, 13), bi(2, 13), tri(2, 13, 12), tri(2, 13, 12)},
      {bi(2, e), bi(2, e), tri(2, e, e), tri(2, e, e)},
      {bi(14, e), bi(14, e), tri(14, e, e), tri(14, e, e)},
  };
  EXPECT_EQ(rows, want);
  // The same ids however the sequence is split into steps (the context slot carries over).
  EXPECT_EQ(run_ngram({{10}, {11, 2}, {12}, {13, 2, 2}, {14}}, spec), want);
  EXPECT_EQ(run_ngram({{10}, {11}, {2}, {12}, {13}, {2}, {2}, {14}}, spec), want);
}

TEST(Qwen4ExpNgram, HeadsTakeTheirPrimeAndOffset) {
  ops::NgramHashSpec s;
  s.ngram_size = 3;
  s.heads_per_ngram = 2;
  s.eos = 0;
  s.multipliers = {3, 5, 7};
  s.head_vocab_sizes = {11, 13, 17, 19};
  s.head_offsets = {0, 11, 24, 41};
  Tensor context = Tensor::zeros({1, 2}, DType::kI32);
  ForwardBatch b = one_sequence({4, 6}, 0);
  Tensor ids = Tensor::empty({2, 4}, DType::kI64);
  ops::ngram_ids(b, s, 100, context, ids);
  const int64_t m2 = (6 * 3) ^ (4 * 5), m3 = m2 ^ (0 * 7);  // second token: shifts 0, 1, 2
  EXPECT_EQ(ids.data<int64_t>()[4], m2 % 11);
  EXPECT_EQ(ids.data<int64_t>()[5], m2 % 13 + 11);
  EXPECT_EQ(ids.data<int64_t>()[6], m3 % 17 + 24);
  EXPECT_EQ(ids.data<int64_t>()[7], m3 % 19 + 41);
  EXPECT_EQ(context.data<int32_t>()[0], 4);
  EXPECT_EQ(context.data<int32_t>()[1], 6);
  ForwardBatch bad = one_sequence({4, 100}, 0);
  EXPECT_THROW(ops::ngram_ids(bad, s, 100, context, ids), Error);
}

// ---- sharded table gather ----

TEST(Qwen4ExpNgram, ShardedGatherConvertsOnlyTheRows) {
  std::vector<Tensor> shards;
  for (int s = 0; s < 3; ++s) {
    Tensor t = Tensor::empty({2 + s, 2}, DType::kBF16);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<uint16_t>()[i] = f32_to_bf16(float(100 * s + i));
    }
    shards.push_back(t);
  }
  // rows: shard 0 has 0-1, shard 1 has 2-4, shard 2 has 5-8
  Tensor ids = Tensor::empty({2, 2}, DType::kI64);
  const int64_t rows[] = {4, 0, 5, 8};
  std::memcpy(ids.raw(), rows, sizeof(rows));
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  ops::sharded_embedding(shards, ids, out);
  const float want[] = {104, 105, 0, 1, 200, 201, 206, 207};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out.data<float>()[i], want[i]) << i;
  ids.data<int64_t>()[0] = 9;
  EXPECT_THROW(ops::sharded_embedding(shards, ids, out), Error);
}

// ---- QSA ----

// A one-head, two-dim indexer where block b's key is [s_b, 0] and q = [1, 0]: score_b = relu(s_b).
struct Indexer {
  int ratio = 4, block_size = 8, top = 2;
  std::vector<int32_t> table = {2, 0, 3, 1};  // pages out of order
  Tensor cache = Tensor::zeros({4, 2, 2}, DType::kF32);

  ForwardBatch batch(int32_t ctx_len, int32_t q_len) {
    ForwardBatch b;
    SeqInBatch s;
    s.q_len = q_len;
    s.ctx_len = ctx_len;
    s.state_slot = 0;
    s.block_table = table;
    for (int32_t i = 0; i < q_len; ++i) {
      b.token_ids.push_back(1);
      b.positions.push_back(ctx_len + i);
    }
    b.seqs.push_back(s);
    return b;
  }
  void set_scores(const std::vector<float>& scores) {
    ForwardBatch b = batch(0, int32_t(scores.size()) * ratio);
    Tensor keys = Tensor::zeros({int64_t(scores.size()), 2}, DType::kF32);
    for (size_t i = 0; i < scores.size(); ++i) keys.data<float>()[2 * i] = scores[i];
    ops::qsa_store_block_keys(keys, cache, b, ratio, block_size);
  }
  std::vector<int32_t> select(int32_t pos) {
    ForwardBatch b = batch(pos, 1);
    Tensor q = Tensor::zeros({1, 1, 2}, DType::kF32);
    q.data<float>()[0] = 1.f;
    const int64_t width = top * ratio + ratio - 1;
    Tensor sel = Tensor::empty({1, width}, DType::kI32);
    ops::qsa_select(q, cache, b, ratio, block_size, top, 0.5f, sel);
    std::vector<int32_t> out;
    for (int64_t j = 0; j < width && sel.data<int32_t>()[j] >= 0; ++j) out.push_back(sel.data<int32_t>()[j]);
    return out;
  }
};

std::vector<int32_t> range(int32_t a, int32_t b) {
  std::vector<int32_t> v(b - a);
  std::iota(v.begin(), v.end(), a);
  return v;
}

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Qwen4ExpQsa, OwnBlockCompetesAndIsNotForcedIn) {
  Indexer ix;
  ix.set_scores({3.f, 2.f, 1.f, 5.f});
  // p = 11 ends block 2 (tokens 8-11), which loses to blocks 0 and 1: the query sees neither
  // itself nor its block.
  EXPECT_EQ(ix.select(11), range(0, 8));
  // p = 13: blocks 0-2 complete, the tail 12-13 is always kept.
  EXPECT_EQ(ix.select(13), join(range(0, 8), range(12, 14)));
  // p = 15 completes block 3 (score 5): it wins with block 0.
  EXPECT_EQ(ix.select(15), join(range(0, 4), range(12, 16)));
  // While the complete blocks fit the budget, the whole causal prefix is visible.
  EXPECT_EQ(ix.select(7), range(0, 8));
  EXPECT_EQ(ix.select(9), range(0, 10));
  EXPECT_EQ(ix.select(2), range(0, 3));
}

TEST(Qwen4ExpQsa, TiesGoToTheLowerBlock) {
  Indexer ix;
  ix.set_scores({-1.f, 0.f, -3.f, 0.f});  // ReLU: every score is 0
  EXPECT_EQ(ix.select(15), range(0, 8));
  ix.set_scores({1.f, 2.f, 2.f, 2.f});
  EXPECT_EQ(ix.select(15), range(4, 12));
}

// Tensor-parallel indexer heads: each rank scores over its heads, the summed scores select.
TEST(Qwen4ExpQsa, SummedHeadScoresSelectAsAllHeadsDo) {
  Indexer ix;
  // Block keys [a_b, c_b]; head 0 (q = [1, 0]) scores a, head 1 (q = [0, 1]) scores c.
  const float keys[] = {3, 0, 0, 2.5f, 1, 0, 0, 0.5f};
  Tensor k = Tensor::empty({4, 2}, DType::kF32);
  std::memcpy(k.raw(), keys, sizeof(keys));
  ops::qsa_store_block_keys(k, ix.cache, ix.batch(0, 16), ix.ratio, ix.block_size);
  const ForwardBatch b = ix.batch(15, 1);
  const int64_t blocks = ops::qsa_max_blocks(b, ix.ratio), width = ix.top * ix.ratio + ix.ratio - 1;
  ASSERT_EQ(blocks, 4);
  auto head = [](int h) {
    Tensor q = Tensor::zeros({1, 1, 2}, DType::kF32);
    q.data<float>()[h] = 1.f;
    return q;
  };
  Tensor both = Tensor::zeros({1, 2, 2}, DType::kF32);
  both.data<float>()[0] = both.data<float>()[3] = 1.f;
  Tensor want = Tensor::empty({1, width}, DType::kI32), got = Tensor::empty({1, width}, DType::kI32);
  ops::qsa_select(both, ix.cache, b, ix.ratio, ix.block_size, ix.top, 0.5f, want);
  Tensor sum = Tensor::empty({1, blocks}, DType::kF32), part = Tensor::empty({1, blocks}, DType::kF32);
  ops::qsa_block_scores(head(0), ix.cache, b, ix.ratio, ix.block_size, 0.5f, sum);
  // One head alone prefers blocks 0 and 2.
  ops::qsa_select_scored(sum, b, ix.ratio, ix.top, got);
  EXPECT_EQ(got.data<int32_t>()[4], 8);
  ops::qsa_block_scores(head(1), ix.cache, b, ix.ratio, ix.block_size, 0.5f, part);
  for (int64_t j = 0; j < blocks; ++j) sum.data<float>()[j] += part.data<float>()[j];
  EXPECT_FLOAT_EQ(sum.data<float>()[1], 1.25f);
  ops::qsa_select_scored(sum, b, ix.ratio, ix.top, got);
  for (int64_t j = 0; j < width; ++j) EXPECT_EQ(got.data<int32_t>()[j], want.data<int32_t>()[j]) << j;
  EXPECT_EQ(want.data<int32_t>()[4], 4);  // blocks 0 and 1 (scores 3 and 2.5 before the scale)
}

TEST(Qwen4ExpQsa, PoolingIsTheSameInEveryChunking) {
  const int ratio = 4, d = 3, n = 13;
  Tensor raw = Tensor::empty({n, d}, DType::kF32);
  for (int64_t i = 0; i < n * d; ++i) raw.data<float>()[i] = std::sin(float(i) * 0.7f);
  auto pool = [&](const std::vector<int32_t>& chunks) {
    Tensor tail = Tensor::zeros({1, ratio - 1, d}, DType::kF32);
    std::vector<float> out;
    int32_t done = 0;
    for (int32_t len : chunks) {
      ForwardBatch b;
      SeqInBatch s;
      s.q_len = len;
      s.ctx_len = done;
      s.state_slot = 0;
      b.seqs.push_back(s);
      b.token_ids.assign(len, 1);
      const int64_t nb = int64_t(ops::qsa_completed_blocks(b, ratio).size());
      Tensor pooled = Tensor::empty({nb, d}, DType::kF32);
      ops::qsa_pool_keys(raw.rows(done, done + len), tail, b, ratio, pooled);
      out.insert(out.end(), pooled.data<float>(), pooled.data<float>() + nb * d);
      done += len;
    }
    return out;
  };
  const std::vector<float> whole = pool({n});
  ASSERT_EQ(whole.size(), size_t(3 * d));
  for (int c = 0; c < d; ++c) {
    const float* r = raw.data<float>();
    const float mean = (r[4 * d + c] + r[5 * d + c] + r[6 * d + c] + r[7 * d + c]) / 4.f;
    EXPECT_FLOAT_EQ(whole[d + c], mean);
  }
  EXPECT_EQ(pool({3, 5, 4, 1}), whole);
  EXPECT_EQ(pool({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), whole);
  EXPECT_EQ(pool({2, 11}), whole);
}

TEST(Qwen4ExpQsa, AttentionOverTheSelectedTokensOnly) {
  // Two cached tokens with distinct values; the query selects only position 0 (or only 1).
  const int64_t d = 2;
  Tensor kc = Tensor::zeros({1, 4, 1, d}, DType::kF32), vc = Tensor::zeros({1, 4, 1, d}, DType::kF32);
  ForwardBatch b;
  SeqInBatch s;
  s.q_len = 2;
  s.block_table = {0};
  s.state_slot = 0;
  b.seqs.push_back(s);
  b.token_ids = {1, 1};
  b.positions = {0, 1};
  Tensor q = Tensor::zeros({2, 1, d}, DType::kF32), k = Tensor::zeros({2, 1, d}, DType::kF32);
  Tensor v = Tensor::empty({2, 1, d}, DType::kF32);
  const float vals[] = {1, 2, 30, 40};
  std::memcpy(v.raw(), vals, sizeof(vals));
  Tensor sel = Tensor::empty({2, 2}, DType::kI32), out = Tensor::empty({2, 1, d}, DType::kF32);
  const int32_t rows[] = {-1, 0, 1, -1};  // -1 entries anywhere are skipped
  std::memcpy(sel.raw(), rows, sizeof(rows));
  ops::paged_attention_selected(q, k, v, kc, vc, b, sel, 1.f, out);
  EXPECT_EQ(out.data<float>()[0], 1.f);
  EXPECT_EQ(out.data<float>()[2], 30.f);
  // A selection beyond the query's own position is rejected.
  const int32_t future[] = {1, -1, 1, -1};
  std::memcpy(sel.raw(), future, sizeof(future));
  EXPECT_THROW(ops::paged_attention_selected(q, k, v, kc, vc, b, sel, 1.f, out), Error);
}

// ---- hyper-connections ----

TEST(Qwen4ExpHc, ReadMixAndWrite) {
  // Two streams of width 2.
  Tensor normed = Tensor::empty({1, 4}, DType::kF32), mix = Tensor::zeros({1, 4}, DType::kF32);
  const float n[] = {1, 2, 3, 4};
  std::memcpy(normed.raw(), n, sizeof(n));
  Tensor out = Tensor::empty({1, 2}, DType::kF32);
  ops::hc_mix(normed, mix, 2, out);  // sigmoid(0) = 1/2: out = (n0 + n1) / 4
  EXPECT_FLOAT_EQ(out.data<float>()[0], 1.f);
  EXPECT_FLOAT_EQ(out.data<float>()[1], 1.5f);
  Tensor inj = Tensor::zeros({1, 2}, DType::kF32);
  ops::hc_inject_weights(inj, 2);  // 2 sigmoid(0) = 1
  inj.data<float>()[1] = 3.f;
  Tensor res = Tensor::zeros({1, 4}, DType::kF32);
  ops::hc_write(res, out, inj);
  const float want[] = {1, 1.5f, 3, 4.5f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(res.data<float>()[i], want[i]);
  // Grouped norm: each group normalised on its own, (1 + w) per feature.
  Tensor x = Tensor::empty({1, 4}, DType::kF32), w = Tensor::zeros({4}, DType::kF32);
  const float xv[] = {3, 4, 1, 1};
  std::memcpy(x.raw(), xv, sizeof(xv));
  w.data<float>()[3] = 1.f;
  Tensor y = Tensor::empty({1, 4}, DType::kF32);
  ops::rms_norm_grouped(x, w, 2, 0.f, y);
  const float r = std::sqrt(12.5f);
  EXPECT_FLOAT_EQ(y.data<float>()[0], 3.f / r);
  EXPECT_FLOAT_EQ(y.data<float>()[2], 1.f);
  EXPECT_FLOAT_EQ(y.data<float>()[3], 2.f);
}

TEST(Qwen4ExpPle, SignedSqrtGate) {
  // One stream of width 4: g = <k, q> / 2; gate = sigmoid(sign(g) sqrt(|g|)).
  Tensor k = Tensor::empty({3, 4}, DType::kF32), q = Tensor::empty({3, 4}, DType::kF32);
  Tensor v = Tensor::empty({3, 4}, DType::kF32), out = Tensor::empty({3, 4}, DType::kF32);
  const float kv[] = {2, 0, 0, 0, -8, 0, 0, 0, 0, 0, 0, 0};
  const float qv[] = {4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  std::memcpy(k.raw(), kv, sizeof(kv));
  std::memcpy(q.raw(), qv, sizeof(qv));
  for (int i = 0; i < 12; ++i) v.data<float>()[i] = 1.f;
  ops::ple_gate(k, q, v, 1, out);
  auto sig = [](float x) { return 1.f / (1.f + std::exp(-x)); };
  EXPECT_FLOAT_EQ(out.data<float>()[0], sig(2.f));    // g = 4 -> sqrt 2
  EXPECT_FLOAT_EQ(out.data<float>()[4], sig(-2.f));   // g = -4
  EXPECT_FLOAT_EQ(out.data<float>()[8], 0.5f);        // g = 0: sign(0) = 0
}

}  // namespace
}  // namespace strata
