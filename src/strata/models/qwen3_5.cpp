// The Qwen3.5 family: qwen3_next, qwen3_5 and qwen3_5_moe (text part of the multimodal
// wrappers too). Reads like HF's modeling_qwen3_5*.py: decoder layers of Gated DeltaNet
// ("linear_attention") or gated full attention, each followed by a dense SwiGLU MLP or a
// softmax-routed MoE with a sigmoid-gated shared expert; zero-centred (1 + w) RMSNorms.
#include "strata/models/qwen3_5.h"

#include <cmath>

#include "strata/core/error.h"
#include "strata/dist/rank_split.h"
#include "strata/io/config.h"
#include "strata/io/config_checks.h"
#include "strata/io/quant_config.h"
#include "strata/models/weights.h"
#include "strata/ops/ops.h"

namespace strata {
namespace {

using ops::RopeSpec;

struct Qwen35Config {
  std::string model_type;
  int64_t vocab = 0, hidden = 0, layers = 0, inter = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
  int64_t experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0, sparse_step = 1;
  int64_t mtp_layers = 0;  // mtp_num_hidden_layers
  bool norm_topk = true;
  std::vector<int64_t> mlp_only_layers;
  std::vector<std::string> layer_types;
  double eps = 1e-6;
  bool tie_embeddings = false;
  RopeSpec rope;
  int64_t max_pos = 0;
  std::vector<int64_t> eos;
  int64_t bos = -1;

