// CUDA: the DeepSeek-V4 cache ops of deepseek_v4_ops.h (issue 18): the KV compressors over
// per-sequence rings, the compressed-entry pages, the lightning indexer (scores and top-k) and
// the sliding-window + compressed attention with sinks. As qwen4_exp_qsa.cu does, the closed
// entries and every compressed entry's page row are host facts of the batch, uploaded per call
// (eager forwards; graphs later). Plain correct kernels first: one block per pooled entry, per
// query's selection, per (query, head) of attention. The indexer computes each score in the CPU
// op's order with unfused multiplies and adds, so that the same inputs select the same entries.
#include <algorithm>
#include <climits>
#include <vector>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::ops::cuda {
namespace {

// A compressed pool's dtype (BF16 or F32 on the GPU) and geometry.
void check_tiling(const Tensor& pool, int block_size, int ratio, int64_t width, const char* op, const char* what) {
  expect_float(pool, op, what);
  check_compressed_pool(pool, block_size, ratio, width, op, what);
}

// Every compressed entry a sequence's last token sees, as page rows: rows[start[s] + e] for
// e < (ctx_len + q_len) / ratio.
struct EntryRows {
  std::vector<int32_t> rows, start;
};
EntryRows visible_entry_rows(const ForwardBatch& batch, int block_size, int ratio, const char* op) {
  EntryRows r;
  for (const SeqInBatch& s : batch.seqs) {
    r.start.push_back(int32_t(r.rows.size()));
    for (int64_t e = 0; e < (int64_t(s.ctx_len) + s.q_len) / ratio; ++e) {
      const int64_t row = compressed_entry_row(s, e, block_size, ratio);
      STRATA_CHECK(row <= INT32_MAX && r.rows.size() < size_t(INT32_MAX), op, ": compressed row ", row, " too large");
      r.rows.push_back(int32_t(row));
    }
  }
  r.start.push_back(int32_t(r.rows.size()));
  return r;
}

// ---- compressors ----

// Block per closed entry (entries: (seq, index) pairs), a thread per channel: softmax over the
// window's rows of gate + ape, then the weighted sum of kv. Positions before ctx_len come from the
// sequence's ring slot. Online softmax in f32.
__global__ void compressor_pool_kernel(const void* kv, bool kv32, const void* gate, bool g32, const void* ape,
                                       bool a32, const void* ring_kv, bool rk32, const void* ring_gate, bool rg32,
                                       DeviceBatch b, const int32_t* entries, int m, int64_t d, int64_t width,
                                       int rows, bool overlap, void* pooled, bool p32) {
  pdl_begin();
  const int s = entries[2 * blockIdx.x], index = entries[2 * blockIdx.x + 1];
  const int64_t ctx = b.ctx_len[s], qs = b.q_start[s], slot = b.slot[s];
  const int64_t first = int64_t(index) * m;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float mx = -INFINITY, sum = 0.f, acc = 0.f;
    auto add = [&](int64_t pos, int64_t offset) {
      float k, g;
      if (pos >= ctx) {
        const int64_t r = (qs + pos - ctx) * width + offset + c;
        k = ldf(kv, kv32, r);
        g = ldf(gate, g32, r);
      } else {
        const int64_t r = (slot * rows + pos % rows) * width + offset + c;
        k = ldf(ring_kv, rk32, r);
        g = ldf(ring_gate, rg32, r);
      }
      const float logit = g + ldf(ape, a32, (pos % m) * width + offset + c);
      if (logit > mx) {
        const float f = expf(mx - logit);  // 0 at the first row (mx = -inf)
        sum *= f;
        acc *= f;
        mx = logit;
      }
      const float e = expf(logit - mx);
      sum += e;
      acc = fmaf(e, k, acc);
    };
    if (overlap && index > 0) {
      for (int64_t p = first - m; p < first; ++p) add(p, 0);
    }
    for (int64_t p = first; p < first + m; ++p) add(p, overlap ? d : 0);
    stf(pooled, p32, int64_t(blockIdx.x) * d + c, acc / sum);
  }
}

