// The weight quantisation of a Hugging Face checkpoint, as its config describes it. Two layouts:
// - FP8 block scale: config.json's `quantization_config` (transformers' FineGrainedFP8Config, the
//   layout of the published Qwen3.5 / Qwen3-Next -FP8 checkpoints):
//     {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//      "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", ...]}
//   Each quantised linear stores `<module>.weight` F8_E4M3 [out, in] and
//   `<module>.weight_scale_inv` F32 [ceil(out / 128), ceil(in / 128)].
// - NVFP4 (NVIDIA ModelOpt): config.json's `quantization_config`
//     {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": [...]}
//   or, when config.json has none, hf_quant_config.json's
//     {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": [...]}}
//   Each quantised linear stores `<module>.weight` U8 [out, in / 2] (e2m1 pairs, low nibble
//   first), `<module>.weight_scale` F8_E4M3 [out, in / 16], `<module>.weight_scale_2` F32 (one
//   value) and `<module>.input_scale` F32 (the activations' scale of W4A4 kernels, not read).
// - MXFP4 (llm-compressor's compressed-tensors, what vLLM loads as CompressedTensorsW4A16Mxfp4):
//     {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
//      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4,
//        "type": "float", "strategy": "group", "group_size": 32, ...}}}, "ignore": [...]}
//   Each quantised linear stores `<module>.weight_packed` U8 [out, in / 2] (e2m1 pairs, low
//   nibble first) and `<module>.weight_scale` U8 (or F8_E8M0) [out, in / 32], UE8M0 exponents.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

class Checkpoint;

// The only FP8 block size the loaders (and the FP8 kernels of the next phase) take.
inline constexpr int kFp8Block = 128;
// MXFP4's group: elements a scale.
inline constexpr int kMxfp4GroupSize = 32;

struct WeightQuant {
  enum class Method { kNone, kFp8Block, kNvfp4, kMxfp4 };
  Method method = Method::kNone;  // kNone: every weight is a float dtype
  int block_rows = kFp8Block, block_cols = kFp8Block;
  // Modules left in bf16: `modules_to_not_convert`, vLLM's `ignored_layers`, ModelOpt's `ignore`
  // or `exclude_modules`, compressed-tensors' `ignore`. A pattern with '*' matches a whole module
  // name, the tensor's name without its last component ('*': any run of characters, e.g.
  // "model.layers.0.linear_attn*"), as ModelOpt's fnmatch does; one starting "re:" is a regular
  // expression over the whole module name (compressed-tensors'); any other matches as a
  // substring, the way transformers does.
  std::vector<std::string> not_converted;
  std::string origin;  // the file the description came from, for errors

  bool enabled() const { return method != Method::kNone; }
  // True when the weight `tensor_name` (e.g. "model.layers.0.linear_attn.in_proj_a.weight")
  // belongs to a module listed as not converted.
  bool listed_not_converted(const std::string& tensor_name) const;
};

// `quantization_config` of config.json `root` (at the top level, or in text_config for the
// multimodal wrappers); `hf_quant`, hf_quant_config.json when there is one (null otherwise), is
// read only when config.json has none. Neither gives kNone. An unknown quant_method or
// quant_algo, an FP8 fmt other than e4m3, an activation_scheme other than dynamic, a block size
// other than [128, 128], an NVFP4 group other than 16 or a quantised KV cache throws Error naming
// `origin` (or `hf_origin`) and the field.
WeightQuant parse_weight_quant(const nlohmann::json& root, const std::string& origin,
                               const nlohmann::json& hf_quant = nullptr,
                               const std::string& hf_origin = "hf_quant_config.json");
// parse_weight_quant of a checkpoint folder: its config.json and hf_quant_config.json.
WeightQuant weight_quant_of(const Checkpoint& ckpt);

}  // namespace strata
