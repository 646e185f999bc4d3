// CPU reference: grouped and gated norms, the gated-residual hyper-connections and the PLE gate
// of the Qwen4-Exp family (fp32).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::ops {
namespace {

inline float silu(float x) { return x / (1.f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// Checks x [T, S*H] against `streams` and returns H.
int64_t stream_width(const Tensor& x, int streams, const char* op, const char* what) {
  expect_cpu_f32(x, op, what);
  STRATA_CHECK(streams > 0 && x.ndim() >= 1 && x.dim(-1) % streams == 0, op, ": ", what, " ",
               x.describe(), " does not split into ", streams, " streams");
  return x.dim(-1) / streams;
}

}  // namespace

void rms_norm_grouped(const Tensor& x, const Tensor& w, int64_t group, float eps, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, rms_norm_grouped(x, w, group, eps, out));
  expect_cpu_f32(x, "rms_norm_grouped", "x");
  expect_cpu_f32(w, "rms_norm_grouped", "weight");
  expect_cpu_f32(out, "rms_norm_grouped", "out");
  const int64_t c = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(group > 0 && c % group == 0 && w.numel() == c && out.numel() == x.numel(),
               "rms_norm_grouped: x ", x.describe(), ", weight ", w.describe(), ", group ", group);
  const int64_t groups = c / group;
  parallel_for(rows * groups, [&](int64_t job) {
    const int64_t off = job * group;
    const float* xr = x.data<float>() + off;
    float* o = out.data<float>() + off;
    const float* pw = w.data<float>() + (job % groups) * group;
    double ss = 0;
    for (int64_t i = 0; i < group; ++i) ss += double(xr[i]) * xr[i];
    const float inv = 1.f / std::sqrt(float(ss / group) + eps);
    for (int64_t i = 0; i < group; ++i) o[i] = xr[i] * inv * (1.f + pw[i]);
  });
}

void rms_norm_gated_act(const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                        GateActivation act, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, rms_norm_gated_act(x, z, w, eps, act, out));
  expect_cpu_f32(x, "rms_norm_gated_act", "x");
  expect_cpu_f32(z, "rms_norm_gated_act", "z");
  expect_cpu_f32(w, "rms_norm_gated_act", "weight");
  expect_cpu_f32(out, "rms_norm_gated_act", "out");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && z.numel() == x.numel() && out.numel() == x.numel(),
               "rms_norm_gated_act: shapes differ: x ", x.describe(), " z ", z.describe(), " w ",
               w.describe());
  const bool use_sigmoid = act == GateActivation::kSigmoid;
  parallel_for(rows, [&](int64_t r) {
    const float* xr = x.data<float>() + r * d;
    const float* zr = z.data<float>() + r * d;
    float* o = out.data<float>() + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = 1.f / std::sqrt(float(ss / d) + eps);
    const float* pw = w.data<float>();
    for (int64_t i = 0; i < d; ++i) {
      o[i] = pw[i] * (xr[i] * inv) * (use_sigmoid ? sigmoid(zr[i]) : silu(zr[i]));
    }
  });
}

void hc_expand(const Tensor& x, int streams, const Tensor& out) {
  STRATA_CUDA_DISPATCH(x, hc_expand(x, streams, out));
  expect_cpu_f32(x, "hc_expand", "x");
  const int64_t h = stream_width(out, streams, "hc_expand", "out"), t = rows_of(out);
  STRATA_CHECK(x.dim(-1) == h && rows_of(x) == t, "hc_expand: x ", x.describe(), " into ",
               out.describe());
  for (int64_t r = 0; r < t; ++r) {
    for (int s = 0; s < streams; ++s) {
      std::memcpy(out.data<float>() + (r * streams + s) * h, x.data<float>() + r * h,
                  h * sizeof(float));
    }
  }
}

void hc_lowrank_act(const Tensor& x, int streams) {
  STRATA_CUDA_DISPATCH(x, hc_lowrank_act(x, streams));
  expect_cpu_f32(x, "hc_lowrank_act", "x");
  STRATA_CHECK(streams > 0, "hc_lowrank_act: ", streams, " streams");
  const float div = float(streams);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = silu(p[i] / div);
}