// After the pooling: each sequence's last `rows` new tokens into its ring. Thread per (sequence,
// ring row r, channel): token q_len - rows + r.
__global__ void ring_update_kernel(const void* kv, bool kv32, const void* gate, bool g32, void* ring_kv, bool rk32,
                                   void* ring_gate, bool rg32, DeviceBatch b, int seqs, int rows, int64_t width) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, int64_t(seqs) * rows * width) {
    const int s = int(i / (int64_t(rows) * width));
    const int r = int(i / width % rows);
    const int64_t c = i % width;
    const int64_t tok = int64_t(b.q_len[s]) - rows + r;
    if (tok < 0 || b.slot[s] < 0) continue;
    const int64_t dst = (int64_t(b.slot[s]) * rows + (b.ctx_len[s] + tok) % rows) * width + c;
    const int64_t src = (b.q_start[s] + tok) * width + c;
    stf(ring_kv, rk32, dst, ldf(kv, kv32, src));
    stf(ring_gate, rg32, dst, ldf(gate, g32, src));
  }
}

// Block i copies value row i into pool row rows[i].
__global__ void copy_rows_kernel(const void* src, bool s32, const int32_t* rows, void* dst, bool d32, int64_t d) {
  pdl_begin();
  const int64_t to = rows[blockIdx.x];
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    stf(dst, d32, to * d + c, ldf(src, s32, int64_t(blockIdx.x) * d + c));
  }
}

// ---- lightning indexer ----

// Thread per (token, entry < width): row tok's score of entry e over q's heads in the CPU op's
// order (indexer_row_scores), 0 past the token's visible entries.
__global__ void indexer_scores_kernel(const void* q, bool q32, const void* w, bool w32, const void* k_pool, bool k32,
                                      DeviceBatch b, const int32_t* rows, const int32_t* row_start, int heads,
                                      int64_t d, int ratio, float score_scale, float weight_scale, int64_t t,
                                      int64_t width, float* scores) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, t * width) {
    const int64_t tok = i / width, e = i % width;
    const int s = b.token_seq[tok];
    const int64_t visible = (int64_t(b.ctx_len[s]) + (tok - b.q_start[s]) + 1) / ratio;
    if (e >= visible) {
      scores[i] = 0.f;
      continue;
    }
    const int64_t key = int64_t(rows[row_start[s] + e]) * d;
    float acc = 0.f;
    for (int h = 0; h < heads; ++h) {
      const int64_t qb = (tok * heads + h) * d;
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot = __fadd_rn(dot, __fmul_rn(ldf(q, q32, qb + c), ldf(k_pool, k32, key + c)));
      acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(fmaxf(dot, 0.f), score_scale),
                                     __fmul_rn(ldf(w, w32, tok * heads + h), weight_scale)));
    }
    scores[i] = acc;
  }
}

constexpr int kSelectThreads = 512, kMaxSelect = 2048;

