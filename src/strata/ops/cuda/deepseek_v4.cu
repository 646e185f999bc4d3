// CUDA: the DeepSeek-V4 ops of deepseek_v4_ops.h that need no cache (issue 18's first kernels):
// interleaved tail RoPE, the unweighted RMSNorm, the manifold-constrained hyper-connections
// (mix, Sinkhorn projection, collapse, write-back, head), the grouped low-rank output projection,
// the clamped SwiGLU and the two routers. The clamped experts are moe.cu's kernels with a limit.
// Float math on BF16 or F32 tensors; the hyper-connection weights F32 or BF16.
#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/gemm.h"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::ops::cuda {
namespace {

// ---- rotary ----

constexpr int kMaxTailPairs = 128;

struct TailRopeParams {
  float inv_freq[kMaxTailPairs];
  int half;
  float scaling, sign;
};

// A thread per rotated pair (token, head, i): (x[nope + 2i], x[nope + 2i + 1]) by position * inv_freq[i].
__global__ void rope_tail_kernel(void* x, bool x32, const int32_t* positions, int64_t t, int64_t heads, int64_t d,
                                 TailRopeParams p) {
  pdl_begin();
  const int64_t nope = d - 2 * p.half;
  STRATA_GRID_STRIDE(i, t * heads * p.half) {
    const int j = int(i % p.half);
    const int64_t th = i / p.half, row = th / heads;
    // The angle as the CPU forms it (one f32 multiply), its cosine and sine accurate to an ulp or two.
    const float angle = float(positions[row]) * p.inv_freq[j];
    const float cs = cosf(angle) * p.scaling, sn = p.sign * (sinf(angle) * p.scaling);
    const int64_t at = th * d + nope + 2 * j;
    const float a = ldf(x, x32, at), b = ldf(x, x32, at + 1);
    stf(x, x32, at, a * cs - b * sn);
    stf(x, x32, at + 1, b * cs + a * sn);
  }
}

// ---- norms ----

// A block per row; each thread re-reads only the elements it read, so out may alias x.
__global__ void rms_norm_unweighted_kernel(const void* x, bool x32, void* out, bool o32, int64_t d, float eps) {
  pdl_begin();
  __shared__ float red[32];
  const int64_t base = int64_t(blockIdx.x) * d;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float v = ldf(x, x32, base + c);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, red) / float(d) + eps);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) stf(out, o32, base + c, ldf(x, x32, base + c) * inv);
}

// ---- hyper-connections ----

constexpr int kMaxStreams = 4;      // hc_mult: 4 in every published config
constexpr int kHyperTokens = 4;     // tokens a block: fn is read once for them
constexpr int kHyperThreads = 256;

struct HyperParams {
  const float* base;   // [mix]
  const float* scale;  // [3] (pre) or [1] (head)
  int streams, iters;
  float hc_eps, norm_eps;
};

// The HF/DeepSeek Sinkhorn-Knopp projection of an S x S matrix, as ops::sinkhorn_project.
__device__ void sinkhorn(float* c, int s, int iters, float eps) {
  for (int r = 0; r < s; ++r) {
    float mx = c[r * s];
    for (int j = 1; j < s; ++j) mx = fmaxf(mx, c[r * s + j]);
    float sum = 0.f;
    for (int j = 0; j < s; ++j) sum += c[r * s + j] = expf(c[r * s + j] - mx);
    for (int j = 0; j < s; ++j) c[r * s + j] = c[r * s + j] / sum + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      for (int r = 0; r < s; ++r) {
        float sum = 0.f;
        for (int j = 0; j < s; ++j) sum += c[r * s + j];
        for (int j = 0; j < s; ++j) c[r * s + j] /= sum + eps;
      }
    }
    for (int j = 0; j < s; ++j) {
      float sum = 0.f;
      for (int r = 0; r < s; ++r) sum += c[r * s + j];
      for (int r = 0; r < s; ++r) c[r * s + j] /= sum + eps;
    }
  }
}

