// Helpers for the CUDA-against-CPU tests: inputs rounded to bf16 so that both devices see the
// same values, comparisons with a bf16 tolerance, and a skip when there is no GPU.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/core/tensor.h"
#include "strata/ops/ops.h"
#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/cuda_ops.h"
#endif

namespace strata::testing {

#if defined(STRATA_WITH_CUDA)
#define STRATA_REQUIRE_GPU() \
  if (!::strata::ops::cuda::available()) GTEST_SKIP() << "no CUDA device"
#else
#define STRATA_REQUIRE_GPU() GTEST_SKIP() << "no CUDA device (built without CUDA)"
#endif

// A CPU F32 tensor of normal(0, scale) values rounded to bf16.
inline Tensor rand_bf16_values(Shape shape, std::mt19937& rng, float scale = 1.f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(d(rng)));
  return t;
}

// GDN log decays: -|normal(0, scale)| - 0.01, rounded to bf16 before the sign and offset.
inline Tensor negative_gates(Shape shape, std::mt19937& rng, float scale = 0.5f) {
  Tensor g = rand_bf16_values(std::move(shape), rng, scale);
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = -std::fabs(g.data<float>()[i]) - 0.01f;
  return g;
}

// Values in (0, 1): the sigmoid of bf16-rounded normal(0, 1) draws (GDN betas).
inline Tensor unit_interval(Shape shape, std::mt19937& rng) {
  Tensor b = rand_bf16_values(std::move(shape), rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = 1.f / (1.f + std::exp(-b.data<float>()[i]));
  return b;
}

// The CPU F32 tensor t on the GPU as `dtype` (BF16 rounds; t holds bf16 values already).
inline Tensor to_gpu(const Tensor& t, DType dtype = DType::kBF16) {
  if (dtype == DType::kF32 || t.dtype() != DType::kF32) return t.to(Device::kCuda);
  Tensor h = Tensor::empty(t.shape(), DType::kBF16);
  for (int64_t i = 0; i < t.numel(); ++i) h.data<uint16_t>()[i] = f32_to_bf16(t.data<float>()[i]);
  return h.to(Device::kCuda);
}

// A GPU tensor back on the CPU as F32.
inline Tensor to_host_f32(const Tensor& t) { return t.to(Device::kCpu).to_f32(); }

// State pools of random bytes, one per shape (a two-dimensional shape U8, so its slots need not be
// 16-byte aligned; others F32), on the CPU in `host` and copied to the GPU in `gpu`.
inline void random_byte_pools(const std::vector<Shape>& shapes, std::mt19937& rng, std::vector<Tensor>& host,
                              std::vector<Tensor>& gpu) {
  for (const Shape& sh : shapes) {
    Tensor t = Tensor::empty(sh, sh.size() == 2 ? DType::kU8 : DType::kF32, Device::kCpu);
    auto* b = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) b[i] = uint8_t(rng());
    host.push_back(t);
    gpu.push_back(t.to(Device::kCuda));
  }
}

// max |a - b| / max(1, max |b|): error relative to the reference's scale.
inline double rel_err(const Tensor& got, const Tensor& ref) {
  EXPECT_EQ(got.numel(), ref.numel());
  double m = 0, scale = 1;
  for (int64_t i = 0; i < ref.numel(); ++i) scale = std::max(scale, double(std::fabs(ref.data<float>()[i])));
  for (int64_t i = 0; i < std::min(got.numel(), ref.numel()); ++i) {
    const double d = std::fabs(double(got.data<float>()[i]) - ref.data<float>()[i]);
    m = std::max(m, std::isnan(d) ? INFINITY : d);
  }
  return m / scale;
}

// max |got - ref| / max |ref| (no floor: for outputs much smaller than 1; NaN counts as infinite).
inline double scaled_err(const Tensor& got, const Tensor& ref) {
  double m = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    scale = std::max(scale, double(std::fabs(ref.data<float>()[i])));
    const double d = std::fabs(double(got.data<float>()[i]) - ref.data<float>()[i]);
    m = std::max(m, std::isnan(d) ? INFINITY : d);
  }
  return m / scale;
}

// bf16 activations: a handful of roundings of 2^-8 relative each.
constexpr double kBf16Tol = 2e-2;

// rel_err(got, ref) <= tolerance (got on any device, ref on the CPU), the measured error printed
// for the record.
inline void expect_close(const Tensor& got, const Tensor& ref, double tolerance, const std::string& what) {
  const double e = rel_err(to_host_f32(got), ref);
  std::printf("  cuda %-66s rel err %.3g (tolerance %.3g)\n", what.c_str(), e, tolerance);
  EXPECT_LE(e, tolerance) << what;
}

