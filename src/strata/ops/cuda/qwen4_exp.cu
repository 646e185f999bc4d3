// CUDA: the Qwen4-Exp ops of qwen4_exp_ops.h other than the sparse-attention indexer
// (qwen4_exp_qsa.cu): grouped and gated norms, the gated-residual hyper-connections, the PLE
// gate, the hashed n-gram ids (context pool on the device) and the gather of n-gram table rows,
// which stays in host memory. Plain kernels written for clarity: one thread per element, or one
// block per normalised group; float math on BF16 or F32 tensors.
#include <algorithm>
#include <vector>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::ops::cuda {
namespace {

// 1 / rms of x[base, base + n) plus eps, over the block (`red`: __shared__ float[32]).
__device__ __forceinline__ float block_rms_inv(const void* x, bool x32, int64_t base, int64_t n, float eps,
                                               float* red) {
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = ldf(x, x32, base + c);
    ss += v * v;
  }
  return rsqrtf(block_sum(ss, red) / float(n) + eps);
}

// Block b normalises the `group` features starting at b * group (row b / groups, group
// b % groups); each thread re-reads only the elements it read, so out may alias x.
__global__ void rms_norm_grouped_kernel(const void* x, bool x32, const void* w, bool w32, void* out, bool o32,
                                        int64_t group, int64_t groups, float eps) {
  pdl_begin();
  __shared__ float red[32];
  const int64_t base = int64_t(blockIdx.x) * group, wbase = (int64_t(blockIdx.x) % groups) * group;
  const float inv = block_rms_inv(x, x32, base, group, eps, red);
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    stf(out, o32, base + c, ldf(x, x32, base + c) * inv * (1.f + ldf(w, w32, wbase + c)));
  }
}

// One block per row: out = rms_norm(x) * w * act(z).
__global__ void rms_norm_gated_act_kernel(const void* x, bool x32, const void* z, bool z32, const void* w, bool w32,
                                          void* out, bool o32, int64_t d, float eps, bool use_sigmoid) {
  pdl_begin();
  __shared__ float red[32];
  const int64_t base = int64_t(blockIdx.x) * d;
  const float inv = block_rms_inv(x, x32, base, d, eps, red);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float zv = ldf(z, z32, base + c);
    const float gate = use_sigmoid ? sigmoid_f(zv) : silu_f(zv);
    stf(out, o32, base + c, ldf(w, w32, c) * (ldf(x, x32, base + c) * inv) * gate);
  }
}

// out[r, s*H + c] = x[r, c].
__global__ void hc_expand_kernel(const void* x, bool x32, void* out, bool o32, int64_t total, int64_t h,
                                 int streams) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, total) {
    const int64_t r = i / (streams * h), c = i % h;
    stf(out, o32, i, ldf(x, x32, r * h + c));
  }
}

// In place: x = silu(x / streams) (lowrank) or x = 2 * sigmoid(x / streams) (inject).
__global__ void hc_scalar_act_kernel(void* x, bool x32, int64_t n, float streams, bool inject) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, n) {
    const float v = ldf(x, x32, i) / streams;
    stf(x, x32, i, inject ? 2.f * sigmoid_f(v) : silu_f(v));
  }
}

// out[r, c] = (1/S) sum_s sigmoid(mix[r, s*H + c]) * normed[r, s*H + c].
__global__ void hc_mix_kernel(const void* normed, bool n32, const void* mix, bool m32, void* out, bool o32,
                              int64_t total, int64_t h, int streams) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, total) {
    const int64_t r = i / h, c = i % h;
    float acc = 0.f;
    for (int s = 0; s < streams; ++s) {
      const int64_t at = (r * streams + s) * h + c;
      acc += sigmoid_f(ldf(mix, m32, at)) * ldf(normed, n32, at);
    }
    stf(out, o32, i, acc / float(streams));
  }
}

