// CUDA: the chunked gated delta rule on tensor cores, for key and value head dims of 128 (every
// Qwen3.5 and Qwen3-Next shape). The same two passes as gdn_chunked.cu's general kernels (see
// there for the algebra), with its own, smaller workspace (TcWs):
//  1. prep, parallel over (chunk, value head), 4 blocks an SM, fp16 mma.sync (m16n8k16, fp32
//     accumulation) over fp16 operands in shared memory: l2-normalised q and k, the decay cumsum,
//     K K^T and Q K^T, the unit lower-triangular inverse T = (I + A)^-1 (its two diagonal 32x32
//     blocks by forward substitution with each column in one thread's registers, then the
//     off-diagonal block by one fp32 merge), then U = T (beta v) and W = T (beta k e^cum). It
//     writes W and attn as fp16, U as fp32, the row factors e^cum and e^(last - cum), and, once
//     per key head, the normalised q and k as fp16.
//  2. scan, sequential over a sequence's chunks, parallel over (value head, 32 state columns),
//     fp16 mma.sync (m16n8k16, fp32 accumulation), 16 warps: 8 carry the state slice in
//     registers (fp32, with an fp16 copy of S^T in shared memory for the products) and 8 compute
//     the previous chunk's outputs meanwhile; each chunk's operands arrive by cp.async during
//     the chunk before.
// fp16 has TF32's 10-bit mantissa, so the fp16 products round as TF32 ones would; its range
// holds every operand (|q|, |k| <= 1, e^cum <= 1, attn <= |q||k|, T's entries, W, vnew and the
// state of v's magnitude; values past 65504 would need a state that large). Values below fp16's
// normal range (6.1e-5, e.g. beta k e^cum after strong decay) keep an absolute error of 3e-8,
// the same as W's own fp16 store, since W's row r scales with e^cum[r] <= e^cum[l] for l <= r.
// Operand layouts in shared memory are padded so that every fragment load is free of bank
// conflicts: fp16 operands use a row stride of 8 mod 64 halves (16 mod 128 bytes), the fp32 A
// of the substitution a stride of 4 mod 32 floats.
#include <cuda_fp16.h>

#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/gdn_internal.h"
#include "strata/ops/cuda/mma_fragment.cuh"

namespace strata::ops::cuda {
namespace {

constexpr int kC = kGdnChunk;  // tokens a chunk
constexpr int kD = 128;        // key and value head dim of this path
constexpr int kBv = 32;        // state columns a scan block
constexpr int kLdC = kC + 4;   // fp32 rows 64 wide (the prep's A)
constexpr int kLdH = kD + 8;   // fp16 rows 128 wide (272 B)
constexpr int kLdHc = kC + 8;  // fp16 rows 64 wide (144 B)

// The workspace, in bytes. One (chunk, value head): W fp16 [64][128], U fp32 [64][128], attn
// fp16 [64][64] (Q K^T with the decays, lower triangular), then the row factors as fp32: e^cum
// [64], e^(last - cum) [64] (0 past the chunk's end), e^last, padding. After all of those, one
// (chunk, key head): q and k l2-normalised (q times dk^-1/2), fp16 [64][128] each.
struct TcWs {
  static constexpr int kW = 0;
  static constexpr int kU = kW + kC * kD * 2;
  static constexpr int kAttn = kU + kC * kD * 4;
  static constexpr int kRows = kAttn + kC * kC * 2;
  static constexpr int kRowFloats = 2 * kC + 4;
  static constexpr int kBytes = kRows + kRowFloats * 4;  // a (chunk, value head), 16-byte aligned
  static constexpr int kQkBytes = 2 * kC * kD * 2;       // a (chunk, key head)
  // Byte offsets in the workspace of (chunk, value head h) and of (chunk, key head kh).
  __device__ static int64_t part(int chunk, int h, int hv) { return (int64_t(chunk) * hv + h) * kBytes; }
  __device__ static int64_t qk(int num_chunks, int chunk, int kh, int hk, int hv) {
    return int64_t(num_chunks) * hv * kBytes + (int64_t(chunk) * hk + kh) * kQkBytes;
  }
};
static_assert(TcWs::kBytes % 16 == 0);

// d += a b for one m16n8k16 tile, fp16 operands, fp32 accumulation. PTX fragment layouts (g =
// lane / 4, t = lane % 4; each register holds two halves, columns 2t and 2t + 1 of A, rows 2t
// and 2t + 1 of B): a0..a3 at (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8); b0, b1 at
// (k 2t, n g), (k 2t + 8, n g); d0..d3 at (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp16 fragments by ldmatrix (mma_fragment.cuh): a 16-byte ldmatrix row is eight halves, and lane
// l receives row l / 4, halves 2 (l % 4) and 2 (l % 4) + 1 of each 8x8 tile (with .trans, of
// the transposed tile), which is the fragment layout above.
// The A fragment (rows m0.., cols k0..) of a row-major matrix (a0..a3: rows +0/+8 at cols +0,
// then at cols +8).
__device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], const __half* p, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
  ldmatrix_x4(a, p + (m0 + (lane & 7) + (mi & 1) * 8) * ld + k0 + (mi >> 1) * 8);
}
// The A fragment of M^T for a row-major M: A(r, c) = p[c * ld + r].
__device__ __forceinline__ void ldsm_a_t(uint32_t (&a)[4], const __half* p, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
  ldmatrix_x4_trans(a, p + (k0 + (lane & 7) + (mi >> 1) * 8) * ld + m0 + (mi & 1) * 8);
}
// B fragments for column tiles n0 and n0 + 8 at k0.., from B^T stored row-major (p[n * ld + k]):
// b[0], b[1] for tile n0, b[2], b[3] for tile n0 + 8.
__device__ __forceinline__ void ldsm_b2(uint32_t (&b)[4], const __half* p, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
  ldmatrix_x4(b, p + (n0 + (lane & 7) + (mi >> 1) * 8) * ld + k0 + (mi & 1) * 8);
}
// The same fragments from B itself stored row-major (p[k * ld + n]), by ldmatrix.trans: tile mi
// holds rows k0 + 8 (mi & 1).. and columns n0 + 8 (mi >> 1)..; transposed, lane l receives
// B(k0 + 2 (l % 4) + {0, 1}, n0 + l / 4) of it, which is b0 (tiles 0, 2) or b1 (tiles 1, 3).
__device__ __forceinline__ void ldsm_b2_t(uint32_t (&b)[4], const __half* p, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
  ldmatrix_x4_trans(b, p + (k0 + (lane & 7) + (mi & 1) * 8) * ld + n0 + (mi >> 1) * 8);
}

