// CUDA: the elementwise and row ops of the dense vocabulary (embedding, gathers and column
// splits, adds and gates, RMSNorm variants, rotary embeddings, random fill).
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
  const int64_t r = blockIdx.x;
  const int64_t s = idx[r];
  if (s < 0 || s >= src_rows) return;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    stf(dst, dst_f32, r * d + c, ldf(src, src_f32, s * d + c));
  }
}

__global__ void split_columns_kernel(const void* x, bool x_f32, int64_t rows, int64_t c, SplitOuts o) {
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
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t * n; i += int64_t(gridDim.x) * blockDim.x) {
    stf(o, o32, i, ldf(x, x32, (i / n) * c + col0 + i % n));
  }
}

__global__ void add_kernel(const void* a, bool a32, const void* b, bool b32, void* out, bool o32, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    stf(out, o32, i, ldf(a, a32, i) + ldf(b, b32, i));
  }
}

// x *= sigmoid(gate) (per element, or per row when per_row); with add_to, y += x * sigmoid(gate).
__global__ void gate_kernel(void* y, bool y32, const void* x, bool x32, const void* gate, bool g32,
                            int64_t n, int64_t d, bool per_row, bool add_to) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float s = sigmoid_f(ldf(gate, g32, per_row ? i / d : i));
    if (add_to) {
      stf(y, y32, i, ldf(y, y32, i) + ldf(x, x32, i) * s);
    } else {
      stf(y, y32, i, ldf(y, y32, i) * s);
    }
  }
}

__global__ void silu_mul_kernel(const void* gu, bool g32, void* out, bool o32, int64_t rows, int64_t inter) {
  const int64_t n = rows * inter;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    stf(out, o32, i, silu_f(ldf(gu, g32, r * 2 * inter + c)) * ldf(gu, g32, r * 2 * inter + inter + c));
  }
}

// One block per row. With residual: h += y first (rounded to h's dtype), then the norm of h.
// With gate: out = norm(x) * w * silu(z). Each thread re-reads only elements it wrote.
__global__ void rms_norm_kernel(void* x, bool x32, const void* resid, bool r32, const void* w, bool w32,
                                const void* z, bool z32, void* out, bool o32, int64_t d, float eps,
                                bool zero_centered) {
  __shared__ float red[32];
  const int64_t base = int64_t(blockIdx.x) * d;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float v = ldf(x, x32, base + c);
    if (resid) {
      v += ldf(resid, r32, base + c);
      stf(x, x32, base + c, v);
      v = ldf(x, x32, base + c);  // the rounded sum, as the next layer sees it
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, red) / float(d) + eps);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float v = ldf(x, x32, base + c) * inv;
    float wc = ldf(w, w32, c);
    if (zero_centered) wc += 1.f;
    float o = v * wc;
    if (z) o *= silu_f(ldf(z, z32, base + c));
    stf(out, o32, base + c, o);
  }
}

struct RopeParams {
  float inv_freq[256];
  int half;
  float scaling;
};

__global__ void rope_kernel(void* x, bool x32, const int32_t* positions, int64_t heads, int64_t d,
                            RopeParams p) {
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

__global__ void fill_uniform_kernel(void* t, bool f32, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    stf(t, f32, i, random_uniform_value(seed, uint64_t(i), scale));
  }
}

unsigned grid_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, int64_t(sm_count()) * 16)));
}

