// The CPU reference ops against naive formulas and against each other (chunked vs recurrent,
// split vs whole sequences, paged vs dense attention).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "strata/core/error.h"
#include "strata/ops/ops.h"
#include "batch_test_util.h"

namespace strata {
namespace {

using testing::make_batch;
using testing::random_tensor;

double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  }
  return m;
}

TEST(OpsGdn, ChunkedMatchesRecurrentAcrossChunkBoundaries) {
  std::mt19937 rng(1);
  const int64_t hk = 2, hv = 4, dk = 16, dv = 8;
  int blocks = 0;
  ForwardBatch batch = make_batch({150, 1, 64}, {0, 0, 0}, 16, &blocks);
  const int64_t t = batch.num_tokens();
  Tensor q = random_tensor({t, hk, dk}, rng), k = random_tensor({t, hk, dk}, rng),
         v = random_tensor({t, hv, dv}, rng), a = random_tensor({t, hv}, rng),
         b = random_tensor({t, hv}, rng);
  Tensor a_log = random_tensor({hv}, rng, 0.5f), dt = random_tensor({hv}, rng);
  Tensor g = Tensor::empty({t, hv}, DType::kF32), beta = Tensor::empty({t, hv}, DType::kF32);
  ops::gdn_gates(a, b, a_log, dt, g, beta);
  Tensor s1 = Tensor::zeros({3, hv, dk, dv}, DType::kF32), s2 = Tensor::zeros({3, hv, dk, dv}, DType::kF32);
  Tensor o1 = Tensor::empty({t, hv, dv}, DType::kF32), o2 = Tensor::empty({t, hv, dv}, DType::kF32);
  ops::gated_delta_rule(q, k, v, g, beta, s1, batch, o1, ops::GdnAlgorithm::kChunked);
  ops::gated_delta_rule(q, k, v, g, beta, s2, batch, o2, ops::GdnAlgorithm::kRecurrent);
  EXPECT_LT(max_diff(o1, o2), 2e-5);
  EXPECT_LT(max_diff(s1, s2), 2e-5);
}

TEST(OpsGdn, RecurrentIsExactlySplitInvariant) {
  std::mt19937 rng(2);
  const int64_t hk = 1, hv = 2, dk = 8, dv = 8, len = 40;
  Tensor q = random_tensor({len, hk, dk}, rng), k = random_tensor({len, hk, dk}, rng),
         v = random_tensor({len, hv, dv}, rng), g = random_tensor({len, hv}, rng, 0.1f),
         beta = random_tensor({len, hv}, rng);
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = -std::fabs(g.data<float>()[i]);
  int blocks = 0;
  ForwardBatch whole = make_batch({int32_t(len)}, {0}, 16, &blocks);
  Tensor s_whole = Tensor::zeros({1, hv, dk, dv}, DType::kF32), o_whole = Tensor::empty({len, hv, dv}, DType::kF32);
  ops::gated_delta_rule(q, k, v, g, beta, s_whole, whole, o_whole, ops::GdnAlgorithm::kRecurrent);
  // The same sequence as spans of 13, 1 and 26 tokens, continuing from the slot's state.
  Tensor s = Tensor::zeros({1, hv, dk, dv}, DType::kF32);
  int32_t done = 0;
  for (int32_t n : {13, 1, 26}) {
    ForwardBatch part = make_batch({n}, {done}, 16, &blocks);
    Tensor o = Tensor::empty({n, hv, dv}, DType::kF32);
    ops::gated_delta_rule(q.rows(done, done + n), k.rows(done, done + n), v.rows(done, done + n),
                          g.rows(done, done + n), beta.rows(done, done + n), s, part, o,
                          ops::GdnAlgorithm::kRecurrent);
    EXPECT_EQ(max_diff(o, o_whole.rows(done, done + n)), 0.0);
    done += n;
  }
  EXPECT_EQ(max_diff(s, s_whole), 0.0);
}

TEST(OpsConv, CausalConvContinuesFromState) {
  std::mt19937 rng(3);
  const int64_t c = 5, kw = 4, len = 11;
  Tensor x = random_tensor({len, c}, rng), w = random_tensor({c, kw}, rng);
  int blocks = 0;
  ForwardBatch whole = make_batch({int32_t(len)}, {0}, 16, &blocks);
  Tensor st = Tensor::zeros({1, kw - 1, c}, DType::kF32), out = Tensor::empty({len, c}, DType::kF32);
  ops::causal_conv1d(x, w, st, whole, out);
  // Naive: zero history, out[t][ch] = silu(sum_j w[ch][j] * x[t - (kw-1) + j][ch]).
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t ch = 0; ch < c; ++ch) {
      float acc = 0.f;
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t src = t - (kw - 1) + j;
        if (src >= 0) acc += w.data<float>()[ch * kw + j] * x.data<float>()[src * c + ch];
      }
      EXPECT_NEAR(out.data<float>()[t * c + ch], acc / (1.f + std::exp(-acc)), 1e-5);
    }
  }
  Tensor st2 = Tensor::zeros({1, kw - 1, c}, DType::kF32);
  int32_t done = 0;
  for (int32_t n : {2, 1, 8}) {
    ForwardBatch part = make_batch({n}, {done}, 16, &blocks);
    Tensor o = Tensor::empty({n, c}, DType::kF32);
    ops::causal_conv1d(x.rows(done, done + n), w, st2, part, o);
    EXPECT_EQ(max_diff(o, out.rows(done, done + n)), 0.0);
    done += n;
  }
}

