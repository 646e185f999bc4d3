// CUDA: causal GQA attention over the paged KV cache, either
//  - decode (every sequence has one new token): split-K over the sequence's pages, one block per
//    (split, kv head, sequence) and a warp per query head of the kv head, with a second kernel
//    merging the splits' partial softmaxes. The new token's key and value are read from k and v
//    and stored into their page by the block whose split holds them; or
//  - prefill (any batch): the new keys and values are written into their pages first, then
//    FlashAttention-style tiles walk the keys with an online softmax: at head dims 128 and 256 a
//    wgmma kernel (attention_wgmma.cu; kPrefillOnWgmma) or the FlashAttention-2 kernel here
//    (mma.sync, ldmatrix, cp.async; see attn_prefill_fa_kernel), at the smaller ones tiles of 64
//    queries x 64 keys with WMMA through shared memory.
// paged_attention_gated's sigmoid gate is applied where decode and the head dim 128 / 256
// prefill write their output (after the small head dims' prefill, by mul_sigmoid).
#include <mma.h>

#include <algorithm>
#include <vector>

#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/attention_wgmma.h"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"

namespace strata::ops::cuda {
namespace {

constexpr int kMaxSplits = 64;
constexpr int kMinSplitTokens = 32;

__global__ void kv_write_kernel(const bf16* k, const bf16* v, bf16* kc, bf16* vc, DeviceBatch b, int64_t row,
                                int bs) {
  pdl_begin();
  const int t = blockIdx.x;
  const int s = b.token_seq[t];
  const int pos = b.ctx_len[s] + (t - b.q_start[s]);
  const int page = b.block_table[int64_t(s) * *b.bt_stride + pos / bs];
  if (page < 0) return;  // padding rows never touch the cache
  const int64_t dst = (int64_t(page) * bs + pos % bs) * row, src = int64_t(t) * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kc[dst + i] = k[src + i];
    vc[dst + i] = v[src + i];
  }
}

// ---- decode ----

// Block (split, kv head, sequence), 8 warps, warp w serving query heads w, w + 8, ... of the kv
// head (the block's warps share each key through L1). A warp walks the split's keys kDecodeVec
// elements per lane, G = D / kDecodeVec lanes per key and TPW = 32 / G keys side by side,
// kUnroll steps per iteration: their page ids, then their keys and values, load together, and the
// online softmax rescales once per iteration. The TPW partial softmaxes of a warp merge by
// shuffles at the end.
constexpr int kDecodeVec = 16, kDecodeWarps = 8, kUnroll = 4;

__device__ __forceinline__ void merge_softmax(float& m, float& l, float* acc, float m_o, float l_o,
                                              const float* acc_o) {
  const float m_new = fmaxf(m, m_o);
  const float ca = m == -INFINITY ? 0.f : __expf(m - m_new), cb = m_o == -INFINITY ? 0.f : __expf(m_o - m_new);
  l = l * ca + l_o * cb;
#pragma unroll
  for (int e = 0; e < kDecodeVec; ++e) acc[e] = acc[e] * ca + acc_o[e] * cb;
  m = m_new;
}

// Decode's new keys and values [T, Hkv, D], and the caches they are stored into.
struct NewKv {
  const bf16* k;
  const bf16* v;
  bf16* k_cache;
  bf16* v_cache;
};

template <int D>
__global__ void __launch_bounds__(kDecodeWarps * 32) attn_decode_kernel(
    const bf16* __restrict__ q, const bf16* __restrict__ kc, const bf16* __restrict__ vc, NewKv nk, DeviceBatch b,
    int hq, int hkv, int bs, float scale, int splits, const bf16* gate, float* part_o, float* part_ml, bf16* out) {
  pdl_begin();
  constexpr int G = D / kDecodeVec, TPW = 32 / G;
  const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
  const int group = hq / hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lig = lane % G, grp = lane / G;
  const int t = b.q_start[s];
  const int seq_len = b.ctx_len[s] + b.q_len[s];
  const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
  const bool padding = bt[0] < 0;
  const int chunk = (seq_len + splits - 1) / splits;
  const int t0 = padding ? 0 : split * chunk, t1 = padding ? 0 : min(seq_len, t0 + chunk);
  // The new token (position `last`): its key and value come from nk (never from the cache), and
  // the one block whose split holds it stores them into the cache.
  const int last = seq_len - 1;
  const int64_t new_off = (int64_t(t) * hkv + kvh) * D;
  if (!padding && split == last / chunk && bt[last / bs] >= 0) {
    const int64_t dst = ((int64_t(bt[last / bs]) * bs + last % bs) * hkv + kvh) * D;
    for (int i = threadIdx.x; i < D / 8; i += blockDim.x) {
      reinterpret_cast<uint4*>(nk.k_cache + dst)[i] = reinterpret_cast<const uint4*>(nk.k + new_off)[i];
      reinterpret_cast<uint4*>(nk.v_cache + dst)[i] = reinterpret_cast<const uint4*>(nk.v + new_off)[i];
    }
  }
  for (int hh = warp; hh < group; hh += kDecodeWarps) {
    const int h = kvh * group + hh;
    float qf[kDecodeVec], acc[kDecodeVec];
    const bf16* qp = q + (int64_t(t) * hq + h) * D + lig * kDecodeVec;
    unpack8(*reinterpret_cast<const uint4*>(qp), qf);
    unpack8(*reinterpret_cast<const uint4*>(qp + 8), qf + 8);
#pragma unroll
    for (int e = 0; e < kDecodeVec; ++e) {
      qf[e] *= scale;
      acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int base = t0; base < t1; base += TPW * kUnroll) {
      int page[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int tok = base + u * TPW + grp;
        page[u] = tok < t1 ? bt[tok / bs] : -1;
      }
      uint4 kv[kUnroll][4];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int tok = base + u * TPW + grp;
        if (page[u] >= 0) {
          const int64_t off = ((int64_t(page[u]) * bs + tok % bs) * hkv + kvh) * D + lig * kDecodeVec;
          const bf16* kp = tok == last ? nk.k + new_off + lig * kDecodeVec : kc + off;
          const bf16* vp = tok == last ? nk.v + new_off + lig * kDecodeVec : vc + off;
          kv[u][0] = __ldg(reinterpret_cast<const uint4*>(kp));
          kv[u][1] = __ldg(reinterpret_cast<const uint4*>(kp + 8));
          kv[u][2] = __ldg(reinterpret_cast<const uint4*>(vp));
          kv[u][3] = __ldg(reinterpret_cast<const uint4*>(vp + 8));
        } else {
          kv[u][0] = kv[u][1] = kv[u][2] = kv[u][3] = make_uint4(0, 0, 0, 0);
        }
      }
      float sc[kUnroll];
      float mx = m;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float kf[kDecodeVec];
        unpack8(kv[u][0], kf);
        unpack8(kv[u][1], kf + 8);
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < kDecodeVec; ++e) d = fmaf(qf[e], kf[e], d);
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u] = page[u] >= 0 ? d : -INFINITY;
        mx = fmaxf(mx, sc[u]);
      }
      const float corr = m == -INFINITY ? 0.f : __expf(m - mx);
      l *= corr;
