// ChatTemplate and the model-folder config reading (see chat_template.h).
#include "strata/tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/core/error.h"

namespace strata {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in, "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token: a string, or an AddedToken object {"content": ...}; empty when unset.
std::optional<std::string> token_string(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

ChatTemplate ChatTemplate::compile(std::string source, const jinja::Limits& limits) {
  ChatTemplate t;
  t.template_ = jinja::Template::compile(source, limits);
  t.source_ = std::move(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& inputs) const {
  STRATA_CHECK(inputs.is_object(), "chat template inputs must be a JSON object");
  // transformers always passes these three (render_jinja_template's signature).
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = false;
  for (const auto& [k, v] : inputs.items()) ctx[k] = v;
  return template_.render(ctx);
}

std::string ChatTemplate::render(const nlohmann::json& inputs) const {
  return render(nlohmann::ordered_json::parse(inputs.dump()));
}

const std::string& ChatTemplateConfig::select(bool has_tools) const {
  if (has_tools) {
    auto it = templates.find("tool_use");
    if (it != templates.end()) return it->second;
  }
  auto it = templates.find("default");
  if (it == templates.end()) {
    fail(templates.empty() ? "the model has no chat template"
                           : "the model has several chat templates and none is named 'default'");
  }
  return it->second;
}

ChatTemplateConfig load_chat_template_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  ChatTemplateConfig cfg;
  fs::path dir(model_dir);
  fs::path config_path = dir / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (fs::exists(config_path)) {
    try {
      config = nlohmann::ordered_json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      fail(config_path.string(), ": invalid JSON: ", e.what());
    }
    STRATA_CHECK(config.is_object(), config_path.string(), ": expected a JSON object");
  }
  fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    cfg.templates["default"] = read_file(jinja_path);
  } else if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      cfg.templates["default"] = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& item : ct) {
        STRATA_CHECK(item.is_object() && item.contains("name") && item["name"].is_string() &&
                         item.contains("template") && item["template"].is_string(),
                     config_path.string(), ": chat_template entries must be {name, template}");
        cfg.templates[item["name"].get<std::string>()] = item["template"].get<std::string>();
      }
    } else if (!ct.is_null()) {
      fail(config_path.string(), ": chat_template must be a string or a list");
    }
  }
  STRATA_CHECK(!cfg.templates.empty(), "no chat template in ", model_dir,
               " (looked for chat_template.jinja and tokenizer_config.json's chat_template)");
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    if (auto s = token_string(config[key])) cfg.special_tokens[key] = *s;
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : config["additional_special_tokens"])
      if (auto s = token_string(t)) list.push_back(*s);
    cfg.special_tokens["additional_special_tokens"] = list;
  }
  return cfg;
}

}  // namespace strata