// ---- prep ----

// Eight floats as fp16, rounded to nearest.
__device__ __forceinline__ uint4 pack_half8(const float* f) {
  uint4 u;
  uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return u;
}
// Eight fp16 values (one 16-byte vector) times f, rounded to fp16.
__device__ __forceinline__ uint4 scale_half8(uint4 u, float f) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
  float x[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(h[i]);
    x[2 * i] = t.x * f;
    x[2 * i + 1] = t.y * f;
  }
  return pack_half8(x);
}

constexpr int kPrepThreads = 256;
constexpr int kRowVecs = kD / 8;  // 16-byte vectors in a 128-wide 16-bit row

// The prep's shared memory (byte offsets): two 16-bit operand regions [64][kLdH]: R1 holds raw
// bf16 q, then normalised q as fp16, then raw bf16 v, then beta v as fp16; R2 raw bf16 k, then
// normalised k, then beta k e^cum, both fp16. A = beta (K K^T o decay), fp32 [64][kLdC], and T as
// fp16 [64][kLdHc] over it once the inverse is complete (T's diagonal blocks and the merge's X
// pass through A's place as fp32 first). Then fp32 rows: the decay cumsum,
// beta, beta e^cum.
struct PrepSmem {
  static constexpr int kMat = kC * kLdH * 2;
  static constexpr int kR1 = 0, kR2 = kMat, kA = 2 * kMat, kCum = kA + kC * kLdC * 4, kBeta = kCum + kC * 4,
                       kBk = kBeta + kC * 4;
  static constexpr size_t kBytes = kBk + kC * 4;
};
static_assert(kC * kLdHc * 2 <= kC * kLdC * 4, "T fits over A");

