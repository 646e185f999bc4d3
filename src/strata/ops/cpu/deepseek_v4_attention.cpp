// CPU reference for the DeepSeek-V4 attention ops: KV compressors over per-sequence rings, the
// compressed-entry pages, the lightning indexer's top-k and the sliding-window + compressed
// attention with sinks (fp32). A token's position is ctx_len + its row in the sequence.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::ops {
namespace {

// Rows of a paged pool [blocks, entries_per_block, ...] that hold entry e of a sequence
// (compressed_entry_row: the layout both devices share).
struct PagedEntries {
  int block_size = 0;
  int ratio = 1;
  PagedEntries(int block_size_, int ratio_) : block_size(block_size_), ratio(ratio_) {}
  int64_t row(const SeqInBatch& s, int64_t entry) const { return compressed_entry_row(s, entry, block_size, ratio); }
};

void check_paged_pool(const Tensor& pool, int block_size, int ratio, int64_t width, const char* op,
                      const char* what) {
  expect_cpu_f32(pool, op, what);
  check_compressed_pool(pool, block_size, ratio, width, op, what);
}

// The sequence of each row of the batch.
std::vector<int32_t> sequence_of_rows(const ForwardBatch& batch) {
  std::vector<int32_t> seq_of(static_cast<size_t>(batch.num_tokens()));
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqInBatch& s = batch.seqs[si];
    for (int32_t i = 0; i < s.q_len; ++i) seq_of[size_t(s.q_start + i)] = int32_t(si);
  }
  return seq_of;
}

// Indices of the k largest of v[0, n), highest first; the lower index wins a tie.
void top_k_desc(const std::vector<float>& v, int64_t n, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[size_t(a)] > v[size_t(b)] || (v[size_t(a)] == v[size_t(b)] && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace

int64_t compressed_entries_per_page(int block_size, int ratio) { return ratio >= block_size ? 1 : block_size / ratio; }

int64_t compressed_entry_row(const SeqInBatch& s, int64_t entry, int block_size, int ratio) {
  const int64_t last = (entry + 1) * ratio - 1;
  const int64_t page = s.block_table[size_t(last / block_size)];
  return page * compressed_entries_per_page(block_size, ratio) +
         (ratio >= block_size ? 0 : (entry * ratio % block_size) / ratio);
}

void check_compressed_pool(const Tensor& pool, int block_size, int ratio, int64_t width, const char* op,
                           const char* what) {
  STRATA_CHECK(block_size > 0 && ratio > 0 &&
                   (ratio >= block_size ? ratio % block_size == 0 : block_size % ratio == 0),
               op, ": ", what, ": block size ", block_size, " and ", ratio,
               " tokens per entry do not tile");
  const int64_t per_block = compressed_entries_per_page(block_size, ratio);
  STRATA_CHECK(pool.ndim() == 3 && pool.dim(1) == per_block && pool.dim(2) == width, op, ": ",
               what, " pool ", pool.describe(), " should be [blocks, ", per_block, ", ", width, "]");
}

void check_batch_pages(const ForwardBatch& batch, int block_size, int64_t blocks, const char* op) {
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqInBatch& s = batch.seqs[si];
    const int64_t need = (int64_t(s.ctx_len) + s.q_len + block_size - 1) / block_size;
    STRATA_CHECK(int64_t(s.block_table.size()) >= need, op, ": sequence ", si, " has ",
                 s.block_table.size(), " pages for ", s.ctx_len + s.q_len, " tokens");
    for (int64_t p = 0; p < need; ++p) {
      STRATA_CHECK(s.block_table[size_t(p)] >= 0 && s.block_table[size_t(p)] < blocks, op,
                   ": sequence ", si, " page ", s.block_table[size_t(p)], " out of range");
    }
  }
}

std::vector<CompressedEntry> closed_entries(const ForwardBatch& batch, int ratio) {
  STRATA_CHECK(ratio > 0, "closed_entries: ratio must be positive");
  std::vector<CompressedEntry> out;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqInBatch& s = batch.seqs[si];
    // Entry e closes at token (e + 1) * ratio - 1; those in [ctx_len, ctx_len + q_len).
    for (int64_t e = s.ctx_len / ratio; e < (int64_t(s.ctx_len) + s.q_len) / ratio; ++e) {
      out.push_back({int32_t(si), int32_t(e)});
    }
  }
  return out;
}

