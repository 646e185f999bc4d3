// CUDA: the Qwen sparse-attention (QSA) indexer (key pooling, the block-key cache, top-k block
// selection) and attention over the selected tokens. The block lists and cache rows are host
// facts of the batch (qsa_completed_blocks, qsa_block_row), uploaded per call; the kernels are
// plain: one block per pooled key, per query's selection, per (query, head) of attention.
#include <algorithm>
#include <climits>
#include <vector>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::ops::cuda {
namespace {

// Block i pools completed block blocks[2i + 1] of sequence blocks[2i]: the mean of its raw keys,
// the earlier ones from the sequence's tail slot.
__global__ void qsa_pool_kernel(const void* raw, bool r32, const void* tail, bool t32, const int32_t* blocks,
                                DeviceBatch b, int ratio, int64_t keep, int64_t d, void* pooled, bool p32) {
  pdl_begin();
  const int s = blocks[2 * blockIdx.x], block = blocks[2 * blockIdx.x + 1];
  const int64_t begin = b.ctx_len[s], qs = b.q_start[s];
  const int slot = b.slot[s];
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float sum = 0.f;
    for (int64_t p = int64_t(block) * ratio; p < int64_t(block + 1) * ratio; ++p) {
      float v = 0.f;
      if (p >= begin) {
        v = ldf(raw, r32, (qs + p - begin) * d + c);
      } else if (slot >= 0) {
        v = ldf(tail, t32, (int64_t(slot) * keep + p % ratio) * d + c);
      }
      sum += v;
    }
    stf(pooled, p32, int64_t(blockIdx.x) * d + c, sum / float(ratio));
  }
}

// Block per sequence, after qsa_pool_kernel: the tail slot takes the new keys of the trailing
// incomplete block.
__global__ void qsa_tail_kernel(const void* raw, bool r32, void* tail, bool t32, DeviceBatch b, int ratio,
                                int64_t keep, int64_t d) {
  pdl_begin();
  const int s = blockIdx.x, slot = b.slot[s];
  if (slot < 0) return;
  const int64_t begin = b.ctx_len[s], end = begin + b.q_len[s], qs = b.q_start[s];
  for (int64_t p = std::max(begin, end / ratio * ratio); p < end; ++p) {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      stf(tail, t32, (int64_t(slot) * keep + p % ratio) * d + c, ldf(raw, r32, (qs + p - begin) * d + c));
    }
  }
}

// Block i copies key i into cache row rows[i].
__global__ void copy_rows_kernel(const void* src, bool s32, const int32_t* rows, void* dst, bool d32, int64_t d) {
  pdl_begin();
  const int64_t to = rows[blockIdx.x];
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    stf(dst, d32, to * d + c, ldf(src, s32, int64_t(blockIdx.x) * d + c));
  }
}

constexpr int kSelectThreads = 256;

