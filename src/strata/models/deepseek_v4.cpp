// DeepSeek-V4 (model_type deepseek_v4). Reads like HF's modeling_deepseek_v4.py: the residual is
// hc_mult parallel streams mixed in and out of every sublayer by manifold-constrained
// hyper-connections; attention is shared-KV MQA (head_dim 512, [nope | rope] with interleaved
// RoPE on the tail) over a sliding window plus, per layer, nothing, the indexer's top-k of
// ratio-4 compressed entries, or every ratio-128 compressed entry, with per-head sinks and a
// grouped low-rank output projection; the MoE routes by a token-id hash in the first layers
// and by sqrt-softplus scores with a selection bias after, through clamped SwiGLU experts plus
// a shared expert. The multi-token-prediction blocks (LoadOptions::mtp) draft from the
// target's pre-head residual streams (mtp_forward).
#include "strata/models/deepseek_v4.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"
#include "strata/dist/rank_split.h"
#include "strata/models/deepseek_v4_config.h"
#include "strata/models/deepseek_v4_weights.h"
#include "strata/models/weights.h"
#include "strata/ops/deepseek_v4_ops.h"
#include "strata/ops/ops.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata {
namespace {

// Cache tensors of a layer, in the order of deepseek_v4_cache_spec.
enum PagedIndex { kWindowKv = 0, kCompressedKv = 1, kIndexK = 2 };
enum SlotIndex { kCompressorKv = 0, kCompressorGate = 1, kIndexerKv = 2, kIndexerGate = 3 };

class DeepseekV4Model final : public Model {
 public:
  DeepseekV4Model(const Checkpoint& ckpt, Device device, const dist::Parallel& par, bool mtp)
      : device_(device), par_(par) {
    STRATA_CHECK(device == Device::kCpu || par_.size == 1, ckpt.dir(), ": deepseek_v4 on CUDA runs on one GPU so far (",
                 par_.size, " ranks asked)");
    cfg_ = parse_deepseek_v4_config(ckpt.config(), ckpt.config_path());
    check_shardable(cfg_, par_);
    WeightLoader loader(ckpt, "", device, par_.rank == 0);
    w_ = load_deepseek_v4_weights(ckpt, cfg_, loader, par_);
    loader.finish();
    hyper_ = {int(cfg_.hc_mult), int(cfg_.hc_iters), float(cfg_.hc_eps), float(cfg_.rms_eps)};
    info_.model_type = "deepseek_v4";
    info_.vocab_size = cfg_.vocab;
    info_.hidden_size = cfg_.hidden;
    info_.num_layers = cfg_.layers;
    info_.max_position_embeddings = cfg_.max_pos;
    info_.eos_token_ids = cfg_.eos;
    info_.bos_token_id = cfg_.bos;
    info_.cache = deepseek_v4_cache_spec(cfg_);
    info_.weight_bytes = loader.bytes_loaded();
    if (mtp) {
      STRATA_CHECK(par_.size == 1, "the multi-token-prediction head runs without tensor parallelism so far");
      WeightLoader mtp_loader(ckpt, "", device, false);
      mtp_ = load_deepseek_v4_mtp(ckpt, cfg_, mtp_loader);
      mtp_loader.finish();
      info_.weight_bytes += mtp_loader.bytes_loaded();
      info_.mtp_layers = int64_t(mtp_.size());
      // Each block caches what a sliding-window layer does (the window's keys and values).
      DeepseekV4Config sliding = cfg_;
      sliding.layers = 1;
      sliding.attention = {Dsv4Attention::kSliding};
      for (size_t j = 0; j < mtp_.size(); ++j) info_.mtp_cache.push_back(deepseek_v4_cache_spec(sliding).layers[0]);
    }
  }

  const ModelInfo& info() const override { return info_; }
  Device device() const override { return device_; }

