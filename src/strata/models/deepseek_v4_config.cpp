#include "strata/models/deepseek_v4_config.h"

#include <cmath>
#include <numbers>

#include "strata/core/error.h"
#include "strata/io/config.h"
#include "strata/io/config_checks.h"

namespace strata {
namespace {

// One rope (HF "main" or "compress"): its parameters as HF ends up holding them.
struct RopeParams {
  std::string type = "default";
  double theta = 10000.0;
  double partial = 1.0;
  double factor = 1.0, beta_fast = 32.0, beta_slow = 1.0;
  double original_max_pos = 0;
  bool has_attention_factor = false;
  double attention_factor = 1.0, mscale = 0, mscale_all_dim = 0;
};

// Reads a rope_parameters / rope_scaling dictionary; `type` or `rope_type` names its kind.
void read_rope_dict(const ConfigView& v, RopeParams& p) {
  p.type = v.get_string("rope_type", v.get_string("type", p.type));
  p.theta = require_positive_float(v, "rope_theta", v.get_float("rope_theta", p.theta));
  p.partial = v.get_float("partial_rotary_factor", p.partial);
  p.factor = v.get_float("factor", p.factor);
  // HF: `beta_fast or 32`, so 0 means the default too.
  if (v.get_float("beta_fast", 0.0) != 0.0) p.beta_fast = v.get_float("beta_fast");
  if (v.get_float("beta_slow", 0.0) != 0.0) p.beta_slow = v.get_float("beta_slow");
  p.original_max_pos = v.get_float("original_max_position_embeddings", p.original_max_pos);
  if (v.has("attention_factor")) {
    p.has_attention_factor = true;
    p.attention_factor = v.get_float("attention_factor");
  }
  p.mscale = v.get_float("mscale", 0.0);
  p.mscale_all_dim = v.get_float("mscale_all_dim", 0.0);
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// inv_freq (float32, as HF/torch compute it) and the cos/sin scaling of one rope.
ops::TailRope make_tail_rope(const RopeParams& p, int64_t head_dim, int64_t max_pos, bool truncate,
                             const ConfigView& where, const std::string& field) {
  ops::TailRope r;
  r.rotary_dim = int(double(head_dim) * p.partial);
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 || r.rotary_dim > head_dim) {
    where.fail_field(field, cat("gives ", r.rotary_dim, " rotary channels of a ", head_dim,
                                "-channel head (must be even, positive and fit)"));
  }
  const int dim = r.rotary_dim, half = dim / 2;
  std::vector<float> pos_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    pos_freq[size_t(i)] = std::pow(float(p.theta), float(2 * i) / float(dim));
  }
  if (p.type == "default") {
    for (int i = 0; i < half; ++i) r.inv_freq.push_back(1.0f / pos_freq[size_t(i)]);
    return r;
  }
  if (p.type != "yarn") where.fail_field(field, "rope type '" + p.type + "' is not supported (default, yarn)");
  double factor = p.factor;
  const double orig = p.original_max_pos > 0 ? p.original_max_pos : double(max_pos);
  if (!(factor > 0)) where.fail_field(field, "yarn needs a positive 'factor'");
  if (p.has_attention_factor) {
    r.attention_scaling = float(p.attention_factor);
  } else if (p.mscale != 0 && p.mscale_all_dim != 0) {
    r.attention_scaling = float(yarn_mscale(factor, p.mscale) / yarn_mscale(factor, p.mscale_all_dim));
  } else {
    r.attention_scaling = float(yarn_mscale(factor, 1.0));
  }
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2 * std::numbers::pi))) / (2 * std::log(p.theta));
  };
  double low = correction_dim(p.beta_fast), high = correction_dim(p.beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.f, 1.f);
    const float extrapolation = 1.f - ramp;
    const float inv_extra = 1.0f / pos_freq[size_t(i)];
    const float inv_inter = 1.0f / (float(factor) * pos_freq[size_t(i)]);
    r.inv_freq.push_back(inv_inter * (1.f - extrapolation) + inv_extra * extrapolation);
  }
  return r;
}