// A float as an unsigned key in the same order (-0 as +0, so that they tie as on the CPU).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v == 0.f) v = 0.f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block per token: its min(top_k, visible) best entries, highest first, the lower index winning
// a tie (the CPU's top_k_desc), then -1. The k-th best key T by a bitwise search (32 counting
// passes); every entry above T is taken, and of those equal to T the lowest indices (a block scan
// in index order); the chosen (at most kMaxSelect) are sorted by (key desc, index asc) bitonically.
__global__ void __launch_bounds__(kSelectThreads) indexer_select_kernel(const float* scores, int64_t width,
                                                                        DeviceBatch b, int ratio, int top_k,
                                                                        int32_t* selected) {
  pdl_begin();
  __shared__ uint32_t skey[kMaxSelect];
  __shared__ int32_t sidx[kMaxSelect];
  __shared__ int count, taken, scan[kSelectThreads];
  const int tok = blockIdx.x, tid = threadIdx.x, s = b.token_seq[tok];
  const int64_t visible = (int64_t(b.ctx_len[s]) + (tok - b.q_start[s]) + 1) / ratio;
  const float* row = scores + int64_t(tok) * width;
  int32_t* out = selected + int64_t(tok) * top_k;
  const int k = int(visible < top_k ? visible : int64_t(top_k));
  for (int j = tid; j < top_k; j += kSelectThreads) out[j] = -1;
  if (k == 0) return;
  // 1. T: the largest key with at least k keys >= it.
  uint32_t prefix = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = prefix | (1u << bit);
    if (tid == 0) count = 0;
    __syncthreads();
    int mine = 0;
    for (int64_t e = tid; e < visible; e += kSelectThreads) mine += order_key(row[e]) >= cand;
    atomicAdd(&count, mine);
    __syncthreads();
    if (count >= k) prefix = cand;
    __syncthreads();
  }
  // 2. Those above T (any order), then the lowest-index ties, in chunks of kSelectThreads.
  if (tid == 0) taken = 0;
  __syncthreads();
  for (int64_t e = tid; e < visible; e += kSelectThreads) {
    const uint32_t key = order_key(row[e]);
    if (key > prefix) {
      const int at = atomicAdd(&taken, 1);
      skey[at] = key;
      sidx[at] = int32_t(e);
    }
  }
  __syncthreads();
  for (int64_t base = 0; base < visible; base += kSelectThreads) {
    __syncthreads();  // `taken` settled: every thread reads the same room
    const int room = k - taken;
    if (room <= 0) break;
    const int64_t e = base + tid;
    const int tie = e < visible && order_key(row[e]) == prefix;
    scan[tid] = tie;
    __syncthreads();
    if (tid == 0) {  // exclusive scan in index order (cheap beside the counting passes)
      int run = 0;
      for (int i = 0; i < kSelectThreads; ++i) {
        const int v = scan[i];
        scan[i] = run;
        run += v;
      }
      count = run;
    }
    __syncthreads();
    if (tie && scan[tid] < room) {
      skey[k - room + scan[tid]] = prefix;
      sidx[k - room + scan[tid]] = int32_t(e);
    }
    __syncthreads();
    if (tid == 0) taken = min(k, taken + count);
  }
  __syncthreads();
  // 3. Sort the k chosen: key descending, index ascending.
  int n = 1;
  while (n < k) n <<= 1;
  for (int i = k + tid; i < n; i += kSelectThreads) {
    skey[i] = 0;
    sidx[i] = INT_MAX;
  }
  __syncthreads();
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < n; i += kSelectThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        // "before": (key, index) a goes before b when a's key is larger, or equal with a lower index.
        const bool a_first = skey[i] > skey[j] || (skey[i] == skey[j] && sidx[i] < sidx[j]);
        const bool ascending = (i & size) == 0;  // this run wants "before" order
        if (ascending != a_first) {
          const uint32_t tk = skey[i];
          skey[i] = skey[j];
          skey[j] = tk;
          const int32_t ti = sidx[i];
          sidx[i] = sidx[j];
          sidx[j] = ti;
        }
      }
      __syncthreads();
    }
  }
  for (int j = tid; j < k; j += kSelectThreads) out[j] = sidx[j];
}

// ---- attention ----

// The new latents into their window pages (thread per element).
__global__ void kv_store_kernel(const void* kv, bool kv32, void* pool, bool p32, DeviceBatch b, int64_t t, int64_t d,
                                int block) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, t * d) {
    const int64_t tok = i / d, c = i % d;
    const int s = b.token_seq[tok];
    const int64_t pos = int64_t(b.ctx_len[s]) + (tok - b.q_start[s]);
    const int page = b.block_table[int64_t(s) * *b.bt_stride + pos / block];
    if (page < 0) continue;
    stf(pool, p32, (int64_t(page) * block + pos % block) * d + c, ldf(kv, kv32, i));
  }
}

constexpr int kAttnWarps = 4, kMaxHeadDim = 512;

