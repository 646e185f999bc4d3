// cp.async, the asynchronous global -> shared copies of the pipelined kernels (attention prefill,
// the GDN state scan, the expert GEMMs).
#pragma once

#include <cstdint>

namespace strata::ops::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; zeros when !valid (gmem is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* gmem, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* gmem, bool valid = true) {
  cp_async16(smem_u32(dst), gmem, valid);
}
// 4 bytes global -> shared, asynchronously (through L1); zeros when !valid.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* gmem, bool valid = true) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace strata::ops::cuda