  bool is_moe_layer(int64_t i) const {
    for (int64_t m : mlp_only_layers) {
      if (m == i) return false;
    }
    return experts > 0 && (i + 1) % sparse_step == 0;
  }
};

RopeSpec make_rope(const ConfigView& text, int64_t head_dim) {
  // rope_parameters (transformers 5) or the legacy rope_theta / partial_rotary_factor fields.
  double theta = text.get_float("rope_theta", 10000.0);
  double partial = text.get_float("partial_rotary_factor", 1.0);
  std::string type = "default";
  RopeSpec spec;
  if (text.has("rope_parameters")) {
    ConfigView rp = text.child("rope_parameters");
    theta = rp.get_float("rope_theta", theta);
    partial = rp.get_float("partial_rotary_factor", partial);
    type = rp.get_string("rope_type", type);
    if (rp.has("mrope_section")) {
      for (int64_t s : rp.get_int_list("mrope_section")) spec.mrope_section.push_back(int(s));
    }
  }
  if (type != "default") text.fail_field("rope_parameters.rope_type", "only 'default' is supported, got '" + type + "'");
  const bool nested_theta = text.has("rope_parameters") && text.child("rope_parameters").has("rope_theta");
  require_positive_float(text, nested_theta ? "rope_parameters.rope_theta" : "rope_theta", theta);
  spec.rotary_dim = int(double(head_dim) * partial);
  if (spec.rotary_dim % 2 || spec.rotary_dim <= 0 || spec.rotary_dim > head_dim) {
    text.fail_field("partial_rotary_factor", "gives a rotary dimension of " + std::to_string(spec.rotary_dim));
  }
  for (int i = 0; i < spec.rotary_dim / 2; ++i) {
    // As HF: 1 / theta^(arange(0, dim, 2) / dim), in float32.
    const float expo = float(2 * i) / float(spec.rotary_dim);
    spec.inv_freq.push_back(1.0f / std::pow(float(theta), expo));
  }
  return spec;
}

// Every field the family reads, checked once here: sizes positive, head counts divisible,
// top-k within the experts, token ids within the vocabulary, eps and rope_theta finite and > 0.
Qwen35Config parse_config(const nlohmann::json& root, const std::string& origin) {
  ConfigView text = ConfigView::text_config(root, origin);
  ConfigView top(&root, origin);
  auto positive = [&](const char* key) { return require_positive(text, key, text.get_int(key)); };
  Qwen35Config c;
  c.model_type = text.get_string("model_type", top.get_string("model_type", ""));
  c.vocab = positive("vocab_size");
  c.hidden = positive("hidden_size");
  c.layers = positive("num_hidden_layers");
  c.heads = positive("num_attention_heads");
  c.kv_heads = positive("num_key_value_heads");
  require_divisible(text, "num_attention_heads", c.heads, "num_key_value_heads", c.kv_heads);
  c.head_dim = require_positive(text, "head_dim", text.get_int("head_dim", c.hidden / c.heads));
  c.inter = require_non_negative(text, "intermediate_size", text.get_int("intermediate_size", 0));
  c.lin_k_heads = positive("linear_num_key_heads");
  c.lin_v_heads = positive("linear_num_value_heads");
  require_divisible(text, "linear_num_value_heads", c.lin_v_heads, "linear_num_key_heads", c.lin_k_heads);
  c.lin_k_dim = positive("linear_key_head_dim");
  c.lin_v_dim = positive("linear_value_head_dim");
  c.conv_kernel = positive("linear_conv_kernel_dim");
  c.experts = require_non_negative(text, "num_experts", text.get_int("num_experts", 0));
  if (c.experts > 0) {
    c.top_k = require_in_range(text, "num_experts_per_tok", text.get_int("num_experts_per_tok"), 1, c.experts,
                               "num_experts");
    c.moe_inter = positive("moe_intermediate_size");
    c.shared_inter = require_non_negative(text, "shared_expert_intermediate_size",
                                          text.get_int("shared_expert_intermediate_size", 0));
    c.sparse_step = require_positive(text, "decoder_sparse_step", text.get_int("decoder_sparse_step", 1));
    // Qwen3.5-MoE always renormalises the top-k weights; Qwen3-Next has the flag.
    c.norm_topk = text.get_bool("norm_topk_prob", true);
    if (text.has("mlp_only_layers")) c.mlp_only_layers = text.get_int_list("mlp_only_layers");
  }
  c.eps = require_positive_float(text, "rms_norm_eps", text.get_float("rms_norm_eps", 1e-6));
  c.mtp_layers = require_non_negative(text, "mtp_num_hidden_layers", text.get_int("mtp_num_hidden_layers", 0));
  c.tie_embeddings = text.get_bool("tie_word_embeddings", top.get_bool("tie_word_embeddings", false));
  if (top.has("tie_word_embeddings")) c.tie_embeddings = top.get_bool("tie_word_embeddings", false);
  c.max_pos = require_positive(text, "max_position_embeddings", text.get_int("max_position_embeddings", 32768));
  const SpecialTokenIds ids = read_special_token_ids(text, top, c.vocab);
  c.eos = ids.eos;
  c.bos = ids.bos;
  if (text.has("layer_types")) {
    c.layer_types = text.get_string_list("layer_types");
  } else {
    // HF's default: every full_attention_interval-th layer is full attention.
    int64_t every = require_positive(text, "full_attention_interval", text.get_int("full_attention_interval", 4));
    for (int64_t i = 0; i < c.layers; ++i) {
      c.layer_types.push_back((i + 1) % every == 0 ? "full_attention" : "linear_attention");
    }
  }
  if (int64_t(c.layer_types.size()) != c.layers) {
    text.fail_field("layer_types", cat("has ", c.layer_types.size(), " entries for ", c.layers, " layers"));
  }
  for (const std::string& t : c.layer_types) {
    if (t != "full_attention" && t != "linear_attention") text.fail_field("layer_types", "unknown layer type '" + t + "'");
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    if (!c.is_moe_layer(i) && c.inter == 0) {
      text.fail_field("intermediate_size", cat("must be positive: layer ", i, " has a dense MLP"));
    }
  }
  c.rope = make_rope(text, c.head_dim);
  return c;
}

struct Mlp {
  Tensor gate_up, down;  // [2I, H], [H, I]
};

struct Layer {
  bool linear = false;
  Tensor input_norm, post_norm;
  // Gated DeltaNet; in_proj = [in_proj_qkv; in_proj_z; in_proj_b; in_proj_a] (one pass over x).
  // An FP8 checkpoint's on CUDA: in_proj the FP8 rows [qkv; z], in_proj_rest the bf16 [b; a].
  Tensor in_proj, in_proj_rest, conv_w, a_log, dt_bias, gdn_norm, out_proj;
  // attention; qkv_proj = [q_proj; k_proj; v_proj]
  Tensor qkv_proj, o_proj, q_norm, k_norm;
  // feed-forward; router_shared = [gate; shared_expert_gate; shared gate_proj; shared up_proj]
  // with a shared expert, else the router alone
  bool moe = false;
  Mlp mlp;
  Tensor router_shared, experts_gate_up, experts_down;
  bool has_shared = false;
  Mlp shared;
};

// A tensor-parallel rank's view of the config: the heads, intermediate sizes and experts it
// holds (cfg.experts stays the router's full count; with expert parallelism cfg.moe_inter stays
// whole, without it each expert's intermediate columns are split). Key-value heads fewer than the ranks are
// replicated: each rank keeps the one its query heads read.
Qwen35Config local_config(const Qwen35Config& full, const dist::Parallel& par, const std::string& origin) {
  const dist::RankSplit split(par, origin);
  if (split.ranks() == 1) return full;
  Qwen35Config c = full;
  c.heads = split.divide(full.heads, "num_attention_heads");
  c.kv_heads = split.kv_heads(full.kv_heads);
  c.lin_k_heads = split.divide(full.lin_k_heads, "linear_num_key_heads");
  c.lin_v_heads = split.divide(full.lin_v_heads, "linear_num_value_heads");
  if (full.inter > 0) c.inter = split.divide(full.inter, "intermediate_size");
  if (full.experts > 0 && par.expert_parallel) split.divide(full.experts, "num_experts");
  if (full.experts > 0 && !par.expert_parallel) c.moe_inter = split.divide(full.moe_inter, "moe_intermediate_size");
  if (full.shared_inter > 0) c.shared_inter = split.divide(full.shared_inter, "shared_expert_intermediate_size");
  split.divide(full.vocab, "vocab_size");
  return c;
}

class Qwen35Model final : public Model {
  // The residual stream into a sublayer: h, the previous sublayer's output y still to be added
  // (undefined before the first layer), and the norm the sublayer applies to h + y.
  struct Residual {
    Tensor h, spare, y;
    const Tensor* norm = nullptr;
  };

