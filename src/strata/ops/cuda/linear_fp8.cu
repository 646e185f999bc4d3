// CUDA: linear over an FP8 block-scale weight, F8_E4M3 codes with per-row scales, one per 128
// columns (Tensor::with_scale, an FP8 checkpoint's dense projections kept compressed). A
// projection may end in bf16 rows (the parts of a fused weight its checkpoint left unquantised,
// such as GDN's in_proj_b and in_proj_a).
// - Up to kGemvMaxRows rows of x (decode; memory bound): a GEMV that multiplies the codes by the
//   bf16 activations (W8A16), half the bytes of a bf16 weight, the bf16 rows in the same launch.
// - More rows: the activations quantised per row and per 128 columns as quantize_fp8_rows does
//   and cuBLASLt's block-scaled FP8 GEMM (W8A8, as vLLM and SGLang run these checkpoints), on the
//   rows in fours; the last 1-3 rows through the GEMV. Shapes cuBLASLt refuses take the codes
//   dequantised to bf16 and the bf16 GEMM.
#include <algorithm>

#include "strata/ops/cuda/fp8_rows.h"
#include "strata/ops/cuda/fp8_weights.cuh"
#include "strata/ops/cuda/gemm.h"
#include "strata/ops/cuda/gemv_common.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

constexpr int kUnroll = 8;  // 16-byte weight vectors in flight a lane
constexpr int64_t kMinWarpK = 2048;

__device__ __forceinline__ uint4 x_vector(const bf16* x, const bf16* xs, bool from_shared, int64_t i) {
  return from_shared ? *reinterpret_cast<const uint4*>(xs + i) : __ldg(reinterpret_cast<const uint4*>(x + i));
}

// A block of 8 warps computes 8 / S output columns (one a group of S warps, which split K) for
// all T rows of x. A lane's vector is 16 codes of one 128-column group: their dot with x in f32
// (e4m3 times bf16 is exact in f32), then times the group's scale. The first vectors load before
// pdl_wait, as gemm.cu's bf16 GEMV does; columns past w.n_main read the bf16 rows w.rest.
template <int T, int S, bool kNorm>
__global__ void __launch_bounds__(256) gemv_fp8_kernel(const bf16* __restrict__ x, Fp8Rows w, int64_t k_dim,
                                                       int64_t n_dim, int rows, Outs outs, NormIn nin) {
  pdl_trigger();
  constexpr int kGroups = 8 / S;
  __shared__ float partial[S > 1 ? 8 : 1][1][T];
  __shared__ __align__(16) bf16 xs[kNorm ? kNormMaxElems : 8];
  bool waited = false;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / S, part = warp % S;
  // This warp's K segment (a multiple of 16 elements).
  const int64_t seg = (k_dim / 16 + S - 1) / S * 16;
  const int64_t k_lo = part * seg, k_hi = min(k_dim, k_lo + seg);
  const int64_t tiles = (n_dim + kGroups - 1) / kGroups;
  uint4 wv[kUnroll];
  float sv[kUnroll];
  auto load_codes = [&](int64_t n, int64_t k0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + u * 512;
      const bool in = k < k_hi;
      wv[u] = in ? __ldg(reinterpret_cast<const uint4*>(w.codes + n * k_dim + k)) : make_uint4(0, 0, 0, 0);
      sv[u] = in ? __ldg(w.scale + n * w.groups + k / kFp8Group) : 0.f;
    }
  };
  bool preloaded = false;
  if constexpr (kNorm) {
    const int64_t n = int64_t(blockIdx.x) * kGroups + group;
    if (int64_t(blockIdx.x) < tiles && n < w.n_main && k_lo + int64_t(lane) * 16 < k_hi) {
      load_codes(n, k_lo + int64_t(lane) * 16);
      preloaded = true;
    }
    pdl_wait();
    waited = true;
    norm_prologue<T>(nin, k_dim, rows, xs);
  }
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t n = tile * kGroups + group;
    float acc[1][T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[0][t] = 0.f;
    if (n < w.n_main) {
      for (int64_t k0 = k_lo + int64_t(lane) * 16; k0 < k_hi; k0 += 512 * kUnroll) {
        if (!preloaded) load_codes(n, k0);
        preloaded = false;
        pdl_wait_once(waited);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t k = k0 + u * 512;
          if (k >= k_hi) break;
          uint4 xv[T][2];
#pragma unroll
          for (int t = 0; t < T; ++t) {
            if (t >= rows) continue;
            xv[t][0] = x_vector(x, xs, kNorm, t * k_dim + k);
            xv[t][1] = x_vector(x, xs, kNorm, t * k_dim + k + 8);
          }
          float wf[16];
          unpack16_e4m3(wv[u], wf);
#pragma unroll
          for (int t = 0; t < T; ++t) {
            if (t >= rows) break;
            float xf[16];
            unpack8(xv[t][0], xf);
            unpack8(xv[t][1], xf + 8);
            float s = 0.f;
#pragma unroll
            for (int e = 0; e < 16; ++e) s = fmaf(wf[e], xf[e], s);
            acc[0][t] = fmaf(sv[u], s, acc[0][t]);
          }
        }
      }
    } else if (n < n_dim) {
      const bf16* row = w.rest + (n - w.n_main) * k_dim;
      for (int64_t k0 = k_lo + int64_t(lane) * 8; k0 < k_hi; k0 += 256 * kUnroll) {
        uint4 bv[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t k = k0 + u * 256;
          bv[u] = k < k_hi ? __ldg(reinterpret_cast<const uint4*>(row + k)) : make_uint4(0, 0, 0, 0);
        }
        pdl_wait_once(waited);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t k = k0 + u * 256;
          if (k >= k_hi) break;
          float wf[8];
          unpack8(bv[u], wf);
#pragma unroll
          for (int t = 0; t < T; ++t) {
            if (t >= rows) break;
            float xf[8];
            unpack8(x_vector(x, xs, kNorm, t * k_dim + k), xf);
            float s = 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) s = fmaf(wf[e], xf[e], s);
            acc[0][t] += s;
          }
        }
      }
    }
    pdl_wait_once(waited);  // a lane with no K elements still must not write early
    store_dots<T, 1, S>(acc, partial, n, n_dim, rows, outs);
  }
  if (!waited) pdl_wait();
}

