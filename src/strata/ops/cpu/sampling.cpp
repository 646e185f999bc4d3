// CPU reference of the engine's sampling (ops.h's definition), in double: the processed
// logits of each draw, then the greedy pick or the kept set and the id-ordered draw. The CUDA
// kernels (ops/cuda/sampling.cu) compute the same thresholds in float.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/host_read.h"
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

void apply_allow(std::vector<float>& x, const uint64_t* words) {
  for (size_t t = 0; t < x.size(); ++t) {
    if (!((words[t >> 6] >> (t & 63)) & 1)) x[t] = -std::numeric_limits<float>::infinity();
  }
}

void apply_adjust(std::vector<float>& x, const LogitAdjust* a, int32_t n, float rp) {
  for (int32_t i = 0; i < n; ++i) {
    float& v = x[size_t(a[i].id)];
    v += a[i].bias;
    if (a[i].mask) v = -INFINITY;
    if (a[i].repeat) v = v > 0 ? v / rp : v * rp;
    v -= a[i].subtract;
  }
}

// The kept set of a non-greedy draw as weights e (0: dropped), from z = x * inv_temperature.
void kept_weights(const std::vector<float>& z, const SampleSpec& s, std::vector<double>& e) {
  const size_t v = z.size();
  const float mz = *std::max_element(z.begin(), z.end());
  e.resize(v);
  for (size_t i = 0; i < v; ++i) {
    e[i] = std::exp(double(z[i]) - double(mz));
    if (e[i] < double(s.min_p)) e[i] = 0;  // min-p, relative to the most likely token (e = 1)
  }
  std::vector<float> order;
  if (s.top_k > 0 && size_t(s.top_k) < v) {
    order.assign(z.begin(), z.end());
    std::nth_element(order.begin(), order.begin() + (s.top_k - 1), order.end(), std::greater<float>());
    const float zk = order[size_t(s.top_k - 1)];
    for (size_t i = 0; i < v; ++i) {
      if (z[i] < zk) e[i] = 0;
    }
  }
  if (s.top_p < 1.f) {
    std::vector<int32_t> ids;
    double kept = 0;
    for (size_t i = 0; i < v; ++i) {
      if (e[i] > 0) {
        ids.push_back(int32_t(i));
        kept += e[i];
      }
    }
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return z[size_t(a)] > z[size_t(b)]; });
    const double target = double(s.top_p) * kept;
    double mass = 0;
    float tau = -INFINITY;
    for (size_t j = 0; j < ids.size(); ++j) {
      mass += e[size_t(ids[j])];
      // Every token equal to this one counts once tau reaches it.
      const bool group_end = j + 1 == ids.size() || z[size_t(ids[j + 1])] != z[size_t(ids[j])];
      if (group_end && mass >= target) {
        tau = z[size_t(ids[j])];
        break;
      }
    }
    for (size_t i = 0; i < v; ++i) {
      if (z[i] < tau) e[i] = 0;
    }
  }
}

}  // namespace

void log_softmax_row(const std::vector<float>& x, std::vector<float>& out) {
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - double(mx));
  const double lse = double(mx) + std::log(sum);
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float(double(x[i]) - lse);
}