void compressor_pool(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                     const Tensor& ring_kv, const Tensor& ring_gate, const ForwardBatch& batch,
                     const CompressorSpec& spec, const std::vector<CompressedEntry>& entries,
                     const Tensor& pooled) {
  STRATA_CUDA_DISPATCH(kv, compressor_pool(kv, gate, ape, ring_kv, ring_gate, batch, spec, entries, pooled));
  const char* op = "compressor_pool";
  const int64_t t = batch.num_tokens(), width = spec.width(), rows = spec.ring_rows();
  const int64_t d = spec.head_dim, m = spec.ratio;
  STRATA_CHECK(m > 0 && d > 0, op, ": bad compressor ratio ", m, " / head_dim ", d);
  for (const Tensor* p : {&kv, &gate, &ape, &ring_kv, &ring_gate, &pooled}) expect_cpu_f32(*p, op, "tensor");
  expect_shape(kv, {t, width}, op, "kv");
  expect_shape(gate, {t, width}, op, "gate");
  expect_shape(ape, {m, width}, op, "ape");
  STRATA_CHECK(ring_kv.ndim() == 3 && ring_kv.dim(1) == rows && ring_kv.dim(2) == width &&
                   ring_gate.shape() == ring_kv.shape(),
               op, ": rings ", ring_kv.describe(), " / ", ring_gate.describe(), " should be [slots, ",
               rows, ", ", width, "]");
  expect_shape(pooled, {int64_t(entries.size()), d}, op, "pooled");
  const int64_t slots = ring_kv.dim(0);
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const int32_t slot = batch.seqs[si].state_slot;
    STRATA_CHECK(slot >= 0 && slot < slots, op, ": sequence ", si, " state slot ", slot,
                 " out of range [0, ", slots, ")");
  }
  for (const CompressedEntry& en : entries) {
    STRATA_CHECK(en.seq >= 0 && size_t(en.seq) < batch.seqs.size(), op, ": entry of sequence ",
                 en.seq, " out of range");
    const SeqInBatch& s = batch.seqs[size_t(en.seq)];
    const int64_t closing = (int64_t(en.index) + 1) * m - 1;
    STRATA_CHECK(en.index >= 0 && closing >= s.ctx_len && closing < int64_t(s.ctx_len) + s.q_len,
                 op, ": entry ", en.index, " of sequence ", en.seq, " is not closed by this step");
  }
  // 1. Pool every closed entry, reading tokens before ctx_len from the ring.
  parallel_for(int64_t(entries.size()), [&](int64_t i) {
    const CompressedEntry& en = entries[size_t(i)];
    const SeqInBatch& s = batch.seqs[size_t(en.seq)];
    const int64_t slot = s.state_slot;
    struct Row {
      const float* kv;
      const float* gate;
      const float* ape;
    };
    std::vector<Row> window;
    auto add = [&](int64_t pos, int64_t offset) {
      const float *k, *g;
      if (pos >= s.ctx_len) {
        const int64_t r = s.q_start + (pos - s.ctx_len);
        k = kv.data<float>() + r * width;
        g = gate.data<float>() + r * width;
      } else {
        const int64_t r = (slot * rows + pos % rows) * width;
        k = ring_kv.data<float>() + r;
        g = ring_gate.data<float>() + r;
      }
      window.push_back({k + offset, g + offset, ape.data<float>() + (pos % m) * width + offset});
    };
    const int64_t first = int64_t(en.index) * m;
    if (spec.overlap && en.index > 0) {
      for (int64_t p = first - m; p < first; ++p) add(p, 0);  // Ca of the previous window
    }
    for (int64_t p = first; p < first + m; ++p) add(p, spec.overlap ? d : 0);  // Cb / this window
    std::vector<float> logits(window.size());
    float* out = pooled.data<float>() + i * d;
    for (int64_t c = 0; c < d; ++c) {
      float mx = -INFINITY;
      for (size_t r = 0; r < window.size(); ++r) {
        logits[r] = window[r].gate[c] + window[r].ape[c];
        mx = std::max(mx, logits[r]);
      }
      float sum = 0.f;
      for (size_t r = 0; r < window.size(); ++r) sum += logits[r] = std::exp(logits[r] - mx);
      float acc = 0.f;
      for (size_t r = 0; r < window.size(); ++r) acc += window[r].kv[c] * (logits[r] / sum);
      out[c] = acc;
    }
  });
  // 2. Keep each sequence's last `rows` tokens in its ring (after every read above).
  parallel_for(int64_t(batch.seqs.size()), [&](int64_t si) {
    const SeqInBatch& s = batch.seqs[size_t(si)];
    for (int64_t i = std::max<int64_t>(0, s.q_len - rows); i < s.q_len; ++i) {
      const int64_t dst = (int64_t(s.state_slot) * rows + (s.ctx_len + i) % rows) * width;
      const int64_t src = (s.q_start + i) * width;
      std::memcpy(ring_kv.data<float>() + dst, kv.data<float>() + src, size_t(width) * sizeof(float));
      std::memcpy(ring_gate.data<float>() + dst, gate.data<float>() + src, size_t(width) * sizeof(float));
    }
  });
}

