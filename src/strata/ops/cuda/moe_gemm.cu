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
#include "strata/ops/cuda/fp4_weights.cuh"
#include "strata/ops/cuda/fp8_weights.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/moe_gemm.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kBm = 64, kBn = 128, kBk = 64, kLd = kBk + 8, kStages = 3, kThreads = 256;


// Coded weights (FP8, FP4): the ring holds the codes and each stage is dequantised into one bf16
// tile. A row's kBk codes: FP8 kBk bytes padded by 16 (16-byte aligned rows, conflict-free 16-byte
// reads); FP4 kBk / 2 = 32 bytes unpadded: thread i's vector is then bytes [16 i, 16 i + 16) of
// the stage, so each quarter warp reads 128 contiguous bytes, every bank once.
template <WeightFormat F>
constexpr int code_row_bytes() {
  return is_fp4(F) ? kBk / 2 : kBk + 16;
}
template <WeightFormat F>
constexpr size_t smem_bytes() {
  if constexpr (F == WeightFormat::kBf16) {
    return size_t(kStages) * (kBm + kBn) * kLd * sizeof(bf16);
  } else {
    return size_t(kStages) * kBm * kLd * sizeof(bf16) + size_t(kStages) * kBn * code_row_bytes<F>() +
           size_t(kBn) * kLd * sizeof(bf16);
  }
}

// gate_up: out[p, c] = silu(g) * u over act columns c of block y (64 of them), n = intermediate;
// down: out[p, c] over output columns c of block y (128 of them), n = hidden.
// kFormat kFp8: w holds F8_E4M3 codes with per-row scales (fp8_weights.cuh); each stage's codes
// become bf16(code * scale), the bf16 weights that dequantising at load gives, before the MMAs.
// kNvfp4 / kMxfp4: w holds e2m1 codes with per-row scale bytes (fp4_weights.cuh); each stage's
// codes become bf16(c * s), exact, and NVFP4's row globals multiply the accumulators (gate and up
// before the SiLU-mul): with power-of-two globals that is the bf16 path on the dequantised weights
// bit for bit (every product and partial sum scaled by the same power of two).
template <bool kGateUp, WeightFormat kFormat>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_kernel(const bf16* __restrict__ a,
                                                                   const int32_t* gather, ExpertMatrix w,
                                                                   MoeTiles tiles, int64_t k, int64_t n, float limit,
                                                                   bf16* out) {
  constexpr int kWm = kBm / 2, kMt = kWm / 16;  // a warp's rows and 16-row tiles
  constexpr bool kFp8 = kFormat == WeightFormat::kFp8, kFp4 = is_fp4(kFormat);
  constexpr bool kCoded = kFp8 || kFp4;
  constexpr int kLdCodes = code_row_bytes<kFormat>();
  pdl_begin();
  extern __shared__ __align__(128) bf16 smem[];
  bf16* as = smem;                          // [stage][kBm][kLd]
  bf16* bs = smem + kStages * kBm * kLd;     // [stage][kBn][kLd] (kCoded: the bf16 tile [kBn][kLd])
  uint8_t* b8 = reinterpret_cast<uint8_t*>(bs + kBn * kLd);  // kCoded: [stage][kBn][kLdCodes] codes
  const int tile = blockIdx.y;
  if (tile >= *tiles.count) return;
  const int64_t e = tiles.expert[tile];
  const int row0 = tiles.row0[tile], rows = tiles.rows[tile];
  const int nb = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int64_t expert_rows = kGateUp ? 2 * n : n;

  // Each thread moves kBm / 32 16-byte vectors of A and four of B per stage (8 vectors a row;
  // FP8: two, 4 a row; FP4: one, 2 a row); vectors past K (a K of 32 mod 64) are zero-filled.
  constexpr int kVr = kBk / 8, kAv = kBm * kVr / kThreads;
  constexpr int kVrB = kFp8 ? kBk / 16 : kFp4 ? kBk / 32 : kVr, kBv = kBn * kVrB / kThreads, kElemsB = kBk / kVrB;
  const bf16* a_src[kAv];
  bool a_ok[kAv];
  const char* b_src[kBv];
  const float* b_scale[kBv];
  const uint8_t* b_scale4[kBv];  // FP4: the row's scale bytes
  bool b_ok[kBv];
#pragma unroll
  for (int i = 0; i < kAv; ++i) {
    const int v = tid + i * kThreads, r = v / kVr, c = v % kVr;
    a_ok[i] = r < rows;
    const int64_t arow = a_ok[i] ? (kGateUp ? gather[row0 + r] : row0 + r) : 0;
    a_src[i] = a + arow * k + c * 8;
  }
  // Bytes of n weights (n even for FP4: K and the vectors' columns are).
  auto weight_bytes = [](int64_t n) { return kFp4 ? n / 2 : kFp8 ? n : 2 * n; };
#pragma unroll
  for (int i = 0; i < kBv; ++i) {
    const int v = tid + i * kThreads, r = v / kVrB, c = v % kVrB;
    // gate_up: rows 0..63 gate rows 64 nb.., rows 64..127 the matching up rows (at n + ...).
    const int64_t col = kGateUp ? int64_t(nb) * 64 + (r & 63) : int64_t(nb) * kBn + r;
    b_ok[i] = col < n;
    const int64_t wrow = e * expert_rows + (!b_ok[i] ? 0 : kGateUp && r >= 64 ? n + col : col);
    b_src[i] = static_cast<const char*>(w.w) + weight_bytes(wrow * k + c * kElemsB);
    b_scale[i] = kFp8 && b_ok[i] ? w.scale + wrow * w.groups : nullptr;
    b_scale4[i] = kFp4 && b_ok[i] ? w.fp4_scale + wrow * w.groups : nullptr;
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
      void* dst = kCoded ? static_cast<void*>(b8 + (stage * kBn + r) * kLdCodes + c * 16)
                         : static_cast<void*>(bs + (stage * kBn + r) * kLd + c * 8);
      cp_async16(dst, b_src[i] + weight_bytes(k0), b_ok[i] && k0 + c * kElemsB < k);
    }
  };
  // kCoded: stage `stage` (K from k0) dequantised into the bf16 tile, each thread its own vectors.
  auto dequantise = [&](int stage, int64_t k0) {
#pragma unroll
    for (int i = 0; i < kBv; ++i) {
      const int v = tid + i * kThreads, r = v / kVrB, c = v % kVrB;
      const uint4 codes = *reinterpret_cast<const uint4*>(b8 + (stage * kBn + r) * kLdCodes + c * 16);
      if constexpr (kFp4) {
        // A zero-filled vector (past the row's end, or K's) reads no scales: its codes give 0.
        const int64_t kc = k0 + c * kElemsB;
        float s_lo = 0.f, s_hi = 0.f;
        if (b_scale4[i] && kc < k) fp4_scales32<kFormat>(b_scale4[i], kc, s_lo, s_hi);
        uint4 vals[4];
        dequant32_fp4(codes, s_lo, s_hi, vals);
#pragma unroll
        for (int q = 0; q < 4; ++q) *reinterpret_cast<uint4*>(bs + r * kLd + c * 32 + q * 8) = vals[q];
      } else {
        const float scale = b_scale[i] ? __ldg(b_scale[i] + k0 / kFp8Group) : 0.f;
        uint4 lo, hi;
        dequant16_e4m3(codes, scale, lo, hi);
        *reinterpret_cast<uint4*>(bs + r * kLd + c * 16) = lo;
        *reinterpret_cast<uint4*>(bs + r * kLd + c * 16 + 8) = hi;
      }
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
    if constexpr (kCoded) {
      dequantise(kb % kStages, int64_t(kb) * kBk);
      __syncthreads();  // the tile whole before any warp reads it (the next loop top's wait
                        // keeps it until every warp is done with it)
    }
    const bf16* sa = as + (kb % kStages) * kBm * kLd + (wm * kWm) * kLd;
    const bf16* sb = kCoded ? bs : bs + (kb % kStages) * kBn * kLd;
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
  if constexpr (kFormat == WeightFormat::kNvfp4) {
    // Accumulator tile j's columns 2t, 2t + 1 times their weight rows' globals (gate_up: tiles 0,
    // 1 gate rows, 2, 3 the matching up rows). Columns past n (even, n being a multiple of 32)
    // give 0 and are not stored.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = kGateUp ? int64_t(nb) * 64 + wn * 16 + (j & 1) * 8 + 2 * t : int64_t(nb) * kBn + wn * 32 + j * 8 + 2 * t;
      const int64_t row = e * expert_rows + (kGateUp && j >= 2 ? n : 0) + c;
      const float g0 = c < n ? __ldg(w.global + row) : 0.f, g1 = c < n ? __ldg(w.global + row + 1) : 0.f;
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        acc[mt][j][0] *= g0, acc[mt][j][1] *= g1, acc[mt][j][2] *= g0, acc[mt][j][3] *= g1;
      }
    }
  }
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