// One site's mix for kHyperTokens tokens a block. M = (2 + S) S projections (hyper_pre: pre,
// post, comb) or S (kHead, hyper_head: pre only) of each token's flattened streams x [S * D],
// with the RMS of x; then collapsed[t] = sum_s pre_s x_s. Every thread accumulates its columns'
// products for all M rows and the block's tokens (fn is read once a block), reduced in shared
// memory; a thread a token forms the gates.
template <int S, bool kHead>
__global__ void __launch_bounds__(kHyperThreads) hyper_mix_kernel(const void* x, bool x32, const void* fn, bool fn32,
                                                                  int64_t t_total, int64_t d, HyperParams p,
                                                                  void* collapsed, bool c32, float* post, float* comb) {
  pdl_begin();
  constexpr int M = kHead ? S : (2 + S) * S;
  __shared__ float red[kHyperThreads / 32][kHyperTokens][M + 1];
  __shared__ float pre[kHyperTokens][kMaxStreams];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int s = S;
  const int64_t n = int64_t(s) * d, t0 = int64_t(blockIdx.x) * kHyperTokens;
  const int tokens = int((t_total - t0 < kHyperTokens ? t_total - t0 : int64_t(kHyperTokens)));
  float acc[kHyperTokens][M + 1];
#pragma unroll
  for (int k = 0; k < kHyperTokens; ++k) {
#pragma unroll
    for (int j = 0; j <= M; ++j) acc[k][j] = 0.f;
  }
  for (int64_t i = tid; i < n; i += kHyperThreads) {
    float xv[kHyperTokens];
#pragma unroll
    for (int k = 0; k < kHyperTokens; ++k) {
      xv[k] = k < tokens ? ldf(x, x32, (t0 + k) * n + i) : 0.f;
      acc[k][M] = fmaf(xv[k], xv[k], acc[k][M]);
    }
#pragma unroll
    for (int j = 0; j < M; ++j) {
      const float w = ldf(fn, fn32, int64_t(j) * n + i);
#pragma unroll
      for (int k = 0; k < kHyperTokens; ++k) acc[k][j] = fmaf(w, xv[k], acc[k][j]);
    }
  }
#pragma unroll
  for (int k = 0; k < kHyperTokens; ++k) {
#pragma unroll
    for (int j = 0; j <= M; ++j) {
      const float v = warp_sum(acc[k][j]);
      if (lane == 0) red[warp][k][j] = v;
    }
  }
  __syncthreads();
  if (tid < tokens) {
    const int k = tid;
    const int64_t row = t0 + k;
    float m[M + 1];
#pragma unroll
    for (int j = 0; j <= M; ++j) {
      float v = 0.f;
      for (int w = 0; w < kHyperThreads / 32; ++w) v += red[w][k][j];
      m[j] = v;
    }
    const float inv = rsqrtf(m[M] / float(n) + p.norm_eps);
    for (int j = 0; j < s; ++j) pre[k][j] = sigmoid_f(m[j] * inv * p.scale[0] + p.base[j]) + p.hc_eps;
    if constexpr (!kHead) {
      for (int j = 0; j < s; ++j) post[row * s + j] = 2.f * sigmoid_f(m[s + j] * inv * p.scale[1] + p.base[s + j]);
      float c[kMaxStreams * kMaxStreams];
      for (int j = 0; j < s * s; ++j) c[j] = m[2 * s + j] * inv * p.scale[2] + p.base[2 * s + j];
      sinkhorn(c, s, p.iters, p.hc_eps);
      for (int j = 0; j < s * s; ++j) comb[row * s * s + j] = c[j];
    }
  }
  __syncthreads();
  for (int64_t i = tid; i < int64_t(tokens) * d; i += kHyperThreads) {
    const int k = int(i / d);
    const int64_t c = i % d, row = t0 + k;
    float v = 0.f;
    for (int j = 0; j < s; ++j) v = fmaf(pre[k][j], ldf(x, x32, row * n + j * d + c), v);
    stf(collapsed, c32, row * d + c, v);
  }
}

// A thread per (token, column): out[t, k, c] = post[t, k] y[t, c] + sum_j comb[t, j, k] x[t, j, c].
// It reads its column of every stream before writing, so out may alias x.
__global__ void hyper_post_kernel(const void* x, bool x32, const void* y, bool y32, const float* post,
                                  const float* comb, void* out, bool o32, int64_t t, int s, int64_t d) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, t * d) {
    const int64_t row = i / d, c = i % d;
    float xs[kMaxStreams];
    for (int j = 0; j < s; ++j) xs[j] = ldf(x, x32, (row * s + j) * d + c);
    const float yv = ldf(y, y32, i);
    const float* cb = comb + row * s * s;
    for (int k = 0; k < s; ++k) {
      float v = post[row * s + k] * yv;
      float mix = 0.f;
      for (int j = 0; j < s; ++j) mix = fmaf(cb[j * s + k], xs[j], mix);
      stf(out, o32, (row * s + k) * d + c, v + mix);
    }
  }
}

