// CPU reference: the Qwen sparse-attention (QSA) block indexer (key pooling, block-key cache,
// top-k block selection) and attention over the selected tokens (fp32).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::ops {
int64_t qsa_block_row(const SeqInBatch& s, int64_t block, int ratio, int block_size,
                      int64_t entries_per_page) {
  // models/model.h: page block_table[e * ratio / bs], row (e * ratio % bs) / ratio.
  const int64_t first_token = block * ratio;
  const int64_t page = s.block_table[first_token / block_size];
  return page * entries_per_page + (first_token % block_size) / ratio;
}

void qsa_check_paged_geometry(const Tensor& cache, int ratio, int block_size, const char* op) {
  const bool fits = ratio > 0 && block_size > 0 && cache.ndim() >= 2 &&
                    (ratio >= block_size ? ratio % block_size == 0 && cache.dim(1) == 1
                                         : block_size % ratio == 0 && cache.dim(1) == block_size / ratio);
  STRATA_CHECK(fits, op, ": cache ", cache.describe(), " does not hold ", ratio,
               "-token entries in pages of ", block_size, " tokens");
}

void qsa_check_seq_pages(const SeqInBatch& s, int64_t page_size, int64_t num_pages, const char* op) {
  const int64_t tokens = int64_t(s.ctx_len) + s.q_len;
  STRATA_CHECK(int64_t(s.block_table.size()) * page_size >= tokens, op, ": ", s.block_table.size(),
               " pages of ", page_size, " tokens for ", tokens, " tokens");
  for (int32_t b : s.block_table) {
    STRATA_CHECK(b >= 0 && b < num_pages, op, ": page ", b, " out of range");
  }
}

std::vector<QsaBlock> qsa_completed_blocks(const ForwardBatch& batch, int ratio) {
  STRATA_CHECK(ratio > 0, "qsa_completed_blocks: compress ratio ", ratio);
  std::vector<QsaBlock> out;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SeqInBatch& s = batch.seqs[i];
    for (int32_t b = s.ctx_len / ratio; b < (s.ctx_len + s.q_len) / ratio; ++b) {
      out.push_back({int32_t(i), b});
    }
  }
  return out;
}

void qsa_pool_keys(const Tensor& raw_keys, const Tensor& tail, const ForwardBatch& batch, int ratio,
                   const Tensor& pooled) {
  STRATA_CUDA_DISPATCH(raw_keys, qsa_pool_keys(raw_keys, tail, batch, ratio, pooled));
  expect_cpu_f32(raw_keys, "qsa_pool_keys", "raw_keys");
  expect_cpu_f32(tail, "qsa_pool_keys", "tail");
  expect_cpu_f32(pooled, "qsa_pool_keys", "pooled");
  const int64_t d = raw_keys.dim(-1), t = batch.num_tokens();
  const int64_t keep = std::max(1, ratio - 1);
  expect_shape(raw_keys, {t, d}, "qsa_pool_keys", "raw_keys");
  STRATA_CHECK(tail.ndim() == 3 && tail.dim(1) == keep && tail.dim(2) == d,
               "qsa_pool_keys: tail ", tail.describe(), " should be [slots, ", keep, ", ", d, "]");
  const std::vector<QsaBlock> blocks = qsa_completed_blocks(batch, ratio);
  expect_shape(pooled, {int64_t(blocks.size()), d}, "qsa_pool_keys", "pooled");
  for (const SeqInBatch& s : batch.seqs) {
    STRATA_CHECK(s.state_slot >= 0 && s.state_slot < tail.dim(0), "qsa_pool_keys: state slot ",
                 s.state_slot, " out of range");
  }
  size_t next = 0;
  std::vector<float> sum(d);
  for (const SeqInBatch& s : batch.seqs) {
    float* slot = tail.data<float>() + int64_t(s.state_slot) * keep * d;
    const int64_t begin = s.ctx_len, end = int64_t(s.ctx_len) + s.q_len;
    // The raw key of token p of this sequence (p in the tail slot or among the new rows).
    auto key_of = [&](int64_t p) -> const float* {
      if (p >= begin) return raw_keys.data<float>() + (s.q_start + (p - begin)) * d;
      return slot + (p % ratio) * d;
    };
    for (int64_t b = begin / ratio; b < end / ratio; ++b, ++next) {
      std::fill(sum.begin(), sum.end(), 0.f);
      for (int64_t p = b * ratio; p < (b + 1) * ratio; ++p) {
        const float* k = key_of(p);
        for (int64_t c = 0; c < d; ++c) sum[c] += k[c];
      }
      float* o = pooled.data<float>() + int64_t(next) * d;
      for (int64_t c = 0; c < d; ++c) o[c] = sum[c] / float(ratio);
    }
    // Keep the keys of the trailing incomplete block (its earlier tokens may be in the slot).
    for (int64_t p = (end / ratio) * ratio; p < end; ++p) {
      if (p >= begin) std::memcpy(slot + (p % ratio) * d, key_of(p), d * sizeof(float));
    }
  }
}