  void forward(const ForwardBatch& batch, Caches& caches, Tensor& logits) override {
    run(batch, caches, logits, nullptr);
  }

  // `hidden`: every row's residual streams before the head, [T, hc_mult * hidden] (what the
  // multi-token-prediction blocks read, as vLLM's DeepSeek-V4 MTP does).
  void forward_with_hidden(const ForwardBatch& batch, Caches& caches, Tensor& logits, Tensor& hidden) override {
    STRATA_CHECK(!mtp_.empty(), "deepseek_v4: the multi-token-prediction head is not loaded");
    run(batch, caches, logits, &hidden);
  }

  void mtp_forward(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits) override {
    Tensor unused;
    mtp_forward_with_hidden(batch, hidden, caches, logits, unused);
  }

  // Block 0 of the head (chained drafts feed its own streams back): per stream
  // h_proj(hnorm(stream)) + e_proj(enorm(embed(token))), the token's embedding zeroed at
  // position 0 (vLLM's DeepSeek MTP does so: nothing precedes it); then the block, its
  // hyper-connection head, its norm and the target's lm_head.
  void mtp_forward_with_hidden(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits,
                               Tensor& hidden_out) override {
    STRATA_CHECK(!mtp_.empty(), "deepseek_v4: the multi-token-prediction head is not loaded");
    check_batch(batch, caches);
    STRATA_CHECK(caches.layers.size() == w_.layers.size() + mtp_.size(), "mtp_forward: caches for ",
                 caches.layers.size(), " layers; the model and its head have ", w_.layers.size() + mtp_.size(),
                 " (allocate_caches with with_mtp)");
    const int64_t t = batch.num_tokens(), h = cfg_.hidden, s = cfg_.hc_mult;
    STRATA_CHECK(hidden.shape() == Shape({t, s * h}) && hidden.device() == device_ && hidden.dtype() == DType::kF32,
                 "mtp_forward: hidden ", hidden.describe(), " for ", t, " rows (forward_with_hidden's)");
    STRATA_CHECK(hidden_out.raw() == nullptr || hidden_out.raw() != hidden.raw(),
                 "mtp_forward: the head's streams cannot overwrite its input");
    const Dsv4Mtp& m = mtp_[0];
    // The results outlive the forward's workspace: made before it opens. The head's streams are
    // computed in hidden_out itself.
    outputs(batch, logits, &hidden_out);
    ops::ForwardScope scope(device_, batch);
    Tensor e = act({t, h});
    embed_unless_first(batch, e);
    ops::rms_norm(e, m.enorm, eps(), false, e);
    Tensor e_proj = act({t, h});
    ops::linear(e, m.e_proj, e_proj);
    Tensor normed = act({t * s, h});
    ops::rms_norm(hidden.reshape({t * s, h}), m.hnorm, eps(), false, normed);
    Tensor streams = hidden_out.reshape({t, s, h}), e_streams = f32({t, s, h});
    ops::linear(normed, m.h_proj, streams.reshape({t * s, h}));
    ops::hc_expand(e_proj, int(s), e_streams.reshape({t, s * h}));
    ops::add(streams, e_streams, streams);
    block(m.block, int64_t(w_.layers.size()), streams, batch, caches);
    head(streams, batch, m.hc_head_fn, m.hc_head_base, m.hc_head_scale, m.norm, logits);
  }

 private:
  void run(const ForwardBatch& batch, Caches& caches, Tensor& logits, Tensor* hidden) {
    check_batch(batch, caches);
    const int64_t t = batch.num_tokens(), h = cfg_.hidden, s = cfg_.hc_mult;
    // The logits (and the hidden streams, computed in place there) outlive the forward's
    // workspace (ForwardScope): made before it opens.
    outputs(batch, logits, hidden);
    ops::ForwardScope scope(device_, batch);
    // The residual: hc_mult copies of the embedding, F32 on every device.
    Tensor embedded = act({t, h});
    ops::embedding(w_.embed, batch.token_ids, embedded);
    Tensor streams = hidden ? hidden->reshape({t, s, h}) : f32({t, s, h});
    ops::hc_expand(embedded, int(s), streams.reshape({t, s * h}));
    for (size_t i = 0; i < w_.layers.size(); ++i) block(w_.layers[i], int64_t(i), streams, batch, caches);
    head(streams, batch, w_.hc_head_fn, w_.hc_head_base, w_.hc_head_scale, w_.norm, logits);
  }

