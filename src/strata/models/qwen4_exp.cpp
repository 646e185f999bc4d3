// The Qwen4-Exp family (Qwen3.8-Flash-Next). Reads like HF's modeling_qwen4_exp.py: the token
// embedding fans out into S residual streams; each decoder layer adds its per-layer n-gram
// embedding (PLE, on some GDN layers), reads the streams through a low-rank gated-residual read
// gate into one hidden row, runs a Gated DeltaNet with a sigmoid (or silu) output gate or Qwen
// sparse attention (gated GQA over the tokens that a block indexer selects), writes the result
// back into every stream, and does the same around a softmax-routed MoE with a gated shared
// expert. The exit mixer (a read gate without injection) gives the hidden row for lm_head;
// there is no final RMSNorm. The multi-token-prediction head (LoadOptions::mtp) drafts from the
// streams before the exit mixer (mtp_forward).
//
// On CUDA the activations are BF16 (router and injection logits, GDN gates and state, logits: F32);
// the n-gram tables stay in the host mapping: each PLE layer copies its hashed ids to the host,
// gathers the rows there and uploads them, so the forward syncs and is never graph-captured.
//
// Tensor parallelism (CPU): each rank holds its share of the GDN, attention and indexer heads, the
// experts and lm_head (qwen4_exp_rank_config); the hyper-connections, PLE layers and exit mixer
// work on whole stream rows and are replicated, so every rank keeps the same residual streams.
#include "strata/models/qwen4_exp.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"
#include "strata/models/qwen4_exp_config.h"
#include "strata/models/qwen4_exp_weights.h"
#include "strata/models/weights.h"
#include "strata/ops/ops.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata {
namespace {

// Cache tensors of each layer, in the order the CacheSpec declares them.
enum GdnSlot { kSsm = 0, kConv = 1, kPleConv = 2, kNgramContext = 3 };
enum QsaPaged { kKeys = 0, kValues = 1, kIndexBlockKeys = 2 };
enum QsaSlot { kIndexTail = 0 };

class Qwen4ExpModel final : public Model {
 public:
  Qwen4ExpModel(const Checkpoint& ckpt, Device device, const dist::Parallel& par, DType ssm_dtype, bool mtp)
      : device_(device), par_(par), ssm_dtype_(ssm_dtype) {
    full_ = parse_qwen4_exp_config(ckpt.config(), ckpt.config_path());
    cfg_ = qwen4_exp_rank_config(full_, par_, ckpt.config_path());
    STRATA_CHECK(par_.size == 1 || device == Device::kCpu, ckpt.dir(), ": tensor parallelism (", par_.size,
                 " ranks) runs on the CPU only so far for ", cfg_.model_type);
    WeightLoader w(ckpt, WeightLoader::detect_prefix(ckpt), device, par_.rank == 0);
    weights_ = load_qwen4_exp_weights(w, full_, par_);
    w.finish();
    // HF drops mtp.* (and the vision tower); vLLM drops an exit-mixer inject weight.
    auto unused = w.unused({"model.visual.", "visual.", "mtp.", "model.mtp.",
                            w.prefix() + "hyper_connection_mixer.block_inject_weight"});
    STRATA_CHECK(unused.empty(), ckpt.dir(), ": unexpected tensor '", unused.empty() ? "" : unused[0],
                 "' (", unused.size(), " unused in all) for ", cfg_.model_type);
    info_.model_type = cfg_.model_type;
    info_.vocab_size = cfg_.vocab;
    info_.hidden_size = cfg_.hidden;
    info_.num_layers = cfg_.layers;
    info_.max_position_embeddings = cfg_.max_pos;
    info_.eos_token_ids = cfg_.eos;
    info_.bos_token_id = cfg_.bos;
    info_.weight_bytes = w.bytes_loaded();  // the n-gram tables stay in the host mapping
    for (const Qwen4ExpLayerWeights& l : weights_.layers) info_.cache.layers.push_back(cache_spec(l));
    if (mtp) load_mtp(ckpt);
  }