// ---- experts ----

__device__ __forceinline__ float clamped_swiglu_f(float g, float u, float limit) {
  return silu_f(fminf(g, limit)) * fminf(fmaxf(u, -limit), limit);
}

__global__ void silu_mul_clamped_kernel(const void* gu, bool g32, void* out, bool o32, int64_t t, int64_t inter,
                                        float limit) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, t * inter) {
    const int64_t r = i / inter, c = i % inter;
    stf(out, o32, i, clamped_swiglu_f(ldf(gu, g32, r * 2 * inter + c), ldf(gu, g32, r * 2 * inter + inter + c), limit));
  }
}

// sqrt(softplus(x)) with torch's softplus (beta 1, linear above 20).
__device__ __forceinline__ float sqrt_softplus_f(float x) { return sqrtf(x > 20.f ? x : log1pf(expf(x))); }

constexpr int kRouteWarps = 8, kMaxRouteExperts = 1024, kMaxTopK = 16;

// A warp per token. Learned (tid2eid null): the top_k of sqrt_softplus(logit) + bias by rounds of
// warp arg max (the lower index winning a tie, as on the CPU); hashed: the ids of its token's
// tid2eid row. Then weights = s[id] / (sum + 1e-20) * scaling.
__global__ void route_sqrt_softplus_kernel(const void* logits, bool l32, const float* bias, int64_t t, int e,
                                           int top_k, float scaling, const int32_t* tid2eid,
                                           const int32_t* token_ids, int32_t* ids, float* weights) {
  pdl_begin();
  __shared__ float scores[kRouteWarps][kMaxRouteExperts];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (row >= t) return;
  const int64_t base = row * e;
  int32_t chosen[kMaxTopK];
  if (tid2eid) {
    for (int j = 0; j < top_k; ++j) chosen[j] = tid2eid[int64_t(token_ids[row]) * top_k + j];
  } else {
    float* sc = scores[warp];
    for (int i = lane; i < e; i += 32) sc[i] = sqrt_softplus_f(ldf(logits, l32, base + i)) + (bias ? bias[i] : 0.f);
    __syncwarp();
    for (int j = 0; j < top_k; ++j) {
      float best = -INFINITY;
      int bi = e;
      for (int i = lane; i < e; i += 32) {
        if (sc[i] > best) {
          best = sc[i];
          bi = i;
        }
      }
      warp_argmax(best, bi);
      if (bi >= e) bi = 0;  // only when every score is -inf or NaN
      chosen[j] = bi;
      __syncwarp();
      if (lane == 0) sc[bi] = -INFINITY;
      __syncwarp();
    }
  }
  if (lane != 0) return;
  float w[kMaxTopK], total = 0.f;
  for (int j = 0; j < top_k; ++j) total += w[j] = sqrt_softplus_f(ldf(logits, l32, base + chosen[j]));
  for (int j = 0; j < top_k; ++j) {
    ids[row * top_k + j] = chosen[j];
    weights[row * top_k + j] = w[j] / (total + 1e-20f) * scaling;
  }
}

void check_route(const Tensor& logits, int top_k, const Tensor& ids, const Tensor& weights, const char* op) {
  expect_float(logits, op, "logits");
  STRATA_CHECK(logits.ndim() == 2, op, ": logits must be [T, E], got ", logits.describe());
  const int64_t t = logits.dim(0), e = logits.dim(1);
  STRATA_CHECK(top_k >= 1 && top_k <= e && top_k <= kMaxTopK && e <= kMaxRouteExperts, op, ": top_k ", top_k, " of ",
               e, " experts (at most ", kMaxTopK, " of ", kMaxRouteExperts, " on CUDA)");
  expect_dtype(ids, DType::kI32, op, "ids");
  expect_dtype(weights, DType::kF32, op, "weights");
  STRATA_CHECK(ids.shape() == Shape({t, top_k}) && weights.shape() == ids.shape(), op, ": ids ", ids.describe(),
               " and weights ", weights.describe(), " must be [", t, ", ", top_k, "]");
}