void hc_mix(const Tensor& normed, const Tensor& mix_logits, int streams, const Tensor& out) {
  STRATA_CUDA_DISPATCH(normed, hc_mix(normed, mix_logits, streams, out));
  const int64_t h = stream_width(normed, streams, "hc_mix", "normed"), t = rows_of(normed);
  expect_cpu_f32(mix_logits, "hc_mix", "mix_logits");
  expect_cpu_f32(out, "hc_mix", "out");
  STRATA_CHECK(mix_logits.numel() == normed.numel() && out.dim(-1) == h && rows_of(out) == t,
               "hc_mix: normed ", normed.describe(), ", mix ", mix_logits.describe(), ", out ",
               out.describe());
  const float div = float(streams);
  parallel_for(t, [&](int64_t r) {
    const float* n = normed.data<float>() + r * streams * h;
    const float* m = mix_logits.data<float>() + r * streams * h;
    float* o = out.data<float>() + r * h;
    for (int64_t i = 0; i < h; ++i) {
      float acc = 0.f;
      for (int s = 0; s < streams; ++s) acc += sigmoid(m[s * h + i]) * n[s * h + i];
      o[i] = acc / div;
    }
  });
}

void hc_inject_weights(const Tensor& logits, int streams) {
  STRATA_CUDA_DISPATCH(logits, hc_inject_weights(logits, streams));
  expect_cpu_f32(logits, "hc_inject_weights", "logits");
  STRATA_CHECK(streams > 0 && logits.dim(-1) == streams, "hc_inject_weights: logits ",
               logits.describe(), " for ", streams, " streams");
  const float div = float(streams);
  float* p = logits.data<float>();
  for (int64_t i = 0; i < logits.numel(); ++i) p[i] = 2.f * sigmoid(p[i] / div);
}

void hc_write(const Tensor& residual, const Tensor& block_out, const Tensor& inject) {
  STRATA_CUDA_DISPATCH(residual, hc_write(residual, block_out, inject));
  expect_cpu_f32(inject, "hc_write", "inject");
  expect_cpu_f32(block_out, "hc_write", "block_out");
  const int streams = int(inject.dim(-1));
  const int64_t h = stream_width(residual, streams, "hc_write", "residual"), t = rows_of(residual);
  STRATA_CHECK(block_out.dim(-1) == h && rows_of(block_out) == t && rows_of(inject) == t,
               "hc_write: residual ", residual.describe(), ", block_out ", block_out.describe(),
               ", inject ", inject.describe());
  parallel_for(t, [&](int64_t r) {
    const float* b = block_out.data<float>() + r * h;
    for (int s = 0; s < streams; ++s) {
      const float w = inject.data<float>()[r * streams + s];
      float* x = residual.data<float>() + (r * streams + s) * h;
      for (int64_t i = 0; i < h; ++i) x[i] += b[i] * w;
    }
  });
}

void ple_gate(const Tensor& key, const Tensor& query, const Tensor& value, int streams,
              const Tensor& out) {
  STRATA_CUDA_DISPATCH(key, ple_gate(key, query, value, streams, out));
  const int64_t h = stream_width(key, streams, "ple_gate", "key"), t = rows_of(key);
  expect_cpu_f32(query, "ple_gate", "query");
  expect_cpu_f32(value, "ple_gate", "value");
  expect_cpu_f32(out, "ple_gate", "out");
  STRATA_CHECK(query.numel() == key.numel() && out.numel() == key.numel() && value.dim(-1) == h &&
                   rows_of(value) == t,
               "ple_gate: key ", key.describe(), ", query ", query.describe(), ", value ",
               value.describe(), ", out ", out.describe());
  const float root = std::sqrt(float(h));
  parallel_for(t * streams, [&](int64_t job) {
    const int64_t r = job / streams;
    const float* k = key.data<float>() + job * h;
    const float* q = query.data<float>() + job * h;
    float dot = 0.f;
    for (int64_t i = 0; i < h; ++i) dot += k[i] * q[i];
    const float g = dot / root;
    const float sign = g > 0.f ? 1.f : (g < 0.f ? -1.f : 0.f);
    const float gate = sigmoid(std::sqrt(std::max(std::fabs(g), 1e-6f)) * sign);
    const float* v = value.data<float>() + r * h;
    float* o = out.data<float>() + job * h;
    for (int64_t i = 0; i < h; ++i) o[i] = gate * v[i];
  });
}

}  // namespace strata::ops
