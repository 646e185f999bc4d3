// CPU reference: causal GQA attention over paged KV caches (fp32, or FP8 pages read back exactly).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/kv_fp8.h"
#include "strata/ops/ops.h"

namespace strata::ops {

void paged_attention_gated(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                           const ForwardBatch& batch, float scale, const Tensor& gate, const Tensor& out) {
  STRATA_CUDA_DISPATCH(q, paged_attention_gated(q, k, v, cache, batch, scale, gate, out));
  STRATA_CHECK(gate.numel() == out.numel(), "paged_attention_gated: gate ", gate.describe(), " for out ",
               out.describe());
  paged_attention(q, k, v, cache, batch, scale, out);
  mul_sigmoid(out, gate.reshape(out.shape()));
}

namespace {

// The cache's vector (slot, kv head) as floats: a pointer into an F32 cache, or an FP8 one decoded
// into `buf`.
class KvReader {
 public:
  KvReader(const Tensor& values, const Tensor& scales, int64_t hkv, int64_t d)
      : values_(values), scales_(scales), hkv_(hkv), d_(d) {}
  const float* get(int64_t slot, int64_t kvh, float* buf) const {
    const int64_t i = slot * hkv_ + kvh;
    if (values_.dtype() == DType::kF32) return values_.data<float>() + i * d_;
    kv_fp8_decode(values_.data<uint8_t>() + i * d_, scales_.data<uint8_t>()[i], d_, buf);
    return buf;
  }

 private:
  const Tensor& values_;
  const Tensor& scales_;
  int64_t hkv_, d_;
};

// The caches against the new keys k [T, Hkv, D] (and, for paged_attention, the queries q), for
// `op`'s errors.
void check_cache(const PagedKv& c, int64_t hkv, int64_t d, const Tensor* q, const Tensor& k, const char* op) {
  const Tensor& kc = c.k;
  STRATA_CHECK(kc.device() == Device::kCpu && kc.ndim() == 4 && kc.dim(2) == hkv && kc.dim(3) == d &&
                   c.v.shape() == kc.shape() && c.v.dtype() == kc.dtype() && c.v.device() == Device::kCpu,
               op, ": caches ", kc.describe(), " / ", c.v.describe(), " do not fit ",
               q ? "q " + q->describe() + " " : std::string(), "k ", k.describe());
  if (!c.fp8()) {
    expect_cpu_f32(kc, op, "k_cache");
    return;
  }
  for (const Tensor* s : {&c.k_scale, &c.v_scale}) {
    STRATA_CHECK(s->defined() && s->device() == Device::kCpu && s->dtype() == DType::kUE8M0 &&
                     s->shape() == Shape({kc.dim(0), kc.dim(1), hkv}),
                 op, ": an FP8 cache ", kc.describe(), " needs UE8M0 scales [", kc.dim(0), ", ", kc.dim(1), ", ",
                 hkv, "], got ", s->defined() ? s->describe() : std::string("none"));
  }
}

// The new keys and values [T, Hkv, D] at their positions in the pages (FP8: encoded).
void write_new_kv(const Tensor& k, const Tensor& v, const PagedKv& cache, const ForwardBatch& batch) {
  const int64_t hkv = k.dim(1), d = k.dim(2), block = cache.k.dim(1);
  const int64_t row = hkv * d;  // elements per cached token
  for (const SeqInBatch& s : batch.seqs) {
    for (int32_t i = 0; i < s.q_len; ++i) {
      const int64_t pos = s.ctx_len + i;
      const int64_t slot = int64_t(s.block_table[pos / block]) * block + pos % block,
                    src = int64_t(s.q_start + i) * row;
      if (!cache.fp8()) {
        std::memcpy(cache.k.data<float>() + slot * row, k.data<float>() + src, row * sizeof(float));
        std::memcpy(cache.v.data<float>() + slot * row, v.data<float>() + src, row * sizeof(float));
        continue;
      }
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t e = slot * hkv + h;
        kv_fp8_encode(k.data<float>() + src + h * d, d, cache.k.data<uint8_t>() + e * d,
                      cache.k_scale.data<uint8_t>() + e);
        kv_fp8_encode(v.data<float>() + src + h * d, d, cache.v.data<uint8_t>() + e * d,
                      cache.v_scale.data<uint8_t>() + e);
      }
    }
  }
}

}  // namespace

