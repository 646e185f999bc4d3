#include "strata/models/qwen4_exp_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "strata/core/error.h"
#include "strata/dist/rank_split.h"
#include "strata/io/config.h"
#include "strata/io/config_checks.h"

namespace strata {
namespace {

// HF's RoPE setup (compute_default_rope_parameters): inv_freq = 1 / theta^(2i / dim) in float32
// over dim = int(head_dim * partial_rotary_factor); text positions make mRoPE plain RoPE.
ops::RopeSpec parse_rope(const ConfigView& text, int64_t head_dim) {
  double theta = text.get_float("rope_theta", 10000.0);
  double partial = text.get_float("partial_rotary_factor", 1.0);
  std::string type = "default";
  ops::RopeSpec spec;
  if (text.has("rope_parameters")) {
    ConfigView rp = text.child("rope_parameters");
    theta = rp.get_float("rope_theta", theta);
    partial = rp.get_float("partial_rotary_factor", partial);
    type = rp.get_string("rope_type", type);
    if (rp.has("mrope_section")) {
      for (int64_t s : rp.get_int_list("mrope_section")) spec.mrope_section.push_back(int(s));
    }
  }
  if (type != "default") {
    text.fail_field("rope_parameters.rope_type", "only 'default' is supported, got '" + type + "'");
  }
  const bool nested_theta = text.has("rope_parameters") && text.child("rope_parameters").has("rope_theta");
  require_positive_float(text, nested_theta ? "rope_parameters.rope_theta" : "rope_theta", theta);
  spec.rotary_dim = int(double(head_dim) * partial);
  if (spec.rotary_dim <= 0 || spec.rotary_dim % 2 || spec.rotary_dim > head_dim) {
    text.fail_field("rope_parameters.partial_rotary_factor",
                    cat("gives a rotary dimension of ", spec.rotary_dim, " for head_dim ", head_dim));
  }
  for (int i = 0; i < spec.rotary_dim / 2; ++i) {
    spec.inv_freq.push_back(1.0f / std::pow(float(theta), float(2 * i) / float(spec.rotary_dim)));
  }
  return spec;
}

ops::GateActivation parse_gate(const ConfigView& text, const std::string& field,
                               const std::string& name) {
  if (name == "sigmoid") return ops::GateActivation::kSigmoid;
  if (name == "silu") return ops::GateActivation::kSilu;
  text.fail_field(field, "unsupported output gate activation '" + name + "' (sigmoid or silu)");
}

bool is_prime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2) {
    if (v % d == 0) return false;
  }
  return true;
}

}  // namespace

int Qwen4ExpConfig::ple_rank(int64_t layer) const {
  for (size_t i = 0; i < ple_layer_ids.size(); ++i) {
    if (ple_layer_ids[i] == layer + 1) return int(i);
  }
  return -1;
}

