// CUDA: the causal GQA prefill over the paged KV cache at head dims 128 and 256 on Hopper's
// warpgroup MMA (wgmma), FlashAttention-3 style, without warp specialization.
//
// A block of two warpgroups owns 128 query rows: 128 / hpb consecutive queries of each of hpb
// query heads that share one kv head (the tile list is made by launch_prefill_wgmma in
// attention.cu, longest first). Warpgroup wg owns rows 64 wg .. 64 wg + 63, all of one head. The keys stream
// through shared memory in tiles of 64, two stages of cp.async issued by all 256 threads (tile
// i + 1 loads while tile i is computed), gathered from the paged cache row by row with the page
// ids read one tile earlier still. Per tile a warpgroup computes
//   S[64 x 64] = Q K^T   by D / 16 wgmma m64n64k16, Q and K both K-major from shared memory;
//   the causal mask (only on tiles past the warpgroup's first query) and the online softmax on
//   S's fp32 accumulator in registers (exp2, the scale times log2 e folded into one FMA);
//   O[64 x D] += P V     by 4 x D / 64 wgmma m64n64k16, P from registers (S's accumulator
//   repacked to bf16, no shared memory) and V from shared memory read transposed (MN-major).
// Each wgmma group is waited for at once (no overlap of softmax and MMA inside a warpgroup; the
// two warpgroups overlap each other). The epilogue normalizes, applies the gate (null: none) and
// stores from registers. Tiles past a warpgroup's last query are skipped.
//
// The layout facts this relies on (checked against CUTLASS's GMMA traits and PTX ISA 9.7.15):
//  - Shared memory, 128-byte swizzle (wgmma.cuh): Q is [D / 64 column blocks][128 rows][128 B],
//    a K or V stage [D / 64 column blocks][64 keys][128 B]; chunk c (8 elements) of row r at byte
//    r * 128 + ((c ^ r % 8) * 16) of its column block, every block 1024-byte aligned.
//  - S = Q K^T: A (Q rows) and B (key rows) are K-major (the head dim is contiguous); the k16 step
//    kk reads column block kk / 4 at byte offset 32 (kk % 4); descriptors smem_desc (SBO 1024, LBO
//    unused, swizzle mode 1), transpose bits 0 and 0.
//  - O += P V: B is V [keys = k][head dim = n], n contiguous: MN-major, transpose bit 1, one
//    instruction per 64-wide column block (n = 64, one swizzle atom, so the block stride LBO is
//    never used), the k16 step kk at 16 kk rows (2048 bytes) into the block; smem_desc_mn64
//    (LBO = SBO = 1024).
//  - Accumulator of m64nN (S's 32 floats, each of O's column blocks' 32): thread lane of warp w
//    in the warpgroup holds d[4 j + q] = row 16 w + lane / 4 + 8 (q / 2), column 8 j +
//    2 (lane % 4) + q % 2.
//  - Register A of k16 (4 x bf16x2 a thread): a0 = (row g, k 2t, 2t + 1), a1 = (row g + 8, same
//    k), a2 = (row g, k 2t + 8, +9), a3 = (row g + 8, same), g = lane / 4, t = lane % 4, rows of
//    warp w offset by 16 w: the mma.sync m16n8k16 A fragment, so S's accumulators of keys 16 kk ..
//    16 kk + 15 (j = 2 kk, 2 kk + 1) are P's A fragment of k-step kk.
#include "strata/ops/cuda/attention_wgmma.h"

#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/wgmma.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kRows = kWgmmaPrefillRows, kKeys = 64, kThreads = 256;

template <int D>
struct WgmmaSmem {
  static constexpr int kBlocks = D / 64;                     // 64-wide column blocks of a row
  static constexpr uint32_t kQBlock = kRows * 128;           // one column block of Q
  static constexpr uint32_t kKvBlock = kKeys * 128;          // one column block of a K or V stage
  static constexpr uint32_t kStage = kBlocks * kKvBlock;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + kBlocks * kQBlock;     // [2 stages]
  static constexpr uint32_t kV = kK + 2 * kStage;            // [2 stages]
  static constexpr size_t kBytes = size_t(kV) + 2 * kStage + 1024;  // + 1 KiB alignment
};

