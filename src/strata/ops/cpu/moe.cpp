// CPU reference: mixture-of-experts routing and expert compute (fp32).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cpu/expert_slabs.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {
namespace {

inline float silu(float x) { return x / (1.f + std::exp(-x)); }

// Indices of the k largest values, largest first; the lower index wins a tie.
void top_k_indices(const float* v, int64_t n, int k, int32_t* out) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace

void moe_route_softmax(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids,
                       const Tensor& weights) {
  STRATA_CUDA_DISPATCH(logits, moe_route_softmax(logits, top_k, norm_topk, ids, weights));
  expect_cpu_f32(logits, "moe_route_softmax", "logits");
  const int64_t t = logits.dim(0), e = logits.dim(1);
  STRATA_CHECK(top_k >= 1 && top_k <= e, "moe_route_softmax: top_k ", top_k, " of ", e, " experts");
  expect_shape(ids, {t, top_k}, "moe_route_softmax", "ids");
  expect_shape(weights, {t, top_k}, "moe_route_softmax", "weights");
  parallel_for(t, [&](int64_t r) {
    const float* l = logits.data<float>() + r * e;
    std::vector<float> p(e);
    const float mx = *std::max_element(l, l + e);
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += p[i] = std::exp(l[i] - mx);
    for (int64_t i = 0; i < e; ++i) p[i] = float(p[i] / sum);
    int32_t* id = ids.data<int32_t>() + r * top_k;
    float* w = weights.data<float>() + r * top_k;
    top_k_indices(p.data(), e, top_k, id);
    float total = 0.f;
    for (int j = 0; j < top_k; ++j) total += w[j] = p[id[j]];
    if (norm_topk) {
      for (int j = 0; j < top_k; ++j) w[j] /= total;
    }
  });
}

void moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                 const Tensor& weights, const Tensor& out, const ExpertShard& shard) {
  STRATA_CUDA_DISPATCH(x, moe_experts(x, gate_up, down, ids, weights, out, shard));
  expect_cpu_f32(x, "moe_experts", "x");
  const int64_t t = x.dim(0), h = x.dim(1), ne = gate_up.dim(0), inter = down.dim(2);
  const int64_t k = ids.dim(1);
  expect_shape(gate_up, {ne, 2 * inter, h}, "moe_experts", "gate_up");
  expect_shape(down, {ne, h, inter}, "moe_experts", "down");
  expect_shape(weights, {t, k}, "moe_experts", "weights");
  expect_shape(out, {t, h}, "moe_experts", "out");
  const int64_t total = shard.total ? shard.total : ne;
  STRATA_CHECK(shard.first >= 0 && shard.first + ne <= total, "moe_experts: experts [", shard.first, ", ",
               shard.first + ne, ") of ", total);
  for (int64_t i = 0; i < t * k; ++i) {
    const int32_t e = ids.data<int32_t>()[i];
    STRATA_CHECK(e >= 0 && e < total, "moe_experts: expert id ", e, " out of range [0, ", total, ")");
  }
  const ExpertSlabs gate_up_of(gate_up, ids, shard.first, "moe_experts", "gate_up");
  const ExpertSlabs down_of(down, ids, shard.first, "moe_experts", "down");
  // Per token, its experts in routing order: each token's result is independent of the batch.
  parallel_for(t, [&](int64_t r) {
    std::vector<float> gu(2 * inter), act(inter), y(h);
    float* o = out.data<float>() + r * h;
    std::fill(o, o + h, 0.f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids.data<int32_t>()[r * k + j] - shard.first;
      if (e < 0 || e >= ne) continue;  // another rank's expert
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(2 * inter), int(h), 1.f,
                  gate_up_of(e), int(h), x.data<float>() + r * h, 1,
                  0.f, gu.data(), 1);
      for (int64_t i = 0; i < inter; ++i) act[i] = silu(gu[i]) * gu[inter + i];
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(h), int(inter), 1.f,
                  down_of(e), int(inter), act.data(), 1, 0.f, y.data(), 1);
      const float wj = weights.data<float>()[r * k + j];
      for (int64_t c = 0; c < h; ++c) o[c] += wj * y[c];
    }
  });
}

void moe_experts_shared(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                        const Tensor& weights, const Tensor& shared_gate_up, const Tensor& shared_down,
                        const Tensor& shared_gate, const Tensor& out, const ExpertShard& shard) {
  STRATA_CUDA_DISPATCH(x, moe_experts_shared(x, gate_up, down, ids, weights, shared_gate_up, shared_down,
                                             shared_gate, out, shard));
  const int64_t t = x.dim(0), si = shared_down.dim(1);
  moe_experts(x, gate_up, down, ids, weights, out, shard);
  Tensor act = Tensor::empty({t, si}, DType::kF32), shared = Tensor::empty(out.shape(), DType::kF32);
  silu_mul(shared_gate_up, act);
  linear(act, shared_down, shared);
  add_sigmoid_gated(out, shared, shared_gate);
}

void moe_route_experts(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids, const Tensor& weights,
                       const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& shared_gate_up,
                       const Tensor& shared_down, const Tensor& shared_gate, const Tensor& out,
                       const ExpertShard& shard) {
  STRATA_CUDA_DISPATCH(x, moe_route_experts(logits, top_k, norm_topk, ids, weights, x, gate_up, down,
                                            shared_gate_up, shared_down, shared_gate, out, shard));
  moe_route_softmax(logits, top_k, norm_topk, ids, weights);
  if (shared_down.defined()) {
    moe_experts_shared(x, gate_up, down, ids, weights, shared_gate_up, shared_down, shared_gate, out, shard);
  } else {
    moe_experts(x, gate_up, down, ids, weights, out, shard);
  }
}

}  // namespace strata::ops
