// Element types of tensors and checkpoints, with exact scalar conversions to float.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // e4m3fn: no infinities, 0x7f/0xff are NaN
  kF8E5M2,
  kU8,
  kI8,
  kI32,
  kI64,
  kF4E2M1,  // e2m1, two values a byte, low nibble first; logical shape (checkpoints pack it as U8)
  kUE8M0,   // power-of-two scale: 2^(bits - 127)
};

// Bytes of one element, for the types of a byte or more; kF4E2M1 answers 1, its packed byte of two
// elements: count its bytes with dtype_bytes.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI64: return 8;
    default: return 1;  // 1-byte types; kF4E2M1 is counted per packed byte
  }
}

// Bytes of n elements of type t: n * dtype_size(t), or n / 2 for kF4E2M1 (two codes a byte), whose
// n must be even (a Tensor of F4_E2M1 has an even last dimension). Throws Error on a negative or,
// for F4_E2M1, odd n.
size_t dtype_bytes(DType t, int64_t n);

std::string_view dtype_name(DType t);
// Parses a safetensors dtype string ("BF16", "F8_E4M3", ...); returns false when unknown.
bool dtype_from_safetensors(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(float(man), -24);
  } else if (exp == 31) {
    mag = man ? NAN : INFINITY;
  } else {
    mag = std::ldexp(float(man | 0x400), int(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &mag, 4);
  u |= sign;
  std::memcpy(&mag, &u, 4);
  return mag;
}

inline float f8e4m3_to_f32(uint8_t b) {
  float sign = (b & 0x80) ? -1.f : 1.f;
  int exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 15 && man == 7) return NAN;
  if (exp == 0) return sign * std::ldexp(float(man), -9);
  return sign * std::ldexp(float(8 + man), exp - 10);
}

// The nearest e4m3fn code to x, ties to the even code, saturating at +-448 (infinities too), NaN
// to 0x7f with x's sign: __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) on the GPU.
inline uint8_t f32_to_f8e4m3(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return uint8_t(sign | 0x7f);
  float a;
  std::memcpy(&a, &u, 4);
  if (a < 0.015625f) {  // below 2^-6: subnormal codes m * 2^-9 (m = 8 is the smallest normal, 0x08)
    return uint8_t(sign | uint8_t(std::nearbyint(a * 512.f)));
  }
  if (a >= 448.f) return uint8_t(sign | 0x7e);
  const uint32_t keep = (u >> 20) & 7u, rem = u & 0xfffffu;
  uint32_t code = ((((u >> 23) - 127u + 7u) << 3) | keep) + (rem > 0x80000u || (rem == 0x80000u && (keep & 1u)));
  if (code > 0x7e) code = 0x7e;
  return uint8_t(sign | code);
}

inline float f8e5m2_to_f32(uint8_t b) { return f16_to_f32(uint16_t(b) << 8); }

// One e2m1 nibble (MXFP4 / NVFP4 element): values 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives.
inline float f4e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  float m = kMag[nibble & 7];
  return (nibble & 8) ? -m : m;
}

inline float ue8m0_to_f32(uint8_t b) {
  if (b == 0xff) return NAN;
  return std::ldexp(1.f, int(b) - 127);
}

// One NVFP4 weight: the e2m1 code (the low 4 bits of `code`) times its e4m3 block scale byte times
// the float32 global scale (a tensor's or a row's), float32 multiplies left to right: (c * s) * g.
// c * s is exact (2 by 4 significant bits), so the one rounding is at * g. The checkpoint
// dequantisation (io/quant.cpp) and Tensor::to_f32 both use it: kept NVFP4 weights equal their
// dequantised load bit for bit. A NaN scale byte (0x7f, 0xff) gives NaN: callers refuse those.
inline float nvfp4_value(uint8_t code, uint8_t scale, float global) {
  return f4e2m1_to_f32(code) * f8e4m3_to_f32(scale) * global;
}

// One MXFP4 weight: the e2m1 code (low 4 bits) times 2^(scale - 127), exact (subnormals included)
// unless it overflows to infinity (|c| >= 2 with scale byte 0xfe, |c| >= 4 with 0xfd). The NaN scale 0xff
// gives NaN: callers refuse it. Shared as nvfp4_value is.
inline float mxfp4_value(uint8_t code, uint8_t scale) { return f4e2m1_to_f32(code) * ue8m0_to_f32(scale); }

// Converts n elements of type t at src to float (integer types by value).
void to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace strata
