// CUDA: y = x · w^T. Up to 8 rows of x: a bandwidth-bound GEMV that streams each weight row once
// with 16-byte loads (the decode path); more rows: cuBLASLt, bf16 inputs with fp32 accumulation.
// linear_split writes the columns of several projections straight into their own outputs. FP8
// weights (codes with per-row scales) go to linear_fp8.cu.
#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/fp8_weights.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/gemm.h"
#include "strata/ops/cuda/gemv_common.cuh"

namespace strata::ops::cuda {
namespace {

// A block of 8 warps computes 8 / S groups of R consecutive output columns for all T rows of x;
// the S warps of a group split the K dimension and add their partial sums in shared memory.
// 8 / R weight vectors of 16 bytes per lane are in flight before the first multiply; the first
// ones load before pdl_wait (no kernel writes weights). S spreads short, wide GEMVs over every
// SM and evens out the last wave (see launch_gemv).
template <int T, int R, int S, bool kNorm>
__global__ void __launch_bounds__(256) gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                   int64_t k_dim, int64_t n_dim, int rows, Outs outs, NormIn nin) {
  pdl_trigger();
  constexpr int kGroups = 8 / S, kUnroll = 8 / R;
  __shared__ float partial[S > 1 ? 8 : 1][R][T];
  __shared__ __align__(16) bf16 xs[kNorm ? kNormMaxElems : 8];
  bool waited = false;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / S, part = warp % S;
  // This warp's K segment (a multiple of 8 elements).
  const int64_t seg = (k_dim / 8 + S - 1) / S * 8;
  const int64_t k_lo = part * seg, k_hi = min(k_dim, k_lo + seg);
  const int64_t tiles = (n_dim + int64_t(kGroups) * R - 1) / (int64_t(kGroups) * R);
  uint4 wv[R][kUnroll];
  auto load_weights = [&](int64_t n0, int64_t k0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * 256;
        wv[r][u] = (k < k_hi && n0 + r < n_dim) ? __ldg(reinterpret_cast<const uint4*>(w + (n0 + r) * k_dim + k))
                                                : make_uint4(0, 0, 0, 0);
      }
    }
  };
  // With the norm prologue, the first step's weights are already on their way while it runs.
  bool preloaded = false;
  if constexpr (kNorm) {
    if (int64_t(blockIdx.x) < tiles && k_lo + int64_t(lane) * 8 < k_hi) {
      load_weights((int64_t(blockIdx.x) * kGroups + group) * R, k_lo + int64_t(lane) * 8);
      preloaded = true;
    }
    pdl_wait();
    waited = true;
    norm_prologue<T>(nin, k_dim, rows, xs);
  }
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t n0 = (tile * kGroups + group) * R;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < T; ++t) acc[r][t] = 0.f;
    }
    for (int64_t k0 = k_lo + int64_t(lane) * 8; k0 < k_hi; k0 += 256 * kUnroll) {
      if (!preloaded) load_weights(n0, k0);
      preloaded = false;
      pdl_wait_once(waited);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * 256;
        if (k >= k_hi) break;
        // Every row's x vector is loaded before the first is used: T loads in flight, not a chain.
        uint4 xv[T];
#pragma unroll
        for (int t = 0; t < T; ++t) {
          if (t >= rows) continue;
          if constexpr (kNorm) {
            xv[t] = *reinterpret_cast<const uint4*>(xs + t * k_dim + k);
          } else {
            xv[t] = __ldg(reinterpret_cast<const uint4*>(x + t * k_dim + k));
          }
        }
        // Each vector is unpacked once (T + R unpacks, not T (R + 1)).
        float xf[T][8];
#pragma unroll
        for (int t = 0; t < T; ++t) {
          if (t < rows) unpack8(xv[t], xf[t]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float wf[8];
          unpack8(wv[r][u], wf);
#pragma unroll
          for (int t = 0; t < T; ++t) {
            if (t >= rows) break;
            float s = 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) s = fmaf(wf[e], xf[t][e], s);
            acc[r][t] += s;
          }
        }
      }
    }
    pdl_wait_once(waited);  // a lane with no K elements still must not write early
    store_dots<T, R, S>(acc, partial, n0, n_dim, rows, outs);
  }
  if (!waited) pdl_wait();
}

// Any shape and alignment: one thread per output element.
__global__ void linear_scalar_kernel(const bf16* x, const bf16* w, int64_t k_dim, int64_t n_dim, int64_t rows,
                                     Outs outs) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * n_dim;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / n_dim, n = i % n_dim;
    float acc = 0.f;
    for (int64_t k = 0; k < k_dim; ++k) acc = fmaf(bf2f(x[t * k_dim + k]), bf2f(w[n * k_dim + k]), acc);
    store_out(outs, t, n, acc);
  }
}