// causal_conv1d_split is causal_conv1d then split_columns, bit for bit, state included.
TEST(OpsConv, CausalConvSplitEqualsConvThenSplit) {
  std::mt19937 rng(5);
  const int64_t c = 12, kw = 4;
  int blocks = 0;
  ForwardBatch batch = make_batch({6, 3}, {0, 4}, 16, &blocks);
  Tensor x = random_tensor({9, c}, rng), w = random_tensor({c, kw}, rng), st = random_tensor({2, kw - 1, c}, rng);
  Tensor st2 = st.to(Device::kCpu);
  Tensor all = Tensor::empty({9, c}, DType::kF32);
  ops::causal_conv1d(x, w, st, batch, all);
  Tensor a = Tensor::empty({9, 4}, DType::kF32), b = Tensor::empty({9, 3}, DType::kF32),
         d = Tensor::empty({9, 5}, DType::kF32);
  ops::causal_conv1d_split(x, w, st2, batch, {a, b, d});
  Tensor a_ref = Tensor::empty({9, 4}, DType::kF32), b_ref = Tensor::empty({9, 3}, DType::kF32),
         d_ref = Tensor::empty({9, 5}, DType::kF32);
  ops::split_columns(all, {a_ref, b_ref, d_ref});
  EXPECT_EQ(max_diff(a, a_ref), 0.0);
  EXPECT_EQ(max_diff(b, b_ref), 0.0);
  EXPECT_EQ(max_diff(d, d_ref), 0.0);
  EXPECT_EQ(max_diff(st2, st), 0.0);
}

TEST(OpsAttention, PagedMatchesDenseCausalGqa) {
  std::mt19937 rng(4);
  const int64_t hq = 4, hkv = 2, d = 8, block = 4;
  // Sequence 0 continues after 6 cached tokens; sequence 1 is a fresh prefill.
  int blocks = 0;
  ForwardBatch batch = make_batch({5, 7}, {6, 0}, int(block), &blocks);
  const int64_t t = batch.num_tokens();
  Tensor kc = Tensor::zeros({blocks, block, hkv, d}, DType::kF32), vc = Tensor::zeros({blocks, block, hkv, d}, DType::kF32);
  // Cached keys/values of sequence 0, written through a first step.
  ForwardBatch first = make_batch({6}, {0}, int(block), &blocks);
  first.seqs[0].block_table = batch.seqs[0].block_table;
  Tensor k0 = random_tensor({6, hkv, d}, rng), v0 = random_tensor({6, hkv, d}, rng), q0 = random_tensor({6, hq, d}, rng);
  Tensor o0 = Tensor::empty({6, hq, d}, DType::kF32);
  ops::paged_attention(q0, k0, v0, {kc, vc, {}, {}}, first, 0.5f, o0);
  Tensor q = random_tensor({t, hq, d}, rng), k = random_tensor({t, hkv, d}, rng), v = random_tensor({t, hkv, d}, rng);
  Tensor out = Tensor::empty({t, hq, d}, DType::kF32);
  ops::paged_attention(q, k, v, {kc, vc, {}, {}}, batch, 0.5f, out);
  // Dense reference per sequence.
  auto key_at = [&](int s, int64_t pos, int64_t h, bool value) -> const float* {
    if (s == 0 && pos < 6) return (value ? v0 : k0).data<float>() + (pos * hkv + h) * d;
    const int64_t row = batch.seqs[s].q_start + pos - batch.seqs[s].ctx_len;
    return (value ? v : k).data<float>() + (row * hkv + h) * d;
  };
  for (int s = 0; s < 2; ++s) {
    const SeqInBatch& sq = batch.seqs[s];
    for (int32_t i = 0; i < sq.q_len; ++i) {
      for (int64_t h = 0; h < hq; ++h) {
        const float* qv = q.data<float>() + ((sq.q_start + i) * hq + h) * d;
        const int64_t n = sq.ctx_len + i + 1;
        std::vector<double> p(n);
        double mx = -1e30, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float* kv = key_at(s, j, h / 2, false);
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += qv[c] * kv[c];
          p[j] = dot * 0.5;
          mx = std::max(mx, p[j]);
        }
        for (auto& x : p) sum += x = std::exp(x - mx);
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] / sum * key_at(s, j, h / 2, true)[c];
          EXPECT_NEAR(out.data<float>()[((sq.q_start + i) * hq + h) * d + c], acc, 1e-5);
        }
      }
    }
  }
}