// Block per (token, head): each warp takes every kAttnWarps-th key (the window's, then the
// compressed ones: all visible, or the selected), a lane holding d / 32 channels of q and of its
// output; online softmax per warp, the warps and the sink merged at the end.
__global__ void __launch_bounds__(kAttnWarps * 32) sparse_attention_kernel(
    const void* q, bool q32, const void* kv_pool, bool kp32, const void* comp_pool, bool cp32, const int32_t* rows,
    const int32_t* row_start, int ratio, const int32_t* selected, int64_t k_sel, const float* sinks, DeviceBatch b,
    int heads, int64_t d, int block, int window, float scale, void* out, bool o32) {
  pdl_begin();
  constexpr int kPer = kMaxHeadDim / 32;
  __shared__ float wm[kAttnWarps], wl[kAttnWarps], wacc[kAttnWarps][kMaxHeadDim];
  const int tok = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int s = b.token_seq[tok];
  const int64_t pos = int64_t(b.ctx_len[s]) + (tok - b.q_start[s]);
  const int32_t* table = b.block_table + int64_t(s) * *b.bt_stride;
  const int per = int(d / 32);
  float qv[kPer], acc[kPer];
  const int64_t qb = (int64_t(tok) * heads + h) * d;
  for (int j = 0; j < per; ++j) {
    qv[j] = ldf(q, q32, qb + lane + 32 * j);
    acc[j] = 0.f;
  }
  const int64_t w0 = pos - window + 1 > 0 ? pos - window + 1 : 0, nw = pos - w0 + 1;
  const bool compressed = comp_pool != nullptr;
  const int64_t nc = !compressed ? 0 : selected ? k_sel : (pos + 1) / ratio;
  float mx = -INFINITY, sum = 0.f;
  for (int64_t j = warp; j < nw + nc; j += kAttnWarps) {
    const void* pool;
    bool p32;
    int64_t at;
    if (j < nw) {
      const int64_t p = w0 + j;
      pool = kv_pool;
      p32 = kp32;
      at = (int64_t(table[p / block]) * block + p % block) * d;
    } else {
      int64_t e = j - nw;
      if (selected) {
        e = selected[int64_t(tok) * k_sel + e];
        if (e < 0 || e >= (pos + 1) / ratio) continue;  // none, or (never from the indexer) not visible
      }
      pool = comp_pool;
      p32 = cp32;
      at = int64_t(rows[row_start[s] + e]) * d;
    }
    float kc[kPer], dot = 0.f;
    for (int c = 0; c < per; ++c) {
      kc[c] = ldf(pool, p32, at + lane + 32 * c);
      dot = fmaf(qv[c], kc[c], dot);
    }
    const float logit = warp_sum(dot) * scale;
    if (logit > mx) {
      const float f = expf(mx - logit);
      sum *= f;
      for (int c = 0; c < per; ++c) acc[c] *= f;
      mx = logit;
    }
    const float e = expf(logit - mx);
    sum += e;
    for (int c = 0; c < per; ++c) acc[c] = fmaf(e, kc[c], acc[c]);
  }
  if (lane == 0) {
    wm[warp] = mx;
    wl[warp] = sum;
  }
  for (int c = 0; c < per; ++c) wacc[warp][lane + 32 * c] = acc[c];
  __syncthreads();
  const float sink = sinks[h];
  float big = sink;
  for (int w = 0; w < kAttnWarps; ++w) big = fmaxf(big, wm[w]);
  float total = expf(sink - big);
  for (int w = 0; w < kAttnWarps; ++w) total += wm[w] == -INFINITY ? 0.f : wl[w] * expf(wm[w] - big);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float v = 0.f;
    for (int w = 0; w < kAttnWarps; ++w) {
      if (wm[w] != -INFINITY) v = fmaf(wacc[w][c], expf(wm[w] - big), v);
    }
    stf(out, o32, qb + c, v / total);
  }
}

std::vector<int32_t> entry_list(const std::vector<CompressedEntry>& entries) {
  std::vector<int32_t> list;
  list.reserve(entries.size() * 2);
  for (const CompressedEntry& e : entries) {
    list.push_back(e.seq);
    list.push_back(e.index);
  }
  return list;
}

void check_indexer_inputs(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                          int block_size, int ratio, const char* op) {
  expect_float(q, op, "q");
  expect_float(weights, op, "weights");
  STRATA_CHECK(q.ndim() == 3 && q.dim(0) == batch.num_tokens(), op, ": q ", q.describe(), " for ",
               batch.num_tokens(), " tokens");
  STRATA_CHECK(weights.shape() == Shape({q.dim(0), q.dim(1)}), op, ": weights ", weights.describe(), " for q ",
               q.describe());
  check_tiling(k_pool, block_size, ratio, q.dim(2), op, "k");
  check_batch_pages(batch, block_size, k_pool.dim(0), op);
}

