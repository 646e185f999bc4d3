#include "strata/core/dtype.h"

#include "strata/core/error.h"

namespace strata {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kF4E2M1: return "F4_E2M1";
    case DType::kUE8M0: return "UE8M0";
  }
  return "?";
}

size_t dtype_bytes(DType t, int64_t n) {
  STRATA_CHECK(n >= 0, "dtype_bytes: ", n, " elements of ", dtype_name(t));
  if (t != DType::kF4E2M1) return size_t(n) * dtype_size(t);
  STRATA_CHECK(n % 2 == 0, "dtype_bytes: an odd count (", n, ") of F4_E2M1 elements, two a byte");
  return size_t(n / 2);
}

bool dtype_from_safetensors(std::string_view s, DType* out) {
  static constexpr struct {
    std::string_view name;
    DType type;
  } kTable[] = {{"F32", DType::kF32},         {"F16", DType::kF16},
                {"BF16", DType::kBF16},       {"F8_E4M3", DType::kF8E4M3},
                {"F8_E5M2", DType::kF8E5M2},  {"U8", DType::kU8},
                {"I8", DType::kI8},           {"I32", DType::kI32},
                {"I64", DType::kI64},         {"F8_E8M0", DType::kUE8M0}};
  for (const auto& e : kTable) {
    if (e.name == s) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

void to_f32(DType t, const void* src, float* dst, size_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::kF8E4M3: for (size_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(b[i]); return;
    case DType::kF8E5M2: for (size_t i = 0; i < n; ++i) dst[i] = f8e5m2_to_f32(b[i]); return;
    case DType::kUE8M0: for (size_t i = 0; i < n; ++i) dst[i] = ue8m0_to_f32(b[i]); return;
    case DType::kU8: for (size_t i = 0; i < n; ++i) dst[i] = float(b[i]); return;
    case DType::kI8: for (size_t i = 0; i < n; ++i) dst[i] = float(int8_t(b[i])); return;
    case DType::kI32:
      for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, b + 4 * i, 4);
        dst[i] = float(v);
      }
      return;
    case DType::kI64:
      for (size_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, b + 8 * i, 8);
        dst[i] = float(v);
      }
      return;
    case DType::kF4E2M1:
      fail("to_f32: packed F4_E2M1 needs a dequantiser with its scales, not a plain conversion");
  }
}

}  // namespace strata