  // logits [logit rows, vocab] and, when asked, hidden [T, hc_mult * hidden] F32, reused when
  // they already fit.
  void outputs(const ForwardBatch& batch, Tensor& logits, Tensor* hidden) const {
    const int64_t t = batch.num_tokens(), n = int64_t(batch.logit_rows.size());
    if (!logits.defined() || logits.shape() != Shape{n, cfg_.vocab} || logits.device() != device_ ||
        logits.dtype() != DType::kF32) {
      logits = Tensor::empty({n, cfg_.vocab}, DType::kF32, device_);
    }
    const Shape wide{t, cfg_.hc_mult * cfg_.hidden};
    if (hidden && (!hidden->defined() || hidden->shape() != wide || hidden->device() != device_ ||
                   hidden->dtype() != DType::kF32)) {
      *hidden = Tensor::empty(wide, DType::kF32, device_);
    }
  }

  // e = the tokens' embeddings, rows at position 0 zero (the head's input there has no token:
  // vLLM's DeepSeek MTP). A zero row past the batch's gathers into those rows on any device.
  void embed_unless_first(const ForwardBatch& batch, const Tensor& e) const {
    const int64_t t = batch.num_tokens();
    std::vector<int32_t> rows(static_cast<size_t>(t));
    bool any_first = false;
    for (int64_t i = 0; i < t; ++i) {
      const bool first = batch.positions[size_t(i)] == 0;
      rows[size_t(i)] = first ? int32_t(t) : int32_t(i);
      any_first = any_first || first;
    }
    if (!any_first) {
      ops::embedding(w_.embed, batch.token_ids, e);
      return;
    }
    Tensor padded = Tensor::zeros({t + 1, cfg_.hidden}, e.dtype(), device_);
    ops::embedding(w_.embed, batch.token_ids, padded.rows(0, t));
    ops::gather_rows(padded, rows, e);
  }

  // One decoder block over the residual streams [T, S, hidden], its caches at caches.layers[layer].
  void block(const Dsv4Layer& l, int64_t layer, const Tensor& streams, const ForwardBatch& batch, Caches& caches) {
    const int64_t t = streams.dim(0), h = cfg_.hidden, s = cfg_.hc_mult;
    Tensor collapsed = act({t, h}), normed = act({t, h}), out = act({t, h});
    Tensor post = f32({t, s}), comb = f32({t, s, s});
    ops::hyper_pre(streams, l.hc_attn_fn, l.hc_attn_base, l.hc_attn_scale, hyper_, collapsed, post, comb);
    ops::rms_norm(collapsed, l.attn_norm, eps(), false, normed);
    attention(l, layer, normed, batch, caches, out);
    ops::hyper_post(streams, out, post, comb, streams);
    ops::hyper_pre(streams, l.hc_ffn_fn, l.hc_ffn_base, l.hc_ffn_scale, hyper_, collapsed, post, comb);
    ops::rms_norm(collapsed, l.ffn_norm, eps(), false, normed);
    moe(l, normed, batch.token_ids, out);
    ops::hyper_post(streams, out, post, comb, streams);
  }

