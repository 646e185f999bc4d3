// CUDA: decode attention over bf16 pages on tensor cores (mma.sync), for head dims 128 and 256 and
// GQA groups of at most 16 query heads a kv head.
//
// Block (split, kv head, query): the query heads of one kv head are the 16 rows of an m16 tile
// (rows past the group are zeros), so one pass over a key serves the whole group, where the
// CUDA-core kernel (attention.cu) read and converted every key once a query head. Four warps
// each walk their own 16-key tiles of the block's keys (tiles w, w + 4, ...) through their own
// ring of kStages shared-memory stages filled by cp.async (a lane moves 16-byte chunks; a key's
// page is looked up once a tile), so no barrier of the block sits in the loop. A tile:
// S = Q K^T (m16n8k16, two n8 tiles of keys), the online softmax on S's fragments, P V with P
// kept in registers as the A fragment (FlashAttention-2's layout), V by ldmatrix.trans. The
// warps' partial softmaxes merge through shared memory at the end; the block then writes the
// gated output (one split) or its partial for attn_combine_kernel (several). Rows of K, V and Q
// are 16-byte chunks swizzled by the row (chunk c of row r at c ^ (r % 8)), so ldmatrix's eight
// rows of a tile fall in distinct banks.
#include "strata/ops/cuda/attention_decode.h"

#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/kv_fp8.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32, kTileKeys = 16, kStages = 3, kRows = 16;

// FP8 pages: each warp's ring holds the tiles' e4m3 codes, and one bf16 tile of K and of V that
// the warp converts the current tile's codes into (times each key's scale, exactly: a power of
// two) before its MMAs.
template <int D, bool kFp8>
struct DecodeSmem {
  static constexpr int kRowBytes = D * 2, kChunks = D / 8;
  static constexpr int kTile = kTileKeys * kRowBytes;                   // K or V of one tile, bf16
  static constexpr int kCodes = kTileKeys * D;                          // K or V of one tile, e4m3
  static constexpr int kQ = 0;                                          // [16][D] bf16
  static constexpr int kMl = kQ + kRows * kRowBytes;                    // [warps][16] m, l
  static constexpr int kStage0 = kMl + kWarps * kRows * 2 * 4;          // [warps] rings
  static constexpr int kRing = kStages * 2 * (kFp8 ? kCodes : kTile);   // a warp's ring
  static constexpr int kWarpBytes = kRing + (kFp8 ? 2 * kTile : 0);
  static constexpr int kBytes = kStage0 + kWarps * kWarpBytes;
  static constexpr int kOLd = D + 8;                                    // merge: [warps][16][D + 8] f32
  static_assert(kWarps * kRows * kOLd * 4 <= kWarps * kWarpBytes, "the merge reuses the rings");
};