// tiles: (sequence, first query) pairs, 128 / hpb queries each; block x serves tile
// x / (hq / hpb) for query heads hpb (x % (hq / hpb)) ... + hpb - 1. scale_log2 = scale * log2 e.
template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    attn_prefill_wgmma_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kc, const bf16* __restrict__ vc,
                              DeviceBatch b, const int32_t* tiles, int hq, int hkv, int bs, int hpb,
                              float scale_log2, const bf16* __restrict__ gate, bf16* __restrict__ out) {
  pdl_begin();
  using L = WgmmaSmem<D>;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t q_sm = base + L::kQ, k_sm = base + L::kK, v_sm = base + L::kV;

  const int groups = hq / hpb, qt = kRows / hpb;  // blocks per tile, queries per block
  const int tile = blockIdx.x / groups, h0 = (blockIdx.x % groups) * hpb;
  const int s = tiles[2 * tile], q0 = tiles[2 * tile + 1];
  const int kvh = h0 / (hq / hkv);
  const int qlen = b.q_len[s], ctx = b.ctx_len[s], qstart = b.q_start[s];
  const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
  const int kv_end = ctx + q0 + min(qt, qlen - q0);  // keys of the block's last query, plus one
  const int n_tiles = (kv_end + kKeys - 1) / kKeys;
  const int tid = threadIdx.x, lane = tid & 31;

  // Q rows (zeros past the sequence), then key/value tile 0.
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks, qi = q0 + r % qt, h = h0 + r / qt;
    const bool ok = qi < qlen;
    cp_async16(q_sm + (c / 8) * L::kQBlock + swizzle128(r, c % 8),
               q + (ok ? (int64_t(qstart + qi) * hq + h) * D + c * 8 : 0), ok);
  }
  // Page ids are read a tile ahead of the rows that need them: lane l of every warp looks up keys
  // kt + l and kt + l + 32 (pg, rem: page id and row in the page; -1 past kv_end) of the tile after
  // the one being loaded, and a tile's loads take each row's cache slot from its lane by a
  // shuffle, so no load waits on the block table.
  constexpr int kRowStep = kThreads / kChunks;  // rows the block loads side by side
  static_assert(kKeys == 64 && 32 % kRowStep == 0, "two keys a lane; passes split 32");
  int pg[2], rem[2];
  auto fetch_pages = [&](int kt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = kt + lane + 32 * e, pi = j / bs;
      rem[e] = j - pi * bs;
      pg[e] = j < kv_end ? __ldg(bt + pi) : -1;
    }
  };
  auto load_kv = [&](int stage) {
    int slot[2];  // cache rows of keys kt + lane, kt + lane + 32
#pragma unroll
    for (int e = 0; e < 2; ++e) slot[e] = pg[e] < 0 ? -1 : pg[e] * bs + rem[e];
    const int c = tid % kChunks, rb = tid / kChunks;
#pragma unroll
    for (int i = 0; i < kKeys / kRowStep; ++i) {
      const int r = rb + i * kRowStep;
      const int sl = __shfl_sync(0xffffffffu, slot[i * kRowStep / 32], r & 31);
      const int64_t off = sl >= 0 ? (int64_t(sl) * hkv + kvh) * D + c * 8 : 0;
      const uint32_t dst = stage * L::kStage + (c / 8) * L::kKvBlock + swizzle128(r, c % 8);
      cp_async16(k_sm + dst, kc + off, sl >= 0);
      cp_async16(v_sm + dst, vc + off, sl >= 0);
    }
    cp_commit();
  };
  fetch_pages(0);
  load_kv(0);
  fetch_pages(kKeys);

  // This warpgroup's 64 rows: head h, queries qw .. qw + 63 (positions ctx + qw ...). Lane l of
  // warp w holds rows 16 w + g and 16 w + g + 8 of the accumulators (g = l / 4), columns 2t, 2t + 1
  // (t = l % 4) of each 8-column block.
  const int wg = tid >> 7, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
  const int r0 = wg * 64, h = h0 + r0 / qt, qw = q0 + r0 % qt;
  const bool idle = qw >= qlen;  // every row of the warpgroup is past the sequence
  const int pos_lo = ctx + qw, pos_hi = pos_lo + 63, pos_g = pos_lo + 16 * w + g;
  const uint32_t q_wg = q_sm + r0 * 128;

  float o[D / 64][32];
#pragma unroll
  for (int cb = 0; cb < D / 64; ++cb) {
#pragma unroll
    for (int i = 0; i < 32; ++i) o[cb][i] = 0.f;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8: running max (of raw S), lane's partial sum

  for (int it = 0; it < n_tiles; ++it) {
    const int kt = it * kKeys, stage = it & 1;
    // Tile `it` landed for every thread and is visible to the async proxy wgmma reads through;
    // every warpgroup is done with tile it - 1's stage.
    cp_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (it + 1 < n_tiles) {
      load_kv(stage ^ 1);
      fetch_pages(kt + 2 * kKeys);
    }
    if (idle || kt > pos_hi) continue;  // every key of the tile is after this warpgroup's queries

    // S = Q K^T, 64 x 64.
    float sc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) sc[i] = 0.f;
    const uint32_t k_tile = k_sm + stage * L::kStage, v_tile = v_sm + stage * L::kStage;
    wgmma_fence_operands(sc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t at = (kk / 4) * L::kQBlock + (kk % 4) * 32, bt_off = (kk / 4) * L::kKvBlock + (kk % 4) * 32;
      wgmma_m64n64k16_ss(sc, smem_desc(q_wg + at), smem_desc(k_tile + bt_off));
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);

    // Causal mask, only where the tile reaches past the warpgroup's first query.
    if (kt + kKeys - 1 > pos_lo) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kt + 8 * j + 2 * t + (e & 1) > pos_g + (e >> 1) * 8) sc[4 * j + e] = -INFINITY;
        }
      }
    }
    // Online softmax: the new row maxima over the quad's lanes, the old sums and O rescaled
    // (skipped while no row's maximum of the warp grew: the factors are then exactly 1).
    float corr[2];
    bool grew = false;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = m[rr];
