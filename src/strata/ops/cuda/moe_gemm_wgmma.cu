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

namespace strata::ops::cuda {
namespace {

constexpr int kBn = 256, kBk = 64, kStages = 4, kThreads = 256;
constexpr int kRowBytes = kBk * 2;         // 128: one swizzle row
constexpr int kBStage = kBn * kRowBytes;   // 32 KiB
template <int BM>
constexpr int a_stage() { return BM * kRowBytes; }
template <int BM>
constexpr size_t smem_bytes() { return size_t(kStages) * (a_stage<BM>() + kBStage) + 1024; }  // + 1 KiB alignment


#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define STRATA_WGMMA 1
#endif

// The shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle: 8-row groups
// 1024 bytes apart (stride byte offset), the leading byte offset unused by this layout (1).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef STRATA_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef STRATA_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef STRATA_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// d[64 x 128] += a[64 x 16] b[128 x 16]^T, both K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b) {
#ifdef STRATA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

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
      for (int h = 0; h < kAcc; ++h) wgmma_m64n128k16(acc[h], da, smem_desc(sb + h * 128 * kRowBytes + kk * 32));
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
  for (int h = 0; h < kAcc; ++h) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(acc[h][i])::"memory");
  }
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
