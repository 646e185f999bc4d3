// Block-scaled FP4 weights on the device (Tensor::with_scale: an NVFP4 or MXFP4 checkpoint's
// experts kept compressed): e2m1 codes two a byte, low nibble first (a row of C codes is C / 2
// bytes), each row's scale bytes per group of columns, and for NVFP4 an F32 global a row.
// Element = (c * s) * g (core/dtype.h: nvfp4_value; MXFP4's mxfp4_value has no g). Everything
// here is exact, subnormals included: nothing may be built with -use_fast_math or ftz (code 0.5
// passes through the subnormal 2^-127, and MXFP4's scale byte 0 is 2^-127).
#pragma once

#include <cstdint>

#include "strata/io/quant.h"  // kNvfp4Group, kMxfp4Group
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/expert_matrix.cuh"
#include "strata/ops/cuda/fp8_weights.cuh"

namespace strata::ops::cuda {

template <WeightFormat F>
constexpr int fp4_group() {
  static_assert(is_fp4(F), "an FP4 format");
  return F == WeightFormat::kNvfp4 ? kNvfp4Group : kMxfp4Group;
}

// A ue8m0 scale byte e (0..254; the loader refuses the NaN 0xff) as 2^(e - 127), exactly: the f32
// bits e << 23 for e >= 1, and for 0 the subnormal 2^-127 (bits 0x400000).
__device__ __forceinline__ float ue8m0_value(uint32_t e) { return __uint_as_float(e ? e << 23 : 0x00400000u); }

// A scale byte of format F as a float (e4m3 exact through f16; ue8m0 as above).
template <WeightFormat F>
__device__ __forceinline__ float fp4_scale_value(uint32_t byte) {
  if constexpr (F == WeightFormat::kNvfp4) {
    return e4m3_value(uint8_t(byte));
  } else {
    return ue8m0_value(byte & 0xffu);
  }
}

// The 8 codes of a word (code i in bits 4i..4i+3: element order of low-nibble-first bytes) as exact
// floats. Each of 4 steps makes, of nibbles 3 and 7, a bf16 pair worth c * 2^-126: the sign bit
// stays at bit 15, the 3 magnitude bits move to bf16's 2 low exponent bits and first mantissa bit
// (so 1.0 has exponent field 1 and 0.5 is the subnormal 2^-127); each half widened to f32 by its
// bits and multiplied by 2^126 (exact: subnormal inputs are not flushed); then the word shifts one
// nibble up.
__device__ __forceinline__ void e2m1x8_values(uint32_t q, float (&c)[8]) {
  const float two126 = __uint_as_float(253u << 23);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t pair = (q & 0x80008000u) | ((q & 0x70007000u) >> 6);
    c[3 - s] = __uint_as_float(pair << 16) * two126;
    c[7 - s] = __uint_as_float(pair & 0xffff0000u) * two126;
    q <<= 4;
  }
}

// d[i] = the dot of row i's 16 codes (words w[i][0], w[i][1]) with the 16 bf16 values at x
// (16-byte aligned), unscaled, in f32; x read once for all N rows.
template <int N>
__device__ __forceinline__ void e2m1x16_dots(const uint32_t (&w)[N][2], const bf16* x, float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) d[i] = 0.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float xf[8];
    unpack8(__ldg(reinterpret_cast<const uint4*>(x + 8 * half)), xf);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float c[8];
      e2m1x8_values(w[i][half], c);
#pragma unroll
      for (int j = 0; j < 8; ++j) d[i] = fmaf(c[j], xf[j], d[i]);
    }
  }
}

// The scales of a 32-code vector at columns k..k+31 (k a multiple of 32) of a row whose scale
// bytes start at `scales`: NVFP4 two bytes (one 16-bit load: the row's C / 16 bytes are an even
// number when C is a multiple of 32), codes 0-15 and 16-31; MXFP4 one byte for both.
template <WeightFormat F>
__device__ __forceinline__ void fp4_scales32(const uint8_t* scales, int64_t k, float& lo, float& hi) {
  if constexpr (F == WeightFormat::kNvfp4) {
    const uint32_t pair = __ldg(reinterpret_cast<const unsigned short*>(scales + k / kNvfp4Group));
    lo = fp4_scale_value<F>(pair & 0xffu);
    hi = fp4_scale_value<F>(pair >> 8);
  } else {
    lo = hi = fp4_scale_value<F>(__ldg(scales + k / kMxfp4Group));
  }
}

// acc[i] += row i's 32 codes (one 16-byte vector, columns k..k+31, k a multiple of 32) dotted with
// x[k..k+32) (x the row's start, 16-byte aligned), each group's dot times its scale; scales[i]:
// row i's scale bytes. Globals are not applied (a row's one multiply at the end).
template <WeightFormat F, int N>
__device__ __forceinline__ void fp4_dot32(const uint4 (&w)[N], const bf16* x, const uint8_t* const (&scales)[N],
                                          int64_t k, float (&acc)[N]) {
  float s_lo[N], s_hi[N];
#pragma unroll
  for (int i = 0; i < N; ++i) fp4_scales32<F>(scales[i], k, s_lo[i], s_hi[i]);
  uint32_t lo_words[N][2], hi_words[N][2];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    lo_words[i][0] = w[i].x, lo_words[i][1] = w[i].y;
    hi_words[i][0] = w[i].z, hi_words[i][1] = w[i].w;
  }
  float lo[N], hi[N];
  e2m1x16_dots<N>(lo_words, x + k, lo);
  e2m1x16_dots<N>(hi_words, x + k + 16, hi);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (F == WeightFormat::kNvfp4) {
      acc[i] = fmaf(s_hi[i], hi[i], fmaf(s_lo[i], lo[i], acc[i]));
    } else {
      acc[i] = fmaf(s_lo[i], lo[i] + hi[i], acc[i]);
    }
  }
}

// 32 codes (one 16-byte vector) as bf16(c * s): codes 0-15 with s_lo, 16-31 with s_hi, into
// out[0..3] (8 values each). c * s is exact in f32 and in bf16 (at most 6 significant bits, within
// bf16's range for the scales the loader accepts), so these are exact: the mma.sync tiles' weights.
__device__ __forceinline__ void dequant32_fp4(const uint4& u, float s_lo, float s_hi, uint4 (&out)[4]) {
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float c[8];
    e2m1x8_values(words[j], c);
    const float s = j < 2 ? s_lo : s_hi;
#pragma unroll
    for (int i = 0; i < 8; ++i) c[i] *= s;
    out[j] = pack8(c);
  }
}

}  // namespace strata::ops::cuda
