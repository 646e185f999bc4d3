// Hopper's shared-memory barriers (mbarrier) and the warp-specialized pipelines built on them:
// producer warps fill a ring of stages, consumer warps wait on a stage's "full" barrier, use it
// and arrive on its "empty" barrier. Every function takes the barrier's shared-memory address
// (smem_u32). Without sm_90 (another architecture's pass) they are empty.
//
// A barrier completes a phase when its pending arrivals reach zero (and, with a transaction
// count, when the bytes it expects have landed); waiters name the phase by its parity. A ring
// slot s used for the n-th time (n = 0, 1, ...) is waited for with parity n % 2 on "full"; the
// producer waits on "empty" with parity (n % 2) ^ 1, which passes at once the first time.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define STRATA_MBARRIER 1
#endif

namespace strata::ops::cuda {

// One thread initialises; then fence_barrier_init and a block-wide barrier before any use.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
#ifdef STRATA_MBARRIER
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void fence_barrier_init() {
#ifdef STRATA_MBARRIER
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#ifdef STRATA_MBARRIER
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
#endif
}
// Arrives and adds `bytes` to the transaction count the phase waits for (bulk / tensor copies
// complete_tx them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef STRATA_MBARRIER
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
#endif
}
// Arrives once every cp.async this thread issued before has landed (the arrival is counted in
// the barrier's init count: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
#ifdef STRATA_MBARRIER
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
#ifdef STRATA_MBARRIER
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
#else
  (void)bar, (void)parity;
  return true;
#endif
}
// Waits until the phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// The box of a TMA tensor map (tensor_map.h; `map` the address of a __grid_constant__ kernel
// parameter) at element coordinates (c0, c1, c2), innermost first, into shared memory at dst; the
// box's bytes complete on the barrier's transaction count (expected by mbar_arrive_expect_tx).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, int c2) {
#ifdef STRATA_MBARRIER
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
          dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// A bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared memory at
// src to global memory at dst, in this thread's current bulk group (bulk_commit closes it). The
// shared source must have been written before a fence_proxy_async of its writers.
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
#ifdef STRATA_MBARRIER
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef STRATA_MBARRIER
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's bulk groups are still reading their shared sources
// (the sources may then be rewritten) ...
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#ifdef STRATA_MBARRIER
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
// ... or are still incomplete (their writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
#ifdef STRATA_MBARRIER
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Makes this thread's generic-proxy shared-memory writes (stores, cp.async that have landed)
// visible to the async proxy (wgmma operands, bulk copies) and orders them before its later
// async-proxy accesses.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef STRATA_MBARRIER
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// A named barrier (ids 1-15; 0 is __syncthreads) over `threads` threads, a multiple of 32.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Moves the register budget of this warpgroup's threads to N (a multiple of 8, 24..256):
// producers give registers up, consumers take them (every warp of the warpgroup executes it).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

}  // namespace strata::ops::cuda
