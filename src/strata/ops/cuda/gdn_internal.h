// The chunked Gated DeltaNet form (gdn_chunked.cu), called by gated_delta_rule for the
// sequences of a batch that bring more than one token.
#pragma once

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

// Rows 0..n-1 of the chunk's q and k in shared memory (row stride ld, dk wide) l2-normalised in
// place as HF's l2norm (eps 1e-6 inside the root), q also times `scale`; a warp a row.
__device__ inline void l2norm_qk_rows(float* q, float* k, int ld, int dk, int n, float scale) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int i = warp; i < n; i += warps) {
    float sq = 0.f, sk = 0.f;
    for (int c = lane; c < dk; c += 32) {
      sq += q[i * ld + c] * q[i * ld + c];
      sk += k[i * ld + c] * k[i * ld + c];
    }
    const float iq = 1.f / sqrtf(warp_sum(sq) + 1e-6f), ik = 1.f / sqrtf(warp_sum(sk) + 1e-6f);
    for (int c = lane; c < dk; c += 32) {
      q[i * ld + c] = (q[i * ld + c] * iq) * scale;
      k[i * ld + c] *= ik;
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
// same chunk list (s, c0, n) and per-sequence list (s, first chunk, count) and the same
// workspace as the general kernels.
bool gdn_chunked_tc_fits(int dk, int dv);
void gdn_chunked_tc(const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta, void* state,
                    bool s32, const DeviceBatch& db, const int32_t* chunks, int num_chunks, const int32_t* seqinfo,
                    int num_seqs, int hk, int hv, float* ws, bf16* out);

}  // namespace strata::ops::cuda