void store_compressed(const Tensor& values, const Tensor& pool, const ForwardBatch& batch,
                      int block_size, int ratio, const std::vector<CompressedEntry>& entries) {
  STRATA_CUDA_DISPATCH(values, store_compressed(values, pool, batch, block_size, ratio, entries));
  const char* op = "store_compressed";
  expect_cpu_f32(values, op, "values");
  const int64_t d = values.ndim() == 2 ? values.dim(1) : -1;
  expect_shape(values, {int64_t(entries.size()), d}, op, "values");
  check_paged_pool(pool, block_size, ratio, d, op, "compressed");
  check_batch_pages(batch, block_size, pool.dim(0), op);
  const PagedEntries layout(block_size, ratio);
  for (size_t i = 0; i < entries.size(); ++i) {
    const CompressedEntry& en = entries[i];
    STRATA_CHECK(en.seq >= 0 && size_t(en.seq) < batch.seqs.size() && en.index >= 0 &&
                     (int64_t(en.index) + 1) * ratio <=
                         int64_t(batch.seqs[size_t(en.seq)].ctx_len) + batch.seqs[size_t(en.seq)].q_len,
                 op, ": entry ", en.index, " of sequence ", en.seq, " is not in the batch");
    const int64_t row = layout.row(batch.seqs[size_t(en.seq)], en.index);
    std::memcpy(pool.data<float>() + row * d, values.data<float>() + int64_t(i) * d,
                size_t(d) * sizeof(float));
  }
}

namespace {

// The checks of the indexer ops' q, weights and key pool; the rows' sequences.
std::vector<int32_t> check_indexer(const Tensor& q, const Tensor& weights, const Tensor& k_pool,
                                   const ForwardBatch& batch, int block_size, int ratio, const char* op) {
  expect_cpu_f32(q, op, "q");
  expect_cpu_f32(weights, op, "weights");
  STRATA_CHECK(q.ndim() == 3, op, ": q must be [T, H, d], got ", q.describe());
  const int64_t t = q.dim(0), heads = q.dim(1), d = q.dim(2);
  STRATA_CHECK(t == batch.num_tokens(), op, ": q has ", t, " rows for ", batch.num_tokens(), " tokens");
  expect_shape(weights, {t, heads}, op, "weights");
  check_paged_pool(k_pool, block_size, ratio, d, op, "k");
  check_batch_pages(batch, block_size, k_pool.dim(0), op);
  return sequence_of_rows(batch);
}

int64_t position_of_row(const ForwardBatch& batch, const std::vector<int32_t>& seq_of, int64_t tok) {
  const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
  return s.ctx_len + (tok - s.q_start);
}

// Row tok's scores of its visible entries over q's heads, into score[0, visible).
void indexer_row_scores(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const SeqInBatch& s,
                        const PagedEntries& layout, int64_t tok, int64_t visible, float score_scale,
                        float weight_scale, float* score) {
  const int64_t heads = q.dim(1), d = q.dim(2);
  const float* qt = q.data<float>() + tok * heads * d;
  const float* wt = weights.data<float>() + tok * heads;
  for (int64_t e = 0; e < visible; ++e) {
    const float* k = k_pool.data<float>() + layout.row(s, e) * d;
    float acc = 0.f;
    for (int64_t h = 0; h < heads; ++h) {
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot += qt[h * d + c] * k[c];
      acc += (std::max(dot, 0.f) * score_scale) * (wt[h] * weight_scale);
    }
    score[e] = acc;
  }
}

void check_selected(const Tensor& selected, int64_t t, const char* op) {
  STRATA_CHECK(selected.dtype() == DType::kI32 && selected.device() == Device::kCpu && selected.ndim() == 2 &&
                   selected.dim(0) == t && selected.dim(1) > 0,
               op, ": selected must be a CPU I32 [", t, ", top_k], got ", selected.describe());
}

}  // namespace

