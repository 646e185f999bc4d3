// CPU reference for the DeepSeek-V4 MoE ops: sqrt-softplus routing (learned, with the selection
// bias, or hashed through tid2eid) and the clamped SwiGLU experts (fp32).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cpu/expert_slabs.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::ops {
namespace {

inline float silu(float x) { return x / (1.f + std::exp(-x)); }

// sqrt(softplus(x)) with torch's softplus (beta 1, linear above 20).
inline float sqrt_softplus(float x) { return std::sqrt(x > 20.f ? x : std::log1p(std::exp(x))); }

inline float clamped_swiglu(float gate, float up, float limit) {
  return silu(std::min(gate, limit)) * std::clamp(up, -limit, limit);
}

void check_route_outputs(const Tensor& logits, int top_k, const Tensor& ids, const Tensor& weights,
                         const char* op) {
  expect_cpu_f32(logits, op, "logits");
  STRATA_CHECK(logits.ndim() == 2, op, ": logits must be [T, E], got ", logits.describe());
  const int64_t t = logits.dim(0), e = logits.dim(1);
  STRATA_CHECK(top_k >= 1 && top_k <= e, op, ": top_k ", top_k, " of ", e, " experts");
  STRATA_CHECK(ids.dtype() == DType::kI32 && ids.shape() == Shape({t, top_k}), op, ": ids must be I32 [",
               t, ", ", top_k, "], got ", ids.describe());
  expect_cpu_f32(weights, op, "weights");
  expect_shape(weights, {t, top_k}, op, "weights");
}

// weights[j] = s[ids[j]] / (sum + 1e-20) * scaling.
void normalise(const float* s, const int32_t* id, int k, float scaling, float* w) {
  float total = 0.f;
  for (int j = 0; j < k; ++j) total += w[j] = s[id[j]];
  for (int j = 0; j < k; ++j) w[j] = w[j] / (total + 1e-20f) * scaling;
}

}  // namespace

void moe_route_sqrt_softplus(const Tensor& logits, const Tensor& bias, int top_k, float scaling,
                             const Tensor& ids, const Tensor& weights) {
  STRATA_CUDA_DISPATCH(logits, moe_route_sqrt_softplus(logits, bias, top_k, scaling, ids, weights));
  const char* op = "moe_route_sqrt_softplus";
  check_route_outputs(logits, top_k, ids, weights, op);
  const int64_t t = logits.dim(0), e = logits.dim(1);
  const bool has_bias = bias.defined() && bias.numel() > 0;
  if (has_bias) {
    expect_cpu_f32(bias, op, "bias");
    expect_shape(bias, {e}, op, "bias");
  }
  parallel_for(t, [&](int64_t r) {
    const float* l = logits.data<float>() + r * e;
    std::vector<float> s(static_cast<size_t>(e)), biased(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) {
      s[size_t(i)] = sqrt_softplus(l[i]);
      biased[size_t(i)] = s[size_t(i)] + (has_bias ? bias.data<float>()[i] : 0.f);
    }
    std::vector<int32_t> idx(static_cast<size_t>(e));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(), [&](int32_t a, int32_t b) {
      return biased[size_t(a)] > biased[size_t(b)] || (biased[size_t(a)] == biased[size_t(b)] && a < b);
    });
    int32_t* id = ids.data<int32_t>() + r * top_k;
    std::copy(idx.begin(), idx.begin() + top_k, id);
    normalise(s.data(), id, top_k, scaling, weights.data<float>() + r * top_k);
  });
}

void moe_route_hash(const Tensor& logits, const Tensor& tid2eid,
                    const std::vector<int32_t>& token_ids, float scaling, const Tensor& ids,
                    const Tensor& weights) {
  STRATA_CUDA_DISPATCH(logits, moe_route_hash(logits, tid2eid, token_ids, scaling, ids, weights));
  const char* op = "moe_route_hash";
  STRATA_CHECK(tid2eid.dtype() == DType::kI32 && tid2eid.ndim() == 2 && tid2eid.device() == Device::kCpu,
               op, ": tid2eid must be a CPU I32 [vocab, top_k], got ", tid2eid.describe());
  const int top_k = int(tid2eid.dim(1));
  check_route_outputs(logits, top_k, ids, weights, op);
  const int64_t t = logits.dim(0), e = logits.dim(1), vocab = tid2eid.dim(0);
  STRATA_CHECK(int64_t(token_ids.size()) == t, op, ": ", token_ids.size(), " token ids for ", t, " rows");
  for (int64_t r = 0; r < t; ++r) {
    STRATA_CHECK(token_ids[size_t(r)] >= 0 && token_ids[size_t(r)] < vocab, op, ": token id ",
                 token_ids[size_t(r)], " out of range [0, ", vocab, ")");
    const int32_t* row = tid2eid.data<int32_t>() + int64_t(token_ids[size_t(r)]) * top_k;
    for (int j = 0; j < top_k; ++j) {
      STRATA_CHECK(row[j] >= 0 && row[j] < e, op, ": tid2eid[", token_ids[size_t(r)], "] names expert ",
                   row[j], " of ", e);
    }
  }
  parallel_for(t, [&](int64_t r) {
    const float* l = logits.data<float>() + r * e;
    std::vector<float> s(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) s[size_t(i)] = sqrt_softplus(l[i]);
    int32_t* id = ids.data<int32_t>() + r * top_k;
    std::copy_n(tid2eid.data<int32_t>() + int64_t(token_ids[size_t(r)]) * top_k, top_k, id);
    normalise(s.data(), id, top_k, scaling, weights.data<float>() + r * top_k);
  });
}

