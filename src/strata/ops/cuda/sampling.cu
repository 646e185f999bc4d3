// CUDA: the engine's sampling (ops.h's SampleSpec definition) and the batched arg max.
// sample_tokens runs one block of 1024 threads per draw. Its thresholds are radix selections
// over the order-preserving integer keys of the floats (three digit passes of 11, 11 and 10
// bits): the top_k-th largest z, tau for top-p with each token weighted by its mass, and the
// n-th largest for the top log-probabilities. Masses are fixed point (e * 2^40 as integers), so
// every sum, and with it every draw, is the same whatever the order of the additions. The draw
// walks the row in id order: per-warp segment sums, then one warp scans its segment. Draws with
// a small top_k first go over many blocks a row (topk_part_kernel), and sample_tokens_kernel
// draws them from the candidates those leave. A bare greedy draw (no adjustments, no
// log-probabilities; bare_greedy) takes the multi-block arg max instead (draw_argmax_*_kernel),
// reading its structured-output mask bits directly: a refused token counts as -inf without its
// logit being loaded, so the pick, ties and the all-refused case (0) are the CPU's arg max of the
// masked row. Any other draw with adjustments or a mask reads its own processed copy of its row
// (adjust_copy_kernel, adjust_apply_kernel), so every path after them sees a refused token as
// -inf, as the CPU does.
#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/host_read.h"

namespace strata::ops::cuda {
namespace {

constexpr int kThreads = 1024;

// Block-wide (value, index) maximum, the lower index winning ties.
__device__ __forceinline__ int block_argmax(float best, int bi, float* redv, int* redi) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_argmax(best, bi);
  __syncthreads();
  if (lane == 0) {
    redv[warp] = best;
    redi[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < (blockDim.x >> 5) ? redv[lane] : -INFINITY;
    bi = lane < (blockDim.x >> 5) ? redi[lane] : INT_MAX;
    warp_argmax(best, bi);
    if (lane == 0) {
      redv[0] = best;
      redi[0] = bi;
    }
  }
  __syncthreads();
  return redi[0];
}

// The CPU's arg max over NaNs: a NaN is skipped, except that one at index 0 wins (the CPU keeps
// index 0 when no later value compares greater).
__device__ int row_argmax(const float* l, int64_t v, float* redv, int* redi) {
  float best = -INFINITY;
  int bi = INT_MAX;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float li = l[i];
    if (li != li) continue;
    if (bi == INT_MAX || li > best) {  // ascending i: the lower index keeps a tie
      best = li;
      bi = int(i);
    }
  }
  const int t = block_argmax(best, bi, redv, redi);
  return t == INT_MAX || l[0] != l[0] ? 0 : t;
}

// Refused by a structured-output mask: bit i of 32-bit word i / 32 clear (never without a mask).
__device__ __forceinline__ bool refused(const uint32_t* allow, int64_t i) {
  return allow && !((allow[i >> 5] >> (i & 31)) & 1u);
}

// Greedy decode reads a whole vocabulary row (~1 MB at 248k): stage 1 spreads a row over
// kArgmaxParts blocks, each leaving its (best, index); stage 2 is one warp per row over those.
constexpr int kArgmaxParts = 128, kArgmaxThreads = 256;

// Part blockIdx.x of row l into *out_v / *out_i: a refused token reads as -inf without loading
// its logit (the CPU's masked row holds -inf there), a NaN is skipped as in row_argmax; the
// index is INT_MAX when the part has only NaNs.
__device__ void part_argmax(const float* l, const uint32_t* allow, int64_t v, float* out_v, int* out_i,
                            float* redv, int* redi) {
  const int64_t chunk = (v + kArgmaxParts - 1) / kArgmaxParts;
  const int64_t lo = blockIdx.x * chunk, hi = min(v, lo + chunk);
  float best = -INFINITY;
  int bi = INT_MAX;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float li = -INFINITY;
    if (!refused(allow, i)) li = l[i];
    if (li != li) continue;            // NaN: as row_argmax
    if (bi == INT_MAX || li > best) {  // ascending i: the lower index keeps a tie
      best = li;
      bi = int(i);
    }
  }
  block_argmax(best, bi, redv, redi);
  if (threadIdx.x == 0) {
    *out_v = redv[0];
    *out_i = redi[0];
  }
}

// The row's pick from its kArgmaxParts (best, index) entries, by one warp: the largest, the
// lower index on a tie; `first` is the row's first (processed) logit. As row_argmax: 0 when
// every entry is NaN, or when the first is.
__device__ int parts_pick(const float* part_v, const int* part_i, float first) {
  const int lane = threadIdx.x;
  float best = -INFINITY;
  int bi = INT_MAX;
  for (int j = lane; j < kArgmaxParts; j += 32) {
    const float pv = part_v[j];
    const int pi = part_i[j];
    if (pi != INT_MAX && (bi == INT_MAX || pv > best || (pv == best && pi < bi))) {
      best = pv;
      bi = pi;
    }
  }
  // Entries without an index (empty parts) lose to every real one.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi != INT_MAX && (bi == INT_MAX || ob > best || (ob == best && oi < bi))) {
      best = ob;
      bi = oi;
    }
  }
  return bi == INT_MAX || first != first ? 0 : bi;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_part_kernel(const float* logits, int64_t v, float* part_v,
                                                                     int* part_i) {
  pdl_begin();
  __shared__ float redv[32];
  __shared__ int redi[32];
  const int64_t at = int64_t(blockIdx.y) * kArgmaxParts + blockIdx.x;
  part_argmax(logits + int64_t(blockIdx.y) * v, nullptr, v, part_v + at, part_i + at, redv, redi);
}

