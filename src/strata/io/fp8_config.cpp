#include "strata/io/fp8_config.h"

#include "strata/core/error.h"
#include "strata/io/config.h"

namespace strata {

bool Fp8BlockQuant::listed_not_converted(const std::string& tensor_name) const {
  for (const std::string& m : not_converted) {
    if (!m.empty() && tensor_name.find(m) != std::string::npos) return true;
  }
  return false;
}

Fp8BlockQuant parse_fp8_block_quant(const nlohmann::json& root, const std::string& origin) {
  Fp8BlockQuant q;
  const ConfigView top(&root, origin);
  ConfigView where = top;
  if (!top.has("quantization_config")) {
    const ConfigView text = ConfigView::text_config(root, origin);
    if (!text.has("quantization_config")) return q;
    where = text;
  }
  const ConfigView v = where.child("quantization_config");
  const std::string method = v.get_string("quant_method");
  if (method != "fp8") {
    v.fail_field("quant_method", "'" + method + "' is not supported (this build loads \"fp8\" block-scale checkpoints)");
  }
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
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    if (!v.has(key)) continue;
    for (std::string& m : v.get_string_list(key)) q.not_converted.push_back(std::move(m));
  }
  q.enabled = true;
  return q;
}

}  // namespace strata