// residual[r, s*H + c] += inject[r, s] * block_out[r, c].
__global__ void hc_write_kernel(void* residual, bool r32, const void* block_out, bool b32, const void* inject,
                                bool i32, int64_t total, int64_t h, int streams) {
  pdl_begin();
  STRATA_GRID_STRIDE(i, total) {
    const int64_t r = i / (streams * h), s = (i / h) % streams, c = i % h;
    const float add = ldf(block_out, b32, r * h + c) * ldf(inject, i32, r * streams + s);
    stf(residual, r32, i, ldf(residual, r32, i) + add);
  }
}

// Block per (row, stream): g = <key, query> / sqrt(H), signed square root, out = sigmoid(g) * value[row].
__global__ void ple_gate_kernel(const void* key, bool k32, const void* query, bool q32, const void* value, bool v32,
                                void* out, bool o32, int64_t h, int streams) {
  pdl_begin();
  __shared__ float red[32];
  const int64_t job = blockIdx.x, r = job / streams;
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) dot += ldf(key, k32, job * h + c) * ldf(query, q32, job * h + c);
  const float g = block_sum(dot, red) / sqrtf(float(h));
  const float sign = g > 0.f ? 1.f : (g < 0.f ? -1.f : 0.f);
  const float gate = sigmoid_f(sqrtf(fmaxf(fabsf(g), 1e-6f)) * sign);
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) stf(out, o32, job * h + c, gate * ldf(value, v32, r * h + c));
}

// ---- n-gram ids ----

constexpr int kMaxNgramSize = 8;
constexpr int kMaxNgramHeads = 64;

struct NgramHashParams {
  int ngram_size, heads_per_ngram, heads;
  int64_t eos;
  uint64_t multipliers[kMaxNgramSize];
  uint64_t head_sizes[kMaxNgramHeads];
  int64_t head_offsets[kMaxNgramHeads];
};

// Token `idx` of a sequence's history [context (ctx tokens); new tokens]: the context slot,
// or EOS for a fresh sequence (ctx_len == 0) and for padding sequences (no slot).
__device__ __forceinline__ int64_t history_token(const DeviceBatch& b, const int32_t* context, int ctx, int s,
                                                 int idx, int64_t eos) {
  if (idx >= ctx) return b.token_ids[b.q_start[s] + idx - ctx];
  const int slot = b.slot[s];
  if (b.ctx_len[s] == 0 || slot < 0) return eos;
  return context[int64_t(slot) * ctx + idx];
}

// One thread per token: the shifted tokens (EOS once a segment boundary lies between), their
// xor-mix per order, and each head's row.
__global__ void ngram_ids_kernel(DeviceBatch b, const int32_t* context, NgramHashParams p, int64_t* ids) {
  pdl_begin();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= b.num_tokens) return;
  const int s = b.token_seq[t], ctx = p.ngram_size - 1;
  const int j = ctx + (t - b.q_start[s]);
  uint64_t mixed = 0;
  bool boundary = false;
  int64_t* out = ids + int64_t(t) * p.heads;
  for (int shift = 0; shift < p.ngram_size; ++shift) {
    const int64_t tok = history_token(b, context, ctx, s, j - shift, p.eos);
    if (shift > 0 && tok == p.eos) boundary = true;
    const uint64_t used = uint64_t(shift > 0 && boundary ? p.eos : tok);
    mixed ^= used * p.multipliers[shift];
    if (shift == 0) continue;
    for (int h = 0; h < p.heads_per_ngram; ++h) {
      const int head = (shift - 1) * p.heads_per_ngram + h;
      out[head] = int64_t(mixed % p.head_sizes[head]) + p.head_offsets[head];
    }
  }
}

// One thread per sequence, after ngram_ids_kernel: the slot keeps the last ctx history tokens.
// Slot entry i takes history token q_len + i >= i, so ascending order reads before it overwrites.
__global__ void ngram_context_kernel(DeviceBatch b, int32_t* context, int ctx, int64_t eos) {
  pdl_begin();
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= b.num_seqs || b.slot[s] < 0) return;
  for (int i = 0; i < ctx; ++i) {
    const int64_t tok = history_token(b, context, ctx, s, b.q_len[s] + i, eos);
    context[int64_t(b.slot[s]) * ctx + i] = int32_t(tok);
  }
}