// Per (chunk, value head h), 8 warps:
//  1. raw q, k rows by cp.async (all of a thread's copies in flight at once), the cumsum, beta;
//  2. l2 norms in place, fp16 (the workspace's q/k copy from the same pass);
//  3. K K^T and Q K^T: A into shared memory, attn to the workspace;
//  4. warps 0-1: T's diagonal 32x32 blocks by forward substitution; warps 2-7 meanwhile: v by
//     cp.async into R1, beta k e^cum and beta v in place; then all warps: T's lower-left block,
//     T as fp16;
//  5. U = T (beta v), then W = T (beta k e^cum), to the workspace.
__global__ void __launch_bounds__(kPrepThreads, 4) gdn_prep_tc_kernel(const bf16* q, const bf16* k, const bf16* v,
                                                                      const float* g, const float* beta,
                                                                      DeviceBatch b, const int32_t* chunks,
                                                                      int num_chunks, int hk, int hv, char* ws) {
  pdl_begin();
  extern __shared__ __align__(16) char smem[];
  __half* r1 = reinterpret_cast<__half*>(smem + PrepSmem::kR1);
  __half* r2 = reinterpret_cast<__half*>(smem + PrepSmem::kR2);
  float* am = reinterpret_cast<float*>(smem + PrepSmem::kA);
  __half* tm = reinterpret_cast<__half*>(smem + PrepSmem::kA);
  float* cum = reinterpret_cast<float*>(smem + PrepSmem::kCum);
  float* bet = reinterpret_cast<float*>(smem + PrepSmem::kBeta);
  float* bk = reinterpret_cast<float*>(smem + PrepSmem::kBk);

  const int chunk = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int s = chunks[3 * chunk], c0 = chunks[3 * chunk + 1], n = chunks[3 * chunk + 2];
  const int kh = h / (hv / hk);
  const int64_t t0 = int64_t(b.q_start[s]) + c0;
  char* part = ws + TcWs::part(chunk, h, hv);

  // 1. The raw bf16 q and k rows, 8 copies a thread issued at once (rows past n zero-filled, their
  // source clamped to row 0), and one wait; the scalar loads of beta and g overlap them.
  static_assert(kC * kRowVecs % kPrepThreads == 0);
#pragma unroll
  for (int it = 0; it < kC * kRowVecs / kPrepThreads; ++it) {
    const int i = tid + it * kPrepThreads, r = i / kRowVecs, c = (i % kRowVecs) * 8;
    const int64_t src = ((t0 + (r < n ? r : 0)) * hk + kh) * kD + c;
    cp_async16(r1 + r * kLdH + c, q + src, r < n);
    cp_async16(r2 + r * kLdH + c, k + src, r < n);
  }
  cp_commit();
  if (tid < kC) bet[tid] = tid < n ? beta[(t0 + tid) * hv + h] : 0.f;
  if (warp == 0) {  // inclusive cumsum of the log decays, two per lane; rows past n repeat the last
    const float a0 = 2 * lane < n ? g[(t0 + 2 * lane) * hv + h] : 0.f;
    const float a1 = 2 * lane + 1 < n ? g[(t0 + 2 * lane + 1) * hv + h] : 0.f;
    float x = a0 + a1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    cum[2 * lane] = x - a1;
    cum[2 * lane + 1] = x;
  }
  cp_wait<0>();
  __syncthreads();
  if (tid < kC) {  // the row factors, each exp once
    float* o_rows = reinterpret_cast<float*>(part + TcWs::kRows);
    const float ec = expf(cum[tid]), last = cum[n - 1];
    bk[tid] = bet[tid] * ec;
    o_rows[tid] = ec;
    o_rows[kC + tid] = tid < n ? expf(last - cum[tid]) : 0.f;
    if (tid == 0) o_rows[2 * kC] = expf(last);
  }
  // 2. l2 norms in place (HF's l2norm, eps 1e-6 inside the root), half a warp a row, 8 elements a
  // lane: fp32 sums of squares of the bf16 values, the row written back as fp16 (q also times
  // dk^-1/2) and, by the key head's first value head, to the workspace. Rows past n stay 0.
  {
    const bool write_qk = h % (hv / hk) == 0;
    uint4* o_q = reinterpret_cast<uint4*>(ws + TcWs::qk(num_chunks, chunk, kh, hk, hv));
    uint4* o_k = o_q + kC * kRowVecs;
    const int c = (tid & 15) * 8;
#pragma unroll
    for (int it = 0; it < kC / (kPrepThreads / 16); ++it) {
      const int r = (tid >> 4) + it * (kPrepThreads / 16);
      float fq[8], fk[8];
      unpack8(*reinterpret_cast<const uint4*>(r1 + r * kLdH + c), fq);
      unpack8(*reinterpret_cast<const uint4*>(r2 + r * kLdH + c), fk);
      float sq = 0.f, sk = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sq += fq[j] * fq[j];
        sk += fk[j] * fk[j];
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) {  // within the half warp
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
        sk += __shfl_xor_sync(0xffffffffu, sk, o);
      }
      const float iq = 1.f / sqrtf(sq + 1e-6f), ik = 1.f / sqrtf(sk + 1e-6f), scale = rsqrtf(float(kD));
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        fq[j] = (fq[j] * iq) * scale;
        fk[j] *= ik;
      }
      const uint4 hq = pack_half8(fq), hk8 = pack_half8(fk);
      *reinterpret_cast<uint4*>(r1 + r * kLdH + c) = hq;
      *reinterpret_cast<uint4*>(r2 + r * kLdH + c) = hk8;
      if (write_qk) {
        o_q[r * kRowVecs + c / 8] = hq;
        o_k[r * kRowVecs + c / 8] = hk8;
      }
    }
  }
  __syncthreads();
  // 3. K K^T and Q K^T: warp w takes rows 16 (w / 2).. and columns 32 (w % 2)..; tiles wholly
  // above the diagonal are zero. A = beta (K K^T o decay), strictly lower, into am; attn = Q K^T
  // o decay, lower, to the workspace (decay = e^(cum[r] - cum[c]), 0 past n).
  {
    const int gq = lane >> 2, tq = lane & 3;
    __half* o_attn = reinterpret_cast<__half*>(part + TcWs::kAttn);
    const int m0 = 16 * (warp >> 1), n0 = 32 * (warp & 1);
    float kk[4][4] = {}, qk[4][4] = {};
    if (n0 <= m0 + 15) {
#pragma unroll 2
      for (int k0 = 0; k0 < kD; k0 += 16) {
        uint32_t ak[4], aq[4], b01[4], b23[4];
        ldsm_a(ak, r2, kLdH, m0, k0);
        ldsm_a(aq, r1, kLdH, m0, k0);
        ldsm_b2(b01, r2, kLdH, n0, k0);
        ldsm_b2(b23, r2, kLdH, n0 + 16, k0);
        mma_f16(kk[0], ak, b01[0], b01[1]);
        mma_f16(kk[1], ak, b01[2], b01[3]);
        mma_f16(kk[2], ak, b23[0], b23[1]);
        mma_f16(kk[3], ak, b23[2], b23[3]);
        mma_f16(qk[0], aq, b01[0], b01[1]);
        mma_f16(qk[1], aq, b01[2], b01[3]);
        mma_f16(qk[2], aq, b23[0], b23[1]);
        mma_f16(qk[3], aq, b23[2], b23[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; e += 2) {  // columns c and c + 1 of row r
        const int r = m0 + gq + (e >> 1) * 8, c = n0 + 8 * j + 2 * tq;
        float a[2], at[2];
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const bool live = r < n && c + x <= r;
          const float decay = live ? expf(cum[r] - cum[c + x]) : 0.f;
          a[x] = c + x < r ? bet[r] * kk[j][e + x] * decay : 0.f;
          at[x] = live ? qk[j][e + x] * decay : 0.f;
        }
        *reinterpret_cast<float2*>(am + r * kLdC + c) = make_float2(a[0], a[1]);
        *reinterpret_cast<__half2*>(o_attn + r * kC + c) = __floats2half2_rn(at[0], at[1]);
      }
    }
  }
  __syncthreads();  // A is complete; q (R1) is dead
  if (warp < 2) {
    // 4. The diagonal 32x32 blocks of T = (I + A)^-1 by forward substitution, warp w the block
    // at rows and columns d = 32 w.., its column j = lane in registers: T[i][j] = -sum_{l<i} A[i][l]
    // T[l][j] for j < i (T[j][j] = 1, T[l][j] = 0 above the diagonal), indices within the block.
    // The rows of A are read as float4 broadcasts; even l sum into acc0, odd l into acc1, in
    // order. Each warp reads only its own block of A, so it writes that block of T (fp32) over
    // it after a __syncwarp.
    const int d = 32 * warp, j = lane;
    float col[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      float acc0 = 0.f, acc1 = 0.f;
      const float4* arow = reinterpret_cast<const float4*>(am + (d + i) * kLdC + d);
#pragma unroll
      for (int l = 0; l < i; l += 4) {
        const float4 a = arow[l / 4];
        acc0 += a.x * col[l];
        if (l + 1 < i) acc1 += a.y * col[l + 1];
        if (l + 2 < i) acc0 += a.z * col[l + 2];
        if (l + 3 < i) acc1 += a.w * col[l + 3];
      }
      col[i] = i > j ? -(acc0 + acc1) : (i == j ? 1.f : 0.f);
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) am[(d + i) * kLdC + d + j] = col[i];
  } else {
    // 4'. Meanwhile: v into R1, beta k e^cum in place in R2 while v loads, then beta v in place.
    // Each thread converts the v vectors it copied itself, so its own wait suffices.
    const int t = tid - 64;
    constexpr int kThreads = kPrepThreads - 64;
    for (int i = t; i < kC * kRowVecs; i += kThreads) {
      const int r = i / kRowVecs, c = (i % kRowVecs) * 8;
      cp_async16(r1 + r * kLdH + c, v + ((t0 + (r < n ? r : 0)) * hv + h) * kD + c, r < n);
    }
    cp_commit();
    for (int i = t; i < kC * kRowVecs; i += kThreads) {
      const int r = i / kRowVecs, c = (i % kRowVecs) * 8;
      uint4* p = reinterpret_cast<uint4*>(r2 + r * kLdH + c);
      *p = scale_half8(*p, bk[r]);
    }
    cp_wait<0>();
    for (int i = t; i < kC * kRowVecs; i += kThreads) {
      const int r = i / kRowVecs, c = (i % kRowVecs) * 8;
      uint4* p = reinterpret_cast<uint4*>(r1 + r * kLdH + c);
      float fv[8];
      unpack8(*p, fv);
      const float f = bet[r];
#pragma unroll
      for (int e = 0; e < 8; ++e) fv[e] *= f;
      *p = pack_half8(fv);
    }
  }
  __syncthreads();
  // 4''. The merge, all warps: T10 = -T11 A10 T00 in fp32, as X = A10 T00 over A10, then T10 =
  // -T11 X. Thread (w, lane) computes rows 4 w.. 4 w + 3 of the lower-left block, column lane:
  // the left operand's 4 rows are float4 broadcasts, the right operand's column is read
  // conflict-free across the lanes. Then T goes over am as fp16 (every thread first holds its
  // 12 values of T00, T10 and T11, as the fp16 rows overlap the fp32 ones).
  {
    const int r0 = 4 * warp, c = lane;
    // x[q] += L[r0 + q][l] R[l][c] for l < 32; L, R at rows and columns offsets in am.
    auto product = [&](float (&x)[4], int lrow, int lcol, int rrow, int rcol) {
#pragma unroll
      for (int l = 0; l < 32; l += 4) {
        float rv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) rv[e] = am[(rrow + l + e) * kLdC + rcol + c];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 lv = *reinterpret_cast<const float4*>(am + (lrow + r0 + q) * kLdC + lcol + l);
          x[q] += lv.x * rv[0];
          x[q] += lv.y * rv[1];
          x[q] += lv.z * rv[2];
          x[q] += lv.w * rv[3];
        }
      }
    };
    float x[4] = {};
    product(x, 32, 0, 0, 0);  // A10 T00
    __syncthreads();