  const ModelInfo& info() const override { return info_; }
  Device device() const override { return device_; }

  void forward(const ForwardBatch& batch, Caches& caches, Tensor& logits) override {
    run(batch, caches, logits, nullptr);
  }

  // `hidden`: every row's residual streams before the exit mixer, [T, hc * hidden] (what the
  // head reads, as vLLM's Qwen4-Exp MTP does).
  void forward_with_hidden(const ForwardBatch& batch, Caches& caches, Tensor& logits, Tensor& hidden) override {
    STRATA_CHECK(info_.mtp_layers > 0, cfg_.model_type, ": the multi-token-prediction head is not loaded");
    run(batch, caches, logits, &hidden);
  }

  void mtp_forward(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits) override {
    run_mtp(batch, hidden, caches, logits, nullptr);
  }

  void mtp_forward_with_hidden(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits,
                               Tensor& hidden_out) override {
    run_mtp(batch, hidden, caches, logits, &hidden_out);
  }

 private:
  void check_batch(const ForwardBatch& batch, const Caches& caches) const {
    batch.validate(caches.block_size, caches.num_blocks, caches.num_slots);
    STRATA_CHECK(caches.layers.size() == weights_.layers.size() ||
                     caches.layers.size() == weights_.layers.size() + mtp_.layers.size(),
                 "forward: caches for ", caches.layers.size(), " layers, model has ", weights_.layers.size());
    for (const SeqInBatch& s : batch.seqs) {
      STRATA_CHECK(s.state_slot >= 0, "forward: a ", cfg_.model_type, " sequence needs a state slot");
      for (int32_t i = 0; i < s.q_len; ++i) {
        // The indexer ropes each block key at its first token's position, which it takes to be
        // the token's index (text positions).
        STRATA_CHECK(batch.positions[s.q_start + i] == s.ctx_len + i, "forward: ", cfg_.model_type,
                     " needs text positions (token ", s.q_start + i, " has position ",
                     batch.positions[s.q_start + i], ", expected ", s.ctx_len + i, ")");
      }
    }
    ops::expect_eager_forward(device_, cfg_.model_type);
  }

  void prepare(const ForwardBatch& batch, Tensor& logits, Tensor* hidden) const {
    const int64_t n = int64_t(batch.logit_rows.size()), t = batch.num_tokens(), wide = cfg_.hc * cfg_.hidden;
    if (!logits.defined() || logits.shape() != Shape{n, cfg_.vocab} || logits.device() != device_) {
      logits = Tensor::empty({n, cfg_.vocab}, DType::kF32, device_);
    }
    if (hidden && (!hidden->defined() || hidden->shape() != Shape{t, wide} || hidden->device() != device_ ||
                   hidden->dtype() != act_dtype())) {
      *hidden = act({t, wide});  // before the forward's scope: it outlives the workspace
    }
  }

  void run(const ForwardBatch& batch, Caches& caches, Tensor& logits, Tensor* hidden) {
    check_batch(batch, caches);
    prepare(batch, logits, hidden);
    // Everything below is the forward's workspace (on CUDA: an arena reset per forward).
    ops::ForwardScope scope(device_, batch);
    const int64_t t = batch.num_tokens(), wide = cfg_.hc * cfg_.hidden;
    Tensor x = act({t, cfg_.hidden});
    ops::embedding(weights_.embed, batch.token_ids, x);
    Tensor h = act({t, wide});
    ops::hc_expand(x, int(cfg_.hc), h);
    for (size_t i = 0; i < weights_.layers.size(); ++i) layer(weights_.layers[i], i, batch, caches, h);
    exit(h, batch, weights_.mixer, logits, hidden);
  }

