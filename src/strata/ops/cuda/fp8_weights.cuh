// Block-scaled FP8 weights on the device (Tensor::with_scale: an FP8 checkpoint's experts kept
// compressed): F8_E4M3 codes, and each row's F32 scales, one per kFp8Group columns.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/expert_matrix.cuh"

namespace strata::ops::cuda {

constexpr int kFp8Group = 128;

// One code as a float (exact).
__device__ __forceinline__ float e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3)));
}

// 16 codes (one 16-byte vector) as floats: e4m3 -> f16 -> f32 is exact.
__device__ __forceinline__ void unpack16_e4m3(const uint4& u, float* f) {
  const auto* p = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3)));
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// Code pair i (0-7) of a 16-byte vector of codes, as floats.
__device__ __forceinline__ float2 e4m3_pair(const uint4& u, int i) {
  const uint32_t word = i < 2 ? u.x : i < 4 ? u.y : i < 6 ? u.z : u.w;
  const auto pair = __nv_fp8x2_storage_t((word >> (16 * (i & 1))) & 0xffffu);
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
}

// The dots of N vectors of 16 codes with the 16 bf16 values at x (16-byte aligned), unscaled, in
// f32, added to d. x is read once, 8 values at a time.
template <int N>
__device__ __forceinline__ void dot16_e4m3(const uint4 (&w)[N], const bf16* x, float (&d)[N]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float xf[8];
    unpack8(__ldg(reinterpret_cast<const uint4*>(x + 8 * half)), xf);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float2 f = e4m3_pair(w[i], 4 * half + p);
        d[i] = fmaf(f.x, xf[2 * p], fmaf(f.y, xf[2 * p + 1], d[i]));
      }
    }
  }
}

// 16 codes times `scale` (one f32 multiply each), rounded to bf16: the weights that dequantising
// at load and converting to bf16 give. lo: elements 0-7, hi: 8-15.
__device__ __forceinline__ void dequant16_e4m3(const uint4& u, float scale, uint4& lo, uint4& hi) {
  float f[16];
  unpack16_e4m3(u, f);
#pragma unroll
  for (int i = 0; i < 16; ++i) f[i] *= scale;
  lo = pack8(f);
  hi = pack8(f + 8);
}

}  // namespace strata::ops::cuda