#pragma unroll
    for (int q = 0; q < 4; ++q) am[(32 + r0 + q) * kLdC + c] = x[q];
    __syncthreads();
    float y[4] = {};
    product(y, 32, 32, 32, 0);  // T11 X
    float t00[4], t11[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      t00[q] = am[(r0 + q) * kLdC + c];
      t11[q] = am[(32 + r0 + q) * kLdC + 32 + c];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      __half* top = tm + (r0 + q) * kLdHc;
      __half* bottom = tm + (32 + r0 + q) * kLdHc;
      top[c] = __float2half_rn(t00[q]);
      top[32 + c] = __float2half_rn(0.f);
      bottom[c] = __float2half_rn(-y[q]);
      bottom[32 + c] = __float2half_rn(t11[q]);
    }
  }
  __syncthreads();
  // 5. U = T (beta v), then W = T (beta k e^cum): warp w takes columns 16 w.. of all 64 rows. B
  // stays row-major [token][column], read by ldmatrix.trans, its fragments for the warp's
  // columns loaded once (16 registers); then row tile i, needing k < 16 (i + 1) only since T is
  // lower triangular (10 of the 16 tile products), is computed and stored before the next, so
  // only 8 accumulators are live.
  {
    const int n0 = 16 * warp, gq = lane >> 2, tq = lane & 3;
    auto product = [&](const __half* bs, auto store) {
      uint32_t bb[4][4];
#pragma unroll
      for (int kt = 0; kt < 4; ++kt) ldsm_b2_t(bb[kt], bs, kLdH, n0, 16 * kt);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float acc[2][4] = {};
#pragma unroll
        for (int kt = 0; kt <= i; ++kt) {
          uint32_t a[4];
          ldsm_a(a, tm, kLdHc, 16 * i, 16 * kt);
          mma_f16(acc[0], a, bb[kt][0], bb[kt][1]);
          mma_f16(acc[1], a, bb[kt][2], bb[kt][3]);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) store(16 * i + gq, n0 + 8 * j + 2 * tq, acc[j]);  // rows r and r + 8
      }
    };
    float* o_u = reinterpret_cast<float*>(part + TcWs::kU);
    product(r1, [&](int r, int c, const float(&d)[4]) {
      *reinterpret_cast<float2*>(o_u + r * kD + c) = make_float2(d[0], d[1]);
      *reinterpret_cast<float2*>(o_u + (r + 8) * kD + c) = make_float2(d[2], d[3]);
    });
    // A fence for the scheduler: without it ptxas sinks U's stores below W's fragment loads and
    // spills (64 bytes at 64 registers).
    __syncwarp();
    __half* o_w = reinterpret_cast<__half*>(part + TcWs::kW);
    product(r2, [&](int r, int c, const float(&d)[4]) {
      *reinterpret_cast<__half2*>(o_w + r * kD + c) = __floats2half2_rn(d[0], d[1]);
      *reinterpret_cast<__half2*>(o_w + (r + 8) * kD + c) = __floats2half2_rn(d[2], d[3]);
    });
  }
}

