// CUDA: the elementwise and row ops of the dense vocabulary (embedding, gathers and column
// splits, adds and gates, RMSNorm variants, rotary embeddings, random fill).
#include <cuda_fp8.h>

#include <algorithm>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/dispatch.h"

namespace strata::ops::cuda {
namespace {

constexpr int kMaxSplits = 8;

struct SplitOuts {
  void* ptr[kMaxSplits];
  int64_t start[kMaxSplits + 1];  // column where output i begins; start[n] = C
  bool f32[kMaxSplits];
  int n;
};

__global__ void gather_rows_kernel(const void* src, bool src_f32, int64_t src_rows, const int32_t* idx,
                                   void* dst, bool dst_f32, int64_t d) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int64_t s = idx[r];
  if (s < 0 || s >= src_rows) return;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    stf(dst, dst_f32, r * d + c, ldf(src, src_f32, s * d + c));
  }
}

__global__ void split_columns_kernel(const void* x, bool x_f32, int64_t rows, int64_t c, SplitOuts o) {
  pdl_begin();
  const int64_t total = rows * c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / c, col = i % c;
    int s = 0;
    while (col >= o.start[s + 1]) ++s;
    const int64_t w = o.start[s + 1] - o.start[s];
    stf(o.ptr[s], o.f32[s], r * w + (col - o.start[s]), ldf(x, x_f32, i));
  }
}

__global__ void copy_columns_kernel(const void* x, bool x32, int64_t c, int64_t col0, void* o, bool o32,
                                    int64_t t, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t * n; i += int64_t(gridDim.x) * blockDim.x) {
    stf(o, o32, i, ldf(x, x32, (i / n) * c + col0 + i % n));
  }
}

__global__ void add_kernel(const void* a, bool a32, const void* b, bool b32, void* out, bool o32, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    stf(out, o32, i, ldf(a, a32, i) + ldf(b, b32, i));
  }
}

// x *= sigmoid(gate) (per element, or per row when per_row); with add_to, y += x * sigmoid(gate).
__global__ void gate_kernel(void* y, bool y32, const void* x, bool x32, const void* gate, bool g32,
                            int64_t n, int64_t d, bool per_row, bool add_to) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float s = sigmoid_f(ldf(gate, g32, per_row ? i / d : i));
    if (add_to) {
      stf(y, y32, i, ldf(y, y32, i) + ldf(x, x32, i) * s);
    } else {
      stf(y, y32, i, ldf(y, y32, i) * s);
    }
  }
}

// The same over 8 bf16 at a time (x, y and an element-wise gate bf16, d a multiple of 8): one
// division a vector, not an element.
__global__ void gate_bf16x8_kernel(bf16* y, const bf16* x, const void* gate, bool g32, int64_t n8, int64_t d8,
                                   bool per_row, bool add_to) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    float yv[8], xv[8], gv[8];
    unpack8(reinterpret_cast<const uint4*>(y)[i], yv);
    if (add_to) unpack8(reinterpret_cast<const uint4*>(x)[i], xv);
    if (per_row) {
      const float sg = sigmoid_f(ldf(gate, g32, i / d8));
#pragma unroll
      for (int e = 0; e < 8; ++e) gv[e] = sg;
    } else {
      unpack8(reinterpret_cast<const uint4*>(gate)[i], gv);
#pragma unroll
      for (int e = 0; e < 8; ++e) gv[e] = sigmoid_f(gv[e]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) yv[e] = add_to ? yv[e] + xv[e] * gv[e] : yv[e] * gv[e];
    reinterpret_cast<uint4*>(y)[i] = pack8(yv);
  }
}

// split_columns over 8 bf16 at a time (x and every output bf16, every width a multiple of 8).
__global__ void split_columns_bf16x8_kernel(const bf16* x, int64_t rows, int64_t c8, SplitOuts o) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * c8;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / c8, col = (i % c8) * 8;
    int s = 0;
    while (col >= o.start[s + 1]) ++s;
    const int64_t w = o.start[s + 1] - o.start[s];
    *reinterpret_cast<uint4*>(static_cast<bf16*>(o.ptr[s]) + r * w + (col - o.start[s])) =
        reinterpret_cast<const uint4*>(x)[i];
  }
}

__global__ void silu_mul_kernel(const void* gu, bool g32, void* out, bool o32, int64_t rows, int64_t inter) {
  pdl_begin();
  const int64_t n = rows * inter;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    stf(out, o32, i, silu_f(ldf(gu, g32, r * 2 * inter + c)) * ldf(gu, g32, r * 2 * inter + inter + c));
  }
}

// One block per row. With residual: h += y first (rounded to h's dtype), then the norm of h.
// With gate: out = norm(x) * w * silu(z). Each thread re-reads only elements it wrote.
// One block per row. Each thread keeps its (at most kNormPerThread) elements in registers between
// the sum of squares and the scaling, and loads its weights before the reduction, so a row
// costs one round trip to memory and one block reduction.
constexpr int kNormPerThread = 8;