// Checks x [T, S*H] against `streams` and returns H.
int64_t stream_width(const Tensor& x, int streams, const char* op, const char* what) {
  expect_float(x, op, what);
  STRATA_CHECK(streams > 0 && x.ndim() >= 1 && x.dim(-1) % streams == 0, op, ": ", what, " ", x.describe(),
               " does not split into ", streams, " streams");
  return x.dim(-1) / streams;
}

int threads_for(int64_t n) { return n >= 256 ? 256 : n >= 128 ? 128 : n >= 64 ? 64 : 32; }

}  // namespace

void rms_norm_grouped(const Tensor& x, const Tensor& w, int64_t group, float eps, const Tensor& out) {
  OpTimer timer_("rms_norm_grouped");
  expect_float(x, "rms_norm_grouped", "x");
  expect_float(w, "rms_norm_grouped", "weight");
  expect_float(out, "rms_norm_grouped", "out");
  const int64_t c = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(group > 0 && c % group == 0 && w.numel() == c && out.numel() == x.numel(), "rms_norm_grouped: x ",
               x.describe(), ", weight ", w.describe(), ", group ", group);
  const int64_t groups = c / group;
  if (rows * groups == 0) return;
  launch_pdl(rms_norm_grouped_kernel, unsigned(rows * groups), threads_for(group), 0, x.raw(), is_f32(x), w.raw(),
             is_f32(w), out.raw(), is_f32(out), group, groups, eps);
  check_launch("rms_norm_grouped");
}

void rms_norm_gated_act(const Tensor& x, const Tensor& z, const Tensor& w, float eps, GateActivation act,
                        const Tensor& out) {
  OpTimer timer_("rms_norm_gated_act");
  expect_float(x, "rms_norm_gated_act", "x");
  expect_float(z, "rms_norm_gated_act", "z");
  expect_float(w, "rms_norm_gated_act", "weight");
  expect_float(out, "rms_norm_gated_act", "out");
  const int64_t d = x.dim(-1), rows = rows_of(x);
  STRATA_CHECK(w.numel() == d && z.numel() == x.numel() && out.numel() == x.numel(),
               "rms_norm_gated_act: shapes differ: x ", x.describe(), " z ", z.describe(), " w ", w.describe());
  if (rows == 0) return;
  launch_pdl(rms_norm_gated_act_kernel, unsigned(rows), threads_for(d), 0, x.raw(), is_f32(x), z.raw(), is_f32(z),
             w.raw(), is_f32(w), out.raw(), is_f32(out), d, eps, act == GateActivation::kSigmoid);
  check_launch("rms_norm_gated_act");
}

void hc_expand(const Tensor& x, int streams, const Tensor& out) {
  OpTimer timer_("hc_expand");
  expect_float(x, "hc_expand", "x");
  const int64_t h = stream_width(out, streams, "hc_expand", "out"), t = rows_of(out);
  STRATA_CHECK(x.dim(-1) == h && rows_of(x) == t, "hc_expand: x ", x.describe(), " into ", out.describe());
  if (out.numel() == 0) return;
  launch_pdl(hc_expand_kernel, grid_for(out.numel()), 256, 0, x.raw(), is_f32(x), out.raw(), is_f32(out),
             out.numel(), h, streams);
  check_launch("hc_expand");
}

void hc_lowrank_act(const Tensor& x, int streams) {
  OpTimer timer_("hc_lowrank_act");
  expect_float(x, "hc_lowrank_act", "x");
  STRATA_CHECK(streams > 0, "hc_lowrank_act: ", streams, " streams");
  if (x.numel() == 0) return;
  launch_pdl(hc_scalar_act_kernel, grid_for(x.numel()), 256, 0, x.raw(), is_f32(x), x.numel(), float(streams), false);
  check_launch("hc_lowrank_act");
}

