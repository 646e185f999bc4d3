// CUDA: mixture of experts. Routing (softmax, top-k, renormalise) is one warp per token.
// Experts:
//  - up to kGemvTokens tokens (decode): per (token, expert) pair a GEMV over gate_up with SiLU
//    fused, then one kernel per token computing each output row's dot with every chosen expert's
//    down row and summing them with the routing weights (only the chosen experts are read);
//  - more tokens: count tokens per expert, scan into a tile schedule and permute the pairs, all
//    on the device (no host sync, so CUDA graphs can capture it); two grouped GEMMs on bf16
//    tensor cores over the experts' tiles (gate_up with SiLU-mul in its epilogue, then down);
//    and the weighted un-permute.
// Routed experts are bf16, or kept compressed (ExpertMatrix's WeightFormat): FP8 (fp8_weights.cuh),
// NVFP4 or MXFP4 (fp4_weights.cuh; W4A16, the mma.sync tiles at every size above the GEMVs').
#include <algorithm>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/fp4_weights.cuh"
#include "strata/ops/cuda/fp8_weights.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/fp8_rows.h"
#include "strata/ops/cuda/moe_gemm.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kGemvTokens = 16;

// A warp's top-k choices of token r: lane k keeps choice k (keep_choice, for k < 32) and the
// lanes store them together (store_choices); choices past 32 go one at a time from lane 0.
// Lane 0 storing each choice and then reading them back to renormalise waited on every round
// trip.
struct WarpChoices {
  float w = 0.f;
  int id = 0;
  __device__ void keep(int64_t r, int k, int top_k, float best, int bi, int32_t* ids, float* weights) {
    const int lane = threadIdx.x & 31;
    if (k < 32 && lane == k) w = best, id = bi;
    if (ids && k >= 32 && lane == 0) {
      ids[r * top_k + k] = bi;
      weights[r * top_k + k] = best;
    }
  }
  // total: the chosen probabilities' sum (the weights are divided by it when norm).
  __device__ void store(int64_t r, int top_k, bool norm, float total, int32_t* ids, float* weights) const {
    const int lane = threadIdx.x & 31;
    if (!ids) return;
    if (lane < min(top_k, 32)) {
      ids[r * top_k + lane] = id;
      weights[r * top_k + lane] = norm ? w / total : w;
    }
    if (norm && lane == 0) {
      for (int k = 32; k < top_k; ++k) weights[r * top_k + k] /= total;
    }
  }
};

__global__ void route_kernel(const void* logits, bool l32, int64_t rows, int e, int top_k, bool norm,
                             int32_t* ids, float* weights) {
  pdl_begin();
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
  WarpChoices chosen;
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
    chosen.keep(r, j, top_k, best, bi, ids, weights);
    if (lane == 0) p[bi] = -2.f;
    total += best;
    __syncwarp();
  }
  chosen.store(r, top_k, norm, total, ids, weights);
}

// The same routing for token r with each lane's PER experts in registers (E <= 32 PER), so the
// top-k rounds touch no shared memory: the common case (E <= 256). Returns the expert of choice
// `want`; with ids non-null it runs all top_k rounds and lane 0 writes the choices and their
// weights (renormalised when norm).
template <int PER>
__device__ __forceinline__ int route_token(const void* logits, bool l32, int64_t r, int e, int top_k, bool norm,
                                           int want, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  float p[PER];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = lane + 32 * j;
    p[j] = i < e ? ldf(logits, l32, r * e + i) : -INFINITY;
    mx = fmaxf(mx, p[j]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    if (lane + 32 * j < e) {
      p[j] = expf(p[j] - mx);
      sum += p[j];
    }
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int j = 0; j < PER; ++j) p[j] = lane + 32 * j < e ? p[j] / sum : -2.f;
  float total = 0.f;
  int chosen = 0;
  const int rounds = ids ? top_k : want + 1;
  WarpChoices choices;
  for (int k = 0; k < rounds; ++k) {
    float best = -1.f;
    int bi = e;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      if (p[j] > best) {  // ascending index within the lane: the lower index keeps a tie
        best = p[j];
        bi = lane + 32 * j;
      }
    }
    warp_argmax(best, bi);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      if (lane + 32 * j == bi) p[j] = -2.f;
    }
    choices.keep(r, k, top_k, best, bi, ids, weights);
    if (k == want) chosen = bi;
    total += best;
  }
  choices.store(r, top_k, norm, total, ids, weights);
  return chosen;
}

template <int PER>
__global__ void route_reg_kernel(const void* logits, bool l32, int64_t rows, int e, int top_k, bool norm,
                                 int32_t* ids, float* weights) {
  pdl_begin();
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;
  route_token<PER>(logits, l32, r, e, top_k, norm, top_k - 1, ids, weights);
}

// Routing done inside the gate/up pass (moe_route_experts): each warp routes its own token from
// the router logits, and one warp per token writes the choices for the down pass.
struct RouteArgs {
  const void* logits = nullptr;  // [T, E]; null: the ids are given
  bool l32 = false, norm = false;
  int experts = 0;
  int32_t* ids = nullptr;  // [T, top_k] out
  float* weights = nullptr;
};

// Decode's expert GEMVs load all of a warp's weight vectors for a step before the first multiply.
// grid (pairs, ceil(I / 8)): warp w of block y computes act[pair, 8y + w] = silu(g . x) * (u . x).
// At most 64 registers (4 blocks of 8 warps per SM): a batch-1 step's 4096 warps are all resident
// at once, each with half its gate and up rows (2 x 2 KB) in flight per pass.
constexpr int kGateUpWarps = 8, kGateUpUnroll = 4;
// FP4: a lane's vector is 32 codes, so a 2048 row (1 KB) is two vectors a lane for gate and two
// for up: 4 KB a warp in flight, as bf16's and FP8's unroll keeps.
constexpr int kGateUpFp4Unroll = 2;

