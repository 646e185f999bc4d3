// CUDA: the grouped expert GEMM on Hopper's warpgroup MMA (wgmma), for tiles of 128 rows
// (prefill), warp-specialized and persistent.
//
// A work item is one tile of up to 128 permuted rows of one expert times 256 weight rows (a
// column block); the blocks, one an SM, take work items w = blockIdx.x, + gridDim.x, ... of
// count x column blocks (the tile count is read on the device), column block fastest, so the
// blocks that share a tile's rows (and an expert's weights) run together. 128-row tiles even when
// the average expert has far fewer rows (64 at 2048 tokens, top 8 of 256): with 64-row tiles an
// expert of 65-128 rows read its weights twice, the second time mostly from DRAM again, and the
// 2048-token MoE took 590 us a layer against 535 now. A consumer whose 64 rows are all past the
// tile's issues no MMAs.
//
// Three warpgroups. Warpgroup 0 produces: its 128 threads fill a ring of kStages stages with
// cp.async (the rows of A are gathered tokens, which a TMA tile load cannot gather), K 64 at a
// time, written in the 128-byte swizzled layout wgmma reads (the 16-byte chunk c of row r at
// chunk c ^ (r % 8) of its 128-byte row). Warpgroups 1 and 2 consume, each 64 rows over all 256
// weight rows (one m64n256 accumulator: two m64n128 ones read A from shared memory twice). The
// producer gives up registers for the consumers (setmaxnreg).
//
// The ring (mbarrier.cuh): full[s] counts the 128 producer threads, each arriving once its
// copies of the stage have landed (cp.async.mbarrier.arrive.noinc); empty[s] counts the 8
// consumer warps, each arriving once the MMAs that read the stage are complete. Both sides walk
// the same sequence of (work item, k-block), so a stage's n-th use has parity n % 2 on both.
// A consumer keeps one k-block of MMAs in flight: it waits for k-block kb - 1's after issuing
// kb's, then releases kb - 1's stage. Its epilogue (SiLU-mul for gate_up) runs while the producer
// already loads the next work item's stages. It writes its 64 rows into a staging buffer in
// shared memory (rows padded by 16 bytes: conflict-free) and 64 of its threads each store one row
// by a bulk copy (cp.async.bulk), which goes on while the consumer starts the next work item's
// MMAs; the buffer is rewritten once those copies have read it. Stored from registers, 4 bytes a
// thread scattered over 8 rows, the epilogue held the tensor cores idle: at 8,192 tokens (H100)
// the MoE took 1,503 us a layer against 1,283 with bf16 experts, and 1,930 against 1,814 with FP8
// ones (down's K of 512 is only 8 k-blocks a work item). The buffer costs an operand stage.
//
// FP8 experts (block-scaled F8_E4M3 codes, fp8_weights.cuh) are read as codes: the weights' TMA
// boxes land in a two-slot staging ring of bytes (64 codes a row, unswizzled), and the producer's
// threads turn each into the stage's bf16 tile, bf16(code * scale) in the 128-byte swizzle, the
// weights the dequantised bf16 experts hold; they store it, fence it for the async proxy and
// arrive on full[s] (then counting 256: every producer thread's cp.async arrival and its
// conversion's). A staging slot is refilled, two steps ahead, once the producer's threads have
// all read it (a named barrier of the producer warpgroup). So FP8 experts move half the bytes of
// bf16 ones and need no dequantised copy, and the products equal the bf16 path's on the
// dequantised weights bit for bit.
//
// Each half of the accumulator covers 128 weight rows; for gate_up those are 64 gate rows and the
// matching 64 up rows (the block's 128 act columns in two halves), so a thread holds each gate
// value beside its up value and SiLU-mul is the epilogue.
#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/mbarrier.cuh"
#include "strata/ops/cuda/moe_gemm.cuh"
#include "strata/ops/cuda/runtime.h"
#include "strata/ops/cuda/tensor_map.h"
#include "strata/ops/cuda/wgmma.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kBn = 256, kBk = 64, kThreads = 384, kProducerThreads = 128, kConsumerWarps = 8;
// Registers a thread: 168 at launch (65536 / 384, rounded down to 8; ptxas must report 168), then
// the producer gives some up and the consumers take them. setmaxnreg.inc waits until the block's
// own pool has the registers, so the moves must balance exactly or the consumers hang.
// FP8 experts: the producer converts the weights too, its eight scale loads in flight together
// (ptxas spilled below 80), and the consumers keep 208 (no spills).
constexpr int kLaunchRegs = 168;
template <bool kFp8>
constexpr int kProducerRegs = kFp8 ? 80 : 56;
template <bool kFp8>
constexpr int kConsumerRegs = kFp8 ? 208 : 224;
static_assert(kProducerThreads * kProducerRegs<false> + (kThreads - kProducerThreads) * kConsumerRegs<false> <=
              kThreads * kLaunchRegs);