// Block per query token. Scores are computed in the CPU op's order with unfused multiplies and
// adds, so that the same inputs give the same scores (and the same choice) on both devices.
// A block's rank = blocks scoring higher, or as high with a lower index; the top_blocks of rank
// < top_blocks are written in index order (each thread takes a contiguous range of blocks and
// learns where its range starts from a scan of the per-thread counts).
__global__ void __launch_bounds__(kSelectThreads) qsa_select_kernel(
    const void* q, bool q32, const void* cache, bool c32, DeviceBatch b, const int32_t* rows,
    const int32_t* row_start, int heads, int64_t d, int ratio, int top, float scale, int64_t width,
    float* scores, uint8_t* chosen, int64_t stride, int32_t* selected) {
  pdl_begin();
  __shared__ int count[kSelectThreads];
  const int tok = blockIdx.x, tid = threadIdx.x;
  const int s = b.token_seq[tok];
  const int64_t p = int64_t(b.ctx_len[s]) + (tok - b.q_start[s]), n = (p + 1) / ratio;
  int32_t* out = selected + int64_t(tok) * width;
  if (n <= top) {  // every complete block fits: the whole causal prefix
    for (int64_t j = tid; j < width; j += blockDim.x) out[j] = j <= p ? int32_t(j) : -1;
    return;
  }
  float* sc = scores + int64_t(tok) * stride;
  uint8_t* pick = chosen + int64_t(tok) * stride;
  const int32_t* seq_rows = rows + row_start[s];
  for (int64_t j = tid; j < width; j += blockDim.x) out[j] = -1;
  for (int64_t blk = tid; blk < n; blk += blockDim.x) {
    const int64_t key = int64_t(seq_rows[blk]) * d;
    float acc = 0.f;
    for (int h = 0; h < heads; ++h) {
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) {
        dot = __fadd_rn(dot, __fmul_rn(ldf(q, q32, (int64_t(tok) * heads + h) * d + c), ldf(cache, c32, key + c)));
      }
      acc = __fadd_rn(acc, fmaxf(dot, 0.f));
    }
    sc[blk] = __fmul_rn(acc, scale);
  }
  __syncthreads();
  const int64_t span = (n + blockDim.x - 1) / blockDim.x, lo = std::min<int64_t>(n, tid * span),
                hi = std::min<int64_t>(n, lo + span);
  int mine = 0;
  for (int64_t blk = lo; blk < hi; ++blk) {
    int64_t rank = 0;
    for (int64_t o = 0; o < n && rank < top; ++o) rank += sc[o] > sc[blk] || (sc[o] == sc[blk] && o < blk);
    pick[blk] = rank < top;
    mine += pick[blk];
  }
  count[tid] = mine;
  __syncthreads();
  if (tid == 0) {
    int run = 0;
    for (int i = 0; i < int(blockDim.x); ++i) {
      const int c = count[i];
      count[i] = run;
      run += c;
    }
  }
  __syncthreads();
  int64_t at = int64_t(count[tid]) * ratio;
  for (int64_t blk = lo; blk < hi; ++blk) {
    if (!pick[blk]) continue;
    for (int j = 0; j < ratio; ++j) out[at++] = int32_t(blk * ratio + j);
  }
  for (int64_t j = n * ratio + tid; j <= p; j += blockDim.x) out[int64_t(top) * ratio + (j - n * ratio)] = int32_t(j);
}

// The new tokens' keys and values into their pages (padding rows, page -1, are skipped).
__global__ void kv_store_kernel(const void* k, bool k32, const void* v, bool v32, void* kc, bool kc32, void* vc,
                                bool vc32, DeviceBatch b, int64_t row, int block) {
  pdl_begin();
  const int t = blockIdx.x, s = b.token_seq[t];
  const int pos = b.ctx_len[s] + (t - b.q_start[s]);
  const int page = b.block_table[int64_t(s) * *b.bt_stride + pos / block];
  if (page < 0) return;
  const int64_t dst = (int64_t(page) * block + pos % block) * row, src = int64_t(t) * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    stf(kc, kc32, dst + i, ldf(k, k32, src + i));
    stf(vc, vc32, dst + i, ldf(v, v32, src + i));
  }
}

__device__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? red[lane] : -INFINITY);
}