  // The logits of batch.logit_rows: the streams mixed by a hyper-connection head, normalised,
  // through the lm_head (split over the vocabulary on tensor-parallel ranks).
  void head(const Tensor& streams, const ForwardBatch& batch, const Tensor& fn, const Tensor& base,
            const Tensor& scale, const Tensor& norm, Tensor& logits) {
    const int64_t t = streams.dim(0), h = cfg_.hidden, s = cfg_.hc_mult;
    const int64_t n = int64_t(batch.logit_rows.size());
    Tensor last = f32({n, s * h}), head_in = act({n, h}), final_normed = act({n, h});
    ops::gather_rows(streams.reshape({t, s * h}), batch.logit_rows, last);
    ops::hyper_head(last.reshape({n, s, h}), fn, base, scale, hyper_, head_in);
    ops::rms_norm(head_in, norm, eps(), false, final_normed);
    if (!logits.defined() || logits.shape() != Shape{n, cfg_.vocab} || logits.device() != device_) {
      logits = Tensor::empty({n, cfg_.vocab}, DType::kF32, device_);
    }
    if (par_.size == 1) {
      ops::linear(final_normed, w_.head, logits);
      return;
    }
    // The head is split over the vocabulary: gather the ranks' column blocks.
    Tensor mine = act({n, cfg_.vocab / par_.size});
    ops::linear(final_normed, w_.head, mine);
    dist::gather_vocab(*par_.comm, mine, logits);
  }

  // HF's ep plan, and the split experts of the default (dist::Parallel): what must divide.
  static void check_shardable(const DeepseekV4Config& c, const dist::Parallel& par) {
    const dist::RankSplit split(par, c.origin);
    if (split.ranks() == 1) return;
    if (par.expert_parallel) {
      split.divide(c.experts, "n_routed_experts");
    } else {
      split.divide(c.moe_inter, "moe_intermediate_size");
    }
    for (Dsv4Attention a : c.attention) {
      if (a == Dsv4Attention::kCompressedSparse) {
        split.divide(c.index_heads, "index_n_heads");
        break;
      }
    }
    split.divide(c.vocab, "vocab_size");
  }
  // After the routed experts and the indexer scores: the ranks' partial sums added.
  void reduce(const Tensor& t) const {
    if (par_.size > 1) par_.comm->all_reduce_sum(t);
  }

  float eps() const { return float(cfg_.rms_eps); }
  // Activations: F32 on the CPU, BF16 on CUDA (what its matrix ops take). The residual streams,
  // the hyper-connection mixes, router logits and routing weights stay F32 everywhere.
  Tensor act(Shape shape) const {
    return Tensor::empty(std::move(shape), device_ == Device::kCuda ? DType::kBF16 : DType::kF32, device_);
  }
  Tensor f32(Shape shape) const { return Tensor::empty(std::move(shape), DType::kF32, device_); }

  void check_batch(const ForwardBatch& batch, const Caches& caches) const {
    batch.validate(caches.block_size, caches.num_blocks, caches.num_slots);
    STRATA_CHECK(caches.layers.size() == w_.layers.size() || caches.layers.size() == w_.layers.size() + mtp_.size(),
                 "deepseek_v4 forward: caches for ", caches.layers.size(), " layers, model has ", w_.layers.size());
    for (size_t i = 0; i < caches.layers.size(); ++i) {
      const LayerCacheSpec& spec = i < w_.layers.size() ? info_.cache.layers[i] : info_.mtp_cache[i - w_.layers.size()];
      STRATA_CHECK(caches.layers[i].paged.size() == spec.paged.size() &&
                       caches.layers[i].slots.size() == spec.slots.size(),
                   "deepseek_v4 forward: layer ", i, " caches do not follow the model's CacheSpec");
    }
    for (size_t si = 0; si < batch.seqs.size(); ++si) {
      const SeqInBatch& q = batch.seqs[si];
      for (int32_t j = 0; j < q.q_len; ++j) {
        STRATA_CHECK(batch.positions[size_t(q.q_start + j)] == q.ctx_len + j, "deepseek_v4 forward: row ",
                     q.q_start + j, " of sequence ", si, " has position ", batch.positions[size_t(q.q_start + j)],
                     ", expected ", q.ctx_len + j, " (the compressors need consecutive positions)");
      }
    }
  }

