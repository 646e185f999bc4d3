// The FP8 KV cache's encoding (--kv-cache-dtype fp8): each cached vector (one token's key or
// value of one kv head, head_dim elements) is stored as e4m3fn codes and one power-of-two scale
// byte (UE8M0, 2^(byte - 127)):
//   e     = the smallest exponent in [-127, 127] with amax * 2^-e <= 448 (e = 0 for a zero or
//           infinite amax), so the largest element lands in (224, 448] unless e is clamped;
//   codes = e4m3(x * 2^-e), to nearest, ties to even (x * 2^-e is exact); NaN and infinite
//           elements are stored as NaN (e4m3fn has no infinity), never clamped to a number.
// The value read back, e4m3(code) * 2^e, is exact in float32 and in bfloat16 (e4m3 has 3
// mantissa bits), so the CPU op and the CUDA kernels see the same keys and values. A power of two
// needs no rounding of its own and one byte a vector; e4m3's relative precision is the same
// anywhere in its normal range, so a finer scale would buy nothing but the top half-octave.
// CPU side here; the CUDA kernels compute the same bits (attention.cu).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "strata/core/dtype.h"

namespace strata::ops {

// The UE8M0 scale byte (e + 127) of a vector whose largest magnitude is amax (NaN elements are
// skipped, as fmax skips them).
inline uint8_t kv_fp8_scale_byte(float amax) {
  if (!(amax > 0.f) || !std::isfinite(amax)) return 127;
  int exp = 0;
  const float m = std::frexp(amax, &exp);  // amax = m * 2^exp, m in [0.5, 1); 448 = 0.875 * 2^9
  int e = m <= 0.875f ? exp - 9 : exp - 8;
  e = e < -127 ? -127 : e > 127 ? 127 : e;
  return uint8_t(e + 127);
}

// Encodes x[0..d) into codes[0..d) and *scale.
inline void kv_fp8_encode(const float* x, int64_t d, uint8_t* codes, uint8_t* scale) {
  float amax = 0.f;
  for (int64_t i = 0; i < d; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  *scale = kv_fp8_scale_byte(amax);
  const float inv = std::ldexp(1.f, 127 - int(*scale));
  for (int64_t i = 0; i < d; ++i) {
    codes[i] = std::isinf(x[i]) ? uint8_t(x[i] < 0 ? 0xff : 0x7f) : f32_to_f8e4m3(x[i] * inv);
  }
}

// Decodes codes[0..d) with their scale byte into out[0..d) (e4m3 values from a table: the CPU
// attention decodes every cached vector it reads).
inline void kv_fp8_decode(const uint8_t* codes, uint8_t scale, int64_t d, float* out) {
  static const std::array<float, 256> kValues = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[size_t(c)] = f8e4m3_to_f32(uint8_t(c));
    return v;
  }();
  const float s = ue8m0_to_f32(scale);
  for (int64_t i = 0; i < d; ++i) out[i] = kValues[codes[i]] * s;
}

}  // namespace strata::ops