  // The head over rows pairing the target's streams at position p with the token at p + 1: per
  // stream fc_hidden(norm_hidden(streams)_s) + fc_embedding(norm_embedding(embed(token))), its
  // decoder layers (caches after the trunk's), its exit mixer, the target's lm_head.
  void run_mtp(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits, Tensor* hidden_out) {
    STRATA_CHECK(info_.mtp_layers > 0, cfg_.model_type, ": the multi-token-prediction head is not loaded");
    check_batch(batch, caches);
    STRATA_CHECK(caches.layers.size() == weights_.layers.size() + mtp_.layers.size(), "mtp_forward: caches for ",
                 caches.layers.size(), " layers; the model and its head have ",
                 weights_.layers.size() + mtp_.layers.size(), " (allocate_caches with with_mtp)");
    const int64_t t = batch.num_tokens(), hsz = cfg_.hidden, wide = cfg_.hc * hsz;
    STRATA_CHECK(hidden.shape() == Shape({t, wide}) && hidden.device() == device_ && hidden.dtype() == act_dtype(),
                 "mtp_forward: hidden ", hidden.describe(), " for ", t, " rows (forward_with_hidden's)");
    prepare(batch, logits, hidden_out);
    ops::ForwardScope scope(device_, batch);
    Tensor e = act({t, hsz}), en = act({t, hsz}), ep = act({t, hsz});
    ops::embedding(weights_.embed, batch.token_ids, e);
    ops::rms_norm(e, mtp_.norm_embedding, eps(), true, en);
    ops::linear(en, mtp_.fc_embedding, ep);
    Tensor hn = act({t, wide}), h = act({t, wide}), broadcast = act({t, wide});
    ops::rms_norm(hidden, mtp_.norm_hidden, eps(), true, hn);  // one RMS over the whole row
    ops::linear(hn.reshape({t * cfg_.hc, hsz}), mtp_.fc_hidden, h.reshape({t * cfg_.hc, hsz}));
    ops::hc_expand(ep, int(cfg_.hc), broadcast);
    ops::add(h, broadcast, h);
    for (size_t j = 0; j < mtp_.layers.size(); ++j) {
      layer(mtp_.layers[j], weights_.layers.size() + j, batch, caches, h);
    }
    exit(h, batch, mtp_.mixer, logits, hidden_out);
  }

  // One decoder layer over the streams h, its caches at caches.layers[index].
  void layer(const Qwen4ExpLayerWeights& l, size_t index, const ForwardBatch& batch, Caches& caches, const Tensor& h) {
    const int64_t t = batch.num_tokens();
    LayerCaches& cache = caches.layers[index];
    Tensor x = act({t, cfg_.hidden}), block_out = act({t, cfg_.hidden});
    Tensor inject = Tensor::empty({t, cfg_.hc}, DType::kF32, device_);
    if (l.has_ple) per_layer_embedding(l.ple, batch, cache, h);
    read_gate(l.attn_hc, h, x, &inject);
    if (l.linear) {
      gated_delta_net(l.gdn, x, batch, cache, block_out);
    } else {
      sparse_attention(l.qsa, x, batch, cache, caches.block_size, block_out);
    }
    ops::hc_write(h, block_out, inject);
    read_gate(l.mlp_hc, h, x, &inject);
    moe(l.moe, x, block_out);
    ops::hc_write(h, block_out, inject);
  }

  // The logits of batch.logit_rows through an exit mixer and lm_head (split over the vocabulary
  // on tensor-parallel ranks); `hidden` (when given) gets every row's streams.
  void exit(const Tensor& h, const ForwardBatch& batch, const HyperConnectionWeights& mixer, Tensor& logits,
            Tensor* hidden) {
    const int64_t n = int64_t(batch.logit_rows.size()), wide = cfg_.hc * cfg_.hidden;
    if (hidden) ops::copy_columns(h, 0, *hidden);
    Tensor last = act({n, wide}), mixed = act({n, cfg_.hidden});
    ops::gather_rows(h, batch.logit_rows, last);
    read_gate(mixer, last, mixed, nullptr);
    if (par_.size == 1) {
      ops::linear(mixed, weights_.lm_head, logits);
      return;
    }
    // lm_head is split over the vocabulary: gather the ranks' column blocks.
    Tensor mine = act({n, cfg_.vocab / par_.size});
    ops::linear(mixed, weights_.lm_head, mine);
    dist::gather_vocab(*par_.comm, mine, logits);
  }

