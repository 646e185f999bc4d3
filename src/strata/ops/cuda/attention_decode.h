// Decode attention on tensor cores (attention_decode.cu), launched by paged_attention
// (attention.cu) for bf16 pages of head dim 128 or 256 and GQA groups of at most 16; the
// CUDA-core decode kernel of attention.cu takes FP8 pages and the other shapes. Both split a
// query's keys the same way and leave several splits' partials to attn_combine_kernel.
#pragma once

#include <cstdint>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {

// A decode split holds no fewer than this many keys (short splits cost more in the combine than
// they save).
inline constexpr int kDecodeMinSplitTokens = 32;
// The splits of a decode attention over `seq_len` keys out of the grid's `splits`, chosen on the
// device from the query's length (a captured graph replays at any context); the grid's others exit.
__device__ __forceinline__ int decode_used_splits(int seq_len, int splits) {
  return max(1, min(splits, (seq_len + kDecodeMinSplitTokens - 1) / kDecodeMinSplitTokens));
}

// The query `i` of a decode attention: sequence i's last row, or (rows) batch row i, which
// attends causally to the keys up to its own.
struct DecodeQuery {
  int seq, row, keys;
};
__device__ __forceinline__ DecodeQuery decode_query(const DeviceBatch& b, int i, bool rows) {
  if (rows) {
    const int s = b.token_seq[i];
    return {s, i, b.ctx_len[s] + (i - b.q_start[s]) + 1};
  }
  return {i, b.q_start[i], b.ctx_len[i] + b.q_len[i]};
}

// The new token's key and value (k, v: its kv head's D elements) into their page by the block
// whose split (of `chunk` keys) holds position `last`; last < 0 (its keys already in the pages)
// stores nothing. bt: the sequence's block table.
template <int D>
__device__ __forceinline__ void decode_store_new_kv(const bf16* k, const bf16* v, bf16* k_cache, bf16* v_cache,
                                                    const int* bt, int bs, int hkv, int kvh, int last, int split,
                                                    int chunk) {
  if (last < 0 || split != last / chunk || bt[last / bs] < 0) return;
  const int64_t dst = ((int64_t(bt[last / bs]) * bs + last % bs) * hkv + kvh) * D;
  for (int i = threadIdx.x; i < D / 8; i += blockDim.x) {
    reinterpret_cast<uint4*>(k_cache + dst)[i] = reinterpret_cast<const uint4*>(k)[i];
    reinterpret_cast<uint4*>(v_cache + dst)[i] = reinterpret_cast<const uint4*>(v)[i];
  }
}

inline bool decode_mma_supported(int d, int group) { return (d == 128 || d == 256) && group >= 1 && group <= 16; }
// Resident blocks an SM (by shared memory), for the split count.
int decode_mma_blocks_per_sm(int d);

// The queries: sequence i's last row (single-token decode), or (rows) batch row i, attending
// causally to the keys up to its own, all in the pages (a speculative verify's few rows a
// sequence, stored before). Single-token decode reads the new key and value from k / v and
// stores them into k_cache / v_cache. part_o [queries][hq][splits][d] and part_ml [..][2]
// (running max in natural-log units, mass) when splits > 1; else out gets the gated output.
struct DecodeArgs {
  DeviceBatch batch;
  int hq, hkv, bs, splits;
  bool rows;
  float scale;
  const bf16* k;  // [T, hkv, d], single-token decode
  const bf16* v;
  bf16* k_cache;  // [pages][bs][hkv][d]: bf16, or (k_scale set) e4m3 codes
  bf16* v_cache;
  const uint8_t* k_scale;  // FP8 pages: a UE8M0 byte a vector (kv_fp8.cuh); null for bf16 pages
  const uint8_t* v_scale;
  const bf16* gate;  // [T, hq * d] or null
  float* part_o;
  float* part_ml;
  bf16* out;  // [T, hq, d]
};
// nq: the queries (sequences, or batch rows with args.rows).
void attn_decode_mma(int d, const bf16* q, const DecodeArgs& args, unsigned nq);

}  // namespace strata::ops::cuda
