// Fuzzes parse_json, every ConfigView getter on what it accepts, and the quantisation config
// (parse_weight_quant, the document read as config.json and as hf_quant_config.json, and its
// module patterns matched against tensor names). The API documents only
// strata::Error, so that is all this catches: a nlohmann exception escaping is a bug too.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/io/config.h"
#include "strata/io/quant_config.h"

namespace {

constexpr char kOrigin[] = "fuzz/config.json";

template <class F>
void attempt(F&& f) {
  try {
    f();
  } catch (const strata::Error& e) {
    if (std::string_view(e.what()).substr(0, sizeof(kOrigin) - 1) != kOrigin) __builtin_trap();
  }
}

void exercise(const strata::ConfigView& v, int depth) {
  std::vector<std::string> keys = {"hidden_size", "num_attention_heads", "rope_theta",
                                   "eos_token_id", "layer_types",          "tie_word_embeddings",
                                   "model_type",   "rope_parameters",      "text_config"};
  size_t n = 0;
  for (const auto& item : v.json().items()) {
    if (++n > 32) break;
    keys.push_back(item.key());
  }
  for (const std::string& k : keys) {
    attempt([&] { (void)v.has(k); });
    attempt([&] { (void)v.get_int(k); });
    attempt([&] { (void)v.get_int(k, 1); });
    attempt([&] { (void)v.get_float(k); });
    attempt([&] { (void)v.get_float(k, 1.0); });
    attempt([&] { (void)v.get_bool(k); });
    attempt([&] { (void)v.get_bool(k, true); });
    attempt([&] { (void)v.get_string(k); });
    attempt([&] { (void)v.get_string(k, "x"); });
    attempt([&] { (void)v.get_int_list(k); });
    attempt([&] { (void)v.get_float_list(k); });
    attempt([&] { (void)v.get_string_list(k); });
    attempt([&] { (void)v.get_int_or_list(k); });
    if (depth < 4) attempt([&] { exercise(v.child(k), depth + 1); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  attempt([&] { (void)strata::parse_json(text, kOrigin, strata::DuplicateKeys::kKeepLast); });
  nlohmann::json root;
  try {
    root = strata::parse_json(text, kOrigin);
  } catch (const strata::Error&) {
    return 0;
  }
  attempt([&] { exercise(strata::ConfigView::text_config(root, kOrigin), 0); });
  attempt([&] { exercise(strata::ConfigView(&root, kOrigin), 0); });
  attempt([&] {
    const strata::WeightQuant q = strata::parse_weight_quant(root, kOrigin);
    (void)q.listed_not_converted("model.layers.0.linear_attn.in_proj_a.weight");
  });
  attempt([&] {
    const strata::WeightQuant q = strata::parse_weight_quant(nlohmann::json::object(), kOrigin, root, kOrigin);
    for (const std::string& m : q.not_converted) (void)q.listed_not_converted(m + ".weight");
  });
  return 0;
}
