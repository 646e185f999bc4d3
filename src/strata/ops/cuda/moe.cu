// CUDA: mixture of experts. Routing (softmax, top-k, renormalise) is one warp per token.
// Experts:
//  - up to kGemvTokens tokens (decode): per (token, expert) pair a GEMV over gate_up with SiLU
//    fused, then one kernel per token computing each output row's dot with every chosen expert's
//    down row and summing them with the routing weights (only the chosen experts are read);
//  - more tokens: count tokens per expert, scan into a tile schedule and permute the pairs, all
//    on the device (no host sync, so CUDA graphs can capture it); two grouped GEMMs on bf16
//    tensor cores over the experts' tiles (gate_up with SiLU-mul in its epilogue, then down);
//    and the weighted un-permute.
#include <algorithm>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/moe_gemm.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kGemvTokens = 16;

__global__ void route_kernel(const void* logits, bool l32, int64_t rows, int e, int top_k, bool norm,
                             int32_t* ids, float* weights) {
  extern __shared__ float probs[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + warp;
  if (r >= rows) return;
  float* p = probs + warp * e;
  float mx = -INFINITY;
  for (int i = lane; i < e; i += 32) {
    p[i] = ldf(logits, l32, r * e + i);
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int i = lane; i < e; i += 32) {
    p[i] = expf(p[i] - mx);
    sum += p[i];
  }
  sum = warp_sum(sum);
  for (int i = lane; i < e; i += 32) p[i] /= sum;
  __syncwarp();
  float total = 0.f;
  for (int j = 0; j < top_k; ++j) {
    float best = -1.f;
    int bi = e;
    for (int i = lane; i < e; i += 32) {
      if (p[i] > best) {  // ascending i: the lower index keeps a tie
        best = p[i];
        bi = i;
      }
    }
    warp_argmax(best, bi);
    if (lane == 0) {
      ids[r * top_k + j] = bi;
      weights[r * top_k + j] = best;
      p[bi] = -2.f;
    }
    total += best;
    __syncwarp();
  }
  if (norm && lane == 0) {
    for (int j = 0; j < top_k; ++j) weights[r * top_k + j] /= total;
  }
}

// Dot of a weight row with a bf16 vector, both of length n (a multiple of 8), over one warp.
__device__ __forceinline__ float warp_dot(const bf16* __restrict__ w, const bf16* __restrict__ x, int64_t n) {
  const int lane = threadIdx.x & 31;
  float acc = 0.f;
  for (int64_t k0 = int64_t(lane) * 8; k0 < n; k0 += 256 * 4) {
    uint4 wv[4], xv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t k = k0 + u * 256;
      wv[u] = k < n ? __ldg(reinterpret_cast<const uint4*>(w + k)) : make_uint4(0, 0, 0, 0);
      xv[u] = k < n ? __ldg(reinterpret_cast<const uint4*>(x + k)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float wf[8], xf[8];
      unpack8(wv[u], wf);
      unpack8(xv[u], xf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(wf[i], xf[i], acc);
    }
  }
  return acc;
}

// grid (pairs, ceil(I / 8)): warp w of block y computes act[pair, 8y + w].
__global__ void __launch_bounds__(256) gate_up_gemv_kernel(const bf16* x, const bf16* gate_up, const int32_t* ids,
                                                           int top_k, int64_t h_dim, int64_t inter, bf16* act) {
  const int pair = blockIdx.x, lane = threadIdx.x & 31;
  const int64_t i = int64_t(blockIdx.y) * 8 + (threadIdx.x >> 5);
  if (i >= inter) return;
  const int64_t e = ids[pair];
  const bf16* xr = x + int64_t(pair / top_k) * h_dim;
  const bf16* w = gate_up + e * 2 * inter * h_dim;
  const float g = warp_sum(warp_dot(w + i * h_dim, xr, h_dim));
  const float u = warp_sum(warp_dot(w + (inter + i) * h_dim, xr, h_dim));
  if (lane == 0) act[int64_t(pair) * inter + i] = f2bf(silu_f(g) * u);
}

// grid (tokens, ceil(H / 8)): warp w of block y computes out[t, 8y + w] over the token's experts.
__global__ void __launch_bounds__(256) down_combine_kernel(const bf16* act, const bf16* down, const int32_t* ids,
                                                           const float* weights, int top_k, int64_t h_dim,
                                                           int64_t inter, bf16* out) {
  const int t = blockIdx.x, lane = threadIdx.x & 31;
  const int64_t h = int64_t(blockIdx.y) * 8 + (threadIdx.x >> 5);
  if (h >= h_dim) return;
  float total = 0.f;
  for (int j = 0; j < top_k; ++j) {
    const int pair = t * top_k + j;
    const int64_t e = ids[pair];
    const float y = warp_sum(warp_dot(down + (e * h_dim + h) * inter, act + int64_t(pair) * inter, inter));
    total += weights[pair] * y;
  }
  if (lane == 0) out[int64_t(t) * h_dim + h] = f2bf(total);
}

__global__ void count_kernel(const int32_t* ids, int64_t pairs, int32_t* counts) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    atomicAdd(&counts[ids[p]], 1);
  }
}