Qwen4ExpConfig parse_qwen4_exp_config(const nlohmann::json& root, const std::string& origin) {
  ConfigView text = ConfigView::text_config(root, origin);
  ConfigView top(&root, origin);
  Qwen4ExpConfig c;
  c.model_type = text.get_string("model_type", top.get_string("model_type", ""));
  // Sizes are checked as they are read (positive), the relations between them below.
  auto positive = [&](const char* key, int64_t fallback) {
    return require_positive(text, key, text.get_int(key, fallback));
  };
  c.vocab = require_positive(text, "vocab_size", text.get_int("vocab_size"));
  c.hidden = require_positive(text, "hidden_size", text.get_int("hidden_size"));
  c.layers = require_positive(text, "num_hidden_layers", text.get_int("num_hidden_layers"));
  c.mtp_layers = require_non_negative(text, "mtp_num_hidden_layers", text.get_int("mtp_num_hidden_layers", 0));
  // The rest falls back to Qwen4ExpTextConfig's defaults, as HF does.
  c.heads = positive("num_attention_heads", 16);
  c.kv_heads = positive("num_key_value_heads", 2);
  c.head_dim = positive("head_dim", 256);
  c.eps = require_positive_float(text, "rms_norm_eps", text.get_float("rms_norm_eps", 1e-6));
  c.max_pos = positive("max_position_embeddings", 32768);
  c.tie_embeddings = text.get_bool("tie_word_embeddings", false);
  if (top.has("tie_word_embeddings")) c.tie_embeddings = top.get_bool("tie_word_embeddings");
  const SpecialTokenIds ids = read_special_token_ids(text, top, c.vocab);
  c.eos = ids.eos;
  c.bos = ids.bos;

  const std::string act = text.get_string("hidden_act", "silu");
  if (act != "silu") text.fail_field("hidden_act", "only 'silu' is supported, got '" + act + "'");
  c.gdn_gate = text.has("output_gate_type")
                   ? parse_gate(text, "output_gate_type", text.get_string("output_gate_type"))
                   : parse_gate(text, "hidden_act", act);

  c.lin_k_heads = positive("linear_num_key_heads", 16);
  c.lin_v_heads = positive("linear_num_value_heads", 32);
  c.lin_k_dim = positive("linear_key_head_dim", 128);
  c.lin_v_dim = positive("linear_value_head_dim", 128);
  c.conv_kernel = positive("linear_conv_kernel_dim", 4);

  c.experts = positive("num_experts", 512);
  c.top_k = require_in_range(text, "num_experts_per_tok", text.get_int("num_experts_per_tok", 10), 1,
                             c.experts, "num_experts");
  c.moe_inter = positive("moe_intermediate_size", 512);
  c.shared_inter = positive("shared_expert_intermediate_size", 512);
  c.norm_topk = text.get_bool("norm_topk_prob", true);

  c.hc = text.get_int("hc_count", 4);
  c.hc_rank = positive("hc_lowrank", 320);

  if (text.has("ple_layer_ids")) {
    std::set<int64_t> ids;
    for (int64_t id : text.get_int_list("ple_layer_ids")) ids.insert(id);
    c.ple_layer_ids.assign(ids.begin(), ids.end());
  }
  c.ple_embed_dim = text.get_int("ple_embed_dim", c.hidden);
  c.ple_conv_kernel = text.get_int("ple_conv_kernel_size", 4);
  c.ngram_size = text.get_int("ngram_size", 3);
  c.heads_per_ngram = text.get_int("heads_per_ngram", 8);
  c.ngram_vocab_base = text.get_int("ngram_vocab_size_base", 20'000'000);
  c.ngram_vocab_divisor = text.get_int("make_ngram_vocab_size_divisible_by", 128);
  c.seed = text.get_int("seed", 1234);
  c.split_ngram_parts = text.get_int("split_ngram_parts", 512);

  // Layer kinds. Published checkpoints say "full_attention" for the QSA layers.
  std::vector<std::string> types;
  if (text.has("layer_types")) {
    types = text.get_string_list("layer_types");
  } else {
    const int64_t every = text.get_int("full_attention_interval", 4);
    if (every <= 0) text.fail_field("full_attention_interval", "must be positive");
    for (int64_t i = 0; i < c.layers; ++i) {
      types.push_back((i + 1) % every ? "linear_attention" : "qwen_sparse_attention");
    }
  }
  if (int64_t(types.size()) != c.layers) {
    text.fail_field("layer_types", cat("has ", types.size(), " entries for ", c.layers, " layers"));
  }
  for (const std::string& t : types) {
    if (t != "linear_attention" && t != "full_attention" && t != "qwen_sparse_attention") {
      text.fail_field("layer_types", "unsupported layer type '" + t + "'");
    }
    c.linear.push_back(t == "linear_attention");
  }

  // Checks of HF's validate_architecture, plus the shapes the ops need.
  if (c.hc <= 1) text.fail_field("hc_count", cat("must be > 1, got ", c.hc));
  require_divisible(text, "num_attention_heads", c.heads, "num_key_value_heads", c.kv_heads);
  require_divisible(text, "linear_num_value_heads", c.lin_v_heads, "linear_num_key_heads", c.lin_k_heads);
  c.rope = parse_rope(text, c.head_dim);

  const bool has_qsa = std::count(c.linear.begin(), c.linear.end(), false) > 0;
  const char* qsa_fields[] = {"indexer_n_heads", "indexer_kv_heads", "indexer_head_dim",
                              "indexer_budget", "indexer_compress_ratio"};
  bool any_qsa_field = false;
  for (const char* f : qsa_fields) any_qsa_field = any_qsa_field || text.has(f);
  if (has_qsa || any_qsa_field) {
    for (const char* f : qsa_fields) {
      if (!text.has(f)) text.fail_field(f, "missing (required by the QSA layers)");
      if (text.get_int(f) <= 0) text.fail_field(f, "must be positive");
    }
    if (text.get_int("indexer_kv_heads") != 1) {
      text.fail_field("indexer_kv_heads", "Qwen4-Exp QSA requires one indexer key head");
    }
    c.index_heads = text.get_int("indexer_n_heads");
    c.index_head_dim = text.get_int("indexer_head_dim");
    c.index_budget = text.get_int("indexer_budget");
    c.index_ratio = text.get_int("indexer_compress_ratio");
    if (c.index_budget % c.index_ratio) {
      text.fail_field("indexer_budget", "must be divisible by indexer_compress_ratio");
    }
    if (c.rope.rotary_dim > c.index_head_dim) {
      text.fail_field("indexer_head_dim", cat("the RoPE dimension ", c.rope.rotary_dim,
                                              " must fit the indexer head"));
    }
  }

  if (!c.ple_layer_ids.empty()) {
    const int64_t nh = c.ngram_heads();
    if (c.ngram_size < 2 || c.heads_per_ngram <= 0 || c.ple_embed_dim <= 0 || c.ple_embed_dim % nh) {
      text.fail_field("ple_embed_dim", cat("must be positive and divisible by the ", nh,
                                           " n-gram heads ((ngram_size - 1) * heads_per_ngram)"));
    }
    for (int64_t id : c.ple_layer_ids) {
      if (id < 1 || id > c.layers) {
        text.fail_field("ple_layer_ids", cat("one-indexed ids must lie in [1, ", c.layers, "], got ", id));
      }
      if (!c.linear[id - 1]) {
        text.fail_field("ple_layer_ids", cat("PLE is only supported on linear_attention layers, got ", id));
      }
    }
    if (c.eos.empty()) text.fail_field("eos_token_id", "must be set when PLE layers are enabled");
    if (c.ple_conv_kernel < 1) text.fail_field("ple_conv_kernel_size", "must be positive");
    if (c.ngram_vocab_base < 2 || c.ngram_vocab_divisor <= 0) {
      text.fail_field("ngram_vocab_size_base", "ngram_vocab_size_base (>= 2) and "
                                               "make_ngram_vocab_size_divisible_by must be positive");
    }
  }
  return c;
}

