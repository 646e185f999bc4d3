// CUDA: causal GQA attention over the paged KV cache, either
//  - decode (every sequence has one new token): split-K over the sequence's pages, one block per
//    (split, kv head, sequence) and a warp per query head of the kv head, with a second kernel
//    merging the splits' partial softmaxes. The new token's key and value are read from k and v
//    and stored into their page by the block whose split holds them; or
//  - prefill (any batch): the new keys and values are written into their pages first, then
//    FlashAttention-style tiles walk the keys with an online softmax: at head dims 128 and 256 the
//    wgmma kernel (attention_wgmma.cu), at the smaller ones tiles of 64 queries x 64 keys with
//    WMMA through shared memory.
// paged_attention_gated's sigmoid gate is applied where decode and the head dim 128 / 256
// prefill write their output (after the small head dims' prefill, by mul_sigmoid).
#include <mma.h>

#include <algorithm>
#include <vector>

#include "strata/ops/cuda/attention_wgmma.h"
#include "strata/ops/cuda/common.cuh"
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

// The prefill at head dims 128 and 256: two query heads a block where the GQA group allows, the
// tiles longest (most keys) first; the gate (null: none) applied by the kernel's epilogue.
template <int D>
void launch_prefill_wgmma(const bf16* qp, const bf16* kp, const bf16* vp, int64_t cache_rows, const DeviceBatch& db,
                          const ForwardBatch& batch, int hq, int hkv, int bs, float scale, const bf16* gp, bf16* op) {
  const int hpb = (hq / hkv) % 2 == 0 ? 2 : 1, qt = kWgmmaPrefillRows / hpb;
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
                     scale * 1.4426950408889634f, gp, op);
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
// (null: none) applied by decode's and the wgmma prefill's output writes, else after
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
    launch_prefill_wgmma<D>(qp, kp, vp, kc.dim(0) * bs, db, batch, hq, hkv, bs, scale, gp, op);
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
