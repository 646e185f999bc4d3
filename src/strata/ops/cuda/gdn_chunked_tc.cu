// CUDA: the chunked gated delta rule on tensor cores, for key and value head dims of 128 (every
// Qwen3.5 and Qwen3-Next shape). The same two passes and the same workspace as gdn_chunked.cu's
// general kernels (see there for the algebra), with every product a TF32 mma.sync (m16n8k8, fp32
// accumulation) over fp32 operands in shared memory:
//  1. prep, parallel over (chunk, value head), 2 blocks an SM: l2-normalised q and k, the decay
//     cumsum, K K^T and Q K^T, the unit lower-triangular inverse T = (I + A)^-1 by forward
//     substitution with each column of T in one thread's registers (no barriers), then
//     U = T (beta v) and W = T (beta k e^cum);
//  2. scan, sequential over a sequence's chunks, parallel over (value head, 32 state columns):
//     the state slice lives in registers (fp32) with a copy in shared memory for the products;
//     each chunk's W/U, Qe/attn and Kd arrive by cp.async in three groups, each loaded for the
//     next chunk as soon as this chunk's step that reads it is done.
// Operand layouts in shared memory are padded so that every fragment load is free of bank
// conflicts: a row-major A operand (or the transposed B operand) uses a row stride of 4 mod 32
// floats, a row-major B operand (or the transposed A) a stride of 8 mod 32.
#include "strata/ops/cuda/async_copy.cuh"
#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/gdn_internal.h"

namespace strata::ops::cuda {
namespace {

constexpr int kC = kGdnChunk;  // tokens a chunk
constexpr int kD = 128;        // key and value head dim of this path
constexpr int kBv = 32;        // state columns a scan block
constexpr int kLd4 = kD + 4;   // row-major A / transposed B, 128 wide
constexpr int kLd8 = kD + 8;   // row-major B / transposed A, 128 wide
constexpr int kLdC = kC + 4;   // row-major A, 64 wide (T, attn)
constexpr int kLdV = kBv + 8;  // row-major B, 32 wide (S, Vn, U)
constexpr GdnWs kLay(kD, kD);  // the workspace of one (chunk, value head)

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float round_tf32(float x) { return __uint_as_float(tf32(x)); }

// d += a b for one m16n8k8 tile (PTX fragment layouts: g = lane / 4, t = lane % 4; a0..a3 at
// (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); b0, b1 at (k t, n g), (k t + 4, n g); d0..d3 at
// (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A (rows m0.., cols k0..) of a row-major matrix p[r * ld + c].
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const float* p, int ld, int m0, int k0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  a[0] = tf32(p[(m0 + g) * ld + k0 + t]);
  a[1] = tf32(p[(m0 + g + 8) * ld + k0 + t]);
  a[2] = tf32(p[(m0 + g) * ld + k0 + t + 4]);
  a[3] = tf32(p[(m0 + g + 8) * ld + k0 + t + 4]);
}
// A = M^T for a row-major M already rounded to TF32: A(r, c) = p[c * ld + r].
__device__ __forceinline__ void load_a_t_rounded(uint32_t (&a)[4], const float* p, int ld, int m0, int k0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  a[0] = __float_as_uint(p[(k0 + t) * ld + m0 + g]);
  a[1] = __float_as_uint(p[(k0 + t) * ld + m0 + g + 8]);
  a[2] = __float_as_uint(p[(k0 + t + 4) * ld + m0 + g]);
  a[3] = __float_as_uint(p[(k0 + t + 4) * ld + m0 + g + 8]);
}
// B (k rows k0.., n cols n0..) of a row-major K x N matrix p[k * ld + n].
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const float* p, int ld, int k0, int n0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  b[0] = tf32(p[(k0 + t) * ld + n0 + g]);
  b[1] = tf32(p[(k0 + t + 4) * ld + n0 + g]);
}
// B = M^T for a row-major N x K matrix M: B(k, n) = p[n * ld + k].
__device__ __forceinline__ void load_b_t(uint32_t (&b)[2], const float* p, int ld, int k0, int n0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  b[0] = tf32(p[(n0 + g) * ld + k0 + t]);
  b[1] = tf32(p[(n0 + g) * ld + k0 + t + 4]);
}


// ---- prep ----

constexpr size_t kPrepSmem = sizeof(float) * (2 * kC * kLd8 + kC * kLdC + 2 * kC);