void indexer_top_k(const Tensor& q, const Tensor& weights, const Tensor& k_pool,
                   const ForwardBatch& batch, int block_size, int ratio, float score_scale,
                   float weight_scale, const Tensor& selected) {
  STRATA_CUDA_DISPATCH(q, indexer_top_k(q, weights, k_pool, batch, block_size, ratio, score_scale, weight_scale, selected));
  const char* op = "indexer_top_k";
  const std::vector<int32_t> seq_of = check_indexer(q, weights, k_pool, batch, block_size, ratio, op);
  const int64_t t = q.dim(0);
  check_selected(selected, t, op);
  const int64_t top_k = selected.dim(1);
  const PagedEntries layout(block_size, ratio);
  parallel_for(t, [&](int64_t tok) {
    const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
    const int64_t visible = (position_of_row(batch, seq_of, tok) + 1) / ratio;
    std::vector<float> score(static_cast<size_t>(visible));
    indexer_row_scores(q, weights, k_pool, s, layout, tok, visible, score_scale, weight_scale, score.data());
    int32_t* out = selected.data<int32_t>() + tok * top_k;
    const int64_t k = std::min(top_k, visible);
    top_k_desc(score, visible, k, out);
    std::fill(out + k, out + top_k, -1);
  });
}

int64_t indexer_max_visible(const ForwardBatch& batch, int ratio) {
  STRATA_CHECK(ratio > 0, "indexer_max_visible: ratio must be positive");
  int64_t most = 0;
  for (const SeqInBatch& s : batch.seqs) most = std::max<int64_t>(most, (int64_t(s.ctx_len) + s.q_len) / ratio);
  return most;
}

void indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                    int block_size, int ratio, float score_scale, float weight_scale, const Tensor& scores) {
  STRATA_CUDA_DISPATCH(q, indexer_scores(q, weights, k_pool, batch, block_size, ratio, score_scale, weight_scale, scores));
  const char* op = "indexer_scores";
  const std::vector<int32_t> seq_of = check_indexer(q, weights, k_pool, batch, block_size, ratio, op);
  const int64_t t = q.dim(0);
  expect_shape(scores, {t, indexer_max_visible(batch, ratio)}, op, "scores");
  expect_cpu_f32(scores, op, "scores");
  const int64_t width = scores.dim(1);
  const PagedEntries layout(block_size, ratio);
  parallel_for(t, [&](int64_t tok) {
    const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
    const int64_t visible = (position_of_row(batch, seq_of, tok) + 1) / ratio;
    float* row = scores.data<float>() + tok * width;
    indexer_row_scores(q, weights, k_pool, s, layout, tok, visible, score_scale, weight_scale, row);
    std::fill(row + visible, row + width, 0.f);
  });
}

void indexer_select(const Tensor& scores, const ForwardBatch& batch, int ratio, const Tensor& selected) {
  STRATA_CUDA_DISPATCH(scores, indexer_select(scores, batch, ratio, selected));
  const char* op = "indexer_select";
  const int64_t t = batch.num_tokens();
  expect_cpu_f32(scores, op, "scores");
  expect_shape(scores, {t, indexer_max_visible(batch, ratio)}, op, "scores");
  check_selected(selected, t, op);
  const int64_t top_k = selected.dim(1), width = scores.dim(1);
  const std::vector<int32_t> seq_of = sequence_of_rows(batch);
  parallel_for(t, [&](int64_t tok) {
    const int64_t visible = (position_of_row(batch, seq_of, tok) + 1) / ratio;
    const float* row = scores.data<float>() + tok * width;
    const std::vector<float> score(row, row + visible);
    int32_t* out = selected.data<int32_t>() + tok * top_k;
    const int64_t k = std::min(top_k, visible);
    top_k_desc(score, visible, k, out);
    std::fill(out + k, out + top_k, -1);
  });
}

