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
// FP8 experts (block-scaled F8_E4M3 codes, fp8_weights.cuh) multiply FP8 activations (W8A8, as
// vLLM and SGLang run these checkpoints on Hopper): the rows of A arrive quantised per row and
// per 128 columns (quantize_fp8_rows), and a stage holds 128 codes of K, the same 128 bytes a
// row as 64 bf16, so the ring, its swizzle and descriptors are the bf16 path's, the weights come
// by TMA as codes, and the MMAs run at FP8's rate (wgmma k32 over e4m3). Every 128 columns of K
// have their own scales (each A row's and each weight row's), so a stage's products cannot add up
// in the tensor cores: per half of the 256 weight rows a consumer multiplies the stage into a
// temporary m64n128 accumulator, waits for it and adds it into the running one times the row's
// scale and the column's (DeepGEMM's "promotion"; it also bounds the reduced precision of
// Hopper's FP8 accumulation to 128 products). The producer also copies each stage's 128 A-row
// scales and 256 weight-row scales into shared memory.
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

constexpr int kBn = 256, kThreads = 384, kProducerThreads = 128, kConsumerWarps = 8;
// K a stage: 64 bf16 or 128 FP8 codes, one 128-byte swizzle row either way.
template <bool kFp8>
constexpr int kBk = kFp8 ? 128 : 64;
// Registers a thread: 168 at launch (65536 / 384, rounded down to 8; ptxas must report 168), then
// the producer gives some up and the consumers take them. setmaxnreg.inc waits until the block's
// own pool has the registers, so the moves must balance exactly or the consumers hang. W8A8's
// consumers hold the temporary accumulator beside the running one.
constexpr int kLaunchRegs = 168, kProducerRegs = 56, kConsumerRegs = 224;
static_assert(kProducerThreads * kProducerRegs + (kThreads - kProducerThreads) * kConsumerRegs <= kThreads * kLaunchRegs);
constexpr int kBm = 128;                   // rows a tile
constexpr int kRowBytes = 128;             // one swizzle row
constexpr int kBStage = kBn * kRowBytes;   // 32 KiB
constexpr int kAStage = kBm * kRowBytes;   // 16 KiB
// W8A8: a stage's scales, its 128 A rows' and 256 weight rows' (F32).
template <bool kFp8>
constexpr int kScaleStage = kFp8 ? (kBm + kBn) * 4 : 0;
// The output tile is staged in shared memory and stored by bulk copies, one a row, while the
// consumers go on with the next work item. That leaves room for 3 operand stages (144 KiB).
constexpr int kStages = 3;
template <bool kGateUp>
constexpr int kOutCols = kGateUp ? 128 : kBn;  // output columns a work item
// A staged output row: its columns and 16 bytes of padding, so that the 8 rows of a quad-pair
// store land in distinct banks (the row stride is 4 words mod 32).
template <bool kGateUp>
constexpr int kOutRow = kOutCols<kGateUp> * 2 + 16;
template <bool kGateUp>
constexpr int kOutBytes = kBm * kOutRow<kGateUp>;
// + barriers, alignment
template <bool kGateUp, bool kFp8>
constexpr size_t kSmemBytes =
    size_t(kStages) * (kAStage + kBStage + kScaleStage<kFp8>) + kOutBytes<kGateUp> + 8 * 2 * kStages + 1024;
static_assert(kSmemBytes<true, true> <= 227 * 1024 && kSmemBytes<false, true> <= 227 * 1024 &&
                  kSmemBytes<true, false> <= 227 * 1024 && kSmemBytes<false, false> <= 227 * 1024,
              "shared memory of a variant");
static_assert(kOutBytes<true> % 1024 == 0 && kOutBytes<false> % 1024 == 0);

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