void paged_kv_write(const Tensor& k, const Tensor& v, const PagedKv& cache, const ForwardBatch& batch) {
  STRATA_CUDA_DISPATCH(k, paged_kv_write(k, v, cache, batch));
  expect_cpu_f32(k, "paged_kv_write", "k");
  STRATA_CHECK(k.ndim() == 3 && k.dim(0) == int64_t(batch.token_ids.size()), "paged_kv_write: k ", k.describe(),
               " for a batch of ", batch.token_ids.size(), " tokens");
  const int64_t t = k.dim(0), hkv = k.dim(1), d = k.dim(2);
  expect_shape(v, {t, hkv, d}, "paged_kv_write", "v");
  check_cache(cache, hkv, d, nullptr, k, "paged_kv_write");
  write_new_kv(k, v, cache, batch);
}

void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                     const ForwardBatch& batch, float scale, const Tensor& out) {
  STRATA_CUDA_DISPATCH(q, paged_attention(q, k, v, cache, batch, scale, out));
  expect_cpu_f32(q, "paged_attention", "q");
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
  expect_shape(k, {t, hkv, d}, "paged_attention", "k");
  expect_shape(v, {t, hkv, d}, "paged_attention", "v");
  expect_shape(out, {t, hq, d}, "paged_attention", "out");
  STRATA_CHECK(hq % hkv == 0, "paged_attention: ", hq, " query heads over ", hkv, " kv heads");
  check_cache(cache, hkv, d, &q, k, "paged_attention");
  const bool fp8 = cache.fp8();
  const int64_t block = cache.k.dim(1);
  const int64_t group = hq / hkv;
  auto slot_of = [&](const SeqInBatch& s, int64_t pos) {
    return int64_t(s.block_table[pos / block]) * block + pos % block;
  };
  // 1. Append the new keys and values at their positions.
  write_new_kv(k, v, cache, batch);
  // 2. Every (token, head) attends to its sequence's visible prefix.
  std::vector<int32_t> seq_of(t);
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqInBatch& s = batch.seqs[si];
    for (int32_t i = 0; i < s.q_len; ++i) seq_of[s.q_start + i] = int32_t(si);
  }
  const KvReader keys(cache.k, cache.k_scale, hkv, d), values(cache.v, cache.v_scale, hkv, d);
  parallel_for(t * hq, [&](int64_t job) {
    const int64_t tok = job / hq, h = job % hq, kvh = h / group;
    const SeqInBatch& s = batch.seqs[seq_of[tok]];
    const int64_t visible = s.ctx_len + (tok - s.q_start) + 1;
    const float* qv = q.data<float>() + (tok * hq + h) * d;
    std::vector<float> scores(visible), buf(fp8 ? d : 0);
    float mx = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      const float* kv = keys.get(slot_of(s, j), kvh, buf.data());
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot += qv[c] * kv[c];
      scores[j] = dot * scale;
      mx = std::max(mx, scores[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < visible; ++j) {
      scores[j] = std::exp(scores[j] - mx);
      sum += scores[j];
    }
    float* o = out.data<float>() + (tok * hq + h) * d;
    std::fill(o, o + d, 0.f);
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j) {
      const float* vv = values.get(slot_of(s, j), kvh, buf.data());
      const float p = scores[j] * inv;
      for (int64_t c = 0; c < d; ++c) o[c] += p * vv[c];
    }
  });
}

}  // namespace strata::ops