#pragma unroll
      for (int e = 0; e < kDecodeVec; ++e) acc[e] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = sc[u] == -INFINITY ? 0.f : __expf(sc[u] - mx);
        l += p;
        float vf[kDecodeVec];
        unpack8(kv[u][2], vf);
        unpack8(kv[u][3], vf + 8);
#pragma unroll
        for (int e = 0; e < kDecodeVec; ++e) acc[e] = fmaf(p, vf[e], acc[e]);
      }
      m = mx;
    }
    // Merge the warp's TPW key groups (lanes lig + G j hold the same elements).
#pragma unroll
    for (int o = G; o < 32; o <<= 1) {
      float acc_o[kDecodeVec];
#pragma unroll
      for (int e = 0; e < kDecodeVec; ++e) acc_o[e] = __shfl_xor_sync(0xffffffffu, acc[e], o);
      const float m_o = __shfl_xor_sync(0xffffffffu, m, o), l_o = __shfl_xor_sync(0xffffffffu, l, o);
      merge_softmax(m, l, acc, m_o, l_o, acc_o);
    }
    if (grp == 0) {
      if (splits == 1) {
        float o[kDecodeVec];
        const int64_t o0 = (int64_t(t) * hq + h) * D + lig * kDecodeVec;
#pragma unroll
        for (int e = 0; e < kDecodeVec; ++e) {
          o[e] = l > 0.f ? acc[e] / l : 0.f;
          if (gate) o[e] *= sigmoid_f(bf2f(gate[o0 + e]));
        }
        bf16* op = out + o0;
        *reinterpret_cast<uint4*>(op) = pack8(o);
        *reinterpret_cast<uint4*>(op + 8) = pack8(o + 8);
      } else {
        const int64_t p = (int64_t(s) * hq + h) * splits + split;
#pragma unroll
        for (int e = 0; e < kDecodeVec; ++e) part_o[p * D + lig * kDecodeVec + e] = acc[e];
        if (lig == 0) {
          part_ml[2 * p] = m;
          part_ml[2 * p + 1] = l;
        }
      }
    }
  }
}

