// An expert stack [E, R, C] as the MoE kernels (moe.cu, moe_gemm.cu, moe_gemm_wgmma.cu) read it,
// and the formats of its weights.
#pragma once

#include <cstdint>
#include <type_traits>

namespace strata::ops::cuda {

// kBf16: bf16 values. kFp8: F8_E4M3 codes, F32 scales a row per kFp8Group columns
// (fp8_weights.cuh). kNvfp4: e2m1 codes two a byte (low nibble first), e4m3 scale bytes a row per
// 16 columns and an F32 global a row; kMxfp4: e2m1 codes, ue8m0 scale bytes a row per 32 columns,
// no global (fp4_weights.cuh).
enum class WeightFormat { kBf16, kFp8, kNvfp4, kMxfp4 };

constexpr bool is_fp4(WeightFormat f) { return f == WeightFormat::kNvfp4 || f == WeightFormat::kMxfp4; }

struct ExpertMatrix {
  const void* w = nullptr;          // [E, R, C]: bf16, FP8 codes, or FP4 codes (C / 2 bytes a row)
  const float* scale = nullptr;     // FP8: [E, R, groups] F32
  int64_t groups = 0;               // scales a row (FP8 and FP4)
  const uint8_t* fp4_scale = nullptr;  // FP4: [E, R, groups] e4m3 (NVFP4) or ue8m0 (MXFP4) bytes
  const float* global = nullptr;    // NVFP4: [E, R] F32, a row's second-level scale
  WeightFormat format = WeightFormat::kBf16;
};

// Calls fn(std::integral_constant<WeightFormat, format>()): a kernel template instantiated per
// format from one runtime value.
template <class Fn>
void visit_format(WeightFormat format, Fn&& fn) {
  using F = WeightFormat;
  switch (format) {
    case F::kFp8: return fn(std::integral_constant<F, F::kFp8>());
    case F::kNvfp4: return fn(std::integral_constant<F, F::kNvfp4>());
    case F::kMxfp4: return fn(std::integral_constant<F, F::kMxfp4>());
    default: return fn(std::integral_constant<F, F::kBf16>());
  }
}

}  // namespace strata::ops::cuda