// Exact equality of two integer tensors (any devices), the count of differences printed.
template <class T>
void expect_same_ints(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = got.to(Device::kCpu), w = want.to(Device::kCpu);
  ASSERT_EQ(g.shape(), w.shape()) << what;
  int64_t diffs = 0, first = -1;
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (g.data<T>()[i] != w.data<T>()[i]) {
      if (first < 0) first = i;
      ++diffs;
    }
  }
  std::printf("  cuda %-66s %lld of %lld differ\n", what.c_str(), (long long)diffs, (long long)w.numel());
  EXPECT_EQ(diffs, 0) << what << ": first difference at " << first << " (got "
                      << (first >= 0 ? int64_t(g.data<T>()[first]) : 0) << ", want "
                      << (first >= 0 ? int64_t(w.data<T>()[first]) : 0) << ")";
}

// max(1, rms of ref): the scale of a fixture's reference logits, the unit of the model-level
// bf16 tolerances.
inline double reference_scale(const Tensor& ref) {
  double sq = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) sq += double(ref.data<float>()[i]) * ref.data<float>()[i];
  return std::max(1.0, std::sqrt(sq / double(ref.numel())));
}

// A model's logits [T, vocab] against a reference: the largest error, the rms error, and the
// median over positions of each position's largest error.
struct ErrorProfile {
  double max = 0, rms = 0, median_position_max = 0;
};

inline ErrorProfile error_profile(const Tensor& got, const Tensor& ref) {
  const int64_t rows = ref.dim(0), cols = ref.dim(1);
  ErrorProfile p;
  std::vector<double> per_pos(size_t(rows), 0.0);
  double sq = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double d = std::fabs(double(got.data<float>()[r * cols + c]) - ref.data<float>()[r * cols + c]);
      per_pos[size_t(r)] = std::max(per_pos[size_t(r)], d);
      sq += d * d;
    }
  }
  p.rms = std::sqrt(sq / double(rows * cols));
  p.max = *std::max_element(per_pos.begin(), per_pos.end());
  std::nth_element(per_pos.begin(), per_pos.begin() + rows / 2, per_pos.end());
  p.median_position_max = per_pos[size_t(rows / 2)];
  return p;
}

// The fused Gated DeltaNet step's inputs (ops::gdn_decode_step) for a batch of t tokens over
// `slots` state slots: hk key heads of dk, hv value heads of dv, conv width kw; random bf16
// values on the CPU (the conv weights scaled by 0.5, the state by 0.1). run() steps the CPU op
// (outputs into ref, its states updated in place) and the GPU op on the given GPU states (its
// outputs, bf16, into got).
struct GdnStepInputs {
  Tensor qkv, z, a, b, conv_w, a_log, dt, norm_w, conv_state, state;
  GdnStepInputs(std::mt19937& rng, int64_t t, int64_t slots, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
                int64_t kw) {
    const int64_t conv_dim = 2 * hk * dk + hv * dv;
    qkv = rand_bf16_values({t, conv_dim}, rng);
    z = rand_bf16_values({t, hv, dv}, rng);
    a = rand_bf16_values({t, hv}, rng);
    b = rand_bf16_values({t, hv}, rng);
    conv_w = rand_bf16_values({conv_dim, kw}, rng, 0.5f);
    a_log = rand_bf16_values({hv}, rng);
    dt = rand_bf16_values({hv}, rng);
    norm_w = rand_bf16_values({dv}, rng);
    conv_state = rand_bf16_values({slots, kw - 1, conv_dim}, rng);
    state = rand_bf16_values({slots, hv, dk, dv}, rng, 0.1f);
  }
  void run(const ForwardBatch& batch, const Tensor& ref, const Tensor& gpu_conv_state, const Tensor& gpu_state,
           const Tensor& got) const {
    ops::gdn_decode_step(qkv, z, a, b, conv_w, conv_state, a_log, dt, state, norm_w, 1e-6f, batch, ref);
    ops::gdn_decode_step(to_gpu(qkv), to_gpu(z), to_gpu(a), to_gpu(b), to_gpu(conv_w), gpu_conv_state,
                         to_gpu(a_log, DType::kF32), to_gpu(dt, DType::kF32), gpu_state, to_gpu(norm_w, DType::kF32),
                         1e-6f, batch, got);
  }
};

}  // namespace strata::testing
