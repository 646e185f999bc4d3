// CUDA: the causal GQA prefill over the paged KV cache at head dims 128 and 256 on Hopper's
// warpgroup MMA (wgmma), FlashAttention-3 style: warp-specialized, with the softmax of one key
// tile overlapping the P V product of the one before.
//
// A block of three warpgroups owns 128 query rows: 128 / hpb consecutive queries of each of hpb
// query heads that share one kv head (the tile list is made by launch_prefill_wgmma in
// attention.cu, longest first). Consumer warpgroup wg (0, 1) owns rows 64 wg .. 64 wg + 63, all
// of one head; warpgroup 2 is the producer (setmaxnreg moves its registers to the consumers).
//
// Producer: the keys stream through two rings in shared memory, K and V, of tiles of kKeys = 64
// keys (K 2 stages and V 3 at head dim 256, 4 each at 128). The producer's warps 0-1 fill the K
// ring and warps 2-3 the V ring, each half on its own, so that a V tile's load waits only for its
// own stage's release. (One producer filling K n + 1 and then V n held every V load behind a K
// stage's release: ncu had the consumers' largest stall on V, and at 8k tokens a layer took 1,300
// us against 975 now, 80 keys a tile and 2 stages each then.) A page of one kv head is bs rows
// strided by the cache's row ([page][row][kv head][D]): pages wholly below the block's last key
// come by TMA, one box of 64 columns x bs rows a column block (a 3-D tensor map over [rows][kv
// head][D]; lane i of the half's first warp issues page i's); the rest (the page holding the last
// key, and keys past it, zeros) row by row by cp.async from the half's 64 threads. (Every row by
// cp.async cost a quarter of the kernel's instructions, 16 bytes an instruction: ncu 509 M
// against 384 M.) Barriers per ring stage s (tile n uses stage n % stages for the (n /
// stages)-th time, u; a phase's parity is u % 2):
//   full[s]  count 65: every thread of the ring's half arrives by cp.async.mbarrier.arrive.noinc,
//            which fires when that thread's copies have landed, plus the half's thread 0 by
//            arrive.expect_tx of the TMA bytes;
//            consumers wait on parity u % 2, then fence.proxy.async (cp.async writes are
//            generic-proxy, wgmma reads async-proxy);
//   empty[s] count 8: lane 0 of each consumer warp once the MMAs of that warp that read the stage
//            are done; the producer waits on parity (u % 2) ^ 1 (the first use passes at once).
// A barrier cannot run a phase ahead of a waiter: refilling a stage needs every consumer warp's
// release of its previous use. Both consumer warpgroups release every tile, also those past
// their own last query (only waited for and released). No block-wide barrier after the set-up.
//
// Consumer, per tile n (S and P: 64 x kKeys; O: 64 x D):
//   wait K n and V n - 1; issue S = Q K^T (D / 16 wgmma m64n{kKeys}k16, Q and K both K-major
//   from shared memory); rescale O by tile n - 1's softmax factors while S runs; issue
//   O += P(n - 1) V(n - 1) (kKeys / 16 wgmma m64nDk16, P from registers, V read transposed,
//   MN-major); wait for S only, release K n; the causal mask (only on tiles past the warpgroup's
//   first query) and the online softmax on S's fp32 accumulator in registers (exp2, the scale
//   times log2 e folded into one FMA) while P V runs; wait for P V, release V n - 1; pack P(n) to
//   bf16 A fragments. The first tile has S alone, the last P V alone. Q is loaded by each consumer
//   warpgroup itself (cp.async, wait, fence.proxy.async, a named barrier of its 128 threads). The
//   epilogue normalizes, applies the gate (null: none) and stores from registers.
//
// The layout facts this relies on (checked against CUTLASS's GMMA traits and PTX ISA 9.7.15):
//  - Operand descriptors: each instruction's is its stage's plus a constant (the start address,
//    bits 0-13, counts 16 bytes, and every address stays below 2^18, so no carry leaves the field).
//  - Shared memory, 128-byte swizzle (wgmma.cuh): Q is [D / 64 column blocks][128 rows][128 B],
//    a K or V stage [D / 64 column blocks][kKeys keys][128 B]; chunk c (8 elements) of row r at byte
//    r * 128 + ((c ^ r % 8) * 16) of its column block, every block 1024-byte aligned.
//  - S = Q K^T: A (Q rows) and B (key rows) are K-major (the head dim is contiguous); the k16 step
//    kk reads column block kk / 4 at byte offset 32 (kk % 4); descriptors smem_desc (SBO 1024, LBO
//    unused, swizzle mode 1), transpose bits 0 and 0.
//  - O += P V: B is V [keys = k][head dim = n], n contiguous: MN-major, transpose bit 1, one
//    instruction of n = D per k16 step over the D / 64 column blocks, the k step kk at 16 kk rows
//    (2048 bytes) into the stage; smem_desc_mn: LBO = the column blocks' stride (kKeys x 128), SBO =
//    1024 (the PTX ISA's canonical MN-major layout ((8, 8, m), (8, k)) : ((1, 8, LBO), (64, SBO))).
//  - Accumulator of m64nN (S's kKeys / 2 floats, O's D / 2): thread lane of warp w in the warpgroup holds
//    d[4 j + q] = row 16 w + lane / 4 + 8 (q / 2), column 8 j + 2 (lane % 4) + q % 2.
//  - Register A of k16 (4 x bf16x2 a thread): a0 = (row g, k 2t, 2t + 1), a1 = (row g + 8, same
//    k), a2 = (row g, k 2t + 8, +9), a3 = (row g + 8, same), g = lane / 4, t = lane % 4, rows of
//    warp w offset by 16 w: the mma.sync m16n8k16 A fragment, so S's accumulators of keys 16 kk ..
//    16 kk + 15 (j = 2 kk, 2 kk + 1) are P's A fragment of k-step kk.
//  - wgmma's register operands: while an MMA is in flight its accumulators (O during the softmax)
//    and A fragments (P) are left alone; wgmma_fence_operands pins the code that writes or reads
//    them on the right side of wgmma.fence / wait_group.
#include "strata/ops/cuda/attention_wgmma.h"

