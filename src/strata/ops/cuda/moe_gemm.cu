// CUDA: the grouped expert GEMM. Each block takes one tile of up to 64 permuted rows of one
// expert and 64 output columns, streams K in steps of 32 through two cp.async stages, and
// multiplies with bf16 WMMA (fp32 accumulate); four warps own 16 rows each. For gate_up the 64
// columns are 32 gate and the matching 32 up rows of the weight, so SiLU-mul fits the epilogue.
#include "strata/ops/cuda/moe_gemm.cuh"

#include <mma.h>

namespace strata::ops::cuda {
namespace {

constexpr int kBn = 64, kBk = 32, kLd = kBk + 8, kLdC = kBn + 4;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }

template <bool kGateUp>
__global__ void __launch_bounds__(128) grouped_gemm_kernel(const bf16* __restrict__ a, const int32_t* gather,
                                                           const bf16* __restrict__ w, MoeTiles tiles, int64_t k,
                                                           int64_t n, bf16* out) {
  pdl_begin();
  using namespace nvcuda;
  __shared__ __align__(128) bf16 as[2][kMoeBm * kLd];
  __shared__ __align__(128) bf16 bs[2][kBn * kLd];
  __shared__ __align__(128) float cs[kMoeBm * kLdC];
  const int tile = blockIdx.x;
  if (tile >= *tiles.count) return;
  const int64_t e = tiles.expert[tile];
  const int row0 = tiles.row0[tile], rows = tiles.rows[tile];
  const int nt = blockIdx.y, tid = threadIdx.x, warp = tid >> 5;
  const bf16* we = w + e * (kGateUp ? 2 * n : n) * k;

  // Each thread moves two 16-byte vectors of A and two of B per stage.
  const bf16* a_src[2];
  const bf16* b_src[2];
  bool a_ok[2];
  int s_off[2];
  for (int i = 0; i < 2; ++i) {
    const int v = tid + i * 128, r = v / 4, c = v % 4;
    s_off[i] = r * kLd + c * 8;
    a_ok[i] = r < rows;
    const int64_t arow = a_ok[i] ? (kGateUp ? gather[row0 + r] : row0 + r) : 0;
    a_src[i] = a + arow * k + c * 8;
    const int64_t wrow = kGateUp ? (r < 32 ? nt * 32 + r : n + nt * 32 + (r - 32)) : int64_t(nt) * 64 + r;
    b_src[i] = we + wrow * k + c * 8;
  }
  auto load = [&](int stage, int64_t k0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      cp_async16(&as[stage][s_off[i]], a_src[i] + k0, a_ok[i]);
      cp_async16(&bs[stage][s_off[i]], b_src[i] + k0, true);
    }
  };
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.f);
  load(0, 0);
  cp_commit();
  int cur = 0;
  for (int64_t k0 = 0; k0 < k; k0 += kBk) {
    if (k0 + kBk < k) load(cur ^ 1, k0 + kBk);
    cp_commit();
    cp_wait_one();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, &as[cur][warp * 16 * kLd + kk * 16], kLd);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, &bs[cur][j * 16 * kLd + kk * 16], kLd);
        wmma::mma_sync(acc[j], fa, fb, acc[j]);
      }
    }
    __syncthreads();
    cur ^= 1;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    wmma::store_matrix_sync(&cs[warp * 16 * kLdC + j * 16], acc[j], kLdC, wmma::mem_row_major);
  }
  __syncthreads();
  if (kGateUp) {
    for (int idx = tid; idx < kMoeBm * 32; idx += 128) {
      const int r = idx / 32, c = idx % 32;
      if (r < rows) {
        const float g = cs[r * kLdC + c], u = cs[r * kLdC + 32 + c];
        out[int64_t(row0 + r) * n + nt * 32 + c] = f2bf(silu_f(g) * u);
      }
    }
  } else {
    for (int idx = tid; idx < kMoeBm * kBn; idx += 128) {
      const int r = idx / kBn, c = idx % kBn;
      if (r < rows) out[int64_t(row0 + r) * n + nt * kBn + c] = f2bf(cs[r * kLdC + c]);
    }
  }
}

}  // namespace

void moe_grouped_gemm(const bf16* a, const int32_t* gather, const bf16* w, const MoeTiles& tiles,
                      unsigned max_tiles, int64_t k, int64_t n, bool gate_up, bf16* out) {
  if (gate_up) {
    launch_pdl(grouped_gemm_kernel<true>, dim3(max_tiles, unsigned(n / 32)), 128, 0, a, gather, w, tiles, k, n, out);
  } else {
    launch_pdl(grouped_gemm_kernel<false>, dim3(max_tiles, unsigned(n / kBn)), 128, 0, a, gather, w, tiles, k, n,
                                                                                        out);
  }
  check_launch(gate_up ? "moe_grouped_gemm_gate_up" : "moe_grouped_gemm_down");
}

}  // namespace strata::ops::cuda
