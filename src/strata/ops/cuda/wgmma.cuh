// Hopper's warpgroup MMA (wgmma) for the kernels that use it (the grouped expert GEMM, the
// attention prefill): the shared-memory matrix descriptors of the 128-byte swizzled layouts, the
// fence / commit / wait of the asynchronous MMAs, and the instruction shapes in use. Without
// sm_90a features (another architecture's pass) the MMAs trap and the rest are empty.
//
// The 128-byte swizzle: a tile is stored as rows of 128 bytes (64 bf16), 8-row groups of 1024
// bytes, and the 16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row; group bases must
// be 1024-byte aligned (the hardware swizzles on address bits 4-6 by bits 7-9).
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define STRATA_WGMMA 1
#endif

namespace strata::ops::cuda {

// Byte offset of 16-byte chunk c of row r in a 128-byte swizzled tile.
__device__ __forceinline__ uint32_t swizzle128(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

// The descriptor of a K-major operand in the 128-byte swizzle: bits 0-13 the start address / 16,
// 16-29 the leading byte offset / 16 (unused by this layout: 1), 32-45 the stride byte offset / 16
// (8-row groups 1024 bytes apart), 62-63 the swizzle mode (1: 128 bytes). A k16 step inside the
// 64-element row advances the start address by 32 bytes.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// The descriptor of an MN-major operand (B read transposed: rows are k, the 64 elements of a
// 128-byte row are n) over column blocks of 64 (an instruction of n = 128 or 256): the PTX ISA's canonical MN-major 128-byte-swizzle layout
// ((8, 8, m), (8, k)) : ((1, 8, LBO), (64, SBO)) in elements, so LBO (bits 16-29) is the byte
// stride between the 64-wide blocks of n (block_stride) and SBO the one between 8-row groups of k
// (1024 bytes). A k16 step advances the start address by 16 rows (2048 bytes).
__device__ __forceinline__ uint64_t smem_desc_mn(uint32_t addr, uint32_t block_stride) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((block_stride & 0x3FFFF) >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef STRATA_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef STRATA_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef STRATA_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Pins the registers of an MMA's operands in program order against the (volatile) fence, commit
// and wait: before wgmma_fence, so what wrote them is done before the MMAs start; after a wait,
// so the accumulators are read only from there on (the compiler sees no dependence of them on
// the fence or the wait).
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// The accumulator operands of the m64n128 and m64n256 instructions (64 and 128 floats a thread):
// the asm's output list over d[], and the register list of the instruction text.
#define STRATA_WGMMA_ACC64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define STRATA_WGMMA_ACC128(d) \
    STRATA_WGMMA_ACC64(d), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define STRATA_WGMMA_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define STRATA_WGMMA_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// d[64 x 256] (+)= a[64 x 16] b[256 x 16]^T, both K-major in shared memory; d is overwritten when
// !accumulate.
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t a, uint64_t b, int accumulate = 1) {
#ifdef STRATA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " STRATA_WGMMA_REGS128 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
      : STRATA_WGMMA_ACC128(d)
      : "l"(a), "l"(b), "r"(accumulate));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d[64 x 128] (+)= a[64 x 32] b[128 x 32]^T over F8_E4M3 codes, both K-major in shared memory (the
// only layout FP8 operands have): a 128-byte swizzle row holds 128 codes, so a k32 step advances
// the start address by 32 bytes, as a bf16 k16 step does. d is overwritten when !accumulate.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
#ifdef STRATA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " STRATA_WGMMA_REGS64 ", %64, %65, p, 1, 1;\n}\n"
      : STRATA_WGMMA_ACC64(d)
      : "l"(a), "l"(b), "r"(accumulate));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d[64 x 64] (+)= a[64 x 16] b[64 x 16]^T, both K-major in shared memory; d is overwritten when
// !accumulate.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate = 1) {
#ifdef STRATA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d[64 x 128] += a[64 x 16] b[16 x 128], a from registers (the mma.sync m16n8k16 A fragment of
// rows 16 w .. 16 w + 15 in warp w of the warpgroup), b MN-major in shared memory (transposed), 2
// column blocks of 64 at the descriptor's leading byte offset.
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
#ifdef STRATA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " STRATA_WGMMA_REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : STRATA_WGMMA_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

// d[64 x 256] += a[64 x 16] b[16 x 256], a from registers as in wgmma_m64n128k16_rs_tb, b MN-major in
// shared memory (transposed), 4 column blocks of 64 at the descriptor's leading byte offset.
__device__ __forceinline__ void wgmma_m64n256k16_rs_tb(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
#ifdef STRATA_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " STRATA_WGMMA_REGS128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : STRATA_WGMMA_ACC128(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

}  // namespace strata::ops::cuda