static_assert(kProducerThreads * kProducerRegs<true> + (kThreads - kProducerThreads) * kConsumerRegs<true> <=
              kThreads * kLaunchRegs);
constexpr int kBm = 128;                   // rows a tile
constexpr int kRowBytes = kBk * 2;         // 128: one swizzle row
constexpr int kBStage = kBn * kRowBytes;   // 32 KiB
constexpr int kAStage = kBm * kRowBytes;   // 16 KiB
// The output tile is staged in shared memory and stored by bulk copies, one a row, while the
// consumers go on with the next work item. That leaves room for 3 operand stages (144 KiB), and
// 2 for FP8 experts' down projection beside its code slots and larger output tile.
template <bool kGateUp, bool kFp8>
constexpr int kStages = kFp8 && !kGateUp ? 2 : 3;
template <bool kGateUp>
constexpr int kOutCols = kGateUp ? 128 : kBn;  // output columns a work item
// A staged output row: its columns and 16 bytes of padding, so that the 8 rows of a quad-pair
// store land in distinct banks (the row stride is 4 words mod 32).
template <bool kGateUp>
constexpr int kOutRow = kOutCols<kGateUp> * 2 + 16;
template <bool kGateUp, bool kFp8>
constexpr int kOutBytes = kBm * kOutRow<kGateUp>;
constexpr int kCodeStage = kBn * kBk;      // 16 KiB: a stage's weights as FP8 codes
constexpr int kCodeSlots = 2;              // the staging ring of codes (FP8 experts)
// + barriers, alignment
template <bool kGateUp, bool kFp8>
constexpr size_t kSmemBytes = size_t(kStages<kGateUp, kFp8>) * (kAStage + kBStage) + kOutBytes<kGateUp, kFp8> +
                              (kFp8 ? kCodeSlots * kCodeStage : 0) + 8 * (2 * kStages<kGateUp, kFp8> + kCodeSlots) +
                              1024;
static_assert(kSmemBytes<true, true> <= 227 * 1024 && kSmemBytes<false, true> <= 227 * 1024 &&
                  kSmemBytes<true, false> <= 227 * 1024 && kSmemBytes<false, false> <= 227 * 1024,
              "shared memory of a variant");
static_assert(kOutBytes<true, false> % 1024 == 0 && kOutBytes<false, false> % 1024 == 0);  // codes stay aligned

// The ring position: stage index and the parity of its current use.
struct Ring {
  int stage = 0;
  uint32_t phase = 0;
  template <int S>
  __device__ void advance() {
    if (++stage == S) stage = 0, phase ^= 1;
  }
};

// The weight row (of the expert's 2n gate_up rows or n down rows) that row r of column block nb's
// B tile holds (its TMA boxes: gate_up's four quarters, down's one box).
template <bool kGateUp>
__device__ __forceinline__ int weight_row(int r, int nb, int64_t n) {
  if (kGateUp) {
    const int q = r >> 6;
    return (q & 1) * int(n) + nb * 128 + (q >> 1) * 64 + (r & 63);
  }
  return nb * kBn + r;
}

// The TMA boxes of column block nb's weights at k-block k0 of expert e into dst (bf16 tiles in
// the 128-byte swizzle, or FP8 codes unswizzled), completing on bar.
template <bool kGateUp, bool kFp8>
__device__ __forceinline__ void load_weights(uint32_t dst, const CUtensorMap* wmap, uint32_t bar, int k0, int nb,
                                             int64_t n, int e) {
  constexpr int kRowBytesB = kFp8 ? kBk : kRowBytes;
  mbar_arrive_expect_tx(bar, kFp8 ? kCodeStage : kBStage);
  if (kGateUp) {
    // Rows 128 h + (0..63) of the stage are the gate rows of act columns 128 nb + 64 h + (0..63),
    // rows 128 h + 64 + (0..63) the matching up rows (at n + ...).
#pragma unroll
    for (int q = 0; q < 4; ++q) tma_load_3d(dst + q * 64 * kRowBytesB, wmap, bar, k0, weight_row<true>(q * 64, nb, n), e);
  } else {
    tma_load_3d(dst, wmap, bar, k0, nb * kBn, e);
  }
}

