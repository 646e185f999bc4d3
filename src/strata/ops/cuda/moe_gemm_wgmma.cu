// CUDA: the grouped expert GEMM on Hopper's warpgroup MMA (wgmma), for tiles of 64 or 128 rows
// (prefill). A block takes one tile of up to BM permuted rows of one expert and 256 weight rows,
// with two warpgroups: of 64 rows each for BM 128 (each over all 256 weight rows), or both over
// the 64 rows for BM 64 (each over 128 of the weight rows). K streams 64 at a time through a 4-stage ring that every thread
// fills with cp.async (the rows of A are gathered tokens, which a TMA tile load cannot gather),
// written in the 128-byte swizzled layout wgmma reads from shared memory: the 16-byte chunk c of
// row r sits at chunk c ^ (r % 8) of its 128-byte row. Each warpgroup issues wgmma m64n128k16
// twice a k-step (weight rows 0-127 and 128-255) with both operands from shared memory and fp32
// accumulators in registers, and keeps one k-block of them in flight while the next stage loads.
// Each accumulator covers 128 weight rows; for gate_up those are 64 gate rows and the matching
// 64 up rows (the block's 128 act columns in two halves), so a thread holds each gate value beside
// its up value and SiLU-mul is the epilogue.
#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/moe_gemm.cuh"
#include "strata/ops/cuda/wgmma.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kBn = 256, kBk = 64, kStages = 4, kThreads = 256;
constexpr int kRowBytes = kBk * 2;         // 128: one swizzle row
constexpr int kBStage = kBn * kRowBytes;   // 32 KiB
template <int BM>
constexpr int a_stage() { return BM * kRowBytes; }
template <int BM>
constexpr size_t smem_bytes() { return size_t(kStages) * (a_stage<BM>() + kBStage) + 1024; }  // + 1 KiB alignment


// gate_up: out[p, c] = silu(g) * u over act columns c of block x (128 of them), n = intermediate;
// down: out[p, c] over output columns c of block x (256 of them), n = hidden.
template <int BM, bool kGateUp>
__global__ void __launch_bounds__(kThreads, 1) wgmma_grouped_kernel(const bf16* __restrict__ a,
                                                                    const int32_t* gather,
                                                                    const bf16* __restrict__ w, MoeTiles tiles,
                                                                    int64_t k, int64_t n, bf16* out) {
  pdl_begin();
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023) & ~1023u;
  constexpr int kAStage = a_stage<BM>(), kAcc = BM == 128 ? 2 : 1;  // accumulators a warpgroup
  const uint32_t as = base, bs = base + kStages * kAStage;
  const int tile = blockIdx.y;
  if (tile >= *tiles.count) return;
  const int64_t e = tiles.expert[tile];
  const int row0 = tiles.row0[tile], rows = tiles.rows[tile];
  const int nb = blockIdx.x, tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wtid = tid & 127;
  const bf16* we = w + e * (kGateUp ? 2 * n : n) * k;

  // Each thread moves BM / 32 16-byte chunks of A and 8 of B a stage (8 chunks a row); chunks
  // past K (a K of 32 mod 64), rows past the tile and weight rows past n are zero-filled.
  constexpr int kAv = BM * 8 / kThreads, kBv = kBn * 8 / kThreads;
  const bf16* a_src[kAv];
  const bf16* b_src[kBv];
  uint32_t a_dst[kAv], b_dst[kBv];
  uint32_t a_ok = 0, b_ok = 0;
  const int c = tid & 7;  // every vector of this thread has the same chunk
#pragma unroll
  for (int i = 0; i < kAv; ++i) {
    const int r = (tid + i * kThreads) >> 3;
    const bool ok = r < rows;
    a_ok |= uint32_t(ok) << i;
    const int64_t arow = ok ? (kGateUp ? gather[row0 + r] : row0 + r) : 0;
    a_src[i] = a + arow * k + c * 8;
    a_dst[i] = uint32_t(r * kRowBytes + ((c ^ (r & 7)) << 4));
  }
#pragma unroll
  for (int i = 0; i < kBv; ++i) {
    const int r = (tid + i * kThreads) >> 3;
    // gate_up: rows 128 h + (0..63) are gate rows of act columns 128 nb + 64 h + (0..63), rows
    // 128 h + 64 + (0..63) the matching up rows (at n + ...).
    const int64_t col = kGateUp ? int64_t(nb) * 128 + (r >> 7) * 64 + (r & 63) : int64_t(nb) * kBn + r;
    const bool ok = col < n;
    b_ok |= uint32_t(ok) << i;
    const int64_t wrow = !ok ? 0 : kGateUp && (r & 64) ? n + col : col;
    b_src[i] = we + wrow * k + c * 8;
    b_dst[i] = uint32_t(r * kRowBytes + ((c ^ (r & 7)) << 4));
  }
  auto load = [&](int stage, int64_t k0) {
    const bool kin = k0 + c * 8 < k;
    const uint32_t sa = as + stage * kAStage, sb = bs + stage * kBStage;
#pragma unroll
    for (int i = 0; i < kAv; ++i) cp_async16(sa + a_dst[i], a_src[i] + k0, kin && ((a_ok >> i) & 1));
#pragma unroll
    for (int i = 0; i < kBv; ++i) cp_async16(sb + b_dst[i], b_src[i] + k0, kin && ((b_ok >> i) & 1));
  };

  float acc[kAcc][64];