TEST(OpsMoe, RouteBreaksTiesByLowerIndexAndRenormalises) {
  Tensor logits = Tensor::empty({1, 5}, DType::kF32);
  const float vals[5] = {1.f, 3.f, 2.f, 3.f, 2.f};
  std::copy(vals, vals + 5, logits.data<float>());
  Tensor ids = Tensor::empty({1, 3}, DType::kI32), w = Tensor::empty({1, 3}, DType::kF32);
  ops::moe_route_softmax(logits, 3, true, ids, w);
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
  EXPECT_EQ(ids.data<int32_t>()[1], 3);
  EXPECT_EQ(ids.data<int32_t>()[2], 2);
  EXPECT_NEAR(w.data<float>()[0] + w.data<float>()[1] + w.data<float>()[2], 1.f, 1e-6);
  EXPECT_NEAR(w.data<float>()[0] / w.data<float>()[2], std::exp(1.f), 1e-5);
}

TEST(OpsNorm, RmsNormZeroCenteredAndGated) {
  Tensor x = Tensor::empty({1, 4}, DType::kF32), w = Tensor::empty({4}, DType::kF32),
         z = Tensor::empty({1, 4}, DType::kF32), out = Tensor::empty({1, 4}, DType::kF32);
  for (int i = 0; i < 4; ++i) {
    x.data<float>()[i] = float(i + 1);
    w.data<float>()[i] = 0.5f;
    z.data<float>()[i] = float(i) - 1.f;
  }
  const float inv = 1.f / std::sqrt((1.f + 4.f + 9.f + 16.f) / 4.f + 1e-6f);
  ops::rms_norm(x, w, 1e-6f, true, out);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out.data<float>()[i], (i + 1) * inv * 1.5f, 1e-6);
  ops::rms_norm_gated(x, z, w, 1e-6f, out);
  for (int i = 0; i < 4; ++i) {
    const float zi = float(i) - 1.f;
    EXPECT_NEAR(out.data<float>()[i], (i + 1) * inv * 0.5f * zi / (1.f + std::exp(-zi)), 1e-6);
  }
}

TEST(OpsRope, RotatesLeadingDimsOnly) {
  Tensor x = Tensor::empty({2, 1, 6}, DType::kF32);
  for (int i = 0; i < 12; ++i) x.data<float>()[i] = float(i % 6 + 1);
  ops::RopeSpec spec;
  spec.rotary_dim = 4;
  spec.inv_freq = {1.f, 0.01f};
  ops::rope(x, {0, 3}, spec);
  // Position 0 is the identity; the pass-through dims never change.
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(x.data<float>()[i], float(i + 1));
  const float* r = x.data<float>() + 6;
  EXPECT_NEAR(r[0], 1.f * std::cos(3.f) - 3.f * std::sin(3.f), 1e-5);
  EXPECT_NEAR(r[2], 3.f * std::cos(3.f) + 1.f * std::sin(3.f), 1e-5);
  EXPECT_FLOAT_EQ(r[4], 5.f);
  EXPECT_FLOAT_EQ(r[5], 6.f);
}

TEST(OpsDense, LinearIsRowIndependent) {
  std::mt19937 rng(5);
  Tensor w = random_tensor({300, 70}, rng), x = random_tensor({9, 70}, rng);
  Tensor y = Tensor::empty({9, 300}, DType::kF32), y1 = Tensor::empty({1, 300}, DType::kF32);
  ops::linear(x, w, y);
  // y = x w^T: every value against a double-precision dot product (300 outputs span two of the
  // 256-column blocks, so the second, partial block is checked too).
  for (int r = 0; r < 9; ++r) {
    for (int o = 0; o < 300; ++o) {
      double want = 0;
      for (int k = 0; k < 70; ++k) want += double(x.data<float>()[r * 70 + k]) * double(w.data<float>()[o * 70 + k]);
      ASSERT_NEAR(y.data<float>()[r * 300 + o], want, 1e-4 * (1 + std::fabs(want))) << "row " << r << " col " << o;
    }
  }
  for (int r = 0; r < 9; ++r) {
    ops::linear(x.rows(r, r + 1), w, y1);
    EXPECT_EQ(max_diff(y1, y.rows(r, r + 1)), 0.0) << "row " << r;
  }
  EXPECT_THROW(ops::linear(x, random_tensor({3, 5}, rng), y), Error);
}

}  // namespace
}  // namespace strata