__global__ void rms_norm_kernel(const void* x, bool x32, const void* resid, bool r32, void* sum, const void* w,
                                bool w32, const void* z, bool z32, void* out, bool o32, int64_t d, float eps,
                                bool zero_centered) {
  pdl_begin();
  __shared__ float red[32];
  const int64_t base = int64_t(blockIdx.x) * d;
  const bool cached = d <= int64_t(kNormPerThread) * blockDim.x;
  float v[kNormPerThread], wv[kNormPerThread];
  float ss = 0.f;
  if (cached) {
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j) {
      const int64_t c = threadIdx.x + int64_t(j) * blockDim.x;
      v[j] = wv[j] = 0.f;
      if (c < d) {
        v[j] = ldf(x, x32, base + c);
        if (resid) v[j] += ldf(resid, r32, base + c);
        wv[j] = ldf(w, w32, c) + (zero_centered ? 1.f : 0.f);
      }
    }
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j) {
      const int64_t c = threadIdx.x + int64_t(j) * blockDim.x;
      if (c < d && resid) {
        stf(sum, x32, base + c, v[j]);
        if (!x32) v[j] = bf2f(f2bf(v[j]));  // the rounded sum, as the next layer sees it
      }
      ss += v[j] * v[j];
    }
  } else {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      float u = ldf(x, x32, base + c);
      if (resid) {
        u += ldf(resid, r32, base + c);
        stf(sum, x32, base + c, u);
        u = ldf(sum, x32, base + c);
      }
      ss += u * u;
    }
  }
  const float inv = rsqrtf(block_sum(ss, red) / float(d) + eps);
  if (cached) {
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j) {
      const int64_t c = threadIdx.x + int64_t(j) * blockDim.x;
      if (c >= d) break;
      float o = v[j] * inv * wv[j];
      if (z) o *= silu_f(ldf(z, z32, base + c));
      stf(out, o32, base + c, o);
    }
    return;
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float u = ldf(resid ? sum : x, x32, base + c) * inv;
    float wc = ldf(w, w32, c);
    if (zero_centered) wc += 1.f;
    float o = u * wc;
    if (z) o *= silu_f(ldf(z, z32, base + c));
    stf(out, o32, base + c, o);
  }
}

// The all-bf16 case with d a multiple of 8 (every norm of the Qwen3.5 forward): a thread's 8
// elements are one 16-byte load of x (and of the residual, z), its weights load before pdl_wait.
// L = 0: a block a row; L = 4..32: rows of at most 8 L elements (GDN's per-head norms), each on L
// lanes of a warp, a block of 256 threads taking 256 / L rows.
template <bool W32, int L>
__global__ void rms_norm_bf16x8_kernel(const bf16* x, const bf16* resid, bf16* sum, const void* w, const bf16* z,
                                       bf16* out, int64_t d, int64_t rows, float eps, bool zero_centered) {
  pdl_trigger();
  __shared__ float red[32];
  const int64_t row = L ? int64_t(blockIdx.x) * (blockDim.x / L) + threadIdx.x / L : blockIdx.x;
  const int64_t c = int64_t(L ? threadIdx.x % L : threadIdx.x) * 8, base = row * d + c;
  const bool in = c < d && row < rows;
  float wf[8], v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) wf[e] = v[e] = 0.f;
  if (in) {
    if (W32) {
      const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + c);
      const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + c + 4);
      wf[0] = a.x, wf[1] = a.y, wf[2] = a.z, wf[3] = a.w, wf[4] = b.x, wf[5] = b.y, wf[6] = b.z, wf[7] = b.w;
    } else {
      unpack8(*reinterpret_cast<const uint4*>(static_cast<const bf16*>(w) + c), wf);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) wf[e] += zero_centered ? 1.f : 0.f;
  }
  pdl_wait();
  float ss = 0.f;
  if (in) {
    unpack8(*reinterpret_cast<const uint4*>(x + base), v);
    if (resid) {
      float r[8];
      unpack8(*reinterpret_cast<const uint4*>(resid + base), r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += r[e];
      const uint4 rounded = pack8(v);
      *reinterpret_cast<uint4*>(sum + base) = rounded;
      unpack8(rounded, v);  // the rounded sum, as the next layer sees it
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
  }
  if (L) {
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  } else {
    ss = block_sum(ss, red);
  }
  const float inv = rsqrtf(ss / float(d) + eps);
  if (!in) return;
  float o[8], zf[8];
  if (z) unpack8(*reinterpret_cast<const uint4*>(z + base), zf);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    o[e] = v[e] * inv * wf[e];
    if (z) o[e] *= silu_f(zf[e]);
  }
  *reinterpret_cast<uint4*>(out + base) = pack8(o);
}

struct RopeParams {
  float inv_freq[256];
  int half;
  float scaling;
};