#pragma unroll
  for (int h = 0; h < kAcc; ++h) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.f;
  }
  const int kb_count = int((k + kBk - 1) / kBk);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kb_count) load(s, int64_t(s) * kBk);
    cp_commit();
  }
  for (int kb = 0; kb < kb_count; ++kb) {
    // This k-block's chunks have landed (each thread its own), are visible to the async proxy
    // wgmma reads through, and every thread's are in.
    cp_wait<kStages - 2>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int stage = kb % kStages;
    const uint32_t sa = as + stage * kAStage + (BM == 128 ? wg * 64 * kRowBytes : 0);
    const uint32_t sb = bs + stage * kBStage + (BM == 128 ? 0 : wg * 128 * kRowBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      const uint64_t da = smem_desc(sa + kk * 32);
#pragma unroll
      for (int h = 0; h < kAcc; ++h) wgmma_m64n128k16_ss(acc[h], da, smem_desc(sb + h * 128 * kRowBytes + kk * 32));
    }
    wgmma_commit();
    // The previous k-block's products are done, in both warpgroups: its stage takes the load of
    // k-block kb + kStages - 1.
    wgmma_wait<1>();
    __syncthreads();
    const int next = kb + kStages - 1;
    if (next < kb_count) load(next % kStages, int64_t(next) * kBk);
    cp_commit();
  }
  wgmma_wait<0>();
  cp_wait<0>();
  // The accumulators are read only after the wait (the compiler sees no dependence on it).
#pragma unroll
  for (int h = 0; h < kAcc; ++h) wgmma_fence_operands(acc[h]);
  // Epilogue from registers: value 4j + q of an accumulator, in warp w of the warpgroup, is row
  // 16 w + g + 8 (q / 2), weight row 8 j + 2 t + q % 2 of the accumulator's 128.
  const int g = lane >> 2, t = lane & 3, wr = (BM == 128 ? wg * 64 : 0) + (wtid >> 5) * 16 + g;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = wr + half * 8;
    if (r >= rows) continue;
    bf16* orow = out + int64_t(row0 + r) * n;
#pragma unroll
    for (int h = 0; h < kAcc; ++h) {
      const int bh = BM == 128 ? h : wg;  // which 128 of the block's weight rows
      const float* d = acc[h];
#pragma unroll
      for (int j = 0; j < (kGateUp ? 8 : 16); ++j) {
        const int q = 4 * j + 2 * half;
        if (kGateUp) {  // gate in n-tiles 0..7, up in 8..15
          const int64_t col = int64_t(nb) * 128 + bh * 64 + 8 * j + 2 * t;
          if (col < n) {
            *reinterpret_cast<__nv_bfloat162*>(orow + col) =
                __floats2bfloat162_rn(silu_f(d[q]) * d[q + 32], silu_f(d[q + 1]) * d[q + 33]);
          }
        } else {
          const int64_t col = int64_t(nb) * kBn + bh * 128 + 8 * j + 2 * t;
          if (col < n) *reinterpret_cast<__nv_bfloat162*>(orow + col) = __floats2bfloat162_rn(d[q], d[q + 1]);
        }
      }
    }
  }
}

template <int BM, bool kGateUp>
void launch(const bf16* a, const int32_t* gather, const bf16* w, const MoeTiles& tiles, unsigned max_tiles,
            int64_t k, int64_t n, bf16* out) {
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(wgmma_grouped_kernel<BM, kGateUp>), smem_bytes<BM>(),
                        "moe_grouped_gemm");
    return true;
  }();
  (void)kAttr;
  const unsigned col_blocks = unsigned(kGateUp ? (n + 127) / 128 : (n + kBn - 1) / kBn);
  launch_pdl(wgmma_grouped_kernel<BM, kGateUp>, dim3(col_blocks, max_tiles), kThreads, smem_bytes<BM>(), a, gather,
             w, tiles, k, n, out);
}

}  // namespace

void moe_grouped_gemm_wgmma(const bf16* a, const int32_t* gather, const bf16* w, const MoeTiles& tiles, int bm,
                            unsigned max_tiles, int64_t k, int64_t n, bool gate_up, bf16* out) {
  if (bm == 128) {
    gate_up ? launch<128, true>(a, gather, w, tiles, max_tiles, k, n, out)
            : launch<128, false>(a, gather, w, tiles, max_tiles, k, n, out);
  } else {
    gate_up ? launch<64, true>(a, gather, w, tiles, max_tiles, k, n, out)
            : launch<64, false>(a, gather, w, tiles, max_tiles, k, n, out);
  }
}

}  // namespace strata::ops::cuda