__global__ void argmax_final_kernel(const float* part_v, const int* part_i, const float* logits, int64_t v,
                                    int32_t* ids) {
  pdl_begin();
  const int64_t at = int64_t(blockIdx.x) * kArgmaxParts;
  const int id = parts_pick(part_v + at, part_i + at, logits[int64_t(blockIdx.x) * v]);
  if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

constexpr int kWarps = kThreads / 32;
constexpr int kCand = 1024;           // top log-probability candidates gathered in shared memory
constexpr int kList = 2048;           // a draw's candidates (top-k / min-p survivors) in shared memory
constexpr float kMassScale = 1099511627776.f;  // 2^40: fixed-point masses (e <= 1)
using u64 = unsigned long long;

// Larger float, larger key (NaN aside; a NaN logit is outside sample_tokens' contract).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.f ? 0.f : f);  // -0 and +0 are one value, as on the CPU
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct SampleArgs {
  const float* logits;
  int64_t v;
  const SampleSpec* specs;
  const LogitAdjust* adjust;
  const int32_t* work_row;  // per draw: its row of `work`, or -1 (no adjustments, no mask)
  float* work;
  const uint32_t* allow;    // the structured-output masks, allow_stride 32-bit words a row
  int64_t allow_stride;
  bool raw;
  int32_t* ids;
  float* logprobs;
  int32_t* top_ids;  // [N, kMaxTopLogprobs]
  float* top_lp;
  // The top-k path's per-part results (topk_part_kernel), [N, parts] and [N, parts, kPartKeep].
  int parts;
  int32_t* part_count;  // its candidates; -1: more than kPartKeep (the row takes the full path)
  float* part_max;      // max z over the part
  float* part_sum;      // sum of exp(z - part max), when log-probabilities are asked for
  uint32_t* part_key;
  int32_t* part_id;
  // The bare greedy draws (bare_greedy), which take the multi-block arg max, and their per-part
  // results, [draws, kArgmaxParts].
  const int32_t* argmax_draw;
  float* argmax_v;
  int32_t* argmax_i;
};

// A greedy draw without adjustments or log-probabilities, masked or not: its pick is the arg max
// of its logits row over the allowed tokens, taken over many blocks (draw_argmax_*_kernel) with
// no processed copy; sample_tokens_kernel leaves it alone.
__host__ __device__ __forceinline__ bool bare_greedy(const SampleSpec& s) {
  return s.greedy && s.adjust_count == 0 && s.num_top_logprobs < 0;
}

struct Smem {
  u64 hist[2048];
  float redf[32];
  int redi[32];
  u64 redq[32];
  uint32_t key;
  u64 rem, upto;  // upto: after a one-pass select, the weight at or above its floor
  int found, ncand;
  uint32_t cand_key[kCand];
  int cand_id[kCand];
  int list_id[kList];  // a draw's candidates in id order, and their z
  float list_z[kList];
  int woff[32], wcount[32], nlist;
};

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ u64 block_sum_u64(u64 v, u64* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_u64(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_sum_u64(lane < kWarps ? red[lane] : 0ull);
}

// hist[bin] += w for every lane with bin >= 0; lanes sharing a bin add once, through one lane
// (the whole warp calls this). w <= 2^40, so 20-bit halves sum exactly over 32 lanes.
template <bool kCount>
__device__ __forceinline__ void hist_add(u64* hist, int bin, u64 w) {
  const unsigned peers = __match_any_sync(0xffffffffu, bin);
  if (kCount) {  // every weight is 1
    if (bin >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], u64(__popc(peers)));
    return;
  }
  const unsigned lo = __reduce_add_sync(peers, unsigned(w & 0xFFFFFull));
  const unsigned hi = __reduce_add_sync(peers, unsigned(w >> 20));
  if (bin >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], (u64(hi) << 20) + lo);
}

// The largest key t with W(key >= t) >= target, W the sum of weight(i, key) over the row; 0 (every
// key) when the whole row weighs less. Three digit passes from the top.
template <bool kCount = false, int kPasses = 3, class KeyOf, class WeightOf>
__device__ uint32_t radix_select(int64_t v, KeyOf key_of, WeightOf weight_of, u64 target, Smem& sm) {
  const int tid = threadIdx.x, lane = tid & 31;
  uint32_t prefix = 0, mask = 0;
  u64 rem = target;
  for (int pass = 0; pass < kPasses; ++pass) {
    const int sh = pass == 0 ? 21 : pass == 1 ? 10 : 0, nb = pass == 2 ? 1024 : 2048;
    for (int b = tid; b < nb; b += blockDim.x) sm.hist[b] = 0;
    __syncthreads();
    // Four tokens a thread a round, their loads issued together.
    constexpr int kEach = 4;
    for (int64_t base = 0; base < v; base += int64_t(blockDim.x) * kEach) {
      uint32_t k[kEach];
#pragma unroll
      for (int j = 0; j < kEach; ++j) {
        const int64_t i = base + int64_t(j) * blockDim.x + tid;
        k[j] = i < v ? key_of(i) : 0u;
      }
#pragma unroll
      for (int j = 0; j < kEach; ++j) {
        const int64_t i = base + int64_t(j) * blockDim.x + tid;
        int bin = -1;
        u64 w = 0;
        if (i < v && (k[j] & mask) == prefix) {
          w = weight_of(i, k[j]);
          if (w) bin = int((k[j] >> sh) & uint32_t(nb - 1));
        }
        hist_add<kCount>(sm.hist, bin, w);
      }
    }
    __syncthreads();
    if (tid < 32) {
      const int per = nb / 32;
      u64 mine = 0;
      for (int j = 0; j < per; ++j) mine += sm.hist[lane * per + j];
      u64 incl = mine;  // the weight of this lane's bins and every higher lane's
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 t = __shfl_down_sync(0xffffffffu, incl, o);
        if (lane + o < 32) incl += t;
      }
      const u64 above = incl - mine;
      const bool here = above < rem && rem <= incl;
      if (here) {
        u64 acc = above;
        for (int b = lane * per + per - 1; b >= lane * per; --b) {
          if (acc + sm.hist[b] >= rem) {
            sm.key = uint32_t(b);
            sm.rem = rem - acc;
            sm.upto = acc + sm.hist[b];
            break;
          }
          acc += sm.hist[b];
        }
      }
      const unsigned any = __ballot_sync(0xffffffffu, here);
      if (lane == 0) sm.found = any != 0;
    }
    __syncthreads();
    if (!sm.found) return 0;
    prefix |= sm.key << sh;
    mask |= uint32_t(nb - 1) << sh;
    rem = sm.rem;
    __syncthreads();
  }
  return prefix;
}

// Max and sum of exp(val - max) over the row (an online softmax), the same on every thread.
template <class ValOf>
__device__ float block_lse(int64_t v, ValOf val_of, Smem& sm, float* max_out) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float m = -INFINITY, s = 0.f;
  for (int64_t i = tid; i < v; i += blockDim.x) {
    const float z = val_of(i);
    if (z == -INFINITY) continue;
    if (z > m) {
      s = s * expf(m - z) + 1.f;
      m = z;
    } else {
      s += expf(z - m);
    }
  }
  auto merge = [](float& m, float& s, float m2, float s2) {
    if (m2 > m) {
      s = s2 + (m == -INFINITY ? 0.f : s * expf(m - m2));
      m = m2;
    } else if (m2 != -INFINITY) {
      s += s2 * expf(m2 - m);
    }
  };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  __syncthreads();
  if (lane == 0) {
    sm.redf[warp] = m;
    sm.hist[warp] = __float_as_uint(s);
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < kWarps; ++w) merge(m, s, sm.redf[w], __uint_as_float(uint32_t(sm.hist[w])));
  __syncthreads();
  *max_out = m;
  return m + logf(s);
}

