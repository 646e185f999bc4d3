// The Qwen4-Exp weights, read from a checkpoint by their published names (HF 5.17
// conversion_mapping "qwen4_exp_text": the qwen3_5_moe rules plus the n-gram table shards
// `...ple.ple_embedding.ngram_embedding.shard_N.weight`, concatenated in numeric order of N).
#pragma once

#include <string>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/models/qwen4_exp_config.h"
#include "strata/models/weights.h"

namespace strata {

// One gated-residual read gate (and its write weights); `inject` is undefined for the exit mixer.
struct HyperConnectionWeights {
  Tensor norm;    // [S*H], zero-centred, one weight per feature
  Tensor down;    // [r, S*H]
  Tensor up;      // [S*H, r]
  Tensor inject;  // [S, S*H]
};

// A tensor-parallel rank holds its share of the GDN, attention, indexer and expert matrices below
// (load_qwen4_exp_weights); shapes then follow qwen4_exp_rank_config.
struct GdnWeights {
  Tensor in_qkv, in_z, in_b, in_a;
  Tensor conv;  // [conv_dim, K]
  Tensor a_log, dt_bias;
  Tensor norm;  // [Dv], plain weight (no (1 + w))
  Tensor out_proj;
};

struct QsaWeights {
  Tensor q_proj, k_proj, v_proj, o_proj, q_norm, k_norm;
  Tensor index_qk;                    // [(Hi + 1) * d, H]: Hi query heads, then the key
  Tensor index_q_norm, index_k_norm;  // [d], zero-centred
};

struct MoeWeights {
  Tensor router;                   // [E, H]
  Tensor experts_gate_up;          // [E, 2I, H], gate rows first
  Tensor experts_down;             // [E, H, I]
  Tensor shared_gate_up;           // [2Is, H]
  Tensor shared_down;              // [H, Is]
  Tensor shared_gate;              // [1, H]
};

struct PleWeights {
  int rank = -1;  // position of the layer among the PLE layers
  NgramTableLayout layout;
  // The n-gram table as stored: zero-copy host views of the mmapped shards, in numeric order.
  std::vector<Tensor> table;
  Tensor key_proj;    // [S*H, E]
  Tensor value_proj;  // [H, E]
  Tensor norm_key, norm_query, norm_conv;  // [S*H], zero-centred, grouped by H
  // The depthwise conv of kernel K and dilation ngram_size as an undilated causal kernel of
  // (K - 1) * ngram_size + 1 taps with zeros between the real ones: [S*H, (K-1)*n + 1].
  Tensor conv;
};

struct Qwen4ExpLayerWeights {
  bool linear = false;
  bool has_ple = false;
  PleWeights ple;
  HyperConnectionWeights attn_hc, mlp_hc;
  GdnWeights gdn;
  QsaWeights qsa;
  MoeWeights moe;
};

// The multi-token-prediction head (mtp.*, as vLLM's Qwen4-Exp MTP): fc_embedding over the
// zero-centred-normed token embedding, added to fc_hidden over each stream of the target's
// pre-mixer state normed flat ([S*H], zero-centred); QSA + MoE decoder layers (no n-gram
// embedding); its own exit mixer into the target's lm_head.
struct Qwen4ExpMtpWeights {
  Tensor fc_embedding, fc_hidden;  // [H, H]
  Tensor norm_embedding;           // [H], zero-centred
  Tensor norm_hidden;              // [S*H], zero-centred, one RMS over the whole row
  HyperConnectionWeights mixer;
  std::vector<Qwen4ExpLayerWeights> layers;
};

struct Qwen4ExpWeights {
  Tensor embed, lm_head;
  HyperConnectionWeights mixer;  // hyper_connection_mixer: the exit read gate, no inject
  std::vector<Qwen4ExpLayerWeights> layers;
  size_t host_table_bytes = 0;  // n-gram tables, left in the mmapped files
};

// Loads every weight of the language model (names under w.prefix()); errors name the tensor.
// `c` is the checkpoint's (full) config. A tensor-parallel rank (`par`) converts only its shard
// (qwen4_exp_rank_config says what divides): its GDN key/value heads, attention query and
// key-value heads, indexer query heads, experts or expert columns, shared-expert columns and
// lm_head vocabulary rows; the rest (embeddings, hyper-connections, PLE layers with their host
// n-gram tables, exit mixer, router, norms) is replicated.
Qwen4ExpWeights load_qwen4_exp_weights(WeightLoader& w, const Qwen4ExpConfig& c, const dist::Parallel& par = {});

// The head's weights under w.prefix() ("mtp." or "model.mtp."): c.mtp_layers QSA layers named as
// the trunk's (layers.J.self_attn.*, layers.J.mlp.*, the two hyper-connections); without tensor
// parallelism.
Qwen4ExpMtpWeights load_qwen4_exp_mtp(WeightLoader& w, const Qwen4ExpConfig& c);

// The n-gram table under `prefix` (a full name ending in "ngram_embedding."): the shards
// PREFIX + "shard_N.weight", N = 0, 1, ... without gaps, in numeric order (shard_10 after
// shard_9), or a single PREFIX + "weight". Each is [rows_i, dim] F32/BF16/F16, the rows summing
// to `rows`. The tensors are zero-copy views of the mapped files (under --load-format dummy: one
// random BF16 table [rows, dim] in host memory).
std::vector<Tensor> load_ngram_table(WeightLoader& w, const std::string& prefix, int64_t rows,
                                     int64_t dim);

}  // namespace strata
