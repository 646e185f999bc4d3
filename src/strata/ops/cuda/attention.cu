// CUDA: causal GQA attention over the paged KV cache, either
//  - decode (every sequence has one new token): split-K over the sequence's pages, one block per
//    (split, kv head, sequence), with a second kernel merging the splits' partial softmaxes; for
//    head dims 128 and 256 (bf16 or FP8 pages) the tensor-core kernel of attention_decode.cu,
//    else the CUDA-core one below (a warp per query head of the kv head). The new token's key and
//    value (bf16 pages) are read from k and v and stored into their page by the block whose split
//    holds them; or
//  - prefill (any batch): the new keys and values are written into their pages first, then
//    FlashAttention-style tiles walk the keys with an online softmax: at head dims 128 and 256 the
//    wgmma kernel (attention_wgmma.cu), at the smaller ones tiles of 64 queries x 64 keys with
//    WMMA through shared memory.
// paged_attention_gated's sigmoid gate is applied where decode and the head dim 128 / 256
// prefill write their output (after the small head dims' prefill, by mul_sigmoid).
// An FP8 cache (--kv-cache-dtype fp8, kv_fp8.cuh): the new keys and values are encoded into their
// pages first (decode too), then decode reads the codes and scales; prefill decodes the pages
// its sequences see into bfloat16 scratch pages (exact: e4m3 times a power of two fits bf16) and
// runs the kernels above over them, so every token sees the keys and values as stored.
#include <mma.h>

#include <algorithm>
#include <vector>

#include "strata/ops/cuda/attention_decode.h"
#include "strata/ops/cuda/attention_wgmma.h"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/kv_fp8.cuh"
#include "strata/ops/cuda/mma_fragment.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"