template <int T, int R, int S, bool kNorm>
void launch_gemv_split(const bf16* x, const bf16* w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn& nin) {
  const int64_t tiles = (n + (8 / S) * R - 1) / ((8 / S) * R);
  const int64_t grid = std::min(tiles, resident_blocks<gemv_kernel<T, R, S, kNorm>>());
  launch_pdl(gemv_kernel<T, R, S, kNorm>, unsigned(std::max<int64_t>(grid, 1)), 256, 0, x, w, k, n, rows, o, nin);
}

// The split S (warps per output group) is the smallest that fills the resident waves to 90%,
// else the best filling, keeping at least 256 elements of K per warp.
template <int T, int R, bool kNorm>
void launch_gemv(const bf16* x, const bf16* w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn& nin) {
  launch_best_split(
      n, k, R, 256, [](auto s) { return resident_blocks<gemv_kernel<T, R, decltype(s)::value, kNorm>>(); },
      [&](auto s) { launch_gemv_split<T, R, decltype(s)::value, kNorm>(x, w, k, n, rows, o, nin); });
}

// The GEMV path for up to kGemvMaxRows rows; with `nin`, x comes from the norm prologue.
// R = 4 weight rows a warp keeps more bytes in flight a lane where K is short, as long as the
// matrix still gives every SM a block and x has at most two rows; a small matrix (a small model's
// projections) or more rows (a speculative verify's) take R = 1: four times the blocks, each with a
// quarter of the instructions (there these GEMVs are bound by instruction latency, not bandwidth:
// a 4-row norm GEMV of the default model took 2x its 1-row time at R = 4, H100, ncu).
template <bool kNorm>
void gemv(const bf16* x, const bf16* w, int64_t k, int64_t n, int rows, const Outs& o, const NormIn& nin = {}) {
  const bool four = k <= 1024 && rows <= 2 && n >= int64_t(8 * 4) * sm_count();
  with_row_tile(rows, [&](auto t) {
    constexpr int T = decltype(t)::value;
    if constexpr (T <= 2) {
      if (four) return launch_gemv<T, 4, kNorm>(x, w, k, n, rows, o, nin);
    }
    launch_gemv<T, 1, kNorm>(x, w, k, n, rows, o, nin);
  });
  check_launch("gemv");
}

// A GEMM's shape, leading dimensions and batch: the key of its cached cuBLASLt algorithm.
using GemmKey = std::tuple<int64_t, int64_t, int64_t, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Lt {
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
  std::mutex mu;
  std::map<GemmKey, cublasLtMatmulAlgo_t> algos;
  Lt() {
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt: cannot create a handle");
    workspace = persistent({int64_t(kWorkspace)}, DType::kU8);
  }
  static constexpr size_t kWorkspace = size_t(64) << 20;
};

Lt& lt() {
  static Lt l;
  return l;
}

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in ", what, ": status ", int(s));
}

// The heuristic's first algorithm for a matmul (the descriptors' shapes), cached by `key`;
// false, nothing cached, when cuBLASLt offers none.
bool find_algo(Lt& l, const GemmKey& key, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
               cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatmulAlgo_t& algo) {
  std::lock_guard<std::mutex> lock(l.mu);
  auto it = l.algos.find(key);
  if (it == l.algos.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    const size_t ws = Lt::kWorkspace;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
             "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(l.handle, desc, a, b, c, c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (h != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    it = l.algos.emplace(key, result.algo).first;
  }
  algo = it->second;
  return true;
}

Outs outs_of(const std::vector<Tensor>& ys, int64_t rows, int64_t n, const char* op) {
  STRATA_CHECK(!ys.empty() && ys.size() <= size_t(kMaxOuts), op, ": ", ys.size(), " outputs (1 to ",
               kMaxOuts, " on CUDA)");
  Outs o{};
  o.n = int(ys.size());
  int64_t col = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    expect_float(ys[i], op, "output");
    STRATA_CHECK(rows_of(ys[i]) == rows, op, ": output ", ys[i].describe(), " does not have ", rows, " rows");
    o.ptr[i] = ys[i].raw();
    o.f32[i] = is_f32(ys[i]);
    o.start[i] = col;
    col += ys[i].dim(-1);
  }
  o.start[o.n] = col;
  STRATA_CHECK(col == n, op, ": outputs cover ", col, " of the weight's ", n, " rows");
  return o;
}

