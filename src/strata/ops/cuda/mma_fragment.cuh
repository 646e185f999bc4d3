// Register helpers of the tensor-core attention kernels (attention.cu, attention_wgmma.cu): the
// bf16 pair of an MMA fragment register and the exp2 of the online softmax.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace strata::ops::cuda {

// Two floats as bf16 in one register, lo in the low half (an MMA fragment's element pair).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// 2^x by the special-function unit (approximate, subnormals flushed; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace strata::ops::cuda
