// CUDA: activations quantised to FP8 per row and per 128 columns (quantize_fp8_rows; the rows of
// A for the W8A8 expert GEMMs), bit for bit the CPU op.
#include "strata/ops/cuda/fp8_rows.h"

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/fp8_weights.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

constexpr int kThreads = 256;

// Sixteen lanes a (row, group): lane l holds columns 8 l .. 8 l + 7 of the group. s = max(amax,
// 1e-10) / 448 and the codes e4m3(x / s) by IEEE division, to nearest even, saturating (NaN
// stays NaN); amax ignores NaN (fmaxf), as the CPU op's std::fmax does. Every lane of a warp
// takes part in the shuffles; those past the rows or the columns hold zeros and store nothing.
__global__ void __launch_bounds__(kThreads) quantize_kernel(const bf16* __restrict__ x, int64_t rows, int64_t cols,
                                                            int groups, uint8_t* __restrict__ q,
                                                            float* __restrict__ scale, int64_t row_stride,
                                                            int64_t group_stride) {
  pdl_begin();
  const int64_t unit = (int64_t(blockIdx.x) * kThreads + threadIdx.x) >> 4;
  const int l = threadIdx.x & 15;
  const bool valid = unit < rows * groups;
  const int64_t row = valid ? unit / groups : 0;
  const int grp = valid ? int(unit % groups) : 0;
  const int64_t col = int64_t(grp) * kFp8Group + 8 * l;
  const bool ok = valid && col < cols;
  float f[8] = {};
  if (ok) unpack8(__ldg(reinterpret_cast<const uint4*>(x + row * cols + col)), f);
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
  for (int off = 8; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float s = __fdiv_rn(fmaxf(amax, 1e-10f), 448.f);
  uint32_t word[2] = {};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t code = __nv_cvt_float_to_fp8(__fdiv_rn(f[i], s), __NV_SATFINITE, __NV_E4M3);
    word[i / 4] |= code << (8 * (i % 4));
  }
  if (ok) *reinterpret_cast<uint2*>(q + row * cols + col) = make_uint2(word[0], word[1]);
  if (valid && l == 0) scale[row * row_stride + grp * group_stride] = s;
}

void launch_quantize(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale, bool by_group) {
  STRATA_CHECK(cols % 8 == 0, "quantize_fp8_rows: ", cols, " columns, not a multiple of 8");
  const int groups = int((cols + kFp8Group - 1) / kFp8Group);
  const int64_t threads = rows * groups * 16;
  if (!threads) return;
  launch_pdl(quantize_kernel, unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, x, rows, cols, groups, q,
             scale, by_group ? int64_t(1) : int64_t(groups), by_group ? rows : int64_t(1));
  check_launch("quantize_fp8_rows");
}

}  // namespace

void quantize_fp8_rows(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale) {
  launch_quantize(x, rows, cols, q, scale, false);
}

void quantize_fp8_rows_by_group(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale) {
  launch_quantize(x, rows, cols, q, scale, true);
}

void quantize_fp8_rows(const Tensor& x, const Tensor& q) {
  OpTimer timer_("quantize_fp8_rows");
  expect_dtype(x, DType::kBF16, "quantize_fp8_rows", "x");
  expect_dtype(q, DType::kF8E4M3, "quantize_fp8_rows", "q");
  const int64_t cols = x.ndim() ? x.dim(-1) : 0, rows = rows_of(x);
  STRATA_CHECK(q.shape() == x.shape() && q.scaled() && q.scale_group() == kFp8Group &&
                   q.scale().shape() == Shape({rows, (cols + kFp8Group - 1) / kFp8Group}),
               "quantize_fp8_rows: q ", q.describe(), " must have x's shape ", x.describe(), " and F32 scales [",
               rows, ", ", (cols + kFp8Group - 1) / kFp8Group, "] per ", kFp8Group, " columns");
  expect_dtype(q.scale(), DType::kF32, "quantize_fp8_rows", "q's scale");
  quantize_fp8_rows(static_cast<const bf16*>(x.raw()), rows, cols, static_cast<uint8_t*>(q.raw()),
                    q.scale().data<float>());
}

}  // namespace strata::ops::cuda