void linear_into(const Tensor& x, const Tensor& w, const std::vector<Tensor>& ys, const char* op,
                 const Tensor& rest = Tensor()) {
  if (w.dtype() == DType::kF8E4M3) {
    return linear_fp8_into(x, w, rest, ys, outs_of(ys, rows_of(x), w.dim(0) + (rest.defined() ? rest.dim(0) : 0), op),
                           op);
  }
  STRATA_CHECK(!rest.defined(), op, ": bf16 rows ", rest.describe(), " after a weight that is not FP8, ",
               w.describe());
  expect_dtype(x, DType::kBF16, op, "x");
  expect_dtype(w, DType::kBF16, op, "weight");
  STRATA_CHECK(w.ndim() == 2 && x.dim(-1) == w.dim(1), op, ": x ", x.describe(), " does not match weight ",
               w.describe());
  const int64_t k = w.dim(1), n = w.dim(0), rows = rows_of(x);
  const Outs o = outs_of(ys, rows, n, op);
  if (rows == 0) return;
  const auto* xp = static_cast<const bf16*>(x.raw());
  const auto* wp = static_cast<const bf16*>(w.raw());
  const bool vec = k % 8 == 0 && aligned16(xp) && aligned16(wp);
  if (rows <= kGemvMaxRows && vec) {
    gemv<false>(xp, wp, k, n, int(rows), o);
    return;
  }
  if (!vec || k < 8) {
    launch_pdl(linear_scalar_kernel, blocks_for(rows * n, 256), 256, 0, xp, wp, k, n, rows, o);
    check_launch("linear_scalar");
    return;
  }
  // One GEMM an output, over its block of the weight's rows: no scratch and no split pass, and
  // each output keeps its own dtype and row stride. (One GEMM into an F32 [rows, 1281] scratch,
  // whose rows are not 16-byte aligned, then a split, took 8x the FLOP time at 8k tokens. A warp
  // a row for the one-column shared-expert gate, instead of its GEMM, made the router's
  // projection slower: 127 against 113 us at 8k tokens.)
  for (int i = 0; i < o.n; ++i) {
    gemm_bf16(xp, wp + o.start[i] * k, ys[i].raw(), o.f32[i], rows, o.start[i + 1] - o.start[i], k);
  }
}

}  // namespace

void gemm_bf16_grouped(const void* x, int64_t ldx, int64_t x_stride, const void* w, int64_t w_stride, void* y,
                       bool y_f32, int64_t ldy, int64_t y_stride, int64_t m, int64_t n, int64_t k, int64_t groups) {
  Lt& l = lt();
  // Row-major y[m, n] = x[m, k] · w[n, k]^T is column-major y^T[n, m] = w^T... : A = w (k x n,
  // transposed), B = x (k x m, leading dimension ldx), C = y (n x m, ldy), all column-major; the
  // groups are a strided batch.
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  check_lt(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, uint64_t(k), uint64_t(m), ldx), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&c, y_f32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(n), uint64_t(m), ldy),
           "layout C");
  if (groups > 1) {
    const int32_t count = int32_t(groups);
    for (auto [layout, stride] : {std::pair{a, w_stride}, std::pair{b, x_stride}, std::pair{c, y_stride}}) {
      check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
               "batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                sizeof(stride)),
               "batch stride");
    }
  }
  cublasLtMatmulAlgo_t algo;
  const GemmKey key{m, n, k, y_f32, ldx, ldy, groups > 1 ? x_stride : 0, groups > 1 ? w_stride : 0,
                    groups > 1 ? y_stride : 0, groups};
  STRATA_CHECK(find_algo(l, key, desc, a, b, c, algo), "cuBLASLt: no algorithm for a ", m, "x", n, "x", k,
               " bf16 GEMM (", groups, " groups)");
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t s = cublasLtMatmul(l.handle, desc, &alpha, w, a, x, b, &beta, y, c, y, c, &algo,
                                          l.workspace.raw(), Lt::kWorkspace, stream());
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(desc);
  check_lt(s, "Matmul");
}

void gemm_bf16(const void* x, const void* w, void* y, bool y_f32, int64_t m, int64_t n, int64_t k) {
  gemm_bf16_grouped(x, k, 0, w, 0, y, y_f32, n, 0, m, n, k, 1);
}