__global__ void __launch_bounds__(256, 2) gdn_prep_tc_kernel(const bf16* q, const bf16* k, const bf16* v,
                                                             const float* g, const float* beta, DeviceBatch b,
                                                             const int32_t* chunks, int hk, int hv, float* ws) {
  pdl_begin();
  extern __shared__ float sm[];
  float* qs = sm;               // q (stride kLd4), then beta k e^cum (stride kLd8)
  float* ks = qs + kC * kLd8;   // k (stride kLd4), then beta v (stride kLd8)
  float* tm = ks + kC * kLd8;   // A, then T = (I + A)^-1, [64][kLdC]
  float* cum = tm + kC * kLdC;
  float* bet = cum + kC;

  const int chunk = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int s = chunks[3 * chunk], c0 = chunks[3 * chunk + 1], n = chunks[3 * chunk + 2];
  const int kh = h / (hv / hk);
  const int64_t t0 = int64_t(b.q_start[s]) + c0;
  constexpr int kVecs = kD / 8;
  for (int i = tid; i < kC * kVecs; i += blockDim.x) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    float fq[8] = {}, fk[8] = {};
    if (r < n) {
      unpack8(__ldg(reinterpret_cast<const uint4*>(q + ((t0 + r) * hk + kh) * kD + c)), fq);
      unpack8(__ldg(reinterpret_cast<const uint4*>(k + ((t0 + r) * hk + kh) * kD + c)), fk);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      qs[r * kLd4 + c + j] = fq[j];
      ks[r * kLd4 + c + j] = fk[j];
    }
  }
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
  __syncthreads();
  l2norm_qk_rows(qs, ks, kLd4, kD, n, rsqrtf(float(kD)));
  __syncthreads();
  float* o_w = ws + (int64_t(chunk) * hv + h) * kLay.floats;
  float* o_u = o_w + kLay.u;
  float* o_attn = o_w + kLay.attn;
  float* o_qe = o_w + kLay.qe;
  float* o_kd = o_w + kLay.kd;
  const float last = cum[n - 1];
  for (int i = tid; i < kC * kD / 4; i += blockDim.x) {
    const int r = i / (kD / 4), c = (i % (kD / 4)) * 4;
    const float eq = expf(cum[r]), ek = r < n ? expf(last - cum[r]) : 0.f;
    const float* qr = qs + r * kLd4 + c;
    const float* kr = ks + r * kLd4 + c;
    // Rounded to TF32 here, once: the scan multiplies them as they are (see its comment).
    reinterpret_cast<float4*>(o_qe)[i] = make_float4(round_tf32(qr[0] * eq), round_tf32(qr[1] * eq),
                                                     round_tf32(qr[2] * eq), round_tf32(qr[3] * eq));
    reinterpret_cast<float4*>(o_kd)[i] = make_float4(round_tf32(kr[0] * ek), round_tf32(kr[1] * ek),
                                                     round_tf32(kr[2] * ek), round_tf32(kr[3] * ek));
  }
  if (tid == 0) o_w[kLay.decay] = expf(last);
  // K K^T and Q K^T: warp w takes rows 16 (w / 2).. and columns 32 (w % 2)..; tiles wholly
  // above the diagonal are zero.
  const int gq = lane >> 2, tq = lane & 3;
  {
    const int m0 = 16 * (warp >> 1), n0 = 32 * (warp & 1);
    float kk[4][4] = {}, qk[4][4] = {};
    if (n0 <= m0 + 15) {
      for (int k0 = 0; k0 < kD; k0 += 8) {
        uint32_t ak[4], aq[4];
        load_a(ak, ks, kLd4, m0, k0);
        load_a(aq, qs, kLd4, m0, k0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t bk[2];
          load_b_t(bk, ks, kLd4, k0, n0 + 8 * j);
          mma(kk[j], ak, bk);
          mma(qk[j], aq, bk);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + gq + (e >> 1) * 8, c = n0 + 8 * j + 2 * tq + (e & 1);
        const bool live = r < n && c <= r;
        const float decay = live ? expf(cum[r] - cum[c]) : 0.f;
        tm[r * kLdC + c] = c < r ? bet[r] * kk[j][e] * decay : 0.f;
        o_attn[r * kC + c] = live ? round_tf32(qk[j][e] * decay) : 0.f;
      }
    }
  }
  __syncthreads();
  // beta k e^cum into qs's space (stride kLd8), read from ks (stride kLd4).
  for (int i = tid; i < kC * kD; i += blockDim.x) {
    const int r = i / kD, c = i % kD;
    qs[r * kLd8 + c] = bet[r] * ks[r * kLd4 + c] * expf(cum[r]);
  }
  __syncthreads();
  if (warp < 2) {
    // Forward substitution, column j = tid of T in registers: T[i][j] = -sum_{l<i} A[i][l] T[l][j]
    // for j < i (T[j][j] = 1, T[l][j] = 0 above the diagonal). A stays in tm until every column
    // is done.
    const int j = tid;
    float col[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      float acc0 = 0.f, acc1 = 0.f;
      const float* arow = tm + i * kLdC;
#pragma unroll
      for (int l = 0; l + 1 < i; l += 2) {
        acc0 += arow[l] * col[l];
        acc1 += arow[l + 1] * col[l + 1];
      }
      if (i & 1) acc0 += arow[i - 1] * col[i - 1];
      col[i] = i > j ? -(acc0 + acc1) : (i == j ? 1.f : 0.f);
    }
    asm volatile("bar.sync 1, 64;" ::: "memory");
#pragma unroll
    for (int i = 0; i < kC; ++i) tm[i * kLdC + j] = col[i];
  } else {
    // beta v into ks's space (stride kLd8) meanwhile.
    for (int i = tid - 64; i < kC * kVecs; i += blockDim.x - 64) {
      const int r = i / kVecs, c = (i % kVecs) * 8;
      float fv[8] = {};
      if (r < n) unpack8(__ldg(reinterpret_cast<const uint4*>(v + ((t0 + r) * hv + h) * kD + c)), fv);
#pragma unroll
      for (int e = 0; e < 8; ++e) ks[r * kLd8 + c + e] = bet[r] * fv[e];
    }
  }
  __syncthreads();
  // U = T (beta v), W = T (beta k e^cum): warp w takes rows 16 (w / 2).. and columns
  // 64 (w % 2)..; T is lower triangular, so only k < m0 + 16 counts.
  {
    const int m0 = 16 * (warp >> 1), n0 = 64 * (warp & 1);
    float u[8][4] = {}, w[8][4] = {};
    for (int k0 = 0; k0 < m0 + 16; k0 += 8) {
      uint32_t a[4];
      load_a(a, tm, kLdC, m0, k0);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t bv[2], bw[2];
        load_b(bv, ks, kLd8, k0, n0 + 8 * j);
        load_b(bw, qs, kLd8, k0, n0 + 8 * j);
        mma(u[j], a, bv);
        mma(w[j], a, bw);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int r = m0 + gq, c = n0 + 8 * j + 2 * tq;
      *reinterpret_cast<float2*>(o_u + r * kD + c) = make_float2(u[j][0], u[j][1]);
      *reinterpret_cast<float2*>(o_u + (r + 8) * kD + c) = make_float2(u[j][2], u[j][3]);
      *reinterpret_cast<float2*>(o_w + r * kD + c) = make_float2(round_tf32(w[j][0]), round_tf32(w[j][1]));
      *reinterpret_cast<float2*>(o_w + (r + 8) * kD + c) = make_float2(round_tf32(w[j][2]), round_tf32(w[j][3]));
    }
  }
}

