// The chunked Gated DeltaNet form (gdn_chunked.cu), called by gated_delta_rule for the
// sequences of a batch that bring more than one token.
#pragma once

#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {

// Tokens a chunk, from each span's start.
constexpr int kGdnChunk = 64;

// Floats of one (chunk, value head) in the workspace between the two passes: W [64][dk],
// U [64][dv], attn [64][64], q e^cum [64][dk], k e^(last - cum) [64][dk], e^last, padding.
__host__ __device__ inline int64_t gdn_ws_floats(int dk, int dv) {
  return int64_t(kGdnChunk) * (3 * dk + dv) + kGdnChunk * kGdnChunk + 4;
}

// The gated delta rule over the sequences `seqs` of the batch in chunks of 64 from each span's
// start (as the CPU's kChunked): q, k, v, out BF16; g, beta, state F32.
void gdn_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const ForwardBatch& batch, const DeviceBatch& db,
                 const std::vector<int32_t>& seqs, const Tensor& out);

}  // namespace strata::ops::cuda

namespace strata::ops::cuda {

// The tensor-core passes (gdn_chunked_tc.cu), for the head dims where gdn_chunked_tc_fits: the
// same chunk list (s, c0, n) and per-sequence list (s, first chunk, count) and the same
// workspace as the general kernels.
bool gdn_chunked_tc_fits(int dk, int dv);
void gdn_chunked_tc(const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta, float* state,
                    const DeviceBatch& db, const int32_t* chunks, int num_chunks, const int32_t* seqinfo,
                    int num_seqs, int hk, int hv, float* ws, bf16* out);

}  // namespace strata::ops::cuda
