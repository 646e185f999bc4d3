// The Qwen4-Exp family (Qwen3.8-Flash-Next): model_type "qwen4_exp" (the multimodal wrapper; its
// text part) and "qwen4_exp_text".
#pragma once

#include <memory>

#include "strata/io/checkpoint.h"
#include "strata/models/model.h"

namespace strata {

std::unique_ptr<Model> load_qwen4_exp(const Checkpoint& ckpt, Device device);

}  // namespace strata