// kRoutePer > 0: the pair's expert comes from route_token<kRoutePer> over route's logits.
// kFormat kFp8: gate_up holds F8_E4M3 codes with per-row scales (fp8_weights.cuh); a lane's
// 16-byte vector is then 16 codes of one 128-column group, their dot with x taken in f32 and
// scaled once. kNvfp4 / kMxfp4: e2m1 codes with per-row scale bytes (fp4_weights.cuh); a lane's
// vector is 32 codes (two NVFP4 groups, one MXFP4 group), each group's dot (exact codes, f32)
// times its scale, and NVFP4's row global multiplies the row's sum once.
template <int kRoutePer, WeightFormat kFormat>
__global__ void __launch_bounds__(kGateUpWarps * 32, 4) gate_up_gemv_kernel(const bf16* x, ExpertMatrix gate_up,
                                                                        const int32_t* ids, RouteArgs route,
                                                                        int top_k, int64_t h_dim, int64_t inter,
                                                                        float limit, bf16* act) {
  pdl_begin();
  const int pair = blockIdx.x, lane = threadIdx.x & 31;
  const int64_t i = int64_t(blockIdx.y) * kGateUpWarps + (threadIdx.x >> 5);
  if (i >= inter) return;
  int64_t e;
  if constexpr (kRoutePer > 0) {
    const int token = pair / top_k, choice = pair % top_k;
    // The warp that routes the token's last choice runs every round: it writes them all.
    const bool writer = blockIdx.y == 0 && threadIdx.x < 32 && choice == top_k - 1;
    e = route_token<kRoutePer>(route.logits, route.l32, token, route.experts, top_k, route.norm, choice,
                               writer ? route.ids : nullptr, writer ? route.weights : nullptr);
  } else {
    e = ids[pair];
  }
  const bf16* xr = x + int64_t(pair / top_k) * h_dim;
  float g = 0.f, u = 0.f;
  if constexpr (kFormat == WeightFormat::kFp8) {
    const int64_t gate_row = e * 2 * inter + i;
    const auto* wg = static_cast<const uint8_t*>(gate_up.w) + gate_row * h_dim;
    const uint8_t* wu = wg + inter * h_dim;
    const float* sg = gate_up.scale + gate_row * gate_up.groups;
    const float* su = sg + inter * gate_up.groups;
    for (int64_t k0 = int64_t(lane) * 16; k0 < h_dim; k0 += 512 * kGateUpUnroll) {
      uint4 gv[kGateUpUnroll], uv[kGateUpUnroll];
#pragma unroll
      for (int j = 0; j < kGateUpUnroll; ++j) {
        const int64_t k = k0 + j * 512;
        const bool in = k < h_dim;
        gv[j] = in ? __ldg(reinterpret_cast<const uint4*>(wg + k)) : make_uint4(0, 0, 0, 0);
        uv[j] = in ? __ldg(reinterpret_cast<const uint4*>(wu + k)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kGateUpUnroll; ++j) {
        const int64_t k = k0 + j * 512;
        if (k >= h_dim) break;
        float part[2] = {0.f, 0.f};
        dot16_e4m3<2>({gv[j], uv[j]}, xr + k, part);
        g = fmaf(__ldg(sg + k / kFp8Group), part[0], g);
        u = fmaf(__ldg(su + k / kFp8Group), part[1], u);
      }
    }
  } else if constexpr (is_fp4(kFormat)) {
    // Rows of h_dim / 2 bytes (h_dim a multiple of 32: 16-byte aligned vectors).
    const int64_t gate_row = e * 2 * inter + i, row_bytes = h_dim / 2;
    const auto* wg = static_cast<const uint8_t*>(gate_up.w) + gate_row * row_bytes;
    const uint8_t* wu = wg + inter * row_bytes;
    const uint8_t* const scales[2] = {gate_up.fp4_scale + gate_row * gate_up.groups,
                                      gate_up.fp4_scale + (gate_row + inter) * gate_up.groups};
    float gate_global = 1.f, up_global = 1.f;
    if constexpr (kFormat == WeightFormat::kNvfp4) {
      gate_global = __ldg(gate_up.global + gate_row);
      up_global = __ldg(gate_up.global + gate_row + inter);
    }
    float acc[2] = {0.f, 0.f};
    for (int64_t k0 = int64_t(lane) * 32; k0 < h_dim; k0 += 1024 * kGateUpFp4Unroll) {
      uint4 gv[kGateUpFp4Unroll], uv[kGateUpFp4Unroll];
#pragma unroll
      for (int j = 0; j < kGateUpFp4Unroll; ++j) {
        const int64_t k = k0 + j * 1024;
        const bool in = k < h_dim;
        gv[j] = in ? __ldg(reinterpret_cast<const uint4*>(wg + k / 2)) : make_uint4(0, 0, 0, 0);
        uv[j] = in ? __ldg(reinterpret_cast<const uint4*>(wu + k / 2)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kGateUpFp4Unroll; ++j) {
        const int64_t k = k0 + j * 1024;
        if (k >= h_dim) break;
        fp4_dot32<kFormat, 2>({gv[j], uv[j]}, xr, scales, k, acc);
      }
    }
    g = warp_sum(acc[0]) * gate_global;
    u = warp_sum(acc[1]) * up_global;
  } else {
    const bf16* wg = static_cast<const bf16*>(gate_up.w) + (e * 2 * inter + i) * h_dim;
    const bf16* wu = wg + inter * h_dim;
    for (int64_t k0 = int64_t(lane) * 8; k0 < h_dim; k0 += 256 * kGateUpUnroll) {
      uint4 gv[kGateUpUnroll], uv[kGateUpUnroll];
#pragma unroll
      for (int j = 0; j < kGateUpUnroll; ++j) {
        const int64_t k = k0 + j * 256;
        const bool in = k < h_dim;
        gv[j] = in ? __ldg(reinterpret_cast<const uint4*>(wg + k)) : make_uint4(0, 0, 0, 0);
        uv[j] = in ? __ldg(reinterpret_cast<const uint4*>(wu + k)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kGateUpUnroll; ++j) {
        const int64_t k = k0 + j * 256;
        if (k >= h_dim) break;
        float xf[8], gf[8], uf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(xr + k)), xf);
        unpack8(gv[j], gf);
        unpack8(uv[j], uf);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          g = fmaf(gf[q], xf[q], g);
          u = fmaf(uf[q], xf[q], u);
        }
      }
    }
  }
  if constexpr (!is_fp4(kFormat)) {
    g = warp_sum(g);
    u = warp_sum(u);
  }
  if (lane == 0) act[int64_t(pair) * inter + i] = f2bf(swiglu_f(g, u, limit));
}