void parse_rope(const ConfigView& v, DeepseekV4Config& c, double partial) {
  const double main_theta = require_positive_float(v, "rope_theta", v.get_float("rope_theta", 10000.0));
  const double compress_theta =
      require_positive_float(v, "compress_rope_theta", v.get_float("compress_rope_theta", 160000.0));
  RopeParams main, compress;
  bool truncate = true;
  ConfigView where = v;
  std::string field_main = "rope_theta", field_compress = "compress_rope_theta";
  const std::string key = v.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (v.has(key) && v.child(key).has("main") && v.child(key).has("compress")) {
    // HF's nested layout: each sub-dict is complete (partial_rotary_factor defaults to 1 there,
    // as in HF's compute_default_rope_parameters).
    const ConfigView rp = v.child(key);
    truncate = rp.get_bool("truncate", true);
    main.theta = main_theta;
    compress.theta = compress_theta;
    read_rope_dict(rp.child("main"), main);
    read_rope_dict(rp.child("compress"), compress);
    where = rp;
    field_main = "main";
    field_compress = "compress";
  } else {
    // Flat layout: main is plain RoPE at rope_theta; compress takes the scaling keys (YaRN) at
    // compress_rope_theta, with attention_factor 1 unless given (HF's __post_init__).
    main.theta = main_theta;
    main.partial = partial;
    compress.partial = partial;
    if (v.has(key)) {
      // HF reads `truncate` from the top of the (by then nested) rope_parameters, where this
      // layout never puts it: YaRN's correction range is always truncated.
      const ConfigView rp = v.child(key);
      read_rope_dict(rp, compress);
      where = rp;
      field_compress = "rope_type";
    }
    compress.theta = compress_theta;
    compress.partial = partial;
    if (compress.type == "yarn" && !compress.has_attention_factor) {
      compress.has_attention_factor = true;
      compress.attention_factor = 1.0;
    }
  }
  c.rope_main = make_tail_rope(main, c.head_dim, c.max_pos, truncate, where, field_main);
  c.rope_compress = make_tail_rope(compress, c.head_dim, c.max_pos, truncate, where, field_compress);
  if (c.rope_main.rotary_dim != c.rope_compress.rotary_dim) {
    v.fail_field(key, cat("main and compress ropes rotate ", c.rope_main.rotary_dim, " and ",
                          c.rope_compress.rotary_dim, " channels; they must agree"));
  }
  c.rope_dim = c.rope_main.rotary_dim;
}

void parse_layer_types(const ConfigView& v, DeepseekV4Config& c) {
  const int64_t n = c.layers;
  if (v.has("layer_types")) {
    const auto types = v.get_string_list("layer_types");
    if (int64_t(types.size()) < n) {
      v.fail_field("layer_types", cat("has ", types.size(), " entries for ", n, " layers"));
    }
    for (int64_t i = 0; i < n; ++i) {
      const std::string& t = types[size_t(i)];
      if (t == "sliding_attention") {
        c.attention.push_back(Dsv4Attention::kSliding);
      } else if (t == "compressed_sparse_attention") {
        c.attention.push_back(Dsv4Attention::kCompressedSparse);
      } else if (t == "heavily_compressed_attention") {
        c.attention.push_back(Dsv4Attention::kHeavilyCompressed);
      } else {
        v.fail_field("layer_types", cat("entry ", i, " '", t, "' is not a DeepSeek-V4 layer type"));
      }
    }
  } else if (v.has("compress_ratios")) {
    const auto ratios = v.get_int_list("compress_ratios");  // may carry the MTP layer's entry
    if (int64_t(ratios.size()) < n) {
      v.fail_field("compress_ratios", cat("has ", ratios.size(), " entries for ", n, " layers"));
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = ratios[size_t(i)];
      if (r == 0) {
        c.attention.push_back(Dsv4Attention::kSliding);
      } else if (r == 4) {
        c.attention.push_back(Dsv4Attention::kCompressedSparse);
      } else if (r == 128) {
        c.attention.push_back(Dsv4Attention::kHeavilyCompressed);
      } else {
        v.fail_field("compress_ratios", cat("entry ", i, " is ", r, " (expected 0, 4 or 128)"));
      }
    }
  } else {
    // HF's default (V4-Pro): two HCA layers, then CSA / HCA alternating.
    for (int64_t i = 0; i < n; ++i) {
      c.attention.push_back(i < 2 || (i - 2) % 2 == 0 ? Dsv4Attention::kHeavilyCompressed
                                                      : Dsv4Attention::kCompressedSparse);
    }
  }
  if (v.has("mlp_layer_types")) {
    const auto types = v.get_string_list("mlp_layer_types");
    if (int64_t(types.size()) < n) {
      v.fail_field("mlp_layer_types", cat("has ", types.size(), " entries for ", n, " layers"));
    }
    for (int64_t i = 0; i < n; ++i) {
      const std::string& t = types[size_t(i)];
      if (t != "hash_moe" && t != "moe") {
        v.fail_field("mlp_layer_types", cat("entry ", i, " '", t, "' is not hash_moe or moe"));
      }
      c.mlp.push_back(t == "hash_moe" ? Dsv4Mlp::kHash : Dsv4Mlp::kLearned);
    }
  } else {
    const int64_t hashed = require_non_negative(v, "num_hash_layers", v.get_int("num_hash_layers", 3));
    for (int64_t i = 0; i < n; ++i) c.mlp.push_back(i < hashed ? Dsv4Mlp::kHash : Dsv4Mlp::kLearned);
  }
}

}  // namespace

