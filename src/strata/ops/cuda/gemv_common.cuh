// The GEMV machinery shared by the bf16 (gemm.cu) and FP8 (linear_fp8.cu) weight paths of linear:
// the outputs a projection's columns split into, the fused norm prologue, the reduction of a
// group's partial dots and the choice of the K split.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/ops/cuda/common.cuh"

namespace strata::ops::cuda {

constexpr int kMaxOuts = 8;
constexpr int kGemvMaxRows = 8;

struct Outs {
  void* ptr[kMaxOuts];
  int64_t start[kMaxOuts + 1];
  bool f32[kMaxOuts];
  int n;
};

__device__ __forceinline__ void store_out(const Outs& o, int64_t t, int64_t col, float v) {
  int s = 0;
  while (col >= o.start[s + 1]) ++s;
  const int64_t w = o.start[s + 1] - o.start[s];
  stf(o.ptr[s], o.f32[s], t * w + col - o.start[s], v);
}

// add_rms_norm_linear's prologue: every block forms x = rms_norm(h + y) * w itself, in shared
// memory (rows x K bf16, the same roundings as add_rms_norm); block 0 also writes h + y and x out.
constexpr int kNormMaxElems = 8 * 2048;

struct NormIn {
  const bf16* h;
  const bf16* y;  // null: x = rms_norm(h), nothing to add
  const void* w;
  bool w32, zero_centered;
  float eps;
  bf16* h_out;  // h + y (with y)
  bf16* x_out;
};

// The prologue, between pdl_wait and the GEMV: xs[rows][k_dim] = the normalised rows. Each
// thread loads its 8 elements of every row (h, y and the norm weight) before it uses any, so the
// rows' loads overlap instead of queueing one behind another.
template <int T>
__device__ void norm_prologue(const NormIn& nin, int64_t k_dim, int rows, bf16* xs) {
  __shared__ float red[8][T];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool writer = blockIdx.x == 0;
  float ss[T];
#pragma unroll
  for (int t = 0; t < T; ++t) ss[t] = 0.f;
  for (int64_t c = int64_t(tid) * 8; c < k_dim; c += 256 * 8) {
    uint4 hv[T], yv[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t < rows) {
        hv[t] = *reinterpret_cast<const uint4*>(nin.h + t * k_dim + c);
        if (nin.y) yv[t] = *reinterpret_cast<const uint4*>(nin.y + t * k_dim + c);
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t >= rows) continue;
      float v[8];
      unpack8(hv[t], v);
      uint4 packed;
      if (nin.y) {
        float r[8];
        unpack8(yv[t], r);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] += r[e];
        packed = pack8(v);
        unpack8(packed, v);  // the rounded sum, as the next layer sees it
        if (writer) *reinterpret_cast<uint4*>(nin.h_out + t * k_dim + c) = packed;
      } else {
        packed = pack8(v);
      }
      *reinterpret_cast<uint4*>(xs + t * k_dim + c) = packed;
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[t] += v[e] * v[e];
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const float w = warp_sum(ss[t]);
    if (lane == 0) red[warp][t] = w;
  }
  __syncthreads();
  float inv[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float total = 0.f;
    for (int j = 0; j < 8; ++j) total += red[j][t];
    inv[t] = rsqrtf(total / float(k_dim) + nin.eps);
  }
  for (int64_t c = int64_t(tid) * 8; c < k_dim; c += 256 * 8) {
    float wf[8];
    if (nin.w32) {
      const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(nin.w) + c);
      const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(nin.w) + c + 4);
      wf[0] = a.x, wf[1] = a.y, wf[2] = a.z, wf[3] = a.w, wf[4] = b.x, wf[5] = b.y, wf[6] = b.z, wf[7] = b.w;
    } else {
      unpack8(*reinterpret_cast<const uint4*>(static_cast<const bf16*>(nin.w) + c), wf);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) wf[e] += nin.zero_centered ? 1.f : 0.f;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t >= rows) continue;
      float v[8], o[8];
      unpack8(*reinterpret_cast<const uint4*>(xs + t * k_dim + c), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = v[e] * inv[t] * wf[e];
      const uint4 packed = pack8(o);
      *reinterpret_cast<uint4*>(xs + t * k_dim + c) = packed;
      if (writer) *reinterpret_cast<uint4*>(nin.x_out + t * k_dim + c) = packed;
    }
  }
  __syncthreads();
}

// pdl_wait the first time only (the GEMVs load weights before it, activations after).
__device__ __forceinline__ void pdl_wait_once(bool& waited) {
  if (!waited) {
    pdl_wait();
    waited = true;
  }
}