// grid (tokens, ceil(H / 8)): warp w of block y computes out[t, 8y + w] = sum_j w_j (down_j . act_j)
// over the token's experts, kDownExperts experts' rows loaded at once.
constexpr int kDownExperts = 8, kDownVecs = 2;  // 2 vectors per lane: 512 intermediate columns per pass

// The shared expert (optional: shared.down null) joins as in moe_experts_shared, with the
// unfused ops' roundings: its activation and its output rounded to bf16 before the gated add.
struct SharedArgs {
  const bf16* gate_up;  // [T, 2 Is]
  const bf16* down;     // [H, Is]
  const void* gate;     // [T, 1]
  bool gate32;
  int64_t inter;
};

// kFormat kFp8: down holds F8_E4M3 codes with per-row scales; a lane's vector is 16 codes of one
// group. kNvfp4 / kMxfp4: e2m1 codes with per-row scale bytes; a lane's vector is 8 bytes, 16
// codes (inter 512: 256 bytes a row, one pass with all kDownExperts rows in flight), their dot
// times the group's scale and, NVFP4, the row's global folded into the expert's routing weight.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(256) down_combine_kernel(const bf16* act, ExpertMatrix down, const int32_t* ids,
                                                           const float* weights, int top_k, int64_t h_dim,
                                                           int64_t inter, SharedArgs shared, bf16* out) {
  pdl_trigger();
  const int t = blockIdx.x, lane = threadIdx.x & 31;
  const int64_t h = int64_t(blockIdx.y) * 8 + (threadIdx.x >> 5);
  if (h >= h_dim) return;
  // The shared expert's first weight vectors load before pdl_wait (weights are never written);
  // its activations and gate right after it, beside the routed experts' ids.
  uint4 swv[kDownVecs], sgv[kDownVecs], suv[kDownVecs];
  const bf16* s_gu = shared.down ? shared.gate_up + int64_t(t) * 2 * shared.inter : nullptr;
  const bf16* s_w = shared.down ? shared.down + h * shared.inter : nullptr;
  auto load_shared = [&](int64_t k0, bool weights) {
#pragma unroll
    for (int q = 0; q < kDownVecs; ++q) {
      const int64_t k = k0 + q * 256;
      const bool in = k < shared.inter;
      if (weights) swv[q] = in ? __ldg(reinterpret_cast<const uint4*>(s_w + k)) : make_uint4(0, 0, 0, 0);
      if (!weights) {
        sgv[q] = in ? *reinterpret_cast<const uint4*>(s_gu + k) : make_uint4(0, 0, 0, 0);
        suv[q] = in ? *reinterpret_cast<const uint4*>(s_gu + shared.inter + k) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  if (shared.down) load_shared(int64_t(lane) * 8, true);
  pdl_wait();
  float s_gate = 0.f;
  if (shared.down) {
    load_shared(int64_t(lane) * 8, false);
    s_gate = sigmoid_f(ldf(shared.gate, shared.gate32, t));
  }
  float total = 0.f;
  if constexpr (kFormat == WeightFormat::kFp8) {
    for (int j0 = 0; j0 < top_k; j0 += kDownExperts) {
      const uint8_t* wr[kDownExperts];
      const float* sr[kDownExperts];
      const bf16* ar[kDownExperts];
      float wt[kDownExperts];
#pragma unroll
      for (int jj = 0; jj < kDownExperts; ++jj) {
        const int pair = t * top_k + min(j0 + jj, top_k - 1);
        const int64_t row = int64_t(ids[pair]) * h_dim + h;
        wr[jj] = static_cast<const uint8_t*>(down.w) + row * inter;
        sr[jj] = down.scale + row * down.groups;
        ar[jj] = act + int64_t(pair) * inter;
        wt[jj] = j0 + jj < top_k ? weights[pair] : 0.f;
      }
      for (int64_t k0 = int64_t(lane) * 16; k0 < inter; k0 += 512) {
        uint4 wv[kDownExperts];
#pragma unroll
        for (int jj = 0; jj < kDownExperts; ++jj) {
          wv[jj] = j0 + jj < top_k ? __ldg(reinterpret_cast<const uint4*>(wr[jj] + k0)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int jj = 0; jj < kDownExperts; ++jj) {
          if (j0 + jj >= top_k) break;
          float part[1] = {0.f};
          dot16_e4m3<1>({wv[jj]}, ar[jj] + k0, part);
          total = fmaf(wt[jj], part[0] * __ldg(sr[jj] + k0 / kFp8Group), total);
        }
      }
    }
  } else if constexpr (is_fp4(kFormat)) {
    // Rows of inter / 2 bytes (inter a multiple of 32: 8-byte aligned vectors).
    for (int j0 = 0; j0 < top_k; j0 += kDownExperts) {
      const uint8_t* wr[kDownExperts];
      const uint8_t* sr[kDownExperts];
      const bf16* ar[kDownExperts];
      float wt[kDownExperts];
#pragma unroll
      for (int jj = 0; jj < kDownExperts; ++jj) {
        const int pair = t * top_k + min(j0 + jj, top_k - 1);
        const int64_t row = int64_t(ids[pair]) * h_dim + h;
        wr[jj] = static_cast<const uint8_t*>(down.w) + row * (inter / 2);
        sr[jj] = down.fp4_scale + row * down.groups;
        ar[jj] = act + int64_t(pair) * inter;
        const float global = kFormat == WeightFormat::kNvfp4 ? __ldg(down.global + row) : 1.f;
        wt[jj] = j0 + jj < top_k ? weights[pair] * global : 0.f;
      }
      for (int64_t k0 = int64_t(lane) * 16; k0 < inter; k0 += 512) {
        uint2 wv[kDownExperts];
#pragma unroll
        for (int jj = 0; jj < kDownExperts; ++jj) {
          wv[jj] = j0 + jj < top_k ? __ldg(reinterpret_cast<const uint2*>(wr[jj] + k0 / 2)) : make_uint2(0, 0);
        }
#pragma unroll
        for (int jj = 0; jj < kDownExperts; ++jj) {
          if (j0 + jj >= top_k) break;
          const float scale = fp4_scale_value<kFormat>(__ldg(sr[jj] + k0 / fp4_group<kFormat>()));
          const uint32_t words[1][2] = {{wv[jj].x, wv[jj].y}};
          float part[1];
          e2m1x16_dots<1>(words, ar[jj] + k0, part);
          total = fmaf(wt[jj], part[0] * scale, total);
        }
      }
    }
  }
  for (int j0 = 0; kFormat == WeightFormat::kBf16 && j0 < top_k; j0 += kDownExperts) {
    const bf16* wr[kDownExperts];
    const bf16* ar[kDownExperts];
    float wt[kDownExperts];
#pragma unroll
    for (int jj = 0; jj < kDownExperts; ++jj) {
      const int pair = t * top_k + min(j0 + jj, top_k - 1);
      wr[jj] = static_cast<const bf16*>(down.w) + (int64_t(ids[pair]) * h_dim + h) * inter;
      ar[jj] = act + int64_t(pair) * inter;
      wt[jj] = j0 + jj < top_k ? weights[pair] : 0.f;
    }
    for (int64_t k0 = int64_t(lane) * 8; k0 < inter; k0 += 256 * kDownVecs) {
      uint4 wv[kDownExperts][kDownVecs], av[kDownExperts][kDownVecs];
#pragma unroll
      for (int jj = 0; jj < kDownExperts; ++jj) {
#pragma unroll
        for (int q = 0; q < kDownVecs; ++q) {
          const int64_t k = k0 + q * 256;
          const bool in = k < inter && j0 + jj < top_k;
          wv[jj][q] = in ? __ldg(reinterpret_cast<const uint4*>(wr[jj] + k)) : make_uint4(0, 0, 0, 0);
          av[jj][q] = in ? __ldg(reinterpret_cast<const uint4*>(ar[jj] + k)) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int jj = 0; jj < kDownExperts; ++jj) {
        float part = 0.f;
#pragma unroll
        for (int q = 0; q < kDownVecs; ++q) {
          float wf[8], af[8];
          unpack8(wv[jj][q], wf);
          unpack8(av[jj][q], af);
#pragma unroll
          for (int c = 0; c < 8; ++c) part = fmaf(wf[c], af[c], part);
        }
        total = fmaf(wt[jj], part, total);
      }
    }
  }
  float sp = 0.f;
  if (shared.down) {
    for (int64_t k0 = int64_t(lane) * 8; k0 < shared.inter; k0 += 256 * kDownVecs) {
      if (k0 != int64_t(lane) * 8) {
        load_shared(k0, true);
        load_shared(k0, false);
      }
#pragma unroll
      for (int q = 0; q < kDownVecs; ++q) {
        float wf[8], gf[8], uf[8];
        unpack8(swv[q], wf);
        unpack8(sgv[q], gf);
        unpack8(suv[q], uf);
#pragma unroll
        for (int c = 0; c < 8; ++c) sp = fmaf(wf[c], bf2f(f2bf(silu_f(gf[c]) * uf[c])), sp);
      }
    }
  }
  total = warp_sum(total);
  if (shared.down) sp = warp_sum(sp);
  if (lane == 0) {
    float y = total;
    if (shared.down) y = bf2f(f2bf(total)) + bf2f(f2bf(sp)) * s_gate;
    out[int64_t(t) * h_dim + h] = f2bf(y);
  }
}

// The grouped path's sort of the (token, expert) pairs by expert, stable (a pair's row is its rank
// among the earlier pairs of its expert) and without global atomics, in three kernels over chunks
// of kSortChunk pairs: count_kernel counts each chunk's pairs an expert; schedule_kernel turns
// the counts into each expert's first row and tiles and each chunk's first row an expert; and
// permute_kernel places each chunk's pairs, a warp a slice of kSortChunk / 8 in order. (Counts and
// cursors kept by global atomics, hit by every pair, took 45 us for 65,536 pairs; these three
// kernels 21 us, ncu on an H100.)
constexpr int kSortChunk = 1024, kSortThreads = 256, kSortWarps = kSortThreads / 32;

// chunk_rows[c][x]: how many of chunk c's pairs go to expert x (of e).
__global__ void __launch_bounds__(kSortThreads) count_kernel(const int32_t* ids, int64_t pairs, int e,
                                                              int32_t* chunk_rows) {
  pdl_begin();
  extern __shared__ int32_t hist[];  // [e]
  for (int i = threadIdx.x; i < e; i += kSortThreads) hist[i] = 0;
  __syncthreads();
  const int64_t p0 = int64_t(blockIdx.x) * kSortChunk, p1 = min(pairs, p0 + kSortChunk);
  for (int64_t p = p0 + threadIdx.x; p < p1; p += kSortThreads) atomicAdd(&hist[ids[p]], 1);
  __syncthreads();
  for (int i = threadIdx.x; i < e; i += kSortThreads) chunk_rows[int64_t(blockIdx.x) * e + i] = hist[i];
}

// One block of 1024 threads (E <= 1024): expert i's rows are the sum of its chunks' counts;
// exclusive scans of the rows and of the tiles; then chunk_rows[c][i] becomes the first row of
// chunk c's pairs of expert i.
__global__ void __launch_bounds__(1024) schedule_kernel(int32_t* chunk_rows, int chunks, int e, int bm,
                                                        MoeTiles tiles) {
  pdl_begin();
  __shared__ int32_t sc[1024], st[1024];
  const int i = threadIdx.x;
  int c = 0;
  if (i < e) {
    for (int b = 0; b < chunks; ++b) c += chunk_rows[int64_t(b) * e + i];
  }
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
    for (int j = 0; j < nt; ++j) {
      tiles.expert[tile0 + j] = i;
      tiles.row0[tile0 + j] = row0 + j * bm;
      tiles.rows[tile0 + j] = min(bm, c - j * bm);
    }
    int run = row0;
    for (int b = 0; b < chunks; ++b) {
      const int n = chunk_rows[int64_t(b) * e + i];
      chunk_rows[int64_t(b) * e + i] = run;
      run += n;
    }
  }
  if (i == 1023) *tiles.count = st[1023];
}

// Chunk blockIdx.x's pairs into their rows: warp w counts its slice's pairs an expert, the
// warps' first rows follow from the chunk's (chunk_first), and the warp walks its slice 32 pairs
// at a time, a pair's rank among the step's earlier pairs of its expert from __match_any_sync.
__global__ void __launch_bounds__(kSortThreads) permute_kernel(const int32_t* ids, int64_t pairs, int top_k, int e,
                                                                const int32_t* chunk_first, int32_t* perm_token,
                                                                int32_t* pair_pos) {
  pdl_begin();
  extern __shared__ int32_t next[];  // [kSortWarps][e]: a warp's next row of each expert
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < kSortWarps * e; i += kSortThreads) next[i] = 0;
  __syncthreads();
  constexpr int kSlice = kSortChunk / kSortWarps;
  const int64_t p0 = int64_t(blockIdx.x) * kSortChunk + warp * kSlice, p1 = min(pairs, p0 + kSlice);
  for (int64_t p = p0 + lane; p < p1; p += 32) atomicAdd(&next[warp * e + ids[p]], 1);
  __syncthreads();
  for (int i = threadIdx.x; i < e; i += kSortThreads) {
    int run = chunk_first[int64_t(blockIdx.x) * e + i];
    for (int w = 0; w < kSortWarps; ++w) {
      const int n = next[w * e + i];
      next[w * e + i] = run;
      run += n;
    }
  }
  __syncthreads();
  int32_t* mine = next + warp * e;
  for (int64_t q = p0; q < p1; q += 32) {  // warp-uniform bounds
    const int64_t p = q + lane;
    const int x = p < p1 ? ids[p] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, x);
    const int rank = __popc(peers & ((1u << lane) - 1));
    if (x >= 0) {
      const int pos = mine[x] + rank;
      perm_token[pos] = int32_t(p / top_k);
      pair_pos[p] = pos;
    }
    __syncwarp();
    if (x >= 0 && rank == 0) mine[x] += __popc(peers);
    __syncwarp();
  }
}

// out[t] = sum_j w[t, j] y[pos(t, j)] (+ sigmoid(shared_gate[t]) shared_y[t], the shared expert's
// output, when given), rounded once; 8 columns a thread (h_dim is a multiple of 32, so of 8).
__global__ void unpermute_kernel(const bf16* y, const int32_t* pair_pos, const float* weights, int top_k,
                                 int64_t h_dim, const bf16* shared_y, const void* shared_gate, bool gate32,
                                 bf16* out) {
  pdl_begin();
  const int t = blockIdx.x;
  const float sg = shared_y ? sigmoid_f(ldf(shared_gate, gate32, t)) : 0.f;
  for (int64_t h = int64_t(threadIdx.x) * 8; h < h_dim; h += int64_t(blockDim.x) * 8) {
    float total[8] = {};
    for (int j = 0; j < top_k; ++j) {
      const int pair = t * top_k + j;
      float v[8];
      unpack8(*reinterpret_cast<const uint4*>(y + int64_t(pair_pos[pair]) * h_dim + h), v);
      const float wj = weights[pair];
#pragma unroll
      for (int e = 0; e < 8; ++e) total[e] += wj * v[e];
    }
    if (shared_y) {
      float v[8];
      unpack8(*reinterpret_cast<const uint4*>(shared_y + int64_t(t) * h_dim + h), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) total[e] += sg * v[e];
    }
    *reinterpret_cast<uint4*>(out + int64_t(t) * h_dim + h) = pack8(total);
  }
}

}  // namespace

static void check_routing(const Tensor& logits, int top_k, const Tensor& ids, const Tensor& weights) {
  expect_float(logits, "moe_route_softmax", "logits");
  expect_dtype(ids, DType::kI32, "moe_route_softmax", "ids");
  expect_dtype(weights, DType::kF32, "moe_route_softmax", "weights");
  const int64_t t = logits.dim(0), e = logits.dim(1);
  STRATA_CHECK(top_k >= 1 && top_k <= e && e <= 2048, "moe_route_softmax: top_k ", top_k, " of ", e,
               " experts (at most 2048 experts on CUDA)");
  STRATA_CHECK(ids.shape() == Shape({t, top_k}) && weights.shape() == ids.shape(), "moe_route_softmax: ids ",
               ids.describe(), ", weights ", weights.describe());
}

void moe_route_softmax(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids, const Tensor& weights) {
  OpTimer timer_("moe_route_softmax");
  check_routing(logits, top_k, ids, weights);
  const int64_t t = logits.dim(0), e = logits.dim(1);
  if (!t) return;
  const unsigned blocks = blocks_for(t, 4);
  if (e <= 128) {
    launch_pdl(route_reg_kernel<4>, blocks, 128, 0, logits.raw(), is_f32(logits), t, int(e), top_k, norm_topk,
                                                      ids.data<int32_t>(), weights.data<float>());
  } else if (e <= 256) {
    launch_pdl(route_reg_kernel<8>, blocks, 128, 0, logits.raw(), is_f32(logits), t, int(e), top_k, norm_topk,
                                                      ids.data<int32_t>(), weights.data<float>());
  } else {
    launch_pdl(route_kernel, blocks, 128, 4 * e * sizeof(float), 
        logits.raw(), is_f32(logits), t, int(e), top_k, norm_topk, ids.data<int32_t>(), weights.data<float>());
  }
  check_launch("moe_route");
}

namespace {

// True when moe_route_experts can route inside the gate/up GEMV (the register top-k's range).
bool routes_in_gate_up(int64_t tokens, int64_t experts) { return tokens <= kGemvTokens && experts <= 256; }

// The shared expert's output before its gate, for the grouped path: down(silu(g) u).
Tensor shared_expert_output(const Tensor& shared_gate_up, const Tensor& shared_down) {
  const int64_t t = shared_gate_up.dim(0), h = shared_down.dim(0), si = shared_down.dim(1);
  Tensor act = scratch({t, si}, DType::kBF16), y = scratch({t, h}, DType::kBF16);
  silu_mul(shared_gate_up, act);
  linear(act, shared_down, y);
  return y;
}

// The format of a stack of experts: that of its codes (FP4 by its scales' dtype), else bf16.
WeightFormat expert_format(const Tensor& w) {
  if (w.dtype() == DType::kF8E4M3) return WeightFormat::kFp8;
  if (w.dtype() == DType::kF4E2M1) {
    return w.scaled() && w.scale().dtype() == DType::kUE8M0 ? WeightFormat::kMxfp4 : WeightFormat::kNvfp4;
  }
  return WeightFormat::kBf16;
}

// An expert stack as the kernels read it, in `format` (gate_up's: down must match): bf16; F8_E4M3
// codes with per-row F32 scales per kFp8Group columns; NVFP4 (F4_E2M1 codes, F8_E4M3 scale bytes
// per 16 columns, an F32 global a row); MXFP4 (F4_E2M1 codes, UE8M0 scale bytes per 32 columns).
ExpertMatrix expert_matrix(const Tensor& w, WeightFormat format, const char* op, const char* what) {
  ExpertMatrix m;
  m.w = w.raw();
  m.format = format;
  if (format == WeightFormat::kBf16) {
    expect_dtype(w, DType::kBF16, op, what);
    return m;
  }
  if (format == WeightFormat::kFp8) {
    expect_dtype(w, DType::kF8E4M3, op, what);
    STRATA_CHECK(w.scaled() && w.scale_group() == kFp8Group && w.ndim() == 3, op, ": ", what,
                 " must be F8_E4M3 experts scaled per ", kFp8Group, " columns (with the other stack), got ",
                 w.describe());
    const Tensor scale = w.scale();
    expect_dtype(scale, DType::kF32, op, what);
    m.scale = scale.data<float>();
    m.groups = scale.dim(-1);
    return m;
  }
  expect_cuda(w, op, what);
  const bool nvfp4 = format == WeightFormat::kNvfp4;
  const int group = nvfp4 ? kNvfp4Group : kMxfp4Group;
  const DType scale_dtype = nvfp4 ? DType::kF8E4M3 : DType::kUE8M0;
  STRATA_CHECK(w.dtype() == DType::kF4E2M1 && w.scaled() && w.scale_group() == group && w.ndim() == 3 &&
                   w.scale().dtype() == scale_dtype && w.global_scale().defined() == nvfp4,
               op, ": ", what, " must be ", nvfp4 ? "NVFP4" : "MXFP4", " experts as gate_up's (F4_E2M1 scaled per ",
               group, " columns by ", dtype_name(scale_dtype), nvfp4 ? " with an F32 global a row" : "", "), got ",
               w.describe());
  const Tensor scale = w.scale();
  expect_dtype(scale, scale_dtype, op, what);
  m.fp4_scale = static_cast<const uint8_t*>(scale.raw());
  m.groups = scale.dim(-1);
  if (nvfp4) {
    const Tensor global = w.global_scale();
    expect_dtype(global, DType::kF32, op, what);
    m.global = global.data<float>();
  }
  return m;
}

// moe_experts; with `shared` (its down non-null; shared_gate_up and shared_down its tensors),
// moe_experts_shared: in the GEMVs' path fused into them, in the grouped path by its output,
// which the unpermute adds to the routed experts'. With route.logits, the routing into ids and
// weights too (routes_in_gate_up holds).
void run_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                 const Tensor& weights, const SharedArgs& shared, const Tensor& shared_gate_up,
                 const Tensor& shared_down, const RouteArgs& route, const Tensor& out, float limit = INFINITY) {
  const char* op = "moe_experts";
  expect_dtype(x, DType::kBF16, op, "x");
  const WeightFormat format = expert_format(gate_up);
  const bool fp8 = format == WeightFormat::kFp8, fp4 = is_fp4(format);
  const ExpertMatrix gu_m = expert_matrix(gate_up, format, op, "gate_up"),
                     dn_m = expert_matrix(down, format, op, "down");
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
  STRATA_CHECK(!fp8 || (h % 16 == 0 && inter % 16 == 0), "moe_experts: FP8 experts need hidden (", h,
               ") and intermediate (", inter, ") sizes that are multiples of 16 on CUDA");
  // FP4: the kernels read a row's codes in 16-byte vectors of 32 (8 bytes in the down GEMV) and
  // NVFP4 scale bytes in pairs.
  STRATA_CHECK(!fp4 || (h % 32 == 0 && inter % 32 == 0), "moe_experts: FP4 experts need hidden (", h,
               ") and intermediate (", inter, ") sizes that are multiples of 32 on CUDA");
  if (!t) return;
  const auto* xp = static_cast<const bf16*>(x.raw());
  const int64_t pairs = t * k;
  const bool grouped = t > kGemvTokens && moe_gemm_supported(h, inter) && ne <= 1024;
  STRATA_CHECK(!route.logits || !grouped, "moe_experts: routing inside the grouped path");
  if (!grouped) {
    Tensor act = scratch({pairs, inter}, DType::kBF16);
    const dim3 grid(unsigned(pairs), blocks_for(inter, kGateUpWarps));
    auto* ap = static_cast<bf16*>(act.raw());
    const int32_t* given = route.logits ? nullptr : ids.data<int32_t>();
    auto gate_up_gemv = [&](auto kernel) {
      launch_pdl(kernel, grid, kGateUpWarps * 32, 0, xp, gu_m, given, route, int(k), h, inter, limit, ap);
    };
    visit_format(format, [&](auto format_c) {
      constexpr WeightFormat kFormat = decltype(format_c)::value;
      if (!route.logits) {
        gate_up_gemv(gate_up_gemv_kernel<0, kFormat>);
      } else if (route.experts <= 128) {
        gate_up_gemv(gate_up_gemv_kernel<4, kFormat>);
      } else {
        gate_up_gemv(gate_up_gemv_kernel<8, kFormat>);
      }
      check_launch("moe_gate_up_gemv");
      launch_pdl(down_combine_kernel<kFormat>, dim3(unsigned(t), blocks_for(h, 8)), 256, 0,
                 static_cast<const bf16*>(act.raw()), dn_m, ids.data<int32_t>(), weights.data<float>(), int(k), h,
                 inter, shared, static_cast<bf16*>(out.raw()));
      check_launch("moe_down_combine");
    });
    return;
  }
  const MoeTiling tiling = moe_tiling(pairs, ne, format);
  const int bm = tiling.rows;
  const int64_t max_tiles = (pairs + bm - 1) / bm + ne;
  const int64_t chunks = (pairs + kSortChunk - 1) / kSortChunk;
  // One int32 workspace: chunk_rows [chunks][E]; tiles 3 x max_tiles + 1; perm, pair_pos.
  Tensor iws = scratch({chunks * ne + 3 * max_tiles + 1 + 2 * pairs}, DType::kI32);
  int32_t* chunk_rows = iws.data<int32_t>();
  int32_t* tile_ws = chunk_rows + chunks * ne;
  MoeTiles tiles{tile_ws, tile_ws + max_tiles, tile_ws + 2 * max_tiles, tile_ws + 3 * max_tiles};
  int32_t* perm_token = tiles.count + 1;
  int32_t* pair_pos = perm_token + pairs;
  launch_pdl(count_kernel, unsigned(chunks), kSortThreads, ne * sizeof(int32_t), ids.data<int32_t>(), pairs,
             int(ne), chunk_rows);
  check_launch("moe_count");
  launch_pdl(schedule_kernel, 1, 1024, 0, chunk_rows, int(chunks), int(ne), bm, tiles);
  check_launch("moe_schedule");
  launch_pdl(permute_kernel, unsigned(chunks), kSortThreads, kSortWarps * ne * sizeof(int32_t), ids.data<int32_t>(),
             pairs, int(k), int(ne), chunk_rows, perm_token, pair_pos);
  check_launch("moe_permute");
  Tensor act = scratch({pairs, inter}, DType::kBF16);
  Tensor y = scratch({pairs, h}, DType::kBF16);
  auto* actp = static_cast<bf16*>(act.raw());
  auto* yp = static_cast<bf16*>(y.raw());
  if (fp8 && tiling.wgmma) {
    // W8A8: x quantised once a token (the gate/up tiles gather its rows), act once a pair.
    auto fp8_rows = [&](const bf16* v, int64_t rows, int64_t cols, Tensor& codes, Tensor& scales) {
      codes = scratch({rows, cols}, DType::kF8E4M3);
      scales = scratch({rows, (cols + kFp8Group - 1) / kFp8Group}, DType::kF32);
      quantize_fp8_rows(v, rows, cols, static_cast<uint8_t*>(codes.raw()), scales.data<float>());
      return Fp8Rows{static_cast<const uint8_t*>(codes.raw()), scales.data<float>(), scales.dim(1)};
    };
    Tensor xq, xs, aq, as;
    moe_grouped_gemm_w8a8(fp8_rows(xp, t, h, xq, xs), perm_token, gu_m, tiles, unsigned(max_tiles), ne, h, inter, true,
                          limit, actp);
    moe_grouped_gemm_w8a8(fp8_rows(actp, pairs, inter, aq, as), nullptr, dn_m, tiles, unsigned(max_tiles), ne, inter,
                          h, false, INFINITY, yp);
  } else {
    moe_grouped_gemm(xp, perm_token, gu_m, tiles, tiling, unsigned(max_tiles), ne, h, inter, true, limit, actp);
    moe_grouped_gemm(actp, nullptr, dn_m, tiles, tiling, unsigned(max_tiles), ne, inter, h, false, INFINITY, yp);
  }
  // The shared expert's output, added by the unpermute (one pass over out, one rounding).
  Tensor shared_y;
  if (shared.down) shared_y = shared_expert_output(shared_gate_up, shared_down);
  launch_pdl(unpermute_kernel, unsigned(t), 256, 0, static_cast<const bf16*>(y.raw()), pair_pos,
                                                      weights.data<float>(), int(k), h,
                                                      shared.down ? static_cast<const bf16*>(shared_y.raw()) : nullptr,
                                                      shared.gate, shared.gate32, static_cast<bf16*>(out.raw()));
  check_launch("moe_unpermute");
}

}  // namespace

