// CUDA: greedy and top-k / top-p sampling, one block of 1024 threads per row. The thresholds of
// ops.h's definition are found by binary search over the bit patterns of non-negative floats
// (whose order is the integers'): the k-th largest probability is the largest x with
// count(p >= x) >= k, and tau the largest x with mass(p >= x) >= top_p * kept mass. The draw is
// an index-ordered prefix sum: per-thread segment sums, a block scan, then one segment walk.
#include <climits>
#include <cstring>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"

namespace strata::ops::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ int block_count(int v, int* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  int t = lane < (blockDim.x >> 5) ? red[lane] : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

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

__device__ int row_argmax(const float* l, int64_t v, float* redv, int* redi) {
  float best = -INFINITY;
  int bi = INT_MAX;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    if (bi == INT_MAX || l[i] > best) {  // ascending i: the lower index keeps a tie
      best = l[i];
      bi = int(i);
    }
  }
  return block_argmax(best, bi, redv, redi);
}

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_max(lane < (blockDim.x >> 5) ? red[lane] : -INFINITY);
}

// Greedy decode reads a whole vocabulary row (~1 MB at 248k): stage 1 spreads a row over
// kArgmaxParts blocks, each leaving its (best, index); stage 2 is one warp per row over those.
constexpr int kArgmaxParts = 128, kArgmaxThreads = 256;

__global__ void __launch_bounds__(kArgmaxThreads) argmax_part_kernel(const float* logits, int64_t v, float* part_v,
                                                                     int* part_i) {
  pdl_begin();
  __shared__ float redv[32];
  __shared__ int redi[32];
  const int64_t chunk = (v + kArgmaxParts - 1) / kArgmaxParts;
  const int64_t lo = blockIdx.x * chunk, hi = min(v, lo + chunk);
  const float* l = logits + int64_t(blockIdx.y) * v;
  float best = -INFINITY;
  int bi = INT_MAX;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    if (bi == INT_MAX || l[i] > best) {  // ascending i: the lower index keeps a tie
      best = l[i];
      bi = int(i);
    }
  }
  block_argmax(best, bi, redv, redi);
  if (threadIdx.x == 0) {
    part_v[int64_t(blockIdx.y) * kArgmaxParts + blockIdx.x] = redv[0];
    part_i[int64_t(blockIdx.y) * kArgmaxParts + blockIdx.x] = redi[0];
  }
}