#pragma unroll
      for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * rr], sc[4 * j + 2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base_l2 = mx == -INFINITY ? 0.f : mx * scale_log2;  // a row with no key yet stays at 0
      corr[rr] = fast_exp2(m[rr] * scale_log2 - base_l2);
      grew |= mx != m[rr];
      m[rr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sc[4 * j + 2 * rr] = fast_exp2(fmaf(sc[4 * j + 2 * rr], scale_log2, -base_l2));
        sc[4 * j + 2 * rr + 1] = fast_exp2(fmaf(sc[4 * j + 2 * rr + 1], scale_log2, -base_l2));
        sum += sc[4 * j + 2 * rr] + sc[4 * j + 2 * rr + 1];
      }
      l[rr] = l[rr] * corr[rr] + sum;
    }
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          o[cb][4 * j] *= corr[0], o[cb][4 * j + 1] *= corr[0];
          o[cb][4 * j + 2] *= corr[1], o[cb][4 * j + 3] *= corr[1];
        }
      }
    }
    // O += P V: S's accumulators 8 kk .. 8 kk + 7 are P's A fragment for keys 16 kk .. 16 kk + 15.
    uint32_t p[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) p[kk][i] = pack_bf16x2(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
      wgmma_fence_operands(p[kk]);
    }
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) wgmma_fence_operands(o[cb]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
        wgmma_m64n64k16_rs_tb(o[cb], p[kk], smem_desc_mn64(v_tile + cb * L::kKvBlock + kk * 16 * 128));
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) wgmma_fence_operands(o[cb]);
  }
  cp_wait<0>();

  // Epilogue: O / l (the sums completed over the quad), times sigmoid(gate), from registers.
  if (idle) return;
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    inv[rr] = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int qi = qw + 16 * w + g + 8 * rr;
    if (qi >= qlen) continue;
    const int64_t row = (int64_t(qstart + qi) * hq + h) * D;
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t off = row + cb * 64 + 8 * j + 2 * t;
        float v0 = o[cb][4 * j + 2 * rr] * inv[rr], v1 = o[cb][4 * j + 2 * rr + 1] * inv[rr];
        if (gate) {
          const __nv_bfloat162 gv = *reinterpret_cast<const __nv_bfloat162*>(gate + off);
          v0 *= sigmoid_f(__low2float(gv));
          v1 *= sigmoid_f(__high2float(gv));
        }
        *reinterpret_cast<uint32_t*>(out + off) = pack_bf16x2(v0, v1);
      }
    }
  }
}

template <int D>
void launch(const bf16* q, const bf16* kc, const bf16* vc, const DeviceBatch& db, const int32_t* tiles,
            unsigned n_tiles, int hq, int hkv, int bs, int hpb, float scale_log2, const bf16* gate, bf16* out) {
  using L = WgmmaSmem<D>;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(attn_prefill_wgmma_kernel<D>), L::kBytes, "paged_attention");
    return true;
  }();
  (void)kAttr;
  const unsigned grid = n_tiles * unsigned(hq / hpb);
  launch_pdl(attn_prefill_wgmma_kernel<D>, grid, kThreads, L::kBytes, q, kc, vc, db, tiles, hq, hkv, bs, hpb,
             scale_log2, gate, out);
  check_launch("attn_prefill_wgmma");
}

}  // namespace

void attn_prefill_wgmma(int d, const bf16* q, const bf16* k_cache, const bf16* v_cache, const DeviceBatch& db,
                        const int32_t* tiles, unsigned n_tiles, int hq, int hkv, int bs, int hpb, float scale_log2,
                        const bf16* gate, bf16* out) {
  if (d == 256) {
    launch<256>(q, k_cache, v_cache, db, tiles, n_tiles, hq, hkv, bs, hpb, scale_log2, gate, out);
  } else {
    STRATA_CHECK(d == 128, "attn_prefill_wgmma: head dim ", d, " (128 or 256)");
    launch<128>(q, k_cache, v_cache, db, tiles, n_tiles, hq, hkv, bs, hpb, scale_log2, gate, out);
  }
}

}  // namespace strata::ops::cuda