template <int T, int S, bool kNorm>
void launch_split(const bf16* x, const Fp8Rows& w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn& nin) {
  const int64_t tiles = (n + 8 / S - 1) / (8 / S);
  const int64_t grid = std::min(tiles, resident_blocks<gemv_fp8_kernel<T, S, kNorm>>());
  launch_pdl(gemv_fp8_kernel<T, S, kNorm>, unsigned(std::max<int64_t>(grid, 1)), 256, 0, x, w, k, n, rows, o, nin);
}

// T for the rows, S as gemm.cu's bf16 GEMV chooses it, keeping at least kMinWarpK codes a warp.
template <bool kNorm>
void launch_rows(const bf16* x, const Fp8Rows& w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn& nin) {
  with_row_tile(rows, [&](auto t) {
    constexpr int T = decltype(t)::value;
    launch_best_split(
        n, k, 1, kMinWarpK, [](auto s) { return resident_blocks<gemv_fp8_kernel<T, decltype(s)::value, kNorm>>(); },
        [&](auto s) { launch_split<T, decltype(s)::value, kNorm>(x, w, k, n, rows, o, nin); });
  });
}

// The weight's scales [rows, groups] by group, each output's block of rows on its own:
// output i's [groups, width_i] at groups * start_i (cuBLASLt reads an operand's scales so).
__global__ void scales_by_group_kernel(const float* __restrict__ scale, int64_t rows, int64_t groups, Outs outs,
                                       float* __restrict__ out) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, g = i % groups;
    int s = 0;
    while (r >= outs.start[s + 1]) ++s;
    const int64_t start = outs.start[s], width = outs.start[s + 1] - start;
    out[groups * start + g * width + r - start] = scale[i];
  }
}

// Rows [0, rows) of the codes as bf16(code * scale), the weights that dequantising at load gives.
__global__ void dequantise_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scale, int64_t rows,
                                  int64_t k_dim, int64_t groups, bf16* __restrict__ out) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * k_dim;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k_dim, c = i % k_dim;
    out[i] = f2bf(e4m3_value(codes[i]) * scale[r * groups + c / kFp8Group]);
  }
}

}  // namespace

void gemv_fp8(const bf16* x, const Fp8Rows& w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn* nin) {
  STRATA_CHECK(rows >= 1 && rows <= kGemvMaxRows && k % 16 == 0, "gemv_fp8: ", rows, " rows, K ", k);
  if (nin) {
    launch_rows<true>(nullptr, w, k, n, rows, o, *nin);
  } else {
    launch_rows<false>(x, w, k, n, rows, o, NormIn{});
  }
  check_launch("gemv_fp8");
}


