// The FP8 block-scale quantisation of a Hugging Face checkpoint, as config.json's
// `quantization_config` describes it (transformers' FineGrainedFP8Config, the layout of the
// published Qwen3.5 / Qwen3-Next -FP8 checkpoints):
//   {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//    "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", ...]}
// Each quantised linear stores `<module>.weight` F8_E4M3 [out, in] and
// `<module>.weight_scale_inv` F32 [ceil(out / 128), ceil(in / 128)].
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// The only block size the loaders (and the FP8 kernels of the next phase) take.
inline constexpr int kFp8Block = 128;

struct Fp8BlockQuant {
  bool enabled = false;  // false: no quantization_config, every weight is a float dtype
  int block_rows = kFp8Block, block_cols = kFp8Block;
  // Module names (or name fragments, matched as substrings the way transformers does) whose
  // weights were left in bf16: `modules_to_not_convert`, or vLLM's `ignored_layers`.
  std::vector<std::string> not_converted;

  // True when the weight `tensor_name` (e.g. "model.layers.0.linear_attn.in_proj_a.weight")
  // belongs to a module listed as not converted.
  bool listed_not_converted(const std::string& tensor_name) const;
};

// `quantization_config` of config.json `root` (at the top level, or in text_config for the
// multimodal wrappers); absent gives a disabled one. An unknown quant_method, a fmt other than
// e4m3, an activation_scheme other than dynamic or a block size other than [128, 128] throws
// Error naming `origin` and the field.
Fp8BlockQuant parse_fp8_block_quant(const nlohmann::json& root, const std::string& origin);

}  // namespace strata