// One block per (sequence, query head): the splits' weights exp(m_j - max) and the total mass
// are computed once by the first warp; then every output element's sum over the splits has
// independent loads.
__global__ void attn_combine_kernel(const float* part_o, const float* part_ml, DeviceBatch b, int hq, int d_dim,
                                    int splits, const bf16* gate, bf16* out) {
  pdl_begin();
  __shared__ float wsm[kMaxSplits];
  __shared__ float lsum_sm;
  const int s = blockIdx.x / hq, h = blockIdx.x % hq;
  const int t = b.q_start[s];
  const int64_t p0 = (int64_t(s) * hq + h) * splits;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int j = lane; j < splits; j += 32) mx = fmaxf(mx, part_ml[2 * (p0 + j)]);
    mx = warp_max(mx);
    float lsum = 0.f;
    for (int j = lane; j < splits; j += 32) {
      const float m = part_ml[2 * (p0 + j)];
      const float w = (mx == -INFINITY || m == -INFINITY) ? 0.f : __expf(m - mx);
      wsm[j] = w;
      lsum += part_ml[2 * (p0 + j) + 1] * w;
    }
    lsum = warp_sum(lsum);
    if (lane == 0) lsum_sm = lsum;
  }
  __syncthreads();
  const float lsum = lsum_sm;
  for (int d = threadIdx.x; d < d_dim; d += blockDim.x) {
    float o = 0.f;
#pragma unroll 8
    for (int j = 0; j < splits; ++j) o += part_o[(p0 + j) * d_dim + d] * wsm[j];
    const int64_t oi = (int64_t(t) * hq + h) * d_dim + d;
    o = lsum > 0.f ? o / lsum : 0.f;
    out[oi] = f2bf(gate ? o * sigmoid_f(bf2f(gate[oi])) : o);
  }
}

// ---- prefill, head dims 16 to 64 ----

constexpr int kBq = 64, kBk = 64;

template <int D>
struct PrefillSmem {
  static constexpr int kLd = D + 8, kLdS = kBk + 4, kLdP = kBk + 8, kLdO = D + 4;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t(kBq) * kLd * 2;
  static constexpr size_t kV = kK + size_t(kBk) * kLd * 2;
  static constexpr size_t kS = kV + size_t(kBk) * kLd * 2;
  static constexpr size_t kP = kS + size_t(kBq) * kLdS * 4;
  static constexpr size_t kO = kP + size_t(kBq) * kLdP * 2;
  static constexpr size_t kStats = kO + size_t(kBq) * kLdO * 4;
  static constexpr size_t kBytes = kStats + 3 * kBq * 4;
};

