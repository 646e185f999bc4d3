#include "strata/models/deepseek_v4_weights.h"

#include <cstring>
#include <map>

#include "strata/core/error.h"
#include "strata/dist/rank_split.h"
#include "strata/io/quant.h"

namespace strata {
namespace {

// Published layer suffix -> HF module suffix (transformers' deepseek_v4 conversion mapping).
const std::map<std::string, std::string>& hf_layer_names() {
  static const std::map<std::string, std::string> kNames = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"hc_attn_fn", "attn_hc.fn"},
      {"hc_attn_base", "attn_hc.base"},
      {"hc_attn_scale", "attn_hc.scale"},
      {"hc_ffn_fn", "ffn_hc.fn"},
      {"hc_ffn_base", "ffn_hc.base"},
      {"hc_ffn_scale", "ffn_hc.scale"},
      {"attn.attn_sink", "self_attn.sinks"},
      {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
      {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
      {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
      {"attn.wkv.weight", "self_attn.kv_proj.weight"},
      {"attn.kv_norm.weight", "self_attn.kv_norm.weight"},
      {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},
      {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
      {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
      {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
      {"attn.compressor.ape", "self_attn.compressor.position_bias"},
      {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
      {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
      {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
      {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
      {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
      {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
      {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"},
      {"ffn.gate.weight", "mlp.gate.weight"},
      {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
      {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
      {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
  };
  return kNames;
}

const std::map<std::string, std::string>& hf_top_names() {
  static const std::map<std::string, std::string> kNames = {
      {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
      {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head.hc_fn"},
      {"hc_head_base", "model.hc_head.hc_base"},     {"hc_head_scale", "model.hc_head.hc_scale"},
  };
  return kNames;
}

// transformers' save_pretrained names (5.17, DeepseekV4ForCausalLM, as observed): the published
// names with these differences. Its key reversal undoes the conversion mapping only where a
// rule matches the model's key, so the top-level names keep HF's module names:
//   embed.weight                  -> model.embed_tokens.weight
//   norm.weight                   -> model.norm.weight
//   hc_head_{fn,base,scale}       -> model.hc_head.hc_{fn,base,scale}
//   head.weight                   -> head.weight (the same; not HF's lm_head.weight)
//   layers.N.<rest>               -> model.layers.N.<rest>, experts one tensor per projection
//   layers.N.attn.kv_norm.weight  -> model.layers.N.attn.norm.weight (presumably the compressors'
//                                    norm -> kv_norm rule, reversed, catches it too)
// HF's model holds no mtp.* tensors, so a save_pretrained folder has none.
// tools/fixtures/make_fixtures_deepseek_v4_hf_names.py checks this list against what
// save_pretrained really writes.
std::string save_pretrained_top_name(const std::string& pub) {
  static const std::map<std::string, std::string> kNames = {
      {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "head.weight"},
      {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head.hc_fn"},
      {"hc_head_base", "model.hc_head.hc_base"},     {"hc_head_scale", "model.hc_head.hc_scale"},
  };
  return kNames.at(pub);
}

std::string save_pretrained_layer_name(int64_t i, const std::string& pub) {
  return cat("model.layers.", i, ".", pub == "attn.kv_norm.weight" ? "attn.norm.weight" : pub);
}

class Reader {
 public:
  Reader(const Checkpoint& ckpt, const DeepseekV4Config& c, WeightLoader& w, Dsv4Names names)
      : ckpt_(ckpt), c_(c), w_(w), hf_(names == Dsv4Names::kHfModules) {}

  // The name in this folder of the tensor published as `pub` (top-level) or layers.i.`pub`:
  // HF's module name, or whichever of the published and save_pretrained names is there.
  std::string top(const std::string& pub) const {
    return hf_ ? hf_top_names().at(pub) : pick(pub, save_pretrained_top_name(pub));
  }
  std::string layer(int64_t i, const std::string& pub) const {
    // The multi-token-prediction blocks follow the layers: mtp.J.* (published names only; HF's
    // model holds no MTP, so neither of its namings has them).
    if (i >= c_.layers) return cat("mtp.", i - c_.layers, ".", pub);
    if (hf_) return cat("model.layers.", i, ".", hf_layer_names().at(pub));
    return pick(cat("layers.", i, ".", pub), save_pretrained_layer_name(i, pub));
  }
  bool has_top(const std::string& pub) const {
    return hf_ ? has(hf_top_names().at(pub)) : has(pub) || has(save_pretrained_top_name(pub));
  }
  bool has(const std::string& name) const { return ckpt_.has(name); }
  // --load-format dummy: every tensor random (WeightLoader::random), read under HF's names.
  bool dummy() const { return w_.dummy(); }

  // A float tensor (norms, biases, hyper-connection weights, ...).
  Tensor vec(const std::string& name, const Shape& shape) { return w_.get_top(name, shape); }
  // A float tensor kept F32 on every device (the hyper-connection mixes, which HF computes in
  // float32; small).
  Tensor vec_f32(const std::string& name, const Shape& shape) {
    if (w_.device() == Device::kCpu) return vec(name, shape);
    return w_.get_host_f32(name, shape).to(w_.device());
  }

  // A weight matrix [N, K]: float, FP8 with block scales, or MXFP4.
  Tensor matrix(const std::string& name, const Shape& shape) {
    if (dummy()) return w_.random(name, shape);
    const DType t = ckpt_.info(name).dtype;
    if (t == DType::kF32 || t == DType::kBF16 || t == DType::kF16) return w_.get_top(name, shape);
    return w_.to_device(readable(name, shape));
  }

  // The rows `rows` (concatenated) and columns `cols` of a weight matrix [N, K], on the device
  // (a tensor-parallel shard). Float matrices convert only the slice; quantised ones are
  // dequantised whole, then sliced.
  Tensor matrix_slice(const std::string& name, const Shape& shape,
                      const std::vector<std::pair<int64_t, int64_t>>& rows, std::pair<int64_t, int64_t> cols) {
    int64_t n = 0;
    for (const auto& r : rows) n += r.second;
    if (dummy()) return w_.random(name, {n, cols.second});
    return w_.to_device(host_slice(name, shape, rows, cols));
  }
  // The same slice as CPU float32 (for stacks assembled on the host: per-expert tensors).
  Tensor host_slice(const std::string& name, const Shape& shape, const std::vector<std::pair<int64_t, int64_t>>& rows,
                    std::pair<int64_t, int64_t> cols) {
    int64_t n = 0;
    for (const auto& r : rows) n += r.second;
    if (dummy()) return w_.random_host(name, {n, cols.second}, DType::kF32);
    const Tensor part = slice_experts(readable(name, shape), 0, 1, rows, cols, ckpt_.file_of(name) + ": tensor '" + name + "'");
    return part.reshape({n, cols.second});
  }
  Tensor matrix_rows(const std::string& name, const Shape& shape, int64_t begin, int64_t count) {
    return matrix_slice(name, shape, {{begin, count}}, {0, shape[1]});
  }

  // Another rank's weight matrix: its tensors (and scales) checked and marked read, not converted.
  void skip_matrix(const std::string& name, const Shape& shape) {
    if (!dummy()) readable(name, shape, /*mark_only=*/true);
  }

  // tid2eid: an integer table [vocab, top_k] as I32 on the device, its entries checked against
  // the experts (here, on the host: the CUDA router trusts them).
  // Dummy: token t routes to experts (t * top_k + k) mod experts, k < top_k.
  Tensor expert_table(const std::string& name, const Shape& shape) {
    if (dummy()) {
      Tensor out = Tensor::empty(shape, DType::kI32);
      for (int64_t i = 0; i < out.numel(); ++i) out.data<int32_t>()[i] = int32_t(i % c_.experts);
      return out.to(w_.device());
    }
    Tensor raw = w_.raw(name, shape);
    const DType t = raw.dtype();
    STRATA_CHECK(t == DType::kI64 || t == DType::kI32, ckpt_.file_of(name), ": tensor '", name,
                 "': expected I64 or I32, got ", dtype_name(t));
    Tensor out = Tensor::empty(shape, DType::kI32);
    for (int64_t i = 0; i < raw.numel(); ++i) {
      int64_t v;
      if (t == DType::kI64) {
        std::memcpy(&v, static_cast<const char*>(raw.raw()) + 8 * i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, static_cast<const char*>(raw.raw()) + 4 * i, 4);
        v = v32;
      }
      STRATA_CHECK(v >= 0 && v < c_.experts, ckpt_.file_of(name), ": tensor '", name, "': token ",
                   i / shape[1], " routes to expert ", v, " of ", c_.experts);
      out.data<int32_t>()[i] = int32_t(v);
    }
    return out.to(w_.device());
  }

  WeightLoader& loader() { return w_; }

 private:
  // The stored matrix as a CPU tensor of a float dtype: as stored (a view) for BF16/F16/F32,
  // dequantised to F32 for FP8 with block scales and MXFP4 (their scales read too). With
  // mark_only the tensors are only checked and marked read (an undefined tensor comes back).
  Tensor readable(const std::string& name, const Shape& shape, bool mark_only = false) {
    const DType t = ckpt_.info(name).dtype;
    if (t == DType::kF32 || t == DType::kBF16 || t == DType::kF16) return w_.raw(name, shape);
    const std::string base = name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    if (t == DType::kF8E4M3) {
      Tensor q = w_.raw(name, shape);
      const std::string scale_name = find_scale(name, {base + ".scale", name + "_scale_inv", name + "_scale"});
      const Shape scale_shape{(shape[0] + c_.fp8_block_rows - 1) / c_.fp8_block_rows,
                              (shape[1] + c_.fp8_block_cols - 1) / c_.fp8_block_cols};
      Tensor s = w_.raw(scale_name, scale_shape);
      if (mark_only) return Tensor();
      return dequant_fp8_block(q, s, c_.fp8_block_rows, c_.fp8_block_cols,
                               ckpt_.file_of(name) + ": tensor '" + name + "'");
    }
    if (t == DType::kU8 || t == DType::kI8) {
      STRATA_CHECK(shape[1] % kMxfp4Group == 0, ckpt_.file_of(name), ": tensor '", name,
                   "': MXFP4 rows of ", shape[1], " are not a multiple of ", kMxfp4Group);
      Tensor packed = w_.raw(name, {shape[0], shape[1] / 2});
      const std::string scale_name = find_scale(name, {base + ".scale", name + "_scale"});
      Tensor s = w_.raw(scale_name, {shape[0], shape[1] / kMxfp4Group});
      if (mark_only) return Tensor();
      return dequant_mxfp4(packed, s, ckpt_.file_of(name) + ": tensor '" + name + "'");
    }
    fail(ckpt_.file_of(name), ": tensor '", name, "': dtype ", dtype_name(t),
         " is not a weight format for ", shape_str(shape), " (BF16/F16/F32, F8_E4M3 + block scale, "
         "or MXFP4 packed in U8/I8 + F8_E8M0 scale)");
  }

  std::string find_scale(const std::string& name, const std::vector<std::string>& candidates) const {
    for (const std::string& s : candidates) {
      if (ckpt_.has(s)) return s;
    }
    fail(ckpt_.dir(), ": quantised tensor '", name, "' has no scale (looked for '", candidates[0],
         "' and '", candidates[1], "')");
  }

  // The published name if the folder has it, else the save_pretrained one; neither is an error
  // naming both.
  std::string pick(const std::string& pub, const std::string& saved) const {
    if (ckpt_.has(pub)) return pub;
    if (ckpt_.has(saved)) return saved;
    if (pub == saved) fail(ckpt_.dir(), ": missing tensor '", pub, "'");
    fail(ckpt_.dir(), ": missing tensor '", pub, "' (DeepSeek's published name; transformers' ",
         "save_pretrained name '", saved, "' is not there either)");
  }

  const Checkpoint& ckpt_;
  const DeepseekV4Config& c_;
  WeightLoader& w_;
  bool hf_;
};

// This rank's share of n things split par.size ways (divisibility checked by the model).
using dist::Share;
Share share(const dist::Parallel& par, int64_t n) { return dist::rank_share(par, n); }

// Copies a [rows, cols] float32 matrix into dst at row offset `row0`.
void put_rows(const Tensor& dst, int64_t row0, const Tensor& src) {
  std::memcpy(dst.data<float>() + row0 * src.dim(1), src.data<float>(), src.nbytes());
}

Dsv4Compressor load_compressor(Reader& r, int64_t i, const std::string& prefix,
                               const ops::CompressorSpec& spec, int64_t hidden) {
  Dsv4Compressor comp;
  comp.spec = spec;
  const int64_t width = spec.width();
  comp.kv = r.matrix(r.layer(i, prefix + "wkv.weight"), {width, hidden});
  comp.gate = r.matrix(r.layer(i, prefix + "wgate.weight"), {width, hidden});
  comp.ape = r.vec(r.layer(i, prefix + "ape"), {spec.ratio, width});
  comp.norm = r.vec(r.layer(i, prefix + "norm.weight"), {spec.head_dim});
  return comp;
}

void load_attention(Reader& r, const DeepseekV4Config& c, const dist::Parallel& par, int64_t i, Dsv4Layer& l) {
  const int64_t h = c.hidden, d = c.head_dim, q = c.q_lora_rank;
  l.wq_a = r.matrix(r.layer(i, "attn.wq_a.weight"), {q, h});
  l.q_norm = r.vec(r.layer(i, "attn.q_norm.weight"), {q});
  l.wq_b = r.matrix(r.layer(i, "attn.wq_b.weight"), {c.heads * d, q});
  l.wkv = r.matrix(r.layer(i, "attn.wkv.weight"), {d, h});
  l.kv_norm = r.vec(r.layer(i, "attn.kv_norm.weight"), {d});
  l.wo_a = r.matrix(r.layer(i, "attn.wo_a.weight"), {c.o_groups * c.o_lora_rank, c.heads * d / c.o_groups});
  l.wo_b = r.matrix(r.layer(i, "attn.wo_b.weight"), {h, c.o_groups * c.o_lora_rank});
  l.sinks = r.vec(r.layer(i, "attn.attn_sink"), {c.heads});
  if (l.attention == Dsv4Attention::kSliding) return;
  const bool csa = l.attention == Dsv4Attention::kCompressedSparse;
  l.compressor = load_compressor(r, i, "attn.compressor.", {int(c.ratio_of(i)), int(d), csa}, h);
  if (!csa) return;
  l.indexer = load_compressor(r, i, "attn.indexer.compressor.", {int(c.csa_ratio), int(c.index_head_dim), true}, h);
  // The indexer's heads split over the ranks (q_b_proj and weights_proj colwise).
  const Share ih = share(par, c.index_heads);
  const int64_t id = c.index_head_dim;
  l.index_wq_b = r.matrix_rows(r.layer(i, "attn.indexer.wq_b.weight"), {c.index_heads * id, q}, ih.first * id,
                               ih.count * id);
  l.index_weights = r.matrix_rows(r.layer(i, "attn.indexer.weights_proj.weight"), {c.index_heads, h}, ih.first,
                                  ih.count);
}

// The routed experts: whole experts spread over the ranks (expert parallel), or each expert's
// intermediate columns split (gate and up rows, down columns). Router replicated.
void load_moe(Reader& r, const DeepseekV4Config& c, const dist::Parallel& par, int64_t i, Dsv4Names names,
              Dsv4Layer& l) {
  const int64_t h = c.hidden, e = c.experts, inter = c.moe_inter;
  l.router = r.matrix(r.layer(i, "ffn.gate.weight"), {e, h});
  if (l.mlp == Dsv4Mlp::kHash) {
    l.tid2eid = r.expert_table(r.layer(i, "ffn.gate.tid2eid"), {c.vocab, c.top_k});
  } else {
    l.router_bias = r.vec(r.layer(i, "ffn.gate.bias"), {e});
  }
  const Share es = par.expert_parallel ? share(par, e) : Share{0, e};
  const Share is = par.expert_parallel ? Share{0, inter} : share(par, inter);
  if (names != Dsv4Names::kHfModules) {  // one tensor per expert and projection
    l.experts_gate_up = Tensor::empty({es.count, 2 * is.count, h}, DType::kF32);
    l.experts_down = Tensor::empty({es.count, h, is.count}, DType::kF32);
    for (int64_t j = 0; j < e; ++j) {
      const std::string e = cat("ffn.experts.", j, ".");
      const std::string w1 = r.layer(i, e + "w1.weight"), w2 = r.layer(i, e + "w2.weight"),
                        w3 = r.layer(i, e + "w3.weight");
      if (j < es.first || j >= es.first + es.count) {  // another rank's
        r.skip_matrix(w1, {inter, h});
        r.skip_matrix(w3, {inter, h});
        r.skip_matrix(w2, {h, inter});
        continue;
      }
      const int64_t k = j - es.first;
      put_rows(l.experts_gate_up, k * 2 * is.count, r.host_slice(w1, {inter, h}, {{is.first, is.count}}, {0, h}));
      put_rows(l.experts_gate_up, k * 2 * is.count + is.count,
               r.host_slice(w3, {inter, h}, {{is.first, is.count}}, {0, h}));
      put_rows(l.experts_down, k * h, r.host_slice(w2, {h, inter}, {{0, h}}, {is.first, is.count}));
    }
    // Stacked on the host, then converted for the device whole.
    l.experts_gate_up = r.loader().to_device(l.experts_gate_up);
    l.experts_down = r.loader().to_device(l.experts_down);
  } else {
    const std::string base = cat("model.layers.", i, ".mlp.experts.");
    WeightLoader& w = r.loader();
    l.experts_gate_up = w.get_expert_slices(base + "gate_up_proj", {e, 2 * inter, h}, {es.first, es.count},
                                            {{is.first, is.count}, {inter + is.first, is.count}}, {0, h});
    l.experts_down = w.get_expert_slices(base + "down_proj", {e, h, inter}, {es.first, es.count}, {{0, h}},
                                         {is.first, is.count});
  }
  const int64_t shared = inter * c.shared_experts;
  if (shared == 0) return;
  l.shared_gate_up = Tensor::empty({2 * shared, h}, DType::kF32);
  put_rows(l.shared_gate_up, 0, r.host_slice(r.layer(i, "ffn.shared_experts.w1.weight"), {shared, h}, {{0, shared}}, {0, h}));
  put_rows(l.shared_gate_up, shared,
           r.host_slice(r.layer(i, "ffn.shared_experts.w3.weight"), {shared, h}, {{0, shared}}, {0, h}));
  l.shared_gate_up = r.loader().to_device(l.shared_gate_up);
  l.shared_down = r.matrix(r.layer(i, "ffn.shared_experts.w2.weight"), {h, shared});
}

// Decoder block i (i >= c.layers: multi-token-prediction block i - c.layers): norms,
// hyper-connection mixes, attention and MoE.
Dsv4Layer load_block(Reader& r, const DeepseekV4Config& c, const dist::Parallel& par, int64_t i, Dsv4Attention a,
                     Dsv4Mlp m, Dsv4Names names) {
  const int64_t h = c.hidden, s = c.hc_mult, mix = (2 + s) * s;
  Dsv4Layer l;
  l.attention = a;
  l.mlp = m;
  l.attn_norm = r.vec(r.layer(i, "attn_norm.weight"), {h});
  l.ffn_norm = r.vec(r.layer(i, "ffn_norm.weight"), {h});
  l.hc_attn_fn = r.vec_f32(r.layer(i, "hc_attn_fn"), {mix, s * h});
  l.hc_attn_base = r.vec(r.layer(i, "hc_attn_base"), {mix});
  l.hc_attn_scale = r.vec(r.layer(i, "hc_attn_scale"), {3});
  l.hc_ffn_fn = r.vec_f32(r.layer(i, "hc_ffn_fn"), {mix, s * h});
  l.hc_ffn_base = r.vec(r.layer(i, "hc_ffn_base"), {mix});
  l.hc_ffn_scale = r.vec(r.layer(i, "hc_ffn_scale"), {3});
  load_attention(r, c, par, i, l);
  load_moe(r, c, par, i, names, l);
  return l;
}

}  // namespace

std::vector<Dsv4Mtp> load_deepseek_v4_mtp(const Checkpoint& ckpt, const DeepseekV4Config& c, WeightLoader& loader) {
  STRATA_CHECK(c.mtp_layers > 0, c.origin, ": field 'num_nextn_predict_layers' is 0 or missing: the checkpoint has "
               "no multi-token-prediction head");
  STRATA_CHECK(loader.dummy() || ckpt.has("mtp.0.e_proj.weight"), ckpt.dir(), ": no multi-token-prediction head "
               "(mtp.0.e_proj.weight is missing; transformers' save_pretrained drops mtp.*, the published "
               "checkpoint has it)");
  Reader r(ckpt, c, loader, Dsv4Names::kPublished);
  const int64_t h = c.hidden, s = c.hc_mult;
  std::vector<Dsv4Mtp> heads;
  for (int64_t j = 0; j < c.mtp_layers; ++j) {
    const int64_t i = c.layers + j;
    Dsv4Mtp m;
    m.e_proj = r.matrix(r.layer(i, "e_proj.weight"), {h, h});
    m.h_proj = r.matrix(r.layer(i, "h_proj.weight"), {h, h});
    m.enorm = r.vec(r.layer(i, "enorm.weight"), {h});
    m.hnorm = r.vec(r.layer(i, "hnorm.weight"), {h});
    m.norm = r.vec(r.layer(i, "norm.weight"), {h});
    m.hc_head_fn = r.vec_f32(r.layer(i, "hc_head_fn"), {s, s * h});
    m.hc_head_base = r.vec(r.layer(i, "hc_head_base"), {s});
    m.hc_head_scale = r.vec(r.layer(i, "hc_head_scale"), {1});
    // A sliding-window block (compress ratio 0) with learned routing, as the published
    // compress_ratios' trailing entry and num_hash_layers say.
    m.block = load_block(r, c, {}, i, Dsv4Attention::kSliding, Dsv4Mlp::kLearned, Dsv4Names::kPublished);
    heads.push_back(std::move(m));
  }
  loader.refuse_unused_under("mtp.", cat(c.mtp_layers, "-block multi-token-prediction head"));
  return heads;
}

Dsv4Weights load_deepseek_v4_weights(const Checkpoint& ckpt, const DeepseekV4Config& c,
                                     WeightLoader& loader, const dist::Parallel& par) {
  Dsv4Weights w;
  // HF's module names when layer 0 has HF's norm (or for dummy weights); else the published
  // names, or save_pretrained's, tensor by tensor.
  if (loader.dummy() || ckpt.has("model.layers.0.input_layernorm.weight")) {
    w.names = Dsv4Names::kHfModules;
  } else {
    w.names = ckpt.has("embed.weight") ? Dsv4Names::kPublished : Dsv4Names::kSavePretrained;
  }
  Reader r(ckpt, c, loader, w.names);
  const int64_t h = c.hidden, s = c.hc_mult;
  w.embed = r.vec(r.top("embed.weight"), {c.vocab, h});
  w.norm = r.vec(r.top("norm.weight"), {h});
  // The head split over the vocabulary (its logits all-gathered).
  const Share vs = share(par, c.vocab);
  if (r.has_top("head.weight") || (r.dummy() && !c.tie_embeddings)) {
    w.head = r.matrix_rows(r.top("head.weight"), {c.vocab, h}, vs.first, vs.count);
  } else if (c.tie_embeddings) {
    w.head = par.size == 1 ? w.embed : r.matrix_rows(r.top("embed.weight"), {c.vocab, h}, vs.first, vs.count);
  } else {
    fail(ckpt.dir(), ": missing tensor '", w.names == Dsv4Names::kHfModules ? "lm_head.weight" : "head.weight",
         "' (tie_word_embeddings is false)");
  }
  w.hc_head_fn = r.vec_f32(r.top("hc_head_fn"), {s, s * h});
  w.hc_head_base = r.vec(r.top("hc_head_base"), {s});
  w.hc_head_scale = r.vec(r.top("hc_head_scale"), {1});
  for (int64_t i = 0; i < c.layers; ++i) {
    w.layers.push_back(load_block(r, c, par, i, c.attention[size_t(i)], c.mlp[size_t(i)], w.names));
  }
  const auto unused = loader.unused({"mtp.", "model.mtp."});
  STRATA_CHECK(unused.empty(), ckpt.dir(), ": unexpected tensor '", unused.empty() ? "" : unused[0],
               "' (", unused.size(), " unused in all) for deepseek_v4 with ", c.layers,
               " layers of types from ", c.origin);
  return w;
}

}  // namespace strata