// The kernels' copy of a RopeSpec (callers check rotary_dim / 2 <= 256).
RopeParams rope_params(const RopeSpec& spec) {
  RopeParams p{};
  p.half = spec.rotary_dim / 2;
  for (int j = 0; j < p.half; ++j) p.inv_freq[j] = spec.inv_freq[j];
  p.scaling = spec.attention_scaling;
  return p;
}

__global__ void rope_kernel(void* x, bool x32, const int32_t* positions, int64_t heads, int64_t d,
                            RopeParams p) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const float pos = float(positions[t]);
  for (int64_t i = threadIdx.x; i < heads * p.half; i += blockDim.x) {
    const int64_t h = i / p.half;
    const int j = int(i % p.half);
    const float angle = pos * p.inv_freq[j];
    const float cs = cosf(angle) * p.scaling, sn = sinf(angle) * p.scaling;
    const int64_t at = (t * heads + h) * d;
    const float a = ldf(x, x32, at + j), b = ldf(x, x32, at + j + p.half);
    stf(x, x32, at + j, a * cs - b * sn);
    stf(x, x32, at + j + p.half, b * cs + a * sn);
  }
}

// qk_norm_rope: block (token, head) over the Hq query heads of qg then the Hkv key heads, a
// thread per element of the head: the zero-centred RMSNorm, rounded to bf16 as rms_norm stores
// it, then rope_kernel's rotation of the leading 2 half elements; query heads also copy their gate.
__global__ void qk_norm_rope_kernel(const bf16* qg, bf16* k, const void* qw, bool qw32, const void* kw, bool kw32,
                                    float eps, bool zero_centered, const int32_t* positions, int hq, int hkv, int d,
                                    RopeParams p, bf16* q, bf16* gate) {
  pdl_begin();
  __shared__ float red[32], row[256];
  const int t = blockIdx.x, head = blockIdx.y, tid = threadIdx.x;
  const bool is_q = head < hq;
  const int h = is_q ? head : head - hq;
  const bf16* src = is_q ? qg + (int64_t(t) * hq + h) * 2 * d : k + (int64_t(t) * hkv + h) * d;
  bf16* dst = is_q ? q + (int64_t(t) * hq + h) * d : k + (int64_t(t) * hkv + h) * d;
  const float v = tid < d ? bf2f(src[tid]) : 0.f;
  if (is_q && tid < d) gate[(int64_t(t) * hq + h) * d + tid] = src[d + tid];
  const float wv = tid < d ? ldf(is_q ? qw : kw, is_q ? qw32 : kw32, tid) + (zero_centered ? 1.f : 0.f) : 0.f;
  const float inv = rsqrtf(block_sum(v * v, red) / float(d) + eps);
  if (tid < d) row[tid] = bf2f(f2bf(v * inv * wv));
  __syncthreads();
  if (tid >= d) return;
  float o = row[tid];
  if (tid < 2 * p.half) {
    const int j = tid % p.half;
    const float angle = float(positions[t]) * p.inv_freq[j];
    const float cs = cosf(angle) * p.scaling, sn = sinf(angle) * p.scaling;
    const float a = row[j], b = row[j + p.half];
    o = tid < p.half ? a * cs - b * sn : b * cs + a * sn;
  }
  dst[tid] = f2bf(o);
}

// The same for head dims d <= 256 with d % 8 == 0 and 16-byte aligned rows (every real model):
// a warp per (token, head), 8 elements a lane moved as one 16-byte vector, the norm's sum by
// warp shuffles, the normalised row through shared memory for rope's partner elements; 8 heads
// a block. Lane l computes the rotation's angles l, l + 32, ... once (sincosf) into shared memory:
// computed by each element's lane, the 64 of a 64-wide rotation cost 8 sincos pairs in a row on 8
// lanes, which bound the kernel. Its output equals qk_norm_rope_kernel's up to the order of the
// squares' sum.
constexpr int kQkWarps = 8;
__global__ void __launch_bounds__(kQkWarps * 32) qk_norm_rope_warp_kernel(
    const bf16* qg, bf16* k, const void* qw, bool qw32, const void* kw, bool kw32, float eps, bool zero_centered,
    const int32_t* positions, int64_t t_count, int hq, int hkv, int d, RopeParams p, bf16* q, bf16* gate) {
  pdl_begin();
  __shared__ float rows[kQkWarps][256], cos_sin[kQkWarps][2][128];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kQkWarps + warp, heads = hq + hkv;
  if (item >= t_count * heads) return;  // whole warps only: no block-wide barrier below
  const int64_t t = item / heads;
  const int head = int(item % heads);
  const bool is_q = head < hq;
  const int h = is_q ? head : head - hq;
  const bf16* src = is_q ? qg + (t * hq + h) * 2 * d : k + (t * hkv + h) * d;
  bf16* dst = is_q ? q + (t * hq + h) * d : k + (t * hkv + h) * d;
  const int c = lane * 8;
  const bool live = c < d;
  float v[8] = {};
  if (live) {
    unpack8(*reinterpret_cast<const uint4*>(src + c), v);
    if (is_q) *reinterpret_cast<uint4*>(gate + (t * hq + h) * d + c) = *reinterpret_cast<const uint4*>(src + d + c);
  }
  float* cs = cos_sin[warp][0];
  float* sn = cos_sin[warp][1];
  const float pos = float(positions[t]);
  for (int j = lane; j < p.half; j += 32) {
    float s_j, c_j;
    sincosf(pos * p.inv_freq[j], &s_j, &c_j);
    cs[j] = c_j * p.scaling;
    sn[j] = s_j * p.scaling;
  }
  float sq = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) sq += v[e] * v[e];
  const float inv = rsqrtf(warp_sum(sq) / float(d) + eps);
  float* row = rows[warp];
  if (live) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float wv = ldf(is_q ? qw : kw, is_q ? qw32 : kw32, c + e) + (zero_centered ? 1.f : 0.f);
      row[c + e] = bf2f(f2bf(v[e] * inv * wv));
    }
  }
  __syncwarp();
  if (!live) return;
  float o[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int i = c + e;
    o[e] = row[i];
    if (i < 2 * p.half) {
      const int j = i % p.half;
      const float a = row[j], b = row[j + p.half];
      o[e] = i < p.half ? a * cs[j] - b * sn[j] : b * cs[j] + a * sn[j];
    }
  }
  *reinterpret_cast<uint4*>(dst + c) = pack8(o);
}