template <int D>
__global__ void __launch_bounds__(128) attn_prefill_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kc,
                                                           const bf16* __restrict__ vc, DeviceBatch b,
                                                           const int32_t* tiles, int hq, int hkv, int bs,
                                                           float scale, bf16* out) {
  pdl_begin();
  using namespace nvcuda;
  using L = PrefillSmem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* ks = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* vs = reinterpret_cast<bf16*>(smem + L::kV);
  float* sc = reinterpret_cast<float*>(smem + L::kS);
  bf16* ps = reinterpret_cast<bf16*>(smem + L::kP);
  float* os = reinterpret_cast<float*>(smem + L::kO);
  float* row_m = reinterpret_cast<float*>(smem + L::kStats);
  float* row_l = row_m + kBq;
  float* row_c = row_l + kBq;

  const int s = tiles[2 * blockIdx.x], q0 = tiles[2 * blockIdx.x + 1];
  const int h = blockIdx.y, kvh = h / (hq / hkv);
  const int qlen = b.q_len[s], ctx = b.ctx_len[s], qstart = b.q_start[s];
  const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
  const int nq = min(kBq, qlen - q0);
  const int kv_end = ctx + q0 + nq;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kVecs = D / 8;

  for (int i = tid; i < kBq * kVecs; i += blockDim.x) {
    const int r = i / kVecs, c = i % kVecs;
    uint4 u = make_uint4(0, 0, 0, 0);
    if (r < nq) u = __ldg(reinterpret_cast<const uint4*>(q + (int64_t(qstart + q0 + r) * hq + h) * D + c * 8));
    *reinterpret_cast<uint4*>(qs + r * L::kLd + c * 8) = u;
  }
  for (int i = tid; i < kBq * D; i += blockDim.x) os[(i / D) * L::kLdO + i % D] = 0.f;
  if (tid < kBq) {
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.f;
  }
  const int r0 = warp * 16;
  for (int kt = 0; kt < kv_end; kt += kBk) {
    __syncthreads();
    for (int i = tid; i < kBk * kVecs; i += blockDim.x) {
      const int r = i / kVecs, c = i % kVecs, j = kt + r;
      uint4 ku = make_uint4(0, 0, 0, 0), vu = ku;
      if (j < kv_end) {
        const int64_t off = ((int64_t(bt[j / bs]) * bs + j % bs) * hkv + kvh) * D + c * 8;
        ku = __ldg(reinterpret_cast<const uint4*>(kc + off));
        vu = __ldg(reinterpret_cast<const uint4*>(vc + off));
      }
      *reinterpret_cast<uint4*>(ks + r * L::kLd + c * 8) = ku;
      *reinterpret_cast<uint4*>(vs + r * L::kLd + c * 8) = vu;
    }
    __syncthreads();
    // S = Q K^T for this warp's 16 query rows.
#pragma unroll
    for (int n = 0; n < kBk / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qs + r0 * L::kLd + kk * 16, L::kLd);
        wmma::load_matrix_sync(fb, ks + n * 16 * L::kLd + kk * 16, L::kLd);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(sc + r0 * L::kLdS + n * 16, acc, L::kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over this tile, one row at a time (two columns per lane).
    for (int rr = 0; rr < 16; ++rr) {
      const int r = r0 + rr;
      const int qpos = ctx + q0 + r;
      const int j0 = kt + lane, j1 = kt + lane + 32;
      float s0 = sc[r * L::kLdS + lane] * scale, s1 = sc[r * L::kLdS + lane + 32] * scale;
      if (r >= nq || j0 > qpos) s0 = -INFINITY;
      if (r >= nq || j1 > qpos) s1 = -INFINITY;
      const float mx = warp_max(fmaxf(s0, s1));
      const float m_old = row_m[r];
      const float m_new = fmaxf(m_old, mx);
      float p0 = 0.f, p1 = 0.f, corr = 1.f;
      if (m_new != -INFINITY) {
        p0 = __expf(s0 - m_new);
        p1 = __expf(s1 - m_new);
        corr = __expf(m_old - m_new);
      }
      const float sum = warp_sum(p0 + p1);
      ps[r * L::kLdP + lane] = f2bf(p0);
      ps[r * L::kLdP + lane + 32] = f2bf(p1);
      if (lane == 0) {
        row_l[r] = row_l[r] * corr + sum;
        row_m[r] = m_new;
        row_c[r] = corr;
      }
    }
    __syncwarp();
    for (int rr = 0; rr < 16; ++rr) {
      const int r = r0 + rr;
      const float c = row_c[r];
      for (int d = lane; d < D; d += 32) os[r * L::kLdO + d] *= c;
    }
    __syncwarp();
    // O += P V for this warp's rows.
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + r0 * L::kLdO + j * 16, L::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, ps + r0 * L::kLdP + kk * 16, L::kLdP);
        wmma::load_matrix_sync(fb, vs + kk * 16 * L::kLd + j * 16, L::kLd);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(os + r0 * L::kLdO + j * 16, acc, L::kLdO, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp();
  for (int rr = 0; rr < 16; ++rr) {
    const int r = r0 + rr;
    if (r >= nq) break;
    const float inv = row_l[r] > 0.f ? 1.f / row_l[r] : 0.f;
    bf16* o = out + (int64_t(qstart + q0 + r) * hq + h) * D;
    for (int d = lane; d < D; d += 32) o[d] = f2bf(os[r * L::kLdO + d] * inv);
  }
}

// ---- prefill, head dims 128 and 256: FlashAttention-2 style ----
//
// A block of 8 warps owns 128 query rows: kFaRows / hpb consecutive queries of each of hpb query
// heads that share one kv head (GQA packing: the block's K/V tiles, loaded once, serve all of
// them; hpb is 2 when the group allows). Warp w owns rows 16w..16w+15, all of one head. The keys
// stream through shared memory in tiles of kFaBk, two stages of cp.async (tile i + 1 loads while
// tile i is computed), gathered from the paged cache row by row with the page ids read one tile
// earlier still (a load that waits on the block table stalls the warp). Per tile a warp computes
// S = Q K^T with mma.sync m16n8k16 (bf16 in, fp32 accumulate; K fragments by ldmatrix, Q's from
// registers at D = 128 and from shared memory at D = 256, where registers are short), an online
// softmax on the S fragment in registers (exp2, the scale times log2 e folded into one FMA), and
// O += P V with P repacked from S's accumulator fragment into the A fragment and V's fragments
// by ldmatrix.trans. O and the row statistics stay in registers until the epilogue, which
// normalizes, applies the gate and stores through the warp's (no longer needed) Q rows in shared
// memory. Key tiles past a warp's last query are skipped; only tiles that cross the diagonal are
// masked. Blocks run longest first (the tile list is sorted by key count), so the causal
// imbalance leaves no tail.
constexpr int kFaWarps = 8, kFaRows = kFaWarps * 16, kFaBk = 64;

template <int D>
struct FaSmem {
  static constexpr int kLd = D + 8;  // row pitch in elements: 16 bytes of padding, ldmatrix without conflicts
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t(kFaRows) * kLd * 2;       // [2 stages][kFaBk][kLd]
  static constexpr size_t kV = kK + size_t(2) * kFaBk * kLd * 2;     // [2 stages][kFaBk][kLd]
  static constexpr size_t kBytes = kV + size_t(2) * kFaBk * kLd * 2;
};


// Four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i holds a
// lane's two elements of it (transposed: of its transpose).
__device__ __forceinline__ void ldsm_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// c[16x8] += a[16x16] b[16x8]. Lane l (g = l / 4, t = l % 4) holds a: (g, 2t..2t+1), (g + 8, 2t..),
// (g, 2t + 8..), (g + 8, 2t + 8..); b: (2t..2t+1, g), (2t + 8.., g); c: (g, 2t..2t+1), (g + 8, 2t..).
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// tiles: (sequence, first query) pairs, kFaRows / hpb queries each; block x serves tile
// x / (hq / hpb) for query heads hpb (x % (hq / hpb)) ... + hpb - 1. scale_log2 = scale * log2 e.
template <int D>
__global__ void __launch_bounds__(kFaWarps * 32, 1)
    attn_prefill_fa_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kc, const bf16* __restrict__ vc,
                           DeviceBatch b, const int32_t* tiles, int hq, int hkv, int bs, int hpb, float scale_log2,
                           const bf16* __restrict__ gate, bf16* __restrict__ out) {
  pdl_begin();
  using L = FaSmem<D>;
  constexpr int kLd = L::kLd, kChunks = D / 8;  // 16-byte chunks per row
  constexpr bool kQRegs = D <= 128;              // Q's fragments live in registers
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem + L::kQ);
  const uint32_t q_sm = smem_u32(smem + L::kQ), k_sm = smem_u32(smem + L::kK), v_sm = smem_u32(smem + L::kV);
  constexpr uint32_t kStage = kFaBk * kLd * 2;  // bytes of one K or V stage

  const int groups = hq / hpb, qt = kFaRows / hpb;  // blocks per tile, queries per block
  const int tile = blockIdx.x / groups, h0 = (blockIdx.x % groups) * hpb;
  const int s = tiles[2 * tile], q0 = tiles[2 * tile + 1];
  const int kvh = h0 / (hq / hkv);
  const int qlen = b.q_len[s], ctx = b.ctx_len[s], qstart = b.q_start[s];
  const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
  const int kv_end = ctx + q0 + min(qt, qlen - q0);  // keys of the block's last query, plus one
  const int n_tiles = (kv_end + kFaBk - 1) / kFaBk;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Q rows (zeros past the sequence), then key/value tile 0.
  for (int i = tid; i < kFaRows * kChunks; i += kFaWarps * 32) {
    const int r = i / kChunks, c = i % kChunks, qi = q0 + r % qt, h = h0 + r / qt;
    const bool ok = qi < qlen;
    cp_async16(q_sm + (r * kLd + c * 8) * 2, q + (ok ? (int64_t(qstart + qi) * hq + h) * D + c * 8 : 0), ok);
  }
  // Page ids are read a tile ahead of the rows that need them: lane l of every warp looks up keys
  // kt + l and kt + l + 32 (pg, rem: page id and row in the page; -1 past kv_end) of the tile after
  // the one being loaded, and a tile's loads take each row's cache slot from its lane by a
  // shuffle, so no load waits on the block table.
  static_assert(kFaBk == 64 && 32 % (kFaWarps * 32 / kChunks) == 0, "two keys a lane; passes split 32");
  constexpr int kRowStep = kFaWarps * 32 / kChunks;  // rows the block loads side by side
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
    for (int i = 0; i < kFaBk / kRowStep; ++i) {
      const int r = rb + i * kRowStep;
      const int sl = __shfl_sync(0xffffffffu, slot[i * kRowStep / 32], r & 31);
      const int64_t off = sl >= 0 ? (int64_t(sl) * hkv + kvh) * D + c * 8 : 0;
      const uint32_t dst = stage * kStage + (r * kLd + c * 8) * 2;
      cp_async16(k_sm + dst, kc + off, sl >= 0);
      cp_async16(v_sm + dst, vc + off, sl >= 0);
    }
    cp_commit();
  };
  fetch_pages(0);
  load_kv(0);
  fetch_pages(kFaBk);

  // This warp's 16 rows: head h, queries qw..qw+15 (positions ctx + qw ...). Lane l holds rows
  // g = l / 4 and g + 8 of the accumulators, columns 2t, 2t + 1 (t = l % 4) of each 8-column block.
  const int g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16, h = h0 + r0 / qt, qw = q0 + r0 % qt;
  const int pos_lo = ctx + qw, pos_hi = pos_lo + 15;
  // ldmatrix row addresses (bytes): A of Q (rows lane % 16, columns 8 (lane / 16)), B of K (keys
  // lane % 8 + 8 (lane / 16), columns 8 (lane / 8 % 2)), B of V transposed (keys lane % 8 +
  // 8 (lane / 8 % 2), columns 8 (lane / 16)).
  const uint32_t q_lane = q_sm + ((r0 + (lane & 15)) * kLd + (lane >> 4) * 8) * 2;
  const uint32_t k_lane = k_sm + (((lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_lane = v_sm + (((lane & 7) + (((lane >> 3) & 1) << 3)) * kLd + (lane >> 4) * 8) * 2;

  uint32_t qf[kQRegs ? D / 16 : 1][4];
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8: running max (of raw S), lane's partial sum

  for (int it = 0; it < n_tiles; ++it) {
    const int kt = it * kFaBk, stage = it & 1;
    cp_wait<0>();
    __syncthreads();  // tile `it` landed for every thread; every warp is done with tile it - 1's stage
    if (it + 1 < n_tiles) {
      load_kv(stage ^ 1);
      fetch_pages(kt + 2 * kFaBk);
    }
    if constexpr (kQRegs) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(qf[kk], q_lane + kk * 32);
      }
    }
    if (kt > pos_hi) continue;  // every key of the tile is after this warp's queries

    // S = Q K^T, 16 x kFaBk.
    float sc[kFaBk / 8][4];
#pragma unroll
    for (int n = 0; n < kFaBk / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
    const uint32_t k_tile = k_lane + stage * kStage, v_tile = v_lane + stage * kStage;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if constexpr (kQRegs) {
        a[0] = qf[kk][0], a[1] = qf[kk][1], a[2] = qf[kk][2], a[3] = qf[kk][3];
      } else {
        ldsm_x4(a, q_lane + kk * 32);
      }
#pragma unroll
      for (int np = 0; np < kFaBk / 16; ++np) {
        uint32_t bk[4];
        ldsm_x4(bk, k_tile + np * 16 * kLd * 2 + kk * 32);
        mma_bf16(sc[2 * np], a, bk[0], bk[1]);
        mma_bf16(sc[2 * np + 1], a, bk[2], bk[3]);
      }
    }
    // Causal mask, only where the tile reaches past the warp's first query.
    if (kt + kFaBk - 1 > pos_lo) {
#pragma unroll
      for (int n = 0; n < kFaBk / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kt + n * 8 + 2 * t + (e & 1) > pos_lo + g + (e >> 1) * 8) sc[n][e] = -INFINITY;
        }
      }
    }
    // Online softmax: the new row maxima over the quad's lanes, the old sums and O rescaled
    // (skipped while no row's maximum of the warp grew).
    float corr[2];
    bool grew = false;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = m[rr];