void launch_scores(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                   int block_size, int ratio, float score_scale, float weight_scale, const Tensor& scores,
                   const char* op) {
  const EntryRows er = visible_entry_rows(batch, block_size, ratio, op);
  const int64_t t = q.dim(0), width = scores.dim(1);
  if (!t || !width) return;
  Tensor keep_rows, keep_start;
  const int32_t* rows = device_ints(er.rows.empty() ? std::vector<int32_t>{0} : er.rows, &keep_rows);
  const int32_t* start = device_ints(er.start, &keep_start);
  launch_pdl(indexer_scores_kernel, grid_for(t * width), 256, 0, q.raw(), is_f32(q), weights.raw(), is_f32(weights),
             k_pool.raw(), is_f32(k_pool), device_batch(batch), rows, start, int(q.dim(1)), q.dim(2), ratio,
             score_scale, weight_scale, t, width, scores.data<float>());
  check_launch(op);
}

void launch_select(const Tensor& scores, const ForwardBatch& batch, int ratio, const Tensor& selected, const char* op) {
  const int64_t t = batch.num_tokens(), top_k = selected.dim(1);
  STRATA_CHECK(top_k <= kMaxSelect, op, ": top_k ", top_k, " (at most ", kMaxSelect, " on CUDA)");
  if (!t) return;
  launch_pdl(indexer_select_kernel, unsigned(t), kSelectThreads, 0, scores.data<float>(), scores.dim(1),
             device_batch(batch), ratio, int(top_k), selected.data<int32_t>());
  check_launch(op);
}

void check_selected(const Tensor& selected, int64_t t, const char* op) {
  expect_dtype(selected, DType::kI32, op, "selected");
  STRATA_CHECK(selected.ndim() == 2 && selected.dim(0) == t && selected.dim(1) > 0, op, ": selected must be I32 [",
               t, ", top_k], got ", selected.describe());
}

}  // namespace

void compressor_pool(const Tensor& kv, const Tensor& gate, const Tensor& ape, const Tensor& ring_kv,
                     const Tensor& ring_gate, const ForwardBatch& batch, const CompressorSpec& spec,
                     const std::vector<CompressedEntry>& entries, const Tensor& pooled) {
  OpTimer timer_("compressor_pool", int64_t(entries.size()), spec.ratio);
  const char* op = "compressor_pool";
  const int64_t t = batch.num_tokens(), width = spec.width(), rows = spec.ring_rows(), d = spec.head_dim;
  STRATA_CHECK(spec.ratio > 0 && d > 0, op, ": bad compressor ratio ", spec.ratio, " / head_dim ", d);
  for (const Tensor* p : {&kv, &gate, &ape, &ring_kv, &ring_gate, &pooled}) expect_float(*p, op, "tensor");
  STRATA_CHECK(kv.shape() == Shape({t, width}) && gate.shape() == kv.shape() &&
                   ape.shape() == Shape({int64_t(spec.ratio), width}),
               op, ": kv ", kv.describe(), ", gate ", gate.describe(), ", ape ", ape.describe(), " for ", t,
               " tokens of ", width);
  STRATA_CHECK(ring_kv.ndim() == 3 && ring_kv.dim(1) == rows && ring_kv.dim(2) == width &&
                   ring_gate.shape() == ring_kv.shape(),
               op, ": rings ", ring_kv.describe(), " / ", ring_gate.describe(), " should be [slots, ", rows, ", ",
               width, "]");
  STRATA_CHECK(pooled.shape() == Shape({int64_t(entries.size()), d}), op, ": pooled ", pooled.describe(), " for ",
               entries.size(), " entries");
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const int32_t slot = batch.seqs[si].state_slot;
    STRATA_CHECK(slot >= 0 && slot < ring_kv.dim(0), op, ": sequence ", si, " state slot ", slot,
                 " out of range [0, ", ring_kv.dim(0), ")");
  }
  for (const CompressedEntry& en : entries) {
    STRATA_CHECK(en.seq >= 0 && size_t(en.seq) < batch.seqs.size(), op, ": entry of sequence ", en.seq,
                 " out of range");
    const SeqInBatch& s = batch.seqs[size_t(en.seq)];
    const int64_t closing = (int64_t(en.index) + 1) * spec.ratio - 1;
    STRATA_CHECK(en.index >= 0 && closing >= s.ctx_len && closing < int64_t(s.ctx_len) + s.q_len, op, ": entry ",
                 en.index, " of sequence ", en.seq, " is not closed by this step");
  }
  if (!t) return;
  const DeviceBatch& db = device_batch(batch);
  if (!entries.empty()) {
    Tensor keep;
    const int32_t* list = device_ints(entry_list(entries), &keep);
    launch_pdl(compressor_pool_kernel, unsigned(entries.size()), 128, 0, kv.raw(), is_f32(kv), gate.raw(),
               is_f32(gate), ape.raw(), is_f32(ape), ring_kv.raw(), is_f32(ring_kv), ring_gate.raw(),
               is_f32(ring_gate), db, list, spec.ratio, d, width, int(rows), spec.overlap, pooled.raw(),
               is_f32(pooled));
    check_launch(op);
  }
  const int seqs = int(batch.seqs.size());
  launch_pdl(ring_update_kernel, grid_for(int64_t(seqs) * rows * width), 256, 0, kv.raw(), is_f32(kv), gate.raw(),
             is_f32(gate), ring_kv.raw(), is_f32(ring_kv), ring_gate.raw(), is_f32(ring_gate), db, seqs, int(rows),
             width);
  check_launch("compressor_ring_update");
}