__global__ void fill_uniform_kernel(void* t, bool f32, int64_t n, uint64_t seed, float scale) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    stf(t, f32, i, random_uniform_value(seed, uint64_t(i), scale));
  }
}

// F8_E4M3 codes of the same values (dtype.h's f32_to_f8e4m3 on the CPU).
__global__ void fill_uniform_fp8_kernel(uint8_t* t, int64_t n, uint64_t seed, float scale) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    t[i] = uint8_t(__nv_cvt_float_to_fp8(random_uniform_value(seed, uint64_t(i), scale), __NV_SATFINITE, __NV_E4M3));
  }
}

int norm_threads(int64_t d) { return d > 4096 ? 1024 : d >= 1024 ? 512 : d >= 256 ? 256 : d >= 128 ? 128 : 64; }

}  // namespace

void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& out) {
  OpTimer timer_("embedding");
  expect_float(table, "embedding", "table");
  expect_float(out, "embedding", "out");
  const int64_t h = table.dim(1), vocab = table.dim(0);
  STRATA_CHECK(out.shape() == Shape({int64_t(ids.size()), h}), "embedding: out ", out.describe(),
               " should be [", ids.size(), ", ", h, "]");
  for (int32_t id : ids) STRATA_CHECK(id >= 0 && id < vocab, "token id ", id, " out of range [0, ", vocab, ")");
  if (ids.empty()) return;
  Tensor keep;
  const int32_t* d_ids = device_ints(ids, &keep);
  launch_pdl(gather_rows_kernel, unsigned(ids.size()), 256, 0, table.raw(), is_f32(table), vocab, d_ids,
                                                                 out.raw(), is_f32(out), h);
  check_launch("embedding");
}

void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, const Tensor& out) {
  OpTimer timer_("gather_rows");
  expect_float(x, "gather_rows", "x");
  expect_float(out, "gather_rows", "out");
  const int64_t d = x.dim(-1), n = rows_of(x);
  STRATA_CHECK(out.shape() == Shape({int64_t(rows.size()), d}), "gather_rows: out ", out.describe());
  for (int32_t r : rows) STRATA_CHECK(r >= 0 && r < n, "gather_rows: row ", r, " out of range");
  if (rows.empty()) return;
  Tensor keep;
  const int32_t* d_rows = device_ints(rows, &keep);
  launch_pdl(gather_rows_kernel, unsigned(rows.size()), 256, 0, x.raw(), is_f32(x), n, d_rows, out.raw(),
                                                                  is_f32(out), d);
  check_launch("gather_rows");
}

void split_columns(const Tensor& x, const std::vector<Tensor>& outs) {
  OpTimer timer_("split_columns");
  expect_float(x, "split_columns", "x");
  STRATA_CHECK(!outs.empty() && outs.size() <= size_t(kMaxSplits), "split_columns: ", outs.size(),
               " outputs (1 to ", kMaxSplits, " on CUDA)");
  const int64_t rows = rows_of(x), c = x.dim(-1);
  SplitOuts o{};
  o.n = int(outs.size());
  int64_t col = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    expect_float(outs[i], "split_columns", "output");
    STRATA_CHECK(rows_of(outs[i]) == rows, "split_columns: output ", outs[i].describe(),
                 " does not have the ", rows, " rows of ", x.describe());
    o.ptr[i] = outs[i].raw();
    o.f32[i] = is_f32(outs[i]);
    o.start[i] = col;
    col += outs[i].dim(-1);
  }
  o.start[o.n] = col;
  STRATA_CHECK(col == c, "split_columns: outputs cover ", col, " of ", c, " columns");
  if (rows == 0) return;
  bool vec = !is_f32(x) && aligned16(x.raw()) && c % 8 == 0;
  for (int i = 0; i < o.n; ++i) vec = vec && !o.f32[i] && aligned16(o.ptr[i]) && o.start[i] % 8 == 0;
  if (vec) {
    launch_pdl(split_columns_bf16x8_kernel, grid_for(rows * c / 8), 256, 0, static_cast<const bf16*>(x.raw()), rows,
               c / 8, o);
    check_launch("split_columns");
    return;
  }
  launch_pdl(split_columns_kernel, grid_for(rows * c), 256, 0, x.raw(), is_f32(x), rows, c, o);
  check_launch("split_columns");
}