#pragma unroll
      for (int n = 0; n < kFaBk / 8; ++n) mx = fmaxf(mx, fmaxf(sc[n][2 * rr], sc[n][2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == -INFINITY ? 0.f : mx * scale_log2;  // a row with no key yet stays at 0
      corr[rr] = fast_exp2(m[rr] * scale_log2 - base);
      grew |= mx != m[rr];
      m[rr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kFaBk / 8; ++n) {
        sc[n][2 * rr] = fast_exp2(fmaf(sc[n][2 * rr], scale_log2, -base));
        sc[n][2 * rr + 1] = fast_exp2(fmaf(sc[n][2 * rr + 1], scale_log2, -base));
        sum += sc[n][2 * rr] + sc[n][2 * rr + 1];
      }
      l[rr] = l[rr] * corr[rr] + sum;
    }
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= corr[0], o[n][1] *= corr[0];
        o[n][2] *= corr[1], o[n][3] *= corr[1];
      }
    }
    // O += P V: S's accumulator blocks 2kk and 2kk + 1 are P's A fragment for keys 16kk..16kk+15.
#pragma unroll
    for (int kk = 0; kk < kFaBk / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16x2(sc[2 * kk][0], sc[2 * kk][1]), pack_bf16x2(sc[2 * kk][2], sc[2 * kk][3]),
                             pack_bf16x2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                             pack_bf16x2(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t bv[4];
        ldsm_x4_trans(bv, v_tile + kk * 16 * kLd * 2 + np * 32);
        mma_bf16(o[2 * np], a, bv[0], bv[1]);
        mma_bf16(o[2 * np + 1], a, bv[2], bv[3]);
      }
    }
  }

  // Epilogue: O / l (the sums completed over the quad) as bf16 into this warp's Q rows, then out
  // (times sigmoid(gate)) in 16-byte rows.
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    inv[rr] = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
  }
  __syncwarp();
  bf16* ow = qs + r0 * kLd;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    *reinterpret_cast<uint32_t*>(ow + g * kLd + n * 8 + 2 * t) = pack_bf16x2(o[n][0] * inv[0], o[n][1] * inv[0]);
    *reinterpret_cast<uint32_t*>(ow + (g + 8) * kLd + n * 8 + 2 * t) =
        pack_bf16x2(o[n][2] * inv[1], o[n][3] * inv[1]);
  }
  __syncwarp();
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    if (qw + r >= qlen) break;
    const int64_t off = (int64_t(qstart + qw + r) * hq + h) * D + c * 8;
    uint4 u = *reinterpret_cast<const uint4*>(ow + r * kLd + c * 8);
    if (gate) {
      float f[8], gf[8];
      unpack8(u, f);
      unpack8(__ldg(reinterpret_cast<const uint4*>(gate + off)), gf);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] *= sigmoid_f(gf[e]);
      u = pack8(f);
    }
    *reinterpret_cast<uint4*>(out + off) = u;
  }
}