// The top n of val (most likely first, the lower id on a tie) as log-probabilities val - lse.
template <class ValOf>
__device__ void block_top(int64_t v, int n, ValOf val_of, float lse, int32_t* ids, float* lps, Smem& sm) {
  n = int(min(int64_t(n), v));
  if (n <= 0) return;
  const int tid = threadIdx.x;
  auto key_of = [&](int64_t i) { return order_key(val_of(i)); };
  const uint32_t t = radix_select<true>(v, key_of, [](int64_t, uint32_t) { return u64(1); }, u64(n), sm);
  if (tid == 0) sm.ncand = 0;
  __syncthreads();
  for (int64_t i = tid; i < v; i += blockDim.x) {
    const uint32_t k = key_of(i);
    if (k >= t) {
      const int slot = atomicAdd(&sm.ncand, 1);
      if (slot < kCand) {
        sm.cand_key[slot] = k;
        sm.cand_id[slot] = int(i);
      }
    }
  }
  __syncthreads();
  const bool overflow = sm.ncand > kCand;
  __syncthreads();
  if (overflow) {  // more than kCand ties at the cut: the strictly larger ones, then ties by id
    if (tid == 0) sm.ncand = 0;
    __syncthreads();
    for (int64_t i = tid; i < v; i += blockDim.x) {
      const uint32_t k = key_of(i);
      if (k > t) {
        const int slot = atomicAdd(&sm.ncand, 1);
        sm.cand_key[slot] = k;
        sm.cand_id[slot] = int(i);
      }
    }
    __syncthreads();
    if (tid < 32) {
      int have = sm.ncand;
      for (int64_t base = 0; base < v && have < n; base += 32) {
        const int64_t i = base + tid;
        const bool tie = i < v && key_of(i) == t;
        const unsigned b = __ballot_sync(0xffffffffu, tie);
        const int before = __popc(b & ((1u << tid) - 1));
        if (tie && have + before < n) {
          sm.cand_key[have + before] = t;
          sm.cand_id[have + before] = int(i);
        }
        have += __popc(b);
      }
      if (tid == 0) sm.ncand = min(have, n);
    }
    __syncthreads();
  }
  const int c = min(sm.ncand, kCand);
  for (int j = tid; j < c; j += blockDim.x) {
    const uint32_t kj = sm.cand_key[j];
    const int ij = sm.cand_id[j];
    int rank = 0;
    for (int m = 0; m < c; ++m) {
      const uint32_t km = sm.cand_key[m];
      rank += km > kj || (km == kj && sm.cand_id[m] < ij);
    }
    if (rank < n) {
      ids[rank] = ij;
      lps[rank] = val_of(ij) - lse;
    }
  }
  __syncthreads();
}

// The first token, in id order, at which the running sum of q exceeds `stop`; -1 when the row's
// total does not. Each warp owns a contiguous segment; the warp whose segment holds the crossing
// scans it 32 at a time.
template <class MassOf>
__device__ int block_draw(int64_t v, MassOf q_of, u64 stop, Smem& sm) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t seg = ((v + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int64_t lo = warp * seg, hi = min(v, lo + seg);
  u64 mine = 0;
  for (int64_t i = lo + lane; i < hi; i += 32) mine += q_of(i);
  mine = warp_sum_u64(mine);
  __syncthreads();
  if (lane == 0) sm.redq[warp] = mine;
  __syncthreads();
  if (tid == 0) {
    u64 run = 0;
    sm.found = -1;
    for (int w = 0; w < kWarps; ++w) {
      if (run + sm.redq[w] > stop) {
        sm.found = w;
        sm.rem = stop - run;
        break;
      }
      run += sm.redq[w];
    }
    sm.key = 0xffffffffu;
  }
  __syncthreads();
  if (warp == sm.found) {
    u64 base = 0;
    const u64 rem = sm.rem;
    for (int64_t c = lo; c < hi; c += 32) {
      const int64_t i = c + lane;
      const u64 q = i < hi ? q_of(i) : 0ull;
      u64 incl = q;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, base + incl > rem);
      if (hit) {
        if (lane == 0) sm.key = uint32_t(c + __ffs(hit) - 1);
        break;
      }
      base += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  return sm.key == 0xffffffffu ? -1 : int(sm.key);
}

// Exclusive prefix sum over the block (in thread order); *total gets the sum. Contains syncs.
__device__ u64 block_exclusive_scan(u64 v, Smem& sm, u64* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  __syncthreads();
  if (lane == 31) sm.redq[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    u64 w = lane < kWarps ? sm.redq[lane] : 0ull;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u64 t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    if (lane < kWarps) sm.redq[lane] = w;
  }
  __syncthreads();
  *total = sm.redq[kWarps - 1];
  return (warp ? sm.redq[warp - 1] : 0ull) + incl - v;
}

// The row's tokens with key >= floor, in id order, into sm.list_id / list_z (the caller knows
// there are at most kList); returns their number. Each thread takes 4 consecutive tokens a round;
// a warp scan and one scan over the warps place them.
template <class ValOf>
__device__ int gather_list(int64_t v, ValOf z_of, uint32_t floor, Smem& sm) {
  constexpr int kEach = 4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) sm.nlist = 0;
  for (int64_t base = 0; base < v; base += int64_t(blockDim.x) * kEach) {
    float z[kEach];
    bool in[kEach];
    int c = 0;
#pragma unroll
    for (int j = 0; j < kEach; ++j) {
      const int64_t i = base + int64_t(tid) * kEach + j;
      z[j] = i < v ? z_of(i) : -INFINITY;
      in[j] = i < v && order_key(z[j]) >= floor;
      c += in[j];
    }
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int t = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += t;
    }
    if (lane == 31) sm.wcount[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      const int w = lane < kWarps ? sm.wcount[lane] : 0;
      int wi = w;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, wi, o);
        if (lane >= o) wi += t;
      }
      const int start = sm.nlist;
      if (lane < kWarps) sm.woff[lane] = start + wi - w;
      __syncwarp();
      if (lane == 31) sm.nlist = start + wi;
    }
    __syncthreads();
    int at = sm.woff[warp] + incl - c;
#pragma unroll
    for (int j = 0; j < kEach; ++j) {
      if (in[j]) {
        sm.list_id[at] = int(base + int64_t(tid) * kEach + j);
        sm.list_z[at] = z[j];
        ++at;
      }
    }
  }
  __syncthreads();
  return sm.nlist;
}

// The largest key of the list with at least k keys at or above it (the k-th largest).
__device__ uint32_t list_kth_key(int n, int k, Smem& sm) {
  uint32_t best = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const uint32_t kj = order_key(sm.list_z[j]);
    int c = 0;
    for (int m = 0; m < n; ++m) c += order_key(sm.list_z[m]) >= kj;
    if (c >= k) best = max(best, kj);
  }
  __syncthreads();
  if (threadIdx.x == 0) sm.key = 0;
  __syncthreads();
  atomicMax(&sm.key, best);
  __syncthreads();
  return sm.key;
}

// The draw over the candidate list: kept_q(j) the mass of candidate j (0: not kept). Top-p's cut
// over the list, then the id-ordered draw; -1 when nothing is kept.
template <class KeptQ>
__device__ int list_draw(int n, KeptQ kept_q, float top_p, float uniform, Smem& sm) {
  const int tid = threadIdx.x;
  constexpr int kPer = kList / kThreads;
  u64 q[kPer];
  u64 mine = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = tid * kPer + k;
    q[k] = j < n ? kept_q(j) : 0ull;
    mine += q[k];
  }
  if (top_p < 1.f) {  // tau: the largest kept key whose tokens at or above it hold the target
    u64* list_q = sm.hist;  // free while the list is drawn from (kList entries)
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (tid * kPer + k < n) list_q[tid * kPer + k] = q[k];
    }
    const u64 kept = block_sum_u64(mine, sm.redq);
    const u64 target = u64(ceil(double(top_p) * double(kept)));
    uint32_t tau = 0;
    for (int k = 0; k < kPer; ++k) {
      const int j = tid * kPer + k;
      if (q[k] == 0) continue;
      const uint32_t kj = order_key(sm.list_z[j]);
      u64 w = 0;
      for (int m = 0; m < n; ++m) {
        if (order_key(sm.list_z[m]) >= kj) w += list_q[m];
      }
      if (w >= target) tau = max(tau, kj);
    }
    __syncthreads();
    if (tid == 0) sm.key = 0;
    __syncthreads();
    atomicMax(&sm.key, tau);
    __syncthreads();
    tau = sm.key;
    mine = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int j = tid * kPer + k;
      if (q[k] && order_key(sm.list_z[j]) < tau) q[k] = 0;
      mine += q[k];
    }
  }
  u64 total;
  u64 run = block_exclusive_scan(mine, sm, &total);
  if (total == 0) return -1;
  const u64 stop = u64(double(uniform) * double(total));
  __syncthreads();
  if (tid == 0) sm.found = INT_MAX;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    run += q[k];
    if (q[k] && run > stop) {
      atomicMin(&sm.found, tid * kPer + k);
      break;
    }
  }
  __syncthreads();
  return sm.found == INT_MAX ? -1 : sm.list_id[sm.found];
}

