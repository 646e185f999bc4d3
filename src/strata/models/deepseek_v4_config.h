// DeepSeek-V4 config.json, read in both layouts that exist:
//   published (deepseek-ai): compress_ratios (0 / 4 / 128 per layer, a trailing MTP entry
//     allowed), num_hash_layers, qk_rope_head_dim, rope_scaling {type: yarn, ...};
//   HF transformers 5.17: layer_types, mlp_layer_types, compress_rates, partial_rotary_factor,
//     rope_parameters {main: {...}, compress: {...}}.
// Absent fields take HF's DeepseekV4Config defaults, including HF's V4-Pro layer layout when
// neither layer_types nor compress_ratios is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/models/model.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata {

enum class Dsv4Attention { kSliding, kCompressedSparse, kHeavilyCompressed };
enum class Dsv4Mlp { kHash, kLearned };

std::string_view dsv4_attention_name(Dsv4Attention a);  // HF's layer_types spelling

struct DeepseekV4Config {
  std::string origin;  // DIR/config.json, for messages
  int64_t vocab = 0, hidden = 0, layers = 0;
  int64_t heads = 0, head_dim = 0, q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int64_t rope_dim = 0;  // trailing rotary channels of each head (qk_rope_head_dim)
  int64_t experts = 0, top_k = 0, moe_inter = 0, shared_experts = 1;
  double routed_scaling = 1.5, swiglu_limit = 10.0, rms_eps = 1e-6;
  int64_t window = 128;
  int64_t csa_ratio = 4, hca_ratio = 128;
  int64_t index_heads = 64, index_head_dim = 128, index_topk = 512;
  int64_t hc_mult = 4, hc_iters = 20;
  double hc_eps = 1e-6;
  std::vector<Dsv4Attention> attention;  // per layer
  std::vector<Dsv4Mlp> mlp;              // per layer
  ops::TailRope rope_main, rope_compress;
  int64_t max_pos = 0;
  std::vector<int64_t> eos;
  int64_t bos = -1;
  bool tie_embeddings = false;
  int fp8_block_rows = 128, fp8_block_cols = 128;  // quantization_config.weight_block_size
  int64_t mtp_layers = 0;  // num_nextn_predict_layers: the multi-token-prediction blocks (mtp.J.*)

  int64_t ratio_of(int64_t layer) const {
    return attention[size_t(layer)] == Dsv4Attention::kCompressedSparse ? csa_ratio
           : attention[size_t(layer)] == Dsv4Attention::kHeavilyCompressed ? hca_ratio : 0;
  }
};

// Parses and validates; every error names the file and the field.
DeepseekV4Config parse_deepseek_v4_config(const nlohmann::json& root, const std::string& origin);

// The caches of each layer (models/model.h contract), float32 on the CPU:
//   every layer  paged "kv"             [head_dim]        1 token per entry (the window reads
//                                                           the last sliding_window positions)
//   ratio 4      paged "compressed_kv"  [head_dim]        4 tokens per entry
//                paged "index_k"        [index_head_dim]  4 tokens per entry
//                slot  "compressor_kv" / "compressor_gate" [8, 2 * head_dim]   ring of 2 windows
//                slot  "indexer_kv" / "indexer_gate"       [8, 2 * index_head_dim]
//   ratio 128    paged "compressed_kv"  [head_dim]        128 tokens per entry
//                slot  "compressor_kv" / "compressor_gate" [128, head_dim]    ring of 1 window
CacheSpec deepseek_v4_cache_spec(const DeepseekV4Config& c);

}  // namespace strata