void store_compressed(const Tensor& values, const Tensor& pool, const ForwardBatch& batch, int block_size, int ratio,
                      const std::vector<CompressedEntry>& entries) {
  OpTimer timer_("store_compressed", int64_t(entries.size()));
  const char* op = "store_compressed";
  expect_float(values, op, "values");
  const int64_t d = values.ndim() == 2 ? values.dim(1) : -1;
  STRATA_CHECK(values.shape() == Shape({int64_t(entries.size()), d}), op, ": values ", values.describe(), " for ",
               entries.size(), " entries");
  check_tiling(pool, block_size, ratio, d, op, "compressed");
  check_batch_pages(batch, block_size, pool.dim(0), op);
  std::vector<int32_t> rows;
  for (const CompressedEntry& en : entries) {
    STRATA_CHECK(en.seq >= 0 && size_t(en.seq) < batch.seqs.size() && en.index >= 0 &&
                     (int64_t(en.index) + 1) * ratio <=
                         int64_t(batch.seqs[size_t(en.seq)].ctx_len) + batch.seqs[size_t(en.seq)].q_len,
                 op, ": entry ", en.index, " of sequence ", en.seq, " is not in the batch");
    const int64_t row = compressed_entry_row(batch.seqs[size_t(en.seq)], en.index, block_size, ratio);
    STRATA_CHECK(row <= INT32_MAX, op, ": row ", row, " too large");
    rows.push_back(int32_t(row));
  }
  if (rows.empty()) return;
  Tensor keep;
  const int32_t* d_rows = device_ints(rows, &keep);
  launch_pdl(copy_rows_kernel, unsigned(rows.size()), 128, 0, values.raw(), is_f32(values), d_rows, pool.raw(),
             is_f32(pool), d);
  check_launch(op);
}

void indexer_top_k(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                   int block_size, int ratio, float score_scale, float weight_scale, const Tensor& selected) {
  OpTimer timer_("indexer_top_k", q.ndim() ? q.dim(0) : 0);
  const char* op = "indexer_top_k";
  check_indexer_inputs(q, weights, k_pool, batch, block_size, ratio, op);
  check_selected(selected, q.dim(0), op);
  Tensor scores = scratch({q.dim(0), std::max<int64_t>(1, indexer_max_visible(batch, ratio))}, DType::kF32);
  launch_scores(q, weights, k_pool, batch, block_size, ratio, score_scale, weight_scale, scores, op);
  launch_select(scores, batch, ratio, selected, op);
}

void indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                    int block_size, int ratio, float score_scale, float weight_scale, const Tensor& scores) {
  OpTimer timer_("indexer_scores", q.ndim() ? q.dim(0) : 0);
  const char* op = "indexer_scores";
  check_indexer_inputs(q, weights, k_pool, batch, block_size, ratio, op);
  expect_dtype(scores, DType::kF32, op, "scores");
  STRATA_CHECK(scores.shape() == Shape({q.dim(0), indexer_max_visible(batch, ratio)}), op, ": scores ",
               scores.describe(), " should be [", q.dim(0), ", ", indexer_max_visible(batch, ratio), "]");
  launch_scores(q, weights, k_pool, batch, block_size, ratio, score_scale, weight_scale, scores, op);
}

