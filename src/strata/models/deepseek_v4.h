// The DeepSeek-V4 family (model_type deepseek_v4).
#pragma once

#include <memory>

#include "strata/io/checkpoint.h"
#include "strata/models/model.h"

namespace strata {

// `parallel`: this rank's shard (HF's ep plan; see load_deepseek_v4_weights). `mtp`: load the
// multi-token-prediction blocks (mtp.*) too (load_deepseek_v4_mtp).
std::unique_ptr<Model> load_deepseek_v4(const Checkpoint& ckpt, Device device, const dist::Parallel& parallel = {},
                                        bool mtp = false);

}  // namespace strata