 public:
  Qwen35Model(const Checkpoint& ckpt, Device device, const dist::Parallel& par, bool mtp, DType ssm_dtype,
              KvCacheDtype kv)
      : device_(device), par_(par), ssm_dtype_(ssm_dtype), kv_fp8_(kv == KvCacheDtype::kFp8E4M3) {
    const std::string origin = ckpt.dir() + "/config.json";
    full_ = parse_config(ckpt.config(), origin);
    cfg_ = local_config(full_, par_, origin);
    WeightLoader w(ckpt, WeightLoader::detect_prefix(ckpt), device, par_.rank == 0);
    // FP8 block-scale checkpoints: on CUDA the routed experts and the dense projections of the
    // attention and GDN layers stay FP8 (the MoE and linear kernels read codes and per-row scales),
    // everything else is dequantised at load; of NVFP4 and MXFP4 checkpoints the routed experts stay
    // FP4 (issue 19).
    w.accept_quant(weight_quant_of(ckpt));
    w.keep_fp8_experts(device == Device::kCuda);
    w.keep_fp8_dense(device == Device::kCuda);
    w.keep_fp4_experts(device == Device::kCuda);
    load(w);
    w.finish();
    auto unused = w.unused({"model.visual.", "mtp.", "model.mtp.", "visual."});
    STRATA_CHECK(unused.empty(), ckpt.dir(), ": unexpected tensor '", unused.empty() ? "" : unused[0],
                 "' (", unused.size(), " unused in all) for ", cfg_.model_type);
    info_.model_type = cfg_.model_type;
    info_.vocab_size = cfg_.vocab;
    info_.hidden_size = cfg_.hidden;
    info_.num_layers = cfg_.layers;
    info_.max_position_embeddings = cfg_.max_pos;
    info_.eos_token_ids = cfg_.eos;
    info_.bos_token_id = cfg_.bos;
    info_.weight_bytes = w.bytes_loaded();
    info_.cuda_graphs = true;  // decode: device-side routing and padding rows, no host syncs
    // Verify steps too, but for an FP8 KV cache, whose multi-token attention decodes the visible
    // pages through host tables.
    info_.verify_graphs = !kv_fp8_;
    // The fused GDN step stores per-token states (speculative rollback without a replay).
    info_.state_step_tokens = ops::kGdnStepMaxTokens;
    for (const Layer& l : layers_) info_.cache.layers.push_back(cache_spec(l));
    if (mtp) {
      load_mtp(ckpt, origin);
      info_.weight_bytes += mtp_.bytes;
      info_.mtp_layers = int64_t(mtp_.layers.size());
      for (const Layer& l : mtp_.layers) info_.mtp_cache.push_back(cache_spec(l));
    }
  }

  const ModelInfo& info() const override { return info_; }
  Device device() const override { return device_; }

  void forward(const ForwardBatch& batch, Caches& caches, Tensor& logits) override {
    run(batch, caches, logits, nullptr);
  }

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

  // The head's one full-attention layer up to its keys and values (the layer's output and the
  // logits are not needed): the k and v rows of qkv_proj alone (a ninth of its rows at the
  // 35B-A3B shape; no queries, no gates), k's norm and rotation as qk_norm_rope does them. A
  // head of several layers runs in full.
  void mtp_write_kv(const ForwardBatch& batch, const Tensor& hidden, Caches& caches) override {
    if (mtp_.layers.size() != 1 || mtp_.layers[0].linear) return Model::mtp_write_kv(batch, hidden, caches);
    check_mtp(batch, hidden, caches);
    const int64_t t = batch.num_tokens(), d = cfg_.head_dim, hkv = cfg_.kv_heads, q_rows = cfg_.heads * 2 * d;
    ops::ForwardScope scope(device_, batch);
    Residual r = mtp_input(batch, hidden);
    const Layer& l = mtp_.layers[0];
    r.norm = &l.input_norm;
    Tensor x = act({t, cfg_.hidden}), k = act({t, hkv, d}), v = act({t, hkv, d});
    project(r, x, l.qkv_proj.rows(q_rows, q_rows + 2 * hkv * d), {k.reshape({t, hkv * d}), v.reshape({t, hkv * d})});
    ops::rms_norm(k, l.k_norm, float(cfg_.eps), true, k);
    ops::rope(k, batch.positions, cfg_.rope);
    ops::paged_kv_write(k, v, paged_kv(caches.layers[layers_.size()]), batch);
  }

 private:
  void check_mtp(const ForwardBatch& batch, const Tensor& hidden, const Caches& caches) const {
    STRATA_CHECK(info_.mtp_layers > 0, cfg_.model_type, ": the multi-token-prediction head is not loaded");
    batch.validate(caches.block_size, caches.num_blocks, caches.num_slots);
    STRATA_CHECK(caches.layers.size() == layers_.size() + mtp_.layers.size(), "mtp_forward: caches for ",
                 caches.layers.size(), " layers; the model and its head have ", layers_.size() + mtp_.layers.size(),
                 " (allocate_caches with with_mtp)");
    const int64_t t = batch.num_tokens();
    STRATA_CHECK(hidden.shape() == Shape({t, cfg_.hidden}) && hidden.device() == device_ &&
                     hidden.dtype() == act_dtype(),
                 "mtp_forward: hidden ", hidden.describe(), " for ", t, " rows (forward_with_hidden's)");
  }

  // fc([norm(embed(token)); norm(hidden)]) as fc's two column blocks, their sum left to the
  // first layer's fused add and norm (inside the forward's scope).
  Residual mtp_input(const ForwardBatch& batch, const Tensor& hidden) {
    const int64_t t = batch.num_tokens();
    Tensor e = act({t, cfg_.hidden}), en = act({t, cfg_.hidden}), hn = act({t, cfg_.hidden});
    ops::embedding(embed_, batch.token_ids, e);
    ops::rms_norm(e, mtp_.embed_norm, float(cfg_.eps), true, en);
    ops::rms_norm(hidden, mtp_.hidden_norm, float(cfg_.eps), true, hn);
    Residual r{act({t, cfg_.hidden}), act({t, cfg_.hidden}), act({t, cfg_.hidden}), nullptr};
    ops::linear(en, mtp_.fc_embed, r.h);
    ops::linear(hn, mtp_.fc_hidden, r.y);
    return r;
  }

