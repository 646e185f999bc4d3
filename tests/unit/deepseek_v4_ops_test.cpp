// The DeepSeek-V4 ops on small hand-computed cases: Sinkhorn-Knopp, the hyper-connection
// mixing direction, interleaved tail RoPE, the compressors (overlapping and not, all at once and
// token by token through the rings), the indexer's top-k (causality, the lower index winning a
// tie, -1 fill), the window + compressed attention with sinks, and the routers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "strata/core/error.h"
#include "strata/ops/deepseek_v4_ops.h"

using namespace strata;

namespace {

Tensor make(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  EXPECT_EQ(size_t(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// One sequence of q_len new tokens after ctx_len cached ones, pages 0, 1, 2, ... and slot 0.
ForwardBatch one_sequence(int32_t ctx_len, int32_t q_len, int pages = 8) {
  ForwardBatch b;
  for (int32_t i = 0; i < q_len; ++i) {
    b.token_ids.push_back(3);
    b.positions.push_back(ctx_len + i);
  }
  SeqInBatch s;
  s.q_len = q_len;
  s.ctx_len = ctx_len;
  for (int p = 0; p < pages; ++p) s.block_table.push_back(p);
  s.state_slot = 0;
  b.seqs.push_back(s);
  return b;
}

}  // namespace

TEST(Dsv4Sinkhorn, HandComputedTwoByTwo) {
  // logits [[0, ln 3], [0, 0]]: softmax rows [1/4, 3/4], [1/2, 1/2]; columns then sum to 3/4 and
  // 5/4, giving [[1/3, 3/5], [2/3, 2/5]] after one iteration; rows then columns once more give
  // [[4/11, 12/19], [7/11, 7/19]].
  std::vector<float> c = {0.f, std::log(3.f), 0.f, 0.f};
  ops::sinkhorn_project(c.data(), 2, 1, 0.f);
  EXPECT_NEAR(c[0], 1.f / 3, 1e-6);
  EXPECT_NEAR(c[1], 3.f / 5, 1e-6);
  EXPECT_NEAR(c[2], 2.f / 3, 1e-6);
  EXPECT_NEAR(c[3], 2.f / 5, 1e-6);
  c = {0.f, std::log(3.f), 0.f, 0.f};
  ops::sinkhorn_project(c.data(), 2, 2, 0.f);
  EXPECT_NEAR(c[0], 4.f / 11, 1e-6);
  EXPECT_NEAR(c[1], 12.f / 19, 1e-6);
  EXPECT_NEAR(c[2], 7.f / 11, 1e-6);
  EXPECT_NEAR(c[3], 7.f / 19, 1e-6);
}

TEST(Dsv4Sinkhorn, TwentyIterationsAreDoublyStochastic) {
  std::vector<float> c = {0.3f, -1.2f, 2.0f, 0.1f, 0.5f, 0.7f, -0.4f, 1.5f, 0.f, 0.9f, 1.1f, -2.f,
                          0.2f, 0.4f, -0.6f, 0.8f};
  ops::sinkhorn_project(c.data(), 4, 20, 1e-6f);
  for (int i = 0; i < 4; ++i) {
    float row = 0, col = 0;
    for (int j = 0; j < 4; ++j) {
      row += c[size_t(i * 4 + j)];
      col += c[size_t(j * 4 + i)];
      EXPECT_GT(c[size_t(i * 4 + j)], 0.f);
    }
    EXPECT_NEAR(col, 1.f, 1e-5);  // columns are normalised last
    EXPECT_NEAR(row, 1.f, 2e-3);
  }
}

TEST(Dsv4Hyper, PreWithKnownMixesAndPostMixesByColumns) {
  // S = 2, D = 2, fn = 0 so that every mix is its base: pre = sigmoid(base) + eps,
  // post = 2 sigmoid(base), comb = sinkhorn(base).
  Tensor x = make({1, 2, 2}, {1.f, 2.f, 3.f, 4.f});
  Tensor fn = make({8, 4}, std::vector<float>(32, 0.f));
  Tensor base = make({8}, {0.f, std::log(3.f), 0.f, -std::log(3.f), 0.f, std::log(3.f), 0.f, 0.f});
  Tensor scale = make({3}, {1.f, 1.f, 1.f});
  Tensor collapsed = make({1, 2}, {0, 0}), post = make({1, 2}, {0, 0}), comb = make({1, 2, 2}, {0, 0, 0, 0});
  ops::HyperSpec spec{2, 1, 0.f, 1e-6f};
  ops::hyper_pre(x, fn, base, scale, spec, collapsed, post, comb);
  // pre = [1/2, 3/4]: collapsed = [1/2 * 1 + 3/4 * 3, 1/2 * 2 + 3/4 * 4] = [2.75, 4].
  EXPECT_NEAR(collapsed.data<float>()[0], 2.75f, 1e-6);
  EXPECT_NEAR(collapsed.data<float>()[1], 4.f, 1e-6);
  EXPECT_NEAR(post.data<float>()[0], 1.f, 1e-6);
  EXPECT_NEAR(post.data<float>()[1], 0.5f, 1e-6);
  EXPECT_NEAR(comb.data<float>()[0], 1.f / 3, 1e-6);
  EXPECT_NEAR(comb.data<float>()[3], 2.f / 5, 1e-6);
  // A non-zero fn: mix = fn . (x / rms(x)). x = [3, 4, 0, 0] has rms 2.5.
  Tensor x2 = make({1, 2, 2}, {3.f, 4.f, 0.f, 0.f});
  std::vector<float> f(32, 0.f);
  f[0] = f[1] = f[2] = f[3] = 1.f;  // pre logit 0 = (3 + 4) / 2.5 = 2.8
  ops::hyper_pre(x2, make({8, 4}, f), make({8}, std::vector<float>(8, 0.f)), scale, spec, collapsed, post, comb);
  const float pre0 = 1.f / (1.f + std::exp(-2.8f));
  EXPECT_NEAR(collapsed.data<float>()[0], pre0 * 3.f, 1e-5);
  EXPECT_NEAR(collapsed.data<float>()[1], pre0 * 4.f, 1e-5);
  // post: new stream k = post_k * y + sum_j comb[j, k] x_j (comb used by columns).
  Tensor xs = make({1, 2, 1}, {10.f, 100.f});
  Tensor y = make({1, 1}, {1.f});
  Tensor p = make({1, 2}, {0.5f, 2.f});
  Tensor cb = make({1, 2, 2}, {0.1f, 0.9f, 0.7f, 0.3f});
  ops::hyper_post(xs, y, p, cb, xs);
  EXPECT_NEAR(xs.data<float>()[0], 0.5f + 0.1f * 10 + 0.7f * 100, 1e-4);
  EXPECT_NEAR(xs.data<float>()[1], 2.f + 0.9f * 10 + 0.3f * 100, 1e-4);
}

TEST(Dsv4Rope, InterleavedTailAndInverse) {
  // D = 4, rotary 2: only (x2, x3) turn, by position * inv_freq = 1 radian.
  Tensor x = make({1, 1, 4}, {1.f, 2.f, 3.f, 4.f});
  ops::TailRope r{2, {1.f}, 1.f};
  ops::rope_interleaved_tail(x, {1}, r, false);
  EXPECT_EQ(x.data<float>()[0], 1.f);
  EXPECT_EQ(x.data<float>()[1], 2.f);
  EXPECT_NEAR(x.data<float>()[2], 3 * std::cos(1.f) - 4 * std::sin(1.f), 1e-6);
  EXPECT_NEAR(x.data<float>()[3], 4 * std::cos(1.f) + 3 * std::sin(1.f), 1e-6);
  ops::rope_interleaved_tail(x, {1}, r, true);
  EXPECT_NEAR(x.data<float>()[2], 3.f, 1e-6);
  EXPECT_NEAR(x.data<float>()[3], 4.f, 1e-6);
}

TEST(Dsv4Compressor, ClosedEntries) {
  ForwardBatch b = one_sequence(3, 6);  // positions 3..8 close entries 0 (at 3) and 1 (at 7)
  auto e = ops::closed_entries(b, 4);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].index, 0);
  EXPECT_EQ(e[1].index, 1);
  EXPECT_TRUE(ops::closed_entries(one_sequence(4, 3), 4).empty());
}

namespace {

// Pools 4 tokens of a ratio-2 compressor either at once or one token per step, and returns the
// entries in order.
std::vector<float> run_compressor(const ops::CompressorSpec& spec, const std::vector<float>& kv,
                                  const std::vector<float>& gate, const std::vector<float>& ape,
                                  bool stepwise) {
  const int64_t w = spec.width();
  Tensor ring_kv = Tensor::zeros({1, spec.ring_rows(), w}, DType::kF32);
  Tensor ring_gate = Tensor::zeros({1, spec.ring_rows(), w}, DType::kF32);
  Tensor ape_t = make({spec.ratio, w}, ape);
  std::vector<float> out;
  const int32_t total = int32_t(kv.size() / size_t(w));
  const int32_t step = stepwise ? 1 : total;
  for (int32_t start = 0; start < total; start += step) {
    ForwardBatch b = one_sequence(start, step);
    Tensor k = make({step, w}, std::vector<float>(kv.begin() + start * w, kv.begin() + (start + step) * w));
    Tensor g = make({step, w}, std::vector<float>(gate.begin() + start * w, gate.begin() + (start + step) * w));
    auto entries = ops::closed_entries(b, spec.ratio);
    Tensor pooled = Tensor::empty({int64_t(entries.size()), spec.head_dim}, DType::kF32);
    ops::compressor_pool(k, g, ape_t, ring_kv, ring_gate, b, spec, entries, pooled);
    for (float v : values(pooled)) out.push_back(v);
  }
  return out;
}

}  // namespace

TEST(Dsv4Compressor, SoftmaxGatedPoolingByHand) {
  // No overlap, ratio 2, one channel: entry 0 pools kv [1, 2] with gates [0, ln 3] -> weights
  // [1/4, 3/4] -> 1.75; entry 1 pools [3, 4] with equal gates -> 3.5.
  const ops::CompressorSpec plain{2, 1, false};
  for (bool stepwise : {false, true}) {
    auto got = run_compressor(plain, {1, 2, 3, 4}, {0, std::log(3.f), 0, 0}, {0, 0}, stepwise);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_NEAR(got[0], 1.75f, 1e-6);
    EXPECT_NEAR(got[1], 3.5f, 1e-6);
  }
  // Overlap, ratio 2, head_dim 1: tokens carry [Ca, Cb] = [1, 10], [2, 20], [3, 30], [4, 40];
  // ape gives the window's second slot ln 3 on both series.
  // entry 0: Cb of tokens 0, 1 with weights [1/4, 3/4] -> 17.5 (no window before it);
  // entry 1: Ca of tokens 0, 1 and Cb of tokens 2, 3, weights 1:3:1:3 -> 157 / 8.
  const ops::CompressorSpec overlap{2, 1, true};
  const float l3 = std::log(3.f);
  for (bool stepwise : {false, true}) {
    auto got = run_compressor(overlap, {1, 10, 2, 20, 3, 30, 4, 40}, std::vector<float>(8, 0.f),
                              {0, 0, l3, l3}, stepwise);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_NEAR(got[0], 17.5f, 1e-5);
    EXPECT_NEAR(got[1], 157.f / 8, 1e-5);
  }
}

TEST(Dsv4Compressor, RequiresAStateSlot) {
  ForwardBatch b = one_sequence(0, 2);
  b.seqs[0].state_slot = -1;
  const ops::CompressorSpec spec{2, 1, false};
  Tensor ring = Tensor::zeros({1, 2, 1}, DType::kF32);
  Tensor pooled = Tensor::empty({1, 1}, DType::kF32);
  EXPECT_THROW(ops::compressor_pool(make({2, 1}, {1, 2}), make({2, 1}, {0, 0}), make({2, 1}, {0, 0}),
                                    ring, ring, b, spec, ops::closed_entries(b, 2), pooled),
               Error);
}

namespace {

// An indexer key pool of block size 4, ratio 2 (2 entries per page) holding `keys` ([n, 1]).
Tensor key_pool(const std::vector<float>& keys) {
  Tensor pool = Tensor::zeros({8, 2, 1}, DType::kF32);
  for (size_t e = 0; e < keys.size(); ++e) pool.data<float>()[e] = keys[e];  // pages 0, 1, ... in order
  return pool;
}

}  // namespace

TEST(Dsv4Indexer, TopKIsCausalAndTheLowerIndexWinsTies) {
  // One head, d = 1, q = 1, weight 1: the score of entry e is relu(key_e).
  // Keys: [1, 2, 2, 0, 2, 9]: entry 5 closes at position 11.
  Tensor pool = key_pool({1, 2, 2, 0, 2, 9});
  ForwardBatch b = one_sequence(9, 1);  // position 9: (9 + 1) / 2 = 5 visible entries
  Tensor sel = Tensor::empty({1, 2}, DType::kI32);
  ops::indexer_top_k(make({1, 1, 1}, {1.f}), make({1, 1}, {1.f}), pool, b, 4, 2, 1.f, 1.f, sel);
  EXPECT_EQ(sel.data<int32_t>()[0], 1);  // 2, 2, 2 tie at entries 1, 2, 4: lower index first
  EXPECT_EQ(sel.data<int32_t>()[1], 2);
  ForwardBatch later = one_sequence(11, 1);  // entry 5 (score 9) becomes visible
  ops::indexer_top_k(make({1, 1, 1}, {1.f}), make({1, 1}, {1.f}), pool, later, 4, 2, 1.f, 1.f, sel);
  EXPECT_EQ(sel.data<int32_t>()[0], 5);
  EXPECT_EQ(sel.data<int32_t>()[1], 1);
  // ReLU zeros tie: all scores 0 -> the lowest indices; fewer visible than k -> -1 fill.
  Tensor sel4 = Tensor::empty({1, 4}, DType::kI32);
  ops::indexer_top_k(make({1, 1, 1}, {-1.f}), make({1, 1}, {1.f}), pool, one_sequence(5, 1), 4, 2, 1.f, 1.f, sel4);
  EXPECT_EQ(sel4.data<int32_t>()[0], 0);
  EXPECT_EQ(sel4.data<int32_t>()[1], 1);
  EXPECT_EQ(sel4.data<int32_t>()[2], 2);
  EXPECT_EQ(sel4.data<int32_t>()[3], -1);
  // Position 0 sees nothing.
  ops::indexer_top_k(make({1, 1, 1}, {1.f}), make({1, 1}, {1.f}), pool, one_sequence(0, 1), 4, 2, 1.f, 1.f, sel);
  EXPECT_EQ(sel.data<int32_t>()[0], -1);
  EXPECT_EQ(sel.data<int32_t>()[1], -1);
}

TEST(Dsv4Indexer, WeightedReluSumOverHeads) {
  // Two heads, d = 2: score = sum_h relu(q_h . k) * 0.5 * (w_h * 2).
  Tensor pool = Tensor::zeros({4, 2, 2}, DType::kF32);
  const std::vector<float> keys = {1, 0, 0, 1, 1, 1};  // entries 0, 1, 2
  std::copy(keys.begin(), keys.end(), pool.data<float>());
  // q0 = [1, -3], q1 = [-1, 2]; w = [1, -1].
  // entry 0: relu(1) * 1 + relu(-1) * -1 = 1; entry 1: 0 + relu(2) * -1 = -2;
  // entry 2: relu(-2) + relu(1) * -1 = -1. Order: 0, 2, 1.
  Tensor sel = Tensor::empty({1, 3}, DType::kI32);
  ops::indexer_top_k(make({1, 2, 2}, {1, -3, -1, 2}), make({1, 2}, {1, -1}), pool, one_sequence(5, 1), 4,
                     2, 0.5f, 2.f, sel);
  EXPECT_EQ(sel.data<int32_t>()[0], 0);
  EXPECT_EQ(sel.data<int32_t>()[1], 2);
  EXPECT_EQ(sel.data<int32_t>()[2], 1);
}

TEST(Dsv4Attention, WindowCompressedEntriesAndSink) {
  // D = 2, one head, q = 0 (every logit 0), window 2, block size 4.
  Tensor kv_pool = Tensor::zeros({4, 4, 2}, DType::kF32);
  Tensor kv = make({3, 2}, {1, 0, 0, 1, 1, 1});
  Tensor q = make({3, 1, 2}, std::vector<float>(6, 0.f));
  Tensor out = Tensor::empty({3, 1, 2}, DType::kF32);
  ForwardBatch b = one_sequence(0, 3);
  ops::sparse_attention(q, kv, kv_pool, Tensor(), 1, Tensor(), make({1}, {0.f}), b, 2, 1.f, out);
  // Token 2 sees tokens 1, 2 and the sink: ([0, 1] + [1, 1]) / 3.
  EXPECT_NEAR(out.data<float>()[4], 1.f / 3, 1e-6);
  EXPECT_NEAR(out.data<float>()[5], 2.f / 3, 1e-6);
  // Token 0 sees itself and the sink with logit ln 3: [1, 0] / (1 + 3).
  ops::sparse_attention(q, kv, kv_pool, Tensor(), 1, Tensor(), make({1}, {std::log(3.f)}), b, 2, 1.f, out);
  EXPECT_NEAR(out.data<float>()[0], 0.25f, 1e-6);
  // Plus compressed entries of ratio 2 ([blocks, 2, D]): entry 0 = [2, 2] is visible from
  // position 1, so token 2 averages [0, 1], [1, 1], [2, 2] and the sink (0).
  Tensor comp = Tensor::zeros({4, 2, 2}, DType::kF32);
  comp.data<float>()[0] = comp.data<float>()[1] = 2.f;
  ops::sparse_attention(q, kv, kv_pool, comp, 2, Tensor(), make({1}, {0.f}), b, 2, 1.f, out);
  EXPECT_NEAR(out.data<float>()[4], 3.f / 4, 1e-6);
  EXPECT_NEAR(out.data<float>()[5], 1.f, 1e-6);
  // Token 0 may not see entry 0 (it closes at position 1): [1, 0] / 2.
  EXPECT_NEAR(out.data<float>()[0], 0.5f, 1e-6);
  // A selection: token 2 picks nothing (-1) -> back to the window only.
  Tensor sel = Tensor::empty({3, 1}, DType::kI32);
  sel.data<int32_t>()[0] = sel.data<int32_t>()[1] = sel.data<int32_t>()[2] = -1;
  ops::sparse_attention(q, kv, kv_pool, comp, 2, sel, make({1}, {0.f}), b, 2, 1.f, out);
  EXPECT_NEAR(out.data<float>()[4], 1.f / 3, 1e-6);
  // Selecting an entry that is not visible yet is an error.
  sel.data<int32_t>()[0] = 0;
  EXPECT_THROW(ops::sparse_attention(q, kv, kv_pool, comp, 2, sel, make({1}, {0.f}), b, 2, 1.f, out), Error);
}

TEST(Dsv4Moe, SqrtSoftplusRoutingWithBiasAndHash) {
  // logits [0, 1, 2, 3]: s = sqrt(softplus(l)); the bias promotes expert 0 into the top 2.
  Tensor logits = make({1, 4}, {0, 1, 2, 3});
  Tensor ids = Tensor::empty({1, 2}, DType::kI32), w = Tensor::empty({1, 2}, DType::kF32);
  ops::moe_route_sqrt_softplus(logits, make({4}, {5, 0, 0, 0}), 2, 1.5f, ids, w);
  auto s = [](float x) { return std::sqrt(std::log1p(std::exp(x))); };
  EXPECT_EQ(ids.data<int32_t>()[0], 0);
  EXPECT_EQ(ids.data<int32_t>()[1], 3);
  EXPECT_NEAR(w.data<float>()[0], s(0) / (s(0) + s(3)) * 1.5f, 1e-6);  // unbiased scores
  EXPECT_NEAR(w.data<float>()[1], s(3) / (s(0) + s(3)) * 1.5f, 1e-6);
  // Equal scores: the lower index wins.
  ops::moe_route_sqrt_softplus(make({1, 4}, {1, 2, 2, 2}), Tensor(), 2, 1.f, ids, w);
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
  EXPECT_EQ(ids.data<int32_t>()[1], 2);
  // Hash routing follows the table, whatever the scores.
  Tensor table = Tensor::empty({3, 2}, DType::kI32);
  const int32_t t[] = {0, 1, 2, 3, 3, 1};
  std::copy(t, t + 6, table.data<int32_t>());
  ops::moe_route_hash(logits, table, {2}, 2.f, ids, w);
  EXPECT_EQ(ids.data<int32_t>()[0], 3);
  EXPECT_EQ(ids.data<int32_t>()[1], 1);
  EXPECT_NEAR(w.data<float>()[0], s(3) / (s(3) + s(1)) * 2.f, 1e-6);
  EXPECT_THROW(ops::moe_route_hash(logits, table, {3}, 2.f, ids, w), Error);
}

TEST(Dsv4Moe, ClampedSwiGlu) {
  // gate clamps above only, up both ways: silu(min(g, 2)) * clamp(u, -2, 2).
  Tensor gu = make({1, 6}, {5, -5, 1, 7, -7, 0.5f});
  Tensor out = Tensor::empty({1, 3}, DType::kF32);
  ops::silu_mul_clamped(gu, 2.f, out);
  auto silu = [](float x) { return x / (1 + std::exp(-x)); };
  EXPECT_NEAR(out.data<float>()[0], silu(2) * 2, 1e-6);
  EXPECT_NEAR(out.data<float>()[1], silu(-5) * -2, 1e-6);
  EXPECT_NEAR(out.data<float>()[2], silu(1) * 0.5f, 1e-6);
}
