#include "strata/io/quant_config.h"

#include <filesystem>
#include <fstream>

#include "strata/core/error.h"
#include "strata/io/checkpoint.h"
#include "strata/io/config.h"

namespace strata {
namespace {

// '*' matches any run of characters; everything else itself. Iterative, with one backtrack point.
bool glob_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p, ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

void read_lists(const ConfigView& v, const std::vector<const char*>& keys, WeightQuant* q) {
  for (const char* key : keys) {
    if (!v.has(key)) continue;
    for (std::string& m : v.get_string_list(key)) q->not_converted.push_back(std::move(m));
  }
}

void parse_fp8(const ConfigView& v, WeightQuant* q) {
  const std::string fmt = v.get_string("fmt", "e4m3");
  if (fmt != "e4m3") v.fail_field("fmt", "'" + fmt + "' is not supported (expected \"e4m3\")");
  const std::string act = v.get_string("activation_scheme", "dynamic");
  if (act != "dynamic") {
    v.fail_field("activation_scheme", "'" + act + "' is not supported (expected \"dynamic\": static "
                 "activation scales are not read)");
  }
  if (!v.has("weight_block_size")) {
    v.fail_field("weight_block_size", "missing (per-tensor FP8 is not supported; expected [128, 128])");
  }
  const auto b = v.get_int_list("weight_block_size");
  if (b.size() != 2 || b[0] != kFp8Block || b[1] != kFp8Block) {
    v.fail_field("weight_block_size", "expected [128, 128], the block the FP8 loaders take");
  }
  read_lists(v, {"modules_to_not_convert", "ignored_layers"}, q);
  q->method = WeightQuant::Method::kFp8Block;
}

// ModelOpt's fields, in config.json's quantization_config or hf_quant_config.json's quantization.
void parse_modelopt(const ConfigView& v, WeightQuant* q) {
  const std::string algo = v.get_string("quant_algo");
  if (algo != "NVFP4") {
    v.fail_field("quant_algo", "'" + algo + "' is not supported (this build loads ModelOpt \"NVFP4\" checkpoints)");
  }
  const int64_t group = v.get_int("group_size", 16);
  if (group != 16) v.fail_field("group_size", "NVFP4 scales groups of 16 elements, got " + std::to_string(group));
  if (v.has("kv_cache_quant_algo")) {
    v.fail_field("kv_cache_quant_algo", "a quantised KV cache is not supported yet (the cache stays bf16; "
                 "its k_scale / v_scale tensors would go unread)");
  }
  read_lists(v, {"ignore", "exclude_modules", "modules_to_not_convert"}, q);
  q->method = WeightQuant::Method::kNvfp4;
}

}  // namespace

bool WeightQuant::listed_not_converted(const std::string& tensor_name) const {
  const std::string module = tensor_name.substr(0, tensor_name.rfind('.'));  // without ".weight"
  for (const std::string& m : not_converted) {
    if (m.empty()) continue;
    if (m.find('*') != std::string::npos ? glob_match(m, module) : tensor_name.find(m) != std::string::npos) {
      return true;
    }
  }
  return false;
}

WeightQuant parse_weight_quant(const nlohmann::json& root, const std::string& origin, const nlohmann::json& hf_quant,
                               const std::string& hf_origin) {
  WeightQuant q;
  q.origin = origin;
  const ConfigView top(&root, origin);
  ConfigView where = top;
  if (!top.has("quantization_config")) {
    const ConfigView text = ConfigView::text_config(root, origin);
    if (!text.has("quantization_config")) {
      if (hf_quant.is_null()) return q;
      q.origin = hf_origin;
      const ConfigView file(&hf_quant, q.origin);
      parse_modelopt(file.child("quantization"), &q);
      return q;
    }
    where = text;
  }
  const ConfigView v = where.child("quantization_config");
  const std::string method = v.get_string("quant_method");
  if (method == "fp8") {
    parse_fp8(v, &q);
  } else if (method == "modelopt") {
    parse_modelopt(v, &q);
  } else {
    v.fail_field("quant_method", "'" + method + "' is not supported (this build loads \"fp8\" block-scale and "
                 "\"modelopt\" NVFP4 checkpoints)");
  }
  return q;
}

WeightQuant weight_quant_of(const Checkpoint& ckpt) {
  const std::filesystem::path hf = std::filesystem::path(ckpt.dir()) / "hf_quant_config.json";
  nlohmann::json hf_quant;
  if (std::filesystem::exists(hf)) {
    std::ifstream in(hf);
    hf_quant = nlohmann::json::parse(in, nullptr, false);
    STRATA_CHECK(!hf_quant.is_discarded() && hf_quant.is_object(), hf.string(), ": not a JSON object");
  }
  return parse_weight_quant(ckpt.config(), ckpt.config_path(), hf_quant, hf.string());
}

}  // namespace strata
