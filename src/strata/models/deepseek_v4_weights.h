// DeepSeek-V4 weights: read under the published names (embed.weight, head.weight,
// layers.N.attn.wq_a.weight, layers.N.ffn.experts.E.w1.weight, hc_head_fn, ...), under the names
// transformers' save_pretrained writes (model.embed_tokens.weight, head.weight,
// model.layers.N.attn.wq_a.weight, model.layers.N.attn.norm.weight for attn.kv_norm, ...; the
// list is in deepseek_v4_weights.cpp) or under HF's module names (model.embed_tokens.weight,
// model.layers.N.self_attn.q_a_proj.weight, model.layers.N.mlp.experts.gate_up_proj, ...),
// detected from the names present, in bf16/f16/f32 or in the published quantised
// formats (FP8 e4m3 with 128x128 block scales named .scale or .weight_scale_inv; MXFP4 experts
// packed in I8/U8 with ue8m0 .scale), dequantised to float32. mtp.* tensors are not ours.
#pragma once

#include <string>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/io/checkpoint.h"
#include "strata/models/deepseek_v4_config.h"
#include "strata/models/weights.h"

namespace strata {

struct Dsv4Compressor {
  ops::CompressorSpec spec;
  Tensor kv, gate;  // [width, hidden]
  Tensor ape;       // [ratio, width]
  Tensor norm;      // [head_dim]
};

struct Dsv4Layer {
  Dsv4Attention attention = Dsv4Attention::kSliding;
  Dsv4Mlp mlp = Dsv4Mlp::kLearned;
  Tensor attn_norm, ffn_norm;                      // [hidden]
  Tensor hc_attn_fn, hc_attn_base, hc_attn_scale;  // [(2 + S) S, S hidden], [(2 + S) S], [3]
  Tensor hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  // attention
  Tensor wq_a, q_norm, wq_b;  // [q_lora, hidden], [q_lora], [heads * head_dim, q_lora]
  Tensor wkv, kv_norm;        // [head_dim, hidden], [head_dim]
  Tensor wo_a, wo_b;          // [groups * o_lora, heads * head_dim / groups], [hidden, groups * o_lora]
  Tensor sinks;               // [heads]
  Dsv4Compressor compressor;  // ratio-4 / ratio-128 layers
  Dsv4Compressor indexer;     // ratio-4 layers: the indexer's own compressor
  Tensor index_wq_b;          // [index_heads * index_head_dim, q_lora] (this rank's heads)
  Tensor index_weights;       // [index_heads, hidden]
  // mixture of experts
  Tensor router, router_bias;  // [experts, hidden], [experts] (learned layers)
  Tensor tid2eid;              // I32 [vocab, top_k] (hash layers)
  // A tensor-parallel rank's experts, or its intermediate columns of every expert:
  Tensor experts_gate_up;      // [experts, 2 * moe_inter, hidden]  (w1; w3)
  Tensor experts_down;         // [experts, hidden, moe_inter]      (w2)
  Tensor shared_gate_up;       // [2 * shared_inter, hidden]
  Tensor shared_down;          // [hidden, shared_inter]
};

// The names a folder's tensors go by.
enum class Dsv4Names {
  kPublished,       // DeepSeek's release
  kSavePretrained,  // what transformers' DeepseekV4ForCausalLM.save_pretrained writes
  kHfModules,       // HF's module names (its state_dict)
};

// A multi-token-prediction block (mtp.J.*, as DeepSeek's MTPBlock and vLLM's DeepSeek-V4 MTP):
// e_proj(enorm(embed(token))) plus h_proj(hnorm(stream)) for each residual stream of the
// target's pre-head state, one sliding-window decoder block, its own hyper-connection head and
// final norm; the target's embedding and lm_head.
struct Dsv4Mtp {
  Tensor e_proj, h_proj;                           // [hidden, hidden]
  Tensor enorm, hnorm, norm;                       // [hidden]
  Tensor hc_head_fn, hc_head_base, hc_head_scale;  // [S, S hidden], [S], [1]
  Dsv4Layer block;
};

struct Dsv4Weights {
  Tensor embed, head, norm;             // [vocab, hidden], [vocab (this rank's), hidden], [hidden]
  Tensor hc_head_fn, hc_head_base, hc_head_scale;  // [S, S hidden], [S], [1]
  std::vector<Dsv4Layer> layers;
  Dsv4Names names = Dsv4Names::kPublished;
};

// Reads every tensor the config calls for (shapes checked). HF's module names when the folder has
// model.layers.0.input_layernorm.weight; else each tensor under its published name or, failing
// that, its save_pretrained name (an error names both when neither is there). Unexpected tensors
// other than mtp.* / model.mtp.* are an error naming the first of them. A tensor-parallel rank (`par`) converts only its shard
// (HF's ep plan): its experts (expert_parallel) or every expert's intermediate columns, its
// indexer heads (index_wq_b, index_weights) and its vocabulary rows of the head; the rest is
// replicated. Other ranks' tensors are checked and marked read.
Dsv4Weights load_deepseek_v4_weights(const Checkpoint& ckpt, const DeepseekV4Config& c,
                                     WeightLoader& loader, const dist::Parallel& par = {});
// The num_nextn_predict_layers multi-token-prediction blocks under their published names (mtp.J.*;
// FP8 and MXFP4 as for the layers), with `loader` a fresh one over the same folder; an Error
// naming the field when the config has none, naming the tensor when one is missing, and naming
// any mtp.* tensor left unread. Without tensor parallelism.
std::vector<Dsv4Mtp> load_deepseek_v4_mtp(const Checkpoint& ckpt, const DeepseekV4Config& c, WeightLoader& loader);

}  // namespace strata