// Expert parallelism is not on CUDA yet (its kernels index the whole expert table).
static void check_unsharded(const ExpertShard& shard, const Tensor& gate_up, const char* op) {
  STRATA_CHECK(shard.first == 0 && (shard.total == 0 || shard.total == gate_up.dim(0)), op,
               ": expert parallelism (experts ", shard.first, "+ of ", shard.total, ") is not implemented on CUDA");
}

void moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                 const Tensor& weights, const Tensor& out, const ExpertShard& shard) {
  OpTimer timer_("moe_experts", x.ndim() ? x.dim(0) : 0, ids.ndim() == 2 ? ids.dim(1) : 0);
  check_unsharded(shard, gate_up, "moe_experts");
  run_experts(x, gate_up, down, ids, weights, SharedArgs{}, Tensor(), Tensor(), RouteArgs{}, out);
}

void moe_experts_clamped(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                         const Tensor& weights, float limit, const Tensor& out, const ExpertShard& shard) {
  OpTimer timer_("moe_experts_clamped", x.ndim() ? x.dim(0) : 0, ids.ndim() == 2 ? ids.dim(1) : 0);
  check_unsharded(shard, gate_up, "moe_experts_clamped");
  STRATA_CHECK(limit > 0, "moe_experts_clamped: the SwiGLU limit must be positive, got ", limit);
  run_experts(x, gate_up, down, ids, weights, SharedArgs{}, Tensor(), Tensor(), RouteArgs{}, out, limit);
}

