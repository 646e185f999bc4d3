// CPU reference: the Gated DeltaNet pieces, causal depthwise conv1d and the gated delta rule
// (chunked and recurrent), in fp32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "strata/core/dtype.h"
#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {
namespace {

constexpr int kChunk = 64;

inline float silu(float x) { return x / (1.f + std::exp(-x)); }

void l2norm(float* x, int64_t n) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// One head of one sequence, row-major: q, k [L, dk], v [L, dv], g, beta [L]; S [dk, dv].
struct HeadSpan {
  int64_t len, dk, dv;
  const float *q, *k, *v, *g, *beta;
  float* state;
  float* out;  // [L, dv]
  bool bf16_state = false;  // the recurrence rounds the state to bf16 after every token
};

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// S <- S * exp(g_t); delta = (v_t - S^T k_t) * beta_t; S += k_t delta^T; o_t = S^T q_t.
void recurrent(const HeadSpan& h) {
  std::vector<float> delta(h.dv);
  for (int64_t t = 0; t < h.len; ++t) {
    const float* qt = h.q + t * h.dk;
    const float* kt = h.k + t * h.dk;
    const float decay = std::exp(h.g[t]);
    for (int64_t i = 0; i < h.dk * h.dv; ++i) h.state[i] *= decay;
    for (int64_t j = 0; j < h.dv; ++j) delta[j] = 0.f;
    for (int64_t i = 0; i < h.dk; ++i) {
      const float* s = h.state + i * h.dv;
      for (int64_t j = 0; j < h.dv; ++j) delta[j] += s[j] * kt[i];
    }
    for (int64_t j = 0; j < h.dv; ++j) delta[j] = (h.v[t * h.dv + j] - delta[j]) * h.beta[t];
    for (int64_t i = 0; i < h.dk; ++i) {
      float* s = h.state + i * h.dv;
      for (int64_t j = 0; j < h.dv; ++j) s[j] += kt[i] * delta[j];
    }
    float* o = h.out + t * h.dv;
    for (int64_t j = 0; j < h.dv; ++j) o[j] = 0.f;
    for (int64_t i = 0; i < h.dk; ++i) {
      const float* s = h.state + i * h.dv;
      for (int64_t j = 0; j < h.dv; ++j) o[j] += s[j] * qt[i];
    }
    if (h.bf16_state) {
      for (int64_t i = 0; i < h.dk * h.dv; ++i) h.state[i] = round_bf16(h.state[i]);
    }
  }
}

// The chunked form (as HF's torch_chunk_gated_delta_rule, chunks of 64 from the span start):
// within a chunk the delta-rule updates are condensed by a unit lower-triangular (UT) solve.
void chunked(const HeadSpan& h) {
  const int64_t dk = h.dk, dv = h.dv;
  std::vector<float> cum(kChunk), a(kChunk * kChunk), u(kChunk * dv), w(kChunk * dk),
      vnew(kChunk * dv), attn(kChunk * kChunk);
  for (int64_t c0 = 0; c0 < h.len; c0 += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, h.len - c0);
    const float *q = h.q + c0 * dk, *k = h.k + c0 * dk, *v = h.v + c0 * dv;
    const float *g = h.g + c0, *beta = h.beta + c0;
    float acc = 0.f;
    for (int64_t i = 0; i < n; ++i) cum[i] = acc += g[i];
    // a[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j) for j < i (strictly lower: the solve is
    // unit-triangular); attn[i][j] = (q_i . k_j) exp(cum_i - cum_j) for j <= i.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        float kk = 0.f, qk = 0.f;
        for (int64_t c = 0; c < dk; ++c) {
          kk += k[i * dk + c] * k[j * dk + c];
          qk += q[i * dk + c] * k[j * dk + c];
        }
        const float decay = std::exp(cum[i] - cum[j]);
        a[i * kChunk + j] = beta[i] * kk * decay;
        attn[i * kChunk + j] = qk * decay;
      }
    }
    // Forward substitution: (I + A) U = beta V and (I + A) W = beta K exp(cum).
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < dv; ++c) u[i * dv + c] = beta[i] * v[i * dv + c];
      const float e = std::exp(cum[i]);
      for (int64_t c = 0; c < dk; ++c) w[i * dk + c] = beta[i] * k[i * dk + c] * e;
      for (int64_t j = 0; j < i; ++j) {
        const float aij = a[i * kChunk + j];
        for (int64_t c = 0; c < dv; ++c) u[i * dv + c] -= aij * u[j * dv + c];
        for (int64_t c = 0; c < dk; ++c) w[i * dk + c] -= aij * w[j * dk + c];
      }
    }
    // vnew = U - W S; out = (q exp(cum)) S + attn vnew.
    for (int64_t i = 0; i < n; ++i) {
      float* vn = vnew.data() + i * dv;
      std::memcpy(vn, u.data() + i * dv, dv * sizeof(float));
      float* o = h.out + (c0 + i) * dv;
      std::fill(o, o + dv, 0.f);
      const float e = std::exp(cum[i]);
      for (int64_t r = 0; r < dk; ++r) {
        const float* s = h.state + r * dv;
        const float wr = w[i * dk + r], qr = q[i * dk + r] * e;
        for (int64_t c = 0; c < dv; ++c) {
          vn[c] -= wr * s[c];
          o[c] += qr * s[c];
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      float* o = h.out + (c0 + i) * dv;
      for (int64_t j = 0; j <= i; ++j) {
        const float aij = attn[i * kChunk + j];
        const float* vn = vnew.data() + j * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] += aij * vn[c];
      }
    }
    // S <- S exp(cum_last) + sum_i (k_i exp(cum_last - cum_i)) vnew_i^T
    const float last = cum[n - 1];
    const float chunk_decay = std::exp(last);
    for (int64_t r = 0; r < dk * dv; ++r) h.state[r] *= chunk_decay;
    for (int64_t i = 0; i < n; ++i) {
      const float e = std::exp(last - cum[i]);
      const float* vn = vnew.data() + i * dv;
      for (int64_t r = 0; r < dk; ++r) {
        const float kr = k[i * dk + r] * e;
        float* s = h.state + r * dv;
        for (int64_t c = 0; c < dv; ++c) s[c] += kr * vn[c];
      }
    }
  }
}

}  // namespace