int norm_threads(int64_t d) { return d >= 1024 ? 512 : d >= 256 ? 256 : d >= 128 ? 128 : 64; }

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
  gather_rows_kernel<<<unsigned(ids.size()), 256, 0, stream()>>>(table.raw(), is_f32(table), vocab, d_ids,
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
  gather_rows_kernel<<<unsigned(rows.size()), 256, 0, stream()>>>(x.raw(), is_f32(x), n, d_rows, out.raw(),
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
  split_columns_kernel<<<grid_for(rows * c), 256, 0, stream()>>>(x.raw(), is_f32(x), rows, c, o);
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
  copy_columns_kernel<<<grid_for(t * n), 256, 0, stream()>>>(x.raw(), is_f32(x), c, col0, out.raw(),
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
  add_kernel<<<grid_for(a.numel()), 256, 0, stream()>>>(a.raw(), is_f32(a), b.raw(), is_f32(b), out.raw(),
                                                        is_f32(out), a.numel());
  check_launch("add");
}

void mul_sigmoid(const Tensor& x, const Tensor& gate) {
  OpTimer timer_("mul_sigmoid");
  expect_float(x, "mul_sigmoid", "x");
  expect_float(gate, "mul_sigmoid", "gate");
  const int64_t rows = rows_of(x), d = x.ndim() ? x.dim(-1) : 0;
  STRATA_CHECK(x.numel() == gate.numel() || gate.numel() == rows, "mul_sigmoid: gate ", gate.describe(),
               " does not fit x ", x.describe());
  if (!x.numel()) return;
  gate_kernel<<<grid_for(x.numel()), 256, 0, stream()>>>(x.raw(), is_f32(x), nullptr, false, gate.raw(),
                                                         is_f32(gate), x.numel(), d,
                                                         gate.numel() != x.numel(), false);
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
  gate_kernel<<<grid_for(x.numel()), 256, 0, stream()>>>(y.raw(), is_f32(y), x.raw(), is_f32(x), gate.raw(),
                                                         is_f32(gate), x.numel(), d, true, true);
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
  silu_mul_kernel<<<grid_for(out.numel()), 256, 0, stream()>>>(gate_up.raw(), is_f32(gate_up), out.raw(),
                                                               is_f32(out), t, inter);
  check_launch("silu_mul");
}

void rms_norm(const Tensor& x, const Tensor& w, float eps, bool zero_centered, const Tensor& out) {
  OpTimer timer_("rms_norm");
  expect_float(x, "rms_norm", "x");
  expect_float(w, "rms_norm", "weight");
  expect_float(out, "rms_norm", "out");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && out.numel() == x.numel(), "rms_norm: weight ", w.describe(),
               " does not match x ", x.describe());
  if (!rows) return;
  rms_norm_kernel<<<unsigned(rows), norm_threads(d), 0, stream()>>>(
      x.raw(), is_f32(x), nullptr, false, w.raw(), is_f32(w), nullptr, false, out.raw(), is_f32(out), d, eps,
      zero_centered);
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
  rms_norm_kernel<<<unsigned(rows), norm_threads(d), 0, stream()>>>(
      h.raw(), is_f32(h), y.raw(), is_f32(y), w.raw(), is_f32(w), nullptr, false, out.raw(), is_f32(out), d,
      eps, zero_centered);
  check_launch("add_rms_norm");
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
  rms_norm_kernel<<<unsigned(rows), norm_threads(d), 0, stream()>>>(
      x.raw(), is_f32(x), nullptr, false, w.raw(), is_f32(w), z.raw(), is_f32(z), out.raw(), is_f32(out), d,
      eps, false);
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
  RopeParams p{};
  for (int j = 0; j < half; ++j) p.inv_freq[j] = spec.inv_freq[j];
  p.half = half;
  p.scaling = spec.attention_scaling;
  Tensor keep;
  const int32_t* pos = device_ints(positions, &keep);
  rope_kernel<<<unsigned(t), 128, 0, stream()>>>(x.raw(), is_f32(x), pos, heads, d, p);
  check_launch("rope");
}

void fill_random_uniform(const Tensor& t, uint64_t seed, float scale) {
  OpTimer timer_("fill_random_uniform");
  expect_float(t, "fill_random_uniform", "t");
  if (!t.numel()) return;
  fill_uniform_kernel<<<grid_for(t.numel()), 256, 0, stream()>>>(t.raw(), is_f32(t), t.numel(), seed, scale);
  check_launch("fill_random_uniform");
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