namespace {

SharedArgs shared_args(const Tensor& x, const Tensor& shared_gate_up, const Tensor& shared_down,
                       const Tensor& shared_gate) {
  const char* op = "moe_experts_shared";
  expect_dtype(shared_gate_up, DType::kBF16, op, "shared_gate_up");
  expect_dtype(shared_down, DType::kBF16, op, "shared_down");
  expect_float(shared_gate, op, "shared_gate");
  const int64_t t = x.dim(0), h = x.dim(1), si = shared_down.dim(1);
  STRATA_CHECK(shared_down.ndim() == 2 && shared_down.dim(0) == h && shared_gate_up.shape() == Shape({t, 2 * si}) &&
                   shared_gate.numel() == t && si % 8 == 0,
               op, ": shared gate_up ", shared_gate_up.describe(), ", down ", shared_down.describe(), ", gate ",
               shared_gate.describe(), " for x ", x.describe());
  return SharedArgs{static_cast<const bf16*>(shared_gate_up.raw()), static_cast<const bf16*>(shared_down.raw()),
                    shared_gate.raw(), is_f32(shared_gate), si};
}

}  // namespace

void moe_experts_shared(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                        const Tensor& weights, const Tensor& shared_gate_up, const Tensor& shared_down,
                        const Tensor& shared_gate, const Tensor& out, const ExpertShard& shard) {
  OpTimer timer_("moe_experts_shared", x.ndim() ? x.dim(0) : 0, ids.ndim() == 2 ? ids.dim(1) : 0);
  check_unsharded(shard, gate_up, "moe_experts_shared");
  const SharedArgs shared = shared_args(x, shared_gate_up, shared_down, shared_gate);
  run_experts(x, gate_up, down, ids, weights, shared, shared_gate_up, shared_down, RouteArgs{}, out);
}