  void load_mtp(const Checkpoint& ckpt) {
    STRATA_CHECK(par_.size == 1, "the multi-token-prediction head runs without tensor parallelism so far");
    if (full_.mtp_layers == 0) {
      fail(ckpt.config_path(), ": field 'mtp_num_hidden_layers' is 0 or missing: the checkpoint has no "
           "multi-token-prediction head");
    }
    const std::string prefix = !ckpt.weightless() && ckpt.has("model.mtp.fc_embedding.weight") ? "model.mtp." : "mtp.";
    WeightLoader w(ckpt, prefix, device_, false);
    mtp_ = load_qwen4_exp_mtp(w, full_);
    w.finish();
    w.refuse_unused_under(prefix, cat(full_.mtp_layers, "-layer multi-token-prediction head"));
    info_.weight_bytes += w.bytes_loaded();
    info_.mtp_layers = int64_t(mtp_.layers.size());
    for (const Qwen4ExpLayerWeights& l : mtp_.layers) info_.mtp_cache.push_back(cache_spec(l));
  }

  // Activations, KV, conv and indexer caches: F32 on the CPU, BF16 on CUDA.
  DType act_dtype() const { return device_ == Device::kCuda ? DType::kBF16 : DType::kF32; }
  Tensor act(Shape shape) const { return Tensor::empty(std::move(shape), act_dtype(), device_); }
  float eps() const { return float(cfg_.eps); }
  // After a row-parallel projection and the indexer scores: the ranks' partial sums added.
  void reduce(const Tensor& t) const {
    if (par_.size > 1) par_.comm->all_reduce_sum(t);
  }

  LayerCacheSpec cache_spec(const Qwen4ExpLayerWeights& l) const {
    const int64_t wide = cfg_.hc * cfg_.hidden;
    LayerCacheSpec s;
    if (l.linear) {
      const int64_t conv_dim = 2 * cfg_.lin_k_heads * cfg_.lin_k_dim + cfg_.lin_v_heads * cfg_.lin_v_dim;
      s.slots.push_back({"ssm", {cfg_.lin_v_heads, cfg_.lin_k_dim, cfg_.lin_v_dim}, ssm_dtype_});
      s.slots.push_back({"conv", {cfg_.conv_kernel - 1, conv_dim}, act_dtype()});
      if (l.has_ple) {
        // The dilated PLE conv's history ((K - 1) * ngram_size normed rows) and the last
        // ngram_size - 1 token ids (the n-gram context across steps).
        s.slots.push_back({"ple_conv", {l.ple.conv.dim(1) - 1, wide}, act_dtype()});
        s.slots.push_back({"ngram_context", {cfg_.ngram_size - 1}, DType::kI32});
      }
    } else {
      s.paged.push_back({"k", {cfg_.kv_heads, cfg_.head_dim}, act_dtype()});
      s.paged.push_back({"v", {cfg_.kv_heads, cfg_.head_dim}, act_dtype()});
      // One indexer key per complete block of index_ratio tokens (pooled, normed, roped).
      PagedCacheSpec blocks{"index_block_keys", {cfg_.index_head_dim}, act_dtype()};
      blocks.tokens_per_entry = int(cfg_.index_ratio);
      s.paged.push_back(blocks);
      // Raw indexer keys of the trailing incomplete block.
      s.slots.push_back({"index_tail", {std::max<int64_t>(1, cfg_.index_ratio - 1), cfg_.index_head_dim},
                         act_dtype()});
    }
    return s;
  }

