// The Qwen3.5 family (qwen3_next, qwen3_5, qwen3_5_moe).
#pragma once

#include <memory>

#include "strata/io/checkpoint.h"
#include "strata/models/model.h"

namespace strata {

std::unique_ptr<Model> load_qwen3_5(const Checkpoint& ckpt, Device device);

}  // namespace strata