#include <utility>
#include <vector>

#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/mbarrier.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/tensor_map.h"
#include "strata/ops/cuda/wgmma.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kRows = kWgmmaPrefillRows;
constexpr int kConsumers = 2, kThreads = (kConsumers + 1) * 128;  // two consumer warpgroups, one producer
// Registers a thread after the split (setmaxnreg), summing to the launch's 168 x 384: the
// producer's gather needs more than 40 (ptxas spills below), the consumers at head dim 256 fit 224.
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;  // what __launch_bounds__(kThreads, 1) leaves a thread
static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (kConsumers + 1) * kLaunchRegs,
              "setmaxnreg.inc waits forever for registers the producer never gave up");

constexpr int kFillThreads = 64;  // producer threads a ring (K: warps 0-1, V: warps 2-3)

// Keys a tile: 64 (a multiple of 16, P V's k steps). At head dim 256, 2 K and 3 V stages fill
// shared memory beside Q (64 + 64 + 96 KiB); 80 keys a tile (FlashAttention-3's choice there)
// left room for 2 and 2 only.
template <int D>
struct WgmmaSmem {
  static constexpr int kKeys = 64;
  static constexpr int kBlocks = D / 64;                     // 64-wide column blocks of a row
  static constexpr int kKStages = D <= 128 ? 4 : 2;          // of the K ring
  static constexpr int kVStages = D <= 128 ? 4 : 3;          // of the V ring
  static constexpr uint32_t kQBlock = kRows * 128;           // one column block of Q
  static constexpr uint32_t kKvBlock = kKeys * 128;          // one column block of a K or V stage
  static constexpr uint32_t kStage = kBlocks * kKvBlock;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + kBlocks * kQBlock;     // [kKStages]
  static constexpr uint32_t kV = kK + kKStages * kStage;     // [kVStages]
  static constexpr size_t kBytes = size_t(kV) + kVStages * kStage + 1024;  // + 1 KiB alignment
  static_assert(kBytes <= 227 * 1024 - 128, "shared memory (and the barriers)");
  static_assert(kKeys % 16 == 0 && kKeys <= 256, "P V's k steps, a TMA lane a page (pages of at least 8)");
};