void moe_route_experts(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids, const Tensor& weights,
                       const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& shared_gate_up,
                       const Tensor& shared_down, const Tensor& shared_gate, const Tensor& out,
                       const ExpertShard& shard) {
  const bool has_shared = shared_down.defined();
  if (!routes_in_gate_up(x.dim(0), logits.dim(1))) {
    cuda::moe_route_softmax(logits, top_k, norm_topk, ids, weights);
    if (has_shared) {
      cuda::moe_experts_shared(x, gate_up, down, ids, weights, shared_gate_up, shared_down, shared_gate, out, shard);
    } else {
      cuda::moe_experts(x, gate_up, down, ids, weights, out, shard);
    }
    return;
  }
  OpTimer timer_("moe_route_experts", x.dim(0), top_k);
  check_unsharded(shard, gate_up, "moe_route_experts");
  check_routing(logits, top_k, ids, weights);
  const SharedArgs shared = has_shared ? shared_args(x, shared_gate_up, shared_down, shared_gate) : SharedArgs{};
  const RouteArgs route{logits.raw(), is_f32(logits), norm_topk, int(logits.dim(1)), ids.data<int32_t>(),
                        weights.data<float>()};
  STRATA_CHECK(logits.dim(0) == x.dim(0), "moe_route_experts: logits ", logits.describe(), " for x ", x.describe());
  run_experts(x, gate_up, down, ids, weights, shared, shared_gate_up, shared_down, route, out);
}

}  // namespace strata::ops::cuda