// ---- top-k draws over many blocks a row ----
// A draw with 0 < top_k <= kFastK (and, when it asks for them, processed log-probabilities) is
// decided by its top max(top_k, top log-probabilities) tokens alone. topk_part_kernel splits the
// row into parts of kPartSpan tokens, one block each with the part in registers, and leaves each
// part's top K with their ties (at most kPartKeep, else -1), its max z and, for log-probabilities,
// its sum of exp(z - max). fast_draw, in sample_tokens_kernel, merges them: the top_k-th key over
// the candidates, the candidates at or above it in id order, and list_draw, as the full path does
// with its list. Every token of the kept set is a candidate (a token with fewer than top_k larger
// ones in the row has fewer in its part), so the draw is the full path's.
constexpr int kPartThreads = 256, kPartEach = 64;
constexpr int64_t kPartSpan = int64_t(kPartThreads) * kPartEach;
constexpr int kFastK = 64, kPartKeep = 128, kPartGather = 1024;

__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// K of the top-k path for draw s, or 0: the full path.
__host__ __device__ __forceinline__ int fast_k(const SampleSpec& s, int64_t v, bool raw) {
  if (s.greedy || s.top_k <= 0 || int64_t(s.top_k) >= v) return 0;
  const bool want = s.num_top_logprobs >= 0;
  if (want && raw) return 0;
  const int k = s.top_k > (want ? s.num_top_logprobs : 0) ? s.top_k : s.num_top_logprobs;
  return k <= kFastK ? k : 0;
}

// The processed logits x of draw r: its adjusted copy in `work`, or its logits row.
__device__ __forceinline__ const float* processed_row(const SampleArgs& a, const SampleSpec& s, int r) {
  return a.work_row[r] >= 0 ? a.work + int64_t(a.work_row[r]) * a.v : a.logits + int64_t(s.logits_row) * a.v;
}