  // Qwen4ExpTextGatedResidual: normed = hc_norm(h); w = sigmoid(up(silu(down(normed) / S)));
  // out = mean_s(w_s * normed_s); inject = 2 * sigmoid(block_inject(normed) / S).
  void read_gate(const HyperConnectionWeights& g, const Tensor& h, const Tensor& out, Tensor* inject) {
    const int64_t t = h.dim(0), s = cfg_.hc;
    Tensor normed = act({t, s * cfg_.hidden});
    ops::rms_norm_grouped(h, g.norm, cfg_.hidden, eps(), normed);
    Tensor low = act({t, cfg_.hc_rank});
    ops::linear(normed, g.down, low);
    ops::hc_lowrank_act(low, int(s));
    Tensor mix = act({t, s * cfg_.hidden});
    ops::linear(low, g.up, mix);
    ops::hc_mix(normed, mix, int(s), out);
    if (inject != nullptr) {
      ops::linear(normed, g.inject, *inject);
      ops::hc_inject_weights(*inject, int(s));
    }
  }

  // Qwen4ExpTextPLELayer: h += gated + silu(dilated_conv(norm_conv(gated))), where
  // gated_s = sigmoid(signed_sqrt(<norm_key(key_proj(e))_s, norm_query(h)_s> / sqrt(H))) * value_proj(e)
  // and e is the token's hashed n-gram embedding (one row per head, gathered from the host table).
  void per_layer_embedding(const PleWeights& p, const ForwardBatch& batch, LayerCaches& cache,
                           const Tensor& h) {
    const int64_t t = batch.num_tokens(), wide = cfg_.hc * cfg_.hidden, heads = p.layout.hash.heads();
    Tensor ids = Tensor::empty({t, heads}, DType::kI64, device_);
    ops::ngram_ids(batch, p.layout.hash, cfg_.vocab, cache.slots[kNgramContext], ids);
    Tensor e = act({t, cfg_.ple_embed_dim});
    ops::sharded_embedding(p.table, ids, e);  // host table rows, into the device's e
    Tensor key = act({t, wide}), value = act({t, cfg_.hidden}), query = act({t, wide});
    ops::linear(e, p.key_proj, key);
    ops::rms_norm_grouped(key, p.norm_key, cfg_.hidden, eps(), key);
    ops::linear(e, p.value_proj, value);
    ops::rms_norm_grouped(h, p.norm_query, cfg_.hidden, eps(), query);
    Tensor gated = act({t, wide}), normed = act({t, wide}), conv = act({t, wide});
    ops::ple_gate(key, query, value, int(cfg_.hc), gated);
    ops::rms_norm_grouped(gated, p.norm_conv, cfg_.hidden, eps(), normed);
    ops::causal_conv1d(normed, p.conv, cache.slots[kPleConv], batch, conv);
    ops::add(gated, conv, gated);
    ops::add(h, gated, h);
  }

  // Qwen4ExpTextGatedDeltaNet: Qwen3.5's GDN with the output gate of config.output_gate_type.
  void gated_delta_net(const GdnWeights& l, const Tensor& x, const ForwardBatch& batch,
                       LayerCaches& cache, const Tensor& y) {
    const int64_t t = x.dim(0), hk = cfg_.lin_k_heads, hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim,
                  dv = cfg_.lin_v_dim;
    const int64_t conv_dim = 2 * hk * dk + hv * dv;
    Tensor qkv = act({t, conv_dim}), z = act({t, hv, dv}), b = act({t, hv}), a = act({t, hv});
    ops::linear(x, l.in_qkv, qkv);
    ops::linear(x, l.in_z, z.reshape({t, hv * dv}));
    ops::linear(x, l.in_b, b);
    ops::linear(x, l.in_a, a);
    Tensor mixed = act({t, conv_dim});
    ops::causal_conv1d(qkv, l.conv, cache.slots[kConv], batch, mixed);
    Tensor q = act({t, hk, dk}), k = act({t, hk, dk}), v = act({t, hv, dv});
    ops::copy_columns(mixed, 0, q.reshape({t, hk * dk}));
    ops::copy_columns(mixed, hk * dk, k.reshape({t, hk * dk}));
    ops::copy_columns(mixed, 2 * hk * dk, v.reshape({t, hv * dv}));
    // The gates stay F32 on every device (they feed the F32 state recurrence).
    Tensor g = Tensor::empty({t, hv}, DType::kF32, device_), beta = Tensor::empty({t, hv}, DType::kF32, device_);
    ops::gdn_gates(a, b, l.a_log, l.dt_bias, g, beta);
    Tensor core = act({t, hv, dv});
    // The CPU reference runs the recurrence: results independent of how steps split the sequence.
    const auto algorithm = device_ == Device::kCpu ? ops::GdnAlgorithm::kRecurrent : ops::GdnAlgorithm::kChunked;
    ops::gated_delta_rule(q, k, v, g, beta, cache.slots[kSsm], batch, core, algorithm);
    Tensor normed = act({t, hv, dv});
    ops::rms_norm_gated_act(core, z, l.norm, eps(), cfg_.gdn_gate, normed);
    ops::linear(normed.reshape({t, hv * dv}), l.out_proj, y);
    reduce(y);
  }