  void run_mtp(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits, Tensor* hidden_out) {
    check_mtp(batch, hidden, caches);
    const int64_t t = batch.num_tokens();
    prepare_logits(batch, logits);
    if (hidden_out && (!hidden_out->defined() || hidden_out->shape() != Shape{t, cfg_.hidden} ||
                       hidden_out->device() != device_ || hidden_out->dtype() != act_dtype())) {
      *hidden_out = act({t, cfg_.hidden});  // before the scope: it outlives the forward's workspace
    }
    ops::ForwardScope scope(device_, batch);
    Residual r = mtp_input(batch, hidden);
    decoder_layers(mtp_.layers, layers_.size(), r, batch, caches);
    head(r, batch, mtp_.norm, logits, hidden_out);
  }

  void prepare_logits(const ForwardBatch& batch, Tensor& logits) const {
    const int64_t n = int64_t(batch.logit_rows.size());
    if (!logits.defined() || logits.shape() != Shape{n, cfg_.vocab} || logits.device() != device_) {
      logits = Tensor::empty({n, cfg_.vocab}, DType::kF32, device_);
    }
  }

  void run(const ForwardBatch& batch, Caches& caches, Tensor& logits, Tensor* hidden) {
    batch.validate(caches.block_size, caches.num_blocks, caches.num_slots);
    STRATA_CHECK(caches.layers.size() == layers_.size() || caches.layers.size() == layers_.size() + mtp_.layers.size(),
                 "forward: caches for ", caches.layers.size(), " layers, model has ", layers_.size());
    prepare_logits(batch, logits);
    const int64_t t = batch.num_tokens();
    if (hidden && (!hidden->defined() || hidden->shape() != Shape{t, cfg_.hidden} || hidden->device() != device_ ||
                   hidden->dtype() != act_dtype())) {
      *hidden = act({t, cfg_.hidden});  // before the scope: it outlives the forward's workspace
    }
    // Everything below is the forward's workspace (on CUDA: an arena reset per forward).
    ops::ForwardScope scope(device_, batch);
    // Each residual add and the norm after it run inside the next sublayer's first projection.
    Residual r{act({t, cfg_.hidden}), act({t, cfg_.hidden}), Tensor(), nullptr};
    ops::embedding(embed_, batch.token_ids, r.h);
    decoder_layers(layers_, 0, r, batch, caches);
    head(r, batch, final_norm_, logits, hidden);
  }

  // The decoder layers `ls` over the residual stream r, their caches from caches.layers[first].
  void decoder_layers(const std::vector<Layer>& ls, size_t first, Residual& r, const ForwardBatch& batch,
                      Caches& caches) {
    const int64_t t = batch.num_tokens();
    Tensor x = act({t, cfg_.hidden}), y = act({t, cfg_.hidden});
    for (size_t i = 0; i < ls.size(); ++i) {
      const Layer& l = ls[i];
      r.norm = &l.input_norm;
      if (l.linear) {
        gated_delta_net(l, r, x, batch, caches.layers[first + i], y);
      } else {
        attention(l, r, x, batch, caches.layers[first + i], y);
      }
      r.y = y;
      r.norm = &l.post_norm;
      if (l.moe) {
        moe(l, r, x, y);
      } else {
        mlp(l.mlp, r, x, y);
      }
      r.y = y;
    }
  }

  // The last residual add, the final norm and lm_head over the logit rows; with `hidden`, the
  // normed state of every row into it as well.
  void head(Residual& r, const ForwardBatch& batch, const Tensor& norm, Tensor& logits, Tensor* hidden) {
    const int64_t n = int64_t(batch.logit_rows.size());
    Tensor& h = r.h;
    ops::add(h, r.y, h);
    Tensor normed = act({n, cfg_.hidden});
    if (hidden) {
      ops::rms_norm(h, norm, float(cfg_.eps), true, *hidden);
      ops::gather_rows(*hidden, batch.logit_rows, normed);
    } else {
      Tensor last = act({n, cfg_.hidden});
      ops::gather_rows(h, batch.logit_rows, last);
      ops::rms_norm(last, norm, float(cfg_.eps), true, normed);
    }
    if (par_.size == 1) {
      ops::linear(normed, lm_head_, logits);
      return;
    }
    // lm_head is split over the vocabulary: gather the ranks' column blocks.
    STRATA_CHECK(device_ == Device::kCpu, "tensor parallelism runs on the CPU only so far");
    Tensor mine = Tensor::empty({n, cfg_.vocab / par_.size}, DType::kF32);
    ops::linear(normed, lm_head_, mine);
    dist::gather_vocab(*par_.comm, mine, logits);
  }

  // x = norm(h + y) and the sublayer's first projection of x (w into outs), one op; h becomes
  // h + y (written into the spare buffer, which then swaps with h).
  // w_rest: bf16 rows after an FP8 w's (WeightLoader::get_slices_fp8).
  void project(Residual& r, Tensor& x, const Tensor& w, const std::vector<Tensor>& outs,
               const Tensor& w_rest = Tensor()) const {
    if (r.y.defined()) {
      ops::add_rms_norm_linear(r.h, r.y, *r.norm, float(cfg_.eps), true, r.spare, x, w, outs, w_rest);
      std::swap(r.h, r.spare);
    } else {
      ops::add_rms_norm_linear(r.h, Tensor(), *r.norm, float(cfg_.eps), true, Tensor(), x, w, outs, w_rest);
    }
  }

