// The grouped expert GEMM of the MoE path (moe_gemm.cu): one launch over every expert's tiles
// of its permuted rows, scheduled on the device.
#pragma once

#include <cstdint>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/expert_matrix.cuh"
#include "strata/ops/cuda/fp8_weights.cuh"

namespace strata::ops::cuda {

// The device-side tile schedule: tile i covers permuted rows [row0[i], row0[i] + rows[i]) of
// expert expert[i]; *count tiles are valid.
struct MoeTiles {
  int32_t* expert;
  int32_t* row0;
  int32_t* rows;
  int32_t* count;
};

// Shapes the tiles handle: K a multiple of 32 (hidden and intermediate); partial column blocks
// are masked.
inline bool moe_gemm_supported(int64_t hidden, int64_t inter) {
  return hidden % 32 == 0 && inter % 32 == 0;
}

// How the grouped GEMM tiles this many (token, expert) pairs over this many experts: on wgmma
// (moe_gemm_wgmma.cu), 128-row tiles, once the average expert has at least 32 rows, else on
// mma.sync, 64-row tiles (decode: a few rows an expert, where the weights' bandwidth bounds the
// time, not the multiplies). FP4 experts (W4A16) take the mma.sync tiles at every size (no wgmma
// kernel reads them yet: docs/plans/fp4_kernels.md K3).
struct MoeTiling {
  int rows;
  bool wgmma;
};
MoeTiling moe_tiling(int64_t pairs, int64_t experts, WeightFormat format);

// gate_up: out[p, :n] = silu(g) * u with (g; u) = w[e] [2n, k] · a[gather[p]] (a [T, k]), the
// clamped form with a finite `limit` (swiglu_f);
// else:    out[p, :n] = w[e] [n, k] · a[p] (a [P, k]).
// Tiles as `tiling` says; launches column blocks x max_tiles blocks, those past *tiles.count
// exit at once. FP8 experts (w.scale set; k a multiple of 16 and of 64 or 32 with the zero-filled
// half) are multiplied as bf16(code * scale) on the mma.sync tiles only: on the wgmma tiles they
// take FP8 rows of A (moe_grouped_gemm_w8a8). FP4 experts (w.format kNvfp4 / kMxfp4; k and n
// multiples of 32) as bf16(c * s), exact, their NVFP4 row globals applied to the accumulators;
// mma.sync tiles only.
void moe_grouped_gemm(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                      const MoeTiling& tiling, unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up,
                      float limit, bf16* out);
// The wgmma kernel, tiles of 128 rows: persistent, at most one block an SM; bf16 experts.
void moe_grouped_gemm_wgmma(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                            unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up, float limit,
                            bf16* out);

// Rows of activations quantised to FP8 (quantize_fp8_rows): codes [rows, k] and `groups` =
// ceil(k / kFp8Group) F32 scales a row.
struct Fp8Rows {
  const uint8_t* codes;
  const float* scale;
  int64_t groups;
};
// The wgmma kernel over FP8 experts and FP8 rows of A (W8A8; k a multiple of 16): as
// moe_grouped_gemm_wgmma, each 128 columns of K scaled by the A row's and the weight row's scales.
void moe_grouped_gemm_w8a8(const Fp8Rows& a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                           unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up, float limit,
                           bf16* out);

}  // namespace strata::ops::cuda