// Block per (query token, query head): softmax over the selected positions, then the weighted
// sum of their values; `scores` holds the block's logits, -inf for unused entries.
__global__ void attention_selected_kernel(const void* q, bool q32, const void* kc, bool kc32, const void* vc,
                                          bool vc32, DeviceBatch b, const int32_t* selected, int64_t width, int hq,
                                          int hkv, int64_t d, int block, float scale, float* scores, void* out,
                                          bool o32) {
  pdl_begin();
  __shared__ float red[32];
  const int tok = blockIdx.x, h = blockIdx.y, kvh = h / (hq / hkv), s = b.token_seq[tok];
  const int64_t p = int64_t(b.ctx_len[s]) + (tok - b.q_start[s]), row = int64_t(hkv) * d;
  const int32_t* sel = selected + int64_t(tok) * width;
  const int32_t* table = b.block_table + int64_t(s) * *b.bt_stride;
  float* sc = scores + (int64_t(tok) * hq + h) * width;
  const int64_t qbase = (int64_t(tok) * hq + h) * d;
  auto cache_at = [&](int32_t pos) { return (int64_t(table[pos / block]) * block + pos % block) * row + kvh * d; };
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const int32_t pos = sel[j];
    float logit = -INFINITY;
    if (pos >= 0 && pos <= p && table[pos / block] >= 0) {
      const int64_t at = cache_at(pos);
      float dot = 0.f;
      for (int64_t c = 0; c < d; ++c) dot += ldf(q, q32, qbase + c) * ldf(kc, kc32, at + c);
      logit = dot * scale;
    }
    sc[j] = logit;
    local_max = fmaxf(local_max, logit);
  }
  const float mx = block_max(local_max, red);  // its __syncthreads also publishes sc
  if (mx == -INFINITY) {                        // nothing selected: zeros
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) stf(out, o32, qbase + c, 0.f);
    return;
  }
  float local_sum = 0.f;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) local_sum += sc[j] == -INFINITY ? 0.f : expf(sc[j] - mx);
  const float inv = 1.f / block_sum(local_sum, red);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < width; ++j) {
      if (sc[j] == -INFINITY) continue;
      acc += expf(sc[j] - mx) * inv * ldf(vc, vc32, cache_at(sel[j]) + c);
    }
    stf(out, o32, qbase + c, acc);
  }
}

// The rows (cache row indices) as I32, checked to fit.
std::vector<int32_t> narrow_rows(const std::vector<int64_t>& rows, const char* op) {
  std::vector<int32_t> out;
  out.reserve(rows.size());
  for (int64_t r : rows) {
    STRATA_CHECK(r >= 0 && r <= INT32_MAX, op, ": cache row ", r, " out of range");
    out.push_back(int32_t(r));
  }
  return out;
}

}  // namespace

void qsa_pool_keys(const Tensor& raw_keys, const Tensor& tail, const ForwardBatch& batch, int ratio,
                   const Tensor& pooled) {
  OpTimer timer_("qsa_pool_keys");
  expect_float(raw_keys, "qsa_pool_keys", "raw_keys");
  expect_float(tail, "qsa_pool_keys", "tail");
  expect_float(pooled, "qsa_pool_keys", "pooled");
  const int64_t d = raw_keys.dim(-1), t = batch.num_tokens(), keep = std::max(1, ratio - 1);
  STRATA_CHECK(raw_keys.shape() == Shape({t, d}), "qsa_pool_keys: raw_keys ", raw_keys.describe(), " for ", t,
               " tokens");
  STRATA_CHECK(tail.ndim() == 3 && tail.dim(1) == keep && tail.dim(2) == d, "qsa_pool_keys: tail ",
               tail.describe(), " should be [slots, ", keep, ", ", d, "]");
  const std::vector<QsaBlock> blocks = qsa_completed_blocks(batch, ratio);
  STRATA_CHECK(pooled.shape() == Shape({int64_t(blocks.size()), d}), "qsa_pool_keys: pooled ", pooled.describe(),
               " for ", blocks.size(), " blocks");
  for (const SeqInBatch& s : batch.seqs) {
    STRATA_CHECK(s.state_slot >= 0 && s.state_slot < tail.dim(0), "qsa_pool_keys: state slot ", s.state_slot,
                 " out of range");
  }
  if (t == 0) return;
  const DeviceBatch& db = device_batch(batch);
  if (!blocks.empty()) {
    std::vector<int32_t> list;
    for (const QsaBlock& b : blocks) {
      list.push_back(b.seq);
      list.push_back(b.block);
    }
    Tensor keep_list;
    const int32_t* d_list = device_ints(list, &keep_list);
    launch_pdl(qsa_pool_kernel, unsigned(blocks.size()), 128, 0, raw_keys.raw(), is_f32(raw_keys), tail.raw(),
               is_f32(tail), d_list, db, ratio, keep, d, pooled.raw(), is_f32(pooled));
    check_launch("qsa_pool_keys");
  }
  launch_pdl(qsa_tail_kernel, unsigned(db.num_seqs), 128, 0, raw_keys.raw(), is_f32(raw_keys), tail.raw(),
             is_f32(tail), db, ratio, keep, d);
  check_launch("qsa_tail");
}