// Draw blockIdx.y's part blockIdx.x. Keys are order_key(z); 0 marks a position past the row.
__global__ void __launch_bounds__(kPartThreads) topk_part_kernel(SampleArgs a) {
  pdl_begin();
  __shared__ uint32_t g_key[kPartGather];
  __shared__ int g_id[kPartGather];
  __shared__ uint32_t warp_bound[kPartThreads / 32], warp_top[kPartThreads / 32];
  __shared__ float warp_e[kPartThreads / 32];
  __shared__ int g_n, keep_n;
  const int r = blockIdx.y, p = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const SampleSpec s = a.specs[r];
  const int k = fast_k(s, a.v, a.raw);
  if (!k) return;
  const float* x = processed_row(a, s, r);
  const int64_t base = int64_t(p) * kPartSpan;
  const float inv = s.inv_temperature;
  uint32_t key[kPartEach];
  uint32_t mine = 0;
#pragma unroll
  for (int j = 0; j < kPartEach; ++j) {
    const int64_t i = base + int64_t(j) * kPartThreads + tid;
    key[j] = i < a.v ? order_key(__fmul_rn(x[i], inv)) : 0u;
    mine = max(mine, key[j]);
  }
  // A lower bound on the part's K-th largest key: each warp's ceil(K/8)-th largest thread max
  // (those are distinct tokens, 8 * ceil(K/8) >= K of them at or above the smallest).
  const int wk = (k + kPartThreads / 32 - 1) / (kPartThreads / 32);
  int rank = 0;
#pragma unroll
  for (int o = 0; o < 32; ++o) {
    const uint32_t other = __shfl_sync(0xffffffffu, mine, o);
    rank += other > mine || (other == mine && o < lane);
  }
  if (rank == wk - 1) warp_bound[warp] = mine;
  if (rank == 0) warp_top[warp] = mine;
  if (tid == 0) g_n = keep_n = 0;
  __syncthreads();
  uint32_t bound = 0xffffffffu, top = 0;
#pragma unroll
  for (int w = 0; w < kPartThreads / 32; ++w) {
    bound = min(bound, warp_bound[w]);
    top = max(top, warp_top[w]);
  }
#pragma unroll
  for (int j = 0; j < kPartEach; ++j) {
    if (key[j] && key[j] >= bound) {
      const int slot = atomicAdd(&g_n, 1);
      if (slot < kPartGather) {
        g_key[slot] = key[j];
        g_id[slot] = int(base + int64_t(j) * kPartThreads + tid);
      }
    }
  }
  const int64_t out = int64_t(r) * a.parts + p;
  if (s.num_top_logprobs >= 0) {  // sum of exp(z - part max) for the row's log-sum-exp
    const float m = top ? key_value(top) : -INFINITY;
    float e = 0.f;
#pragma unroll
    for (int j = 0; j < kPartEach; ++j) {
      if (key[j] && m != -INFINITY) e += expf(key_value(key[j]) - m);
    }
    e = warp_sum(e);
    if (lane == 0) warp_e[warp] = e;
  }
  __syncthreads();
  const int n = g_n;
  if (n > kPartGather) {
    if (tid == 0) a.part_count[out] = -1;
    return;
  }
  // The part's top K with their ties: the gathered keys with fewer than K larger ones.
  for (int c = tid; c < n; c += kPartThreads) {
    const uint32_t kc = g_key[c];
    int greater = 0;
    for (int m = 0; m < n; ++m) greater += g_key[m] > kc;
    if (greater < k) {
      const int slot = atomicAdd(&keep_n, 1);
      if (slot < kPartKeep) {
        a.part_key[out * kPartKeep + slot] = kc;
        a.part_id[out * kPartKeep + slot] = g_id[c];
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    a.part_count[out] = keep_n <= kPartKeep ? keep_n : -1;
    a.part_max[out] = top ? key_value(top) : -INFINITY;
    float e = 0.f;
    for (int w = 0; w < kPartThreads / 32; ++w) e += warp_e[w];
    a.part_sum[out] = s.num_top_logprobs >= 0 ? e : 0.f;
  }
}

// Draw r from its parts' candidates (see above); false, with nothing written, when a part had
// more than kPartKeep (ties at its cut), and the row takes the full path.
__device__ bool fast_draw(const SampleArgs& a, const SampleSpec& s, int r, const float* x, Smem& sm) {
  const int tid = threadIdx.x, parts = a.parts;
  const int32_t* count = a.part_count + int64_t(r) * parts;
  if (tid == 0) {
    sm.ncand = 0;
    sm.found = 0;
  }
  __syncthreads();
  for (int q = tid; q < parts; q += blockDim.x) {
    if (count[q] < 0) sm.found = 1;
  }
  for (int c = tid; c < parts * kPartKeep; c += blockDim.x) {
    const int q = c / kPartKeep, j = c % kPartKeep;
    if (j < count[q]) {
      const int slot = atomicAdd(&sm.ncand, 1);
      if (slot < kCand) {
        const int64_t at = (int64_t(r) * parts + q) * kPartKeep + j;
        sm.cand_key[slot] = a.part_key[at];
        sm.cand_id[slot] = a.part_id[at];
      }
    }
  }
  __syncthreads();
  const int n = sm.ncand;
  if (sm.found || n > kCand) return false;
  const bool want = s.num_top_logprobs >= 0;
  float mz = -INFINITY, lse = 0.f;
  {
    const float* pm = a.part_max + int64_t(r) * parts;
    const float* ps = a.part_sum + int64_t(r) * parts;
    for (int q = 0; q < parts; ++q) mz = fmaxf(mz, pm[q]);
    if (want) {
      float e = 0.f;
      for (int q = 0; q < parts; ++q) {
        if (pm[q] != -INFINITY) e += ps[q] * expf(pm[q] - mz);
      }
      lse = mz + logf(e);
    }
  }
  auto cand_key = [&](int64_t i) { return sm.cand_key[i]; };
  auto count1 = [](int64_t, uint32_t) { return u64(1); };
  const uint32_t floor_key = radix_select<true>(n, cand_key, count1, u64(s.top_k), sm);
  // The kept candidates (id, key) into sm.hist, then in id order into the list.
  if (tid == 0) sm.nlist = 0;
  __syncthreads();
  for (int c = tid; c < n; c += blockDim.x) {
    if (sm.cand_key[c] >= floor_key) sm.hist[atomicAdd(&sm.nlist, 1)] = u64(sm.cand_id[c]) << 32 | sm.cand_key[c];
  }
  __syncthreads();
  const int listed = sm.nlist;
  for (int c = tid; c < listed; c += blockDim.x) {
    const u64 e = sm.hist[c];
    int at = 0;
    for (int m = 0; m < listed; ++m) at += sm.hist[m] < e;  // ids are unique: id order
    sm.list_id[at] = int(e >> 32);
    sm.list_z[at] = key_value(uint32_t(e));
  }
  __syncthreads();
  const float min_p = s.min_p;
  auto list_q = [&](int j) -> u64 {
    const float e = expf(__fsub_rn(sm.list_z[j], mz));
    return e >= min_p ? u64(e * kMassScale) : 0ull;
  };
  int token = list_draw(listed, list_q, s.top_p, s.uniform, sm);
  if (token < 0) token = row_argmax(x, a.v, sm.redf, sm.redi);
  if (want) {
    const int nt = s.num_top_logprobs;
    int32_t* top_ids = a.top_ids + int64_t(r) * kMaxTopLogprobs;
    float* top_lp = a.top_lp + int64_t(r) * kMaxTopLogprobs;
    const uint32_t t = nt > 0 ? radix_select<true>(n, cand_key, count1, u64(nt), sm) : 0xffffffffu;
    for (int c = tid; c < n && nt > 0; c += blockDim.x) {
      const uint32_t kc = sm.cand_key[c];
      if (kc < t) continue;
      const int id = sm.cand_id[c];
      int at = 0;
      for (int m = 0; m < n; ++m) {
        const uint32_t km = sm.cand_key[m];
        at += km > kc || (km == kc && sm.cand_id[m] < id);
      }
      if (at < nt) {
        top_ids[at] = id;
        top_lp[at] = key_value(kc) - lse;
      }
    }
    if (tid == 0) a.logprobs[r] = __fmul_rn(x[token], s.inv_temperature) - lse;
  }
  if (tid == 0) a.ids[r] = token;
  return true;
}

// The adjustments (ops.h's LogitAdjust) and the structured-output mask of the draws that have
// them, into their rows of `work`: the copy over many blocks a row (a token whose mask bit is
// clear becomes -inf), then the entries, a block a draw, each masked again after its adjustment
// (the CPU masks after the adjustments, so -inf whatever the entry says).
constexpr int kCopyThreads = 256;
constexpr int64_t kCopySpan = kCopyThreads * 16;

// Draw s's mask row (bit t of word t / 32: the uint64 words of SampleBatch::allow read as
// little-endian 32-bit words), or null.
__device__ __forceinline__ const uint32_t* allow_bits(const SampleArgs& a, const SampleSpec& s) {
  return s.allow_row >= 0 ? a.allow + int64_t(s.allow_row) * a.allow_stride : nullptr;
}

__global__ void __launch_bounds__(kCopyThreads) adjust_copy_kernel(SampleArgs a) {
  pdl_begin();
  const int r = blockIdx.y;
  if (a.work_row[r] < 0) return;
  const SampleSpec& s = a.specs[r];
  const float* l = a.logits + int64_t(s.logits_row) * a.v;
  const uint32_t* allow = allow_bits(a, s);
  float* w = a.work + int64_t(a.work_row[r]) * a.v;
  const int64_t end = min(a.v, int64_t(blockIdx.x + 1) * kCopySpan);
  for (int64_t i = int64_t(blockIdx.x) * kCopySpan + threadIdx.x; i < end; i += kCopyThreads) {
    w[i] = refused(allow, i) ? -INFINITY : l[i];
  }
}

__global__ void __launch_bounds__(kCopyThreads) adjust_apply_kernel(SampleArgs a) {
  pdl_begin();
  const int r = blockIdx.x;
  if (a.work_row[r] < 0) return;
  const SampleSpec& s = a.specs[r];
  float* w = a.work + int64_t(a.work_row[r]) * a.v;
  const float rp = s.repetition_penalty;
  const uint32_t* allow = allow_bits(a, s);
  for (int j = threadIdx.x; j < s.adjust_count; j += kCopyThreads) {
    const LogitAdjust& e = a.adjust[s.adjust_begin + j];
    float y = __fadd_rn(w[e.id], e.bias);
    if (e.mask) y = -INFINITY;
    if (e.repeat) y = y > 0.f ? __fdiv_rn(y, rp) : __fmul_rn(y, rp);
    y = __fsub_rn(y, e.subtract);
    w[e.id] = refused(allow, e.id) ? -INFINITY : y;
  }
}

// Bare greedy draw a.argmax_draw[blockIdx.y]'s part blockIdx.x, its mask read directly.
__global__ void __launch_bounds__(kArgmaxThreads) draw_argmax_part_kernel(SampleArgs a) {
  pdl_begin();
  __shared__ float redv[32];
  __shared__ int redi[32];
  const SampleSpec& s = a.specs[a.argmax_draw[blockIdx.y]];
  const int64_t at = int64_t(blockIdx.y) * kArgmaxParts + blockIdx.x;
  part_argmax(a.logits + int64_t(s.logits_row) * a.v, allow_bits(a, s), a.v, a.argmax_v + at, a.argmax_i + at,
              redv, redi);
}

// Its pick, one warp a draw. Every token refused: every part's best is -inf at its first
// index, so the pick is 0, as the CPU's arg max of an all -inf row.
__global__ void draw_argmax_final_kernel(SampleArgs a) {
  pdl_begin();
  const int r = a.argmax_draw[blockIdx.x];
  const SampleSpec& s = a.specs[r];
  const float* l = a.logits + int64_t(s.logits_row) * a.v;
  const float first = refused(allow_bits(a, s), 0) ? -INFINITY : l[0];
  const int64_t at = int64_t(blockIdx.x) * kArgmaxParts;
  const int id = parts_pick(a.argmax_v + at, a.argmax_i + at, first);
  if (threadIdx.x == 0) a.ids[r] = id;
}

__global__ void __launch_bounds__(kThreads) sample_tokens_kernel(SampleArgs a) {
  pdl_begin();
  __shared__ Smem sm;
  const int r = blockIdx.x, tid = threadIdx.x;
  const SampleSpec s = a.specs[r];
  if (bare_greedy(s)) return;  // draw_argmax_final_kernel's
  const int64_t v = a.v;
  const float* l = a.logits + int64_t(s.logits_row) * v;
  const bool want = s.num_top_logprobs >= 0;
  int32_t* top_ids = a.top_ids + int64_t(r) * kMaxTopLogprobs;
  float* top_lp = a.top_lp + int64_t(r) * kMaxTopLogprobs;
  float raw_lse = 0.f, unused;
  if (want && a.raw) {
    auto raw_of = [&](int64_t i) { return l[i]; };
    raw_lse = block_lse(v, raw_of, sm, &unused);
    block_top(v, s.num_top_logprobs, raw_of, raw_lse, top_ids, top_lp, sm);
  }
  const float* x = processed_row(a, s, r);  // adjusted by adjust_copy / adjust_apply
  if (const int k = fast_k(s, v, a.raw); k && fast_draw(a, s, r, x, sm)) return;
  int token;
  if (s.greedy) {
    token = row_argmax(x, v, sm.redf, sm.redi);
    if (want && !a.raw) {
      auto x_of = [&](int64_t i) { return x[i]; };
      const float lse = block_lse(v, x_of, sm, &unused);
      block_top(v, s.num_top_logprobs, x_of, lse, top_ids, top_lp, sm);
      if (tid == 0) a.logprobs[r] = x[token] - lse;
    }
  } else {
    const float inv = s.inv_temperature;
    auto z_of = [&](int64_t i) { return __fmul_rn(x[i], inv); };
    auto zkey_of = [&](int64_t i) { return order_key(z_of(i)); };
    // The log-sum-exp only for log-probabilities; the draw needs just the max.
    float mz = -INFINITY, lse = 0.f;
    if (want && !a.raw) lse = block_lse(v, z_of, sm, &mz);
    auto count1 = [](int64_t, uint32_t) { return u64(1); };
    uint32_t floor_key = 0;  // top-k
    bool listed = false;     // the candidates are in sm.list_*
    int n = 0;
    if (s.top_k > 0 && s.top_k < v) {
      // Its first digit bounds the candidates; when few, the rest runs on them in shared memory.
      const uint32_t first = radix_select<true, 1>(v, zkey_of, count1, u64(s.top_k), sm);
      if (sm.upto <= u64(kList)) {
        n = gather_list(v, z_of, first, sm);
        floor_key = list_kth_key(n, s.top_k, sm);
        listed = true;
      } else {
        floor_key = radix_select<true>(v, zkey_of, count1, u64(s.top_k), sm);
      }
    }
    if (mz == -INFINITY) {
      float m = -INFINITY;
      if (listed) {
        for (int j = tid; j < n; j += blockDim.x) m = fmaxf(m, sm.list_z[j]);
      } else {
#pragma unroll 4
        for (int64_t i = tid; i < v; i += blockDim.x) m = fmaxf(m, z_of(i));
      }
      __syncthreads();
      m = warp_max(m);
      if ((tid & 31) == 0) sm.redf[tid >> 5] = m;
      __syncthreads();
      mz = -INFINITY;
      for (int w = 0; w < kWarps; ++w) mz = fmaxf(mz, sm.redf[w]);
      __syncthreads();
    }
    auto e_of = [&](int64_t i) { return expf(__fsub_rn(z_of(i), mz)); };
    const float min_p = s.min_p;
    auto kept_q = [&](int64_t i, uint32_t k) -> u64 {
      if (k < floor_key) return 0ull;
      const float e = e_of(i);
      return e >= min_p ? u64(e * kMassScale) : 0ull;
    };
    if (!listed && min_p > 0.f) {
      // min-p's cut, less a margin for expf's rounding, bounds the candidates.
      const uint32_t floor = order_key(mz + logf(min_p) - 1e-4f * (1.f + fabsf(mz)));
      u64 c = 0;
      for (int64_t i = tid; i < v; i += blockDim.x) c += zkey_of(i) >= floor;
      if (block_sum_u64(c, sm.redq) <= u64(kList)) {
        n = gather_list(v, z_of, floor, sm);
        listed = true;
      }
    }
    token = -1;
    if (listed) {
      auto list_q = [&](int j) -> u64 {
        const float z = sm.list_z[j];
        if (order_key(z) < floor_key) return 0ull;
        const float e = expf(__fsub_rn(z, mz));
        return e >= min_p ? u64(e * kMassScale) : 0ull;
      };
      token = list_draw(n, list_q, s.top_p, s.uniform, sm);
    } else {
      if (s.top_p < 1.f) {  // tau: raise the floor to the top-p cut
        u64 kept = 0;
        for (int64_t i = tid; i < v; i += blockDim.x) kept += kept_q(i, zkey_of(i));
        kept = block_sum_u64(kept, sm.redq);
        const u64 target = u64(ceil(double(s.top_p) * double(kept)));
        const uint32_t tau = radix_select(v, zkey_of, kept_q, target, sm);
        floor_key = max(floor_key, tau);
      }
      auto q_of = [&](int64_t i) { return kept_q(i, zkey_of(i)); };
      u64 total = 0;
      for (int64_t i = tid; i < v; i += blockDim.x) total += q_of(i);
      total = block_sum_u64(total, sm.redq);
      if (total > 0) token = block_draw(v, q_of, u64(double(s.uniform) * double(total)), sm);
    }
    if (token < 0) token = row_argmax(x, v, sm.redf, sm.redi);
    if (want && !a.raw) {
      block_top(v, s.num_top_logprobs, z_of, lse, top_ids, top_lp, sm);
      if (tid == 0) a.logprobs[r] = z_of(token) - lse;
    }
  }
  if (tid == 0) {
    a.ids[r] = token;
    if (want && a.raw) a.logprobs[r] = l[token] - raw_lse;
  }
}

// Pinned host memory, grown as needed.
struct PinnedBuffer {
  void* p = nullptr;
  size_t cap = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p) (void)cudaFreeHost(p);
  }
  void* get(size_t bytes) {
    if (bytes > cap) {
      const size_t want = std::max(bytes, 2 * cap);
      if (p) {
        void* old = p;
        p = nullptr;
        cap = 0;
        STRATA_CUDA_CHECK(cudaFreeHost(old));
      }
      STRATA_CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocDefault));
      cap = want;
    }
    return p;
  }
};