// mbar_wait with a watchdog, against a wrong count or parity hanging the GPU: a phase that has not
// completed after 4 seconds makes the producer trap (the launch fails with an illegal instruction
// error) and a consumer thread exit (a trap there makes ptxas serialize the consumers' wgmma for
// lack of registers, C7512; a call, say to printf, undoes setmaxnreg, C7507). A stuck consumer
// thus leaves wrong output, or stalls the producer, which then traps. The clock is read only once
// the first try has failed.
template <bool kProducer>
__device__ __forceinline__ void wait_phase(uint32_t bar, uint32_t parity) {
  if (mbar_try_wait(bar, parity)) return;
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (!mbar_try_wait(bar, parity)) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 4000000000ull) {
      if constexpr (kProducer) {
        __trap();
      } else {
        asm volatile("exit;");
      }
    }
  }
}

// tiles: (sequence, first query) pairs, 128 / hpb queries each, or null: tile i is sequence i's
// only one. Block x serves tile x / (hq / hpb) for query heads hpb (x % (hq / hpb)) ... + hpb - 1.
// scale_log2 = scale * log2 e.
template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    attn_prefill_wgmma_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kc, const bf16* __restrict__ vc,
                              const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                              bool tma, DeviceBatch b, const int32_t* tiles, int hq, int hkv, int bs, int hpb,
                              float scale_log2, const bf16* __restrict__ gate, bf16* __restrict__ out) {
  using L = WgmmaSmem<D>;
  constexpr int SK = L::kKStages, SV = L::kVStages, kKeys = L::kKeys;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  extern __shared__ uint8_t smem_raw[];
  // The rings' barriers: K full and K empty (SK each), V full and V empty (SV each).
  __shared__ __align__(8) uint64_t bars[2 * (SK + SV)];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t q_sm = base + L::kQ, k_sm = base + L::kK, v_sm = base + L::kV;
  const uint32_t k_full = smem_u32(bars), k_empty = k_full + 8 * SK, v_full = k_empty + 8 * SK,
                 v_empty = v_full + 8 * SV;  // stage s's barrier at + 8 s

  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < SK; ++s) {
      mbar_init(k_full + 8 * s, kFillThreads + 1);  // a cp.async arrival a thread of the half, + expect_tx
      mbar_init(k_empty + 8 * s, 4 * kConsumers);  // one arrival per consumer warp
    }
    for (int s = 0; s < SV; ++s) {
      mbar_init(v_full + 8 * s, kFillThreads + 1);
      mbar_init(v_empty + 8 * s, 4 * kConsumers);
    }
    fence_barrier_init();
  }
  __syncthreads();
  pdl_begin();

  const int groups = hq / hpb, qt = kRows / hpb;  // blocks per tile, queries per block
  const int tile = blockIdx.x / groups, h0 = (blockIdx.x % groups) * hpb;
  const int s = tiles ? tiles[2 * tile] : tile, q0 = tiles ? tiles[2 * tile + 1] : 0;
  const int kvh = h0 / (hq / hkv);
  const int qlen = b.q_len[s], ctx = b.ctx_len[s], qstart = b.q_start[s];
  const int kv_end = ctx + q0 + min(qt, qlen - q0);  // keys of the block's last query, plus one
  const int n_tiles = (kv_end + kKeys - 1) / kKeys;

  if (tid >= 128 * kConsumers) {
    // ---- Producer warpgroup: warps 0-1 fill the K ring, warps 2-3 the V ring, tile after tile
    // (pt: the thread in its half). Each stage: wait until both consumer warpgroups released it
    // (empty, parity of its previous use), then bring its kKeys rows: the pages that lie wholly
    // below kv_end by TMA (lane i of the half's first warp page i: a box of 64 columns x bs rows
    // a column block, landing in the 128-byte swizzle the consumers read; the bytes complete on
    // the full barrier, whose transaction count the half's thread 0 sets first), the rest row by
    // row by cp.async, zeros past kv_end (a V row there must be finite: P is 0 there and 0 x NaN
    // is not). Every thread of the half arrives by cp.async.mbarrier.arrive.noinc, which fires
    // when its copies have landed; thread 0's expect_tx arrival is the barrier's 65th.
    setmaxnreg_dec<kProducerRegs>();
    const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
    const int pt = (tid - 128 * kConsumers) % kFillThreads, ring = (tid - 128 * kConsumers) / kFillThreads;
    const int64_t row_stride = int64_t(hkv) * D;  // elements between consecutive cache rows
    const int tma_pages = tma ? kKeys / bs : 0;   // pages a tile, when whole pages go by TMA
    auto fill = [&](uint32_t stage_sm, const CUtensorMap* map, const bf16* src, int kt, uint32_t bar) {
      const int whole = tma_pages ? min(max(kv_end - kt, 0) / bs, tma_pages) : 0;
      if (pt < 32) {  // lane i of the half's first warp brings page i
        if (pt == 0) mbar_arrive_expect_tx(bar, uint32_t(whole) * bs * D * 2);
        __syncwarp();
        if (pt < whole) {
          const int page = __ldg(bt + kt / bs + pt);  // -1 (a padding sequence): out of bounds, zeros
#pragma unroll
          for (int cb = 0; cb < L::kBlocks; ++cb) {
            tma_load_3d(stage_sm + cb * L::kKvBlock + pt * bs * 128, map, bar, cb * 64, kvh, page * bs);
          }
        }
      }
      for (int idx = whole * bs * kChunks + pt; idx < kKeys * kChunks; idx += kFillThreads) {
        const int r = idx / kChunks, c = idx % kChunks, j = kt + r;
        int64_t row = -1;
        if (j < kv_end) {
          const int pg = __ldg(bt + j / bs);
          if (pg >= 0) row = int64_t(pg) * bs + j % bs;
        }
        cp_async16(stage_sm + (c / 8) * L::kKvBlock + swizzle128(r, c % 8),
                   src + (row >= 0 ? row * row_stride + kvh * D + c * 8 : 0), row >= 0);
      }
      cp_async_mbar_arrive(bar);
    };
    if (ring == 0) {
      for (int n = 0; n < n_tiles; ++n) {
        const int st = n % SK;
        wait_phase<true>(k_empty + 8 * st, ((n / SK) & 1) ^ 1);
        fill(k_sm + st * L::kStage, &kmap, kc, n * kKeys, k_full + 8 * st);
      }
    } else {
      for (int n = 0; n < n_tiles; ++n) {
        const int st = n % SV;
        wait_phase<true>(v_empty + 8 * st, ((n / SV) & 1) ^ 1);
        fill(v_sm + st * L::kStage, &vmap, vc, n * kKeys, v_full + 8 * st);
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // ---- Consumer warpgroups. This warpgroup's 64 rows: head h, queries qw .. qw + 63 (positions
  // ctx + qw ...). Lane l of warp w holds rows 16 w + g and 16 w + g + 8 of the accumulators
  // (g = l / 4), columns 2t, 2t + 1 (t = l % 4) of each 8-column block.
  setmaxnreg_inc<kConsumerRegs>();
  const int wg = tid >> 7, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
  const int r0 = wg * 64, h = h0 + r0 / qt, qw = q0 + r0 % qt;
  const bool idle = qw >= qlen;  // every row of the warpgroup is past the sequence
  const int pos_lo = ctx + qw, pos_hi = pos_lo + 63, pos_g = pos_lo + 16 * w + g;
  constexpr int kJ = kKeys / 8, kSteps = kKeys / 16;  // S's 8-column blocks, P V's k steps
  const uint32_t q_wg = q_sm + r0 * 128;
  // Tiles 0 .. n_mine - 1 hold keys of this warpgroup's queries; the later ones (the other
  // warpgroup's) are only waited for and released.
  const int n_mine = idle ? 0 : min(n_tiles, pos_hi / kKeys + 1);

  // The warpgroup's Q rows (zeros past the sequence): landed, then made visible to wgmma.
  for (int i = tid & 127; i < 64 * kChunks; i += 128) {
    const int r = r0 + i / kChunks, c = i % kChunks, qi = q0 + r % qt;
    const bool ok = qi < qlen;
    cp_async16(q_sm + (c / 8) * L::kQBlock + swizzle128(r, c % 8),
               q + (ok ? (int64_t(qstart + qi) * hq + h) * D + c * 8 : 0), ok);
  }
  cp_commit();
  cp_wait<0>();
  fence_proxy_async();
  named_sync(1 + wg, 128);

  // Waits for tile n of a ring (its full barrier; then fence.proxy.async makes the producer's
  // cp.async writes visible to wgmma's async proxy); releases it when this warp's MMAs that read
  // it are done.
  auto acquire_k = [&](int n) { wait_phase<false>(k_full + 8 * (n % SK), (n / SK) & 1); };
  auto acquire_v = [&](int n) { wait_phase<false>(v_full + 8 * (n % SV), (n / SV) & 1); };
  auto release_k = [&](int n) {
    if (lane == 0) mbar_arrive(k_empty + 8 * (n % SK));
  };
  auto release_v = [&](int n) {
    if (lane == 0) mbar_arrive(v_empty + 8 * (n % SV));
  };

  float o[D / 2];  // O[64 x D]: column block cb's accumulator at o[32 cb ...]
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8: P's maximum (S x scale_log2), lane's partial sum
  float sc[kKeys / 2], corr[2];  // S (then P in fp32) of the tile: 64 x kKeys
  uint32_t p[kSteps][4];         // P of the previous tile: the A fragments of its k16 steps

  // The operands' descriptors: each instruction's is its stage's plus a constant (the start
  // address, bits 0-13, counts 16 bytes; every address stays below 2^18, so no carry leaves the
  // field). Built from the address at every instruction, descriptor arithmetic was about 40% of
  // the kernel's executed instructions (ncu, 8k tokens).
  const uint64_t dq = smem_desc(q_wg), dk0 = smem_desc(k_sm), dv0 = smem_desc_mn(v_sm, L::kKvBlock);
  // S = Q K^T, 64 x kKeys, into sc (issued, not waited for; its first k step overwrites sc).
  static_assert(kKeys == 64, "an S instruction of n = kKeys");
  auto issue_qk = [&](int n) {
    const uint64_t dk = dk0 + uint64_t((n % SK) * (L::kStage >> 4));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t at = ((kk / 4) * L::kQBlock + (kk % 4) * 32) >> 4,
                     bt_off = ((kk / 4) * L::kKvBlock + (kk % 4) * 32) >> 4;
      wgmma_m64n64k16_ss(sc, dq + at, dk + bt_off, kk > 0);
    }
    wgmma_commit();
  };
  // O += P V of tile n (issued, not waited for): S's accumulators 8 kk .. 8 kk + 7 were packed into
  // P's A fragment for keys 16 kk .. 16 kk + 15.
  auto issue_pv = [&](int n) {
    const uint64_t dv_tile = dv0 + uint64_t((n % SV) * (L::kStage >> 4));
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      // One m64nDk16 a k step over V's D / 64 column blocks (smem_desc_mn's block stride), the k
      // step at 16 rows (2048 bytes) on.
      const uint64_t dv = dv_tile + uint64_t(kk * 16 * 128 >> 4);
      if constexpr (D == 256) {
        wgmma_m64n256k16_rs_tb(o, p[kk], dv);
      } else {
        wgmma_m64n128k16_rs_tb(o, p[kk], dv);
      }
    }
    wgmma_commit();
  };
  // The causal mask (only where the tile reaches past the warpgroup's first query) and the online
  // softmax of tile n's S: the new row maxima over the quad's lanes, P = exp2 in sc, the sums
  // rescaled; corr, the factors of O. A row's maximum is raised only when the tile's exceeds it
  // by more than kLazyMax (in log2 units, after the scale), so P stays at most 2^kLazyMax
  // (FlashAttention-4's rule): after a row's first tiles its maximum rarely moves and O is
  // rarely rescaled (corr exactly 1: rescale_o skips it). A row's first keys set it outright.
  constexpr float kLazyMax = 8.f;
  auto softmax = [&](int n) {
    const int kt = n * kKeys;
    if (kt + kKeys - 1 > pos_lo) {
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kt + 8 * j + 2 * t + (e & 1) > pos_g + (e >> 1) * 8) sc[4 * j + e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kJ; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * rr], sc[4 * j + 2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // m (the maximum P is taken against, times scale_log2) kept unless the tile's is larger by
      // more than kLazyMax; from -inf (no key yet) or to -inf (none now) O and l are 0, nothing to rescale.
      const float tile_l2 = mx * scale_log2;
      corr[rr] = 1.f;
      if (tile_l2 > m[rr] + kLazyMax) {
        if (m[rr] != -INFINITY) corr[rr] = fast_exp2(m[rr] - tile_l2);
        m[rr] = tile_l2;
      }
      const float base_l2 = m[rr] == -INFINITY ? 0.f : m[rr];  // a row with no key yet stays at 0
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        sc[4 * j + 2 * rr] = fast_exp2(fmaf(sc[4 * j + 2 * rr], scale_log2, -base_l2));
        sc[4 * j + 2 * rr + 1] = fast_exp2(fmaf(sc[4 * j + 2 * rr + 1], scale_log2, -base_l2));
        sum += sc[4 * j + 2 * rr] + sc[4 * j + 2 * rr + 1];
      }
      l[rr] = l[rr] * corr[rr] + sum;
    }
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) p[kk][i] = pack_bf16x2(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
    }
  };
  auto fence_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) wgmma_fence_operands(p[kk]);
  };

  // O *= the factors of the last softmax, where a row of the warp's needs it: after the P V
  // product in flight is done (a branch between the two MMAs' issues makes ptxas serialize them,
  // C7518, C7520).
  auto rescale_o = [&] {
    if (!__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) return;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[4 * j] *= corr[0], o[4 * j + 1] *= corr[0];
      o[4 * j + 2] *= corr[1], o[4 * j + 3] *= corr[1];
    }
  };

  // The pipeline, FlashAttention-3's intra-warpgroup overlap: iteration n waits for K n and V n - 1,
  // issues S(n) = Q K(n)^T and O += P(n - 1) V(n - 1), runs tile n's softmax while that P V
  // product is still in the tensor cores, then rescales O (tiles ..n - 1) by tile n's factors.
  if (n_mine > 0) {
    acquire_k(0);
    fence_proxy_async();
    wgmma_fence_operands(sc);
    wgmma_fence();
    issue_qk(0);
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    release_k(0);
    softmax(0);  // its factors are 1: O is 0
    pack_p();
  }
  for (int n = 1; n < n_mine; ++n) {
    acquire_k(n);
    fence_proxy_async();
    wgmma_fence_operands(sc);
    fence_p();
    wgmma_fence();
    issue_qk(n);
    wgmma_fence_operands(o);
    // V n - 1 only now, while S runs: the tile that loaded last gets S's time to land too.
    mbar_wait(v_full + 8 * ((n - 1) % SV), ((n - 1) / SV) & 1);
    fence_proxy_async();
    wgmma_fence();
    issue_pv(n - 1);
    wgmma_wait<1>();  // S(n) done, P V still running
    wgmma_fence_operands(sc);
    release_k(n);
    softmax(n);
    wgmma_fence_operands(sc);  // the softmax before the wait, not after it
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    fence_p();
    release_v(n - 1);
    rescale_o();
    wgmma_fence_operands(o);
    pack_p();
  }
  if (n_mine > 0) {
    acquire_v(n_mine - 1);
    fence_proxy_async();
    fence_p();
    wgmma_fence_operands(o);
    wgmma_fence();
    issue_pv(n_mine - 1);
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    fence_p();
    release_v(n_mine - 1);
  }
  // Tiles of only the other warpgroup's keys: every consumer warp releases every stage use.
  for (int n = n_mine; n < n_tiles; ++n) {
    acquire_k(n);
    release_k(n);
    acquire_v(n);
    release_v(n);
  }

  // Epilogue: O / l (the sums completed over the quad), times sigmoid(gate), from registers.
  if (idle) return;
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    inv[rr] = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
  }
  // A row's gates load all at once, before any is used: one at a time, each load waited for
  // before the store after it, the epilogue took a sixth of the kernel (ncu, 8k tokens).
  constexpr int kGates = D / 8;  // bf16 pairs a row a thread
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int qi = qw + 16 * w + g + 8 * rr;
    if (qi >= qlen) continue;
    const int64_t row = (int64_t(qstart + qi) * hq + h) * D + 2 * t;
    uint32_t gv[kGates];
    if (gate) {
#pragma unroll
      for (int j = 0; j < kGates; ++j) gv[j] = __ldg(reinterpret_cast<const unsigned*>(gate + row + 8 * j));
    }
