// The grouped expert GEMM of the MoE path (moe_gemm.cu): one launch over every expert's tiles
// of its permuted rows, scheduled on the device.
#pragma once

#include <cstdint>

#include "strata/ops/cuda/common.cuh"

namespace strata::ops::cuda {

constexpr int kMoeBm = 64;  // permuted rows per tile

// The device-side tile schedule: tile i covers permuted rows [row0[i], row0[i] + rows[i]) of
// expert expert[i]; *count tiles are valid.
struct MoeTiles {
  int32_t* expert;
  int32_t* row0;
  int32_t* rows;
  int32_t* count;
};

// Shapes the tiles handle: K a multiple of 32 (hidden and intermediate), hidden a multiple of 64.
inline bool moe_gemm_supported(int64_t hidden, int64_t inter) {
  return hidden % 64 == 0 && inter % 32 == 0;
}

// gate_up: out[p, :n] = silu(g) * u with (g; u) = w[e] [2n, k] · a[gather[p]] (a [T, k]);
// else:    out[p, :n] = w[e] [n, k] · a[p] (a [P, k]).
// Launches max_tiles x (n / 32 or n / 64) blocks; those past *tiles.count exit at once.
void moe_grouped_gemm(const bf16* a, const int32_t* gather, const bf16* w, const MoeTiles& tiles,
                      unsigned max_tiles, int64_t k, int64_t n, bool gate_up, bf16* out);

}  // namespace strata::ops::cuda