void indexer_select(const Tensor& scores, const ForwardBatch& batch, int ratio, const Tensor& selected) {
  OpTimer timer_("indexer_select", batch.num_tokens());
  const char* op = "indexer_select";
  const int64_t t = batch.num_tokens();
  expect_dtype(scores, DType::kF32, op, "scores");
  STRATA_CHECK(scores.shape() == Shape({t, indexer_max_visible(batch, ratio)}), op, ": scores ", scores.describe(),
               " should be [", t, ", ", indexer_max_visible(batch, ratio), "]");
  check_selected(selected, t, op);
  launch_select(scores, batch, ratio, selected, op);
}

void sparse_attention(const Tensor& q, const Tensor& kv, const Tensor& kv_pool, const Tensor& comp_pool, int ratio,
                      const Tensor& selected, const Tensor& sinks, const ForwardBatch& batch, int window, float scale,
                      const Tensor& out) {
  OpTimer timer_("sparse_attention", q.ndim() ? q.dim(0) : 0);
  const char* op = "sparse_attention";
  expect_float(q, op, "q");
  expect_float(kv, op, "kv");
  expect_dtype(sinks, DType::kF32, op, "sinks");
  expect_float(out, op, "out");
  STRATA_CHECK(q.ndim() == 3 && q.dim(0) == batch.num_tokens(), op, ": q ", q.describe(), " for ",
               batch.num_tokens(), " tokens");
  const int64_t t = q.dim(0), heads = q.dim(1), d = q.dim(2);
  STRATA_CHECK(d % 32 == 0 && d <= kMaxHeadDim, op, ": head dim ", d, " (a multiple of 32 up to ", kMaxHeadDim,
               " on CUDA)");
  STRATA_CHECK(kv.shape() == Shape({t, d}) && sinks.shape() == Shape({heads}) && out.shape() == q.shape(), op,
               ": kv ", kv.describe(), ", sinks ", sinks.describe(), ", out ", out.describe(), " for q ",
               q.describe());
  expect_float(kv_pool, op, "kv_pool");
  STRATA_CHECK(kv_pool.ndim() == 3 && kv_pool.dim(2) == d && kv_pool.dim(1) > 0, op, ": kv_pool ",
               kv_pool.describe(), " should be [blocks, block_size, ", d, "]");
  STRATA_CHECK(window > 0, op, ": window must be positive, got ", window);
  const int block_size = int(kv_pool.dim(1));
  check_batch_pages(batch, block_size, kv_pool.dim(0), op);
  const bool compressed = comp_pool.defined() && comp_pool.numel() > 0;
  const bool all_visible = compressed && !(selected.defined() && selected.numel() > 0);
  EntryRows er;
  int64_t k_sel = 0;
  if (compressed) {
    check_tiling(comp_pool, block_size, ratio, d, op, "compressed");
    er = visible_entry_rows(batch, block_size, ratio, op);
    if (!all_visible) {
      check_selected(selected, t, op);
      expect_cuda(selected, op, "selected");
      k_sel = selected.dim(1);
    }
  }
  if (!t) return;
  const DeviceBatch& db = device_batch(batch);
  launch_pdl(kv_store_kernel, grid_for(t * d), 256, 0, kv.raw(), is_f32(kv), kv_pool.raw(), is_f32(kv_pool), db, t, d,
             block_size);
  check_launch("sparse_attention_kv_store");
  Tensor keep_rows, keep_start;
  const int32_t* rows = nullptr;
  const int32_t* start = nullptr;
  if (compressed) {
    rows = device_ints(er.rows.empty() ? std::vector<int32_t>{0} : er.rows, &keep_rows);
    start = device_ints(er.start, &keep_start);
  }
  launch_pdl(sparse_attention_kernel, dim3(unsigned(t), unsigned(heads)), kAttnWarps * 32, 0, q.raw(), is_f32(q),
             kv_pool.raw(), is_f32(kv_pool), compressed ? comp_pool.raw() : nullptr,
             compressed ? is_f32(comp_pool) : false, rows, start, ratio,
             all_visible || !compressed ? nullptr : selected.data<int32_t>(), k_sel, sinks.data<float>(), db,
             int(heads), d, block_size, window, scale, out.raw(), is_f32(out));
  check_launch(op);
}

}  // namespace strata::ops::cuda