void sparse_attention(const Tensor& q, const Tensor& kv, const Tensor& kv_pool,
                      const Tensor& comp_pool, int ratio, const Tensor& selected,
                      const Tensor& sinks, const ForwardBatch& batch, int window, float scale,
                      const Tensor& out) {
  STRATA_CUDA_DISPATCH(q, sparse_attention(q, kv, kv_pool, comp_pool, ratio, selected, sinks, batch, window, scale, out));
  const char* op = "sparse_attention";
  expect_cpu_f32(q, op, "q");
  expect_cpu_f32(kv, op, "kv");
  expect_cpu_f32(sinks, op, "sinks");
  expect_cpu_f32(out, op, "out");
  STRATA_CHECK(q.ndim() == 3, op, ": q must be [T, H, D], got ", q.describe());
  const int64_t t = q.dim(0), heads = q.dim(1), d = q.dim(2);
  STRATA_CHECK(t == batch.num_tokens(), op, ": q has ", t, " rows for ", batch.num_tokens(), " tokens");
  expect_shape(kv, {t, d}, op, "kv");
  expect_shape(sinks, {heads}, op, "sinks");
  expect_shape(out, {t, heads, d}, op, "out");
  expect_cpu_f32(kv_pool, op, "kv_pool");
  STRATA_CHECK(kv_pool.ndim() == 3 && kv_pool.dim(2) == d && kv_pool.dim(1) > 0, op, ": kv_pool ",
               kv_pool.describe(), " should be [blocks, block_size, ", d, "]");
  STRATA_CHECK(window > 0, op, ": window must be positive, got ", window);
  const int block_size = int(kv_pool.dim(1));
  check_batch_pages(batch, block_size, kv_pool.dim(0), op);
  const bool compressed = comp_pool.defined() && comp_pool.numel() > 0;
  const bool all_visible = compressed && !(selected.defined() && selected.numel() > 0);
  int64_t k_sel = 0;
  const std::vector<int32_t> seq_of = sequence_of_rows(batch);
  if (compressed) {
    check_paged_pool(comp_pool, block_size, ratio, d, op, "compressed");
    if (!all_visible) {
      STRATA_CHECK(selected.dtype() == DType::kI32 && selected.ndim() == 2 && selected.dim(0) == t,
                   op, ": selected must be I32 [", t, ", K], got ", selected.describe());
      k_sel = selected.dim(1);
      for (int64_t tok = 0; tok < t; ++tok) {
        const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
        const int64_t visible = (s.ctx_len + (tok - s.q_start) + 1) / ratio;
        for (int64_t j = 0; j < k_sel; ++j) {
          const int32_t e = selected.data<int32_t>()[tok * k_sel + j];
          STRATA_CHECK(e >= -1 && e < visible, op, ": row ", tok, " selects compressed entry ", e,
                       " of ", visible, " visible");
        }
      }
    }
  }
  const PagedEntries raw(block_size, 1);
  // 1. The new latents go to their positions.
  for (const SeqInBatch& s : batch.seqs) {
    for (int32_t i = 0; i < s.q_len; ++i) {
      std::memcpy(kv_pool.data<float>() + raw.row(s, s.ctx_len + i) * d,
                  kv.data<float>() + int64_t(s.q_start + i) * d, size_t(d) * sizeof(float));
    }
  }
  const PagedEntries comp(block_size, ratio);
  // 2. Every (token, head) attends to its window, its compressed entries and its sink.
  parallel_for(t * heads, [&](int64_t job) {
    const int64_t tok = job / heads, h = job % heads;
    const SeqInBatch& s = batch.seqs[size_t(seq_of[size_t(tok)])];
    const int64_t pos = s.ctx_len + (tok - s.q_start);
    std::vector<const float*> keys;
    for (int64_t p = std::max<int64_t>(0, pos - window + 1); p <= pos; ++p) {
      keys.push_back(kv_pool.data<float>() + raw.row(s, p) * d);
    }
    if (compressed) {
      if (all_visible) {
        for (int64_t e = 0; e < (pos + 1) / ratio; ++e) keys.push_back(comp_pool.data<float>() + comp.row(s, e) * d);
      } else {
        for (int64_t j = 0; j < k_sel; ++j) {
          const int32_t e = selected.data<int32_t>()[tok * k_sel + j];
          if (e >= 0) keys.push_back(comp_pool.data<float>() + comp.row(s, e) * d);
        }
      }
    }
    const float* qv = q.data<float>() + (tok * heads + h) * d;
    const float sink = sinks.data<float>()[h];
    std::vector<float> logits(keys.size());
    float mx = sink;
    for (size_t j = 0; j < keys.size(); ++j) {
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot += qv[c] * keys[j][c];
      logits[j] = dot * scale;
      mx = std::max(mx, logits[j]);
    }
    double sum = std::exp(double(sink - mx));
    for (size_t j = 0; j < keys.size(); ++j) sum += logits[j] = std::exp(logits[j] - mx);
    const float inv = float(1.0 / sum);
    float* o = out.data<float>() + (tok * heads + h) * d;
    std::fill(o, o + d, 0.f);
    for (size_t j = 0; j < keys.size(); ++j) {
      const float p = logits[j] * inv;
      for (int64_t c = 0; c < d; ++c) o[c] += p * keys[j][c];
    }
  });
}

}  // namespace strata::ops
