// The CPU ops' hand-off to the CUDA backend: STRATA_CUDA_DISPATCH(t, op(args)) at the top of a
// CPU op returns cuda::op(args) when t lives on the GPU. Without the CUDA backend it expands to
// nothing (a CUDA tensor cannot exist then: there is no allocator for it).
#pragma once

#include <cstdint>

#include "strata/core/tensor.h"

#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/cuda_ops.h"
#define STRATA_CUDA_DISPATCH(t, call)              \
  do {                                             \
    if ((t).device() == ::strata::Device::kCuda) { \
      ::strata::ops::cuda::call;                   \
      return;                                      \
    }                                              \
  } while (0)
#else
#define STRATA_CUDA_DISPATCH(t, call) \
  do {                                \
  } while (0)
#endif

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::ops {

// The value fill_random_uniform puts at element i: a splitmix64 hash of (seed, i) cut to 24
// bits, mapped to [-scale, scale). Every step is exact but the final multiply, so the CPU and
// the GPU agree bit for bit.
STRATA_HOST_DEVICE inline float random_uniform_value(uint64_t seed, uint64_t i, float scale) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = float(uint32_t(z >> 40)) * (1.f / 8388608.f) - 1.f;  // [-1, 1), exact
  return u * scale;
}

}  // namespace strata::ops
