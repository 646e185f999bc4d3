// CPU reference for the DeepSeek-V4 dense ops: interleaved tail RoPE, unweighted RMSNorm, the
// mHC hyper-connections (Sinkhorn-Knopp) and the grouped output projection (fp32).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::ops {
namespace {

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// rsqrt(mean(x^2) + eps) of n floats, the sum of squares accumulated in double.
float inv_rms(const float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return 1.f / std::sqrt(float(ss / double(n)) + eps);
}

// m[j] = sum_i fn[j, i] * x[i] * inv for j < rows.
void project_normed(const float* fn, const float* x, int64_t rows, int64_t n, float inv, float* m) {
  for (int64_t j = 0; j < rows; ++j) {
    float acc = 0.f;
    const float* w = fn + j * n;
    for (int64_t i = 0; i < n; ++i) acc += w[i] * (x[i] * inv);
    m[j] = acc;
  }
}

void check_hyper_weights(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
                         int64_t mix, int64_t scales, const char* op) {
  expect_cpu_f32(x, op, "x");
  expect_cpu_f32(fn, op, "fn");
  expect_cpu_f32(base, op, "base");
  expect_cpu_f32(scale, op, "scale");
  const int64_t s = x.dim(1), d = x.dim(2);
  expect_shape(fn, {mix, s * d}, op, "fn");
  expect_shape(base, {mix}, op, "base");
  expect_shape(scale, {scales}, op, "scale");
}

}  // namespace

void rope_interleaved_tail(const Tensor& x, const std::vector<int32_t>& positions,
                           const TailRope& spec, bool inverse) {
  STRATA_CUDA_DISPATCH(x, rope_interleaved_tail(x, positions, spec, inverse));
  expect_cpu_f32(x, "rope_interleaved_tail", "x");
  STRATA_CHECK(x.ndim() == 3, "rope_interleaved_tail: x must be [T, H, D], got ", x.describe());
  const int64_t t = x.dim(0), heads = x.dim(1), d = x.dim(2);
  const int half = spec.rotary_dim / 2;
  STRATA_CHECK(int64_t(positions.size()) == t && spec.rotary_dim % 2 == 0 && spec.rotary_dim <= d &&
                   int(spec.inv_freq.size()) == half,
               "rope_interleaved_tail: ", positions.size(), " positions, rotary_dim ",
               spec.rotary_dim, " with ", spec.inv_freq.size(), " frequencies for x ", x.describe());
  const int64_t nope = d - spec.rotary_dim;
  const float sign = inverse ? -1.f : 1.f;
  parallel_for(t, [&](int64_t i) {
    // Angles in float32, as HF computes inv_freq @ position in fp32.
    std::vector<float> cs(half), sn(half);
    for (int j = 0; j < half; ++j) {
      const float angle = float(positions[i]) * spec.inv_freq[j];
      cs[j] = std::cos(angle) * spec.attention_scaling;
      sn[j] = sign * (std::sin(angle) * spec.attention_scaling);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data<float>() + (i * heads + h) * d + nope;
      for (int j = 0; j < half; ++j) {
        const float a = v[2 * j], b = v[2 * j + 1];
        v[2 * j] = a * cs[j] - b * sn[j];
        v[2 * j + 1] = b * cs[j] + a * sn[j];
      }
    }
  });
}

void rms_norm_unweighted(const Tensor& x, float eps, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, rms_norm_unweighted(x, eps, out));
  expect_cpu_f32(x, "rms_norm_unweighted", "x");
  expect_cpu_f32(out, "rms_norm_unweighted", "out");
  STRATA_CHECK(out.numel() == x.numel() && x.ndim() > 0, "rms_norm_unweighted: out ",
               out.describe(), " does not match x ", x.describe());
  const int64_t d = x.dim(-1), rows = rows_of(x);
  parallel_for(rows, [&](int64_t r) {
    const float* xr = x.data<float>() + r * d;
    float* o = out.data<float>() + r * d;
    const float inv = inv_rms(xr, d, eps);
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv;
  });
}

void sinkhorn_project(float* comb, int s, int iters, float eps) {
  for (int r = 0; r < s; ++r) {  // softmax over each row, + eps
    float* row = comb + r * s;
    const float mx = *std::max_element(row, row + s);
    float sum = 0.f;
    for (int c = 0; c < s; ++c) sum += row[c] = std::exp(row[c] - mx);
    for (int c = 0; c < s; ++c) row[c] = row[c] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int c = 0; c < s; ++c) {
      float sum = 0.f;
      for (int r = 0; r < s; ++r) sum += comb[r * s + c];
      for (int r = 0; r < s; ++r) comb[r * s + c] /= sum + eps;
    }
  };
  auto normalise_rows = [&] {
    for (int r = 0; r < s; ++r) {
      float sum = 0.f;
      for (int c = 0; c < s; ++c) sum += comb[r * s + c];
      for (int c = 0; c < s; ++c) comb[r * s + c] /= sum + eps;
    }
  };
  normalise_columns();
  for (int i = 1; i < iters; ++i) {
    normalise_rows();
    normalise_columns();
  }
}

