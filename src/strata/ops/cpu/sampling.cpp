// CPU reference: greedy and top-k / top-p sampling over logits rows (the threshold definition of
// ops.h, which the device kernels compute the same way).
#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {
namespace {

int32_t argmax_row(const float* l, int64_t v) {
  int64_t best = 0;
  for (int64_t i = 1; i < v; ++i) {
    if (l[i] > l[best]) best = i;
  }
  return int32_t(best);
}

void check_logits(const Tensor& logits, const Tensor& ids, const char* op) {
  expect_cpu_f32(logits, op, "logits");
  STRATA_CHECK(logits.ndim() == 2 && logits.dim(1) > 0, op, ": logits must be [N, V], got ",
               logits.describe());
  STRATA_CHECK(ids.dtype() == DType::kI32 && ids.numel() == logits.dim(0), op, ": ids ",
               ids.describe(), " should be I32[", logits.dim(0), "]");
}

}  // namespace

void argmax(const Tensor& logits, const Tensor& ids) {
  STRATA_CUDA_DISPATCH(logits, argmax(logits, ids));
  check_logits(logits, ids, "argmax");
  const int64_t v = logits.dim(1);
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    ids.data<int32_t>()[r] = argmax_row(logits.data<float>() + r * v, v);
  }
}

void sample(const Tensor& logits, const std::vector<SampleRow>& rows, const Tensor& ids) {
  STRATA_CUDA_DISPATCH(logits, sample(logits, rows, ids));
  check_logits(logits, ids, "sample");
  STRATA_CHECK(int64_t(rows.size()) == logits.dim(0), "sample: ", rows.size(),
               " parameter rows for ", logits.dim(0), " logits rows");
  const int64_t v = logits.dim(1);
  for (const SampleRow& p : rows) {
    STRATA_CHECK(p.uniform >= 0.f && p.uniform < 1.f && p.top_p > 0.f,
                 "sample: uniform must be in [0, 1) and top_p > 0, got ", p.uniform, " and ",
                 p.top_p);
  }
  parallel_for(logits.dim(0), [&](int64_t r) {
    const float* l = logits.data<float>() + r * v;
    const SampleRow& p = rows[r];
    if (p.temperature <= 0.f) {
      ids.data<int32_t>()[r] = argmax_row(l, v);
      return;
    }
    const float inv_t = 1.f / p.temperature;
    float mx = -INFINITY;
    for (int64_t i = 0; i < v; ++i) mx = std::max(mx, l[i] * inv_t);
    std::vector<float> prob(v);
    float sum = 0.f;
    for (int64_t i = 0; i < v; ++i) sum += prob[i] = std::exp(l[i] * inv_t - mx);
    for (int64_t i = 0; i < v; ++i) prob[i] /= sum;
    std::vector<float> sorted(prob);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    // top-k: threshold at the k-th largest value (ties kept).
    float floor_k = 0.f;
    if (p.top_k > 0 && p.top_k < v) floor_k = sorted[p.top_k - 1];
    double kept = 0;
    for (float x : sorted) {
      if (x >= floor_k) kept += x;
    }
    // top-p: the largest tau (a kept value) whose tokens with p >= tau hold top_p of the mass.
    float tau = floor_k;
    if (p.top_p < 1.f) {
      const double target = double(p.top_p) * kept;
      double mass = 0;
      for (size_t i = 0; i < sorted.size() && sorted[i] >= floor_k; ++i) {
        mass += sorted[i];
        // Every token equal to sorted[i] counts once tau reaches it.
        if ((i + 1 == sorted.size() || sorted[i + 1] != sorted[i]) && mass >= target) {
          tau = sorted[i];
          break;
        }
      }
    }
    double total = 0;
    for (int64_t i = 0; i < v; ++i) {
      if (prob[i] >= tau) total += prob[i];
    }
    const double stop = double(p.uniform) * total;
    double run = 0;
    int32_t pick = -1;
    for (int64_t i = 0; i < v; ++i) {
      if (prob[i] < tau) continue;
      pick = int32_t(i);
      run += prob[i];
      if (run > stop) break;
    }
    ids.data<int32_t>()[r] = pick;
  });
}

}  // namespace strata::ops