void qsa_store_block_keys(const Tensor& block_keys, const Tensor& cache, const ForwardBatch& batch, int ratio,
                          int block_size) {
  OpTimer timer_("qsa_store_block_keys");
  expect_float(block_keys, "qsa_store_block_keys", "block_keys");
  expect_float(cache, "qsa_store_block_keys", "cache");
  const int64_t d = block_keys.dim(-1);
  STRATA_CHECK(cache.ndim() == 3 && cache.dim(2) == d, "qsa_store_block_keys: cache ", cache.describe(),
               " does not hold keys of ", d);
  const std::vector<QsaBlock> blocks = qsa_completed_blocks(batch, ratio);
  STRATA_CHECK(block_keys.shape() == Shape({int64_t(blocks.size()), d}), "qsa_store_block_keys: block_keys ",
               block_keys.describe(), " for ", blocks.size(), " blocks");
  qsa_check_paged_geometry(cache, ratio, block_size, "qsa_store_block_keys");
  for (const SeqInBatch& s : batch.seqs) qsa_check_seq_pages(s, block_size, cache.dim(0), "qsa_store_block_keys");
  if (blocks.empty()) return;
  std::vector<int64_t> rows;
  for (const QsaBlock& b : blocks) rows.push_back(qsa_block_row(batch.seqs[b.seq], b.block, ratio, block_size, cache.dim(1)));
  Tensor keep;
  const int32_t* d_rows = device_ints(narrow_rows(rows, "qsa_store_block_keys"), &keep);
  launch_pdl(copy_rows_kernel, unsigned(blocks.size()), 128, 0, block_keys.raw(), is_f32(block_keys), d_rows,
             cache.raw(), is_f32(cache), d);
  check_launch("qsa_store_block_keys");
}

void qsa_select(const Tensor& q, const Tensor& block_cache, const ForwardBatch& batch, int ratio, int block_size,
                int top_blocks, float scale, const Tensor& selected) {
  OpTimer timer_("qsa_select");
  expect_float(q, "qsa_select", "q");
  expect_float(block_cache, "qsa_select", "block_cache");
  expect_dtype(selected, DType::kI32, "qsa_select", "selected");
  STRATA_CHECK(ratio > 0 && top_blocks > 0, "qsa_select: ratio ", ratio, ", top blocks ", top_blocks);
  STRATA_CHECK(q.ndim() == 3 && q.dim(0) == batch.num_tokens(), "qsa_select: q ", q.describe(), " for ",
               batch.num_tokens(), " tokens");
  const int64_t t = q.dim(0), heads = q.dim(1), d = q.dim(2), width = int64_t(top_blocks) * ratio + ratio - 1;
  STRATA_CHECK(block_cache.ndim() == 3 && block_cache.dim(2) == d, "qsa_select: block cache ",
               block_cache.describe(), " does not hold keys of ", d);
  STRATA_CHECK(selected.shape() == Shape({t, width}), "qsa_select: selected ", selected.describe(), " should be [",
               t, ", ", width, "]");
  qsa_check_paged_geometry(block_cache, ratio, block_size, "qsa_select");
  // Every complete block's cache row, per sequence (the queries of a sequence see a prefix of them).
  std::vector<int64_t> rows;
  std::vector<int32_t> row_start;
  int64_t most = 1;
  for (const SeqInBatch& s : batch.seqs) {
    qsa_check_seq_pages(s, block_size, block_cache.dim(0), "qsa_select");
    row_start.push_back(int32_t(rows.size()));
    const int64_t n = (int64_t(s.ctx_len) + s.q_len) / ratio;
    for (int64_t b = 0; b < n; ++b) rows.push_back(qsa_block_row(s, b, ratio, block_size, block_cache.dim(1)));
    most = std::max(most, n);
  }
  if (t == 0) return;
  STRATA_CHECK(rows.size() <= size_t(INT32_MAX), "qsa_select: too many blocks");
  const DeviceBatch& db = device_batch(batch);
  Tensor keep_rows, keep_starts;
  const int32_t* d_rows = device_ints(narrow_rows(rows, "qsa_select"), &keep_rows);
  const int32_t* d_starts = device_ints(row_start, &keep_starts);
  Tensor scores = scratch({t, most}, DType::kF32), chosen = scratch({t, most}, DType::kU8);
  launch_pdl(qsa_select_kernel, unsigned(t), kSelectThreads, 0, q.raw(), is_f32(q), block_cache.raw(),
             is_f32(block_cache), db, d_rows, d_starts, int(heads), d, ratio, top_blocks, scale, width,
             scores.data<float>(), chosen.data<uint8_t>(), most, selected.data<int32_t>());
  check_launch("qsa_select");
}