void qsa_store_block_keys(const Tensor& block_keys, const Tensor& cache, const ForwardBatch& batch,
                          int ratio, int block_size) {
  STRATA_CUDA_DISPATCH(cache, qsa_store_block_keys(block_keys, cache, batch, ratio, block_size));
  expect_cpu_f32(block_keys, "qsa_store_block_keys", "block_keys");
  expect_cpu_f32(cache, "qsa_store_block_keys", "cache");
  const int64_t d = block_keys.dim(-1);
  STRATA_CHECK(cache.ndim() == 3 && cache.dim(2) == d, "qsa_store_block_keys: cache ",
               cache.describe(), " does not hold keys of ", d);
  const std::vector<QsaBlock> blocks = qsa_completed_blocks(batch, ratio);
  expect_shape(block_keys, {int64_t(blocks.size()), d}, "qsa_store_block_keys", "block_keys");
  qsa_check_paged_geometry(cache, ratio, block_size, "qsa_store_block_keys");
  for (const SeqInBatch& s : batch.seqs) {
    qsa_check_seq_pages(s, block_size, cache.dim(0), "qsa_store_block_keys");
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const SeqInBatch& s = batch.seqs[blocks[i].seq];
    const int64_t row = qsa_block_row(s, blocks[i].block, ratio, block_size, cache.dim(1));
    std::memcpy(cache.data<float>() + row * d, block_keys.data<float>() + int64_t(i) * d,
                d * sizeof(float));
  }
}

namespace {

// The index in batch.seqs of each of the batch's rows.
std::vector<int32_t> sequence_of_rows(const ForwardBatch& batch) {
  std::vector<int32_t> seq_of(size_t(batch.num_tokens()));
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    for (int32_t i = 0; i < batch.seqs[si].q_len; ++i) seq_of[size_t(batch.seqs[si].q_start + i)] = int32_t(si);
  }
  return seq_of;
}

}  // namespace

int64_t qsa_max_blocks(const ForwardBatch& batch, int ratio) {
  STRATA_CHECK(ratio > 0, "qsa_max_blocks: ratio ", ratio);
  int64_t most = 0;
  for (const SeqInBatch& s : batch.seqs) most = std::max<int64_t>(most, (int64_t(s.ctx_len) + s.q_len) / ratio);
  return most;
}