  LayerCacheSpec cache_spec(const Layer& l) const {
    LayerCacheSpec s;
    if (l.linear) {
      const int64_t conv_dim = 2 * cfg_.lin_k_heads * cfg_.lin_k_dim + cfg_.lin_v_heads * cfg_.lin_v_dim;
      s.slots.push_back({"ssm", {cfg_.lin_v_heads, cfg_.lin_k_dim, cfg_.lin_v_dim}, ssm_dtype_});
      s.slots.push_back({"conv", {cfg_.conv_kernel - 1, conv_dim}, act_dtype()});
    } else {
      const DType kv = kv_fp8_ ? DType::kF8E4M3 : act_dtype();
      s.paged.push_back({"k", {cfg_.kv_heads, cfg_.head_dim}, kv});
      s.paged.push_back({"v", {cfg_.kv_heads, cfg_.head_dim}, kv});
      if (kv_fp8_) {
        s.paged.push_back({"k_scale", {cfg_.kv_heads}, DType::kUE8M0});
        s.paged.push_back({"v_scale", {cfg_.kv_heads}, DType::kUE8M0});
      }
    }
    return s;
  }

  // The multi-token-prediction head, as HF's and vLLM's Qwen3.5 MTP: fc over [pre_fc_norm_embedding
  // (embed(next token)); pre_fc_norm_hidden(hidden)], mtp_num_hidden_layers full-attention
  // decoder layers with the model's feed-forward kind, its own final norm, the shared lm_head.
  // Its tensors sit under "mtp." ("model.mtp." in some exports), read by a loader of their own.
  void load_mtp(const Checkpoint& ckpt, const std::string& origin) {
    STRATA_CHECK(par_.size == 1, "the multi-token-prediction head runs without tensor parallelism so far");
    if (full_.mtp_layers == 0) {
      fail(origin, ": field 'mtp_num_hidden_layers' is 0 or missing: the checkpoint has no multi-token-prediction head");
    }
    const std::string prefix = !ckpt.weightless() && ckpt.has("model.mtp.fc.weight") ? "model.mtp." : "mtp.";
    WeightLoader w(ckpt, prefix, device_, false);
    w.accept_quant(weight_quant_of(ckpt));
    w.keep_fp8_experts(device_ == Device::kCuda);
    w.keep_fp8_dense(device_ == Device::kCuda);
    w.keep_fp4_experts(device_ == Device::kCuda);
    const int64_t hsz = full_.hidden;
    mtp_.fc_embed = w.get_slices({{"fc.weight", {hsz, 2 * hsz}, 1, 0, hsz}});
    mtp_.fc_hidden = w.get_slices({{"fc.weight", {hsz, 2 * hsz}, 1, hsz, hsz}});
    mtp_.embed_norm = w.get("pre_fc_norm_embedding.weight", {hsz});
    mtp_.hidden_norm = w.get("pre_fc_norm_hidden.weight", {hsz});
    mtp_.norm = w.get("norm.weight", {hsz});
    for (int64_t i = 0; i < full_.mtp_layers; ++i) {
      const std::string p = cat("layers.", i, ".");
      Layer l;
      l.input_norm = w.get(p + "input_layernorm.weight", {hsz});
      l.post_norm = w.get(p + "post_attention_layernorm.weight", {hsz});
      load_attention(w, p + "self_attn.", l);
      l.moe = full_.experts > 0;
      if (l.moe) {
        load_moe(w, p + "mlp.", l);
      } else {
        l.mlp = load_mlp(w, p + "mlp.", full_.inter);
      }
      mtp_.layers.push_back(std::move(l));
    }
    w.finish();
    w.refuse_unused_under(prefix, cat(full_.mtp_layers, "-layer multi-token-prediction head"));
    mtp_.bytes = w.bytes_loaded();
  }

  // Activations, KV and conv caches: F32 on the CPU, BF16 on CUDA (the GDN state: ssm_dtype_; the KV
  // pages: FP8 with kv_fp8_).
  DType act_dtype() const { return device_ == Device::kCuda ? DType::kBF16 : DType::kF32; }
  Tensor act(Shape shape) const { return Tensor::empty(std::move(shape), act_dtype(), device_); }

  // Every weight is read as this rank's slice of the checkpoint's tensor (the whole tensor when
  // par_.size is 1): full_ gives the stored shapes, share() the rank's rows or columns.
  using Slice = WeightLoader::Slice;