template <bool kGateUp, WeightFormat kFormat>
void launch(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles, unsigned max_tiles,
            int64_t k, int64_t n, float limit, bf16* out) {
  constexpr size_t smem = smem_bytes<kFormat>();
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(grouped_gemm_kernel<kGateUp, kFormat>), smem,
                        "moe_grouped_gemm");
    return true;
  }();
  (void)kAttr;
  const unsigned col_blocks = unsigned(kGateUp ? (n + 63) / 64 : (n + kBn - 1) / kBn);
  launch_pdl(grouped_gemm_kernel<kGateUp, kFormat>, dim3(col_blocks, max_tiles), kThreads, smem, a, gather, w, tiles, k,
             n, limit, out);
}

}  // namespace

MoeTiling moe_tiling(int64_t pairs, int64_t experts, WeightFormat format) {
  const bool wgmma = !is_fp4(format) && pairs >= 32 * experts;
  return {wgmma ? 128 : 64, wgmma};
}

void moe_grouped_gemm(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                      const MoeTiling& tiling, unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up,
                      float limit, bf16* out) {
  auto tiles_of = [&](auto format) {
    constexpr WeightFormat kFormat = decltype(format)::value;
    gate_up ? launch<true, kFormat>(a, gather, w, tiles, max_tiles, k, n, limit, out)
            : launch<false, kFormat>(a, gather, w, tiles, max_tiles, k, n, limit, out);
  };
  if (tiling.wgmma) {
    STRATA_CHECK(!is_fp4(w.format), "moe_grouped_gemm: FP4 experts go to the mma.sync tiles at every size");
    moe_grouped_gemm_wgmma(a, gather, w, tiles, max_tiles, experts, k, n, gate_up, limit, out);
  } else {
    visit_format(w.format, tiles_of);
  }
  check_launch(gate_up ? "moe_grouped_gemm_gate_up" : "moe_grouped_gemm_down");
}

}  // namespace strata::ops::cuda