std::string_view dsv4_attention_name(Dsv4Attention a) {
  switch (a) {
    case Dsv4Attention::kSliding: return "sliding_attention";
    case Dsv4Attention::kCompressedSparse: return "compressed_sparse_attention";
    case Dsv4Attention::kHeavilyCompressed: return "heavily_compressed_attention";
  }
  return "?";
}

DeepseekV4Config parse_deepseek_v4_config(const nlohmann::json& root, const std::string& origin) {
  const ConfigView v = ConfigView::text_config(root, origin);
  DeepseekV4Config c;
  c.origin = origin;
  auto positive = [&](const char* key, int64_t value) { return require_positive(v, key, value); };
  c.vocab = positive("vocab_size", v.get_int("vocab_size", 129280));
  c.hidden = positive("hidden_size", v.get_int("hidden_size", 4096));
  c.layers = positive("num_hidden_layers", v.get_int("num_hidden_layers", 43));
  c.mtp_layers = require_non_negative(v, "num_nextn_predict_layers", v.get_int("num_nextn_predict_layers", 0));
  c.heads = positive("num_attention_heads", v.get_int("num_attention_heads", 64));
  if (v.get_int("num_key_value_heads", 1) != 1) {
    v.fail_field("num_key_value_heads", "DeepSeek-V4 attention is shared-KV MQA (must be 1)");
  }
  c.head_dim = positive("head_dim", v.get_int("head_dim", 512));
  c.q_lora_rank = positive("q_lora_rank", v.get_int("q_lora_rank", 1024));
  c.o_groups = positive("o_groups", v.get_int("o_groups", 8));
  c.o_lora_rank = positive("o_lora_rank", v.get_int("o_lora_rank", 1024));
  if ((c.heads * c.head_dim) % c.o_groups) {
    v.fail_field("o_groups", cat(c.o_groups, " groups do not divide ", c.heads, " heads x ", c.head_dim));
  }
  c.experts = positive("n_routed_experts", v.get_int("n_routed_experts", 256));
  c.top_k = require_in_range(v, "num_experts_per_tok", v.get_int("num_experts_per_tok", 6), 1, c.experts,
                             "n_routed_experts");
  c.moe_inter = positive("moe_intermediate_size", v.get_int("moe_intermediate_size", 2048));
  c.shared_experts = require_non_negative(v, "n_shared_experts", v.get_int("n_shared_experts", 1));
  const std::string scoring = v.get_string("scoring_func", "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") {
    v.fail_field("scoring_func", "only 'sqrtsoftplus' routing is supported, got '" + scoring + "'");
  }
  c.routed_scaling = require_positive_float(v, "routed_scaling_factor", v.get_float("routed_scaling_factor", 1.5));
  c.swiglu_limit = require_positive_float(v, "swiglu_limit", v.get_float("swiglu_limit", 10.0));
  c.rms_eps = require_positive_float(v, "rms_norm_eps", v.get_float("rms_norm_eps", 1e-6));
  c.window = positive("sliding_window", v.get_int("sliding_window", 128));
  if (v.has("compress_rates")) {
    const ConfigView rates = v.child("compress_rates");
    c.csa_ratio = rates.get_int("compressed_sparse_attention", 4);
    c.hca_ratio = rates.get_int("heavily_compressed_attention", 128);
  }
  c.csa_ratio = v.get_int("compress_rate_csa", c.csa_ratio);
  c.hca_ratio = v.get_int("compress_rate_hca", c.hca_ratio);
  positive("compress_rates.compressed_sparse_attention", c.csa_ratio);
  positive("compress_rates.heavily_compressed_attention", c.hca_ratio);
  c.index_heads = positive("index_n_heads", v.get_int("index_n_heads", 64));
  c.index_head_dim = positive("index_head_dim", v.get_int("index_head_dim", 128));
  c.index_topk = positive("index_topk", v.get_int("index_topk", 512));
  c.hc_mult = positive("hc_mult", v.get_int("hc_mult", 4));
  c.hc_iters = positive("hc_sinkhorn_iters", v.get_int("hc_sinkhorn_iters", 20));
  c.hc_eps = require_positive_float(v, "hc_eps", v.get_float("hc_eps", 1e-6));
  c.max_pos = positive("max_position_embeddings", v.get_int("max_position_embeddings", 1048576));
  const SpecialTokenIds ids = read_special_token_ids(v, v, c.vocab);
  c.eos = ids.eos;
  c.bos = ids.bos;
  c.tie_embeddings = v.get_bool("tie_word_embeddings", false);
  // HF: partial_rotary_factor, else qk_rope_head_dim / head_dim, else 64 / 512.
  double partial = 64.0 / 512.0;
  if (v.has("partial_rotary_factor")) {
    partial = v.get_float("partial_rotary_factor");
  } else if (v.has("qk_rope_head_dim")) {
    partial = double(v.get_int("qk_rope_head_dim")) / double(c.head_dim);
  }
  parse_rope(v, c, partial);
  if (c.rope_dim > c.index_head_dim) {
    v.fail_field("index_head_dim", cat(c.index_head_dim, " is smaller than the ", c.rope_dim,
                                       " rotary channels the indexer rotates"));
  }
  parse_layer_types(v, c);
  if (v.has("quantization_config")) {
    const ConfigView q = v.child("quantization_config");
    if (q.has("weight_block_size")) {
      const auto b = q.get_int_list("weight_block_size");
      if (b.size() != 2 || b[0] <= 0 || b[1] <= 0) {
        q.fail_field("weight_block_size", "expected two positive integers");
      }
      c.fp8_block_rows = int(b[0]);
      c.fp8_block_cols = int(b[1]);
    }
  }
  return c;
}