  // Qwen4ExpTextQSAIndexer: which tokens each query attends to.
  Tensor select_tokens(const QsaWeights& l, const Tensor& x, const ForwardBatch& batch,
                       LayerCaches& cache, int block_size) {
    const int64_t t = x.dim(0), hi = cfg_.index_heads, di = cfg_.index_head_dim;
    const int ratio = int(cfg_.index_ratio), top = int(cfg_.index_top_blocks());
    Tensor qk = act({t, (hi + 1) * di});
    ops::linear(x, l.index_qk, qk);
    Tensor q = act({t, hi, di}), raw_keys = act({t, di});
    ops::copy_columns(qk, 0, q.reshape({t, hi * di}));
    ops::copy_columns(qk, hi * di, raw_keys);
    ops::rms_norm(q, l.index_q_norm, eps(), true, q);
    ops::rope(q, batch.positions, cfg_.rope);
    // Blocks completed by this step: mean of their raw keys, k_layernorm, RoPE at the block start.
    const std::vector<ops::QsaBlock> blocks = ops::qsa_completed_blocks(batch, ratio);
    const int64_t nb = int64_t(blocks.size());
    Tensor pooled = act({nb, di});
    ops::qsa_pool_keys(raw_keys, cache.slots[kIndexTail], batch, ratio, pooled);
    if (nb > 0) {
      ops::rms_norm(pooled, l.index_k_norm, eps(), true, pooled);
      std::vector<int32_t> starts;
      for (const ops::QsaBlock& b : blocks) starts.push_back(b.block * ratio);
      ops::rope(pooled.reshape({nb, 1, di}), starts, cfg_.rope);
    }
    ops::qsa_store_block_keys(pooled, cache.paged[kIndexBlockKeys], batch, ratio, block_size);
    Tensor selected = Tensor::empty({t, int64_t(top) * ratio + ratio - 1}, DType::kI32, device_);
    const float scale = 1.f / std::sqrt(float(di));
    if (par_.size == 1) {
      ops::qsa_select(q, cache.paged[kIndexBlockKeys], batch, ratio, block_size, top, scale, selected);
      return selected;
    }
    // Every rank scores the blocks over its heads; the summed scores give every rank the same top-k.
    Tensor scores = Tensor::empty({t, ops::qsa_max_blocks(batch, ratio)}, DType::kF32, device_);
    ops::qsa_block_scores(q, cache.paged[kIndexBlockKeys], batch, ratio, block_size, scale, scores);
    reduce(scores);
    ops::qsa_select_scored(scores, batch, ratio, top, selected);
    return selected;
  }