void hc_mix(const Tensor& normed, const Tensor& mix_logits, int streams, const Tensor& out) {
  OpTimer timer_("hc_mix");
  const int64_t h = stream_width(normed, streams, "hc_mix", "normed"), t = rows_of(normed);
  expect_float(mix_logits, "hc_mix", "mix_logits");
  expect_float(out, "hc_mix", "out");
  STRATA_CHECK(mix_logits.numel() == normed.numel() && out.dim(-1) == h && rows_of(out) == t, "hc_mix: normed ",
               normed.describe(), ", mix ", mix_logits.describe(), ", out ", out.describe());
  if (out.numel() == 0) return;
  launch_pdl(hc_mix_kernel, grid_for(out.numel()), 256, 0, normed.raw(), is_f32(normed), mix_logits.raw(),
             is_f32(mix_logits), out.raw(), is_f32(out), out.numel(), h, streams);
  check_launch("hc_mix");
}

void hc_inject_weights(const Tensor& logits, int streams) {
  OpTimer timer_("hc_inject_weights");
  expect_float(logits, "hc_inject_weights", "logits");
  STRATA_CHECK(streams > 0 && logits.dim(-1) == streams, "hc_inject_weights: logits ", logits.describe(), " for ",
               streams, " streams");
  if (logits.numel() == 0) return;
  launch_pdl(hc_scalar_act_kernel, grid_for(logits.numel()), 256, 0, logits.raw(), is_f32(logits), logits.numel(),
             float(streams), true);
  check_launch("hc_inject_weights");
}

void hc_write(const Tensor& residual, const Tensor& block_out, const Tensor& inject) {
  OpTimer timer_("hc_write");
  expect_float(inject, "hc_write", "inject");
  expect_float(block_out, "hc_write", "block_out");
  const int streams = int(inject.dim(-1));
  const int64_t h = stream_width(residual, streams, "hc_write", "residual"), t = rows_of(residual);
  STRATA_CHECK(block_out.dim(-1) == h && rows_of(block_out) == t && rows_of(inject) == t, "hc_write: residual ",
               residual.describe(), ", block_out ", block_out.describe(), ", inject ", inject.describe());
  if (residual.numel() == 0) return;
  launch_pdl(hc_write_kernel, grid_for(residual.numel()), 256, 0, residual.raw(), is_f32(residual),
             block_out.raw(), is_f32(block_out), inject.raw(), is_f32(inject), residual.numel(), h, streams);
  check_launch("hc_write");
}

void ple_gate(const Tensor& key, const Tensor& query, const Tensor& value, int streams, const Tensor& out) {
  OpTimer timer_("ple_gate");
  const int64_t h = stream_width(key, streams, "ple_gate", "key"), t = rows_of(key);
  expect_float(query, "ple_gate", "query");
  expect_float(value, "ple_gate", "value");
  expect_float(out, "ple_gate", "out");
  STRATA_CHECK(query.numel() == key.numel() && out.numel() == key.numel() && value.dim(-1) == h &&
                   rows_of(value) == t,
               "ple_gate: key ", key.describe(), ", query ", query.describe(), ", value ", value.describe(), ", out ",
               out.describe());
  if (t == 0) return;
  launch_pdl(ple_gate_kernel, unsigned(t * streams), threads_for(h), 0, key.raw(), is_f32(key), query.raw(),
             is_f32(query), value.raw(), is_f32(value), out.raw(), is_f32(out), h, streams);
  check_launch("ple_gate");
}