void copy_columns(const Tensor& x, int64_t col0, const Tensor& out) {
  OpTimer timer_("copy_columns");
  expect_float(x, "copy_columns", "x");
  expect_float(out, "copy_columns", "out");
  const int64_t c = x.dim(-1), t = rows_of(x), n = out.dim(-1);
  STRATA_CHECK(rows_of(out) == t && col0 >= 0 && col0 + n <= c, "copy_columns: [", col0, ", +", n,
               ") of ", x.describe(), " into ", out.describe());
  if (t == 0 || n == 0) return;
  launch_pdl(copy_columns_kernel, grid_for(t * n), 256, 0, x.raw(), is_f32(x), c, col0, out.raw(),
                                                             is_f32(out), t, n);
  check_launch("copy_columns");
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  OpTimer timer_("add");
  expect_float(a, "add", "a");
  expect_float(b, "add", "b");
  expect_float(out, "add", "out");
  STRATA_CHECK(a.numel() == b.numel() && a.numel() == out.numel(), "add: sizes differ: ", a.describe(),
               " ", b.describe(), " ", out.describe());
  if (!a.numel()) return;
  launch_pdl(add_kernel, grid_for(a.numel()), 256, 0, a.raw(), is_f32(a), b.raw(), is_f32(b), out.raw(),
                                                        is_f32(out), a.numel());
  check_launch("add");
}

namespace {

// gate_bf16x8_kernel's case: y (and x) bf16 and aligned, rows a multiple of 8 wide, the gate per
// row (any float dtype) or bf16 per element.
bool gate_vectorizes(const Tensor& y, const Tensor* x, const Tensor& gate, bool per_row) {
  const int64_t d = y.ndim() ? y.dim(-1) : 0;
  bool ok = d % 8 == 0 && !is_f32(y) && aligned16(y.raw()) && (per_row || (!is_f32(gate) && aligned16(gate.raw())));
  if (x) ok = ok && !is_f32(*x) && aligned16(x->raw());
  return ok;
}

}  // namespace

void mul_sigmoid(const Tensor& x, const Tensor& gate) {
  OpTimer timer_("mul_sigmoid");
  expect_float(x, "mul_sigmoid", "x");
  expect_float(gate, "mul_sigmoid", "gate");
  const int64_t rows = rows_of(x), d = x.ndim() ? x.dim(-1) : 0;
  STRATA_CHECK(x.numel() == gate.numel() || gate.numel() == rows, "mul_sigmoid: gate ", gate.describe(),
               " does not fit x ", x.describe());
  if (!x.numel()) return;
  const bool per_row = gate.numel() != x.numel();
  if (gate_vectorizes(x, nullptr, gate, per_row)) {
    launch_pdl(gate_bf16x8_kernel, grid_for(x.numel() / 8), 256, 0, static_cast<bf16*>(x.raw()), nullptr,
               gate.raw(), is_f32(gate), x.numel() / 8, d / 8, per_row, false);
  } else {
    launch_pdl(gate_kernel, grid_for(x.numel()), 256, 0, x.raw(), is_f32(x), nullptr, false, gate.raw(), is_f32(gate),
               x.numel(), d, per_row, false);
  }
  check_launch("mul_sigmoid");
}

void add_sigmoid_gated(const Tensor& y, const Tensor& x, const Tensor& gate) {
  OpTimer timer_("add_sigmoid_gated");
  expect_float(y, "add_sigmoid_gated", "y");
  expect_float(x, "add_sigmoid_gated", "x");
  expect_float(gate, "add_sigmoid_gated", "gate");
  const int64_t rows = rows_of(x), d = x.ndim() ? x.dim(-1) : 0;
  STRATA_CHECK(y.numel() == x.numel() && gate.numel() == rows, "add_sigmoid_gated: y ", y.describe(),
               ", x ", x.describe(), ", gate ", gate.describe());
  if (!x.numel()) return;
  if (gate_vectorizes(y, &x, gate, true)) {
    launch_pdl(gate_bf16x8_kernel, grid_for(x.numel() / 8), 256, 0, static_cast<bf16*>(y.raw()),
               static_cast<const bf16*>(x.raw()), gate.raw(), is_f32(gate), x.numel() / 8, d / 8, true, true);
  } else {
    launch_pdl(gate_kernel, grid_for(x.numel()), 256, 0, y.raw(), is_f32(y), x.raw(), is_f32(x), gate.raw(),
               is_f32(gate), x.numel(), d, true, true);
  }
  check_launch("add_sigmoid_gated");
}