// Which kernel runs the prefill at head dims 128 and 256: the wgmma one (attention_wgmma.cu), or
// the FlashAttention-2 one here. Both take the same tile list of 128 query rows a block.
constexpr bool kPrefillOnWgmma = true;

// The prefill at head dims 128 and 256: two query heads a block where the GQA group allows, the
// tiles longest (most keys) first; the gate (null: none) applied by the kernel's epilogue.
template <int D>
void launch_prefill_fa(const bf16* qp, const bf16* kp, const bf16* vp, const DeviceBatch& db,
                       const ForwardBatch& batch, int hq, int hkv, int bs, float scale, const bf16* gp, bf16* op) {
  const int hpb = (hq / hkv) % 2 == 0 ? 2 : 1, qt = kFaRows / hpb;
  struct Tile {
    int32_t seq, q0, keys;
  };
  std::vector<Tile> order;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqInBatch& sq = batch.seqs[s];
    for (int q0 = 0; q0 < sq.q_len; q0 += qt) {
      order.push_back({int32_t(s), q0, sq.ctx_len + std::min(sq.q_len, q0 + qt)});
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const Tile& a, const Tile& b) { return a.keys > b.keys; });
  std::vector<int32_t> tiles;
  for (const Tile& tl : order) {
    tiles.push_back(tl.seq);
    tiles.push_back(tl.q0);
  }
  Tensor keep;
  const int32_t* d_tiles = device_ints(tiles, &keep);
  if (kPrefillOnWgmma) {
    attn_prefill_wgmma(D, qp, kp, vp, db, d_tiles, unsigned(order.size()), hq, hkv, bs, hpb,
                       scale * 1.4426950408889634f, gp, op);
    return;
  }
  using L = FaSmem<D>;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(attn_prefill_fa_kernel<D>), L::kBytes, "paged_attention");
    return true;
  }();
  (void)kAttr;
  const unsigned grid = unsigned(order.size()) * unsigned(hq / hpb);
  launch_pdl(attn_prefill_fa_kernel<D>, grid, kFaWarps * 32, L::kBytes, qp, kp, vp, db, d_tiles, hq, hkv, bs, hpb,
             scale * 1.4426950408889634f, gp, op);
  check_launch("attn_prefill_fa");
}

