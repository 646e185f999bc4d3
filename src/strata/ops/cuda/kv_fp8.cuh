// The FP8 KV cache's encoding on the device, bit for bit ops/kv_fp8.h's: e4m3 codes (to
// nearest, ties to even) of x * 2^-e and one UE8M0 byte e + 127 a vector, e the smallest with
// amax * 2^-e <= 448.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "strata/ops/cuda/common.cuh"

namespace strata::ops::cuda {

__device__ __forceinline__ uint8_t kv_fp8_scale_byte(float amax) {
  if (!(amax > 0.f) || isinf(amax)) return 127;
  int exp = 0;
  const float m = frexpf(amax, &exp);
  const int e = min(127, max(-127, m <= 0.875f ? exp - 9 : exp - 8));
  return uint8_t(e + 127);
}

// 2^(byte - 127), exact (2^-127 is a float subnormal).
__device__ __forceinline__ float kv_fp8_scale(uint8_t byte) {
  return byte == 0 ? 5.877471754111438e-39f : __int_as_float(int(byte) << 23);
}

// The code of x (already scaled); an infinity is stored as NaN, as on the CPU.
__device__ __forceinline__ uint8_t kv_fp8_code(float x) {
  if (isinf(x)) return x < 0.f ? 0xff : 0x7f;
  return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// N codes (N / 2 pairs at p) times the scale, as floats: e4m3 -> f16 -> f32 is exact, and so
// is the product by a power of two.
template <int N>
__device__ __forceinline__ void kv_fp8_unpack(const __nv_fp8x2_storage_t* p, float scale, float* f) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3)));
    f[2 * i] = t.x * scale;
    f[2 * i + 1] = t.y * scale;
  }
}
__device__ __forceinline__ void kv_fp8_unpack16(const uint4& u, float scale, float* f) {
  kv_fp8_unpack<16>(reinterpret_cast<const __nv_fp8x2_storage_t*>(&u), scale, f);
}
__device__ __forceinline__ void kv_fp8_unpack8(const uint2& u, float scale, float* f) {
  kv_fp8_unpack<8>(reinterpret_cast<const __nv_fp8x2_storage_t*>(&u), scale, f);
}

}  // namespace strata::ops::cuda