// ---- scan ----

// acc += A[m0.., :k_end] B[:k_end, n0..n0 + 16] for one warp (two 8-column tiles): A row-major
// (stride lda), B stored transposed (stride ldb).
__device__ __forceinline__ void mma_16x16(float (&acc)[2][4], const __half* a_s, int lda, const __half* bt_s,
                                          int ldb, int m0, int n0, int k_end) {
#pragma unroll 4
  for (int k0 = 0; k0 < k_end; k0 += 16) {
    uint32_t a[4], bb[4];
    ldsm_a(a, a_s, lda, m0, k0);
    ldsm_b2(bb, bt_s, ldb, n0, k0);
    mma_f16(acc[0], a, bb[0], bb[1]);
    mma_f16(acc[1], a, bb[2], bb[3]);
  }
}

constexpr int kLdU = kBv + 4;  // fp32 rows of the U slice

// The scan's shared memory (byte offsets). Chunk ci's W, U and k sit in slot ci % 2; its q,
// attn and row factors in slot ci % 3, since the output warps read them one chunk later; S^T in
// slot ci % 2 holds the state entering chunk ci, vnew^T likewise.
struct ScanSmem {
  static constexpr int kMat = kC * kLdH * 2;    // a [64][kLdH] fp16 matrix (W, q or k)
  static constexpr int kAttnB = kC * kLdHc * 2; // attn [64][kLdHc] fp16
  static constexpr int kUB = kC * kLdU * 4;     // U's 32 columns, fp32 [64][kLdU]
  static constexpr int kRowsB = TcWs::kRowFloats * 4;
  static constexpr int kVtB = kBv * kLdHc * 2;  // a [kBv][kLdHc] fp16 transpose of vnew
  static constexpr int kStB = kBv * kLdH * 2;   // S^T [kBv][kLdH] fp16
  static constexpr int kW = 0, kK = kW + 2 * kMat, kU = kK + 2 * kMat, kQ = kU + 2 * kUB, kAttn = kQ + 3 * kMat,
                       kRows = kAttn + 3 * kAttnB, kVt = kRows + 3 * kRowsB, kVd = kVt + 2 * kVtB,
                       kSt = kVd + kVtB;
  static constexpr size_t kBytes = kSt + 2 * kStB;
};
static_assert(ScanSmem::kRowsB % 16 == 0 && ScanSmem::kUB % 16 == 0 && ScanSmem::kAttnB % 16 == 0);