// ---- scan ----

// Every operand the scan multiplies is stored already rounded to TF32 (prep rounds W, q e^cum,
// k e^(last - cum) and attn as it writes them; the scan rounds its shared copies of the state and
// of vnew), so fragments load by ldmatrix with no conversion; the state itself stays fp32 in
// registers. ldmatrix (.b16) moves 8 rows of 16 bytes, four fp32 each: thread l gets row l / 4,
// word l % 4, which is the tf32 fragment layout.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const float* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// A (rows m0.., cols k0..) of a row-major matrix with row stride ld (4 mod 32).
__device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], const float* p, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
  ldsm_x4(a, p + (m0 + (lane & 7) + (mi & 1) * 8) * ld + k0 + (mi >> 1) * 4);
}
// B for column tiles n0 and n0 + 8 at k0.., from B^T stored row-major (p[n * ld + k]):
// b[0], b[1] for tile n0, b[2], b[3] for tile n0 + 8.
__device__ __forceinline__ void ldsm_b2(uint32_t (&b)[4], const float* p, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
  ldsm_x4(b, p + (n0 + (lane & 7) + (mi >> 1) * 8) * ld + k0 + (mi & 1) * 4);
}

// acc += A[m0.., :k_end] B[:k_end, n0..n0 + 16] for one warp (two 8-column tiles): A row-major
// (stride lda), B stored transposed (stride ldb), both TF32-rounded.
__device__ __forceinline__ void mma_16x16(float (&acc)[2][4], const float* a_s, int lda, const float* bt_s, int ldb,
                                          int m0, int n0, int k_end) {
#pragma unroll 4
  for (int k0 = 0; k0 < k_end; k0 += 8) {
    uint32_t a[4], bb[4];
    ldsm_a(a, a_s, lda, m0, k0);
    ldsm_b2(bb, bt_s, ldb, n0, k0);
    mma(acc[0], a, {bb[0], bb[1]});
    mma(acc[1], a, {bb[2], bb[3]});
  }
}

