// cuBLASLt GEMM shared by linear, the MoE fallback and the roofline benchmark.
#pragma once

#include <cstdint>

namespace strata::ops::cuda {

// Row-major y[m, n] = x[m, k] · w[n, k]^T on the backend's stream: bf16 inputs, fp32
// accumulation, y BF16 or F32 (y_f32). Capturable in a CUDA graph once the shape has run.
void gemm_bf16(const void* x, const void* w, void* y, bool y_f32, int64_t m, int64_t n, int64_t k);

}  // namespace strata::ops::cuda