// The TMA boxes of column block nb's weights at column k0 (elements: bf16 or FP8 codes) of expert
// e into dst, 128-byte swizzled rows, completing on bar.
template <bool kGateUp>
__device__ __forceinline__ void load_weights(uint32_t dst, const CUtensorMap* wmap, uint32_t bar, int k0, int nb,
                                             int64_t n, int e) {
  mbar_arrive_expect_tx(bar, kBStage);
  if (kGateUp) {
    // Rows 128 h + (0..63) of the stage are the gate rows of act columns 128 nb + 64 h + (0..63),
    // rows 128 h + 64 + (0..63) the matching up rows (at n + ...).
#pragma unroll
    for (int q = 0; q < 4; ++q) tma_load_3d(dst + q * 64 * kRowBytes, wmap, bar, k0, weight_row<true>(q * 64, nb, n), e);
  } else {
    tma_load_3d(dst, wmap, bar, k0, nb * kBn, e);
  }
}

__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 lds_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// The rows of A: bf16 values, or (W8A8) F8_E4M3 codes with `groups` F32 scales a row, one per
// kFp8Group columns.
struct ARows {
  const void* a;
  const float* scale;
  int64_t groups;
};

// gate_up: out[p, c] = silu(g) * u over act columns c of column block nb (128 of them), n =
// intermediate; down: out[p, c] over output columns c of column block nb (256 of them), n = hidden.
template <bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) wgmma_grouped_kernel(const ARows arows, const int32_t* gather,
                                                                    const __grid_constant__ CUtensorMap wmap,
                                                                    const float* __restrict__ wscale,
                                                                    int64_t groups, MoeTiles tiles,
                                                                    int64_t k, int64_t n, int col_blocks,
                                                                    float limit, bf16* out) {
  constexpr int kK = kBk<kFp8>, kElem = kFp8 ? 1 : 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t as = base, bs = base + kStages * kAStage, obuf = bs + kStages * kBStage;
  const uint32_t scales = obuf + kOutBytes<kGateUp>;  // W8A8: [kStages][A rows 128, weight rows 256]
  const uint32_t full = scales + kStages * kScaleStage<kFp8>, empty = full + 8 * kStages;
  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Every producer thread's cp.async arrival and thread 0's expect_tx of the weights.
      mbar_init(full + 8 * s, kProducerThreads + 1);
      mbar_init(empty + 8 * s, kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();
  pdl_begin();
  const int items = *tiles.count * col_blocks;
  const int kb_count = int((k + kK - 1) / kK);
  Ring ring;

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    // Thread tid moves chunk c = tid % 8 (16 bytes) of A rows tid / 8 + 16 i a stage; chunks past
    // K and rows past the tile are zero-filled. Thread 0 also brings the stage's 256 weight rows by
    // TMA (weight rows past n and columns past K read as zeros). W8A8: thread tid also copies the
    // scale of A row tid and of weight rows tid and tid + 128 (rows past n: the last row's; their
    // outputs are not stored).
    constexpr int kAv = kBm / 16;
    const int c = tid & 7, r0 = tid >> 3;
    const auto* a = static_cast<const uint8_t*>(arows.a);
    const int64_t wrows = kGateUp ? 2 * n : n;
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
      int32_t srow = -1;
      const float* wsrow[2] = {};
      if constexpr (kFp8) {
        srow = tid < rows ? (kGateUp ? gather[row0 + tid] : row0 + tid) : -1;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int64_t wr = std::min<int64_t>(weight_row<kGateUp>(tid + 128 * i, nb, n), wrows - 1);
          wsrow[i] = wscale + (int64_t(e) * wrows + wr) * groups;
        }
      }
      for (int kb = 0; kb < kb_count; ++kb) {
        const int k0 = kb * kK;
        mbar_wait(empty + 8 * ring.stage, ring.phase ^ 1);
        const uint32_t sa = as + ring.stage * kAStage, sb = bs + ring.stage * kBStage, bar = full + 8 * ring.stage;
        if (tid == 0) load_weights<kGateUp>(sb, &wmap, bar, k0, nb, n, e);
        const bool kin = k0 + c * (16 / kElem) < k;
#pragma unroll
        for (int i = 0; i < kAv; ++i) {
          const bool ok = kin && arow[i] >= 0;
          cp_async16(sa + swizzle128(r0 + 16 * i, c), a + (ok ? (int64_t(arow[i]) * k + k0 + c * (16 / kElem)) * kElem : 0),
                     ok);
        }
        if constexpr (kFp8) {
          const uint32_t ss = scales + ring.stage * kScaleStage<kFp8>;
          cp_async4(ss + 4 * tid, arows.scale + (srow >= 0 ? int64_t(srow) * arows.groups + kb : 0), srow >= 0);
          cp_async4(ss + 4 * (kBm + tid), wsrow[0] + kb);
          cp_async4(ss + 4 * (kBm + 128 + tid), wsrow[1] + kb);
        }
        cp_async_mbar_arrive(bar);
        ring.advance<kStages>();
      }
    }
    cp_wait<0>();
    return;
  }

  setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1, wtid = tid & 127;
  const int g = lane >> 2, t = lane & 3, lr0 = (wtid >> 5) * 16 + g;  // lr: row of the consumer's 64
  // The consumer's 64 rows by the B tile's 256 rows (gate_up: two halves h of 64 gate and 64 up
  // rows), one m64n256 accumulator; W8A8 adds a stage's products of one half in `part`.
  float acc[128];
  float part[kFp8 ? 64 : 1] = {};
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
        ring.advance<kStages>();
      }
      continue;
    }
    int prev = -1;
    for (int kb = 0; kb < kb_count; ++kb) {
      mbar_wait(full + 8 * ring.stage, ring.phase);
      fence_proxy_async();  // the producer's cp.async writes, seen through the barrier, to wgmma
      const uint32_t sa = as + ring.stage * kAStage + cw * 64 * kRowBytes;
      const uint32_t sb = bs + ring.stage * kBStage;
      if constexpr (kFp8) {
        // Half h: part = the stage's A rows times weight rows 128 h .. 128 h + 127 (4 k32 steps),
        // then acc += part x (A row's scale x weight row's scale). Value 4 j + q of part is row
        // g + 8 (q / 2) of the warp's 16, weight row 128 h + 8 j + 2 t + q % 2: acc's 64 h + 4 j + q.
        const uint32_t ss = scales + ring.stage * kScaleStage<kFp8>;
        const float sa0 = lds_f32(ss + 4 * (cw * 64 + lr0)), sa1 = lds_f32(ss + 4 * (cw * 64 + lr0 + 8));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wgmma_fence_operands(part);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            wgmma_m64n128k32_e4m3_ss(part, smem_desc(sa + kk * 32), smem_desc(sb + h * 128 * kRowBytes + kk * 32),
                                     kk > 0);
          }
          wgmma_commit();
          wgmma_wait<0>();
          wgmma_fence_operands(part);
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const float2 sw = lds_f32x2(ss + 4 * (kBm + 128 * h + 8 * j + 2 * t));
            float* d = acc + 64 * h + 4 * j;
            d[0] = fmaf(part[4 * j], sa0 * sw.x, d[0]);
            d[1] = fmaf(part[4 * j + 1], sa0 * sw.y, d[1]);
            d[2] = fmaf(part[4 * j + 2], sa1 * sw.x, d[2]);
            d[3] = fmaf(part[4 * j + 3], sa1 * sw.y, d[3]);
          }
        }
        // The stage (its scales too) is read.
        if (lane == 0) mbar_arrive(empty + 8 * ring.stage);
        ring.advance<kStages>();
        continue;
      }
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kK / 16; ++kk) {
        const uint64_t da = smem_desc(sa + kk * 32);
        wgmma_m64n256k16_ss(acc, da, smem_desc(sb + kk * 32));
      }
      wgmma_commit();
      // k-block kb - 1's MMAs are complete (this warp's view; every consumer warp arrives): its
      // stage is free.
      wgmma_wait<1>();
      if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
      prev = ring.stage;
      ring.advance<kStages>();
    }
    if constexpr (!kFp8) {
      wgmma_wait<0>();
      if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
      // The accumulators are read only after the wait (the compiler sees no dependence on it).
      wgmma_fence_operands(acc);
    }
    // The epilogue: value 4j + q of the accumulator, in warp w of the warpgroup, is row
    // 16 w + g + 8 (q / 2), B-tile row 8 j + 2 t + q % 2. The pair (q, q + 1) gives output columns
    // c, c + 1 of the work item's (gate_up: gate c with up c + 64 of half h, SiLU-mul).
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
void launch(const ARows& a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles, unsigned max_tiles,
            int64_t experts, int64_t k, int64_t n, float limit, bf16* out) {
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(wgmma_grouped_kernel<kGateUp, kFp8>), kSmemBytes<kGateUp, kFp8>,
                        "moe_grouped_gemm");
    return true;
  }();
  (void)kAttr;
  const int col_blocks = int(kGateUp ? (n + 127) / 128 : (n + kBn - 1) / kBn);
  const unsigned grid = unsigned(std::min<int64_t>(int64_t(max_tiles) * col_blocks, sm_count()));
  // The weights [experts][rows][k] (rows 2n for gate_up, n for down) in boxes of one 128-byte row
  // of k by 64 (gate_up: a gate or up quarter) or 256 rows.
  const int64_t rows = kGateUp ? 2 * n : n, elem = kFp8 ? 1 : 2;
  const uint64_t dims[3] = {uint64_t(k), uint64_t(rows), uint64_t(experts)};
  const uint64_t strides[2] = {uint64_t(k * elem), uint64_t(rows * k * elem)};
  const uint32_t box[3] = {uint32_t(kBk<kFp8>), kGateUp ? 64u : uint32_t(kBn), 1};
  const CUtensorMap wmap =
      kFp8 ? tensor_map_u8(w.w, 3, dims, strides, box, true) : tensor_map_bf16(w.w, 3, dims, strides, box, true);
  launch_pdl(wgmma_grouped_kernel<kGateUp, kFp8>, grid, kThreads, kSmemBytes<kGateUp, kFp8>, a, gather, wmap, w.scale,
             w.groups, tiles, k, n, col_blocks, limit, out);
}

}  // namespace