// One DrawsInFlight's host side: the inputs go up through `up`, the results come down into
// `down`, and `copied` marks when they are there.
struct Staging {
  PinnedBuffer up, down;
  cudaEvent_t copied = nullptr;
  bool plain = false;  // ids only came back
  Staging() { STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming)); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() { (void)cudaEventDestroy(copied); }
};

__global__ void pick_rows_kernel(const int32_t* row_ids, const SampleSpec* specs, int n, int32_t* ids) {
  pdl_begin();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n) ids[r] = row_ids[specs[r].logits_row];
}

__global__ void feed_tokens_kernel(int32_t* tokens, const int32_t* rows, const int32_t* from, int n,
                                   const int32_t* ids) {
  pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tokens[rows[i]] = ids[from[i]];
}

__global__ void pick_logit_rows_kernel(int32_t* logit_rows, const int32_t* q_start, int n, const int32_t* pick) {
  pdl_begin();
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < n) logit_rows[s] = q_start[s] + pick[s];
}

__global__ void shift_positions_kernel(int32_t* ctx, int32_t* positions, const int32_t* q_start, int n,
                                       const int32_t* shift) {
  pdl_begin();
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < n) {
    ctx[s] += shift[s];
    positions[q_start[s]] += shift[s];
  }
}

template <class T>
std::vector<int32_t> as_words(const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % 4 == 0);
  std::vector<int32_t> w(v.size() * sizeof(T) / 4);
  if (!v.empty()) std::memcpy(w.data(), v.data(), v.size() * sizeof(T));
  return w;
}

