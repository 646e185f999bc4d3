// TokenizerConfig (tokenizer_config.json, chat_template.jinja, chat_template.json) and
// GenerationConfig (generation_config.json).
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "strata/core/error.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata {

using json = nlohmann::json;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail(p.string(), ": cannot open file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_file(const std::filesystem::path& p) {
  std::string text = slurp(p);
  try {
    json j = json::parse(text);
    if (!j.is_object()) fail(p.string(), ": expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    fail(p.string(), ": malformed JSON: ", e.what());
  }
}

// A special token: a string, null, or an AddedToken object {"content": ...}.
std::optional<std::string> token_field(const json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  fail(file, ": ", key, ": expected a string, null or {\"content\": ...}");
}

bool bool_field(const json& j, const char* key, bool def, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail(file, ": ", key, ": expected true or false");
  return it->get<bool>();
}

void set_templates(TokenizerConfig* c, const json& v, const std::string& where) {
  if (v.is_null()) return;
  if (v.is_string()) {
    c->chat_template = v.get<std::string>();
    c->chat_templates["default"] = c->chat_template;
    return;
  }
  if (!v.is_array()) fail(where, ": expected a string or a list of {name, template}");
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("template") || !t["template"].is_string()) {
      fail(where, "[", i, "]: expected {\"name\": string, \"template\": string}");
    }
    c->chat_templates[t["name"].get<std::string>()] = t["template"].get<std::string>();
  }
  auto it = c->chat_templates.find("default");
  if (it != c->chat_templates.end()) c->chat_template = it->second;
}

std::optional<int32_t> int_field(const json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) fail(file, ": ", key, ": expected an integer");
  return it->get<int32_t>();
}

std::optional<float> float_field(const json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail(file, ": ", key, ": expected a number");
  auto v = it->get<double>();
  if (!std::isfinite(v)) fail(file, ": ", key, ": expected a finite number");
  return float(v);
}

}  // namespace

TokenizerConfig TokenizerConfig::load(const std::filesystem::path& dir) {
  TokenizerConfig c;
  std::filesystem::path file = dir / "tokenizer_config.json";
  if (std::filesystem::exists(file)) {
    json j = parse_file(file);
    std::string f = file.string();
    c.bos_token = token_field(j, "bos_token", f);
    c.eos_token = token_field(j, "eos_token", f);
    c.pad_token = token_field(j, "pad_token", f);
    c.unk_token = token_field(j, "unk_token", f);
    c.add_bos_token = bool_field(j, "add_bos_token", false, f);
    c.add_eos_token = bool_field(j, "add_eos_token", false, f);
    if (auto it = j.find("tokenizer_class"); it != j.end() && it->is_string()) {
      c.tokenizer_class = it->get<std::string>();
    }
    if (auto it = j.find("chat_template"); it != j.end()) {
      set_templates(&c, *it, f + ": chat_template");
    }
  }
  std::filesystem::path tj = dir / "chat_template.json";
  if (std::filesystem::exists(tj)) {
    json j = parse_file(tj);
    if (auto it = j.find("chat_template"); it != j.end()) {
      set_templates(&c, *it, tj.string() + ": chat_template");
    }
  }
  // chat_template.jinja, when present, is the default template.
  std::filesystem::path jinja = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    c.chat_template = slurp(jinja);
    c.chat_templates["default"] = c.chat_template;
  }
  return c;
}

GenerationConfig GenerationConfig::load(const std::filesystem::path& dir) {
  GenerationConfig g;
  std::filesystem::path file = dir / "generation_config.json";
  if (!std::filesystem::exists(file)) return g;
  json j = parse_file(file);
  std::string f = file.string();
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      g.eos_token_ids.push_back(it->get<int32_t>());
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_number_integer()) fail(f, ": eos_token_id[", i, "]: expected an integer");
        g.eos_token_ids.push_back((*it)[i].get<int32_t>());
      }
    } else {
      fail(f, ": eos_token_id: expected an integer or a list of integers");
    }
  }
  g.bos_token_id = int_field(j, "bos_token_id", f);
  g.pad_token_id = int_field(j, "pad_token_id", f);
  g.temperature = float_field(j, "temperature", f);
  g.top_p = float_field(j, "top_p", f);
  g.repetition_penalty = float_field(j, "repetition_penalty", f);
  g.top_k = int_field(j, "top_k", f);
  g.max_new_tokens = int_field(j, "max_new_tokens", f);
  g.max_length = int_field(j, "max_length", f);
  if (auto it = j.find("do_sample"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) fail(f, ": do_sample: expected true or false");
    g.do_sample = it->get<bool>();
  }
  return g;
}

}  // namespace strata
