// CUDA: the grouped expert GEMM for 64-row tiles of a few rows an expert (batched decode; the
// dense tiles of prefill run on wgmma, moe_gemm_wgmma.cu). Each block takes one tile of up to 64
// permuted rows of one expert and 128 weight rows, streams K in steps of 64 through a 3-stage cp.async ring, and
// multiplies with bf16 mma.sync m16n8k16 (fp32 accumulators in registers, operands by ldmatrix
// from rows padded to 72 elements, which keeps every ldmatrix free of bank conflicts). Eight
// warps split the tile 2 (rows) x 4 (columns). For gate_up the 128 weight rows are 64 gate rows
// and the matching 64 up rows, and each warp holds a gate column and its up column in the same
// registers, so SiLU-mul is the epilogue. The grid's x is the column block, so the blocks of one
// row tile run together and read its rows (the gathered tokens) once from memory.
#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/fp8_weights.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/moe_gemm.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kBm = 64, kBn = 128, kBk = 64, kLd = kBk + 8, kStages = 3, kThreads = 256;


// FP8 weights (kFp8): the ring holds the codes, kBk bytes a row padded to kLd8 (16-byte aligned
// rows, conflict-free 16-byte reads), and each stage is dequantised into one bf16 tile.
constexpr int kLd8 = kBk + 16;
constexpr size_t kSmem = size_t(kStages) * (kBm + kBn) * kLd * sizeof(bf16);
constexpr size_t kSmemFp8 =
    size_t(kStages) * kBm * kLd * sizeof(bf16) + size_t(kStages) * kBn * kLd8 + size_t(kBn) * kLd * sizeof(bf16);