void paged_attention_selected(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                              const Tensor& v_cache, const ForwardBatch& batch, const Tensor& selected, float scale,
                              const Tensor& out) {
  OpTimer timer_("paged_attention_selected");
  const char* op = "paged_attention_selected";
  for (const Tensor* x : {&q, &k, &v, &k_cache, &v_cache, &out}) expect_float(*x, op, "q, k, v, caches and out");
  expect_dtype(selected, DType::kI32, op, "selected");
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1), block = k_cache.dim(1);
  STRATA_CHECK(q.ndim() == 3 && k.shape() == Shape({t, hkv, d}) && v.shape() == k.shape() &&
                   out.shape() == q.shape() && k_cache.ndim() == 4 && k_cache.dim(2) == hkv && k_cache.dim(3) == d &&
                   v_cache.shape() == k_cache.shape() && hkv > 0 && hq % hkv == 0,
               op, ": q ", q.describe(), ", k ", k.describe(), ", v ", v.describe(), ", caches ", k_cache.describe(),
               " / ", v_cache.describe(), ", out ", out.describe());
  STRATA_CHECK(selected.ndim() == 2 && selected.dim(0) == t, op, ": selected ", selected.describe(),
               " should be I32 [", t, ", width]");
  STRATA_CHECK(int64_t(batch.token_ids.size()) == t, op, ": batch has ", batch.token_ids.size(), " tokens, q has ",
               t);
  for (const SeqInBatch& s : batch.seqs) qsa_check_seq_pages(s, block, k_cache.dim(0), op);
  if (t == 0) return;
  const DeviceBatch& db = device_batch(batch);
  const int64_t row = hkv * d, width = selected.dim(1);
  launch_pdl(kv_store_kernel, unsigned(t), 128, 0, k.raw(), is_f32(k), v.raw(), is_f32(v), k_cache.raw(),
             is_f32(k_cache), v_cache.raw(), is_f32(v_cache), db, row, int(block));
  check_launch("paged_attention_selected kv store");
  Tensor scores = scratch({t * hq, width}, DType::kF32);
  launch_pdl(attention_selected_kernel, dim3(unsigned(t), unsigned(hq)), 128, 0, q.raw(), is_f32(q), k_cache.raw(),
             is_f32(k_cache), v_cache.raw(), is_f32(v_cache), db, selected.data<int32_t>(), width, int(hq), int(hkv),
             d, int(block), scale, scores.data<float>(), out.raw(), is_f32(out));
  check_launch("paged_attention_selected");
}

}  // namespace strata::ops::cuda
