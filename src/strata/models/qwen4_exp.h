// The Qwen4-Exp family (Qwen3.8-Flash-Next): model_type "qwen4_exp" (the multimodal wrapper; its
// text part) and "qwen4_exp_text".
#pragma once

#include <memory>

#include "strata/io/checkpoint.h"
#include "strata/models/model.h"

namespace strata {

// With parallel.size > 1 (CPU only), rank parallel.rank's shard: GDN, attention and indexer
// heads, the routed experts (or their intermediate columns), the shared expert's columns and
// lm_head's vocabulary split parallel.size ways; hyper-connections, PLE layers and the exit mixer
// replicated. The forward all-reduces after out_proj, o_proj, the indexer scores and the MoE, and
// all-gathers the logits.
// `ssm_dtype`: the Gated DeltaNet state slots' dtype (LoadOptions::ssm_state_dtype). `mtp`:
// load the multi-token-prediction head (mtp.*) too (load_qwen4_exp_mtp).
std::unique_ptr<Model> load_qwen4_exp(const Checkpoint& ckpt, Device device, const dist::Parallel& parallel = {},
                                      DType ssm_dtype = DType::kF32, bool mtp = false);

}  // namespace strata
