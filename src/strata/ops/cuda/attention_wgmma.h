// The wgmma prefill attention (attention_wgmma.cu), head dims 128 and 256, launched by
// paged_attention (attention.cu) after the new keys and values are in their pages.
#pragma once

#include <cstdint>

#include "strata/ops/cuda/common.cuh"

namespace strata::ops::cuda {

// Query rows a block (two warpgroups of 64); the tile list is cut to it.
inline constexpr int kWgmmaPrefillRows = 128;

// tiles: n_tiles (sequence, first query) pairs of kWgmmaPrefillRows / hpb queries each (hpb query heads of one
// kv head a block, hpb 1 or 2), longest first, or null when every sequence fits one tile (n_tiles = the
// sequences, in order: no host list, so a CUDA graph can capture it); scale_log2 = scale * log2 e; gate null: none.
// k_cache, v_cache: [cache_rows / bs pages][bs][hkv][d].
void attn_prefill_wgmma(int d, const bf16* q, const bf16* k_cache, const bf16* v_cache, int64_t cache_rows,
                        const DeviceBatch& db, const int32_t* tiles, unsigned n_tiles, int hq, int hkv, int bs,
                        int hpb, float scale_log2, const bf16* gate, bf16* out);

}  // namespace strata::ops::cuda