void top_entries(const std::vector<float>& lp, int n, std::vector<std::pair<int32_t, float>>& out) {
  out.clear();
  if (n <= 0) return;
  std::vector<int32_t> order(lp.size());
  for (size_t i = 0; i < lp.size(); ++i) order[i] = int32_t(i);
  const size_t k = std::min(size_t(n), lp.size());
  std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(), [&](int32_t a, int32_t b) {
    return lp[size_t(a)] > lp[size_t(b)] || (lp[size_t(a)] == lp[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i) out.emplace_back(order[i], lp[size_t(order[i])]);
}

void sample_processed_row(std::vector<float>& x, const SampleSpec& s, bool raw, RowDraw& out) {
  const bool logprobs = s.num_top_logprobs >= 0 && !raw;
  std::vector<float> lp;
  if (s.greedy) {
    out.token = argmax_row(x.data(), int64_t(x.size()));
  } else {
    for (float& v : x) v *= s.inv_temperature;
    std::vector<double> e;
    kept_weights(x, s, e);
    double total = 0;
    for (double w : e) total += w;
    out.token = argmax_row(x.data(), int64_t(x.size()));  // no kept mass: the arg max
    if (total > 0) {
      const double stop = double(s.uniform) * total;
      double run = 0;
      for (size_t i = 0; i < e.size(); ++i) {
        if (e[i] <= 0) continue;
        out.token = int32_t(i);  // rounding may leave the stop past the end: the last kept one
        run += e[i];
        if (run > stop) break;
      }
    }
  }
  if (logprobs) {
    log_softmax_row(x, lp);
    out.logprob = lp[size_t(out.token)];
    top_entries(lp, s.num_top_logprobs, out.top);
  }
}

void kept_distribution(std::vector<float>& x, const SampleSpec& s, std::vector<double>& probs) {
  for (float& v : x) v *= s.inv_temperature;
  kept_weights(x, s, probs);
  double total = 0;
  for (double w : probs) total += w;
  if (total > 0) {
    for (double& w : probs) w /= total;
  } else {
    std::fill(probs.begin(), probs.end(), 0.0);
    probs[size_t(argmax_row(x.data(), int64_t(x.size())))] = 1.0;
  }
}

void argmax(const Tensor& logits, const Tensor& ids) {
  STRATA_CUDA_DISPATCH(logits, argmax(logits, ids));
  check_logits(logits, ids, "argmax");
  const int64_t v = logits.dim(1);
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    ids.data<int32_t>()[r] = argmax_row(logits.data<float>() + r * v, v);
  }
}

void rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<float>& out) {
  STRATA_CUDA_DISPATCH(x, rows_to_host(x, rows, out));
  expect_cpu_f32(x, "rows_to_host", "x");
  STRATA_CHECK(x.ndim() == 2, "rows_to_host: x must be [N, V], got ", x.describe());
  const int64_t v = x.dim(1);
  out.resize(rows.size() * size_t(v));
  for (size_t i = 0; i < rows.size(); ++i) {
    STRATA_CHECK(rows[i] >= 0 && rows[i] < x.dim(0), "rows_to_host: row ", rows[i], " out of range");
    std::copy_n(x.data<float>() + rows[i] * v, v, out.data() + int64_t(i) * v);
  }
}

void argmax_rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<int32_t>& ids) {
  STRATA_CUDA_DISPATCH(x, argmax_rows_to_host(x, rows, ids));
  expect_cpu_f32(x, "argmax_rows_to_host", "x");
  STRATA_CHECK(x.ndim() == 2, "argmax_rows_to_host: x must be [N, V], got ", x.describe());
  const int64_t v = x.dim(1);
  ids.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    STRATA_CHECK(rows[i] >= 0 && rows[i] < x.dim(0), "argmax_rows_to_host: row ", rows[i], " out of range");
    ids[i] = argmax_row(x.data<float>() + rows[i] * v, v);
  }
}