#pragma unroll
    for (int j = 0; j < kGates; ++j) {
      float v0 = o[4 * j + 2 * rr] * inv[rr], v1 = o[4 * j + 2 * rr + 1] * inv[rr];
      if (gate) {
        const __nv_bfloat162 gp = *reinterpret_cast<const __nv_bfloat162*>(&gv[j]);
        v0 *= sigmoid_f(__low2float(gp));
        v1 *= sigmoid_f(__high2float(gp));
      }
      *reinterpret_cast<uint32_t*>(out + row + 8 * j) = pack_bf16x2(v0, v1);
    }
  }
}

// The TMA map of a paged cache [rows = pages x bs][hkv][D] (the per-layer caches stay put, so
// a map is encoded once per cache and kept; a key is the whole of what the map encodes).
struct CacheMapKey {
  const void* base;
  int64_t rows;
  int hkv, d, box_rows;
  bool same(const CacheMapKey& o) const {
    return base == o.base && rows == o.rows && hkv == o.hkv && d == o.d && box_rows == o.box_rows;
  }
};

const CUtensorMap& cache_map(const bf16* cache, int64_t rows, int hkv, int d, int box_rows) {
  thread_local std::vector<std::pair<CacheMapKey, CUtensorMap>> maps;
  const CacheMapKey key{cache, rows, hkv, d, box_rows};
  for (const auto& [k, m] : maps) {
    if (k.same(key)) return m;
  }
  if (maps.size() >= 256) maps.clear();
  const uint64_t dims[3] = {uint64_t(d), uint64_t(hkv), uint64_t(rows)};
  const uint64_t strides[2] = {uint64_t(d) * 2, uint64_t(hkv) * d * 2};
  const uint32_t box[3] = {64, 1, uint32_t(box_rows)};
  maps.emplace_back(key, tensor_map_bf16(cache, 3, dims, strides, box, true));
  return maps.back().second;
}