// The WMMA prefill (head dims 16 to 64), one block per (64-query tile, query head).
template <int D>
void launch_prefill_wmma(const bf16* qp, const bf16* kp, const bf16* vp, const DeviceBatch& db,
                         const ForwardBatch& batch, int hq, int hkv, int bs, float scale, bf16* op) {
  std::vector<int32_t> tiles;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    for (int q0 = 0; q0 < batch.seqs[s].q_len; q0 += kBq) {
      tiles.push_back(int32_t(s));
      tiles.push_back(q0);
    }
  }
  Tensor keep;
  const int32_t* d_tiles = device_ints(tiles, &keep);
  using L = PrefillSmem<D>;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(attn_prefill_kernel<D>), L::kBytes, "paged_attention");
    return true;
  }();
  (void)kAttr;
  const dim3 grid(unsigned(tiles.size() / 2), unsigned(hq));
  launch_pdl(attn_prefill_kernel<D>, grid, 128, L::kBytes, qp, kp, vp, db, d_tiles, hq, hkv, bs, scale, op);
  check_launch("attn_prefill");
}

// Decode with the new keys and values stored inside, or (prefill) after kv_write_kernel; the gate
// (null: none) applied by decode's and the FlashAttention-2 kernel's output writes, else after
// the attention.
template <int D>
void launch_attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const DeviceBatch& db,
                      const ForwardBatch& batch, const NewKv& nk, int hq, int hkv, int bs, float scale,
                      const Tensor* gate, const Tensor& out) {
  const auto* qp = static_cast<const bf16*>(q.raw());
  const bf16* gp = gate ? static_cast<const bf16*>(gate->raw()) : nullptr;
  const auto* kp = static_cast<const bf16*>(kc.raw());
  const auto* vp = static_cast<const bf16*>(vc.raw());
  auto* op = static_cast<bf16*>(out.raw());
  const int nseq = db.num_seqs;
  if (db.all_single_token) {
    const int base = nseq * hkv;
    // Enough splits to give every SM two blocks, but no fewer than kMinSplitTokens keys per split
    // at this batch's longest context: short splits cost more in the combine than they save.
    int longest = 0;
    for (const SeqInBatch& sq : batch.seqs) longest = std::max(longest, sq.ctx_len + sq.q_len);
    const int by_length = std::max(1, (longest + kMinSplitTokens - 1) / kMinSplitTokens);
    const int splits = std::clamp(std::min((2 * sm_count() + base - 1) / base, by_length), 1, kMaxSplits);
    Tensor part_o, part_ml;
    if (splits > 1) {
      part_o = scratch({int64_t(nseq) * hq * splits * D}, DType::kF32);
      part_ml = scratch({int64_t(nseq) * hq * splits * 2}, DType::kF32);
    }
    const dim3 grid(splits, hkv, nseq);
    launch_pdl(attn_decode_kernel<D>, grid, kDecodeWarps * 32, 0, qp, kp, vp, nk, db, hq, hkv, bs, scale, splits,
               gp, splits > 1 ? part_o.data<float>() : nullptr, splits > 1 ? part_ml.data<float>() : nullptr, op);
    check_launch("attn_decode");
    if (splits > 1) {
      launch_pdl(attn_combine_kernel, unsigned(nseq * hq), std::clamp(D, 32, 256), 0,   // a whole first warp
          part_o.data<float>(), part_ml.data<float>(), db, hq, D, splits, gp, op);
      check_launch("attn_combine");
    }
    return;
  }
  launch_pdl(kv_write_kernel, unsigned(batch.token_ids.size()), 128, 0, nk.k, nk.v, nk.k_cache, nk.v_cache, db,
             int64_t(hkv) * D, bs);
  check_launch("kv_write");
  if constexpr (D == 128 || D == 256) {
    launch_prefill_fa<D>(qp, kp, vp, db, batch, hq, hkv, bs, scale, gp, op);
  } else {
    launch_prefill_wmma<D>(qp, kp, vp, db, batch, hq, hkv, bs, scale, op);
    if (gate) cuda::mul_sigmoid(out, gate->reshape(out.shape()));
  }
}

