// Device helpers shared by the CUDA kernels: bf16 <-> float, vector loads, warp and block
// reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float bf2f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 f2bf(float v) { return __float2bfloat16_rn(v); }

// Element i of a BF16 or F32 array, as float.
__device__ __forceinline__ float ldf(const void* p, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(p)[i] : bf2f(static_cast<const bf16*>(p)[i]);
}
__device__ __forceinline__ void stf(void* p, bool f32, int64_t i, float v) {
  if (f32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<bf16*>(p)[i] = f2bf(v);
  }
}

// SiLU by ex2.approx and an approximate division: a few f32 ulps from x / (1 + expf(-x)) (2e-6
// relative for |x| < 20; 0 below -88, x above 88), far below the bf16 rounding (2^-9) of nearly
// every output, at a fifth of the instructions (the prefill conv was bound by them).
__device__ __forceinline__ float silu_f(float x) { return __fdividef(x, 1.f + __expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }
// The experts' SwiGLU silu(g) * u; with a finite limit, DeepSeek-V4's clamped form
// silu(min(g, limit)) * clamp(u, -limit, limit) (an infinite one leaves g and u as they are).
__device__ __forceinline__ float swiglu_f(float g, float u, float limit) {
  if (limit < INFINITY) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  return silu_f(g) * u;
}

// Eight bf16 in one 16-byte vector.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return u;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Warp-wide (value, index) maximum, the lower index winning ties; every lane ends with it.
__device__ __forceinline__ void warp_argmax(float& best, int& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ob > best || (ob == best && oi < bi)) {
      best = ob;
      bi = oi;
    }
  }
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
// `red` is __shared__ float[32]. Contains __syncthreads.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < warps ? red[lane] : 0.f;
  t = warp_sum(t);
  return t;
}

// Programmatic dependent launch (Hopper and later). Every kernel is queued with launch_pdl, so the
// GPU may start it while the previous kernel of the stream still runs; every kernel therefore
// begins with pdl_begin(): it lets the next kernel be scheduled as soon as all of this one's
// blocks are running, then waits until the previous kernel has finished and its writes are
// visible. What overlaps is the launch and the block scheduling, never the data.
// A kernel may split it: pdl_trigger() first, then loads of what no kernel writes (weights),
// then pdl_wait() before anything else.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_begin() {
  pdl_trigger();
  pdl_wait();
}

// kernel<<<grid, block, smem, stream()>>>(args...) with programmatic stream serialization
// allowed (captured into CUDA graphs as programmatic edges).
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  // cudaLaunchKernelEx reports a bad configuration itself; check_launch after it stays valid.
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// True when p is 16-byte aligned (vector loads).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// A grid-stride loop of the calling thread over [0, n).
#define STRATA_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Blocks of 256 threads for a grid-stride kernel over n elements: one an element, at most 16 an SM.
inline unsigned grid_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, int64_t(sm_count()) * 16)));
}

}  // namespace strata::ops::cuda