// 64 rows of kRowBytes from global memory (row stride gld bytes) to shared memory (stride ld).
template <int kRowBytes>
__device__ __forceinline__ void copy_rows(char* dst, int ld, const char* src, int gld) {
  constexpr int kVecs = kRowBytes / 16;
  for (int i = threadIdx.x; i < kC * kVecs; i += blockDim.x) {
    const int r = i / kVecs, c = (i % kVecs) * 16;
    cp_async16(dst + r * ld + c, src + int64_t(r) * gld + c);
  }
}

constexpr int kScanThreads = 512;  // warps 0-7 carry the state, warps 8-15 write the outputs

// Each iteration ci has two phases between barriers. The state warps run chunk ci: (1) vnew =
// U - W S, then (3) S = S e^last + k^T (e^(last - cum) vnew), written to the other S^T slot.
// The output warps run chunk ci - 1 meanwhile, off the state's critical path: (2a) e^cum (q S),
// then (2b) + attn vnew, stored. Chunk ci + 1's operands load during iteration ci.
__global__ void __launch_bounds__(kScanThreads, 1) gdn_scan_tc_kernel(const char* ws, const int32_t* seqinfo,
                                                                      const int32_t* chunks, int num_chunks,
                                                                      void* state, bool s32, DeviceBatch b, int hk,
                                                                      int hv, bf16* out) {
  pdl_begin();
  extern __shared__ __align__(16) char smem[];
  __half* vd = reinterpret_cast<__half*>(smem + ScanSmem::kVd);
  auto st_t = [&](int ci) { return reinterpret_cast<__half*>(smem + ScanSmem::kSt + (ci & 1) * ScanSmem::kStB); };
  auto vt = [&](int ci) { return reinterpret_cast<__half*>(smem + ScanSmem::kVt + (ci & 1) * ScanSmem::kVtB); };

  const int e = blockIdx.x, h = blockIdx.y, col0 = blockIdx.z * kBv, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const bool state_warp = warp < 8;
  const int s = seqinfo[3 * e], first = seqinfo[3 * e + 1], count = seqinfo[3 * e + 2];
  const int kh = h / (hv / hk);
  const int slot = b.slot[s];
  const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
  const int64_t state0 = (int64_t(slot) * hv + h) * kD * kD + col0;  // padding rows (slot < 0): no state

  // The state slice in step 3's accumulator layout: state warp w has rows 16 w.., all 4 column
  // tiles.
  float st[4][4] = {};
  const int sr = 16 * (warp & 7) + gq;
  if (state_warp) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int r = sr + (x >> 1) * 8, c = 8 * j + 2 * tq + (x & 1);
        st[j][x] = has_state ? ldf(state, s32, state0 + int64_t(r) * kD + c) : 0.f;
        st_t(0)[c * kLdH + r] = __float2half_rn(st[j][x]);
      }
    }
  }
  auto load = [&](int ci) {
    if (ci < count) {
      const char* part = ws + TcWs::part(first + ci, h, hv);
      const char* qk = ws + TcWs::qk(num_chunks, first + ci, kh, hk, hv);
      const int s2 = ci & 1, s3 = ci % 3;
      copy_rows<kD * 2>(smem + ScanSmem::kW + s2 * ScanSmem::kMat, kLdH * 2, part + TcWs::kW, kD * 2);
      copy_rows<kD * 2>(smem + ScanSmem::kK + s2 * ScanSmem::kMat, kLdH * 2, qk + kC * kD * 2, kD * 2);
      copy_rows<kBv * 4>(smem + ScanSmem::kU + s2 * ScanSmem::kUB, kLdU * 4, part + TcWs::kU + col0 * 4, kD * 4);
      copy_rows<kD * 2>(smem + ScanSmem::kQ + s3 * ScanSmem::kMat, kLdH * 2, qk, kD * 2);
      copy_rows<kC * 2>(smem + ScanSmem::kAttn + s3 * ScanSmem::kAttnB, kLdHc * 2, part + TcWs::kAttn, kC * 2);
      for (int i = tid; i < TcWs::kRowFloats / 4; i += blockDim.x) {
        cp_async16(smem + ScanSmem::kRows + s3 * ScanSmem::kRowsB + 16 * i, part + TcWs::kRows + 16 * i);
      }
    }
    cp_commit();
  };
  load(0);
  // Steps 1 and 2: (state or output) warp w takes token rows 16 (w / 2).. and state columns
  // 16 (w % 2)...
  const int m0 = 16 * ((warp & 7) >> 1), n0 = 16 * (warp & 1);
  for (int ci = 0; ci <= count; ++ci) {
    cp_wait<0>();
    __syncthreads();  // chunk ci's operands and S^T(ci) are in; every read of chunk ci - 2 is done
    load(ci + 1);     // into slots last read for chunk ci - 1 (W, U, k) or ci - 2 (q, attn, rows)
    const int co = ci - 1;  // the output warps' chunk
    const int s3 = (state_warp ? ci : ci + 2) % 3;  // chunk ci's or chunk co's slot
    const float* eq = reinterpret_cast<const float*>(smem + ScanSmem::kRows + s3 * ScanSmem::kRowsB);
    const float* ek = eq + kC;
    float acc[2][4] = {};
    if (state_warp && ci < count) {
      // 1. vnew = U - W S, kept as vnew^T and (e^(last - cum) vnew)^T.
      const __half* ws_w = reinterpret_cast<const __half*>(smem + ScanSmem::kW + (ci & 1) * ScanSmem::kMat);
      const float* ws_u = reinterpret_cast<const float*>(smem + ScanSmem::kU + (ci & 1) * ScanSmem::kUB);
      mma_16x16(acc, ws_w, kLdH, st_t(ci), kLdH, m0, n0, kD);
      __half* v_t = vt(ci);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int r = m0 + gq + (x >> 1) * 8, c = n0 + 8 * j + 2 * tq + (x & 1);
          const float vn = ws_u[r * kLdU + c] - acc[j][x];
          v_t[c * kLdHc + r] = __float2half_rn(vn);
          vd[c * kLdHc + r] = __float2half_rn(vn * ek[r]);
        }
      }
    } else if (!state_warp && co >= 0) {
      // 2a. e^cum (q S) for chunk co, with S entering it.
      const __half* ws_q = reinterpret_cast<const __half*>(smem + ScanSmem::kQ + s3 * ScanSmem::kMat);
      mma_16x16(acc, ws_q, kLdH, st_t(co), kLdH, m0, n0, kD);
      const float e_lo = eq[m0 + gq], e_hi = eq[m0 + gq + 8];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        acc[j][0] *= e_lo;
        acc[j][1] *= e_lo;
        acc[j][2] *= e_hi;
        acc[j][3] *= e_hi;
      }
    }
    __syncthreads();  // vnew of chunk ci is in; S^T(co) is read
    if (state_warp && ci < count) {
      // 3. S = S e^last + k^T (e^(last - cum) vnew), into S^T(ci + 1) (S^T(ci - 1)'s slot,
      // read by the output warps before the barrier).
      const __half* ws_k = reinterpret_cast<const __half*>(smem + ScanSmem::kK + (ci & 1) * ScanSmem::kMat);
      const float decay = ek[kC];  // e^last
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int x = 0; x < 4; ++x) st[j][x] *= decay;
      }