void run_paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                         const Tensor& v_cache, const ForwardBatch& batch, float scale, const Tensor* gate,
                         const Tensor& out) {
  for (const Tensor* t : {&q, &k, &v, &k_cache, &v_cache, &out}) {
    expect_dtype(*t, DType::kBF16, "paged_attention", "q, k, v, caches and out");
  }
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
  STRATA_CHECK(q.ndim() == 3 && k.shape() == Shape({t, hkv, d}) && v.shape() == k.shape() &&
                   out.shape() == q.shape() && k_cache.ndim() == 4 && k_cache.dim(2) == hkv &&
                   k_cache.dim(3) == d && v_cache.shape() == k_cache.shape() && hq % hkv == 0,
               "paged_attention: q ", q.describe(), " k ", k.describe(), " v ", v.describe(), " caches ",
               k_cache.describe(), " out ", out.describe());
  STRATA_CHECK(int64_t(batch.token_ids.size()) == t, "paged_attention: batch has ", batch.token_ids.size(),
               " tokens, q has ", t);
  if (gate) {
    expect_dtype(*gate, DType::kBF16, "paged_attention_gated", "gate");
    STRATA_CHECK(gate->numel() == out.numel(), "paged_attention_gated: gate ", gate->describe(), " for out ",
                 out.describe());
  }
  if (t == 0) return;
  const int bs = int(k_cache.dim(1));
  const DeviceBatch& db = device_batch(batch);
  const NewKv nk{static_cast<const bf16*>(k.raw()), static_cast<const bf16*>(v.raw()),
                 static_cast<bf16*>(k_cache.raw()), static_cast<bf16*>(v_cache.raw())};
  const int h = int(hq), kv = int(hkv);
  switch (d) {
    case 16: return launch_attention<16>(q, k_cache, v_cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 32: return launch_attention<32>(q, k_cache, v_cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 64: return launch_attention<64>(q, k_cache, v_cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 128: return launch_attention<128>(q, k_cache, v_cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 256: return launch_attention<256>(q, k_cache, v_cache, db, batch, nk, h, kv, bs, scale, gate, out);
    default: fail("paged_attention: head_dim ", d, " is not supported on CUDA (16, 32, 64, 128 or 256)");
  }
}

}  // namespace

void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                     const Tensor& v_cache, const ForwardBatch& batch, float scale, const Tensor& out) {
  OpTimer timer_("paged_attention");
  run_paged_attention(q, k, v, k_cache, v_cache, batch, scale, nullptr, out);
}

void paged_attention_gated(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                           const Tensor& v_cache, const ForwardBatch& batch, float scale, const Tensor& gate,
                           const Tensor& out) {
  OpTimer timer_("paged_attention_gated");
  run_paged_attention(q, k, v, k_cache, v_cache, batch, scale, &gate, out);
}

}  // namespace strata::ops::cuda