// The hyper-connection weights of a site: fn [mix, S * D] BF16 or F32, base [mix] and scale F32.
void check_hyper(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale, const HyperSpec& spec,
                 int64_t mix, int64_t scales, const char* op) {
  expect_float(x, op, "x");
  expect_float(fn, op, "fn");
  expect_dtype(base, DType::kF32, op, "base");
  expect_dtype(scale, DType::kF32, op, "scale");
  STRATA_CHECK(x.ndim() == 3 && x.dim(1) == spec.streams && spec.streams >= 1 && spec.streams <= kMaxStreams, op,
               ": x must be [T, ", spec.streams, ", D] with at most ", kMaxStreams, " streams on CUDA, got ",
               x.describe());
  STRATA_CHECK(fn.shape() == Shape({mix, x.dim(1) * x.dim(2)}) && base.shape() == Shape({mix}) &&
                   scale.shape() == Shape({scales}),
               op, ": fn ", fn.describe(), ", base ", base.describe(), ", scale ", scale.describe(), " for x ",
               x.describe());
}

HyperParams hyper_params(const Tensor& base, const Tensor& scale, const HyperSpec& spec) {
  return {base.data<float>(), scale.data<float>(), spec.streams, spec.sinkhorn_iters, spec.hc_eps, spec.norm_eps};
}

// hyper_mix_kernel for the spec's stream count (1 to kMaxStreams).
template <bool kHead>
void launch_hyper_mix(const Tensor& x, const Tensor& fn, const HyperParams& p, const Tensor& collapsed, float* post,
                      float* comb) {
  const int64_t t = x.dim(0), d = x.dim(2);
  const unsigned grid = unsigned((t + kHyperTokens - 1) / kHyperTokens);
  auto go = [&](auto kernel) {
    launch_pdl(kernel, grid, kHyperThreads, 0, x.raw(), is_f32(x), fn.raw(), is_f32(fn), t, d, p, collapsed.raw(),
               is_f32(collapsed), post, comb);
  };
  switch (p.streams) {
    case 1: return go(hyper_mix_kernel<1, kHead>);
    case 2: return go(hyper_mix_kernel<2, kHead>);
    case 3: return go(hyper_mix_kernel<3, kHead>);
    default: return go(hyper_mix_kernel<4, kHead>);
  }
}

}  // namespace

void rope_interleaved_tail(const Tensor& x, const std::vector<int32_t>& positions, const TailRope& spec, bool inverse) {
  OpTimer timer_("rope_interleaved_tail");
  const char* op = "rope_interleaved_tail";
  expect_float(x, op, "x");
  STRATA_CHECK(x.ndim() == 3, op, ": x must be [T, H, D], got ", x.describe());
  const int64_t t = x.dim(0), heads = x.dim(1), d = x.dim(2);
  const int half = spec.rotary_dim / 2;
  STRATA_CHECK(int64_t(positions.size()) == t && spec.rotary_dim % 2 == 0 && spec.rotary_dim <= d &&
                   int(spec.inv_freq.size()) == half && half <= kMaxTailPairs,
               op, ": ", positions.size(), " positions, rotary_dim ", spec.rotary_dim, " with ",
               spec.inv_freq.size(), " frequencies for x ", x.describe(), " (at most ", 2 * kMaxTailPairs,
               " rotary dims on CUDA)");
  if (!t || !half) return;
  TailRopeParams p{};
  std::copy(spec.inv_freq.begin(), spec.inv_freq.end(), p.inv_freq);
  p.half = half;
  p.scaling = spec.attention_scaling;
  p.sign = inverse ? -1.f : 1.f;
  Tensor keep;
  const int32_t* pos = device_ints(positions, &keep);
  launch_pdl(rope_tail_kernel, grid_for(t * heads * half), 256, 0, x.raw(), is_f32(x), pos, t, heads, d, p);
  check_launch(op);
}

void rms_norm_unweighted(const Tensor& x, float eps, const Tensor& out) {
  OpTimer timer_("rms_norm_unweighted");
  const char* op = "rms_norm_unweighted";
  expect_float(x, op, "x");
  expect_float(out, op, "out");
  STRATA_CHECK(out.numel() == x.numel() && x.ndim() > 0, op, ": out ", out.describe(), " does not match x ",
               x.describe());
  const int64_t rows = rows_of(x);
  if (!rows) return;
  launch_pdl(rms_norm_unweighted_kernel, unsigned(rows), 256, 0, x.raw(), is_f32(x), out.raw(), is_f32(out),
             x.dim(-1), eps);
  check_launch(op);
}