void hyper_pre(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
               const HyperSpec& spec, const Tensor& collapsed, const Tensor& post,
               const Tensor& comb) {
  STRATA_CUDA_DISPATCH(x, hyper_pre(x, fn, base, scale, spec, collapsed, post, comb));
  STRATA_CHECK(x.ndim() == 3 && x.dim(1) == spec.streams, "hyper_pre: x must be [T, ",
               spec.streams, ", D], got ", x.describe());
  const int64_t t = x.dim(0), s = spec.streams, d = x.dim(2), mix = (2 + s) * s;
  check_hyper_weights(x, fn, base, scale, mix, 3, "hyper_pre");
  expect_shape(collapsed, {t, d}, "hyper_pre", "collapsed");
  expect_shape(post, {t, s}, "hyper_pre", "post");
  expect_shape(comb, {t, s, s}, "hyper_pre", "comb");
  STRATA_CHECK(spec.sinkhorn_iters >= 1, "hyper_pre: sinkhorn_iters must be at least 1");
  const float* b = base.data<float>();
  const float* sc = scale.data<float>();
  parallel_for(t, [&](int64_t i) {
    const float* xi = x.data<float>() + i * s * d;
    std::vector<float> m(mix), pre(s);
    project_normed(fn.data<float>(), xi, mix, s * d, inv_rms(xi, s * d, spec.norm_eps), m.data());
    for (int64_t k = 0; k < s; ++k) pre[k] = sigmoid(m[k] * sc[0] + b[k]) + spec.hc_eps;
    float* po = post.data<float>() + i * s;
    for (int64_t k = 0; k < s; ++k) po[k] = 2.f * sigmoid(m[s + k] * sc[1] + b[s + k]);
    float* cb = comb.data<float>() + i * s * s;
    for (int64_t k = 0; k < s * s; ++k) cb[k] = m[2 * s + k] * sc[2] + b[2 * s + k];
    sinkhorn_project(cb, int(s), spec.sinkhorn_iters, spec.hc_eps);
    float* o = collapsed.data<float>() + i * d;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.f;
      for (int64_t k = 0; k < s; ++k) acc += pre[k] * xi[k * d + c];
      o[c] = acc;
    }
  });
}

void hyper_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, hyper_post(x, y, post, comb, out));
  expect_cpu_f32(x, "hyper_post", "x");
  expect_cpu_f32(y, "hyper_post", "y");
  STRATA_CHECK(x.ndim() == 3, "hyper_post: x must be [T, S, D], got ", x.describe());
  const int64_t t = x.dim(0), s = x.dim(1), d = x.dim(2);
  expect_shape(y, {t, d}, "hyper_post", "y");
  expect_shape(post, {t, s}, "hyper_post", "post");
  expect_shape(comb, {t, s, s}, "hyper_post", "comb");
  expect_shape(out, {t, s, d}, "hyper_post", "out");
  parallel_for(t, [&](int64_t i) {
    const float* xi = x.data<float>() + i * s * d;
    const float* yi = y.data<float>() + i * d;
    const float* po = post.data<float>() + i * s;
    const float* cb = comb.data<float>() + i * s * s;
    std::vector<float> mixed(s * d);
    for (int64_t k = 0; k < s; ++k) {
      for (int64_t c = 0; c < d; ++c) {
        float acc = 0.f;
        for (int64_t j = 0; j < s; ++j) acc += cb[j * s + k] * xi[j * d + c];
        mixed[k * d + c] = po[k] * yi[c] + acc;
      }
    }
    std::copy(mixed.begin(), mixed.end(), out.data<float>() + i * s * d);  // out may alias x
  });
}

void hyper_head(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
                const HyperSpec& spec, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, hyper_head(x, fn, base, scale, spec, out));
  STRATA_CHECK(x.ndim() == 3 && x.dim(1) == spec.streams, "hyper_head: x must be [T, ",
               spec.streams, ", D], got ", x.describe());
  const int64_t t = x.dim(0), s = spec.streams, d = x.dim(2);
  check_hyper_weights(x, fn, base, scale, s, 1, "hyper_head");
  expect_shape(out, {t, d}, "hyper_head", "out");
  parallel_for(t, [&](int64_t i) {
    const float* xi = x.data<float>() + i * s * d;
    std::vector<float> m(s);
    project_normed(fn.data<float>(), xi, s, s * d, inv_rms(xi, s * d, spec.norm_eps), m.data());
    for (int64_t k = 0; k < s; ++k) {
      m[k] = sigmoid(m[k] * scale.data<float>()[0] + base.data<float>()[k]) + spec.hc_eps;
    }
    float* o = out.data<float>() + i * d;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.f;
      for (int64_t k = 0; k < s; ++k) acc += m[k] * xi[k * d + c];
      o[c] = acc;
    }
  });
}

void grouped_linear(const Tensor& x, const Tensor& w, int groups, const Tensor& y) {
  STRATA_CUDA_DISPATCH(x, grouped_linear(x, w, groups, y));
  expect_cpu_f32(x, "grouped_linear", "x");
  expect_cpu_f32(w, "grouped_linear", "weight");
  expect_cpu_f32(y, "grouped_linear", "y");
  STRATA_CHECK(groups > 0 && w.ndim() == 2 && w.dim(0) % groups == 0, "grouped_linear: weight ",
               w.describe(), " does not split into ", groups, " groups");
  const int64_t t = rows_of(x), din = w.dim(1), r = w.dim(0) / groups;
  STRATA_CHECK(x.dim(-1) == groups * din && rows_of(y) == t && y.dim(-1) == groups * r,
               "grouped_linear: x ", x.describe(), " / y ", y.describe(), " do not fit weight ",
               w.describe(), " in ", groups, " groups");
  // One fixed-order dot product per output element, whatever the batch (as ops::linear, with
  // OpenBLAS single-threaded inside the parallel loop).
  static const bool kSingleThreadedBlas = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)kSingleThreadedBlas;
  parallel_for(t * groups, [&](int64_t job) {
    const int64_t row = job / groups, g = job % groups;
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(r), int(din), 1.f, w.data<float>() + g * r * din,
                int(din), x.data<float>() + row * groups * din + g * din, 1, 0.f,
                y.data<float>() + row * groups * r + g * r, 1);
  });
}

}  // namespace strata::ops