// gate_up: out[p, c] = silu(g) * u over act columns c of block y (64 of them), n = intermediate;
// down: out[p, c] over output columns c of block y (128 of them), n = hidden.
// kFp8: w holds F8_E4M3 codes with per-row scales (fp8_weights.cuh); each stage's codes become
// bf16(code * scale), the bf16 weights that dequantising at load gives, before the MMAs.
template <bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_kernel(const bf16* __restrict__ a,
                                                                   const int32_t* gather, ExpertMatrix w,
                                                                   MoeTiles tiles, int64_t k, int64_t n, float limit,
                                                                   bf16* out) {
  constexpr int kWm = kBm / 2, kMt = kWm / 16;  // a warp's rows and 16-row tiles
  pdl_begin();
  extern __shared__ __align__(128) bf16 smem[];
  bf16* as = smem;                          // [stage][kBm][kLd]
  bf16* bs = smem + kStages * kBm * kLd;     // [stage][kBn][kLd] (kFp8: the bf16 tile [kBn][kLd])
  uint8_t* b8 = reinterpret_cast<uint8_t*>(bs + kBn * kLd);  // kFp8: [stage][kBn][kLd8] codes
  const int tile = blockIdx.y;
  if (tile >= *tiles.count) return;
  const int64_t e = tiles.expert[tile];
  const int row0 = tiles.row0[tile], rows = tiles.rows[tile];
  const int nb = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int64_t expert_rows = kGateUp ? 2 * n : n;

  // Each thread moves kBm / 32 16-byte vectors of A and four of B per stage (8 vectors a row;
  // FP8: two, 4 a row); vectors past K (a K of 32 mod 64) are zero-filled.
  constexpr int kVr = kBk / 8, kAv = kBm * kVr / kThreads;
  constexpr int kVrB = kFp8 ? kBk / 16 : kVr, kBv = kBn * kVrB / kThreads, kElemsB = kBk / kVrB;
  const bf16* a_src[kAv];
  bool a_ok[kAv];
  const char* b_src[kBv];
  const float* b_scale[kBv];
  bool b_ok[kBv];
#pragma unroll
  for (int i = 0; i < kAv; ++i) {
    const int v = tid + i * kThreads, r = v / kVr, c = v % kVr;
    a_ok[i] = r < rows;
    const int64_t arow = a_ok[i] ? (kGateUp ? gather[row0 + r] : row0 + r) : 0;
    a_src[i] = a + arow * k + c * 8;
  }
  constexpr int64_t kWeightBytes = kFp8 ? 1 : 2;
#pragma unroll
  for (int i = 0; i < kBv; ++i) {
    const int v = tid + i * kThreads, r = v / kVrB, c = v % kVrB;
    // gate_up: rows 0..63 gate rows 64 nb.., rows 64..127 the matching up rows (at n + ...).
    const int64_t col = kGateUp ? int64_t(nb) * 64 + (r & 63) : int64_t(nb) * kBn + r;
    b_ok[i] = col < n;
    const int64_t wrow = e * expert_rows + (!b_ok[i] ? 0 : kGateUp && r >= 64 ? n + col : col);
    b_src[i] = static_cast<const char*>(w.w) + (wrow * k + c * kElemsB) * kWeightBytes;
    b_scale[i] = kFp8 && b_ok[i] ? w.scale + wrow * w.groups : nullptr;
  }
  auto load = [&](int stage, int64_t k0) {
    bf16* sa = as + stage * kBm * kLd;
#pragma unroll
    for (int i = 0; i < kAv; ++i) {
      const int v = tid + i * kThreads;
      cp_async16(sa + (v / kVr) * kLd + (v % kVr) * 8, a_src[i] + k0, a_ok[i] && k0 + (v % kVr) * 8 < k);
    }
#pragma unroll
    for (int i = 0; i < kBv; ++i) {
      const int v = tid + i * kThreads, r = v / kVrB, c = v % kVrB;
      void* dst = kFp8 ? static_cast<void*>(b8 + (stage * kBn + r) * kLd8 + c * 16)
                       : static_cast<void*>(bs + (stage * kBn + r) * kLd + c * 8);
      cp_async16(dst, b_src[i] + k0 * kWeightBytes, b_ok[i] && k0 + c * kElemsB < k);
    }
  };
  // kFp8: stage `stage` (K from k0) dequantised into the bf16 tile, each thread its own vectors.
  auto dequantise = [&](int stage, int64_t k0) {
#pragma unroll
    for (int i = 0; i < kBv; ++i) {
      const int v = tid + i * kThreads, r = v / kVrB, c = v % kVrB;
      const uint4 codes = *reinterpret_cast<const uint4*>(b8 + (stage * kBn + r) * kLd8 + c * 16);
      const float scale = b_scale[i] ? __ldg(b_scale[i] + k0 / kFp8Group) : 0.f;
      uint4 lo, hi;
      dequant16_e4m3(codes, scale, lo, hi);
      *reinterpret_cast<uint4*>(bs + r * kLd + c * 16) = lo;
      *reinterpret_cast<uint4*>(bs + r * kLd + c * 16 + 8) = hi;
    }
  };

  // B rows of this warp's two column pairs (two 8-column tiles each).
  int brow[2];
#pragma unroll
  for (int p = 0; p < 2; ++p) brow[p] = kGateUp ? p * 64 + wn * 16 : wn * 32 + p * 16;
  float acc[kMt][4][4] = {};
  const int kb_count = int((k + kBk - 1) / kBk);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kb_count) load(s, int64_t(s) * kBk);
    cp_commit();
  }
  // ldmatrix lane addressing: A x4 = rows lane % 16, k half lane / 16; B x4 = rows lane % 8 plus
  // 8 (lane / 16), k half (lane / 8) % 2.
  const int a_r = lane & 15, a_c = (lane >> 4) * 8;
  const int b_r = (lane & 7) + ((lane >> 4) << 3), b_c = ((lane >> 3) & 1) * 8;
  for (int kb = 0; kb < kb_count; ++kb) {
    cp_wait<kStages - 2>();
    __syncthreads();
    const int next = kb + kStages - 1;
    if (next < kb_count) load(next % kStages, int64_t(next) * kBk);
    cp_commit();
    if constexpr (kFp8) {
      dequantise(kb % kStages, int64_t(kb) * kBk);
      __syncthreads();  // the tile whole before any warp reads it (the next loop top's wait
                        // keeps it until every warp is done with it)
    }
    const bf16* sa = as + (kb % kStages) * kBm * kLd + (wm * kWm) * kLd;
    const bf16* sb = kFp8 ? bs : bs + (kb % kStages) * kBn * kLd;
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t af[kMt][4], bf[2][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) ldmatrix_x4(af[mt], sa + (mt * 16 + a_r) * kLd + kk + a_c);
#pragma unroll
      for (int p = 0; p < 2; ++p) ldmatrix_x4(bf[p], sb + (brow[p] + b_r) * kLd + kk + b_c);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16(acc[mt][j], af[mt], bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
      }
    }
  }
  cp_wait<0>();
  // Epilogue from registers: accumulator (mt, j) holds rows g and g + 8 of its 16, columns 2t and
  // 2t + 1 of its 8.
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * kWm + mt * 16 + g + half * 8;
      if (r >= rows) continue;
      bf16* orow = out + int64_t(row0 + r) * n;
      if (kGateUp) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {  // tiles j (gate) and j + 2 (up) share their columns
          const int64_t c = int64_t(nb) * 64 + wn * 16 + j * 8 + 2 * t;
          if (c >= n) continue;
          const float g0 = acc[mt][j][2 * half], g1 = acc[mt][j][2 * half + 1];
          const float u0 = acc[mt][j + 2][2 * half], u1 = acc[mt][j + 2][2 * half + 1];
          *reinterpret_cast<__nv_bfloat162*>(orow + c) = __floats2bfloat162_rn(swiglu_f(g0, u0, limit), swiglu_f(g1, u1, limit));
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t c = int64_t(nb) * kBn + wn * 32 + j * 8 + 2 * t;
          if (c >= n) continue;
          *reinterpret_cast<__nv_bfloat162*>(orow + c) =
              __floats2bfloat162_rn(acc[mt][j][2 * half], acc[mt][j][2 * half + 1]);
        }
      }
    }
  }
}