  // Qwen4ExpTextAttention: gated GQA (q_proj gives [query | gate] per head) over the selected tokens.
  void sparse_attention(const QsaWeights& l, const Tensor& x, const ForwardBatch& batch,
                        LayerCaches& cache, int block_size, const Tensor& y) {
    Tensor selected = select_tokens(l, x, batch, cache, block_size);
    const int64_t t = x.dim(0), d = cfg_.head_dim, hq = cfg_.heads, hkv = cfg_.kv_heads;
    Tensor qg = act({t, hq * 2 * d});
    ops::linear(x, l.q_proj, qg);
    Tensor q = act({t, hq, d}), gate = act({t, hq * d});
    ops::copy_columns(qg.reshape({t * hq, 2 * d}), 0, q.reshape({t * hq, d}));
    ops::copy_columns(qg.reshape({t * hq, 2 * d}), d, gate.reshape({t * hq, d}));
    Tensor k = act({t, hkv, d}), v = act({t, hkv, d});
    ops::linear(x, l.k_proj, k.reshape({t, hkv * d}));
    ops::linear(x, l.v_proj, v.reshape({t, hkv * d}));
    ops::rms_norm(q, l.q_norm, eps(), true, q);
    ops::rms_norm(k, l.k_norm, eps(), true, k);
    ops::rope(q, batch.positions, cfg_.rope);
    ops::rope(k, batch.positions, cfg_.rope);
    Tensor o = act({t, hq, d});
    ops::paged_attention_selected(q, k, v, cache.paged[kKeys], cache.paged[kValues], batch, selected,
                                  1.f / std::sqrt(float(d)), o);
    Tensor o2 = o.reshape({t, hq * d});
    ops::mul_sigmoid(o2, gate);
    ops::linear(o2, l.o_proj, y);
    reduce(y);
  }

  // Qwen4ExpTextSparseMoeBlock: routed experts plus sigmoid(shared_expert_gate(x)) * shared(x).
  void moe(const MoeWeights& m, const Tensor& x, const Tensor& y) {
    const int64_t t = x.dim(0);
    // F32 on every device: expert choice is sensitive to their rounding.
    Tensor router_logits = Tensor::empty({t, cfg_.experts}, DType::kF32, device_);
    ops::linear(x, m.router, router_logits);
    Tensor ids = Tensor::empty({t, cfg_.top_k}, DType::kI32, device_);
    Tensor weights = Tensor::empty({t, cfg_.top_k}, DType::kF32, device_);
    ops::moe_route_softmax(router_logits, int(cfg_.top_k), cfg_.norm_topk, ids, weights);
    // This rank's experts (expert parallel) or its columns of every expert.
    const ops::ExpertShard shard{par_.expert_parallel ? par_.rank * (cfg_.experts / par_.size) : 0, cfg_.experts};
    ops::moe_experts(x, m.experts_gate_up, m.experts_down, ids, weights, y, shard);
    Tensor gate_up = act({t, 2 * cfg_.shared_inter}), hidden = act({t, cfg_.shared_inter});
    Tensor shared = act({t, cfg_.hidden}), gate = act({t, 1});
    ops::linear(x, m.shared_gate_up, gate_up);
    ops::silu_mul(gate_up, hidden);
    ops::linear(hidden, m.shared_down, shared);
    ops::linear(x, m.shared_gate, gate);
    ops::mul_sigmoid(shared, gate);
    ops::add(y, shared, y);
    reduce(y);  // the routed and the shared experts' partial sums, in one all-reduce
  }

  Device device_;
  dist::Parallel par_;
  DType ssm_dtype_;  // the GDN state slots: F32 (default) or BF16 (--mamba-ssm-dtype)
  Qwen4ExpConfig full_, cfg_;  // the checkpoint's config; this rank's share of it
  ModelInfo info_;
  Qwen4ExpWeights weights_;
  Qwen4ExpMtpWeights mtp_;  // LoadOptions::mtp
};

}  // namespace

std::unique_ptr<Model> load_qwen4_exp(const Checkpoint& ckpt, Device device, const dist::Parallel& parallel,
                                      DType ssm_dtype, bool mtp) {
  return std::make_unique<Qwen4ExpModel>(ckpt, device, parallel, ssm_dtype, mtp);
}

}  // namespace strata