// gate_up: out[p, c] = silu(g) * u over act columns c of column block nb (128 of them), n =
// intermediate; down: out[p, c] over output columns c of column block nb (256 of them), n = hidden.
template <bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) wgmma_grouped_kernel(const bf16* __restrict__ a,
                                                                    const int32_t* gather,
                                                                    const __grid_constant__ CUtensorMap wmap,
                                                                    const float* __restrict__ wscale,
                                                                    int64_t groups, MoeTiles tiles,
                                                                    int64_t k, int64_t n, int col_blocks,
                                                                    float limit, bf16* out) {
  constexpr int kS = kStages<kGateUp, kFp8>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t as = base, bs = base + kS * kAStage, obuf = bs + kS * kBStage;
  const uint32_t codes = obuf + kOutBytes<kGateUp, kFp8>;
  const uint32_t full = codes + (kFp8 ? kCodeSlots * kCodeStage : 0), empty = full + 8 * kS;
  const uint32_t landed = empty + 8 * kS;  // [kCodeSlots]: a staging slot's codes have landed
  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
  if (tid == 0) {
    for (int s = 0; s < kS; ++s) {
      // Every producer thread's cp.async arrival, and thread 0's expect_tx of the weights (bf16)
      // or every producer thread's conversion (FP8).
      mbar_init(full + 8 * s, kFp8 ? 2 * kProducerThreads : kProducerThreads + 1);
      mbar_init(empty + 8 * s, kConsumerWarps);
    }
    for (int s = 0; s < kCodeSlots; ++s) mbar_init(landed + 8 * s, 1);
    fence_barrier_init();
  }
  __syncthreads();
  pdl_begin();
  const int items = *tiles.count * col_blocks;
  const int kb_count = int((k + kBk - 1) / kBk);
  Ring ring;

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs<kFp8>>();
    // Thread tid moves chunk c = tid % 8 of A rows tid / 8 + 16 i a stage; chunks past K (a K of
    // 32 mod 64) and rows past the tile are zero-filled. Thread 0 also brings the stage's 256
    // weight rows by TMA (weight rows past n and columns past K read as zeros).
    constexpr int kAv = kBm / 16;
    const int c = tid & 7, r0 = tid >> 3;
    // FP8: step i (the i-th (work item, k-block) of this block) stages its codes in slot i % 2;
    // thread 0 loads step i + 2's once step i's are converted.
    auto load_codes = [&](int64_t step) {
      const int item = blockIdx.x + int(step / kb_count) * gridDim.x;
      if (item >= items) return;
      const int slot = int(step % kCodeSlots);
      load_weights<kGateUp, true>(codes + slot * kCodeStage, &wmap, landed + 8 * slot, int(step % kb_count) * kBk,
                                  item % col_blocks, n, tiles.expert[item / col_blocks]);
    };
    if (kFp8 && tid == 0) {
      for (int i = 0; i < kCodeSlots; ++i) load_codes(i);
    }
    int64_t step = 0;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int tile = item / col_blocks, nb = item % col_blocks;
      const int e = tiles.expert[tile];
      const int row0 = tiles.row0[tile], rows = tiles.rows[tile];
      int32_t arow[kAv];
#pragma unroll
      for (int i = 0; i < kAv; ++i) {
        const int r = r0 + 16 * i;
        arow[i] = r < rows ? (kGateUp ? gather[row0 + r] : row0 + r) : -1;
      }
      for (int kb = 0; kb < kb_count; ++kb, ++step) {
        const int k0 = kb * kBk;
        mbar_wait(empty + 8 * ring.stage, ring.phase ^ 1);
        const uint32_t sa = as + ring.stage * kAStage, sb = bs + ring.stage * kBStage, bar = full + 8 * ring.stage;
        if (!kFp8 && tid == 0) load_weights<kGateUp, false>(sb, &wmap, bar, k0, nb, n, e);
        const bool kin = k0 + c * 8 < k;
#pragma unroll
        for (int i = 0; i < kAv; ++i) {
          const bool ok = kin && arow[i] >= 0;
          cp_async16(sa + swizzle128(r0 + 16 * i, c), a + (ok ? int64_t(arow[i]) * k + k0 + c * 8 : 0), ok);
        }
        cp_async_mbar_arrive(bar);
        if constexpr (kFp8) {
          // Unit x = tid + 128 m (m < 8) of the stage's 1024: 16 codes u = x % 4 of row x / 4,
          // bf16 chunks 2u and 2u + 1 of that row. Eight neighbouring threads read two whole
          // 64-byte rows and write 16 distinct chunks of two swizzled rows: no bank conflicts.
          // The rows' scales load before the codes are waited for: one at a time, each waited for
          // where it was used, they held the conversion to a third of the bf16 kernel's rate.
          const int slot = int(step % kCodeSlots), u = tid & 3;
          const float* srow = wscale + (int64_t(e) * (kGateUp ? 2 * n : n)) * groups + k0 / kFp8Group;
          const int last_row = int(kGateUp ? 2 * n : n) - 1, g32 = int(groups);
          float scales[8];
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            const int r = (tid >> 2) + 32 * m;
            scales[m] = __ldg(srow + min(weight_row<kGateUp>(r, nb, n), last_row) * g32);
          }
          mbar_wait(landed + 8 * slot, uint32_t(step / kCodeSlots) & 1);
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            const int r = (tid >> 2) + 32 * m;
            const float scale = scales[m];
            uint4 v;
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "r"(codes + slot * kCodeStage + r * kBk + u * 16));
            uint4 lo, hi;
            dequant16_e4m3(v, scale, lo, hi);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(sb + swizzle128(r, 2 * u)), "r"(lo.x),
                         "r"(lo.y), "r"(lo.z), "r"(lo.w)
                         : "memory");
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(sb + swizzle128(r, 2 * u + 1)), "r"(hi.x),
                         "r"(hi.y), "r"(hi.z), "r"(hi.w)
                         : "memory");
          }
          fence_proxy_async();  // the tile, to the consumers' wgmma
          mbar_arrive(bar);
          named_sync(1, kProducerThreads);  // every thread has read the slot
          if (tid == 0) load_codes(step + kCodeSlots);
        }
        ring.advance<kS>();
      }
    }
    cp_wait<0>();
    return;
  }

  setmaxnreg_inc<kConsumerRegs<kFp8>>();
  const int cw = wg - 1, wtid = tid & 127;
  // The consumer's 64 rows by the B tile's 256 rows (gate_up: two halves h of 64 gate and 64 up
  // rows), one m64n256 accumulator.
  float acc[128];
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int tile = item / col_blocks, nb = item % col_blocks;
    const int row0 = tiles.row0[tile], rows = tiles.rows[tile];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    // A consumer whose 64 rows are all past the tile's (an expert's last rows) only walks the
    // ring: it releases each stage as it fills.
    if (cw * 64 >= rows) {
      for (int kb = 0; kb < kb_count; ++kb) {
        mbar_wait(full + 8 * ring.stage, ring.phase);
        if (lane == 0) mbar_arrive(empty + 8 * ring.stage);
        ring.advance<kS>();
      }
      continue;
    }
    int prev = -1;
    for (int kb = 0; kb < kb_count; ++kb) {
      mbar_wait(full + 8 * ring.stage, ring.phase);
      fence_proxy_async();  // the producer's cp.async writes, seen through the barrier, to wgmma
      const uint32_t sa = as + ring.stage * kAStage + cw * 64 * kRowBytes;
      const uint32_t sb = bs + ring.stage * kBStage;
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBk / 16; ++kk) {
        const uint64_t da = smem_desc(sa + kk * 32);
        wgmma_m64n256k16_ss(acc, da, smem_desc(sb + kk * 32));
      }
      wgmma_commit();
      // k-block kb - 1's MMAs are complete (this warp's view; every consumer warp arrives): its
      // stage is free.
      wgmma_wait<1>();
      if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
      prev = ring.stage;
      ring.advance<kS>();
    }
    wgmma_wait<0>();
    if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
    // The accumulators are read only after the wait (the compiler sees no dependence on it).
    wgmma_fence_operands(acc);
    // The epilogue: value 4j + q of the accumulator, in warp w of the warpgroup, is row
    // 16 w + g + 8 (q / 2), B-tile row 8 j + 2 t + q % 2. The pair (q, q + 1) gives output columns
    // c, c + 1 of the work item's (gate_up: gate c with up c + 64 of half h, SiLU-mul).
    const int g = lane >> 2, t = lane & 3, lr0 = (wtid >> 5) * 16 + g;  // lr: row of the consumer's 64
    auto value = [&](int h, int j, int half) {
      const float* d = acc + 64 * h;
      const int q = 4 * j + 2 * half;
      return kGateUp ? __floats2bfloat162_rn(swiglu_f(d[q], d[q + 32], limit), swiglu_f(d[q + 1], d[q + 33], limit))
                     : __floats2bfloat162_rn(d[q], d[q + 1]);
    };
    constexpr int kHalfCols = kGateUp ? 64 : 128, kJ = kGateUp ? 8 : 16;  // output columns an h, pairs a row
    // Into this consumer's 64 staged rows, once its previous work item's copies have read them;
    // then each of 64 threads copies one row out.
    const uint32_t ob = obuf + uint32_t(cw * 64 * kOutRow<kGateUp>);
    if (wtid < 64) bulk_wait_read<0>();
    named_sync(2 + cw, 128);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t orow = ob + uint32_t((lr0 + 8 * half) * kOutRow<kGateUp>);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
          const __nv_bfloat162 v = value(h, j, half);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(orow + 2 * (h * kHalfCols + 8 * j + 2 * t)),
                       "r"(*reinterpret_cast<const uint32_t*>(&v))
                       : "memory");
        }
      }
    }
    fence_proxy_async();  // the staged rows, to the bulk copies
    named_sync(2 + cw, 128);
    if (wtid < 64) {
      const int r = cw * 64 + wtid;
      if (r < rows) {
        const int64_t col0 = int64_t(nb) * kOutCols<kGateUp>;
        const int cols = int(std::min<int64_t>(kOutCols<kGateUp>, n - col0));
        bulk_store(out + int64_t(row0 + r) * n + col0, ob + uint32_t(wtid * kOutRow<kGateUp>), uint32_t(cols * 2));
      }
      bulk_commit();
    }
  }
  if (wtid < 64) bulk_wait<0>();  // the last copies are done before the block exits
}