constexpr int kLdT = kD + 4;  // the state's transpose [kBv][kD]
constexpr int kLdVt = kC + 4; // vnew's transpose [kBv][kC]

struct ScanSmem {
  static constexpr int kW = 0;
  static constexpr int kQe = kW + kC * kLd4;
  static constexpr int kKd = kQe + kC * kLd4;
  static constexpr int kAttn = kKd + kC * kLd8;
  static constexpr int kU = kAttn + kC * kLdC;
  static constexpr int kVt = kU + kC * kLdV;
  static constexpr int kSt = kVt + kBv * kLdVt;
  static constexpr size_t kBytes = sizeof(float) * (kSt + kBv * kLdT);
};

// rows x W floats from a dense global matrix (row stride gld) to shared memory (stride ld).
template <int W>
__device__ __forceinline__ void copy_rows_w(float* dst, int ld, const float* src, int gld) {
  constexpr int kVecs = W / 4;
  for (int i = threadIdx.x; i < kC * kVecs; i += blockDim.x) {
    const int r = i / kVecs, c = (i % kVecs) * 4;
    cp_async16(dst + r * ld + c, src + int64_t(r) * gld + c);
  }
}

__global__ void __launch_bounds__(256, 1) gdn_scan_tc_kernel(const float* ws, const int32_t* seqinfo,
                                                             const int32_t* chunks, void* state, bool s32,
                                                             DeviceBatch b, int hv, bf16* out) {
  pdl_begin();
  extern __shared__ __align__(16) float sm[];
  float* ws_w = sm + ScanSmem::kW;
  float* ws_qe = sm + ScanSmem::kQe;
  float* ws_kd = sm + ScanSmem::kKd;
  float* ws_at = sm + ScanSmem::kAttn;
  float* ws_u = sm + ScanSmem::kU;
  float* vt = sm + ScanSmem::kVt;  // vnew^T, tf32-rounded
  float* st_t = sm + ScanSmem::kSt;  // S^T, tf32-rounded

  const int e = blockIdx.x, h = blockIdx.y, col0 = blockIdx.z * kBv, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int s = seqinfo[3 * e], first = seqinfo[3 * e + 1], count = seqinfo[3 * e + 2];
  const int slot = b.slot[s];
  const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
  const int64_t state0 = (int64_t(slot) * hv + h) * kD * kD + col0;  // padding rows (slot < 0): no state

  // The state slice in step 3's accumulator layout: warp w has rows 16 w.., all 4 column tiles.
  float st[4][4];
  const int sr = 16 * warp + gq;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = sr + (x >> 1) * 8, c = 8 * j + 2 * tq + (x & 1);
      st[j][x] = has_state ? ldf(state, s32, state0 + int64_t(r) * kD + c) : 0.f;
      st_t[c * kLdT + r] = round_tf32(st[j][x]);
    }
  }
  auto base_of = [&](int ci) { return ws + (int64_t(first + ci) * hv + h) * kLay.floats; };
  auto load_wu = [&](int ci) {
    if (ci < count) {
      copy_rows_w<kD>(ws_w, kLd4, base_of(ci), kD);
      copy_rows_w<kBv>(ws_u, kLdV, base_of(ci) + kLay.u + col0, kD);
    }
    cp_commit();
  };
  auto load_qa = [&](int ci) {
    if (ci < count) {
      copy_rows_w<kC>(ws_at, kLdC, base_of(ci) + kLay.attn, kC);
      copy_rows_w<kD>(ws_qe, kLd4, base_of(ci) + kLay.qe, kD);
    }
    cp_commit();
  };
  auto load_kd = [&](int ci) {
    if (ci < count) copy_rows_w<kD>(ws_kd, kLd8, base_of(ci) + kLay.kd, kD);
    cp_commit();
  };
  load_wu(0);
  load_qa(0);
  load_kd(0);
  // Steps 1 and 2: warp w takes token rows 16 (w / 2).. and state columns 16 (w % 2)...
  const int m0 = 16 * (warp >> 1), n0 = 16 * (warp & 1);
  for (int ci = 0; ci < count; ++ci) {
    const int chunk = first + ci;
    const int c0 = chunks[3 * chunk + 1], n = chunks[3 * chunk + 2];
    const float decay = base_of(ci)[kLay.decay];  // e^last
    cp_wait<2>();
    __syncthreads();
    // 1. vnew = U - W S.
    {
      float acc[2][4] = {};
      mma_16x16(acc, ws_w, kLd4, st_t, kLdT, m0, n0, kD);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int r = m0 + gq + (x >> 1) * 8, c = n0 + 8 * j + 2 * tq + (x & 1);
          vt[c * kLdVt + r] = round_tf32(ws_u[r * kLdV + c] - acc[j][x]);
        }
      }
    }
    __syncthreads();
    load_wu(ci + 1);
    cp_wait<2>();
    __syncthreads();
    // 2. out = (q e^cum) S + attn vnew (attn is lower triangular: k < m0 + 16).
    {
      float acc[2][4] = {};
      mma_16x16(acc, ws_qe, kLd4, st_t, kLdT, m0, n0, kD);
      mma_16x16(acc, ws_at, kLdC, vt, kLdVt, m0, n0, m0 + 16);
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
    __syncthreads();
    load_qa(ci + 1);
    cp_wait<2>();
    __syncthreads();
    // 3. S = S e^last + (k e^(last - cum))^T vnew.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) st[j][x] *= decay;
    }