// The end of a GEMV tile: each warp's R x T dots summed over its lanes, then over the S warps
// of its group (through `partial` in shared memory), and stored (rows < `rows`, columns < n_dim).
template <int T, int R, int S>
__device__ __forceinline__ void store_dots(float (&acc)[R][T], float (&partial)[S > 1 ? 8 : 1][R][T], int64_t n0,
                                           int64_t n_dim, int rows, const Outs& outs) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % S;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (S == 1) {
        if (lane == 0 && t < rows && n0 + r < n_dim) store_out(outs, t, n0 + r, v);
      } else if (lane == 0) {
        partial[warp][r][t] = v;
      }
    }
  }
  if (S > 1) {
    __syncthreads();
    if (part == 0 && lane < R * T) {
      const int r = lane / T, t = lane % T;
      float v = 0.f;
#pragma unroll
      for (int j = 0; j < S; ++j) v += partial[warp + j][r][t];
      if (t < rows && n0 + r < n_dim) store_out(outs, t, n0 + r, v);
    }
    __syncthreads();
  }
}

// How evenly `tiles` block tiles fill whole waves of `resident` blocks (1 = no idle tail).
inline double wave_fill(int64_t tiles, int64_t resident) {
  const int64_t waves = (tiles + resident - 1) / resident;
  return double(tiles) / double(waves * resident);
}

// The split S (warps per output group; index 0-3 for S = 1, 2, 4, 8) of fills[i] (wave_fill of
// each, negative where not allowed): the smallest that fills the resident waves to 90%, else the
// best filling.
inline int best_split(const double (&fills)[4]) {
  int best = 0;
  for (int i = 0; i < 4; ++i) {
    if (fills[i] >= 0.9) return i;
    if (fills[i] > fills[best]) best = i;
  }
  return best;
}

// Blocks of `Kernel` (256 threads, no dynamic shared memory) resident at once on the whole GPU.
template <auto Kernel>
int64_t resident_blocks() {
  static const int64_t kBlocks = [] {
    int per_sm = 0;
    STRATA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, 256, 0));
    return int64_t(std::max(per_sm, 1)) * sm_count();
  }();
  return kBlocks;
}

template <int N>
using IntC = std::integral_constant<int, N>;

// A GEMV's launch over n output columns of K k, R columns a group of S warps (8 / S groups a
// block): launch(IntC<S>{}) for the S that best_split picks among 1, 2, 4 and 8, each warp keeping
// at least min_warp_k of K; resident(IntC<S>{}) gives how many blocks of that kernel fit at once.
template <class Resident, class Launch>
void launch_best_split(int64_t n, int64_t k, int r, int64_t min_warp_k, Resident&& resident, Launch&& launch) {
  auto fill = [&](auto s) {
    constexpr int S = decltype(s)::value;
    if (S > 1 && k / S < min_warp_k) return -1.0;
    return wave_fill((n + (8 / S) * r - 1) / ((8 / S) * r), resident(s));
  };
  const double f[4] = {fill(IntC<1>{}), fill(IntC<2>{}), fill(IntC<4>{}), fill(IntC<8>{})};
  switch (best_split(f)) {
    case 0: return launch(IntC<1>{});
    case 1: return launch(IntC<2>{});
    case 2: return launch(IntC<4>{});
    default: return launch(IntC<8>{});
  }
}

// f(IntC<T>{}) for the smallest T of 1, 2, 4 and 8 that holds `rows` (1..kGemvMaxRows) rows of x.
template <class F>
void with_row_tile(int rows, F&& f) {
  if (rows <= 1) return f(IntC<1>{});
  if (rows <= 2) return f(IntC<2>{});
  if (rows <= 4) return f(IntC<4>{});
  return f(IntC<8>{});
}

// An FP8 projection as linear_fp8.cu reads it: F8_E4M3 codes [n_main, K] with `groups` F32 scales
// a row (one per 128 columns), then, when n > n_main, bf16 rows `rest` [n - n_main, K].
struct Fp8Rows {
  const uint8_t* codes;
  const float* scale;
  int64_t groups, n_main;
  const bf16* rest;
};

// The FP8 weight w (F8_E4M3 [n_main, K] with F32 scales [n_main, ceil(K / 128)], group 128) and,
// if defined, its bf16 rows `rest` [.., K] as the kernels read them; an Error naming op otherwise.
Fp8Rows fp8_weight(const Tensor& w, const Tensor& rest, const char* op);

// y = x · w^T for 1..kGemvMaxRows rows (K a multiple of 16, every pointer 16-byte aligned) into
// the outputs o; with nin, x is the norm prologue's (add_rms_norm_linear) and the x argument unused.
void gemv_fp8(const bf16* x, const Fp8Rows& w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn* nin);
// linear(_split) for an FP8 weight w (F8_E4M3 with per-row scales, group 128) and, if defined,
// the bf16 rows `rest` after its own: x [.., K] bf16 into ys, whose columns o describes.
void linear_fp8_into(const Tensor& x, const Tensor& w, const Tensor& rest, const std::vector<Tensor>& ys,
                     const Outs& o, const char* op);

}  // namespace strata::ops::cuda