bool gemm_fp8_block(const void* xq, const float* x_scale, const void* wq, const float* w_scale, void* y, bool y_f32,
                    int64_t m, int64_t n, int64_t k) {
  if (m % 4 || n % 8 || k % 16 || !aligned16(x_scale) || !aligned16(w_scale)) return false;
  Lt& l = lt();
  // As gemm_bf16: A = w (k x n, transposed), B = x (k x m), D = y (n x m), column-major; the
  // scales per 128 of K of each operand's rows, by group: [ceil(k / 128), n] and [.., m].
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)), "A scale mode");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)), "B scale mode");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)),
           "A scale");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)),
           "B scale");
  check_lt(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&c, y_f32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(n), uint64_t(m), n), "layout C");
  cublasLtMatmulAlgo_t algo;
  // The bf16 keys have groups >= 1: groups -1 marks the FP8 ones.
  const bool found_algo = find_algo(l, GemmKey{m, n, k, y_f32, k, n, 0, 0, 0, -1}, desc, a, b, c, algo);
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (found_algo) {
    const float alpha = 1.f, beta = 0.f;
    s = cublasLtMatmul(l.handle, desc, &alpha, wq, a, xq, b, &beta, y, c, y, c, &algo, l.workspace.raw(),
                       Lt::kWorkspace, stream());
  }
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(desc);
  if (found_algo) check_lt(s, "FP8 Matmul");
  return found_algo;
}

void linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  OpTimer timer_("linear", w.ndim() == 2 ? w.dim(0) : 0, w.ndim() == 2 ? w.dim(1) : 0);
  STRATA_CHECK(y.dim(-1) == w.dim(0), "linear: y ", y.describe(), " does not match weight ", w.describe());
  linear_into(x, w, {y}, "linear");
}

void add_rms_norm_linear(const Tensor& h, const Tensor& y, const Tensor& norm_w, float eps, bool zero_centered,
                         const Tensor& h_out, const Tensor& x, const Tensor& w, const std::vector<Tensor>& outs,
                         const Tensor& w_rest) {
  OpTimer timer_("add_rms_norm_linear", w.ndim() == 2 ? w.dim(0) : 0, w.ndim() == 2 ? w.dim(1) : 0);
  const char* op = "add_rms_norm_linear";
  const int64_t k = h.dim(-1), rows = rows_of(h);
  STRATA_CHECK(x.shape() == h.shape() && norm_w.numel() == k && (!y.defined() || (y.shape() == h.shape() &&
                                                                                 h_out.shape() == h.shape())),
               op, ": h ", h.describe(), ", y ", y.defined() ? y.describe() : "none", ", x ", x.describe(),
               ", norm weight ", norm_w.describe());
  const bool fp8 = w.dtype() == DType::kF8E4M3;
  const Fp8Rows fw = fp8 ? fp8_weight(w, w_rest, op) : Fp8Rows{};
  bool fused = rows >= 1 && rows <= kGemvMaxRows && rows * k <= kNormMaxElems && k % (fp8 ? 16 : 8) == 0 &&
               w.ndim() == 2 && w.dim(1) == k && (fp8 || w.dtype() == DType::kBF16) && aligned16(w.raw()) &&
               aligned16(norm_w.raw());
  if (w_rest.defined()) fused = fused && fp8 && aligned16(w_rest.raw());
  for (const Tensor* t : {&h, &y, &h_out, &x}) {
    if (t->defined()) fused = fused && t->dtype() == DType::kBF16 && aligned16(t->raw());
  }
  // Block 0 writes h + y while the others still read h and y: they must be other tensors.
  if (y.defined()) fused = fused && h_out.raw() != h.raw() && h_out.raw() != y.raw();
  fused = fused && (norm_w.dtype() == DType::kF32 || norm_w.dtype() == DType::kBF16);
  if (!fused) {
    if (y.defined()) {
      add_rms_norm_into(h, y, norm_w, eps, zero_centered, h_out, x);
    } else {
      rms_norm(h, norm_w, eps, zero_centered, x);
    }
    linear_into(x, w, outs, op, w_rest);
    return;
  }
  const Outs o = outs_of(outs, rows, w.dim(0) + (w_rest.defined() ? w_rest.dim(0) : 0), op);
  const NormIn nin{static_cast<const bf16*>(h.raw()), y.defined() ? static_cast<const bf16*>(y.raw()) : nullptr,
                   norm_w.raw(), is_f32(norm_w), zero_centered, eps,
                   y.defined() ? static_cast<bf16*>(h_out.raw()) : nullptr, static_cast<bf16*>(x.raw())};
  if (fp8) {
    gemv_fp8(nullptr, fw, k, o.start[o.n], int(rows), o, &nin);
    return;
  }
  gemv<true>(nullptr, static_cast<const bf16*>(w.raw()), k, w.dim(0), int(rows), o, nin);
}

void linear_split(const Tensor& x, const Tensor& w, const std::vector<Tensor>& outs, const Tensor& w_rest) {
  OpTimer timer_("linear_split", w.ndim() == 2 ? w.dim(0) : 0, w.ndim() == 2 ? w.dim(1) : 0);
  linear_into(x, w, outs, "linear_split", w_rest);
}

}  // namespace strata::ops::cuda