void silu_mul(const Tensor& gate_up, const Tensor& out) {
  OpTimer timer_("silu_mul");
  expect_float(gate_up, "silu_mul", "gate_up");
  expect_float(out, "silu_mul", "out");
  const int64_t inter = out.dim(-1), t = rows_of(out);
  STRATA_CHECK(gate_up.dim(-1) == 2 * inter && rows_of(gate_up) == t, "silu_mul: ", gate_up.describe(),
               " does not match ", out.describe());
  if (!out.numel()) return;
  launch_pdl(silu_mul_kernel, grid_for(out.numel()), 256, 0, gate_up.raw(), is_f32(gate_up), out.raw(),
                                                               is_f32(out), t, inter);
  check_launch("silu_mul");
}

namespace {

// x (+ resid, written to sum: x itself unless given) normalised into out, times (1 +) w, times
// silu(z) when given. A thread reads each element of x before it writes the element's sum, so sum
// may be x.
void launch_norm(const Tensor& x, const Tensor* resid, const Tensor& w, const Tensor* z, const Tensor& out,
                 float eps, bool zero_centered, const Tensor* sum = nullptr) {
  if (!sum) sum = &x;
  const int64_t d = x.dim(-1), rows = rows_of(x);
  bool vec = d % 8 == 0 && d <= 8 * 1024 && !is_f32(x) && !is_f32(out) && aligned16(x.raw()) &&
             aligned16(out.raw()) && aligned16(w.raw());
  for (const Tensor* t : {resid, z, sum}) vec = vec && (!t || (!is_f32(*t) && aligned16(t->raw())));
  if (vec) {
    const unsigned threads = unsigned(std::max<int64_t>(32, (d / 8 + 31) / 32 * 32));
    const auto* xp = static_cast<const bf16*>(x.raw());
    const auto* rp = resid ? static_cast<const bf16*>(resid->raw()) : nullptr;
    auto* sp = static_cast<bf16*>(sum->raw());
    const auto* zp = z ? static_cast<const bf16*>(z->raw()) : nullptr;
    auto* op = static_cast<bf16*>(out.raw());
    const bool w32 = is_f32(w);
    auto go = [&](auto kernel, unsigned blocks, unsigned block) {
      launch_pdl(kernel, blocks, block, 0, xp, rp, sp, w.raw(), zp, op, d, rows, eps, zero_centered);
    };
    if (d <= 8 * 32) {  // a row on L lanes (L a power of two), 256 / L rows a block
      const int lanes = d <= 32 ? 4 : d <= 64 ? 8 : d <= 128 ? 16 : 32;
      const unsigned blocks = unsigned((rows * lanes + 255) / 256);
      switch (lanes) {
        case 4: return w32 ? go(rms_norm_bf16x8_kernel<true, 4>, blocks, 256) : go(rms_norm_bf16x8_kernel<false, 4>, blocks, 256);
        case 8: return w32 ? go(rms_norm_bf16x8_kernel<true, 8>, blocks, 256) : go(rms_norm_bf16x8_kernel<false, 8>, blocks, 256);
        case 16: return w32 ? go(rms_norm_bf16x8_kernel<true, 16>, blocks, 256) : go(rms_norm_bf16x8_kernel<false, 16>, blocks, 256);
        default: return w32 ? go(rms_norm_bf16x8_kernel<true, 32>, blocks, 256) : go(rms_norm_bf16x8_kernel<false, 32>, blocks, 256);
      }
    }
    return w32 ? go(rms_norm_bf16x8_kernel<true, 0>, unsigned(rows), threads)
               : go(rms_norm_bf16x8_kernel<false, 0>, unsigned(rows), threads);
  }
  STRATA_CHECK(is_f32(*sum) == is_f32(x), "rms_norm: the sum ", sum->describe(), " and x ", x.describe(),
               " differ in dtype");
  launch_pdl(rms_norm_kernel, unsigned(rows), norm_threads(d), 0, x.raw(), is_f32(x), resid ? resid->raw() : nullptr,
             resid && is_f32(*resid), sum->raw(), w.raw(), is_f32(w), z ? z->raw() : nullptr, z && is_f32(*z),
             out.raw(), is_f32(out), d, eps, zero_centered);
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, bool zero_centered, const Tensor& out) {
  OpTimer timer_("rms_norm");
  expect_float(x, "rms_norm", "x");
  expect_float(w, "rms_norm", "weight");
  expect_float(out, "rms_norm", "out");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && out.numel() == x.numel(), "rms_norm: weight ", w.describe(),
               " does not match x ", x.describe());
  if (!rows) return;
  launch_norm(x, nullptr, w, nullptr, out, eps, zero_centered);
  check_launch("rms_norm");
}