__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int row_bytes) {
  return uint32_t(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ void st_shared16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

template <int D, bool kFp8>
__global__ void __launch_bounds__(kThreads) attn_decode_mma_kernel(const bf16* __restrict__ q, DecodeArgs args) {
  using L = DecodeSmem<D, kFp8>;
  constexpr int kC = L::kChunks;
  extern __shared__ __align__(128) uint8_t smem[];
  pdl_begin();
  const DeviceBatch& b = args.batch;
  const int split = blockIdx.x, kvh = blockIdx.y;
  const int hkv = args.hkv, group = args.hq / hkv, bs = args.bs;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const DecodeQuery query = decode_query(b, blockIdx.z, args.rows);
  const int s = query.seq, t = query.row, seq_len = query.keys;
  const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
  const bool padding = bt[0] < 0;
  const int used = decode_used_splits(seq_len, args.splits);
  if (split >= used) return;
  const int chunk = (seq_len + used - 1) / used;
  const int t0 = padding ? 0 : split * chunk, t1 = padding ? 0 : min(seq_len, t0 + chunk);
  // Single-token decode over bf16 pages: the new key and value (position `last`) come from
  // args.k / args.v, and the block whose split holds them stores them into their page. Rows, and
  // FP8 pages (encoded before): every key is in the pages.
  const int last = args.rows || kFp8 ? -1 : seq_len - 1;
  const int64_t new_off = (int64_t(t) * hkv + kvh) * D;
  if (!padding) {
    decode_store_new_kv<D>(args.k + new_off, args.v + new_off, args.k_cache, args.v_cache, bt, bs, hkv, kvh, last,
                           split, chunk);
  }
  // Q: the group's heads as rows 0 .. group - 1, zeros below.
  const uint32_t sq = smem_u32(smem) + L::kQ;
  for (int x = tid; x < kRows * kC; x += kThreads) {
    const int r = x / kC, c = x % kC;
    const bool ok = r < group;
    cp_async16(sq + swizzled(r, c, L::kRowBytes), q + (int64_t(t) * args.hq + kvh * group + (ok ? r : 0)) * D + c * 8,
               ok);
  }
  cp_commit();

  // This warp's tiles: keys t0 + 16 (warp + 4 i) ...
  const int tiles = (t1 - t0 + kTileKeys - 1) / kTileKeys;
  const int mine = warp < tiles ? (tiles - warp + kWarps - 1) / kWarps : 0;
  const uint32_t ring = smem_u32(smem) + L::kStage0 + uint32_t(warp * L::kWarpBytes);
  // bf16 pages: tile i's K and V in stage i % kStages. FP8 pages: its codes there, converted
  // into the warp's one bf16 K and V tile (kbf, kbf + kTile) when their turn comes.
  const uint32_t kbf = ring + L::kRing;
  const uint8_t* kc8 = reinterpret_cast<const uint8_t*>(args.k_cache);
  const uint8_t* vc8 = reinterpret_cast<const uint8_t*>(args.v_cache);
  // Returns (FP8) this lane's scale byte of the tile: lane l < 16 key l's K scale, lane 16 + l
  // its V scale (127, a scale of 1, past the keys).
  auto load = [&](int i) {
    const int key0 = t0 + kTileKeys * (warp + kWarps * i);
    const int mykey = key0 + (lane & 15);
    const int page = mykey < t1 ? bt[mykey / bs] : -1;
    // The tile's rows in 16-byte chunks: 16 codes (FP8, rows unswizzled) or 8 bf16 (swizzled).
    constexpr int kPer = kFp8 ? 16 : 8, kChunksRow = D / kPer;
    const uint32_t sk = ring + uint32_t((i % kStages) * 2 * (kFp8 ? L::kCodes : L::kTile));
    const uint32_t sv = sk + (kFp8 ? L::kCodes : L::kTile);
#pragma unroll
    for (int j = 0; j < kTileKeys * kChunksRow / 32; ++j) {
      const int x = lane + 32 * j, r = x / kChunksRow, c = x % kChunksRow;
      const int key = key0 + r;
      const int pg = __shfl_sync(0xffffffffu, page, r);
      const bool ok = key < t1 && pg >= 0;
      const int64_t off = ((int64_t(ok ? pg : 0) * bs + key % bs) * hkv + kvh) * D + c * kPer;
      if constexpr (kFp8) {
        cp_async16(sk + uint32_t(r * D + c * 16), kc8 + off, ok);
        cp_async16(sv + uint32_t(r * D + c * 16), vc8 + off, ok);
      } else {
        const bf16* kp = key == last ? args.k + new_off + c * 8 : args.k_cache + off;
        const bf16* vp = key == last ? args.v + new_off + c * 8 : args.v_cache + off;
        cp_async16(sk + swizzled(r, c, L::kRowBytes), kp, ok);
        cp_async16(sv + swizzled(r, c, L::kRowBytes), vp, ok);
      }
    }
    if (!kFp8 || page < 0) return uint8_t(127);
    const int64_t e = (int64_t(page) * bs + mykey % bs) * hkv + kvh;
    return __ldg(lane < 16 ? args.k_scale + e : args.v_scale + e);
  };
  // The scale bytes of the tiles in flight (FP8), kStages - 1 ahead: next[0] the oldest.
  uint8_t next[kStages - 1];
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    next[i] = i < mine ? load(i) : uint8_t(127);
    cp_commit();
  }
  cp_wait<kStages - 1>();  // Q (the first group)
  __syncthreads();

  // Accumulators: o[n] is the m16n8 tile of output columns 8n .. 8n + 7; rows g and g + 8.
  const int g = lane >> 2, tq = lane & 3;
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // rows g, g + 8 (log2 units)
  const float qk_scale = args.scale * kLog2e;
  // ldmatrix lanes: A (Q) row and chunk offset; B (K, non-transposed) key and chunk offset; V
  // (transposed) key and chunk offset.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_c = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_c = (lane >> 3) & 1;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_c = lane >> 4;
  for (int i = 0; i < mine; ++i) {
    cp_wait<kStages - 2>();
    __syncwarp();
    const uint8_t scale_byte = next[0];
#pragma unroll
    for (int j = 0; j + 1 < kStages - 1; ++j) next[j] = next[j + 1];
    next[kStages - 2] = i + kStages - 1 < mine ? load(i + kStages - 1) : uint8_t(127);
    cp_commit();
    uint32_t sk = ring + uint32_t((i % kStages) * 2 * L::kTile), sv = sk + L::kTile;
    if constexpr (kFp8) {
      // Tile i's codes times their keys' scales into the bf16 tile (the previous tile's MMAs
      // are done: __syncwarp above), 16 codes a chunk, rows swizzled as the bf16 pages' are.
      sk = kbf, sv = kbf + L::kTile;
      const uint32_t ck = ring + uint32_t((i % kStages) * 2 * L::kCodes);
      constexpr int kCc = D / 16;
#pragma unroll
      for (int j = 0; j < 2 * kTileKeys * kCc / 32; ++j) {
        const int x = lane + 32 * j, kv = x / (kTileKeys * kCc), r = (x / kCc) % kTileKeys, c = x % kCc;
        const float scale = kv_fp8_scale(uint8_t(__shfl_sync(0xffffffffu, int(scale_byte), 16 * kv + r)));
        uint4 codes;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(codes.x), "=r"(codes.y), "=r"(codes.z), "=r"(codes.w)
                     : "r"(ck + uint32_t(kv * L::kCodes + r * D + c * 16)));
        float f[16];
        kv_fp8_unpack16(codes, scale, f);
        const uint32_t dst = kbf + uint32_t(kv * L::kTile);
        st_shared16(dst + swizzled(r, 2 * c, L::kRowBytes), pack8(f));
        st_shared16(dst + swizzled(r, 2 * c + 1, L::kRowBytes), pack8(f + 8));
      }
      __syncwarp();
    }
    const int key0 = t0 + kTileKeys * (warp + kWarps * i);
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4], kb[4];
      ldmatrix_x4(a, sq + swizzled(a_row, 2 * kk + a_c, L::kRowBytes));
      ldmatrix_x4(kb, sk + swizzled(k_row, 2 * kk + k_c, L::kRowBytes));
      mma_bf16(sc[0], a, kb[0], kb[1]);
      mma_bf16(sc[1], a, kb[2], kb[3]);
    }
    // The online softmax: keys 8 j + 2 tq + e of rows g (e < 2) and g + 8 (e >= 2).
    float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + 8 * j + 2 * tq + (e & 1);
        sc[j][e] = key < t1 ? sc[j][e] * qk_scale : -INFINITY;
      }
      mx_lo = fmaxf(mx_lo, fmaxf(sc[j][0], sc[j][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(sc[j][2], sc[j][3]));
    }
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, x));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, x));
    }
    // A row with no key yet keeps m = -inf; its probabilities are exp2(-inf) = 0.
    const float base_lo = mx_lo == -INFINITY ? 0.f : mx_lo, base_hi = mx_hi == -INFINITY ? 0.f : mx_hi;
    const float c_lo = fast_exp2(m_lo - base_lo), c_hi = fast_exp2(m_hi - base_hi);
    m_lo = mx_lo, m_hi = mx_hi;
    uint32_t pa[4];
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float p0 = fast_exp2(sc[j][0] - base_lo), p1 = fast_exp2(sc[j][1] - base_lo);
      const float p2 = fast_exp2(sc[j][2] - base_hi), p3 = fast_exp2(sc[j][3] - base_hi);
      sum_lo += p0 + p1, sum_hi += p2 + p3;
      pa[2 * j] = pack_bf16x2(p0, p1);
      pa[2 * j + 1] = pack_bf16x2(p2, p3);
    }
    l_lo = l_lo * c_lo + sum_lo, l_hi = l_hi * c_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] *= c_lo, o[n][1] *= c_lo, o[n][2] *= c_hi, o[n][3] *= c_hi;
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, sv + swizzled(v_row, n + v_c, L::kRowBytes));
      mma_bf16(o[n], pa, vb[0], vb[1]);
      mma_bf16(o[n + 1], pa, vb[2], vb[3]);
    }
  }
  cp_wait<0>();
  // A row's mass is spread over the quad's lanes.
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, x);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, x);
  }
  __syncthreads();  // every warp is done with its stages: the merge reuses them
  float* ml = reinterpret_cast<float*>(smem + L::kMl);
  float* om = reinterpret_cast<float*>(smem + L::kStage0);
  if (tq == 0) {
    ml[(warp * kRows + g) * 2] = m_lo, ml[(warp * kRows + g) * 2 + 1] = l_lo;
    ml[(warp * kRows + g + 8) * 2] = m_hi, ml[(warp * kRows + g + 8) * 2 + 1] = l_hi;
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    float* lo = om + (warp * kRows + g) * L::kOLd + 8 * n + 2 * tq;
    *reinterpret_cast<float2*>(lo) = make_float2(o[n][0], o[n][1]);
    *reinterpret_cast<float2*>(lo + 8 * L::kOLd) = make_float2(o[n][2], o[n][3]);
  }
  __syncthreads();
  for (int x = tid; x < group * (D / 4); x += kThreads) {
    const int r = x / (D / 4), d0 = 4 * (x % (D / 4));
    float mw[kWarps], mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, mw[w] = ml[(w * kRows + r) * 2]);
    float lsum = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = fast_exp2(mw[w] - mx);
        lsum += ml[(w * kRows + r) * 2 + 1] * f;
        const float4 v = *reinterpret_cast<const float4*>(om + (w * kRows + r) * L::kOLd + d0);
        acc[0] += v.x * f, acc[1] += v.y * f, acc[2] += v.z * f, acc[3] += v.w * f;
      }
    }
    const int h = kvh * group + r;
    const int64_t o0 = (int64_t(t) * args.hq + h) * D + d0;
    if (used == 1) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float y = lsum > 0.f ? acc[e] / lsum : 0.f;
        if (args.gate) y *= sigmoid_f(bf2f(args.gate[o0 + e]));
        args.out[o0 + e] = f2bf(y);
      }
    } else {
      // attn_combine_kernel's units: the running max in natural-log units.
      const int64_t p = (int64_t(args.rows ? t : s) * args.hq + h) * args.splits + split;
      *reinterpret_cast<float4*>(args.part_o + p * D + d0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      if (d0 == 0) {
        args.part_ml[2 * p] = mx == -INFINITY ? -INFINITY : mx / kLog2e;
        args.part_ml[2 * p + 1] = lsum;
      }
    }
  }
}

