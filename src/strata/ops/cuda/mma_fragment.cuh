// Register helpers of the tensor-core kernels: the bf16 pair of an MMA fragment register and the
// exp2 of the online softmax (attention.cu, attention_wgmma.cu), and ldmatrix (moe_gemm.cu,
// gdn_chunked_tc.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace strata::ops::cuda {

// Two floats as bf16 in one register, lo in the low half (an MMA fragment's element pair).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// ldmatrix (.b16): four 8x8 tiles of 16-bit elements from shared memory, lane l addressing row
// l % 8 of tile l / 8 (16 bytes). Lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1
// of each tile; with .trans, the same elements of the transposed tile.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))));
}

// 2^x by the special-function unit (approximate, subnormals flushed; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace strata::ops::cuda