void add_rms_norm(const Tensor& h, const Tensor& y, const Tensor& w, float eps, bool zero_centered,
                  const Tensor& out) {
  OpTimer timer_("add_rms_norm");
  expect_float(h, "add_rms_norm", "h");
  expect_float(y, "add_rms_norm", "y");
  expect_float(w, "add_rms_norm", "weight");
  expect_float(out, "add_rms_norm", "out");
  const int64_t d = h.dim(-1), rows = rows_of(h);
  STRATA_CHECK(w.numel() == d && out.numel() == h.numel() && y.numel() == h.numel(), "add_rms_norm: h ",
               h.describe(), ", y ", y.describe(), ", weight ", w.describe(), ", out ", out.describe());
  if (!rows) return;
  launch_norm(h, &y, w, nullptr, out, eps, zero_centered);
  check_launch("add_rms_norm");
}

void add_rms_norm_into(const Tensor& h, const Tensor& y, const Tensor& w, float eps, bool zero_centered,
                       const Tensor& sum, const Tensor& x) {
  const char* op = "add_rms_norm";
  for (const Tensor* t : {&h, &y, &w, &sum, &x}) expect_float(*t, op, "h, y, weight, sum and x");
  const int64_t d = h.dim(-1), rows = rows_of(h);
  STRATA_CHECK(w.numel() == d && y.shape() == h.shape() && sum.shape() == h.shape() && x.shape() == h.shape(),
               op, ": h ", h.describe(), ", y ", y.describe(), ", weight ", w.describe(), ", sum ", sum.describe(),
               ", x ", x.describe());
  if (!rows) return;
  launch_norm(h, &y, w, nullptr, x, eps, zero_centered, &sum);
  check_launch(op);
}

void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& out) {
  OpTimer timer_("rms_norm_gated");
  expect_float(x, "rms_norm_gated", "x");
  expect_float(z, "rms_norm_gated", "z");
  expect_float(w, "rms_norm_gated", "weight");
  expect_float(out, "rms_norm_gated", "out");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && z.numel() == x.numel() && out.numel() == x.numel(),
               "rms_norm_gated: shapes differ: x ", x.describe(), " z ", z.describe(), " w ", w.describe());
  if (!rows) return;
  launch_norm(x, nullptr, w, &z, out, eps, false);
  check_launch("rms_norm_gated");
}

void rope(const Tensor& x, const std::vector<int32_t>& positions, const RopeSpec& spec) {
  OpTimer timer_("rope");
  expect_float(x, "rope", "x");
  const int64_t t = x.dim(0), heads = x.dim(1), d = x.dim(2);
  const int half = spec.rotary_dim / 2;
  STRATA_CHECK(x.ndim() == 3 && int64_t(positions.size()) == t && spec.rotary_dim <= d &&
                   int(spec.inv_freq.size()) == half && half <= 256,
               "rope: ", positions.size(), " positions, rotary_dim ", spec.rotary_dim, " for x ", x.describe());
  if (!t) return;
  const RopeParams p = rope_params(spec);
  Tensor keep;
  const int32_t* pos = device_ints(positions, &keep);
  launch_pdl(rope_kernel, unsigned(t), 128, 0, x.raw(), is_f32(x), pos, heads, d, p);
  check_launch("rope");
}

void qk_norm_rope(const Tensor& qg, const Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps,
                  bool zero_centered, const std::vector<int32_t>& positions, const RopeSpec& spec, const Tensor& q,
                  const Tensor& gate) {
  OpTimer timer_("qk_norm_rope");
  const char* op = "qk_norm_rope";
  for (const Tensor* x : {&qg, &k, &q, &gate}) expect_dtype(*x, DType::kBF16, op, "qg, k, q and gate");
  expect_float(q_norm, op, "q_norm");
  expect_float(k_norm, op, "k_norm");
  const int64_t t = qg.dim(0), hq = qg.dim(1), d = q.dim(-1), hkv = k.dim(1);
  const int half = spec.rotary_dim / 2;
  STRATA_CHECK(qg.ndim() == 3 && qg.dim(2) == 2 * d && q.shape() == Shape({t, hq, d}) && gate.numel() == t * hq * d &&
                   k.shape() == Shape({t, hkv, d}) && q_norm.numel() == d && k_norm.numel() == d && d <= 256 &&
                   int64_t(positions.size()) == t && spec.rotary_dim <= d && int(spec.inv_freq.size()) == half,
               op, ": qg ", qg.describe(), ", k ", k.describe(), ", q ", q.describe(), ", rotary_dim ",
               spec.rotary_dim);
  if (!t) return;
  const RopeParams p = rope_params(spec);
  Tensor keep;
  const int32_t* pos = device_ints(positions, &keep);
  if (d % 8 == 0 && aligned16(qg.raw()) && aligned16(k.raw()) && aligned16(q.raw()) && aligned16(gate.raw())) {
    launch_pdl(qk_norm_rope_warp_kernel, unsigned((t * (hq + hkv) + kQkWarps - 1) / kQkWarps), kQkWarps * 32, 0,
               static_cast<const bf16*>(qg.raw()), static_cast<bf16*>(k.raw()), q_norm.raw(), is_f32(q_norm),
               k_norm.raw(), is_f32(k_norm), eps, zero_centered, pos, t, int(hq), int(hkv), int(d), p,
               static_cast<bf16*>(q.raw()), static_cast<bf16*>(gate.raw()));
    check_launch("qk_norm_rope");
    return;
  }
  const unsigned threads = unsigned(std::max<int64_t>(32, (d + 31) / 32 * 32));
  launch_pdl(qk_norm_rope_kernel, dim3(unsigned(t), unsigned(hq + hkv)), threads, 0,
             static_cast<const bf16*>(qg.raw()), static_cast<bf16*>(k.raw()), q_norm.raw(), is_f32(q_norm),
             k_norm.raw(), is_f32(k_norm), eps, zero_centered, pos, int(hq), int(hkv), int(d), p,
             static_cast<bf16*>(q.raw()), static_cast<bf16*>(gate.raw()));
  check_launch("qk_norm_rope");
}