Qwen4ExpConfig qwen4_exp_rank_config(const Qwen4ExpConfig& full, const dist::Parallel& par,
                                     const std::string& origin) {
  const dist::RankSplit split(par, origin);
  if (split.ranks() == 1) return full;
  Qwen4ExpConfig c = full;
  c.lin_k_heads = split.divide(full.lin_k_heads, "linear_num_key_heads");
  c.lin_v_heads = split.divide(full.lin_v_heads, "linear_num_value_heads");
  if (std::count(full.linear.begin(), full.linear.end(), false) > 0) {
    c.heads = split.divide(full.heads, "num_attention_heads");
    c.kv_heads = split.kv_heads(full.kv_heads);
    c.index_heads = split.divide(full.index_heads, "indexer_n_heads");
  }
  if (par.expert_parallel) {
    split.divide(full.experts, "num_experts");
  } else {
    c.moe_inter = split.divide(full.moe_inter, "moe_intermediate_size");
  }
  c.shared_inter = split.divide(full.shared_inter, "shared_expert_intermediate_size");
  split.divide(full.vocab, "vocab_size");
  return c;
}

uint64_t splitmix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

std::vector<int64_t> ple_layer_multipliers(int64_t vocab, int64_t ngram_size, int64_t ple_rank,
                                           int64_t seed) {
  const uint64_t max_long = (uint64_t(1) << 63) - 1;
  const uint64_t multiplier_max = max_long / uint64_t(std::max<int64_t>(vocab, 1));
  const uint64_t half_bound = std::max<uint64_t>(1, multiplier_max / 2);
  const uint64_t base_seed = uint64_t(seed) + 10007ull * uint64_t(ple_rank);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ngram_size; ++i) {
    const uint64_t value = base_seed + 0x9E3779B97F4A7C15ull * uint64_t(i + 1);
    out.push_back(int64_t(2 * (splitmix64(value) % half_bound) + 1));
  }
  return out;
}

int64_t nth_prime_after(int64_t start, int64_t count) {
  int64_t p = start;
  for (int64_t i = 0; i < count; ++i) {
    ++p;
    while (!is_prime(p)) ++p;
  }
  return p;
}

NgramTableLayout ngram_table_layout(const Qwen4ExpConfig& c, int ple_rank) {
  NgramTableLayout t;
  const int64_t heads = c.ngram_heads();
  t.hash.ngram_size = int(c.ngram_size);
  t.hash.heads_per_ngram = int(c.heads_per_ngram);
  t.hash.eos = c.ple_eos();
  t.hash.multipliers = ple_layer_multipliers(c.vocab, c.ngram_size, ple_rank, c.seed);
  // Head g (global over the PLE layers) takes the (g + 1)-th prime >= ngram_vocab_size_base; the
  // primes are found in one walk (HF restarts the walk per head, with the same result).
  int64_t p = c.ngram_vocab_base - 1;
  const int64_t first = int64_t(ple_rank) * heads;
  p = first > 0 ? nth_prime_after(p, first) : p;
  for (int64_t h = 0; h < heads; ++h) {
    p = nth_prime_after(p, 1);
    t.hash.head_offsets.push_back(t.total_rows);
    t.hash.head_vocab_sizes.push_back(p);
    t.total_rows += p;
  }
  const int64_t div = c.ngram_vocab_divisor;
  t.padded_rows = (t.total_rows + div - 1) / div * div;
  t.dim = c.ple_embed_dim / heads;
  return t;
}

}  // namespace strata
