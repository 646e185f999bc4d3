// CPU reference: dense ops, norms and rotary embeddings (fp32).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {
namespace {

inline float silu(float x) { return x / (1.f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace

void linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  STRATA_CUDA_DISPATCH(x, linear(x, w, y));
  expect_cpu_f32(x, "linear", "x");
  expect_cpu_f32(w, "linear", "weight");
  expect_cpu_f32(y, "linear", "y");
  const int64_t k = w.dim(1), n = w.dim(0), t = rows_of(x);
  STRATA_CHECK(w.ndim() == 2 && x.dim(-1) == k, "linear: x ", x.describe(), " does not match weight ",
               w.describe());
  STRATA_CHECK(rows_of(y) == t && y.dim(-1) == n, "linear: y ", y.describe(), " should be [", t,
               ", ", n, "]");
  if (t == 0) return;
  // Each output element is one fixed-order dot product over K, whatever the batch: a request's
  // logits must not change with what else is batched (engine invariance). Rows and fixed blocks
  // of output features are spread over the cores; OpenBLAS itself runs single-threaded here.
  static const bool kSingleThreadedBlas = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)kSingleThreadedBlas;
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(t * blocks, [&](int64_t job) {
    const int64_t r = job / blocks, n0 = (job % blocks) * kBlock, nn = std::min(kBlock, n - n0);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(nn), int(k), 1.f, w.data<float>() + n0 * k,
                int(k), x.data<float>() + r * k, 1, 0.f, y.data<float>() + r * n + n0, 1);
  });
}

void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& out) {
  STRATA_CUDA_DISPATCH(out, embedding(table, ids, out));
  expect_cpu_f32(out, "embedding", "out");
  const int64_t h = table.dim(1), vocab = table.dim(0);
  expect_shape(out, {int64_t(ids.size()), h}, "embedding", "out");
  STRATA_CHECK(table.device() == Device::kCpu, "embedding: table not on the CPU");
  for (size_t i = 0; i < ids.size(); ++i) {
    STRATA_CHECK(ids[i] >= 0 && ids[i] < vocab, "token id ", ids[i], " out of range [0, ", vocab, ")");
    to_f32(table.dtype(), static_cast<const char*>(table.raw()) + ids[i] * h * dtype_size(table.dtype()),
           out.data<float>() + i * h, size_t(h));
  }
}

void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, gather_rows(x, rows, out));
  expect_cpu_f32(x, "gather_rows", "x");
  const int64_t d = x.dim(-1), n = rows_of(x);
  expect_shape(out, {int64_t(rows.size()), d}, "gather_rows", "out");
  for (size_t i = 0; i < rows.size(); ++i) {
    STRATA_CHECK(rows[i] >= 0 && rows[i] < n, "gather_rows: row ", rows[i], " out of range");
    std::memcpy(out.data<float>() + i * d, x.data<float>() + rows[i] * d, d * sizeof(float));
  }
}

void copy_columns(const Tensor& x, int64_t col0, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, copy_columns(x, col0, out));
  expect_cpu_f32(x, "copy_columns", "x");
  const int64_t c = x.dim(-1), t = rows_of(x), n = out.dim(-1);
  STRATA_CHECK(rows_of(out) == t && col0 >= 0 && col0 + n <= c, "copy_columns: [", col0, ", +", n,
               ") of ", x.describe(), " into ", out.describe());
  for (int64_t r = 0; r < t; ++r) {
    std::memcpy(out.data<float>() + r * n, x.data<float>() + r * c + col0, n * sizeof(float));
  }
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  STRATA_CUDA_DISPATCH(a, add(a, b, out));
  STRATA_CHECK(a.numel() == b.numel() && a.numel() == out.numel(), "add: sizes differ: ",
               a.describe(), " ", b.describe(), " ", out.describe());
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + pb[i];
}

void mul_sigmoid(const Tensor& x, const Tensor& gate) {
  STRATA_CUDA_DISPATCH(x, mul_sigmoid(x, gate));
  const int64_t rows = rows_of(x), d = x.ndim() ? x.dim(-1) : 0;
  STRATA_CHECK(x.numel() == gate.numel() || gate.numel() == rows, "mul_sigmoid: gate ",
               gate.describe(), " does not fit x ", x.describe());
  float* px = x.data<float>();
  const float* pg = gate.data<float>();
  if (gate.numel() == x.numel()) {
    for (int64_t i = 0; i < x.numel(); ++i) px[i] *= sigmoid(pg[i]);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float s = sigmoid(pg[r]);
      for (int64_t i = 0; i < d; ++i) px[r * d + i] *= s;
    }
  }
}

void silu_mul(const Tensor& gate_up, const Tensor& out) {
  STRATA_CUDA_DISPATCH(out, silu_mul(gate_up, out));
  const int64_t inter = out.dim(-1), t = rows_of(out);
  STRATA_CHECK(gate_up.dim(-1) == 2 * inter && rows_of(gate_up) == t, "silu_mul: ",
               gate_up.describe(), " does not match ", out.describe());
  parallel_for(t, [&](int64_t r) {
    const float* g = gate_up.data<float>() + r * 2 * inter;
    float* o = out.data<float>() + r * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = silu(g[i]) * g[inter + i];
  });
}