template <int D, bool kFp8>
void launch(const bf16* q, const DecodeArgs& args, unsigned nq) {
  using L = DecodeSmem<D, kFp8>;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(attn_decode_mma_kernel<D, kFp8>), L::kBytes, "attn_decode_mma");
    return true;
  }();
  (void)kAttr;
  const dim3 grid(unsigned(args.splits), unsigned(args.hkv), nq);
  launch_pdl(attn_decode_mma_kernel<D, kFp8>, grid, kThreads, L::kBytes, q, args);
  check_launch("attn_decode_mma");
}

}  // namespace

int decode_mma_blocks_per_sm(int d) { return d == 256 ? 1 : 2; }

void attn_decode_mma(int d, const bf16* q, const DecodeArgs& args, unsigned nq) {
  STRATA_CHECK(decode_mma_supported(d, args.hq / args.hkv), "attn_decode_mma: head dim ", d, ", group ",
               args.hq / args.hkv);
  const bool fp8 = args.k_scale != nullptr;
  if (d == 256) {
    fp8 ? launch<256, true>(q, args, nq) : launch<256, false>(q, args, nq);
  } else {
    fp8 ? launch<128, true>(q, args, nq) : launch<128, false>(q, args, nq);
  }
}

}  // namespace strata::ops::cuda