// One block of 1024 threads (E <= 1024): exclusive scans of the counts and of the tiles.
__global__ void __launch_bounds__(1024) schedule_kernel(const int32_t* counts, int e, int bm, int32_t* offsets,
                                                        int32_t* cursor, MoeTiles tiles) {
  __shared__ int32_t sc[1024], st[1024];
  const int i = threadIdx.x;
  const int c = i < e ? counts[i] : 0;
  const int nt = (c + bm - 1) / bm;
  sc[i] = c;
  st[i] = nt;
  __syncthreads();
  for (int o = 1; o < 1024; o <<= 1) {
    const int a = i >= o ? sc[i - o] : 0, b = i >= o ? st[i - o] : 0;
    __syncthreads();
    sc[i] += a;
    st[i] += b;
    __syncthreads();
  }
  if (i < e) {
    const int row0 = sc[i] - c, tile0 = st[i] - nt;
    offsets[i] = row0;
    cursor[i] = 0;
    for (int j = 0; j < nt; ++j) {
      tiles.expert[tile0 + j] = i;
      tiles.row0[tile0 + j] = row0 + j * bm;
      tiles.rows[tile0 + j] = min(bm, c - j * bm);
    }
  }
  if (i == 1023) *tiles.count = st[1023];
}

__global__ void permute_kernel(const int32_t* ids, int64_t pairs, int top_k, const int32_t* offsets, int32_t* cursor,
                               int32_t* perm_token, int32_t* pair_pos) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int e = ids[p];
    const int pos = offsets[e] + atomicAdd(&cursor[e], 1);
    perm_token[pos] = int32_t(p / top_k);
    pair_pos[p] = pos;
  }
}

__global__ void unpermute_kernel(const bf16* y, const int32_t* pair_pos, const float* weights, int top_k,
                                 int64_t h_dim, bf16* out) {
  const int t = blockIdx.x;
  for (int64_t h = threadIdx.x; h < h_dim; h += blockDim.x) {
    float total = 0.f;
    for (int j = 0; j < top_k; ++j) {
      const int pair = t * top_k + j;
      total += weights[pair] * bf2f(y[int64_t(pair_pos[pair]) * h_dim + h]);
    }
    out[int64_t(t) * h_dim + h] = f2bf(total);
  }
}

}  // namespace

void moe_route_softmax(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids, const Tensor& weights) {
  OpTimer timer_("moe_route_softmax");
  expect_float(logits, "moe_route_softmax", "logits");
  expect_dtype(ids, DType::kI32, "moe_route_softmax", "ids");
  expect_dtype(weights, DType::kF32, "moe_route_softmax", "weights");
  const int64_t t = logits.dim(0), e = logits.dim(1);
  STRATA_CHECK(top_k >= 1 && top_k <= e && e <= 2048, "moe_route_softmax: top_k ", top_k, " of ", e,
               " experts (at most 2048 experts on CUDA)");
  STRATA_CHECK(ids.shape() == Shape({t, top_k}) && weights.shape() == ids.shape(), "moe_route_softmax: ids ",
               ids.describe(), ", weights ", weights.describe());
  if (!t) return;
  route_kernel<<<blocks_for(t, 4), 128, 4 * e * sizeof(float), stream()>>>(
      logits.raw(), is_f32(logits), t, int(e), top_k, norm_topk, ids.data<int32_t>(), weights.data<float>());
  check_launch("moe_route");
}

void moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                 const Tensor& weights, const Tensor& out) {
  OpTimer timer_("moe_experts", x.ndim() ? x.dim(0) : 0, ids.ndim() == 2 ? ids.dim(1) : 0);
  const char* op = "moe_experts";
  expect_dtype(x, DType::kBF16, op, "x");
  expect_dtype(gate_up, DType::kBF16, op, "gate_up");
  expect_dtype(down, DType::kBF16, op, "down");
  expect_dtype(ids, DType::kI32, op, "ids");
  expect_dtype(weights, DType::kF32, op, "weights");
  expect_dtype(out, DType::kBF16, op, "out");
  const int64_t t = x.dim(0), h = x.dim(1), ne = gate_up.dim(0), inter = down.dim(2), k = ids.dim(1);
  STRATA_CHECK(gate_up.shape() == Shape({ne, 2 * inter, h}) && down.shape() == Shape({ne, h, inter}) &&
                   ids.shape() == Shape({t, k}) && weights.shape() == ids.shape() && out.shape() == x.shape(),
               "moe_experts: x ", x.describe(), ", gate_up ", gate_up.describe(), ", down ", down.describe(),
               ", ids ", ids.describe(), ", out ", out.describe());
  STRATA_CHECK(h % 8 == 0 && inter % 8 == 0, "moe_experts: hidden ", h, " and intermediate ", inter,
               " sizes must be multiples of 8 on CUDA");
  if (!t) return;
  const auto* xp = static_cast<const bf16*>(x.raw());
  const auto* gp = static_cast<const bf16*>(gate_up.raw());
  const auto* dp = static_cast<const bf16*>(down.raw());
  const int64_t pairs = t * k;
  const bool grouped = t > kGemvTokens && moe_gemm_supported(h, inter) && ne <= 1024;
  if (!grouped) {
    Tensor act = scratch({pairs, inter}, DType::kBF16);
    gate_up_gemv_kernel<<<dim3(unsigned(pairs), blocks_for(inter, 8)), 256, 0, stream()>>>(
        xp, gp, ids.data<int32_t>(), int(k), h, inter, static_cast<bf16*>(act.raw()));
    check_launch("moe_gate_up_gemv");
    down_combine_kernel<<<dim3(unsigned(t), blocks_for(h, 8)), 256, 0, stream()>>>(
        static_cast<const bf16*>(act.raw()), dp, ids.data<int32_t>(), weights.data<float>(), int(k), h, inter,
        static_cast<bf16*>(out.raw()));
    check_launch("moe_down_combine");
    return;
  }
  const int64_t max_tiles = (pairs + kMoeBm - 1) / kMoeBm + ne;
  // One int32 workspace: counts, offsets, cursor [E]; tiles 3 x max_tiles + 1; perm, pair_pos.
  Tensor iws = scratch({3 * ne + 3 * max_tiles + 1 + 2 * pairs}, DType::kI32);
  int32_t* counts = iws.data<int32_t>();
  int32_t* offsets = counts + ne;
  int32_t* cursor = offsets + ne;
  MoeTiles tiles{cursor + ne, cursor + ne + max_tiles, cursor + ne + 2 * max_tiles, cursor + ne + 3 * max_tiles};
  int32_t* perm_token = tiles.count + 1;
  int32_t* pair_pos = perm_token + pairs;
  STRATA_CUDA_CHECK(cudaMemsetAsync(counts, 0, ne * sizeof(int32_t), stream()));
  const unsigned pgrid = std::min<unsigned>(blocks_for(pairs, 256), unsigned(sm_count() * 8));
  count_kernel<<<pgrid, 256, 0, stream()>>>(ids.data<int32_t>(), pairs, counts);
  check_launch("moe_count");
  schedule_kernel<<<1, 1024, 0, stream()>>>(counts, int(ne), kMoeBm, offsets, cursor, tiles);
  check_launch("moe_schedule");
  permute_kernel<<<pgrid, 256, 0, stream()>>>(ids.data<int32_t>(), pairs, int(k), offsets, cursor, perm_token,
                                              pair_pos);
  check_launch("moe_permute");
  Tensor act = scratch({pairs, inter}, DType::kBF16);
  Tensor y = scratch({pairs, h}, DType::kBF16);
  moe_grouped_gemm(xp, perm_token, gp, tiles, unsigned(max_tiles), h, inter, true, static_cast<bf16*>(act.raw()));
  moe_grouped_gemm(static_cast<const bf16*>(act.raw()), nullptr, dp, tiles, unsigned(max_tiles), inter, h, false,
                   static_cast<bf16*>(y.raw()));
  unpermute_kernel<<<unsigned(t), 256, 0, stream()>>>(static_cast<const bf16*>(y.raw()), pair_pos,
                                                      weights.data<float>(), int(k), h,
                                                      static_cast<bf16*>(out.raw()));
  check_launch("moe_unpermute");
}

}  // namespace strata::ops::cuda
