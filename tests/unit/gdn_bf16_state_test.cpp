// The Gated DeltaNet ops with a BF16 recurrent state (--mamba-ssm-dtype bfloat16) against the
// F32-state ops fed the same rounded state: bit-exact on the CPU. The chunked form rounds once at
// the span's end; the recurrence after every token, so a span equals its tokens run one by one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/ops/ops.h"
#include "batch_test_util.h"

namespace strata {
namespace {

using testing::make_batch;
using testing::random_tensor;

Tensor to_bf16(const Tensor& f) {
  Tensor b = Tensor::empty(f.shape(), DType::kBF16);
  for (int64_t i = 0; i < f.numel(); ++i) b.data<uint16_t>()[i] = f32_to_bf16(f.data<float>()[i]);
  return b;
}

Tensor to_f32(const Tensor& b) {
  Tensor f = Tensor::empty(b.shape(), DType::kF32);
  for (int64_t i = 0; i < b.numel(); ++i) f.data<float>()[i] = bf16_to_f32(b.data<uint16_t>()[i]);
  return f;
}

int64_t bitwise_mismatches(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.nbytes(), b.nbytes());
  const auto* x = static_cast<const unsigned char*>(a.raw());
  const auto* y = static_cast<const unsigned char*>(b.raw());
  int64_t n = 0;
  for (size_t i = 0; i < a.nbytes(); ++i) n += x[i] != y[i];
  return n;
}

struct GdnInputs {
  Tensor q, k, v, g, beta;
};

GdnInputs random_inputs(int64_t t, int64_t hk, int64_t hv, int64_t dk, int64_t dv, std::mt19937& rng) {
  GdnInputs in{random_tensor({t, hk, dk}, rng), random_tensor({t, hk, dk}, rng), random_tensor({t, hv, dv}, rng),
               random_tensor({t, hv}, rng, 0.3f), Tensor::empty({t, hv}, DType::kF32)};
  for (int64_t i = 0; i < in.g.numel(); ++i) in.g.data<float>()[i] = -std::fabs(in.g.data<float>()[i]);
  for (int64_t i = 0; i < in.beta.numel(); ++i) {
    in.beta.data<float>()[i] = 1.f / (1.f + std::exp(-in.beta.data<float>()[i]));
  }
  return in;
}

// Spans of 150 (crossing chunk boundaries) and 64 tokens continuing from a state, one from zeros.
TEST(OpsGdnBf16State, ChunkedEqualsTheF32OpOnTheRoundedStateThenRounded) {
  std::mt19937 rng(11);
  const int64_t hk = 2, hv = 4, dk = 16, dv = 8;
  int blocks = 0;
  const ForwardBatch batch = make_batch({150, 3, 64}, {5, 0, 9}, 16, &blocks);
  const int64_t t = batch.num_tokens();
  const GdnInputs in = random_inputs(t, hk, hv, dk, dv, rng);
  const Tensor state_b = to_bf16(random_tensor({3, hv, dk, dv}, rng, 0.5f));
  const Tensor state_f = to_f32(state_b);
  Tensor out_b = Tensor::empty({t, hv, dv}, DType::kF32), out_f = Tensor::empty({t, hv, dv}, DType::kF32);
  ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state_b, batch, out_b, ops::GdnAlgorithm::kChunked);
  ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state_f, batch, out_f, ops::GdnAlgorithm::kChunked);
  EXPECT_EQ(bitwise_mismatches(out_b, out_f), 0);
  EXPECT_EQ(bitwise_mismatches(state_b, to_bf16(state_f)), 0);
}

