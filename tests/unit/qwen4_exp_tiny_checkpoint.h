// A randomly initialised tiny Qwen4-Exp checkpoint written with the published tensor names
// (HF 5.17 save layout: n-gram table shards, per-expert or fused experts, I64 hash buffers), for
// tests that need a whole model without HF fixtures.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/core/dtype.h"
#include "strata/core/tensor.h"
#include "strata/io/safetensors.h"
#include "strata/models/qwen4_exp_config.h"

namespace strata::testing {

struct TinyQwen4Exp {
  int hc = 3;
  bool fused_experts = false;
  bool multimodal = false;  // model_type qwen4_exp, weights under model.language_model.
  int ratio = 4, budget = 8;
  std::string layer_label = "full_attention";  // how config.json names the QSA layers
  int eos = 2;
  uint64_t seed = 7;
  int files = 2;  // safetensors files the tensors are spread over
  bool extra_ignored = true;  // add mtp.* and hyper_connection_mixer.block_inject_weight
  bool mtp = false;  // a one-layer multi-token-prediction head (mtp.*, mtp_num_hidden_layers 1)
};

inline nlohmann::json tiny_qwen4_exp_text_config(const TinyQwen4Exp& o) {
  nlohmann::json t = {
      {"model_type", "qwen4_exp_text"}, {"vocab_size", 64}, {"hidden_size", 16},
      {"num_hidden_layers", 5},
      {"layer_types", {"linear_attention", "linear_attention", o.layer_label, "linear_attention",
                       o.layer_label}},
      {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 8},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0},
                           {"partial_rotary_factor", 0.5}, {"mrope_section", {1, 1, 0}}}},
      {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 4}, {"linear_value_head_dim", 4},
      {"linear_num_key_heads", 1}, {"linear_num_value_heads", 2},
      {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 8},
      {"shared_expert_intermediate_size", 8}, {"norm_topk_prob", true},
      {"hc_count", o.hc}, {"hc_lowrank", 4},
      {"ple_layer_ids", {4, 1}}, {"ple_embed_dim", 8}, {"ple_conv_kernel_size", 4},
      {"ngram_size", 3}, {"heads_per_ngram", 2}, {"ngram_vocab_size_base", 20},
      {"make_ngram_vocab_size_divisible_by", 12}, {"seed", 99}, {"split_ngram_parts", 12},
      {"indexer_n_heads", 4}, {"indexer_kv_heads", 1}, {"indexer_head_dim", 8},
      {"indexer_budget", o.budget}, {"indexer_compress_ratio", o.ratio},
      {"output_gate_type", "sigmoid"}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 4096}, {"eos_token_id", o.eos}, {"bos_token_id", 1},
      {"tie_word_embeddings", false}};
  if (o.mtp) t["mtp_num_hidden_layers"] = 1;
  return t;
}

class TinyWriter {
 public:
  explicit TinyWriter(uint64_t seed) : rng_(seed) {}

  void normal(const std::string& name, const Shape& shape, float std) {
    add(name, shape, [&] { return std::normal_distribution<float>(0.f, std)(rng_); });
  }
  void uniform(const std::string& name, const Shape& shape, float lo, float hi) {
    add(name, shape, [&] { return std::uniform_real_distribution<float>(lo, hi)(rng_); });
  }
  void i64(const std::string& name, const std::vector<int64_t>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::kI64);
    for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
    tensors_.emplace_back(name, t);
  }
  std::vector<std::pair<std::string, Tensor>>& tensors() { return tensors_; }

 private:
  template <class F>
  void add(const std::string& name, const Shape& shape, F draw) {
    Tensor t = Tensor::empty(shape, DType::kBF16);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(draw());
    tensors_.emplace_back(name, t);
  }
  std::mt19937_64 rng_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