  // Projects, pools, normalises, rotates (at each window's first position) and stores the
  // entries that this step's tokens close, and keeps the open windows in the rings.
  void compress(const Dsv4Compressor& c, const Tensor& x, const ForwardBatch& batch,
                const Tensor& ring_kv, const Tensor& ring_gate, const Tensor& pool, int block_size) {
    const int64_t t = x.dim(0), width = c.spec.width(), d = c.spec.head_dim;
    Tensor kv = act({t, width}), gate = act({t, width});
    ops::linear(x, c.kv, kv);
    ops::linear(x, c.gate, gate);
    const std::vector<ops::CompressedEntry> entries = ops::closed_entries(batch, c.spec.ratio);
    const int64_t n = int64_t(entries.size());
    Tensor pooled = act({n, d});
    ops::compressor_pool(kv, gate, c.ape, ring_kv, ring_gate, batch, c.spec, entries, pooled);
    if (n == 0) return;
    ops::rms_norm(pooled, c.norm, eps(), false, pooled);
    std::vector<int32_t> positions;
    for (const ops::CompressedEntry& e : entries) positions.push_back(e.index * c.spec.ratio);
    ops::rope_interleaved_tail(pooled.reshape({n, 1, d}), positions, cfg_.rope_compress, false);
    ops::store_compressed(pooled, pool, batch, block_size, c.spec.ratio, entries);
  }

  void attention(const Dsv4Layer& l, int64_t layer, const Tensor& x, const ForwardBatch& batch,
                 Caches& caches, const Tensor& y) {
    const int64_t t = x.dim(0), heads = cfg_.heads, d = cfg_.head_dim;
    const ops::TailRope& rope = l.attention == Dsv4Attention::kSliding ? cfg_.rope_main : cfg_.rope_compress;
    LayerCaches& cache = caches.layers[size_t(layer)];
    // q from the q-LoRA latent, normalised per head; K = V is one normalised latent.
    Tensor q_latent = act({t, cfg_.q_lora_rank});
    ops::linear(x, l.wq_a, q_latent);
    ops::rms_norm(q_latent, l.q_norm, eps(), false, q_latent);
    Tensor q = act({t, heads, d});
    ops::linear(q_latent, l.wq_b, q.reshape({t, heads * d}));
    ops::rms_norm_unweighted(q, eps(), q);
    ops::rope_interleaved_tail(q, batch.positions, rope, false);
    Tensor kv = act({t, d});
    ops::linear(x, l.wkv, kv);
    ops::rms_norm(kv, l.kv_norm, eps(), false, kv);
    ops::rope_interleaved_tail(kv.reshape({t, 1, d}), batch.positions, rope, false);
    // Compressed entries: every visible one (ratio 128), or the lightning indexer's top-k (4).
    Tensor compressed, selected;
    int ratio = 1;
    if (l.attention != Dsv4Attention::kSliding) {
      ratio = l.compressor.spec.ratio;
      compress(l.compressor, x, batch, cache.slots[kCompressorKv], cache.slots[kCompressorGate],
               cache.paged[kCompressedKv], caches.block_size);
      compressed = cache.paged[kCompressedKv];
    }
    if (l.attention == Dsv4Attention::kCompressedSparse) {
      compress(l.indexer, x, batch, cache.slots[kIndexerKv], cache.slots[kIndexerGate],
               cache.paged[kIndexK], caches.block_size);
      // This rank's indexer heads (all of them on one rank); the weight scale counts them all.
      const int64_t ih = l.index_weights.dim(0), id = cfg_.index_head_dim;
      Tensor iq = act({t, ih, id});
      ops::linear(q_latent, l.index_wq_b, iq.reshape({t, ih * id}));
      ops::rope_interleaved_tail(iq, batch.positions, cfg_.rope_compress, false);
      Tensor iw = act({t, ih});
      ops::linear(x, l.index_weights, iw);
      selected = Tensor::empty({t, cfg_.index_topk}, DType::kI32, device_);
      const float score_scale = 1.f / std::sqrt(float(id)), weight_scale = 1.f / std::sqrt(float(cfg_.index_heads));
      if (par_.size == 1) {
        ops::indexer_top_k(iq, iw, cache.paged[kIndexK], batch, caches.block_size, ratio, score_scale, weight_scale,
                           selected);
      } else {
        // Every rank scores over its heads; the summed scores give every rank the same top-k.
        Tensor scores = f32({t, ops::indexer_max_visible(batch, ratio)});
        ops::indexer_scores(iq, iw, cache.paged[kIndexK], batch, caches.block_size, ratio, score_scale,
                            weight_scale, scores);
        reduce(scores);
        ops::indexer_select(scores, batch, ratio, selected);
      }
    }
    Tensor o = act({t, heads, d});
    ops::sparse_attention(q, kv, cache.paged[kWindowKv], compressed, ratio, selected, l.sinks, batch,
                          int(cfg_.window), 1.f / std::sqrt(float(d)), o);
    // K = V carried the rotation: undo it on the output's rope slice at the query position.
    ops::rope_interleaved_tail(o, batch.positions, rope, true);
    Tensor grouped = act({t, cfg_.o_groups * cfg_.o_lora_rank});
    ops::grouped_linear(o.reshape({t, heads * d}), l.wo_a, int(cfg_.o_groups), grouped);
    ops::linear(grouped, l.wo_b, y);
  }