void fill_random_uniform(const Tensor& t, uint64_t seed, float scale) {
  OpTimer timer_("fill_random_uniform");
  if (!t.numel()) return;
  if (t.dtype() == DType::kF8E4M3) {
    launch_pdl(fill_uniform_fp8_kernel, grid_for(t.numel()), 256, 0, t.data<uint8_t>(), t.numel(), seed, scale);
    check_launch("fill_random_uniform");
    return;
  }
  expect_float(t, "fill_random_uniform", "t");
  launch_pdl(fill_uniform_kernel, grid_for(t.numel()), 256, 0, t.raw(), is_f32(t), t.numel(), seed, scale);
  check_launch("fill_random_uniform");
}

namespace {

constexpr int kCopiesPerLaunch = 64;

struct CopyList {
  const char* src[kCopiesPerLaunch];
  char* dst[kCopiesPerLaunch];
  int64_t bytes[kCopiesPerLaunch];
};

// blockIdx.y: the copy; the blocks along x stride over it, 16 bytes a load where both ends
// are aligned to 16 bytes, the rest byte by byte.
__global__ void copy_list_kernel(CopyList l) {
  pdl_begin();
  const int c = blockIdx.y;
  const char* s = l.src[c];
  char* d = l.dst[c];
  const int64_t n = l.bytes[c];
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const bool aligned = ((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15) == 0;
  const int64_t vec = aligned ? n / 16 : 0;
  for (int64_t i = tid; i < vec; i += stride) reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
  for (int64_t i = vec * 16 + tid; i < n; i += stride) d[i] = s[i];
}

}  // namespace

void copy_slots(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies) {
  OpTimer timer_("copy_slots");
  CopyList l{};
  int n = 0;
  int64_t largest = 0;
  auto launch = [&] {
    if (!n) return;
    const unsigned blocks = unsigned(std::min<int64_t>(64, (largest + 4095) / 4096));
    launch_pdl(copy_list_kernel, dim3(std::max(1u, blocks), unsigned(n)), 256, 0, l);
    check_launch("copy_slots");
    n = 0;
    largest = 0;
  };
  for (const Tensor& pool : pools) {
    expect_cuda(pool, "copy_slots", "pool");
    const size_t row = pool.nbytes() / size_t(std::max<int64_t>(pool.dim(0), 1));
    char* base = static_cast<char*>(pool.raw());
    for (const SlotCopy& c : copies) {
      STRATA_CHECK(pool.ndim() >= 1 && c.src >= 0 && c.dst >= 0 && c.src < pool.dim(0) && c.dst < pool.dim(0),
                   "copy_slots: slots ", c.src, " -> ", c.dst, " out of range for pool ", pool.describe());
      if (c.src == c.dst || row == 0) continue;
      l.src[n] = base + size_t(c.src) * row;
      l.dst[n] = base + size_t(c.dst) * row;
      l.bytes[n] = int64_t(row);
      largest = std::max(largest, int64_t(row));
      if (++n == kCopiesPerLaunch) launch();
    }
  }
  launch();
}

void copy_slot(const Tensor& pool, int64_t src, int64_t dst) {
  OpTimer timer_("copy_slot");
  expect_cuda(pool, "copy_slot", "pool");
  STRATA_CHECK(pool.ndim() >= 1 && src >= 0 && dst >= 0 && src < pool.dim(0) && dst < pool.dim(0),
               "copy_slot: slots ", src, " -> ", dst, " out of range for pool ", pool.describe());
  if (src == dst) return;
  const size_t row = pool.nbytes() / size_t(pool.dim(0));
  char* base = static_cast<char*>(pool.raw());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(base + size_t(dst) * row, base + size_t(src) * row, row,
                                    cudaMemcpyDeviceToDevice, stream()));
}

}  // namespace strata::ops::cuda