template <int D>
void launch(const bf16* q, const bf16* kc, const bf16* vc, int64_t cache_rows, const DeviceBatch& db,
            const int32_t* tiles, unsigned n_tiles, int hq, int hkv, int bs, int hpb, float scale_log2,
            const bf16* gate, bf16* out) {
  using L = WgmmaSmem<D>;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(attn_prefill_wgmma_kernel<D>), L::kBytes, "paged_attention");
    return true;
  }();
  (void)kAttr;
  // Whole pages by TMA when a tile is whole pages and a page's box lands on the swizzle's 1024-byte
  // pattern (bs a multiple of 8); otherwise every row by cp.async.
  const bool tma = bs % 8 == 0 && L::kKeys % bs == 0;
  const int box_rows = tma ? bs : 8;
  const CUtensorMap kmap = cache_map(kc, cache_rows, hkv, D, box_rows);
  const CUtensorMap vmap = cache_map(vc, cache_rows, hkv, D, box_rows);
  const unsigned grid = n_tiles * unsigned(hq / hpb);
  launch_pdl(attn_prefill_wgmma_kernel<D>, grid, kThreads, L::kBytes, q, kc, vc, kmap, vmap, tma, db, tiles, hq,
             hkv, bs, hpb, scale_log2, gate, out);
  check_launch("attn_prefill_wgmma");
}

}  // namespace

void attn_prefill_wgmma(int d, const bf16* q, const bf16* k_cache, const bf16* v_cache, int64_t cache_rows,
                        const DeviceBatch& db, const int32_t* tiles, unsigned n_tiles, int hq, int hkv, int bs,
                        int hpb, float scale_log2, const bf16* gate, bf16* out) {
  if (d == 256) {
    launch<256>(q, k_cache, v_cache, cache_rows, db, tiles, n_tiles, hq, hkv, bs, hpb, scale_log2, gate, out);
  } else {
    STRATA_CHECK(d == 128, "attn_prefill_wgmma: head dim ", d, " (128 or 256)");
    launch<128>(q, k_cache, v_cache, cache_rows, db, tiles, n_tiles, hq, hkv, bs, hpb, scale_log2, gate, out);
  }
}

}  // namespace strata::ops::cuda