void qsa_block_scores(const Tensor& q, const Tensor& block_cache, const ForwardBatch& batch, int ratio,
                      int block_size, float scale, const Tensor& scores) {
  const char* op = "qsa_block_scores";
  expect_cpu_f32(q, op, "q");
  expect_cpu_f32(block_cache, op, "block_cache");
  expect_cpu_f32(scores, op, "scores");
  STRATA_CHECK(q.ndim() == 3 && q.dim(0) == batch.num_tokens(), op, ": q ", q.describe(), " for ",
               batch.num_tokens(), " tokens");
  const int64_t t = q.dim(0), heads = q.dim(1), d = q.dim(2);
  STRATA_CHECK(block_cache.ndim() == 3 && block_cache.dim(2) == d, op, ": block cache ", block_cache.describe(),
               " does not hold keys of ", d);
  const int64_t width = qsa_max_blocks(batch, ratio);
  expect_shape(scores, {t, width}, op, "scores");
  qsa_check_paged_geometry(block_cache, ratio, block_size, op);
  for (const SeqInBatch& s : batch.seqs) qsa_check_seq_pages(s, block_size, block_cache.dim(0), op);
  const std::vector<int32_t> seq_of = sequence_of_rows(batch);
  parallel_for(t, [&](int64_t tok) {
    const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
    const int64_t n = (s.ctx_len + (tok - s.q_start) + 1) / ratio;
    const float* qt = q.data<float>() + tok * heads * d;
    float* row = scores.data<float>() + tok * width;
    for (int64_t b = 0; b < n; ++b) {
      const float* kb = block_cache.data<float>() + qsa_block_row(s, b, ratio, block_size, block_cache.dim(1)) * d;
      float acc = 0.f;
      for (int64_t h = 0; h < heads; ++h) {
        float dot = 0.f;
        for (int64_t c = 0; c < d; ++c) dot += qt[h * d + c] * kb[c];
        acc += std::max(dot, 0.f);
      }
      row[b] = acc * scale;
    }
    std::fill(row + n, row + width, 0.f);
  });
}

void qsa_select_scored(const Tensor& scores, const ForwardBatch& batch, int ratio, int top_blocks,
                       const Tensor& selected) {
  const char* op = "qsa_select_scored";
  expect_cpu_f32(scores, op, "scores");
  const int64_t t = batch.num_tokens(), width = int64_t(top_blocks) * ratio + ratio - 1;
  STRATA_CHECK(ratio > 0 && top_blocks > 0, op, ": ratio ", ratio, ", top blocks ", top_blocks);
  const int64_t blocks = qsa_max_blocks(batch, ratio);
  expect_shape(scores, {t, blocks}, op, "scores");
  STRATA_CHECK(selected.device() == Device::kCpu && selected.dtype() == DType::kI32, op, ": selected ",
               selected.describe(), " should be I32");
  expect_shape(selected, {t, width}, op, "selected");
  const std::vector<int32_t> seq_of = sequence_of_rows(batch);
  parallel_for(t, [&](int64_t tok) {
    const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
    const int64_t p = s.ctx_len + (tok - s.q_start);
    const int64_t n = (p + 1) / ratio;
    int32_t* out = selected.data<int32_t>() + tok * width;
    std::fill(out, out + width, -1);
    int64_t w = 0;
    if (n <= top_blocks) {
      for (int64_t j = 0; j <= p; ++j) out[w++] = int32_t(j);
      return;
    }
    const float* score = scores.data<float>() + tok * blocks;
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_blocks, order.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    std::sort(order.begin(), order.begin() + top_blocks);
    for (int64_t k = 0; k < top_blocks; ++k) {
      for (int64_t j = 0; j < ratio; ++j) out[w++] = int32_t(int64_t(order[size_t(k)]) * ratio + j);
    }
    for (int64_t j = n * ratio; j <= p; ++j) out[w++] = int32_t(j);
  });
}

void qsa_select(const Tensor& q, const Tensor& block_cache, const ForwardBatch& batch, int ratio,
                int block_size, int top_blocks, float scale, const Tensor& selected) {
  STRATA_CUDA_DISPATCH(q, qsa_select(q, block_cache, batch, ratio, block_size, top_blocks, scale, selected));
  Tensor scores = Tensor::empty({batch.num_tokens(), qsa_max_blocks(batch, ratio)}, DType::kF32);
  qsa_block_scores(q, block_cache, batch, ratio, block_size, scale, scores);
  qsa_select_scored(scores, batch, ratio, top_blocks, selected);
}