void sample_tokens_begin(const Tensor& logits, const SampleBatch& batch, DrawsInFlight& draws) {
  STRATA_CHECK(!draws.pending, "sample_tokens_begin: the previous draws were not ended");
  STRATA_CUDA_DISPATCH(logits, sample_tokens_begin(logits, batch, draws));
  expect_cpu_f32(logits, "sample_tokens", "logits");
  check_sample_batch(logits, batch);
  const int64_t v = logits.dim(1), n = int64_t(batch.rows.size());
  SampledTokens& out = draws.cpu;
  out.resize(size_t(n));
  parallel_for(n, [&](int64_t r) {
    const SampleSpec& s = batch.rows[size_t(r)];
    const float* l = logits.data<float>() + int64_t(s.logits_row) * v;
    std::vector<float> x(l, l + v), raw_lp;
    const bool logprobs = s.num_top_logprobs >= 0;
    RowDraw d;
    if (logprobs && batch.raw_logprobs) {
      log_softmax_row(x, raw_lp);
      top_entries(raw_lp, s.num_top_logprobs, d.top);
    }
    apply_adjust(x, batch.adjust.data() + s.adjust_begin, s.adjust_count, s.repetition_penalty);
    if (s.allow_row >= 0) apply_allow(x, batch.allow.data() + size_t(s.allow_row) * size_t(batch.allow_words));
    sample_processed_row(x, s, batch.raw_logprobs, d);
    if (logprobs && batch.raw_logprobs) d.logprob = raw_lp[size_t(d.token)];
    out.ids[size_t(r)] = d.token;
    out.logprobs[size_t(r)] = d.logprob;
    for (size_t j = 0; j < d.top.size(); ++j) {
      out.top_ids[size_t(r) * kMaxTopLogprobs + j] = d.top[j].first;
      out.top_logprobs[size_t(r) * kMaxTopLogprobs + j] = d.top[j].second;
    }
  });
  if (!draws.ids.defined() || draws.ids.device() != Device::kCpu || draws.ids.numel() < std::max<int64_t>(n, 1)) {
    draws.ids = Tensor::empty({std::max<int64_t>(n, 1)}, DType::kI32, Device::kCpu);
  }
  std::copy(out.ids.begin(), out.ids.end(), draws.ids.data<int32_t>());
  draws.rows = n;
  draws.pending = true;
}

void sample_tokens_end(DrawsInFlight& draws, SampledTokens& out) {
  STRATA_CHECK(draws.pending, "sample_tokens_end: no draws were begun");
  STRATA_CUDA_DISPATCH(draws.ids, sample_tokens_end(draws, out));
  out = std::move(draws.cpu);
  draws.cpu = {};
  draws.pending = false;
}

void sample_tokens(const Tensor& logits, const SampleBatch& batch, SampledTokens& out) {
  thread_local DrawsInFlight draws;
  sample_tokens_begin(logits, batch, draws);
  sample_tokens_end(draws, out);
}

void check_sample_batch(const Tensor& logits, const SampleBatch& batch) {
  STRATA_CHECK(logits.ndim() == 2 && logits.dim(1) > 0, "sample_tokens: logits must be [N, V], got ",
               logits.describe());
  const int64_t v = logits.dim(1);
  for (const SampleSpec& s : batch.rows) {
    STRATA_CHECK(s.logits_row >= 0 && s.logits_row < logits.dim(0), "sample_tokens: logits row ",
                 s.logits_row, " outside [0, ", logits.dim(0), ")");
    STRATA_CHECK(s.uniform >= 0.f && s.uniform < 1.f && s.top_p > 0.f && s.top_k >= 0,
                 "sample_tokens: uniform must be in [0, 1), top_p > 0 and top_k >= 0, got ", s.uniform,
                 ", ", s.top_p, ", ", s.top_k);
    STRATA_CHECK(s.num_top_logprobs <= kMaxTopLogprobs, "sample_tokens: ", s.num_top_logprobs,
                 " top logprobs (at most ", kMaxTopLogprobs, ")");
    STRATA_CHECK(s.adjust_begin >= 0 && s.adjust_count >= 0 &&
                     size_t(s.adjust_begin) + size_t(s.adjust_count) <= batch.adjust.size(),
                 "sample_tokens: adjustments [", s.adjust_begin, ", +", s.adjust_count, ") outside ",
                 batch.adjust.size());
    if (s.allow_row >= 0) {
      STRATA_CHECK(batch.allow_words == (v + 63) / 64 &&
                       size_t(s.allow_row + 1) * size_t(batch.allow_words) <= batch.allow.size(),
                   "sample_tokens: allow row ", s.allow_row, " outside the masks (", batch.allow.size(),
                   " words, ", batch.allow_words, " per row)");
    }
    for (int32_t i = 0; i < s.adjust_count; ++i) {
      const int32_t id = batch.adjust[size_t(s.adjust_begin + i)].id;
      STRATA_CHECK(id >= 0 && id < v, "sample_tokens: adjusted token ", id, " outside the vocabulary");
    }
  }
}

}  // namespace strata::ops
