// The Qwen3.5 family (qwen3_next, qwen3_5, qwen3_5_moe).
#pragma once

#include <memory>

#include "strata/io/checkpoint.h"
#include "strata/models/model.h"

namespace strata {

// With parallel.size > 1, rank parallel.rank's shard: GDN and attention heads, MLP and shared
// expert columns, the routed experts and lm_head's vocabulary split parallel.size ways; the
// forward all-reduces after each row-parallel projection and all-gathers the logits.
// `mtp`: load the multi-token-prediction head (mtp.*) too. `ssm_dtype`: the Gated DeltaNet
// state slots' dtype (LoadOptions::ssm_state_dtype). `kv`: the attention layers' KV cache
// (LoadOptions::kv_cache_dtype), the MTP head's too.
std::unique_ptr<Model> load_qwen3_5(const Checkpoint& ckpt, Device device, const dist::Parallel& parallel = {},
                                    bool mtp = false, DType ssm_dtype = DType::kF32,
                                    KvCacheDtype kv = KvCacheDtype::kAuto);

}  // namespace strata