namespace strata::ops::cuda {
namespace {

constexpr int kMaxSplits = 64;
// Batches of at most this many tokens a sequence (a speculative verify's) take the decode
// kernel a row at a time.
constexpr int kDecodeRowsMax = 16;

// The cache row (page * bs + position in the page) of batch row t; -1 for padding rows, which
// never touch the cache.
__device__ __forceinline__ int64_t cache_row_of(const DeviceBatch& b, int t, int bs) {
  const int s = b.token_seq[t];
  const int pos = b.ctx_len[s] + (t - b.q_start[s]);
  const int page = b.block_table[int64_t(s) * *b.bt_stride + pos / bs];
  return page < 0 ? -1 : int64_t(page) * bs + pos % bs;
}

__global__ void kv_write_kernel(const bf16* k, const bf16* v, bf16* kc, bf16* vc, DeviceBatch b, int64_t row,
                                int bs) {
  pdl_begin();
  const int t = blockIdx.x;
  const int64_t slot = cache_row_of(b, t, bs);
  if (slot < 0) return;
  const int64_t dst = slot * row, src = int64_t(t) * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kc[dst + i] = k[src + i];
    vc[dst + i] = v[src + i];
  }
}

// One block a token, a warp a (kv head, k or v) vector: its amax, scale byte and codes.
__global__ void kv_write_fp8_kernel(const bf16* k, const bf16* v, uint8_t* kc, uint8_t* vc, uint8_t* ks,
                                    uint8_t* vs, DeviceBatch b, int hkv, int d, int bs) {
  pdl_begin();
  const int t = blockIdx.x;
  const int64_t slot = cache_row_of(b, t, bs);
  if (slot < 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int job = warp; job < 2 * hkv; job += warps) {
    const int h = job >> 1;
    const bool is_v = job & 1;
    const bf16* x = (is_v ? v : k) + (int64_t(t) * hkv + h) * d;
    float amax = 0.f;
    for (int i = lane; i < d; i += 32) amax = fmaxf(amax, fabsf(bf2f(x[i])));
    amax = warp_max(amax);
    const uint8_t sb = kv_fp8_scale_byte(amax);
    const float inv = ldexpf(1.f, 127 - int(sb));
    uint8_t* codes = (is_v ? vc : kc) + (slot * hkv + h) * d;
    for (int i = lane; i < d; i += 32) codes[i] = kv_fp8_code(bf2f(x[i]) * inv);
    if (lane == 0) (is_v ? vs : ks)[slot * hkv + h] = sb;
  }
}

// A prefill's view of an FP8 cache: scratch page p (rows p * bs ..) gets the decoded keys and
// values of pool page src_page[p]. One block a row.
__global__ void kv_decode_pages_kernel(const uint8_t* kc, const uint8_t* vc, const uint8_t* ks, const uint8_t* vs,
                                       const int32_t* src_page, int bs, int hkv, int d, bf16* ko, bf16* vo) {
  pdl_begin();
  const int64_t row = blockIdx.x;
  const int page = src_page[row / bs];
  if (page < 0) return;
  const int64_t src = int64_t(page) * bs + row % bs;
  const int n = hkv * d;  // a multiple of 8: eight codes a thread, one 8-byte load
  for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
    const int64_t e = src * hkv + i / d;
    const int64_t c = src * n + i;
    float f[8];
    kv_fp8_unpack8(*reinterpret_cast<const uint2*>(kc + c), kv_fp8_scale(ks[e]), f);
    *reinterpret_cast<uint4*>(ko + row * n + i) = pack8(f);
    kv_fp8_unpack8(*reinterpret_cast<const uint2*>(vc + c), kv_fp8_scale(vs[e]), f);
    *reinterpret_cast<uint4*>(vo + row * n + i) = pack8(f);
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

// Decode's new keys and values [T, Hkv, D], and the caches they are stored into (bf16 pages), or
// (FP8 pages) the caches with their scales, the new entries already stored.
struct NewKv {
  const bf16* k;
  const bf16* v;
  void* k_cache;
  void* v_cache;
  uint8_t* k_scale;  // FP8 pages only
  uint8_t* v_scale;
};

// kFp8: the pages hold e4m3 codes and a scale byte a vector (a lane's kDecodeVec codes are one
// 16-byte load), and every key, the new one too, is read from them.
// kRows: a block per (split, kv head, batch row) instead of a sequence: row t of sequence s
// attends causally to the ctx_len[s] + (t - q_start[s]) + 1 keys up to its own, all read from the
// pages, where the rows' new keys and values were stored before (a speculative verify's few
// tokens a sequence: as parallel over the context as decode).
template <int D, bool kFp8, bool kRows>
__global__ void __launch_bounds__(kDecodeWarps * 32) attn_decode_kernel(
    const bf16* __restrict__ q, const void* __restrict__ kc_raw, const void* __restrict__ vc_raw, NewKv nk,
    DeviceBatch b, int hq, int hkv, int bs, float scale, int splits, const bf16* gate, float* part_o,
    float* part_ml, bf16* out) {
  pdl_begin();
  constexpr int G = D / kDecodeVec, TPW = 32 / G;
  const int split = blockIdx.x, kvh = blockIdx.y;
  const int group = hq / hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lig = lane % G, grp = lane / G;
  const DecodeQuery query = decode_query(b, blockIdx.z, kRows);
  const int s = query.seq, t = query.row, seq_len = query.keys;
  const int* bt = b.block_table + int64_t(s) * *b.bt_stride;
  const bool padding = bt[0] < 0;
  // The splits this sequence uses: no fewer than kDecodeMinSplitTokens keys each, read here from its
  // length on the device (a captured graph replays at any context); the grid's others exit.
  const int used = decode_used_splits(seq_len, splits);
  if (split >= used) return;
  const int chunk = (seq_len + used - 1) / used;
  const int t0 = padding ? 0 : split * chunk, t1 = padding ? 0 : min(seq_len, t0 + chunk);
  // The new token (position `last`): its key and value come from nk (never from the cache), and
  // the one block whose split holds it stores them into the cache.
  const bf16* kc = static_cast<const bf16*>(kc_raw);
  const bf16* vc = static_cast<const bf16*>(vc_raw);
  const uint8_t* kc8 = static_cast<const uint8_t*>(kc_raw);
  const uint8_t* vc8 = static_cast<const uint8_t*>(vc_raw);
  const int last = kFp8 || kRows ? -1 : seq_len - 1;  // FP8, rows: the new tokens are read from their pages
  const int64_t new_off = (int64_t(t) * hkv + kvh) * D;
  if (!padding) {
    decode_store_new_kv<D>(nk.k + new_off, nk.v + new_off, static_cast<bf16*>(nk.k_cache),
                           static_cast<bf16*>(nk.v_cache), bt, bs, hkv, kvh, last, split, chunk);
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
      float ksc[kUnroll], vsc[kUnroll];  // FP8: the vectors' scales
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int tok = base + u * TPW + grp;
        if constexpr (kFp8) {
          ksc[u] = vsc[u] = 0.f;
          kv[u][1] = kv[u][3] = make_uint4(0, 0, 0, 0);
          if (page[u] >= 0) {
            const int64_t e = (int64_t(page[u]) * bs + tok % bs) * hkv + kvh;
            kv[u][0] = __ldg(reinterpret_cast<const uint4*>(kc8 + e * D + lig * kDecodeVec));
            kv[u][2] = __ldg(reinterpret_cast<const uint4*>(vc8 + e * D + lig * kDecodeVec));
            ksc[u] = kv_fp8_scale(__ldg(nk.k_scale + e));
            vsc[u] = kv_fp8_scale(__ldg(nk.v_scale + e));
          } else {
            kv[u][0] = kv[u][2] = make_uint4(0, 0, 0, 0);
          }
          continue;
        }
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
        if constexpr (kFp8) {
          kv_fp8_unpack16(kv[u][0], ksc[u], kf);
        } else {
          unpack8(kv[u][0], kf);
          unpack8(kv[u][1], kf + 8);
        }
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
        if constexpr (kFp8) {
          kv_fp8_unpack16(kv[u][2], vsc[u], vf);
        } else {
          unpack8(kv[u][2], vf);
          unpack8(kv[u][3], vf + 8);
        }
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
      if (used == 1) {
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
        const int64_t p = (int64_t(kRows ? t : s) * hq + h) * splits + split;
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

// One block of 256 threads per (sequence or batch row, query head): d_dim / 4 lanes of four
// output elements times 1024 / d_dim groups of splits. Each thread merges its group's splits
// (split j: running max, mass and unnormalised output) with the loads of several splits in flight,
// then the groups' results merge in shared memory: the splits are read in parallel, not one after
// another, so a long context's many splits cost little more than a short one's.
constexpr int kCombineThreads = 256;
__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(const float* __restrict__ part_o,
                                                                      const float* __restrict__ part_ml, DeviceBatch b,
                                                                      int hq, int d_dim, int splits, bool rows,
                                                                      const bf16* gate, bf16* out) {
  pdl_begin();
  __shared__ float4 acc_sm[kCombineThreads];
  __shared__ float m_sm[kCombineThreads], l_sm[kCombineThreads];
  const int i = blockIdx.x / hq, h = blockIdx.x % hq;  // i: a sequence, or (rows) a batch row
  const DecodeQuery query = decode_query(b, i, rows);
  const int t = query.row;
  const int used = decode_used_splits(query.keys, splits);
  if (used == 1) return;  // the decode kernel wrote this output
  const int64_t p0 = (int64_t(i) * hq + h) * splits;
  const int lanes = d_dim / 4, groups = max(1, kCombineThreads / lanes);
  const int tid = threadIdx.x, g = tid / lanes;
  const int v = tid % lanes;
  float m = -INFINITY, l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (g < groups) {
#pragma unroll 4
    for (int j = g; j < used; j += groups) {
      const float mj = part_ml[2 * (p0 + j)], lj = part_ml[2 * (p0 + j) + 1];
      const float4 oj = *reinterpret_cast<const float4*>(part_o + (p0 + j) * d_dim + 4 * v);
      const float mn = fmaxf(m, mj);
      if (mn == -INFINITY) continue;  // nothing seen yet
      const float a = __expf(m - mn), c = __expf(mj - mn);  // exp(-inf) = 0
      acc.x = acc.x * a + oj.x * c, acc.y = acc.y * a + oj.y * c;
      acc.z = acc.z * a + oj.z * c, acc.w = acc.w * a + oj.w * c;
      l = l * a + lj * c;
      m = mn;
    }
    acc_sm[tid] = acc, m_sm[tid] = m, l_sm[tid] = l;
  }
  __syncthreads();
  if (g == 0) {
    float mx = -INFINITY;
    for (int k = 0; k < groups; ++k) mx = fmaxf(mx, m_sm[k * lanes + v]);
    float lsum = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
    if (mx != -INFINITY) {
      for (int k = 0; k < groups; ++k) {
        const int at = k * lanes + v;
        const float w = __expf(m_sm[at] - mx);
        const float4 ak = acc_sm[at];
        o[0] += ak.x * w, o[1] += ak.y * w, o[2] += ak.z * w, o[3] += ak.w * w;
        lsum += l_sm[at] * w;
      }
    }
    const int64_t o0 = (int64_t(t) * hq + h) * d_dim + 4 * v;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float r = lsum > 0.f ? o[e] / lsum : 0.f;
      out[o0 + e] = f2bf(gate ? r * sigmoid_f(bf2f(gate[o0 + e])) : r);
    }
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

  const int s = tiles ? tiles[2 * blockIdx.x] : blockIdx.x, q0 = tiles ? tiles[2 * blockIdx.x + 1] : 0;
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
      // Page -1: a padding sequence of a captured verify graph (its keys stay zeros).
      const int page = j < kv_end ? bt[j / bs] : -1;
      if (page >= 0) {
        const int64_t off = ((int64_t(page) * bs + j % bs) * hkv + kvh) * D + c * 8;
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

// Whether every sequence's queries fit one tile of `rows`: the kernels then take tile i as sequence
// i's (a null tile list), so the launch depends on the batch's shape alone and nothing is
// uploaded from the host, which lets a CUDA graph capture a speculative verify step.
bool one_tile_each(const ForwardBatch& batch, int rows) {
  for (const SeqInBatch& s : batch.seqs) {
    if (s.q_len > rows) return false;
  }
  return true;
}

// The prefill at head dims 128 and 256: two query heads a block where the GQA group allows, the
// tiles longest (most keys) first; the gate (null: none) applied by the kernel's epilogue.
template <int D>
void launch_prefill_wgmma(const bf16* qp, const bf16* kp, const bf16* vp, int64_t cache_rows, const DeviceBatch& db,
                          const ForwardBatch& batch, int hq, int hkv, int bs, float scale, const bf16* gp, bf16* op) {
  const int hpb = (hq / hkv) % 2 == 0 ? 2 : 1, qt = kWgmmaPrefillRows / hpb;
  if (one_tile_each(batch, qt)) {  // a verify step's few tokens a sequence: no host list
    attn_prefill_wgmma(D, qp, kp, vp, cache_rows, db, nullptr, unsigned(batch.seqs.size()), hq, hkv, bs, hpb,
                       scale * kLog2e, gp, op);
    return;
  }
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
  attn_prefill_wgmma(D, qp, kp, vp, cache_rows, db, d_tiles, unsigned(order.size()), hq, hkv, bs, hpb,
                     scale * kLog2e, gp, op);
}

// The WMMA prefill (head dims 16 to 64), one block per (64-query tile, query head).
template <int D>
void launch_prefill_wmma(const bf16* qp, const bf16* kp, const bf16* vp, const DeviceBatch& db,
                         const ForwardBatch& batch, int hq, int hkv, int bs, float scale, bf16* op) {
  std::vector<int32_t> tiles;
  const bool one_each = one_tile_each(batch, kBq);  // then no host list (see one_tile_each)
  for (size_t s = 0; s < batch.seqs.size() && !one_each; ++s) {
    for (int q0 = 0; q0 < batch.seqs[s].q_len; q0 += kBq) {
      tiles.push_back(int32_t(s));
      tiles.push_back(q0);
    }
  }
  Tensor keep;
  const int32_t* d_tiles = one_each ? nullptr : device_ints(tiles, &keep);
  using L = PrefillSmem<D>;
  static const bool kAttr = [] {
    allow_shared_memory(reinterpret_cast<const void*>(attn_prefill_kernel<D>), L::kBytes, "paged_attention");
    return true;
  }();
  (void)kAttr;
  const dim3 grid(unsigned(one_each ? batch.seqs.size() : tiles.size() / 2), unsigned(hq));
  launch_pdl(attn_prefill_kernel<D>, grid, 128, L::kBytes, qp, kp, vp, db, d_tiles, hq, hkv, bs, scale, op);
  check_launch("attn_prefill");
}

// A prefill over an FP8 cache: the pages its sequences see, decoded into bfloat16 scratch pages
// numbered sequence after sequence, and a block table over them (in `keep`).
struct DecodedPages {
  Tensor k, v, keep;
  DeviceBatch db;
  int64_t rows = 0;
};

DecodedPages decode_visible_pages(const NewKv& nk, const DeviceBatch& db, const ForwardBatch& batch, int hkv, int d,
                                  int bs) {
  int stride = 1;
  for (const SeqInBatch& sq : batch.seqs) stride = std::max(stride, (sq.ctx_len + sq.q_len + bs - 1) / bs);
  std::vector<int32_t> table(1 + batch.seqs.size() * size_t(stride), -1);  // [stride, block table]
  table[0] = stride;
  std::vector<int32_t> src;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqInBatch& sq = batch.seqs[s];
    const int pages = (sq.ctx_len + sq.q_len + bs - 1) / bs;
    for (int j = 0; j < pages; ++j) {
      table[1 + s * size_t(stride) + size_t(j)] = int32_t(src.size());
      src.push_back(size_t(j) < sq.block_table.size() ? sq.block_table[size_t(j)] : -1);
    }
  }
  DecodedPages out;
  out.rows = std::max<int64_t>(1, int64_t(src.size())) * bs;
  out.k = scratch({out.rows, hkv, d}, DType::kBF16);
  out.v = scratch({out.rows, hkv, d}, DType::kBF16);
  Tensor keep_src;
  const int32_t* d_src = device_ints(src, &keep_src);
  const int32_t* d_table = device_ints(table, &out.keep);
  if (!src.empty()) {
    launch_pdl(kv_decode_pages_kernel, unsigned(src.size() * size_t(bs)), 128, 0,
               static_cast<const uint8_t*>(nk.k_cache), static_cast<const uint8_t*>(nk.v_cache),
               static_cast<const uint8_t*>(nk.k_scale), static_cast<const uint8_t*>(nk.v_scale), d_src, bs, hkv, d,
               static_cast<bf16*>(out.k.raw()), static_cast<bf16*>(out.v.raw()));
    check_launch("kv_decode_pages");
  }
  out.db = db;
  out.db.bt_stride = d_table;
  out.db.block_table = d_table + 1;
  return out;
}

// The new keys and values k, v [T, Hkv, D] (bf16) and the cache they go into.
NewKv new_kv(const Tensor& k, const Tensor& v, const PagedKv& cache) {
  return {static_cast<const bf16*>(k.raw()), static_cast<const bf16*>(v.raw()), cache.k.raw(), cache.v.raw(),
          cache.fp8() ? static_cast<uint8_t*>(cache.k_scale.raw()) : nullptr,
          cache.fp8() ? static_cast<uint8_t*>(cache.v_scale.raw()) : nullptr};
}

// The t new keys and values into their pages (kv_write_kernel, or kv_write_fp8_kernel's codes and scales).
void write_new_kv(const NewKv& nk, const DeviceBatch& db, unsigned t, int hkv, int d, int bs, bool fp8) {
  if (fp8) {
    launch_pdl(kv_write_fp8_kernel, t, 128, 0, nk.k, nk.v, static_cast<uint8_t*>(nk.k_cache),
               static_cast<uint8_t*>(nk.v_cache), nk.k_scale, nk.v_scale, db, hkv, d, bs);
    check_launch("kv_write_fp8");
  } else {
    launch_pdl(kv_write_kernel, t, 128, 0, nk.k, nk.v, static_cast<bf16*>(nk.k_cache), static_cast<bf16*>(nk.v_cache),
               db, int64_t(hkv) * d, bs);
    check_launch("kv_write");
  }
}

// Decode with the new keys and values stored inside (bf16 pages), or after kv_write_fp8_kernel
// (FP8 pages); prefill after kv_write_kernel or kv_write_fp8_kernel, over the pages or (FP8)
// their decoded copies. The gate (null: none) applied by decode's and the wgmma prefill's output
// writes, else after the attention.
template <int D>
void launch_attention(const Tensor& q, const PagedKv& cache, const DeviceBatch& db, const ForwardBatch& batch,
                      const NewKv& nk, int hq, int hkv, int bs, float scale, const Tensor* gate, const Tensor& out) {
  const auto* qp = static_cast<const bf16*>(q.raw());
  const bf16* gp = gate ? static_cast<const bf16*>(gate->raw()) : nullptr;
  auto* op = static_cast<bf16*>(out.raw());
  const int nseq = db.num_seqs;
  const bool fp8 = cache.fp8();
  if (fp8) {
    write_new_kv(nk, db, unsigned(batch.token_ids.size()), hkv, D, bs, true);
  }
  // Decode, and (rows) batches of at most kDecodeRowsMax tokens a sequence, a speculative
  // verify's: a block per (split, kv head, sequence or row), the keys split over the context.
  const bool rows = !db.all_single_token && db.max_q_len <= kDecodeRowsMax;
  if (db.all_single_token || rows) {
    if (rows && !fp8) {  // the rows read their own keys and values from the pages
      write_new_kv(nk, db, unsigned(batch.token_ids.size()), hkv, D, bs, false);
    }
    const int nq = rows ? int(batch.token_ids.size()) : nseq;
    const int base = nq * hkv;
    // Head dims 128 and 256 go to the tensor-core kernel (attention_decode.cu).
    const bool mma = decode_mma_supported(D, hq / hkv);
    // Enough splits to fill every SM (two blocks of the CUDA-core kernel, as many of the
    // tensor-core one as fit), by the batch's shape alone (a graph captured at a short context
    // replays at a long one); each query uses as many of them as its keys fill with
    // kDecodeMinSplitTokens each (decode_used_splits, on the device).
    const int per_sm = mma ? decode_mma_blocks_per_sm(D) : 2;
    const int splits = std::clamp((per_sm * sm_count() + base - 1) / base, 1, kMaxSplits);
    Tensor part_o, part_ml;
    if (splits > 1) {
      part_o = scratch({int64_t(nq) * hq * splits * D}, DType::kF32);
      part_ml = scratch({int64_t(nq) * hq * splits * 2}, DType::kF32);
    }
    float* po = splits > 1 ? part_o.data<float>() : nullptr;
    float* pml = splits > 1 ? part_ml.data<float>() : nullptr;
    if (mma) {
      DecodeArgs args{};
      args.batch = db, args.hq = hq, args.hkv = hkv, args.bs = bs, args.splits = splits, args.rows = rows;
      args.scale = scale, args.k = nk.k, args.v = nk.v, args.gate = gp, args.part_o = po, args.part_ml = pml;
      args.k_cache = static_cast<bf16*>(nk.k_cache), args.v_cache = static_cast<bf16*>(nk.v_cache), args.out = op;
      args.k_scale = nk.k_scale, args.v_scale = nk.v_scale;
      attn_decode_mma(D, qp, args, unsigned(nq));
    } else {
      const dim3 grid(splits, hkv, nq);
      auto* kernel = rows ? (fp8 ? attn_decode_kernel<D, true, true> : attn_decode_kernel<D, false, true>)
                          : (fp8 ? attn_decode_kernel<D, true, false> : attn_decode_kernel<D, false, false>);
      launch_pdl(kernel, grid, kDecodeWarps * 32, 0, qp, cache.k.raw(), cache.v.raw(), nk, db, hq, hkv, bs, scale,
                 splits, gp, po, pml, op);
      check_launch("attn_decode");
    }
    if (splits > 1) {
      static_assert(D % 4 == 0 && D <= 4 * kCombineThreads, "attn_combine_kernel: four output elements a thread");
      launch_pdl(attn_combine_kernel, unsigned(nq * hq), kCombineThreads, 0, part_o.data<float>(),
                 part_ml.data<float>(), db, hq, D, splits, rows, gp, op);
      check_launch("attn_combine");
    }
    return;
  }
  DecodedPages decoded;
  const bf16 *kp = static_cast<const bf16*>(cache.k.raw()), *vp = static_cast<const bf16*>(cache.v.raw());
  const DeviceBatch* pdb = &db;
  int64_t cache_rows = cache.k.dim(0) * bs;
  if (fp8) {
    decoded = decode_visible_pages(nk, db, batch, hkv, D, bs);
    kp = static_cast<const bf16*>(decoded.k.raw());
    vp = static_cast<const bf16*>(decoded.v.raw());
    pdb = &decoded.db;
    cache_rows = decoded.rows;
  } else {
    write_new_kv(nk, db, unsigned(batch.token_ids.size()), hkv, D, bs, false);
  }
  if constexpr (D == 128 || D == 256) {
    launch_prefill_wgmma<D>(qp, kp, vp, cache_rows, *pdb, batch, hq, hkv, bs, scale, gp, op);
  } else {
    launch_prefill_wmma<D>(qp, kp, vp, *pdb, batch, hq, hkv, bs, scale, op);
    if (gate) cuda::mul_sigmoid(out, gate->reshape(out.shape()));
  }
}

// The caches' dtypes (bf16, or both F8E4M3 with UE8M0 scales [pages, bs, hkv]), for `op`'s errors.
void check_kv_dtypes(const PagedKv& cache, int64_t hkv, const char* op) {
  const Tensor &k_cache = cache.k, &v_cache = cache.v;
  const DType cache_dtype = cache.fp8() ? DType::kF8E4M3 : DType::kBF16;
  for (const Tensor* t : {&k_cache, &v_cache}) expect_dtype(*t, cache_dtype, op, "the caches (bf16, or both F8E4M3)");
  if (!cache.fp8()) return;
  for (const Tensor* s : {&cache.k_scale, &cache.v_scale}) {
    STRATA_CHECK(s->defined() && s->device() == Device::kCuda && s->dtype() == DType::kUE8M0 && k_cache.ndim() == 4 &&
                     s->shape() == Shape({k_cache.dim(0), k_cache.dim(1), hkv}),
                 op, ": an FP8 cache ", k_cache.describe(), " needs UE8M0 scales [pages, block, ", hkv, "], got ",
                 s->defined() ? s->describe() : std::string("none"));
  }
}

void run_paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                         const ForwardBatch& batch, float scale, const Tensor* gate, const Tensor& out) {
  const Tensor &k_cache = cache.k, &v_cache = cache.v;
  for (const Tensor* t : {&q, &k, &v, &out}) expect_dtype(*t, DType::kBF16, "paged_attention", "q, k, v and out");
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
  STRATA_CHECK(q.ndim() == 3 && k.shape() == Shape({t, hkv, d}) && v.shape() == k.shape() &&
                   out.shape() == q.shape() && k_cache.ndim() == 4 && k_cache.dim(2) == hkv &&
                   k_cache.dim(3) == d && v_cache.shape() == k_cache.shape() && hq % hkv == 0,
               "paged_attention: q ", q.describe(), " k ", k.describe(), " v ", v.describe(), " caches ",
               k_cache.describe(), " out ", out.describe());
  check_kv_dtypes(cache, hkv, "paged_attention");
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
  const NewKv nk = new_kv(k, v, cache);
  const int h = int(hq), kv = int(hkv);
  switch (d) {
    case 16: return launch_attention<16>(q, cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 32: return launch_attention<32>(q, cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 64: return launch_attention<64>(q, cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 128: return launch_attention<128>(q, cache, db, batch, nk, h, kv, bs, scale, gate, out);
    case 256: return launch_attention<256>(q, cache, db, batch, nk, h, kv, bs, scale, gate, out);
    default: fail("paged_attention: head_dim ", d, " is not supported on CUDA (16, 32, 64, 128 or 256)");
  }
}

}  // namespace

void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                     const ForwardBatch& batch, float scale, const Tensor& out) {
  OpTimer timer_("paged_attention");
  run_paged_attention(q, k, v, cache, batch, scale, nullptr, out);
}

void paged_attention_gated(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                           const ForwardBatch& batch, float scale, const Tensor& gate, const Tensor& out) {
  OpTimer timer_("paged_attention_gated");
  run_paged_attention(q, k, v, cache, batch, scale, &gate, out);
}

void paged_kv_write(const Tensor& k, const Tensor& v, const PagedKv& cache, const ForwardBatch& batch) {
  OpTimer timer_("paged_kv_write");
  const Tensor &k_cache = cache.k, &v_cache = cache.v;
  for (const Tensor* t : {&k, &v}) expect_dtype(*t, DType::kBF16, "paged_kv_write", "k and v");
  const int64_t t = k.dim(0), hkv = k.dim(1), d = k.dim(2);
  STRATA_CHECK(k.ndim() == 3 && v.shape() == k.shape() && k_cache.ndim() == 4 && k_cache.dim(2) == hkv &&
                   k_cache.dim(3) == d && v_cache.shape() == k_cache.shape() &&
                   int64_t(batch.token_ids.size()) == t,
               "paged_kv_write: k ", k.describe(), " v ", v.describe(), " caches ", k_cache.describe(), " for ",
               batch.token_ids.size(), " tokens");
  check_kv_dtypes(cache, hkv, "paged_kv_write");
  if (t == 0) return;
  const NewKv nk = new_kv(k, v, cache);
  write_new_kv(nk, device_batch(batch), unsigned(t), int(hkv), int(d), int(k_cache.dim(1)), cache.fp8());
}

}  // namespace strata::ops::cuda