#pragma unroll
      for (int k0 = 0; k0 < kC; k0 += 16) {
        uint32_t a[4], b01[4], b23[4];
        ldsm_a_t(a, ws_k, kLdH, 16 * warp, k0);
        ldsm_b2(b01, vd, kLdHc, 0, k0);
        ldsm_b2(b23, vd, kLdHc, 16, k0);
        mma_f16(st[0], a, b01[0], b01[1]);
        mma_f16(st[1], a, b01[2], b01[3]);
        mma_f16(st[2], a, b23[0], b23[1]);
        mma_f16(st[3], a, b23[2], b23[3]);
      }
      __half* next = st_t(ci + 1);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int x = 0; x < 4; ++x) next[(8 * j + 2 * tq + (x & 1)) * kLdH + sr + (x >> 1) * 8] = __float2half_rn(st[j][x]);
      }
    } else if (!state_warp && co >= 0) {
      // 2b. out = e^cum (q S) + attn vnew (attn is lower triangular: k < m0 + 16).
      const __half* ws_at = reinterpret_cast<const __half*>(smem + ScanSmem::kAttn + s3 * ScanSmem::kAttnB);
      mma_16x16(acc, ws_at, kLdHc, vt(co), kLdHc, m0, n0, m0 + 16);
      const int chunk = first + co;
      const int c0 = chunks[3 * chunk + 1], n = chunks[3 * chunk + 2];
      const int64_t t0 = int64_t(b.q_start[s]) + c0;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = m0 + gq + half * 8, c = col0 + n0 + 8 * j + 2 * tq;
          if (r < n) {
            *reinterpret_cast<__nv_bfloat162*>(out + ((t0 + r) * hv + h) * kD + c) =
                __floats2bfloat162_rn(acc[j][2 * half], acc[j][2 * half + 1]);
          }
        }
      }
    }
  }
  if (state_warp && slot >= 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        stf(state, s32, state0 + int64_t(sr + (x >> 1) * 8) * kD + 8 * j + 2 * tq + (x & 1), st[j][x]);  // rounded once
      }
    }
  }
}

}  // namespace

