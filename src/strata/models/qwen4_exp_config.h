// The Qwen4-Exp (Qwen3.8-Flash-Next) configuration as HF's Qwen4ExpTextConfig reads it, and the
// per-layer n-gram (PLE) hashing constants derived from it exactly as HF derives them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/dist/communicator.h"
#include "strata/ops/ops.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata {

struct Qwen4ExpConfig {
  std::string model_type;
  int64_t vocab = 0, hidden = 0, layers = 0;
  double eps = 1e-6;
  int64_t max_pos = 0;
  bool tie_embeddings = false;
  std::vector<int64_t> eos;  // as written (an int or a list)
  int64_t bos = -1;
  // Layer kinds: true for "linear_attention" (GDN), false for QSA ("full_attention" in published
  // checkpoints, "qwen_sparse_attention" after HF's rename).
  std::vector<bool> linear;

  // Gated DeltaNet
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
  ops::GateActivation gdn_gate = ops::GateActivation::kSilu;  // output_gate_type or hidden_act

  // QSA attention and its block indexer
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  ops::RopeSpec rope;
  int64_t index_heads = 0, index_head_dim = 0, index_budget = 0, index_ratio = 0;
  int64_t index_top_blocks() const { return index_budget / index_ratio; }

  // MoE (every layer): softmax router, SwiGLU experts, sigmoid-gated shared expert
  int64_t experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0;
  bool norm_topk = true;

  // Hyper-connections
  int64_t hc = 0, hc_rank = 0;

  // Per-layer n-gram embeddings
  std::vector<int64_t> ple_layer_ids;  // one-indexed, sorted, unique
  int64_t ple_embed_dim = 0, ple_conv_kernel = 0, ngram_size = 0, heads_per_ngram = 0;
  int64_t ngram_vocab_base = 0, ngram_vocab_divisor = 0, seed = 0, split_ngram_parts = 0;

  int64_t ngram_heads() const { return (ngram_size - 1) * heads_per_ngram; }
  // The rank of layer `layer` (zero-indexed) among the PLE layers, or -1 without PLE.
  int ple_rank(int64_t layer) const;
  // HF: eos_token_id[0] when a list.
  int64_t ple_eos() const { return eos.empty() ? -1 : eos[0]; }
  int64_t mtp_layers = 0;  // mtp_num_hidden_layers: the multi-token-prediction head's decoder layers
};

// Parses config.json (the top level or its text_config) and checks what HF's
// validate_architecture checks; errors name the file and field.
Qwen4ExpConfig parse_qwen4_exp_config(const nlohmann::json& root, const std::string& origin);

// A tensor-parallel rank's view of `full`: the GDN key and value heads, attention and indexer
// query heads, and shared-expert columns it holds; key-value heads split, or one (replicated)
// when fewer than the ranks; every expert's intermediate columns split (moe_inter), or with
// expert parallelism whole experts (experts stays the router's full count). vocab, hidden and
// the PLE fields stay whole. A count that does not divide is refused naming its field of
// `origin`.
Qwen4ExpConfig qwen4_exp_rank_config(const Qwen4ExpConfig& full, const dist::Parallel& par,
                                     const std::string& origin);

// ---- PLE hashing constants (HF modeling_qwen4_exp.py: _splitmix64, _build_layer_multipliers,
// _find_nth_prime_after and Qwen4ExpTextNGramEmbedding.__init__) ----

uint64_t splitmix64(uint64_t value);
// The `ngram_size` odd hash multipliers of PLE layer rank `ple_rank`.
std::vector<int64_t> ple_layer_multipliers(int64_t vocab, int64_t ngram_size, int64_t ple_rank,
                                           int64_t seed);
// The count-th prime above `start` (count >= 1).
int64_t nth_prime_after(int64_t start, int64_t count);

struct NgramTableLayout {
  ops::NgramHashSpec hash;
  int64_t total_rows = 0;   // sum of the head vocabularies
  int64_t padded_rows = 0;  // rounded up to a multiple of make_ngram_vocab_size_divisible_by
  int64_t dim = 0;          // ple_embed_dim / heads
};
// The hash spec and table geometry of PLE layer rank `ple_rank`.
NgramTableLayout ngram_table_layout(const Qwen4ExpConfig& c, int ple_rank);

}  // namespace strata