__global__ void argmax_final_kernel(const float* part_v, const int* part_i, int32_t* ids) {
  pdl_begin();
  const int lane = threadIdx.x;
  float best = -INFINITY;
  int bi = INT_MAX;
  for (int j = lane; j < kArgmaxParts; j += 32) {
    const float pv = part_v[int64_t(blockIdx.x) * kArgmaxParts + j];
    const int pi = part_i[int64_t(blockIdx.x) * kArgmaxParts + j];
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
  if (lane == 0) ids[blockIdx.x] = bi;
}

struct RowParams {
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const float* uniform;
};

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t v, RowParams rp, float* probs,
                                                          int32_t* ids) {
  pdl_begin();
  __shared__ float redf[32], seg_prefix[kThreads];
  __shared__ int redi[32], pick, fallback;
  const int r = blockIdx.x, tid = threadIdx.x;
  const float* l = logits + int64_t(r) * v;
  float* p = probs + int64_t(r) * v;
  const float temp = rp.temperature[r];
  if (temp <= 0.f) {
    const int id = row_argmax(l, v, redf, redi);
    if (tid == 0) ids[r] = id;
    return;
  }
  const float inv_t = 1.f / temp;
  float mx = -INFINITY;
  for (int64_t i = tid; i < v; i += blockDim.x) mx = fmaxf(mx, l[i] * inv_t);
  mx = block_max(mx, redf);
  float sum = 0.f;
  for (int64_t i = tid; i < v; i += blockDim.x) {
    const float e = expf(l[i] * inv_t - mx);
    p[i] = e;
    sum += e;
  }
  sum = block_sum(sum, redf);
  for (int64_t i = tid; i < v; i += blockDim.x) p[i] /= sum;
  __syncthreads();
  const int top_k = rp.top_k[r];
  float floor_k = 0.f;
  if (top_k > 0 && top_k < v) {
    unsigned lo = 0, hi = __float_as_uint(1.f) + 1;  // count(p >= lo) >= k, count(p >= hi) < k
    while (hi - lo > 1) {
      const unsigned mid = lo + (hi - lo) / 2;
      const float x = __uint_as_float(mid);
      int c = 0;
      for (int64_t i = tid; i < v; i += blockDim.x) c += p[i] >= x;
      if (block_count(c, redi) >= top_k) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    floor_k = __uint_as_float(lo);
  }
  float kept = 0.f;
  for (int64_t i = tid; i < v; i += blockDim.x) kept += p[i] >= floor_k ? p[i] : 0.f;
  kept = block_sum(kept, redf);
  float tau = floor_k;
  const float top_p = rp.top_p[r];
  if (top_p < 1.f) {
    const float target = top_p * kept;
    unsigned lo = __float_as_uint(floor_k), hi = __float_as_uint(1.f) + 1;
    while (hi - lo > 1) {
      const unsigned mid = lo + (hi - lo) / 2;
      const float x = __uint_as_float(mid);
      float m = 0.f;
      for (int64_t i = tid; i < v; i += blockDim.x) m += p[i] >= x ? p[i] : 0.f;
      if (block_sum(m, redf) >= target) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    tau = __uint_as_float(lo);
  }
  // Index-ordered draw: thread t owns indices [t * seg, (t + 1) * seg).
  const int64_t seg = (v + blockDim.x - 1) / blockDim.x;
  const int64_t b0 = tid * seg, b1 = min(v, b0 + seg);
  float mine = 0.f;
  for (int64_t i = b0; i < b1; ++i) mine += p[i] >= tau ? p[i] : 0.f;
  seg_prefix[tid] = mine;
  if (tid == 0) {
    pick = INT_MAX;
    fallback = -1;
  }
  __syncthreads();
  if (tid == 0) {
    float run = 0.f;
    for (int i = 0; i < int(blockDim.x); ++i) {
      const float s = seg_prefix[i];
      seg_prefix[i] = run;
      run += s;
    }
    redf[0] = run;
  }
  __syncthreads();
  const float stop = rp.uniform[r] * redf[0];
  float run = seg_prefix[tid];
  int last = -1;
  for (int64_t i = b0; i < b1; ++i) {
    if (p[i] < tau) continue;
    last = int(i);
    run += p[i];
    if (run > stop) {
      atomicMin(&pick, int(i));
      break;
    }
  }
  // Rounding can leave the stop past the end: then the last kept token is the draw.
  if (last >= 0) atomicMax(&fallback, last);
  __syncthreads();
  if (tid == 0) ids[r] = pick != INT_MAX ? pick : fallback;
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
                                                       ids.data<int32_t>());
  check_launch("argmax");
}

void sample(const Tensor& logits, const std::vector<SampleRow>& rows, const Tensor& ids) {
  OpTimer timer_("sample");
  check_rows(logits, ids, "sample");
  const int64_t n = logits.dim(0), v = logits.dim(1);
  STRATA_CHECK(int64_t(rows.size()) == n, "sample: ", rows.size(), " parameter rows for ", n, " logits rows");
  if (!n) return;
  std::vector<int32_t> packed(4 * n);
  for (int64_t i = 0; i < n; ++i) {
    const SampleRow& p = rows[i];
    STRATA_CHECK(p.uniform >= 0.f && p.uniform < 1.f && p.top_p > 0.f,
                 "sample: uniform must be in [0, 1) and top_p > 0, got ", p.uniform, " and ", p.top_p);
    std::memcpy(&packed[i], &p.temperature, 4);
    packed[n + i] = p.top_k;
    std::memcpy(&packed[2 * n + i], &p.top_p, 4);
    std::memcpy(&packed[3 * n + i], &p.uniform, 4);
  }
  Tensor keep;
  const int32_t* d = device_ints(packed, &keep);
  RowParams rp{reinterpret_cast<const float*>(d), d + n, reinterpret_cast<const float*>(d + 2 * n),
               reinterpret_cast<const float*>(d + 3 * n)};
  Tensor probs = scratch({n, v}, DType::kF32);
  launch_pdl(sample_kernel, unsigned(n), kThreads, 0, logits.data<float>(), v, rp, probs.data<float>(),
                                                        ids.data<int32_t>());
  check_launch("sample");
}

}  // namespace strata::ops::cuda