// The recurrence over a span equals the F32 op run one token at a time with the state rounded
// after each (what decode steps store), outputs and state bit for bit.
TEST(OpsGdnBf16State, RecurrenceRoundsAfterEveryToken) {
  std::mt19937 rng(12);
  const int64_t hk = 1, hv = 2, dk = 8, dv = 8, len = 21;
  const GdnInputs in = random_inputs(len, hk, hv, dk, dv, rng);
  int blocks = 0;
  const Tensor state_b = to_bf16(random_tensor({1, hv, dk, dv}, rng, 0.5f));
  Tensor state_f = to_f32(state_b);
  Tensor out_b = Tensor::empty({len, hv, dv}, DType::kF32);
  ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state_b, make_batch({int32_t(len)}, {7}, 16, &blocks),
                        out_b, ops::GdnAlgorithm::kRecurrent);
  for (int32_t i = 0; i < len; ++i) {
    Tensor o = Tensor::empty({1, hv, dv}, DType::kF32);
    ops::gated_delta_rule(in.q.rows(i, i + 1), in.k.rows(i, i + 1), in.v.rows(i, i + 1), in.g.rows(i, i + 1),
                          in.beta.rows(i, i + 1), state_f, make_batch({1}, {7 + i}, 16, &blocks), o,
                          ops::GdnAlgorithm::kRecurrent);
    EXPECT_EQ(bitwise_mismatches(o, out_b.rows(i, i + 1)), 0) << "token " << i;
    state_f = to_f32(to_bf16(state_f));
  }
  EXPECT_EQ(bitwise_mismatches(state_b, to_bf16(state_f)), 0);
}

// The fused decode step with a BF16 state: the F32 step on the rounded state, then rounded.
TEST(OpsGdnBf16State, DecodeStepEqualsTheF32StepThenRounded) {
  std::mt19937 rng(13);
  const int64_t hk = 2, hv = 4, dk = 16, dv = 8, kw = 4, seqs = 3;
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  int blocks = 0;
  const ForwardBatch batch = make_batch({1, 1, 1}, {4, 0, 30}, 16, &blocks);
  const Tensor qkv = random_tensor({seqs, conv_dim}, rng), z = random_tensor({seqs, hv, dv}, rng);
  const Tensor a = random_tensor({seqs, hv}, rng), b = random_tensor({seqs, hv}, rng);
  const Tensor conv_w = random_tensor({conv_dim, kw}, rng, 0.5f), a_log = random_tensor({hv}, rng, 0.5f);
  const Tensor dt = random_tensor({hv}, rng), norm_w = random_tensor({dv}, rng);
  const Tensor conv0 = random_tensor({seqs, kw - 1, conv_dim}, rng);
  Tensor conv_b = Tensor::empty(conv0.shape(), DType::kF32), conv_f = Tensor::empty(conv0.shape(), DType::kF32);
  std::memcpy(conv_b.raw(), conv0.raw(), conv0.nbytes());
  std::memcpy(conv_f.raw(), conv0.raw(), conv0.nbytes());
  const Tensor state_b = to_bf16(random_tensor({seqs, hv, dk, dv}, rng, 0.5f));
  const Tensor state_f = to_f32(state_b);
  Tensor out_b = Tensor::empty({seqs, hv, dv}, DType::kF32), out_f = Tensor::empty({seqs, hv, dv}, DType::kF32);
  ops::gdn_decode_step(qkv, z, a, b, conv_w, conv_b, a_log, dt, state_b, norm_w, 1e-6f, batch, out_b);
  ops::gdn_decode_step(qkv, z, a, b, conv_w, conv_f, a_log, dt, state_f, norm_w, 1e-6f, batch, out_f);
  EXPECT_EQ(bitwise_mismatches(out_b, out_f), 0);
  EXPECT_EQ(bitwise_mismatches(state_b, to_bf16(state_f)), 0);
  EXPECT_EQ(bitwise_mismatches(conv_b, conv_f), 0);
}

TEST(OpsGdnBf16State, RefusesOtherStateDtypes) {
  std::mt19937 rng(14);
  int blocks = 0;
  const GdnInputs in = random_inputs(2, 1, 1, 8, 8, rng);
  Tensor state = Tensor::zeros({1, 1, 8, 8}, DType::kF16);
  Tensor out = Tensor::empty({2, 1, 8}, DType::kF32);
  try {
    ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state, make_batch({2}, {0}, 16, &blocks), out);
    FAIL() << "an F16 state was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
