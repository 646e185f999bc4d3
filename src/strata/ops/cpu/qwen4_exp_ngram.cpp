// CPU reference: the hashed n-gram ids of the per-layer n-gram embeddings (PLE) and the row
// gather from the sharded, host-resident n-gram table.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::ops {

void ngram_ids(const ForwardBatch& batch, const NgramHashSpec& spec, int64_t vocab,
               const Tensor& context, const Tensor& ids) {
  STRATA_CUDA_DISPATCH(ids, ngram_ids(batch, spec, vocab, context, ids));
  const int ctx = spec.ngram_size - 1, heads = spec.heads();
  const int64_t t = batch.num_tokens();
  STRATA_CHECK(spec.ngram_size >= 2 && spec.heads_per_ngram >= 1 &&
                   int(spec.multipliers.size()) == spec.ngram_size &&
                   int(spec.head_vocab_sizes.size()) == heads &&
                   int(spec.head_offsets.size()) == heads,
               "ngram_ids: inconsistent hash spec (ngram_size ", spec.ngram_size, ", ",
               spec.multipliers.size(), " multipliers, ", spec.head_vocab_sizes.size(),
               " head sizes for ", heads, " heads)");
  for (int64_t s : spec.head_vocab_sizes) STRATA_CHECK(s > 0, "ngram_ids: head vocab size ", s);
  STRATA_CHECK(context.device() == Device::kCpu && context.dtype() == DType::kI32 &&
                   context.ndim() == 2 && context.dim(1) == ctx,
               "ngram_ids: context ", context.describe(), " should be I32 [slots, ", ctx, "]");
  STRATA_CHECK(ids.device() == Device::kCpu && ids.dtype() == DType::kI64, "ngram_ids: ids ",
               ids.describe(), " should be I64");
  expect_shape(ids, {t, heads}, "ngram_ids", "ids");
  STRATA_CHECK(spec.eos >= 0 && spec.eos < vocab, "ngram_ids: eos ", spec.eos, " out of range [0, ",
               vocab, ")");
  for (int32_t tok : batch.token_ids) {
    STRATA_CHECK(tok >= 0 && tok < vocab, "token id ", tok, " out of range [0, ", vocab, ")");
  }
  for (const SeqInBatch& s : batch.seqs) {
    STRATA_CHECK(s.state_slot >= 0 && s.state_slot < context.dim(0), "ngram_ids: state slot ",
                 s.state_slot, " out of range");
  }
  const auto* mult = reinterpret_cast<const uint64_t*>(spec.multipliers.data());
  for (const SeqInBatch& s : batch.seqs) {
    int32_t* slot = context.data<int32_t>() + int64_t(s.state_slot) * ctx;
    // history = [context (ctx tokens); new tokens]; last_eos[j] = latest EOS index < j, or -1.
    std::vector<int64_t> hist(ctx + s.q_len);
    for (int i = 0; i < ctx; ++i) hist[i] = s.ctx_len == 0 ? spec.eos : slot[i];
    for (int32_t i = 0; i < s.q_len; ++i) hist[ctx + i] = batch.token_ids[s.q_start + i];
    std::vector<int64_t> prev_eos(hist.size());
    int64_t last = -1;
    for (size_t j = 0; j < hist.size(); ++j) {
      prev_eos[j] = last;
      if (hist[j] == spec.eos) last = int64_t(j);
    }
    for (int32_t i = 0; i < s.q_len; ++i) {
      const int64_t j = ctx + i;
      uint64_t mixed = 0;
      int64_t* out = ids.data<int64_t>() + (int64_t(s.q_start) + i) * heads;
      for (int shift = 0; shift < spec.ngram_size; ++shift) {
        // The token `shift` back, unless a segment boundary (EOS) lies in [j - shift, j - 1].
        const uint64_t tok = uint64_t(j - shift > prev_eos[j] ? hist[j - shift] : spec.eos);
        mixed ^= tok * mult[shift];  // < 2^63 by the multiplier bound: no wrap-around
        if (shift == 0) continue;
        const int order_base = (shift - 1) * spec.heads_per_ngram;  // heads of order shift + 1
        for (int h = 0; h < spec.heads_per_ngram; ++h) {
          const int head = order_base + h;
          out[head] = int64_t(mixed % uint64_t(spec.head_vocab_sizes[head])) + spec.head_offsets[head];
        }
      }
    }
    for (int i = 0; i < ctx; ++i) slot[i] = int32_t(hist[hist.size() - ctx + i]);
  }
}

void sharded_embedding(const std::vector<Tensor>& shards, const Tensor& ids, const Tensor& out) {
  STRATA_CUDA_DISPATCH(out, sharded_embedding(shards, ids, out));
  STRATA_CHECK(!shards.empty(), "sharded_embedding: no shards");
  const int64_t dim = shards[0].ndim() == 2 ? shards[0].dim(1) : -1;
  std::vector<int64_t> starts{0};  // first row of each shard, then the total
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tensor& s = shards[i];
    STRATA_CHECK(s.device() == Device::kCpu && s.ndim() == 2 && s.dim(1) == dim &&
                     (s.dtype() == DType::kF32 || s.dtype() == DType::kBF16 ||
                      s.dtype() == DType::kF16),
                 "sharded_embedding: shard ", i, " ", s.describe(),
                 " should be a host F32/BF16/F16 [rows, ", dim, "] tensor");
    starts.push_back(starts.back() + s.dim(0));
  }
  STRATA_CHECK(ids.device() == Device::kCpu && ids.dtype() == DType::kI64 && ids.ndim() == 2,
               "sharded_embedding: ids ", ids.describe(), " should be I64 [T, heads]");
  const int64_t t = ids.dim(0), heads = ids.dim(1), total = starts.back();
  expect_cpu_f32(out, "sharded_embedding", "out");
  expect_shape(out, {t, heads * dim}, "sharded_embedding", "out");
  const int64_t* pid = ids.data<int64_t>();
  for (int64_t i = 0; i < t * heads; ++i) {
    STRATA_CHECK(pid[i] >= 0 && pid[i] < total, "sharded_embedding: row ", pid[i],
                 " out of range [0, ", total, ")");
  }
  parallel_for(t * heads, [&](int64_t i) {
    const size_t shard = size_t(std::upper_bound(starts.begin(), starts.end(), pid[i]) - starts.begin()) - 1;
    const Tensor& s = shards[shard];
    const size_t esz = dtype_size(s.dtype());
    const char* src = static_cast<const char*>(s.raw()) + size_t(pid[i] - starts[shard]) * dim * esz;
    to_f32(s.dtype(), src, out.data<float>() + i * dim, size_t(dim));
  });
}

void expect_eager_forward(Device device, const std::string& model) {
#if defined(STRATA_WITH_CUDA)
  if (device == Device::kCuda) cuda::expect_eager_forward(model);
#else
  (void)device;
  (void)model;
#endif
}

}  // namespace strata::ops
