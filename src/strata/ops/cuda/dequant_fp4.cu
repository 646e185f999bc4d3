// CUDA: FP4 weights (NVFP4, MXFP4: fp4_weights.cuh) dequantised element-wise to bf16, the weights
// that dequantising the checkpoint to F32 at load (io/quant.h: nvfp4_value, mxfp4_value) and
// rounding to bf16 give, bit for bit: NVFP4 (c * s) * g with c * s exact and one f32 rounding at
// * g, then RNE to bf16; MXFP4 c * 2^(e - 127), exact in f32, then RNE to bf16. The fallback for
// FP4 weights no kernel reads compressed (docs/plans/fp4_kernels.md §4), and the exhaustive check
// of the kernels' decoding (e2m1x8_values, fp4_scale_value) against the CPU's.
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/fp4_weights.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

// A thread a word of 8 codes (cols a multiple of 16, so a word never straddles a row or a group):
// rows of `cols` codes, `cols / group` scale bytes a row, NVFP4 a global a row.
template <WeightFormat F>
__global__ void dequant_fp4_kernel(const uint32_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                                   const float* __restrict__ global, int64_t cols, int64_t words, bf16* out) {
  pdl_begin();
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= words) return;
  const int64_t r = v * 8 / cols, c = v * 8 % cols, groups = cols / fp4_group<F>();
  const float s = fp4_scale_value<F>(scales[r * groups + c / fp4_group<F>()]);
  float vals[8];
  e2m1x8_values(codes[v], vals);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    vals[i] *= s;  // exact
    if constexpr (F == WeightFormat::kNvfp4) vals[i] = __fmul_rn(vals[i], global[r]);
  }
  *reinterpret_cast<uint4*>(out + 8 * v) = pack8(vals);
}

}  // namespace

void dequant_fp4_to_bf16(const Tensor& w, const Tensor& out) {
  const char* op = "dequant_fp4_to_bf16";
  expect_dtype(w, DType::kF4E2M1, op, "w");
  expect_dtype(out, DType::kBF16, op, "out");
  STRATA_CHECK(w.scaled() && out.shape() == w.shape() && w.dim(-1) % 16 == 0, op, ": w ", w.describe(), ", out ",
               out.describe(), " (scaled F4_E2M1 rows of a multiple of 16 codes, out of the same shape)");
  const Tensor scale = w.scale();
  const bool nvfp4 = scale.dtype() == DType::kF8E4M3;
  const int64_t cols = w.dim(-1), words = w.numel() / 8;
  if (!words) return;
  const auto* codes = static_cast<const uint32_t*>(w.raw());
  const auto* scales = static_cast<const uint8_t*>(scale.raw());
  auto* o = static_cast<bf16*>(out.raw());
  if (nvfp4) {
    launch_pdl(dequant_fp4_kernel<WeightFormat::kNvfp4>, blocks_for(words, 256), 256, 0, codes, scales,
               w.global_scale().data<float>(), cols, words, o);
  } else {
    launch_pdl(dequant_fp4_kernel<WeightFormat::kMxfp4>, blocks_for(words, 256), 256, 0, codes, scales,
               static_cast<const float*>(nullptr), cols, words, o);
  }
  check_launch("dequant_fp4_to_bf16");
}

}  // namespace strata::ops::cuda