void check_rows(const Tensor& logits, const Tensor& ids, const char* op) {
  expect_dtype(logits, DType::kF32, op, "logits");
  expect_dtype(ids, DType::kI32, op, "ids");
  STRATA_CHECK(logits.ndim() == 2 && logits.dim(1) > 0 && ids.numel() == logits.dim(0), op, ": logits ",
               logits.describe(), ", ids ", ids.describe());
}

}  // namespace

void argmax(const Tensor& logits, const Tensor& ids) {
  OpTimer timer_("argmax");
  check_rows(logits, ids, "argmax");
  if (!logits.dim(0)) return;
  const int64_t n = logits.dim(0);
  Tensor part_v = scratch({n, kArgmaxParts}, DType::kF32), part_i = scratch({n, kArgmaxParts}, DType::kI32);
  launch_pdl(argmax_part_kernel, dim3(kArgmaxParts, unsigned(n)), kArgmaxThreads, 0, 
      logits.data<float>(), logits.dim(1), part_v.data<float>(), part_i.data<int32_t>());
  check_launch("argmax_part");
  launch_pdl(argmax_final_kernel, unsigned(n), 32, 0, part_v.data<float>(), part_i.data<int32_t>(),
             logits.data<float>(), logits.dim(1), ids.data<int32_t>());
  check_launch("argmax");
}

namespace {

// The host side of rows_to_host and argmax_rows_to_host (one caller thread: the engine's).
PinnedBuffer& host_read_buffer() {
  static thread_local PinnedBuffer buffer;
  return buffer;
}

// x's rows `rows`, gathered into a contiguous F32 tensor on the device.
Tensor gather_logit_rows(const Tensor& x, const std::vector<int32_t>& rows, const char* op) {
  expect_dtype(x, DType::kF32, op, "x");
  STRATA_CHECK(x.ndim() == 2, op, ": x must be [N, V], got ", x.describe());
  Tensor g = scratch({int64_t(rows.size()), x.dim(1)}, DType::kF32);
  gather_rows(x, rows, g);
  return g;
}

void copy_to_host(const Tensor& d, void* dst, size_t bytes) {
  if (!bytes) return;
  STRATA_CHECK(!capturing(), "copying a GPU tensor to the host is not allowed during graph capture");
  void* pinned = host_read_buffer().get(bytes);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(pinned, d.raw(), bytes, cudaMemcpyDeviceToHost, stream()));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::memcpy(dst, pinned, bytes);
}

}  // namespace

void rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<float>& out) {
  OpTimer timer_("rows_to_host");
  out.clear();
  if (rows.empty()) return;
  const Tensor g = gather_logit_rows(x, rows, "rows_to_host");
  out.resize(size_t(g.numel()));
  copy_to_host(g, out.data(), g.nbytes());
}

void argmax_rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<int32_t>& ids) {
  OpTimer timer_("argmax_rows_to_host");
  ids.clear();
  if (rows.empty()) return;
  const Tensor g = gather_logit_rows(x, rows, "argmax_rows_to_host");
  Tensor d_ids = scratch({int64_t(rows.size())}, DType::kI32);
  argmax(g, d_ids);
  ids.resize(rows.size());
  copy_to_host(d_ids, ids.data(), ids.size() * sizeof(int32_t));
}

void feed_tokens(int32_t* tokens, const int32_t* rows, const int32_t* from, int n, const int32_t* ids) {
  if (n == 0) return;
  launch_pdl(feed_tokens_kernel, unsigned((n + 127) / 128), 128, 0, tokens, rows, from, n, ids);
  check_launch("feed_tokens");
}

void pick_logit_rows(int32_t* logit_rows, const int32_t* q_start, int n, const int32_t* pick) {
  if (n == 0) return;
  launch_pdl(pick_logit_rows_kernel, unsigned((n + 127) / 128), 128, 0, logit_rows, q_start, n, pick);
  check_launch("pick_logit_rows");
}

void shift_positions(int32_t* ctx, int32_t* positions, const int32_t* q_start, int n, const int32_t* shift) {
  if (n == 0) return;
  launch_pdl(shift_positions_kernel, unsigned((n + 127) / 128), 128, 0, ctx, positions, q_start, n, shift);
  check_launch("shift_positions");
}