  void load(WeightLoader& w) {
    const int64_t hsz = full_.hidden, vocab = full_.vocab;
    const Share vs = share(vocab);
    embed_ = w.get("embed_tokens.weight", {vocab, hsz});
    final_norm_ = w.get("norm.weight", {hsz});
    if (w.has_top("lm_head.weight") || (w.dummy() && !full_.tie_embeddings)) {
      lm_head_ = w.get_slices({{"lm_head.weight", {vocab, hsz}, 0, vs.first, vs.count, true}});
    } else if (full_.tie_embeddings) {
      lm_head_ = par_.size == 1 ? embed_ : w.get_slices({{"embed_tokens.weight", {vocab, hsz}, 0, vs.first, vs.count}});
    } else {
      fail(w.checkpoint().dir(), ": missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
    }
    for (int64_t i = 0; i < full_.layers; ++i) {
      const std::string p = cat("layers.", i, ".");
      Layer l;
      l.input_norm = w.get(p + "input_layernorm.weight", {hsz});
      l.post_norm = w.get(p + "post_attention_layernorm.weight", {hsz});
      l.linear = full_.layer_types[i] == "linear_attention";
      if (l.linear) {
        load_gdn(w, p + "linear_attn.", l);
      } else {
        load_attention(w, p + "self_attn.", l);
      }
      l.moe = full_.is_moe_layer(i);
      if (l.moe) {
        load_moe(w, p + "mlp.", l);
      } else {
        l.mlp = load_mlp(w, p + "mlp.", full_.inter);
      }
      layers_.push_back(std::move(l));
    }
  }

  // gate_proj and up_proj column-parallel (this rank's intermediate columns), down_proj row-parallel.
  Mlp load_mlp(WeightLoader& w, const std::string& p, int64_t inter) {
    STRATA_CHECK(inter > 0, w.checkpoint().dir(), "/config.json: intermediate size of ", p, " is 0");
    const int64_t hsz = full_.hidden;
    const Share is = share(inter);
    Mlp m;
    m.gate_up = w.get_slices({{p + "gate_proj.weight", {inter, hsz}, 0, is.first, is.count},
                              {p + "up_proj.weight", {inter, hsz}, 0, is.first, is.count}});
    m.down = w.get_slices({{p + "down_proj.weight", {hsz, inter}, 1, is.first, is.count}});
    return m;
  }

  // The routed experts: whole experts split over the ranks (expert parallel), or every expert's
  // intermediate columns (tensor parallel: gate and up rows, down columns). The router and the
  // shared expert's gate replicated; the shared expert split as an MLP.
  void load_moe(WeightLoader& w, const std::string& p, Layer& l) {
    const int64_t e = full_.experts, inter = full_.moe_inter, hsz = full_.hidden;
    // This rank's experts, and of each its intermediate columns.
    const Share es = par_.expert_parallel ? share(e) : Share{0, e};
    const Share is = par_.expert_parallel ? Share{0, inter} : share(inter);
    const WeightLoader::RoutedExperts experts =
        w.get_routed_experts(p, {e, 2 * inter, hsz}, {es.first, es.count}, {is.first, is.count});
    l.experts_gate_up = experts.gate_up;
    l.experts_down = experts.down;
    l.has_shared = full_.shared_inter > 0;
    if (l.has_shared) {
      const int64_t si = full_.shared_inter;
      const Share ss = share(si);
      l.router_shared = w.get_slices({{p + "gate.weight", {e, hsz}, 0, 0, e},
                                      {p + "shared_expert_gate.weight", {1, hsz}, 0, 0, 1},
                                      {p + "shared_expert.gate_proj.weight", {si, hsz}, 0, ss.first, ss.count},
                                      {p + "shared_expert.up_proj.weight", {si, hsz}, 0, ss.first, ss.count}});
      l.shared.down = w.get_slices({{p + "shared_expert.down_proj.weight", {hsz, si}, 1, ss.first, ss.count}});
    } else {
      l.router_shared = w.get(p + "gate.weight", {e, hsz});
    }
  }

  // Query heads (each [query | gate]) split; key-value heads split, or the one this rank's
  // query heads read when there are fewer than ranks; o_proj row-parallel.
  void load_attention(WeightLoader& w, const std::string& p, Layer& l) {
    const int64_t d = full_.head_dim, hsz = full_.hidden, hq = full_.heads, hkv = full_.kv_heads;
    const Share qh = share(hq);
    const Share kh = hkv % par_.size == 0 ? share(hkv) : Share{qh.first / (hq / hkv), 1};
    l.qkv_proj = whole(w.get_slices_fp8({{p + "q_proj.weight", {hq * d * 2, hsz}, 0, qh.first * 2 * d, qh.count * 2 * d},
                                         {p + "k_proj.weight", {hkv * d, hsz}, 0, kh.first * d, kh.count * d},
                                         {p + "v_proj.weight", {hkv * d, hsz}, 0, kh.first * d, kh.count * d}},
                                        false));
    l.o_proj = whole(w.get_slices_fp8({{p + "o_proj.weight", {hsz, hq * d}, 1, qh.first * d, qh.count * d}}, false));
    l.q_norm = w.get(p + "q_norm.weight", {d});
    l.k_norm = w.get(p + "k_norm.weight", {d});
  }

  // Key heads, with their value heads, split over the ranks: in_proj's q, k, v, z, b, a rows
  // and the conv channels of those heads; out_proj row-parallel.
  void load_gdn(WeightLoader& w, const std::string& p, Layer& l) {
    const int64_t hk = full_.lin_k_heads, hv = full_.lin_v_heads, dk = full_.lin_k_dim, dv = full_.lin_v_dim,
                  hsz = full_.hidden, r = hv / hk, kw = full_.conv_kernel;
    const int64_t conv_dim = 2 * hk * dk + hv * dv;
    const Share kh = share(hk), vh = share(hv);
    if (!w.dummy() && w.has(p + "in_proj_qkvz.weight")) {
      // Qwen3-Next groups the rows per key head: [q (dk), k (dk), v (r*dv), z (r*dv)] and
      // [b (r), a (r)]. Regroup this rank's key heads into Qwen3.5's split layout (row slices).
      const int64_t group = 2 * dk + 2 * r * dv;
      const std::string qkvz = p + "in_proj_qkvz.weight", ba = p + "in_proj_ba.weight";
      const Shape qkvz_full{hk * group, hsz}, ba_full{hk * 2 * r, hsz};
      std::vector<Slice> q, k, v, z, b, a;
      for (int64_t g = kh.first; g < kh.first + kh.count; ++g) {
        const int64_t base = g * group;
        q.push_back({qkvz, qkvz_full, 0, base, dk});
        k.push_back({qkvz, qkvz_full, 0, base + dk, dk});
        v.push_back({qkvz, qkvz_full, 0, base + 2 * dk, r * dv});
        z.push_back({qkvz, qkvz_full, 0, base + 2 * dk + r * dv, r * dv});
        b.push_back({ba, ba_full, 0, g * 2 * r, r});
        a.push_back({ba, ba_full, 0, g * 2 * r + r, r});
      }
      std::vector<Slice> rows = q;
      for (const std::vector<Slice>* part : {&k, &v, &z, &b, &a}) rows.insert(rows.end(), part->begin(), part->end());
      set_in_proj(l, w.get_slices_fp8(rows, true));
    } else {
      const Shape qkv{conv_dim, hsz};
      set_in_proj(l, w.get_slices_fp8({{p + "in_proj_qkv.weight", qkv, 0, kh.first * dk, kh.count * dk},
                                       {p + "in_proj_qkv.weight", qkv, 0, hk * dk + kh.first * dk, kh.count * dk},
                                       {p + "in_proj_qkv.weight", qkv, 0, 2 * hk * dk + vh.first * dv, vh.count * dv},
                                       {p + "in_proj_z.weight", {hv * dv, hsz}, 0, vh.first * dv, vh.count * dv},
                                       {p + "in_proj_b.weight", {hv, hsz}, 0, vh.first, vh.count},
                                       {p + "in_proj_a.weight", {hv, hsz}, 0, vh.first, vh.count}},
                                      true));
    }
    const Shape conv{conv_dim, 1, kw};
    const int64_t local_conv = 2 * kh.count * dk + vh.count * dv;
    l.conv_w = w.get_slices({{p + "conv1d.weight", conv, 0, kh.first * dk, kh.count * dk},
                             {p + "conv1d.weight", conv, 0, hk * dk + kh.first * dk, kh.count * dk},
                             {p + "conv1d.weight", conv, 0, 2 * hk * dk + vh.first * dv, vh.count * dv}})
                   .reshape({local_conv, kw});
    l.a_log = w.get_slices({{p + "A_log", {hv}, 0, vh.first, vh.count}});
    l.dt_bias = w.get_slices({{p + "dt_bias", {hv}, 0, vh.first, vh.count}});
    l.gdn_norm = w.get(p + "norm.weight", {dv});
    l.out_proj = whole(w.get_slices_fp8({{p + "out_proj.weight", {hsz, hv * dv}, 1, vh.first * dv, vh.count * dv}},
                                        false));
  }

  // A projection kept whole: FP8 or not.
  static Tensor whole(WeightLoader::Fp8Split s) { return s.fp8.defined() ? s.fp8 : s.rest; }

  // in_proj's rows: FP8 ones first (q, k, v, z in an FP8 checkpoint on CUDA), the others after.
  static void set_in_proj(Layer& l, WeightLoader::Fp8Split s) {
    if (s.fp8.defined()) {
      l.in_proj = s.fp8;
      l.in_proj_rest = s.rest;
    } else {
      l.in_proj = s.rest;
    }
  }

  void mlp(const Mlp& m, Residual& r, Tensor& x, Tensor& y) {
    const int64_t t = x.dim(0), inter = m.down.dim(1);
    Tensor gu = act({t, 2 * inter}), a = act({t, inter});
    project(r, x, m.gate_up, {gu});
    ops::silu_mul(gu, a);
    ops::linear(a, m.down, y);
    reduce(y);
  }

  void moe(const Layer& l, Residual& r, Tensor& x, Tensor& y) {
    const int64_t t = x.dim(0), si = cfg_.shared_inter;
    // Router logits stay F32 on every device: expert choice is sensitive to their rounding.
    Tensor logits = Tensor::empty({t, cfg_.experts}, DType::kF32, device_);
    Tensor gate, shared_gu;
    if (l.has_shared) {
      // One pass over x for the router, the shared expert's gate and its gate/up projections.
      gate = act({t, 1});
      shared_gu = act({t, 2 * si});
      project(r, x, l.router_shared, {logits, gate, shared_gu});
    } else {
      project(r, x, l.router_shared, {logits});
    }
    Tensor ids = Tensor::empty({t, cfg_.top_k}, DType::kI32, device_);
    Tensor weights = Tensor::empty({t, cfg_.top_k}, DType::kF32, device_);
    const ops::ExpertShard shard{par_.expert_parallel ? share(cfg_.experts).first : 0, cfg_.experts};
    ops::moe_route_experts(logits, int(cfg_.top_k), cfg_.norm_topk, ids, weights, x, l.experts_gate_up,
                           l.experts_down, shared_gu, l.has_shared ? l.shared.down : Tensor(), gate, y, shard);
    reduce(y);
  }

  // The attention sublayer's inputs: x = norm(h + y), its projections, q and k normed and
  // rotated (q [T, Hq, D], gate [T, Hq * D], k and v [T, Hkv, D]).
  void attention_inputs(const Layer& l, Residual& r, Tensor& x, const ForwardBatch& batch, Tensor& q, Tensor& gate,
                        Tensor& k, Tensor& v) {
    const int64_t t = x.dim(0), d = cfg_.head_dim, hq = cfg_.heads, hkv = cfg_.kv_heads;
    // q_proj gives per head [query (d) | gate (d)].
    Tensor qg = act({t, hq * 2 * d});
    k = act({t, hkv, d});
    v = act({t, hkv, d});
    project(r, x, l.qkv_proj, {qg, k.reshape({t, hkv * d}), v.reshape({t, hkv * d})});
    q = act({t, hq, d});
    gate = act({t, hq * d});
    ops::qk_norm_rope(qg.reshape({t, hq, 2 * d}), k, l.q_norm, l.k_norm, float(cfg_.eps), true, batch.positions,
                      cfg_.rope, q, gate);
  }

  ops::PagedKv paged_kv(LayerCaches& cache) const {
    ops::PagedKv kv{cache.paged[0], cache.paged[1], {}, {}};
    if (kv_fp8_) {
      kv.k_scale = cache.paged[2];
      kv.v_scale = cache.paged[3];
    }
    return kv;
  }

  void attention(const Layer& l, Residual& r, Tensor& x, const ForwardBatch& batch, LayerCaches& cache,
                 Tensor& y) {
    const int64_t t = x.dim(0), d = cfg_.head_dim, hq = cfg_.heads;
    Tensor q, gate, k, v;
    attention_inputs(l, r, x, batch, q, gate, k, v);
    Tensor o = act({t, hq * d});
    ops::paged_attention_gated(q, k, v, paged_kv(cache), batch, 1.f / std::sqrt(float(d)), gate,
                               o.reshape({t, hq, d}));
    ops::linear(o, l.o_proj, y);
    reduce(y);
  }

  void gated_delta_net(const Layer& l, Residual& r, Tensor& x, const ForwardBatch& batch,
                       LayerCaches& cache, Tensor& y) {
    const int64_t t = x.dim(0), hk = cfg_.lin_k_heads, hv = cfg_.lin_v_heads,
                  dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
    const int64_t conv_dim = 2 * hk * dk + hv * dv;
    Tensor qkv = act({t, conv_dim}), z = act({t, hv, dv}), b = act({t, hv}), a = act({t, hv});
    project(r, x, l.in_proj, {qkv, z.reshape({t, hv * dv}), b, a}, l.in_proj_rest);
    bool few_tokens = true;
    for (const SeqInBatch& s : batch.seqs) few_tokens = few_tokens && s.q_len <= ops::kGdnStepMaxTokens;
    STRATA_CHECK(few_tokens || batch.state_steps.count == 0, "forward: per-token states are stored for sequences "
                 "of at most ", ops::kGdnStepMaxTokens, " tokens (ModelInfo::state_step_tokens)");
    if (few_tokens) {
      // Decode and speculative verify steps (a few tokens a sequence): conv, gates, recurrence
      // and gated norm in one op (one kernel on CUDA, where the chunked form would pad every
      // sequence to a 64-token chunk). The CPU runs the same composition as below.
      Tensor normed = act({t, hv, dv});
      ops::gdn_decode_step(qkv, z, a, b, l.conv_w, cache.slots[1], l.a_log, l.dt_bias, cache.slots[0],
                           l.gdn_norm, float(cfg_.eps), batch, normed);
      ops::linear(normed.reshape({t, hv * dv}), l.out_proj, y);
      reduce(y);
      return;
    }
    Tensor q = act({t, hk, dk}), k = act({t, hk, dk}), v = act({t, hv, dv});
    ops::causal_conv1d_split(qkv, l.conv_w, cache.slots[1], batch,
                             {q.reshape({t, hk * dk}), k.reshape({t, hk * dk}), v.reshape({t, hv * dv})});
    Tensor g = Tensor::empty({t, hv}, DType::kF32, device_), beta = Tensor::empty({t, hv}, DType::kF32, device_);
    ops::gdn_gates(a, b, l.a_log, l.dt_bias, g, beta);
    Tensor core = act({t, hv, dv});
    // The CPU reference runs the recurrence so that results never depend on how the engine
    // split the sequence into steps; the GPU takes the chunked form for speed.
    const auto algorithm = device_ == Device::kCpu ? ops::GdnAlgorithm::kRecurrent : ops::GdnAlgorithm::kChunked;
    ops::gated_delta_rule(q, k, v, g, beta, cache.slots[0], batch, core, algorithm);
    Tensor normed = act({t, hv, dv});
    ops::rms_norm_gated(core, z, l.gdn_norm, float(cfg_.eps), normed);
    ops::linear(normed.reshape({t, hv * dv}), l.out_proj, y);
    reduce(y);
  }

  // This rank's share of n things split par_.size ways.
  using Share = dist::Share;
  Share share(int64_t n) const { return dist::rank_share(par_, n); }
  // After a row-parallel projection: the ranks' partial sums added.
  void reduce(const Tensor& y) const {
    if (par_.size > 1) par_.comm->all_reduce_sum(y);
  }

  Device device_;
  dist::Parallel par_;
  DType ssm_dtype_;  // the GDN state slots: F32 (default) or BF16 (--mamba-ssm-dtype)
  bool kv_fp8_;      // the attention layers' KV pages: FP8 with scales (--kv-cache-dtype fp8)
  Qwen35Config full_, cfg_;  // the checkpoint's config; this rank's share of it
  ModelInfo info_;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  struct Mtp {
    Tensor fc_embed, fc_hidden, embed_norm, hidden_norm, norm;  // fc's columns for each input
    std::vector<Layer> layers;
    size_t bytes = 0;
  } mtp_;
};

}  // namespace

std::unique_ptr<Model> load_qwen3_5(const Checkpoint& ckpt, Device device, const dist::Parallel& parallel,
                                    bool mtp, DType ssm_dtype, KvCacheDtype kv) {
  return std::make_unique<Qwen35Model>(ckpt, device, parallel, mtp, ssm_dtype, kv);
}

}  // namespace strata