#pragma unroll 2
    for (int k0 = 0; k0 < kC; k0 += 8) {
      uint32_t a[4], b01[4], b23[4];
      load_a_t_rounded(a, ws_kd, kLd8, 16 * warp, k0);
      ldsm_b2(b01, vt, kLdVt, 0, k0);
      ldsm_b2(b23, vt, kLdVt, 16, k0);
      mma(st[0], a, {b01[0], b01[1]});
      mma(st[1], a, {b01[2], b01[3]});
      mma(st[2], a, {b23[0], b23[1]});
      mma(st[3], a, {b23[2], b23[3]});
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) st_t[(8 * j + 2 * tq + (x & 1)) * kLdT + sr + (x >> 1) * 8] = round_tf32(st[j][x]);
    }
    __syncthreads();
    load_kd(ci + 1);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  if (slot >= 0) {
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

void gdn_chunked_tc(const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta, void* state,
                    bool s32, const DeviceBatch& db, const int32_t* chunks, int num_chunks, const int32_t* seqinfo,
                    int num_seqs, int hk, int hv, float* ws, bf16* out) {
  static const bool kAttrs = [] {
    allow_shared_memory(reinterpret_cast<const void*>(gdn_prep_tc_kernel), kPrepSmem, "gated_delta_rule (prep)");
    allow_shared_memory(reinterpret_cast<const void*>(gdn_scan_tc_kernel), ScanSmem::kBytes, "gated_delta_rule (scan)");
    return true;
  }();
  (void)kAttrs;
  launch_pdl(gdn_prep_tc_kernel, dim3(unsigned(num_chunks), unsigned(hv)), 256, kPrepSmem, q, k, v, g, beta, db,
             chunks, hk, hv, ws);
  check_launch("gdn_prep_tc");
  launch_pdl(gdn_scan_tc_kernel, dim3(unsigned(num_seqs), unsigned(hv), unsigned(kD / kBv)), 256, ScanSmem::kBytes,
             static_cast<const float*>(ws), seqinfo, chunks, state, s32, db, hv, out);
  check_launch("gdn_scan_tc");
}

}  // namespace strata::ops::cuda
