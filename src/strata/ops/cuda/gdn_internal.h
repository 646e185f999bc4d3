// The chunked Gated DeltaNet form (gdn_chunked.cu), called by gated_delta_rule for the
// sequences of a batch that bring more than one token.
#pragma once

#include <type_traits>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {

// One recurrent-state element of a pool whose dtype is known at compile time (F32 or BF16), as
// float; the BF16 store rounds to nearest even (the decode step's kState32).
__device__ __forceinline__ float ld_state(const float* p) { return *p; }
__device__ __forceinline__ float ld_state(const bf16* p) { return bf2f(*p); }
__device__ __forceinline__ void st_state(float* p, float v) { *p = v; }
__device__ __forceinline__ void st_state(bf16* p, float v) { *p = f2bf(v); }

// V (1, 2 or 4) adjacent state elements in one load or store, p aligned to V elements.
template <int V>
__device__ __forceinline__ void ld_state_vec(const float* p, float* o) {
  if constexpr (V == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    o[0] = x.x, o[1] = x.y, o[2] = x.z, o[3] = x.w;
  } else if constexpr (V == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    o[0] = x.x, o[1] = x.y;
  } else {
    o[0] = *p;
  }
}
template <int V>
__device__ __forceinline__ void ld_state_vec(const bf16* p, float* o) {
  if constexpr (V == 1) {
    o[0] = bf2f(*p);
  } else {
    using Word = std::conditional_t<V == 4, uint2, uint32_t>;
    const Word w = *reinterpret_cast<const Word*>(p);
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  }
}
template <int V>
__device__ __forceinline__ void st_state_vec(float* p, const float* v) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  } else {
    *p = v[0];
  }
}
template <int V>
__device__ __forceinline__ void st_state_vec(bf16* p, const float* v) {
  if constexpr (V == 1) {
    *p = f2bf(v[0]);
  } else {
    using Word = std::conditional_t<V == 4, uint2, uint32_t>;
    Word w;
    auto* h = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
    for (int i = 0; i < V / 2; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<Word*>(p) = w;
  }
}
// A run of V state elements of which the first n (<= 0: none) exist: one vector access when
// all do and `vec` (the run is V-aligned), else element by element; missing ones load as 0.
template <int V, typename T>
__device__ __forceinline__ void ld_state_run(const T* p, int n, bool vec, float* o) {
  if (vec && n >= V) return ld_state_vec<V>(p, o);
#pragma unroll
  for (int j = 0; j < V; ++j) o[j] = j < n ? ld_state(p + j) : 0.f;
}
template <int V, typename T>
__device__ __forceinline__ void st_state_run(T* p, int n, bool vec, const float* v) {
  if (vec && n >= V) return st_state_vec<V>(p, v);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (j < n) st_state(p + j, v[j]);
  }
}

// Tokens a chunk, from each span's start.
constexpr int kGdnChunk = 64;

// One (chunk, value head) of the workspace between the two passes, offsets in floats: W [64][dk],
// U [64][dv], attn [64][64], q e^cum [64][dk], k e^(last - cum) [64][dk], e^last, padding.
struct GdnWs {
  int u, attn, qe, kd, decay;
  int64_t floats;  // the whole part, 16-byte aligned
  __host__ __device__ constexpr GdnWs(int dk, int dv)
      : u(kGdnChunk * dk), attn(u + kGdnChunk * dv), qe(attn + kGdnChunk * kGdnChunk), kd(qe + kGdnChunk * dk),
        decay(kd + kGdnChunk * dk), floats(decay + 4) {}
};

// The identity, l2norm_qk_rows's default for how a normalised value is stored.
struct KeepFloat {
  __device__ float operator()(float x) const { return x; }
};

// Rows 0..n-1 of the chunk's q and k in shared memory (row stride ld, dk wide) l2-normalised in
// place as HF's l2norm (eps 1e-6 inside the root), q also times `scale`, each value stored as
// store(value) (e.g. rounded for the tensor cores); a warp a row.
template <typename Store = KeepFloat>
__device__ inline void l2norm_qk_rows(float* q, float* k, int ld, int dk, int n, float scale, Store store = {}) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int i = warp; i < n; i += warps) {
    float sq = 0.f, sk = 0.f;
    for (int c = lane; c < dk; c += 32) {
      sq += q[i * ld + c] * q[i * ld + c];
      sk += k[i * ld + c] * k[i * ld + c];
    }
    const float iq = 1.f / sqrtf(warp_sum(sq) + 1e-6f), ik = 1.f / sqrtf(warp_sum(sk) + 1e-6f);
    for (int c = lane; c < dk; c += 32) {
      q[i * ld + c] = store((q[i * ld + c] * iq) * scale);
      k[i * ld + c] = store(k[i * ld + c] * ik);
    }
  }
}

// The gated delta rule over the sequences `seqs` of the batch in chunks of 64 from each span's
// start (as the CPU's kChunked): q, k, v, out BF16; g, beta F32; state F32 or BF16 (a BF16 state
// is loaded to fp32, kept fp32 through the chunks and rounded once when the final state is stored).
void gdn_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const ForwardBatch& batch, const DeviceBatch& db,
                 const std::vector<int32_t>& seqs, const Tensor& out);

// The tensor-core passes (gdn_chunked_tc.cu), for the head dims where gdn_chunked_tc_fits: the
// same chunk list (s, c0, n) and per-sequence list (s, first chunk, count) as the general
// kernels, and a workspace of gdn_chunked_tc_ws_bytes.
bool gdn_chunked_tc_fits(int dk, int dv);
int64_t gdn_chunked_tc_ws_bytes(int num_chunks, int hk, int hv);
void gdn_chunked_tc(const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta, void* state,
                    bool s32, const DeviceBatch& db, const int32_t* chunks, int num_chunks, const int32_t* seqinfo,
                    int num_seqs, int hk, int hv, void* ws, bf16* out);

}  // namespace strata::ops::cuda