  void moe(const Dsv4Layer& l, const Tensor& x, const std::vector<int32_t>& token_ids, const Tensor& y) {
    const int64_t t = x.dim(0), k = cfg_.top_k;
    Tensor logits = f32({t, cfg_.experts});
    ops::linear(x, l.router, logits);
    Tensor ids = Tensor::empty({t, k}, DType::kI32, device_), weights = f32({t, k});
    if (l.mlp == Dsv4Mlp::kHash) {
      ops::moe_route_hash(logits, l.tid2eid, token_ids, float(cfg_.routed_scaling), ids, weights);
    } else {
      ops::moe_route_sqrt_softplus(logits, l.router_bias, int(k), float(cfg_.routed_scaling), ids, weights);
    }
    const float limit = float(cfg_.swiglu_limit);
    // This rank's experts (expert parallel) or its columns of every expert; the shared expert
    // is replicated, so it joins after the reduce.
    const ops::ExpertShard shard{par_.expert_parallel ? par_.rank * (cfg_.experts / par_.size) : 0, cfg_.experts};
    ops::moe_experts_clamped(x, l.experts_gate_up, l.experts_down, ids, weights, limit, y, shard);
    reduce(y);
    if (!l.shared_down.defined()) return;
    const int64_t inter = l.shared_down.dim(1);
    Tensor gate_up = act({t, 2 * inter}), a = act({t, inter}), shared = act({t, cfg_.hidden});
    ops::linear(x, l.shared_gate_up, gate_up);
    ops::silu_mul_clamped(gate_up, limit, a);
    ops::linear(a, l.shared_down, shared);
    ops::add(y, shared, y);
  }

  Device device_;
  dist::Parallel par_;
  DeepseekV4Config cfg_;
  Dsv4Weights w_;
  std::vector<Dsv4Mtp> mtp_;  // LoadOptions::mtp
  ops::HyperSpec hyper_;
  ModelInfo info_;
};

}  // namespace

std::unique_ptr<Model> load_deepseek_v4(const Checkpoint& ckpt, Device device, const dist::Parallel& parallel,
                                        bool mtp) {
  return std::make_unique<DeepseekV4Model>(ckpt, device, parallel, mtp);
}

}  // namespace strata
