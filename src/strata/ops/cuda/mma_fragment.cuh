// Register helpers of the tensor-core kernels: the bf16 pair of an MMA fragment register and the
// exp2 of the online softmax (attention.cu, attention_wgmma.cu, attention_decode.cu), ldmatrix and
// the bf16 mma.sync (moe_gemm.cu, gdn_chunked_tc.cu, attention_decode.cu).
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
// The shared-memory address forms (smem_u32), then the pointer forms.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4_trans(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
}

// d += a b, one m16n8k16 tile (bf16 in, fp32 accumulate). PTX fragment layouts (g = lane / 4,
// t = lane % 4): a = rows g, g + 8 by k 2t .. 2t + 1 and 2t + 8 ..; b = k 2t .., 2t + 8 .. by
// column g; d = rows g, g + 8 by columns 2t, 2t + 1.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// log2(e): the online softmax's scores are kept in log2 units for fast_exp2.
inline constexpr float kLog2e = 1.4426950408889634f;

// 2^x by the special-function unit (approximate, subnormals flushed; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace strata::ops::cuda