void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& conv_state, const ForwardBatch& batch,
                   const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, causal_conv1d(x, w, conv_state, batch, out));
  expect_cpu_f32(x, "causal_conv1d", "x");
  expect_cpu_f32(conv_state, "causal_conv1d", "conv_state");
  const int64_t t = x.dim(0), c = x.dim(1), kw = w.dim(1);
  expect_shape(w, {c, kw}, "causal_conv1d", "weight");
  expect_shape(out, {t, c}, "causal_conv1d", "out");
  STRATA_CHECK(conv_state.ndim() == 3 && conv_state.dim(1) == kw - 1 && conv_state.dim(2) == c,
               "causal_conv1d: conv state ", conv_state.describe(), " does not fit [slots, ", kw - 1,
               ", ", c, "]");
  const int64_t hist = kw - 1;
  for (const SeqInBatch& s : batch.seqs) {
    float* state = conv_state.data<float>() + int64_t(s.state_slot) * hist * c;
    if (s.ctx_len == 0) std::fill(state, state + hist * c, 0.f);
    // window = [state (hist rows); x rows of this sequence]
    std::vector<float> window((hist + s.q_len) * c);
    std::memcpy(window.data(), state, hist * c * sizeof(float));
    std::memcpy(window.data() + hist * c, x.data<float>() + int64_t(s.q_start) * c,
                s.q_len * c * sizeof(float));
    parallel_for(c, [&](int64_t ch) {
      const float* wc = w.data<float>() + ch * kw;
      for (int32_t i = 0; i < s.q_len; ++i) {
        float acc = 0.f;
        for (int64_t j = 0; j < kw; ++j) acc += wc[j] * window[(i + j) * c + ch];
        out.data<float>()[(int64_t(s.q_start) + i) * c + ch] = silu(acc);
      }
    });
    std::memcpy(state, window.data() + int64_t(s.q_len) * c, hist * c * sizeof(float));
  }
}

void causal_conv1d_split(const Tensor& x, const Tensor& w, const Tensor& conv_state, const ForwardBatch& batch,
                         const std::vector<Tensor>& outs) {
  STRATA_CUDA_DISPATCH(x, causal_conv1d_split(x, w, conv_state, batch, outs));
  Tensor all = Tensor::empty({x.dim(0), x.dim(1)}, DType::kF32);
  causal_conv1d(x, w, conv_state, batch, all);
  split_columns(all, outs);
}

void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias,
               const Tensor& g, const Tensor& beta) {
  STRATA_CUDA_DISPATCH(a, gdn_gates(a, b, a_log, dt_bias, g, beta));
  expect_cpu_f32(a, "gdn_gates", "a");
  const int64_t t = a.dim(0), hv = a.dim(1);
  expect_shape(b, {t, hv}, "gdn_gates", "b");
  expect_shape(g, {t, hv}, "gdn_gates", "g");
  expect_shape(beta, {t, hv}, "gdn_gates", "beta");
  STRATA_CHECK(a_log.numel() == hv && dt_bias.numel() == hv, "gdn_gates: A_log ", a_log.describe(),
               " / dt_bias ", dt_bias.describe(), " do not have ", hv, " heads");
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t h = 0; h < hv; ++h) {
      const float x = a.data<float>()[r * hv + h] + dt_bias.data<float>()[h];
      const float softplus = x > 20.f ? x : std::log1p(std::exp(x));  // torch's threshold 20
      g.data<float>()[r * hv + h] = -std::exp(a_log.data<float>()[h]) * softplus;
      beta.data<float>()[r * hv + h] = 1.f / (1.f + std::exp(-b.data<float>()[r * hv + h]));
    }
  }
}