template <bool kGateUp, bool kFp8>
void launch(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles, unsigned max_tiles,
            int64_t experts, int64_t k, int64_t n, float limit, bf16* out) {
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(wgmma_grouped_kernel<kGateUp, kFp8>), kSmemBytes<kGateUp, kFp8>,
                        "moe_grouped_gemm");
    return true;
  }();
  (void)kAttr;
  const int col_blocks = int(kGateUp ? (n + 127) / 128 : (n + kBn - 1) / kBn);
  const unsigned grid = unsigned(std::min<int64_t>(int64_t(max_tiles) * col_blocks, sm_count()));
  // The weights [experts][rows][k] (rows 2n for gate_up, n for down) in boxes of 64 k by 64
  // (gate_up: a gate or up quarter) or 256 rows.
  const int64_t rows = kGateUp ? 2 * n : n, elem = kFp8 ? 1 : 2;
  const uint64_t dims[3] = {uint64_t(k), uint64_t(rows), uint64_t(experts)};
  const uint64_t strides[2] = {uint64_t(k * elem), uint64_t(rows * k * elem)};
  const uint32_t box[3] = {kBk, kGateUp ? 64u : uint32_t(kBn), 1};
  const CUtensorMap wmap =
      kFp8 ? tensor_map_u8(w.w, 3, dims, strides, box) : tensor_map_bf16(w.w, 3, dims, strides, box, true);
  launch_pdl(wgmma_grouped_kernel<kGateUp, kFp8>, grid, kThreads, kSmemBytes<kGateUp, kFp8>, a, gather, wmap, w.scale,
             w.groups, tiles, k, n, col_blocks, limit, out);
}

}  // namespace

void moe_grouped_gemm_wgmma(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                            unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up, float limit,
                            bf16* out) {
  // The gathered rows of A are read, and the staged rows of out written, in 16-byte chunks.
  STRATA_CHECK(k % 8 == 0 && n % 8 == 0, "moe_grouped_gemm: K ", k, " and N ", n, " must be multiples of 8");
  if (w.scale) {
    STRATA_CHECK(w.groups == (k + kFp8Group - 1) / kFp8Group && k % 16 == 0,
                 "moe_grouped_gemm: FP8 experts of K ", k, " with ", w.groups, " scales a row");
    gate_up ? launch<true, true>(a, gather, w, tiles, max_tiles, experts, k, n, limit, out)
            : launch<false, true>(a, gather, w, tiles, max_tiles, experts, k, n, limit, out);
  } else {
    gate_up ? launch<true, false>(a, gather, w, tiles, max_tiles, experts, k, n, limit, out)
            : launch<false, false>(a, gather, w, tiles, max_tiles, experts, k, n, limit, out);
  }
}

}  // namespace strata::ops::cuda