// Writes DIR/config.json and DIR/model-*.safetensors; returns DIR.
inline std::string write_tiny_qwen4_exp(const std::string& dir, const TinyQwen4Exp& o) {
  std::filesystem::create_directories(dir);
  nlohmann::json text = tiny_qwen4_exp_text_config(o);
  nlohmann::json config = text;
  if (o.multimodal) {
    config = {{"model_type", "qwen4_exp"}, {"text_config", text}, {"tie_word_embeddings", false},
              {"vision_config", {{"model_type", "qwen4_exp_vision"}, {"depth", 1}}}};
  }
  const Qwen4ExpConfig c = parse_qwen4_exp_config(config, dir + "/config.json");
  {
    std::ofstream f(dir + "/config.json");
    f << config.dump(2);
  }
  const std::string p = o.multimodal ? "model.language_model." : "model.";
  const int64_t h = c.hidden, s = c.hc, wide = s * h, r = c.hc_rank;
  TinyWriter w(o.seed);
  auto fan = [](int64_t n) { return 1.f / std::sqrt(float(n)); };
  w.normal(p + "embed_tokens.weight", {c.vocab, h}, 1.f);
  w.normal("lm_head.weight", {c.vocab, h}, 3.f * fan(h));
  auto hc = [&](const std::string& q, bool inject) {
    w.uniform(q + "hc_norm.weight", {wide}, -0.5f, 0.5f);
    w.normal(q + "input_mix_weight_down.weight", {r, wide}, fan(wide));
    w.normal(q + "input_mix_weight_up.weight", {wide, r}, fan(r));
    if (inject) w.normal(q + "block_inject_weight.weight", {s, wide}, fan(wide));
  };
  hc(p + "hyper_connection_mixer.", false);
  // A decoder layer's tensors under l but its n-gram embedding.
  auto layer = [&](const std::string& l, bool linear) {
    hc(l + "attn_hyper_connection.", true);
    hc(l + "mlp_hyper_connection.", true);
    if (linear) {
      const std::string g = l + "linear_attn.";
      const int64_t conv_dim = 2 * c.lin_k_heads * c.lin_k_dim + c.lin_v_heads * c.lin_v_dim;
      const int64_t vd = c.lin_v_heads * c.lin_v_dim;
      w.normal(g + "in_proj_qkv.weight", {conv_dim, h}, fan(h));
      w.normal(g + "in_proj_z.weight", {vd, h}, fan(h));
      w.normal(g + "in_proj_b.weight", {c.lin_v_heads, h}, fan(h));
      w.normal(g + "in_proj_a.weight", {c.lin_v_heads, h}, fan(h));
      w.normal(g + "conv1d.weight", {conv_dim, 1, c.conv_kernel}, 0.5f);
      w.uniform(g + "A_log", {c.lin_v_heads}, -2.f, 1.3f);
      w.normal(g + "dt_bias", {c.lin_v_heads}, 1.f);
      w.uniform(g + "norm.weight", {c.lin_v_dim}, 0.5f, 1.5f);
      w.normal(g + "out_proj.weight", {h, vd}, fan(vd));
    } else {
      const std::string a = l + "self_attn.";
      const int64_t d = c.head_dim, di = c.index_head_dim;
      w.normal(a + "q_proj.weight", {c.heads * d * 2, h}, fan(h));
      w.normal(a + "k_proj.weight", {c.kv_heads * d, h}, fan(h));
      w.normal(a + "v_proj.weight", {c.kv_heads * d, h}, fan(h));
      w.normal(a + "o_proj.weight", {h, c.heads * d}, fan(c.heads * d));
      w.uniform(a + "q_norm.weight", {d}, -0.5f, 0.5f);
      w.uniform(a + "k_norm.weight", {d}, -0.5f, 0.5f);
      w.normal(a + "indexer.index_qk_proj.weight", {(c.index_heads + 1) * di, h}, fan(h));
      w.uniform(a + "indexer.q_layernorm.weight", {di}, -0.5f, 0.5f);
      w.uniform(a + "indexer.k_layernorm.weight", {di}, -0.5f, 0.5f);
    }
    const std::string m = l + "mlp.";
    w.normal(m + "gate.weight", {c.experts, h}, 2.f * fan(h));
    if (o.fused_experts) {
      w.normal(m + "experts.gate_up_proj", {c.experts, 2 * c.moe_inter, h}, fan(h));
      w.normal(m + "experts.down_proj", {c.experts, h, c.moe_inter}, fan(c.moe_inter));
    } else {
      for (int64_t e = 0; e < c.experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        w.normal(x + "gate_proj.weight", {c.moe_inter, h}, fan(h));
        w.normal(x + "up_proj.weight", {c.moe_inter, h}, fan(h));
        w.normal(x + "down_proj.weight", {h, c.moe_inter}, fan(c.moe_inter));
      }
    }
    w.normal(m + "shared_expert.gate_proj.weight", {c.shared_inter, h}, fan(h));
    w.normal(m + "shared_expert.up_proj.weight", {c.shared_inter, h}, fan(h));
    w.normal(m + "shared_expert.down_proj.weight", {h, c.shared_inter}, fan(c.shared_inter));
    w.normal(m + "shared_expert_gate.weight", {1, h}, fan(h));
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    layer(l, c.linear[i]);
    const int rank = c.ple_rank(i);
    if (rank >= 0) {
      const std::string q = l + "ple.";
      const NgramTableLayout t = ngram_table_layout(c, rank);
      const int64_t per = t.padded_rows / c.split_ngram_parts;
      for (int64_t k = 0; k < c.split_ngram_parts; ++k) {
        w.normal(q + "ple_embedding.ngram_embedding.shard_" + std::to_string(k) + ".weight",
                 {per, t.dim}, 1.f);
      }
      w.i64(q + "ple_embedding.layer_multipliers", t.hash.multipliers);
      w.i64(q + "ple_embedding.ngram_heads_vocab_sizes", t.hash.head_vocab_sizes);
      w.i64(q + "ple_embedding.ngram_heads_offsets", t.hash.head_offsets);
      w.normal(q + "key_proj.weight", {wide, c.ple_embed_dim}, fan(c.ple_embed_dim));
      w.normal(q + "value_proj.weight", {h, c.ple_embed_dim}, fan(c.ple_embed_dim));
      w.uniform(q + "norm_key.weight", {wide}, -0.5f, 0.5f);
      w.uniform(q + "norm_query.weight", {wide}, -0.5f, 0.5f);
      w.uniform(q + "norm_conv.weight", {wide}, -0.5f, 0.5f);
      w.normal(q + "conv1d.weight", {wide, 1, c.ple_conv_kernel}, 0.5f);
    }
  }
  if (o.mtp) {  // vLLM's Qwen4-Exp MTP names
    w.uniform("mtp.pre_fc_norm_embedding.weight", {h}, -0.5f, 0.5f);
    w.uniform("mtp.pre_fc_norm_hidden.weight", {wide}, -0.5f, 0.5f);
    w.normal("mtp.fc_embedding.weight", {h, h}, fan(h));
    w.normal("mtp.fc_hidden.weight", {h, h}, fan(h));
    hc("mtp.hyper_connection_mixer.", false);
    layer("mtp.layers.0.", false);
  }
  if (o.extra_ignored) {
    w.normal("mtp.fc.weight", {h, 2 * h}, 1.f);
    w.normal(p + "hyper_connection_mixer.block_inject_weight.weight", {s, wide}, 1.f);
  }
  // Spread over files in sorted-name order, as HF's sharded save does.
  std::map<std::string, Tensor> sorted(w.tensors().begin(), w.tensors().end());
  std::vector<std::vector<std::pair<std::string, Tensor>>> files(o.files);
  size_t i = 0;
  for (auto& kv : sorted) files[i++ * o.files / sorted.size()].push_back(kv);
  for (int f = 0; f < o.files; ++f) {
    write_safetensors(dir + "/model-0000" + std::to_string(f + 1) + ".safetensors", files[f]);
  }
  return dir;
}

}  // namespace strata::testing