bool gdn_chunked_tc_fits(int dk, int dv) { return dk == kD && dv == kD; }

int64_t gdn_chunked_tc_ws_bytes(int num_chunks, int hk, int hv) {
  return int64_t(num_chunks) * (int64_t(hv) * TcWs::kBytes + int64_t(hk) * TcWs::kQkBytes);
}

void gdn_chunked_tc(const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta, void* state,
                    bool s32, const DeviceBatch& db, const int32_t* chunks, int num_chunks, const int32_t* seqinfo,
                    int num_seqs, int hk, int hv, void* ws, bf16* out) {
  static const bool kAttrs = [] {
    allow_shared_memory(reinterpret_cast<const void*>(gdn_prep_tc_kernel), PrepSmem::kBytes, "gated_delta_rule (prep)");
    allow_shared_memory(reinterpret_cast<const void*>(gdn_scan_tc_kernel), ScanSmem::kBytes, "gated_delta_rule (scan)");
    return true;
  }();
  (void)kAttrs;
  char* w = static_cast<char*>(ws);
  launch_pdl(gdn_prep_tc_kernel, dim3(unsigned(num_chunks), unsigned(hv)), kPrepThreads, PrepSmem::kBytes, q, k, v, g, beta, db,
             chunks, num_chunks, hk, hv, w);
  check_launch("gdn_prep_tc");
  launch_pdl(gdn_scan_tc_kernel, dim3(unsigned(num_seqs), unsigned(hv), unsigned(kD / kBv)), kScanThreads,
             ScanSmem::kBytes,
             static_cast<const char*>(w), seqinfo, chunks, num_chunks, state, s32, db, hk, hv, out);
  check_launch("gdn_scan_tc");
}

}  // namespace strata::ops::cuda