void quantize_fp8_rows(const Tensor& x, const Tensor& q) {
  STRATA_CUDA_DISPATCH(x, quantize_fp8_rows(x, q));
  expect_cpu_f32(x, "quantize_fp8_rows", "x");
  constexpr int64_t kGroup = 128;
  const int64_t cols = x.ndim() ? x.dim(-1) : 0, rows = rows_of(x), groups = (cols + kGroup - 1) / kGroup;
  STRATA_CHECK(q.dtype() == DType::kF8E4M3 && q.shape() == x.shape() && q.scaled() && q.scale_group() == kGroup &&
                   q.scale().dtype() == DType::kF32 && q.scale().shape() == Shape({rows, groups}),
               "quantize_fp8_rows: q ", q.describe(), " must be F8_E4M3 of x's shape ", x.describe(),
               " with F32 scales [", rows, ", ", groups, "] per ", kGroup, " columns");
  parallel_for(rows, [&](int64_t r) {
    const float* xr = x.data<float>() + r * cols;
    auto* qr = static_cast<uint8_t*>(q.raw()) + r * cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kGroup, c1 = std::min(cols, c0 + kGroup);
      float amax = 0.f;
      for (int64_t c = c0; c < c1; ++c) amax = std::fmax(amax, std::fabs(xr[c]));
      const float s = std::fmax(amax, 1e-10f) / 448.f;
      for (int64_t c = c0; c < c1; ++c) {
        // A NaN quotient (a NaN in x, or an infinity over an infinite scale) as the GPU's
        // canonical NaN, whatever the sign the CPU gave it.
        const float v = xr[c] / s;
        qr[c] = std::isnan(v) ? uint8_t(0x7f) : f32_to_f8e4m3(v);
      }
      q.scale().data<float>()[r * groups + g] = s;
    }
  });
}

void rms_norm(const Tensor& x, const Tensor& w, float eps, bool zero_centered, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, rms_norm(x, w, eps, zero_centered, out));
  expect_cpu_f32(x, "rms_norm", "x");
  expect_cpu_f32(w, "rms_norm", "weight");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && out.numel() == x.numel(), "rms_norm: weight ", w.describe(),
               " does not match x ", x.describe());
  parallel_for(rows, [&](int64_t r) {
    const float* xr = x.data<float>() + r * d;
    float* o = out.data<float>() + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = 1.f / std::sqrt(float(ss / d) + eps);
    const float* pw = w.data<float>();
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * (zero_centered ? 1.f + pw[i] : pw[i]);
  });
}

void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, rms_norm_gated(x, z, w, eps, out));
  expect_cpu_f32(x, "rms_norm_gated", "x");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && z.numel() == x.numel() && out.numel() == x.numel(),
               "rms_norm_gated: shapes differ: x ", x.describe(), " z ", z.describe(), " w ",
               w.describe());
  parallel_for(rows, [&](int64_t r) {
    const float* xr = x.data<float>() + r * d;
    const float* zr = z.data<float>() + r * d;
    float* o = out.data<float>() + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = 1.f / std::sqrt(float(ss / d) + eps);
    const float* pw = w.data<float>();
    for (int64_t i = 0; i < d; ++i) o[i] = pw[i] * (xr[i] * inv) * silu(zr[i]);
  });
}

void qk_norm_rope(const Tensor& qg, const Tensor& k, const Tensor& q_norm, const Tensor& k_norm,
                  float eps, bool zero_centered, const std::vector<int32_t>& positions,
                  const RopeSpec& spec, const Tensor& q, const Tensor& gate) {
  STRATA_CUDA_DISPATCH(qg, qk_norm_rope(qg, k, q_norm, k_norm, eps, zero_centered, positions, spec, q, gate));
  const int64_t t = qg.dim(0), hq = qg.dim(1), d = q.dim(-1);
  split_columns(qg.reshape({t * hq, 2 * d}), {q.reshape({t * hq, d}), gate.reshape({t * hq, d})});
  rms_norm(q, q_norm, eps, zero_centered, q);
  rms_norm(k, k_norm, eps, zero_centered, k);
  rope(q, positions, spec);
  rope(k, positions, spec);
}

void rope(const Tensor& x, const std::vector<int32_t>& positions, const RopeSpec& spec) {
  STRATA_CUDA_DISPATCH(x, rope(x, positions, spec));
  expect_cpu_f32(x, "rope", "x");
  const int64_t t = x.dim(0), heads = x.dim(1), d = x.dim(2);
  const int half = spec.rotary_dim / 2;
  STRATA_CHECK(int64_t(positions.size()) == t && spec.rotary_dim <= d &&
                   int(spec.inv_freq.size()) == half,
               "rope: ", positions.size(), " positions, rotary_dim ", spec.rotary_dim,
               " for x ", x.describe());
  parallel_for(t, [&](int64_t i) {
    // Angles in float32, as HF computes inv_freq @ position in fp32.
    std::vector<float> cs(half), sn(half);
    for (int j = 0; j < half; ++j) {
      const float angle = float(positions[i]) * spec.inv_freq[j];
      cs[j] = std::cos(angle) * spec.attention_scaling;
      sn[j] = std::sin(angle) * spec.attention_scaling;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data<float>() + (i * heads + h) * d;
      for (int j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * cs[j] - b * sn[j];
        v[j + half] = b * cs[j] + a * sn[j];
      }
    }
  });
}

}  // namespace strata::ops
