// A quantised copy of a Qwen3.5-family checkpoint folder (`strata quantize`), in the layout the
// published quantised checkpoints have, which strata loads (io/quant_config.h, models/weights.cpp):
//   fp8:   Qwen's -FP8 layout: F8_E4M3 `<module>.weight` and F32 `<module>.weight_scale_inv`,
//          128 x 128 blocks; config.json quantization_config {quant_method fp8, fmt e4m3,
//          weight_block_size [128, 128], activation_scheme dynamic, modules_to_not_convert}.
//   nvfp4: NVIDIA ModelOpt's layout: U8 `<module>.weight` (e2m1 pairs), F8_E4M3
//          `<module>.weight_scale` (16 elements a scale) and F32 `<module>.weight_scale_2`;
//          quantization_config {quant_method modelopt, quant_algo NVFP4, group_size 16, ignore}.
//          No `input_scale` (there is no activation calibration; strata's loader does not need it).
//   mxfp4: llm-compressor's compressed-tensors MXFP4: U8 `<module>.weight_packed` (e2m1 pairs)
//          and U8 `<module>.weight_scale` (UE8M0 exponents, 32 elements a scale; the OCP MX
//          recipe, io/quantise.h); quantization_config {quant_method compressed-tensors, format
//          mxfp4-pack-quantized, config_groups {group_0: {targets [Linear], weights {num_bits 4,
//          type float, strategy group, group_size 32}}}, ignore}.
// Quantised: the linear projections (a module named *proj*: q/k/v/o_proj, GDN's in_proj_qkv,
// in_proj_z (Qwen3-Next: in_proj_qkvz) and out_proj, shared and routed experts' gate/up/down_proj,
// in the MTP layer too), as the published checkpoints do. Left in bf16, as there: the
// embeddings (and a tied lm_head), GDN's in_proj_a / in_proj_b (in_proj_ba), the routers (mlp.gate), the
// shared-expert gate, mtp.fc, norms, conv1d, A_log and dt_bias; every 2-D one of those is listed
// as not converted. Fused experts (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj` [E, H, I])
// are written one tensor per expert (`mlp.experts.<e>.{gate,up,down}_proj.weight`), as the
// published checkpoints store them. NVFP4 (MXFP4) leaves (and lists) a weight whose rows are not
// a multiple of 16 (32) elements in bf16.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

enum class CheckpointQuant { kFp8Block, kNvfp4, kMxfp4 };
// "fp8" | "nvfp4" | "mxfp4"; an Error naming `flag` else.
CheckpointQuant parse_checkpoint_quant(const std::string& name, const std::string& flag);

// Whether the recipe above quantises a 2-D weight of this name (not fused experts).
bool quantised_by_recipe(const std::string& tensor_name);

struct QuantiseSummary {
  int64_t quantised = 0, kept = 0;  // tensors written quantised (each expert's own) / as stored
  size_t bytes_in = 0, bytes_out = 0;
};

// Reads the checkpoint folder `src` (a qwen3_5 / qwen3_next family model_type, not quantised
// already) and writes `dst` (created; must not hold a config.json): model.safetensors,
// config.json with the quantization_config, and the tokenizer and generation files copied.
// Errors name the folder, file or tensor.
QuantiseSummary quantise_checkpoint(const std::string& src, const std::string& dst, CheckpointQuant format);

}  // namespace strata