void sample_tokens_begin(const Tensor& logits, const SampleBatch& batch, DrawsInFlight& draws) {
  OpTimer timer_("sample_tokens");
  expect_dtype(logits, DType::kF32, "sample_tokens", "logits");
  ops::check_sample_batch(logits, batch);
  const int64_t n = int64_t(batch.rows.size()), v = logits.dim(1);
  if (!draws.staging) draws.staging = std::make_shared<Staging>();
  Staging& st = *static_cast<Staging*>(draws.staging.get());
  // Results: ids [n], logprobs [n], top ids [n, K], top logprobs [n, K], one copy back.
  const size_t words = size_t(std::max<int64_t>(n, 1)) * (2 + 2 * kMaxTopLogprobs);
  if (!draws.ids.defined() || draws.ids.device() != Device::kCuda || size_t(draws.ids.numel()) < words) {
    draws.ids = persistent({int64_t(words)}, DType::kI32);
  }
  int32_t* d = draws.ids.data<int32_t>();
  st.plain = std::all_of(batch.rows.begin(), batch.rows.end(), [](const SampleSpec& s) { return bare_greedy(s); });
  // The inputs go up in one copy from pinned memory (a pageable copy could wait for the GPU).
  const std::vector<int32_t> specs = as_words(batch.rows), adjust = as_words(batch.adjust);
  // A bare greedy draw takes the multi-block arg max of its row (reading its mask, if any);
  // any other draw with adjustments or a mask gets its own processed copy of its row in `work`.
  std::vector<int32_t> work_row(size_t(n), -1), argmax_draw;
  int32_t n_work = 0;
  bool masked = false;
  for (int64_t r = 0; r < n; ++r) {
    const SampleSpec& s = batch.rows[size_t(r)];
    if (bare_greedy(s)) {
      argmax_draw.push_back(int32_t(r));
    } else if (s.adjust_count > 0 || s.allow_row >= 0) {
      work_row[size_t(r)] = n_work++;
    }
    masked = masked || s.allow_row >= 0;
  }
  // The masks follow the other inputs in the same copy, as 32-bit words (2 per uint64).
  const size_t work_at = specs.size() + adjust.size(), argmax_at = work_at + work_row.size();
  const size_t allow_at = argmax_at + argmax_draw.size();
  const size_t allow_words = masked ? batch.allow.size() * 2 : 0;
  const size_t up_words = allow_at + allow_words + 1;
  auto* up = static_cast<int32_t*>(st.up.get(up_words * 4));
  std::copy(specs.begin(), specs.end(), up);
  std::copy(adjust.begin(), adjust.end(), up + specs.size());
  std::copy(work_row.begin(), work_row.end(), up + work_at);
  std::copy(argmax_draw.begin(), argmax_draw.end(), up + argmax_at);
  if (allow_words) std::memcpy(up + allow_at, batch.allow.data(), allow_words * 4);
  Tensor inputs = scratch({int64_t(up_words)}, DType::kI32);
  int32_t* in = inputs.data<int32_t>();
  if (n) STRATA_CUDA_CHECK(cudaMemcpyAsync(in, up, up_words * 4, cudaMemcpyHostToDevice, stream()));
  const auto* d_specs = reinterpret_cast<const SampleSpec*>(in);
  size_t down_words = size_t(n);
  if (n && st.plain && !masked) {  // the arg max of every logits row, over many blocks a row
    Tensor row_ids = scratch({logits.dim(0)}, DType::kI32);
    argmax(logits, row_ids);
    launch_pdl(pick_rows_kernel, unsigned((n + 127) / 128), 128, 0, row_ids.data<int32_t>(), d_specs, int(n), d);
    check_launch("pick_rows");
  } else if (n) {
    Tensor work = scratch({std::max<int64_t>(n_work, 1), v}, DType::kF32);
    const bool any_fast = std::any_of(batch.rows.begin(), batch.rows.end(), [&](const SampleSpec& s) {
      return fast_k(s, v, batch.raw_logprobs) > 0;
    });
    const int parts = int((v + kPartSpan - 1) / kPartSpan);
    const int64_t slots = any_fast ? n * parts : 1;
    Tensor part_count = scratch({slots}, DType::kI32), part_max = scratch({slots}, DType::kF32),
           part_sum = scratch({slots}, DType::kF32), part_key = scratch({slots * kPartKeep}, DType::kI32),
           part_id = scratch({slots * kPartKeep}, DType::kI32);
    const int64_t n_argmax = int64_t(argmax_draw.size());
    Tensor argmax_v = scratch({std::max<int64_t>(n_argmax, 1) * kArgmaxParts}, DType::kF32),
           argmax_i = scratch({std::max<int64_t>(n_argmax, 1) * kArgmaxParts}, DType::kI32);
    SampleArgs a{logits.data<float>(),
                 v,
                 d_specs,
                 reinterpret_cast<const LogitAdjust*>(in + specs.size()),
                 in + work_at,
                 work.data<float>(),
                 reinterpret_cast<const uint32_t*>(in + allow_at),
                 batch.allow_words * 2,
                 batch.raw_logprobs,
                 d,
                 reinterpret_cast<float*>(d + n),
                 d + 2 * n,
                 reinterpret_cast<float*>(d + 2 * n + n * kMaxTopLogprobs),
                 parts,
                 part_count.data<int32_t>(),
                 part_max.data<float>(),
                 part_sum.data<float>(),
                 reinterpret_cast<uint32_t*>(part_key.data<int32_t>()),
                 part_id.data<int32_t>(),
                 in + argmax_at,
                 argmax_v.data<float>(),
                 argmax_i.data<int32_t>()};
    if (!st.plain) {  // slots not asked for read 0, as on the CPU (plain: every id is written)
      STRATA_CUDA_CHECK(cudaMemsetAsync(d, 0, words * 4, stream()));
    }
    if (n_argmax > 0) {
      launch_pdl(draw_argmax_part_kernel, dim3(kArgmaxParts, unsigned(n_argmax)), kArgmaxThreads, 0, a);
      check_launch("sample_tokens draw_argmax_part");
      launch_pdl(draw_argmax_final_kernel, unsigned(n_argmax), 32, 0, a);
      check_launch("sample_tokens draw_argmax");
    }
    if (n_work > 0) {
      launch_pdl(adjust_copy_kernel, dim3(unsigned((v + kCopySpan - 1) / kCopySpan), unsigned(n)), kCopyThreads, 0,
                 a);
      check_launch("sample_tokens adjust_copy");
      launch_pdl(adjust_apply_kernel, unsigned(n), kCopyThreads, 0, a);
      check_launch("sample_tokens adjust_apply");
    }
    if (!st.plain) {  // plain: only the ids come back
      if (any_fast) {
        launch_pdl(topk_part_kernel, dim3(unsigned(parts), unsigned(n)), kPartThreads, 0, a);
        check_launch("sample_tokens topk_part");
      }
      launch_pdl(sample_tokens_kernel, unsigned(n), kThreads, 0, a);
      check_launch("sample_tokens");
      down_words = size_t(n) * (2 + 2 * kMaxTopLogprobs);
    }
  }
  void* h = st.down.get(std::max<size_t>(down_words, 1) * 4);
  if (n) STRATA_CUDA_CHECK(cudaMemcpyAsync(h, d, down_words * 4, cudaMemcpyDeviceToHost, stream()));
  STRATA_CUDA_CHECK(cudaEventRecord(st.copied, stream()));
  draws.rows = n;
  draws.pending = true;
}

void sample_tokens_end(DrawsInFlight& draws, SampledTokens& out) {
  Staging& st = *static_cast<Staging*>(draws.staging.get());
  STRATA_CUDA_CHECK(cudaEventSynchronize(st.copied));
  draws.pending = false;
  const int64_t n = draws.rows;
  out.resize(size_t(n));
  const auto* h = static_cast<const int32_t*>(st.down.p);
  if (!n) return;
  std::memcpy(out.ids.data(), h, size_t(n) * 4);
  if (st.plain) return;
  const size_t k = size_t(n) * kMaxTopLogprobs;
  std::memcpy(out.logprobs.data(), h + n, size_t(n) * 4);
  std::memcpy(out.top_ids.data(), h + 2 * n, k * 4);
  std::memcpy(out.top_logprobs.data(), h + 2 * n + int64_t(k), k * 4);
}

}  // namespace strata::ops::cuda