Fp8Rows fp8_weight(const Tensor& w, const Tensor& rest, const char* op) {
  STRATA_CHECK(w.dtype() == DType::kF8E4M3 && w.ndim() == 2 && w.scaled() && w.scale_group() == kFp8Group, op,
               ": ", w.describe(), " is not an FP8 weight with per-row scales of ", kFp8Group, " columns");
  const int64_t k = w.dim(1), n_main = w.dim(0), groups = (k + kFp8Group - 1) / kFp8Group;
  expect_dtype(w.scale(), DType::kF32, op, "the weight's scale");
  STRATA_CHECK(w.scale().shape() == Shape({n_main, groups}), op, ": scale ", w.scale().describe(), " of ",
               w.describe());
  if (rest.defined()) {
    expect_dtype(rest, DType::kBF16, op, "the weight's bf16 rows");
    STRATA_CHECK(rest.ndim() == 2 && rest.dim(1) == k, op, ": bf16 rows ", rest.describe(), " after ", w.describe());
  }
  return {static_cast<const uint8_t*>(w.raw()), w.scale().data<float>(), groups, n_main,
          rest.defined() ? static_cast<const bf16*>(rest.raw()) : nullptr};
}

void linear_fp8_into(const Tensor& x, const Tensor& w, const Tensor& rest, const std::vector<Tensor>& ys,
                     const Outs& o, const char* op) {
  expect_dtype(x, DType::kBF16, op, "x");
  const Fp8Rows fw = fp8_weight(w, rest, op);
  STRATA_CHECK(x.dim(-1) == w.dim(1), op, ": x ", x.describe(), " does not match the FP8 weight ", w.describe());
  const int64_t k = w.dim(1), n_main = fw.n_main, groups = fw.groups, rows = rows_of(x), n = o.start[o.n];
  STRATA_CHECK(n == n_main + (rest.defined() ? rest.dim(0) : 0), op, ": outputs cover ", n, " columns of ",
               w.describe(), rest.defined() ? " and " + rest.describe() : std::string());
  if (rows == 0) return;
  const auto* xp = static_cast<const bf16*>(x.raw());
  const uint8_t* codes = fw.codes;
  const bf16* rest_p = fw.rest;
  const bool vec = k % 16 == 0 && aligned16(xp) && aligned16(codes) && (!rest_p || aligned16(rest_p));
  if (rows <= kGemvMaxRows && vec) {
    gemv_fp8(xp, fw, k, n, int(rows), o, nullptr);
    return;
  }
  // The GEMMs take the rows in fours (cuBLASLt's FP8 operands), the GEMV the rest.
  const int64_t m = vec ? rows & ~int64_t(3) : rows;
  Tensor xq, xs, ws;
  for (int i = 0; i < o.n; ++i) {
    const int64_t start = o.start[i], width = o.start[i + 1] - start;
    STRATA_CHECK(start >= n_main || start + width <= n_main, op, ": output ", i, " (columns ", start, " to ",
                 start + width, ") straddles the FP8 rows (", n_main, ") and the bf16 ones");
    if (start >= n_main) {
      gemm_bf16(xp, rest_p + (start - n_main) * k, ys[i].raw(), o.f32[i], m, width, k);
      continue;
    }
    if (vec && !xq.defined()) {
      xq = scratch({m, k}, DType::kU8);
      xs = scratch({groups * m}, DType::kF32);
      quantize_fp8_rows_by_group(xp, m, k, static_cast<uint8_t*>(xq.raw()), xs.data<float>());
      ws = scratch({groups * n_main}, DType::kF32);
      launch_pdl(scales_by_group_kernel, blocks_for(n_main * groups, 256), 256, 0, fw.scale, n_main, groups, o,
                 ws.data<float>());
      check_launch("scales_by_group");
    }
    if (vec && gemm_fp8_block(xq.raw(), xs.data<float>(), codes + start * k, ws.data<float>() + groups * start,
                              ys[i].raw(), o.f32[i], m, width, k)) {
      continue;
    }
    Tensor wd = scratch({width, k}, DType::kBF16);
    launch_pdl(dequantise_kernel, blocks_for(width * k, 256), 256, 0, codes + start * k, fw.scale + groups * start,
               width, k, groups, static_cast<bf16*>(wd.raw()));
    check_launch("dequantise_fp8");
    gemm_bf16(xp, wd.raw(), ys[i].raw(), o.f32[i], m, width, k);
  }
  if (m == rows) return;
  Outs tail = o;
  for (int i = 0; i < o.n; ++i) {
    const int64_t width = o.start[i + 1] - o.start[i];
    tail.ptr[i] = static_cast<char*>(o.ptr[i]) + m * width * (o.f32[i] ? 4 : 2);
  }
  gemv_fp8(xp + m * k, fw, k, n, int(rows - m), tail, nullptr);
}

}  // namespace strata::ops::cuda