void ngram_ids(const ForwardBatch& batch, const NgramHashSpec& spec, int64_t vocab, const Tensor& context,
               const Tensor& ids) {
  OpTimer timer_("ngram_ids");
  const int ctx = spec.ngram_size - 1, heads = spec.heads();
  const int64_t t = batch.num_tokens();
  STRATA_CHECK(spec.ngram_size >= 2 && spec.ngram_size <= kMaxNgramSize && spec.heads_per_ngram >= 1 &&
                   heads <= kMaxNgramHeads && int(spec.multipliers.size()) == spec.ngram_size &&
                   int(spec.head_vocab_sizes.size()) == heads && int(spec.head_offsets.size()) == heads,
               "ngram_ids: hash spec (ngram_size ", spec.ngram_size, ", ", heads, " heads, ", spec.multipliers.size(),
               " multipliers) is inconsistent or beyond the CUDA limits (ngram_size <= ", kMaxNgramSize, ", heads <= ",
               kMaxNgramHeads, ")");
  expect_dtype(context, DType::kI32, "ngram_ids", "context");
  expect_dtype(ids, DType::kI64, "ngram_ids", "ids");
  STRATA_CHECK(context.ndim() == 2 && context.dim(1) == ctx, "ngram_ids: context ", context.describe(),
               " should be I32 [slots, ", ctx, "]");
  STRATA_CHECK(ids.shape() == Shape({t, heads}), "ngram_ids: ids ", ids.describe(), " should be [", t, ", ", heads,
               "]");
  STRATA_CHECK(spec.eos >= 0 && spec.eos < vocab, "ngram_ids: eos ", spec.eos, " out of range [0, ", vocab, ")");
  for (int32_t tok : batch.token_ids) {
    STRATA_CHECK(tok >= 0 && tok < vocab, "token id ", tok, " out of range [0, ", vocab, ")");
  }
  for (const SeqInBatch& s : batch.seqs) {
    STRATA_CHECK(s.state_slot >= 0 && s.state_slot < context.dim(0), "ngram_ids: state slot ", s.state_slot,
                 " out of range");
  }
  NgramHashParams p{};
  p.ngram_size = spec.ngram_size;
  p.heads_per_ngram = spec.heads_per_ngram;
  p.heads = heads;
  p.eos = spec.eos;
  for (int i = 0; i < spec.ngram_size; ++i) p.multipliers[i] = uint64_t(spec.multipliers[i]);
  for (int h = 0; h < heads; ++h) {
    STRATA_CHECK(spec.head_vocab_sizes[h] > 0, "ngram_ids: head vocab size ", spec.head_vocab_sizes[h]);
    p.head_sizes[h] = uint64_t(spec.head_vocab_sizes[h]);
    p.head_offsets[h] = spec.head_offsets[h];
  }
  if (t == 0) return;
  const DeviceBatch& db = device_batch(batch);
  launch_pdl(ngram_ids_kernel, blocks_for(t, 128), 128, 0, db, static_cast<const int32_t*>(context.raw()), p,
             static_cast<int64_t*>(ids.raw()));
  check_launch("ngram_ids");
  launch_pdl(ngram_context_kernel, blocks_for(db.num_seqs, 64), 64, 0, db, static_cast<int32_t*>(context.raw()), ctx,
             spec.eos);
  check_launch("ngram_context");
}

void sharded_embedding(const std::vector<Tensor>& shards, const Tensor& ids, const Tensor& out) {
  OpTimer timer_("sharded_embedding");
  expect_dtype(ids, DType::kI64, "sharded_embedding", "ids");
  expect_float(out, "sharded_embedding", "out");
  STRATA_CHECK(!capturing(), "sharded_embedding: the n-gram table lives in host memory; gathering from it waits "
               "for the GPU, which a CUDA graph capture cannot do");
  STRATA_CHECK(ids.ndim() == 2 && out.ndim() == 2 && out.dim(0) == ids.dim(0), "sharded_embedding: ids ",
               ids.describe(), ", out ", out.describe());
  // The ids come to the host (this waits for the kernels that computed them), the CPU op
  // gathers and converts only the rows they name, and the rows go up into `out`.
  const Tensor host_ids = ids.to(Device::kCpu);
  Tensor rows = Tensor::empty(out.shape(), DType::kF32);
  ops::sharded_embedding(shards, host_ids, rows);
  Tensor upload = rows;
  if (!is_f32(out)) {
    upload = Tensor::empty(out.shape(), DType::kBF16);
    for (int64_t i = 0; i < rows.numel(); ++i) upload.data<uint16_t>()[i] = f32_to_bf16(rows.data<float>()[i]);
  }
  // From pageable memory: the call returns once the host buffer has been staged.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(out.raw(), upload.raw(), upload.nbytes(), cudaMemcpyHostToDevice, stream()));
}

void expect_eager_forward(const std::string& model) {
  STRATA_CHECK(!capturing(), model, ": the forward reads host data in its middle (the n-gram table gathers "
               "wait for the GPU; the QSA block lists come from the host batch), so it cannot be captured "
               "into a CUDA graph; run it eagerly");
}

}  // namespace strata::ops::cuda
