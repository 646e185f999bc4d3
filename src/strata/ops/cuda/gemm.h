// cuBLASLt GEMM shared by linear, the MoE fallback and the roofline benchmark.
#pragma once

#include <cstdint>

namespace strata::ops::cuda {

// Row-major y[m, n] = x[m, k] · w[n, k]^T on the backend's stream: bf16 inputs, fp32
// accumulation, y BF16 or F32 (y_f32). Capturable in a CUDA graph once the shape has run.
void gemm_bf16(const void* x, const void* w, void* y, bool y_f32, int64_t m, int64_t n, int64_t k);
// The same for `groups` GEMMs in one call (a strided batch): group g reads x + g x_stride (rows
// ldx elements apart) and w + g w_stride ([n, k] contiguous), and writes y + g y_stride (rows
// ldy apart). Strides and leading dimensions count elements.
void gemm_bf16_grouped(const void* x, int64_t ldx, int64_t x_stride, const void* w, int64_t w_stride, void* y,
                       bool y_f32, int64_t ldy, int64_t y_stride, int64_t m, int64_t n, int64_t k, int64_t groups);

// Row-major y[m, n] = x[m, k] · w[n, k]^T with both operands F8_E4M3 codes and F32 scales per
// 128 of K, stored by group (x_scale [ceil(k / 128), m], w_scale [ceil(k / 128), n]; 16-byte
// aligned): cuBLASLt's block scaling (CUDA >= 12.9, sm_90), fp32 accumulation, y BF16 or F32.
// False, with nothing run, where cuBLASLt takes no such shape (m % 4, n % 8, k % 16) or offers no
// algorithm for it.
bool gemm_fp8_block(const void* xq, const float* x_scale, const void* wq, const float* w_scale, void* y, bool y_f32,
                    int64_t m, int64_t n, int64_t k);

}  // namespace strata::ops::cuda