void moe_grouped_gemm_wgmma(const bf16* a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                            unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up, float limit,
                            bf16* out) {
  // The gathered rows of A are read, and the staged rows of out written, in 16-byte chunks.
  STRATA_CHECK(k % 8 == 0 && n % 8 == 0, "moe_grouped_gemm: K ", k, " and N ", n, " must be multiples of 8");
  STRATA_CHECK(!w.scale, "moe_grouped_gemm: FP8 experts on the wgmma tiles take FP8 rows of A (moe_grouped_gemm_w8a8)");
  const ARows rows{a, nullptr, 0};
  gate_up ? launch<true, false>(rows, gather, w, tiles, max_tiles, experts, k, n, limit, out)
          : launch<false, false>(rows, gather, w, tiles, max_tiles, experts, k, n, limit, out);
}

void moe_grouped_gemm_w8a8(const Fp8Rows& a, const int32_t* gather, const ExpertMatrix& w, const MoeTiles& tiles,
                           unsigned max_tiles, int64_t experts, int64_t k, int64_t n, bool gate_up, float limit,
                           bf16* out) {
  const int64_t groups = (k + kFp8Group - 1) / kFp8Group;
  STRATA_CHECK(k % 16 == 0 && n % 8 == 0, "moe_grouped_gemm_w8a8: K ", k, " must be a multiple of 16 and N ", n,
               " of 8");
  STRATA_CHECK(w.scale && w.groups == groups && a.groups == groups, "moe_grouped_gemm_w8a8: FP8 experts of K ", k,
               " with ", w.groups, " scales a row, and rows of A with ", a.groups, " (", groups, " expected)");
  const ARows rows{a.codes, a.scale, a.groups};
  gate_up ? launch<true, true>(rows, gather, w, tiles, max_tiles, experts, k, n, limit, out)
          : launch<false, true>(rows, gather, w, tiles, max_tiles, experts, k, n, limit, out);
  check_launch(gate_up ? "moe_grouped_gemm_w8a8_gate_up" : "moe_grouped_gemm_w8a8_down");
}

}  // namespace strata::ops::cuda
