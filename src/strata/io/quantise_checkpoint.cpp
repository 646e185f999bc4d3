#include "strata/io/quantise_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/io/checkpoint.h"
#include "strata/io/quant.h"
#include "strata/io/quantise.h"
#include "strata/io/safetensors.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

const std::set<std::string> kModelTypes = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                           "qwen3_5_moe_text"};
const char* const kCopiedFiles[] = {"tokenizer.json",          "tokenizer_config.json", "generation_config.json",
                                    "chat_template.jinja",     "chat_template.json",    "special_tokens_map.json",
                                    "preprocessor_config.json"};

// Rows [r0, r0 + rows) of expert e of fused experts [E, R, C] as F32 [rows, C].
Tensor expert_rows(const Tensor& fused32, int64_t e, int64_t r0, int64_t rows) {
  const int64_t r = fused32.dim(1);
  return fused32.reshape({fused32.dim(0) * r, fused32.dim(2)}).rows(e * r + r0, e * r + r0 + rows);
}

void append_quantised(Named& out, const std::string& name, const Tensor& w32, CheckpointQuant format) {
  if (format == CheckpointQuant::kFp8Block) {
    Fp8BlockWeight q = quantise_fp8_block(w32, 128, 128, name);
    out.emplace_back(name, std::move(q.weight));
    out.emplace_back(name + "_scale_inv", std::move(q.scale_inv));
  } else if (format == CheckpointQuant::kNvfp4) {
    Nvfp4Weight q = quantise_nvfp4(w32, name);
    out.emplace_back(name, std::move(q.packed));
    out.emplace_back(name + "_scale", std::move(q.scale));
    out.emplace_back(name + "_scale_2", std::move(q.global));
  } else {
    Mxfp4Weight q = quantise_mxfp4(w32, name);
    out.emplace_back(name + "_packed", std::move(q.packed));
    out.emplace_back(name + "_scale", std::move(q.scale));
  }
}

nlohmann::json quantization_config(CheckpointQuant format, const std::vector<std::string>& not_converted) {
  if (format == CheckpointQuant::kFp8Block) {
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}},
            {"modules_to_not_convert", not_converted}};
  }
  if (format == CheckpointQuant::kNvfp4) {
    return {{"quant_method", "modelopt"},
            {"quant_algo", "NVFP4"},
            {"group_size", kNvfp4Group},
            {"kv_cache_quant_algo", nullptr},
            {"ignore", not_converted}};
  }
  return {{"quant_method", "compressed-tensors"},
          {"format", "mxfp4-pack-quantized"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", kMxfp4Group},
                {"symmetric", true}, {"dynamic", false}}},
              {"input_activations", nullptr}}}}},
          {"ignore", not_converted}};
}

}  // namespace

CheckpointQuant parse_checkpoint_quant(const std::string& name, const std::string& flag) {
  if (name == "fp8") return CheckpointQuant::kFp8Block;
  if (name == "nvfp4") return CheckpointQuant::kNvfp4;
  if (name == "mxfp4") return CheckpointQuant::kMxfp4;
  fail(flag, ": expected fp8, nvfp4 or mxfp4, got '", name, "'");
}

bool quantised_by_recipe(const std::string& name) {
  if (!name.ends_with(".weight")) return false;
  const std::string module = name.substr(0, name.size() - 7);
  const std::string last = module.substr(module.rfind('.') + 1);  // q_proj, in_proj_qkv, out_proj, ...
  return last.find("proj") != std::string::npos && last != "in_proj_a" && last != "in_proj_b" && last != "in_proj_ba";
}

QuantiseSummary quantise_checkpoint(const std::string& src, const std::string& dst, CheckpointQuant format) {
  const Checkpoint ckpt = Checkpoint::open(src);
  nlohmann::json config = ckpt.config();
  const std::string model_type = config.value("model_type", "");
  STRATA_CHECK(kModelTypes.count(model_type), ckpt.config_path(), ": model_type '", model_type,
               "' is not of the Qwen3.5 family (qwen3_next, qwen3_5, qwen3_5_moe and their _text forms)");
  STRATA_CHECK(!config.contains("quantization_config") && !fs::exists(fs::path(src) / "hf_quant_config.json"), src,
               ": the checkpoint is quantised already");
  STRATA_CHECK(!fs::exists(fs::path(dst) / "config.json"), dst, ": holds a config.json already (give a new folder)");
  fs::create_directories(dst);

  QuantiseSummary s;
  s.bytes_in = ckpt.tensor_bytes();
  Named out;
  std::vector<std::string> not_converted = {"lm_head"};
  for (const std::string& name : ckpt.names()) {
    const Tensor t = ckpt.get(name);
    const Shape& shape = t.shape();
    const bool fused_gate_up = name.ends_with(".mlp.experts.gate_up_proj"),
               fused_down = name.ends_with(".mlp.experts.down_proj");
    const bool fits = format == CheckpointQuant::kFp8Block ||
                      shape.back() % (format == CheckpointQuant::kNvfp4 ? kNvfp4Group : kMxfp4Group) == 0;
    if ((fused_gate_up || fused_down) && shape.size() == 3 && fits) {
      const std::string base = name.substr(0, name.size() - (fused_gate_up ? 12 : 9));  // "...experts."
      const Tensor w32 = t.to_f32();
      const int64_t experts = shape[0], rows = shape[1];
      for (int64_t e = 0; e < experts; ++e) {
        const std::string p = cat(base, e, ".");
        if (fused_gate_up) {
          append_quantised(out, p + "gate_proj.weight", expert_rows(w32, e, 0, rows / 2), format);
          append_quantised(out, p + "up_proj.weight", expert_rows(w32, e, rows / 2, rows / 2), format);
          s.quantised += 2;
        } else {
          append_quantised(out, p + "down_proj.weight", expert_rows(w32, e, 0, rows), format);
          s.quantised += 1;
        }
      }
      continue;
    }
    if (shape.size() == 2 && quantised_by_recipe(name) && fits) {
      append_quantised(out, name, t.to_f32(), format);
      ++s.quantised;
      continue;
    }
    if (shape.size() == 2 && name.ends_with(".weight") && name.find("embed_tokens") == std::string::npos &&
        name != "lm_head.weight") {
      not_converted.push_back(name.substr(0, name.size() - 7));
    } else if (fused_gate_up || fused_down) {  // rows NVFP4 / MXFP4 cannot group: all the experts stay bf16
      not_converted.push_back(name.substr(0, name.rfind('.')));
    }
    out.emplace_back(name, t);
    ++s.kept;
  }
  config["quantization_config"] = quantization_config(format, not_converted);
  write_safetensors((fs::path(dst) / "model.safetensors").string(), out);
  {
    std::ofstream f(fs::path(dst) / "config.json");
    f << config.dump(2) << "\n";
    STRATA_CHECK(f.good(), dst, "/config.json: write failed");
  }
  for (const char* file : kCopiedFiles) {
    const fs::path from = fs::path(src) / file;
    if (fs::exists(from)) fs::copy_file(from, fs::path(dst) / file, fs::copy_options::overwrite_existing);
  }
  for (const auto& [name, t] : out) s.bytes_out += t.nbytes();
  return s;
}

}  // namespace strata