CacheSpec deepseek_v4_cache_spec(const DeepseekV4Config& c) {
  CacheSpec spec;
  const DType f32 = DType::kF32;
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerCacheSpec l;
    l.paged.push_back({"kv", {c.head_dim}, f32, 1});
    const Dsv4Attention a = c.attention[size_t(i)];
    if (a != Dsv4Attention::kSliding) {
      const ops::CompressorSpec comp{int(c.ratio_of(i)), int(c.head_dim),
                                     a == Dsv4Attention::kCompressedSparse};
      l.paged.push_back({"compressed_kv", {c.head_dim}, f32, comp.ratio});
      l.slots.push_back({"compressor_kv", {comp.ring_rows(), comp.width()}, f32});
      l.slots.push_back({"compressor_gate", {comp.ring_rows(), comp.width()}, f32});
      if (a == Dsv4Attention::kCompressedSparse) {
        const ops::CompressorSpec idx{comp.ratio, int(c.index_head_dim), true};
        l.paged.push_back({"index_k", {c.index_head_dim}, f32, idx.ratio});
        l.slots.push_back({"indexer_kv", {idx.ring_rows(), idx.width()}, f32});
        l.slots.push_back({"indexer_gate", {idx.ring_rows(), idx.width()}, f32});
      }
    }
    spec.layers.push_back(std::move(l));
  }
  return spec;
}

}  // namespace strata