void silu_mul_clamped(const Tensor& gate_up, float limit, const Tensor& out) {
  STRATA_CUDA_DISPATCH(gate_up, silu_mul_clamped(gate_up, limit, out));
  expect_cpu_f32(gate_up, "silu_mul_clamped", "gate_up");
  expect_cpu_f32(out, "silu_mul_clamped", "out");
  const int64_t inter = out.dim(-1), t = rows_of(out);
  STRATA_CHECK(gate_up.dim(-1) == 2 * inter && rows_of(gate_up) == t, "silu_mul_clamped: ",
               gate_up.describe(), " does not match ", out.describe());
  parallel_for(t, [&](int64_t r) {
    const float* g = gate_up.data<float>() + r * 2 * inter;
    float* o = out.data<float>() + r * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = clamped_swiglu(g[i], g[inter + i], limit);
  });
}

void moe_experts_clamped(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                         const Tensor& ids, const Tensor& weights, float limit, const Tensor& out,
                         const ExpertShard& shard) {
  STRATA_CUDA_DISPATCH(x, moe_experts_clamped(x, gate_up, down, ids, weights, limit, out, shard));
  const char* op = "moe_experts_clamped";
  expect_cpu_f32(x, op, "x");
  expect_cpu_f32(weights, op, "weights");
  STRATA_CHECK(x.ndim() == 2 && gate_up.ndim() == 3 && down.ndim() == 3 && ids.ndim() == 2 &&
                   ids.dtype() == DType::kI32,
               op, ": x ", x.describe(), " gate_up ", gate_up.describe(), " down ", down.describe(),
               " ids ", ids.describe());
  const int64_t t = x.dim(0), h = x.dim(1), ne = gate_up.dim(0), inter = down.dim(2);
  const int64_t k = ids.dim(1);
  expect_shape(gate_up, {ne, 2 * inter, h}, op, "gate_up");
  expect_shape(down, {ne, h, inter}, op, "down");
  expect_shape(ids, {t, k}, op, "ids");
  expect_shape(weights, {t, k}, op, "weights");
  expect_shape(out, {t, h}, op, "out");
  const int64_t total = shard.total ? shard.total : ne;
  STRATA_CHECK(shard.first >= 0 && shard.first + ne <= total, op, ": experts [", shard.first, ", ",
               shard.first + ne, ") of ", total);
  for (int64_t i = 0; i < t * k; ++i) {
    const int32_t e = ids.data<int32_t>()[i];
    STRATA_CHECK(e >= 0 && e < total, op, ": expert id ", e, " out of range [0, ", total, ")");
  }
  const ExpertSlabs gate_up_of(gate_up, ids, shard.first, op, "gate_up");
  const ExpertSlabs down_of(down, ids, shard.first, op, "down");
  static const bool kSingleThreadedBlas = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)kSingleThreadedBlas;
  // Per token, its experts in routing order: each token's result is independent of the batch.
  parallel_for(t, [&](int64_t r) {
    std::vector<float> gu(static_cast<size_t>(2 * inter)), act(static_cast<size_t>(inter)), y(static_cast<size_t>(h));
    float* o = out.data<float>() + r * h;
    std::fill(o, o + h, 0.f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids.data<int32_t>()[r * k + j] - shard.first;
      if (e < 0 || e >= ne) continue;  // another rank's expert
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(2 * inter), int(h), 1.f,
                  gate_up_of(e), int(h), x.data<float>() + r * h, 1,
                  0.f, gu.data(), 1);
      for (int64_t i = 0; i < inter; ++i) act[size_t(i)] = clamped_swiglu(gu[size_t(i)], gu[size_t(inter + i)], limit);
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(h), int(inter), 1.f,
                  down_of(e), int(inter), act.data(), 1, 0.f, y.data(), 1);
      const float wj = weights.data<float>()[r * k + j];
      for (int64_t c = 0; c < h; ++c) o[c] += wj * y[size_t(c)];
    }
  });
}

}  // namespace strata::ops