void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const Tensor& beta, const Tensor& state, const ForwardBatch& batch,
                      const Tensor& out, GdnAlgorithm algorithm) {
  STRATA_CUDA_DISPATCH(q, gated_delta_rule(q, k, v, g, beta, state, batch, out, algorithm));
  expect_cpu_f32(q, "gated_delta_rule", "q");
  STRATA_CHECK(state.device() == Device::kCpu && (state.dtype() == DType::kF32 || state.dtype() == DType::kBF16),
               "gated_delta_rule: state must be a CPU F32 or BF16 tensor, got ", state.describe());
  const int64_t t = q.dim(0), hk = q.dim(1), dk = q.dim(2), hv = v.dim(1), dv = v.dim(2);
  expect_shape(k, {t, hk, dk}, "gated_delta_rule", "k");
  expect_shape(v, {t, hv, dv}, "gated_delta_rule", "v");
  expect_shape(g, {t, hv}, "gated_delta_rule", "g");
  expect_shape(beta, {t, hv}, "gated_delta_rule", "beta");
  expect_shape(out, {t, hv, dv}, "gated_delta_rule", "out");
  STRATA_CHECK(hv % hk == 0 && state.ndim() == 4 && state.dim(1) == hv && state.dim(2) == dk &&
                   state.dim(3) == dv,
               "gated_delta_rule: state ", state.describe(), " does not fit ", hv, " heads of [",
               dk, ", ", dv, "]");
  const int64_t ratio = hv / hk;
  const float scale = 1.f / std::sqrt(float(dk));
  for (const SeqInBatch& s : batch.seqs) {
    const int64_t len = s.q_len;
    parallel_for(hv, [&](int64_t h) {
      // Gather this head's span into contiguous buffers, normalising q and k.
      std::vector<float> qh(len * dk), kh(len * dk), vh(len * dv), gh(len), bh(len), oh(len * dv);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t r = s.q_start + i;
        std::memcpy(&qh[i * dk], q.data<float>() + (r * hk + h / ratio) * dk, dk * sizeof(float));
        std::memcpy(&kh[i * dk], k.data<float>() + (r * hk + h / ratio) * dk, dk * sizeof(float));
        std::memcpy(&vh[i * dv], v.data<float>() + (r * hv + h) * dv, dv * sizeof(float));
        l2norm(&qh[i * dk], dk);
        l2norm(&kh[i * dk], dk);
        for (int64_t c = 0; c < dk; ++c) qh[i * dk + c] *= scale;
        gh[i] = g.data<float>()[r * hv + h];
        bh[i] = beta.data<float>()[r * hv + h];
      }
      // A BF16 state is loaded to float and updated in float; the recurrence rounds it after every
      // token (as many single-token steps would), the chunked form once, at the span's end.
      const int64_t cell0 = (int64_t(s.state_slot) * hv + h) * dk * dv;
      const bool bf16_state = state.dtype() == DType::kBF16;
      std::vector<float> widened(bf16_state ? dk * dv : 0);
      float* st = bf16_state ? widened.data() : state.data<float>() + cell0;
      if (s.ctx_len == 0) {
        std::fill(st, st + dk * dv, 0.f);
      } else if (bf16_state) {
        const uint16_t* src = state.data<uint16_t>() + cell0;
        for (int64_t i = 0; i < dk * dv; ++i) st[i] = bf16_to_f32(src[i]);
      }
      HeadSpan span{len, dk, dv, qh.data(), kh.data(), vh.data(), gh.data(), bh.data(), st, oh.data(), bf16_state};
      if (len == 1 || algorithm == GdnAlgorithm::kRecurrent) {
        recurrent(span);
      } else {
        chunked(span);
      }
      if (bf16_state) {
        uint16_t* dst = state.data<uint16_t>() + cell0;
        for (int64_t i = 0; i < dk * dv; ++i) dst[i] = f32_to_bf16(st[i]);
      }
      for (int64_t i = 0; i < len; ++i) {
        std::memcpy(out.data<float>() + ((s.q_start + i) * hv + h) * dv, &oh[i * dv],
                    dv * sizeof(float));
      }
    });
  }
}

}  // namespace strata::ops