template <bool kGateUp, bool kFp8>
void launch(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles, unsigned max_tiles,
            int64_t k, int64_t n, float limit, bf16* out) {
  constexpr size_t smem = kFp8 ? kSmemFp8 : kSmem;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(grouped_gemm_kernel<kGateUp, kFp8>), smem, "moe_grouped_gemm");
    return true;
  }();
  (void)kAttr;
  const unsigned col_blocks = unsigned(kGateUp ? (n + 63) / 64 : (n + kBn - 1) / kBn);
  launch_pdl(grouped_gemm_kernel<kGateUp, kFp8>, dim3(col_blocks, max_tiles), kThreads, smem, a, gather, w, tiles, k,
             n, limit, out);
}

}  // namespace

MoeTiling moe_tiling(int64_t pairs, int64_t experts) {
  const bool wgmma = pairs >= 32 * experts;
  return {wgmma ? 128 : 64, wgmma};
}

void moe_grouped_gemm(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                      const MoeTiling& tiling, unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up,
                      float limit, bf16* out) {
  if (tiling.wgmma) {
    moe_grouped_gemm_wgmma(a, gather, w, tiles, max_tiles, experts, k, n, gate_up, limit, out);
  } else if (w.scale) {
    gate_up ? launch<true, true>(a, gather, w, tiles, max_tiles, k, n, limit, out)
            : launch<false, true>(a, gather, w, tiles, max_tiles, k, n, limit, out);
  } else {
    gate_up ? launch<true, false>(a, gather, w, tiles, max_tiles, k, n, limit, out)
            : launch<false, false>(a, gather, w, tiles, max_tiles, k, n, limit, out);
  }
  check_launch(gate_up ? "moe_grouped_gemm_gate_up" : "moe_grouped_gemm_down");
}

}  // namespace strata::ops::cuda