void paged_attention_selected(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& k_cache, const Tensor& v_cache,
                              const ForwardBatch& batch, const Tensor& selected, float scale,
                              const Tensor& out) {
  STRATA_CUDA_DISPATCH(q, paged_attention_selected(q, k, v, k_cache, v_cache, batch, selected, scale, out));
  expect_cpu_f32(q, "paged_attention_selected", "q");
  expect_cpu_f32(k, "paged_attention_selected", "k");
  expect_cpu_f32(v, "paged_attention_selected", "v");
  expect_cpu_f32(k_cache, "paged_attention_selected", "k_cache");
  expect_cpu_f32(v_cache, "paged_attention_selected", "v_cache");
  expect_cpu_f32(out, "paged_attention_selected", "out");
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
  const int64_t block = k_cache.dim(1);
  expect_shape(k, {t, hkv, d}, "paged_attention_selected", "k");
  expect_shape(v, {t, hkv, d}, "paged_attention_selected", "v");
  expect_shape(out, {t, hq, d}, "paged_attention_selected", "out");
  STRATA_CHECK(k_cache.ndim() == 4 && k_cache.dim(2) == hkv && k_cache.dim(3) == d &&
                   v_cache.shape() == k_cache.shape() && hq % hkv == 0,
               "paged_attention_selected: caches ", k_cache.describe(), " / ", v_cache.describe(),
               " do not fit q ", q.describe(), " k ", k.describe());
  STRATA_CHECK(selected.device() == Device::kCpu && selected.dtype() == DType::kI32 &&
                   selected.ndim() == 2 && selected.dim(0) == t,
               "paged_attention_selected: selected ", selected.describe(), " should be I32 [", t,
               ", width]");
  const int64_t width = selected.dim(1);
  std::vector<int32_t> seq_of(t);
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqInBatch& s = batch.seqs[si];
    qsa_check_seq_pages(s, block, k_cache.dim(0), "paged_attention_selected");
    for (int32_t i = 0; i < s.q_len; ++i) seq_of[s.q_start + i] = int32_t(si);
  }
  // A query sees only positions it could see causally.
  for (int64_t tok = 0; tok < t; ++tok) {
    const SeqInBatch& s = batch.seqs[seq_of[tok]];
    const int64_t p = s.ctx_len + (tok - s.q_start);
    for (int64_t j = 0; j < width; ++j) {
      const int32_t pos = selected.data<int32_t>()[tok * width + j];
      STRATA_CHECK(pos >= -1 && pos <= p, "paged_attention_selected: row ", tok, " selects position ",
                   pos, " beyond its own position ", p);
    }
  }
  const int64_t row = hkv * d;
  auto slot_of = [&](const SeqInBatch& s, int64_t pos) {
    return int64_t(s.block_table[pos / block]) * block + pos % block;
  };
  for (const SeqInBatch& s : batch.seqs) {
    for (int32_t i = 0; i < s.q_len; ++i) {
      const int64_t dst = slot_of(s, s.ctx_len + i) * row, src = int64_t(s.q_start + i) * row;
      std::memcpy(k_cache.data<float>() + dst, k.data<float>() + src, row * sizeof(float));
      std::memcpy(v_cache.data<float>() + dst, v.data<float>() + src, row * sizeof(float));
    }
  }
  const int64_t group = hq / hkv;
  parallel_for(t * hq, [&](int64_t job) {
    const int64_t tok = job / hq, h = job % hq, kvh = h / group;
    const SeqInBatch& s = batch.seqs[seq_of[tok]];
    const int32_t* sel = selected.data<int32_t>() + tok * width;
    const float* qv = q.data<float>() + (tok * hq + h) * d;
    float* o = out.data<float>() + (tok * hq + h) * d;
    std::fill(o, o + d, 0.f);
    std::vector<int32_t> pos;
    for (int64_t j = 0; j < width; ++j) {
      if (sel[j] >= 0) pos.push_back(sel[j]);
    }
    const int64_t n = int64_t(pos.size());
    if (n == 0) return;
    std::vector<float> scores(n);
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float* kv = k_cache.data<float>() + slot_of(s, pos[j]) * row + kvh * d;
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot += qv[c] * kv[c];
      scores[j] = dot * scale;
      mx = std::max(mx, scores[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      scores[j] = std::exp(scores[j] - mx);
      sum += scores[j];
    }
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) {
      const float* vv = v_cache.data<float>() + slot_of(s, pos[j]) * row + kvh * d;
      const float pj = scores[j] * inv;
      for (int64_t c = 0; c < d; ++c) o[c] += pj * vv[c];
    }
  });
}

}  // namespace strata::ops
