// CPU reference: causal GQA attention over paged KV caches (fp32).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {

void paged_attention_gated(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                           const Tensor& v_cache, const ForwardBatch& batch, float scale, const Tensor& gate,
                           const Tensor& out) {
  STRATA_CUDA_DISPATCH(q, paged_attention_gated(q, k, v, k_cache, v_cache, batch, scale, gate, out));
  STRATA_CHECK(gate.numel() == out.numel(), "paged_attention_gated: gate ", gate.describe(), " for out ",
               out.describe());
  paged_attention(q, k, v, k_cache, v_cache, batch, scale, out);
  mul_sigmoid(out, gate.reshape(out.shape()));
}

void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                     const Tensor& v_cache, const ForwardBatch& batch, float scale, const Tensor& out) {
  STRATA_CUDA_DISPATCH(q, paged_attention(q, k, v, k_cache, v_cache, batch, scale, out));
  expect_cpu_f32(q, "paged_attention", "q");
  expect_cpu_f32(k_cache, "paged_attention", "k_cache");
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
  const int64_t block = k_cache.dim(1);
  expect_shape(k, {t, hkv, d}, "paged_attention", "k");
  expect_shape(v, {t, hkv, d}, "paged_attention", "v");
  expect_shape(out, {t, hq, d}, "paged_attention", "out");
  STRATA_CHECK(k_cache.ndim() == 4 && k_cache.dim(2) == hkv && k_cache.dim(3) == d &&
                   v_cache.shape() == k_cache.shape() && hq % hkv == 0,
               "paged_attention: caches ", k_cache.describe(), " / ", v_cache.describe(),
               " do not fit q ", q.describe(), " k ", k.describe());
  const int64_t group = hq / hkv;
  const int64_t row = hkv * d;  // floats per cached token
  auto slot_of = [&](const SeqInBatch& s, int64_t pos) {
    return int64_t(s.block_table[pos / block]) * block + pos % block;
  };
  // 1. Append the new keys and values at their positions.
  for (const SeqInBatch& s : batch.seqs) {
    for (int32_t i = 0; i < s.q_len; ++i) {
      const int64_t dst = slot_of(s, s.ctx_len + i) * row, src = int64_t(s.q_start + i) * row;
      std::memcpy(k_cache.data<float>() + dst, k.data<float>() + src, row * sizeof(float));
      std::memcpy(v_cache.data<float>() + dst, v.data<float>() + src, row * sizeof(float));
    }
  }
  // 2. Every (token, head) attends to its sequence's visible prefix.
  std::vector<int32_t> seq_of(t);
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqInBatch& s = batch.seqs[si];
    for (int32_t i = 0; i < s.q_len; ++i) seq_of[s.q_start + i] = int32_t(si);
  }
  parallel_for(t * hq, [&](int64_t job) {
    const int64_t tok = job / hq, h = job % hq, kvh = h / group;
    const SeqInBatch& s = batch.seqs[seq_of[tok]];
    const int64_t visible = s.ctx_len + (tok - s.q_start) + 1;
    const float* qv = q.data<float>() + (tok * hq + h) * d;
    std::vector<float> scores(visible);
    float mx = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      const float* kv = k_cache.data<float>() + slot_of(s, j) * row + kvh * d;
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot += qv[c] * kv[c];
      scores[j] = dot * scale;
      mx = std::max(mx, scores[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < visible; ++j) {
      scores[j] = std::exp(scores[j] - mx);
      sum += scores[j];
    }
    float* o = out.data<float>() + (tok * hq + h) * d;
    std::fill(o, o + d, 0.f);
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j) {
      const float* vv = v_cache.data<float>() + slot_of(s, j) * row + kvh * d;
      const float p = scores[j] * inv;
      for (int64_t c = 0; c < d; ++c) o[c] += p * vv[c];
    }
  });
}

}  // namespace strata::ops
