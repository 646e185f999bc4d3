#include "strata/io/quantise.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/core/parallel.h"
#include "strata/io/quant.h"

namespace strata {
namespace {

// The code in [0, n) whose value (values[c] increasing in c) is nearest to a >= 0, ties to the
// even code; saturates at the last.
template <size_t N>
int nearest_code(const std::array<float, N>& values, float a) {
  const auto it = std::upper_bound(values.begin(), values.end(), a);
  if (it == values.begin()) return 0;
  const int lo = int(it - values.begin()) - 1;
  if (lo + 1 == int(N)) return lo;
  const float d_lo = a - values[size_t(lo)], d_hi = values[size_t(lo) + 1] - a;
  if (d_lo != d_hi) return d_lo < d_hi ? lo : lo + 1;
  return lo % 2 == 0 ? lo : lo + 1;
}

const std::array<float, 127>& e4m3_magnitudes() {  // codes 0 .. 0x7e (0x7f is NaN)
  static const std::array<float, 127> v = [] {
    std::array<float, 127> m{};
    for (int c = 0; c < 127; ++c) m[size_t(c)] = f8e4m3_to_f32(uint8_t(c));
    return m;
  }();
  return v;
}

const std::array<float, 8>& e2m1_magnitudes() {
  static const std::array<float, 8> v = [] {
    std::array<float, 8> m{};
    for (int c = 0; c < 8; ++c) m[size_t(c)] = f4e2m1_to_f32(uint8_t(c));
    return m;
  }();
  return v;
}

void check_matrix(const Tensor& w, const std::string& name) {
  STRATA_CHECK(w.dtype() == DType::kF32 && w.shape().size() == 2, name, ": quantise a F32 matrix, got ",
               w.describe());
  const float* p = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    STRATA_CHECK(std::isfinite(p[i]), name, ": element ", i, " is not finite (", p[i], ")");
  }
}

}  // namespace

uint8_t f32_to_e4m3(float x) {
  const int c = nearest_code(e4m3_magnitudes(), std::fabs(x));
  return uint8_t(c | (x < 0 && c ? 0x80 : 0));
}

uint8_t f32_to_e2m1(float x) {
  const int c = nearest_code(e2m1_magnitudes(), std::fabs(x));
  return uint8_t(c | (x < 0 && c ? 8 : 0));
}

Fp8BlockWeight quantise_fp8_block(const Tensor& w32, int block_rows, int block_cols, const std::string& name) {
  check_matrix(w32, name);
  const int64_t n = w32.dim(0), k = w32.dim(1), bn = (n + block_rows - 1) / block_rows,
                bk = (k + block_cols - 1) / block_cols;
  Fp8BlockWeight q{Tensor::empty({n, k}, DType::kF8E4M3), Tensor::empty({bn, bk}, DType::kF32)};
  const float* w = w32.data<float>();
  auto* code = static_cast<uint8_t*>(q.weight.raw());
  float* scales = q.scale_inv.data<float>();
  parallel_for(bn, [&](int64_t bi) {
    const int64_t r0 = bi * block_rows, r1 = std::min(n, r0 + block_rows);
    for (int64_t bj = 0; bj < bk; ++bj) {
      const int64_t c0 = bj * block_cols, c1 = std::min(k, c0 + block_cols);
      float amax = 0;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(w[i * k + j]));
      }
      const float scale = amax > 0 ? amax / 448.f : 1.f;
      scales[bi * bk + bj] = scale;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) code[i * k + j] = f32_to_e4m3(std::clamp(w[i * k + j] / scale, -448.f, 448.f));
      }
    }
  });
  return q;
}

Nvfp4Weight quantise_nvfp4(const Tensor& w32, const std::string& name) {
  check_matrix(w32, name);
  const int64_t n = w32.dim(0), k = w32.dim(1), groups = k / kNvfp4Group;
  STRATA_CHECK(k % kNvfp4Group == 0, name, ": NVFP4 needs rows of a multiple of ", kNvfp4Group, " elements, got ",
               w32.describe());
  const float* w = w32.data<float>();
  float amax = 0;
  for (int64_t i = 0; i < n * k; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float g = amax > 0 ? amax / (6.f * 448.f) : 1.f;
  Nvfp4Weight q{Tensor::zeros({n, k / 2}, DType::kU8), Tensor::empty({n, groups}, DType::kF8E4M3),
                Tensor::empty({}, DType::kF32)};
  q.global.data<float>()[0] = g;
  auto* code = static_cast<uint8_t*>(q.packed.raw());
  auto* sc = static_cast<uint8_t*>(q.scale.raw());
  parallel_for(n, [&](int64_t i) {
    for (int64_t b = 0; b < groups; ++b) {
      float bmax = 0;
      for (int64_t j = b * kNvfp4Group; j < (b + 1) * kNvfp4Group; ++j) bmax = std::max(bmax, std::fabs(w[i * k + j]));
      sc[i * groups + b] = f32_to_e4m3(std::min(bmax / (6.f * g), 448.f));
      const float s = f8e4m3_to_f32(sc[i * groups + b]) * g;
      for (int64_t j = b * kNvfp4Group; j < (b + 1) * kNvfp4Group; ++j) {
        const uint8_t c = s > 0 ? f32_to_e2m1(w[i * k + j] / s) : 0;
        code[i * (k / 2) + j / 2] |= uint8_t(j % 2 ? c << 4 : c);
      }
    }
  });
  return q;
}

Mxfp4Weight quantise_mxfp4(const Tensor& w32, const std::string& name) {
  check_matrix(w32, name);
  const int64_t n = w32.dim(0), k = w32.dim(1), groups = k / kMxfp4Group;
  STRATA_CHECK(k % kMxfp4Group == 0, name, ": MXFP4 needs rows of a multiple of ", kMxfp4Group, " elements, got ",
               w32.describe());
  const float* w = w32.data<float>();
  Mxfp4Weight q{Tensor::zeros({n, k / 2}, DType::kU8), Tensor::empty({n, groups}, DType::kU8)};
  auto* code = static_cast<uint8_t*>(q.packed.raw());
  auto* sc = static_cast<uint8_t*>(q.scale.raw());
  parallel_for(n, [&](int64_t i) {
    for (int64_t b = 0; b < groups; ++b) {
      float bmax = 0;
      for (int64_t j = b * kMxfp4Group; j < (b + 1) * kMxfp4Group; ++j) bmax = std::max(bmax, std::fabs(w[i * k + j]));
      int e = 0;
      if (bmax > 0) {
        int exp2 = 0;
        std::frexp(bmax, &exp2);  // bmax in [2^(exp2 - 1), 2^exp2): floor(log2) = exp2 - 1
        e = std::clamp(exp2 - 1 - 2, -127, 127);
      }
      sc[i * groups + b] = uint8_t(e + 127);
      const float inv = std::ldexp(1.f, -e);
      for (int64_t j = b * kMxfp4Group; j < (b + 1) * kMxfp4Group; ++j) {
        const uint8_t c = f32_to_e2m1(w[i * k + j] * inv);
        code[i * (k / 2) + j / 2] |= uint8_t(j % 2 ? c << 4 : c);
      }
    }
  });
  return q;
}

}  // namespace strata