void hyper_pre(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale, const HyperSpec& spec,
               const Tensor& collapsed, const Tensor& post, const Tensor& comb) {
  OpTimer timer_("hyper_pre", x.ndim() ? x.dim(0) : 0);
  const char* op = "hyper_pre";
  const int64_t s = spec.streams, mix = (2 + s) * s;
  check_hyper(x, fn, base, scale, spec, mix, 3, op);
  const int64_t t = x.dim(0), d = x.dim(2);
  STRATA_CHECK(spec.sinkhorn_iters >= 1, op, ": sinkhorn_iters must be at least 1");
  expect_float(collapsed, op, "collapsed");
  expect_dtype(post, DType::kF32, op, "post");
  expect_dtype(comb, DType::kF32, op, "comb");
  STRATA_CHECK(collapsed.shape() == Shape({t, d}) && post.shape() == Shape({t, s}) && comb.shape() == Shape({t, s, s}),
               op, ": collapsed ", collapsed.describe(), ", post ", post.describe(), ", comb ", comb.describe(),
               " for x ", x.describe());
  if (!t) return;
  launch_hyper_mix<false>(x, fn, hyper_params(base, scale, spec), collapsed, post.data<float>(), comb.data<float>());
  check_launch(op);
}

void hyper_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& out) {
  OpTimer timer_("hyper_post", x.ndim() ? x.dim(0) : 0);
  const char* op = "hyper_post";
  expect_float(x, op, "x");
  expect_float(y, op, "y");
  expect_float(out, op, "out");
  expect_dtype(post, DType::kF32, op, "post");
  expect_dtype(comb, DType::kF32, op, "comb");
  STRATA_CHECK(x.ndim() == 3 && x.dim(1) <= kMaxStreams, op, ": x must be [T, S, D] with at most ", kMaxStreams,
               " streams on CUDA, got ", x.describe());
  const int64_t t = x.dim(0), s = x.dim(1), d = x.dim(2);
  STRATA_CHECK(y.shape() == Shape({t, d}) && post.shape() == Shape({t, s}) && comb.shape() == Shape({t, s, s}) &&
                   out.shape() == x.shape(),
               op, ": y ", y.describe(), ", post ", post.describe(), ", comb ", comb.describe(), ", out ",
               out.describe(), " for x ", x.describe());
  if (!t) return;
  launch_pdl(hyper_post_kernel, grid_for(t * d), 256, 0, x.raw(), is_f32(x), y.raw(), is_f32(y), post.data<float>(),
             comb.data<float>(), out.raw(), is_f32(out), t, int(s), d);
  check_launch(op);
}

void hyper_head(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale, const HyperSpec& spec,
                const Tensor& out) {
  OpTimer timer_("hyper_head", x.ndim() ? x.dim(0) : 0);
  const char* op = "hyper_head";
  check_hyper(x, fn, base, scale, spec, spec.streams, 1, op);
  const int64_t t = x.dim(0), d = x.dim(2);
  expect_float(out, op, "out");
  STRATA_CHECK(out.shape() == Shape({t, d}), op, ": out ", out.describe(), " for x ", x.describe());
  if (!t) return;
  launch_hyper_mix<true>(x, fn, hyper_params(base, scale, spec), out, nullptr, nullptr);
  check_launch(op);
}

void grouped_linear(const Tensor& x, const Tensor& w, int groups, const Tensor& y) {
  OpTimer timer_("grouped_linear", w.ndim() == 2 ? w.dim(0) : 0, w.ndim() == 2 ? w.dim(1) : 0);
  const char* op = "grouped_linear";
  expect_dtype(x, DType::kBF16, op, "x");
  expect_dtype(w, DType::kBF16, op, "weight");
  expect_float(y, op, "y");
  STRATA_CHECK(groups > 0 && w.ndim() == 2 && w.dim(0) % groups == 0, op, ": weight ", w.describe(),
               " does not split into ", groups, " groups");
  const int64_t t = rows_of(x), din = w.dim(1), r = w.dim(0) / groups;
  STRATA_CHECK(x.dim(-1) == groups * din && rows_of(y) == t && y.dim(-1) == groups * r, op, ": x ", x.describe(),
               " / y ", y.describe(), " do not fit weight ", w.describe(), " in ", groups, " groups");
  STRATA_CHECK(din % 8 == 0 && r % 8 == 0, op, ": group widths ", din, " -> ", r, " must be multiples of 8 on CUDA");
  if (!t) return;
  // Group g: y[:, g R : (g + 1) R] = x[:, g Din : (g + 1) Din] . w[g R : (g + 1) R]^T, one batched GEMM.
  gemm_bf16_grouped(x.raw(), groups * din, din, w.raw(), r * din, y.raw(), is_f32(y), groups * r, r, t, r, din, groups);
}

