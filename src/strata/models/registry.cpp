// Maps config.json's model_type to the family that runs it.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/io/checkpoint.h"
#include "strata/models/deepseek_v4.h"
#include "strata/models/model.h"
#include "strata/models/qwen3_5.h"
#include "strata/models/qwen4_exp.h"

namespace strata {
namespace {

struct Family {
  std::vector<std::string> model_types;
  std::function<std::unique_ptr<Model>(const Checkpoint&, const LoadOptions&)> load;
};

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = {
      {{"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"},
       [](const Checkpoint& c, const LoadOptions& o) { return load_qwen3_5(c, o.device, o.parallel, o.mtp, o.ssm_state_dtype, o.kv_cache_dtype); }},
      {{"qwen4_exp", "qwen4_exp_text"},
       [](const Checkpoint& c, const LoadOptions& o) { return load_qwen4_exp(c, o.device, o.parallel, o.ssm_state_dtype, o.mtp); }},
      {{"deepseek_v4"},
       [](const Checkpoint& c, const LoadOptions& o) { return load_deepseek_v4(c, o.device, o.parallel, o.mtp); }},
  };
  return kFamilies;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& dir, Device device) {
  return load_model(dir, LoadOptions{device, LoadFormat::kSafetensors, {}});
}

LoadFormat parse_load_format(const std::string& name) {
  if (name == "auto" || name == "safetensors") return LoadFormat::kSafetensors;
  if (name == "dummy") return LoadFormat::kDummy;
  fail("--load-format: expected auto, safetensors or dummy, got '", name, "'");
}

DType parse_ssm_state_dtype(const std::string& name) {
  if (name == "float32") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  fail("--mamba-ssm-dtype: expected float32 or bfloat16, got '", name, "'");
}

KvCacheDtype parse_kv_cache_dtype(const std::string& name) {
  if (name == "auto") return KvCacheDtype::kAuto;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFp8E4M3;
  fail("--kv-cache-dtype: expected auto, fp8 or fp8_e4m3, got '", name, "'");
}

const char* kv_cache_dtype_name(KvCacheDtype dtype) {
  return dtype == KvCacheDtype::kFp8E4M3 ? "fp8_e4m3" : "auto";
}

void check_kv_cache_dtype(const std::string& dir, const std::string& model_type, KvCacheDtype dtype) {
  if (dtype == KvCacheDtype::kAuto) return;
  for (const Family& f : families()) {
    const bool ours = std::find(f.model_types.begin(), f.model_types.end(), model_type) != f.model_types.end();
    STRATA_CHECK(!ours || f.model_types[0] == "qwen3_next", dir, ": --kv-cache-dtype ", kv_cache_dtype_name(dtype),
                 " is not supported for ", model_type, " yet (only the Qwen3.5 family: qwen3_next, qwen3_5, "
                 "qwen3_5_moe); use auto");
  }
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options) {
  STRATA_CHECK(options.ssm_state_dtype == DType::kF32 || options.ssm_state_dtype == DType::kBF16,
               "--mamba-ssm-dtype: the recurrent state is float32 or bfloat16, got ",
               dtype_name(options.ssm_state_dtype));
  Checkpoint ckpt = options.format == LoadFormat::kDummy ? Checkpoint::open_config_only(dir)
                                                         : Checkpoint::open(dir);
  const nlohmann::json& cfg = ckpt.config();
  STRATA_CHECK(cfg.is_object() && cfg.contains("model_type") && cfg["model_type"].is_string(),
               dir, "/config.json: field 'model_type' missing or not a string");
  const std::string type = cfg["model_type"].get<std::string>();
  check_kv_cache_dtype(dir, type, options.kv_cache_dtype);
  for (const Family& f : families()) {
    for (const std::string& t : f.model_types) {
      if (t == type) return f.load(ckpt, options);
    }
  }
  std::string known;
  for (const Family& f : families()) {
    for (const std::string& t : f.model_types) known += (known.empty() ? "" : ", ") + t;
  }
  fail(dir, "/config.json: field 'model_type': unsupported model type '", type, "' (supported: ", known, ")");
}

}  // namespace strata