void silu_mul_clamped(const Tensor& gate_up, float limit, const Tensor& out) {
  OpTimer timer_("silu_mul_clamped");
  const char* op = "silu_mul_clamped";
  expect_float(gate_up, op, "gate_up");
  expect_float(out, op, "out");
  const int64_t inter = out.dim(-1), t = rows_of(out);
  STRATA_CHECK(gate_up.dim(-1) == 2 * inter && rows_of(gate_up) == t, op, ": ", gate_up.describe(),
               " does not match ", out.describe());
  if (!t) return;
  launch_pdl(silu_mul_clamped_kernel, grid_for(t * inter), 256, 0, gate_up.raw(), is_f32(gate_up), out.raw(),
             is_f32(out), t, inter, limit);
  check_launch(op);
}

void moe_route_sqrt_softplus(const Tensor& logits, const Tensor& bias, int top_k, float scaling, const Tensor& ids,
                             const Tensor& weights) {
  OpTimer timer_("moe_route_sqrt_softplus", logits.ndim() ? logits.dim(0) : 0, top_k);
  const char* op = "moe_route_sqrt_softplus";
  check_route(logits, top_k, ids, weights, op);
  const int64_t t = logits.dim(0), e = logits.dim(1);
  const bool has_bias = bias.defined() && bias.numel() > 0;
  if (has_bias) {
    expect_dtype(bias, DType::kF32, op, "bias");
    STRATA_CHECK(bias.shape() == Shape({e}), op, ": bias ", bias.describe(), " for ", e, " experts");
  }
  if (!t) return;
  launch_pdl(route_sqrt_softplus_kernel, blocks_for(t, kRouteWarps), kRouteWarps * 32, 0, logits.raw(),
             is_f32(logits), has_bias ? bias.data<float>() : nullptr, t, int(e), top_k, scaling, nullptr, nullptr,
             ids.data<int32_t>(), weights.data<float>());
  check_launch(op);
}

void moe_route_hash(const Tensor& logits, const Tensor& tid2eid, const std::vector<int32_t>& token_ids, float scaling,
                    const Tensor& ids, const Tensor& weights) {
  OpTimer timer_("moe_route_hash", logits.ndim() ? logits.dim(0) : 0);
  const char* op = "moe_route_hash";
  expect_cuda(tid2eid, op, "tid2eid");
  STRATA_CHECK(tid2eid.dtype() == DType::kI32 && tid2eid.ndim() == 2, op, ": tid2eid must be I32 [vocab, top_k], got ",
               tid2eid.describe());
  const int top_k = int(tid2eid.dim(1));
  check_route(logits, top_k, ids, weights, op);
  const int64_t t = logits.dim(0), vocab = tid2eid.dim(0);
  STRATA_CHECK(int64_t(token_ids.size()) == t, op, ": ", token_ids.size(), " token ids for ", t, " rows");
  // The table's entries are checked against the experts when the model loads it (a device read
  // here would stall the stream); the ids, on the host, here.
  for (int32_t id : token_ids) {
    STRATA_CHECK(id >= 0 && id < vocab, op, ": token id ", id, " out of range [0, ", vocab, ")");
  }
  if (!t) return;
  Tensor keep;
  const int32_t* tok = device_ints(token_ids, &keep);
  launch_pdl(route_sqrt_softplus_kernel, blocks_for(t, kRouteWarps), kRouteWarps * 32, 0, logits.raw(),
             is_f32(logits), nullptr, t, int(logits.dim(1)), top_k, scaling, tid2eid.data<int32_t>(), tok,
             ids.data<int32_t>(), weights.data<float>());
  check_launch(op);
}

}  // namespace strata::ops::cuda
