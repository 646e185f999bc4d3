// Typed access to config.json, with errors that name the file and the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// Reads and parses a JSON file; a missing file or a syntax error names the path (and the byte
// offset of the syntax error).
nlohmann::json read_json_file(const std::string& path);

// A view of one JSON object of a config (the top level, or the text_config of a multimodal
// wrapper). Field errors read "PATH: field 'text_config.hidden_size': expected integer, got string".
class ConfigView {
 public:
  ConfigView(const nlohmann::json* object, std::string origin, std::string prefix = "");

  // The language-model part of a config.json: `text_config` when present, else the top level.
  static ConfigView text_config(const nlohmann::json& root, const std::string& origin);

  bool has(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;
  // eos_token_id may be an int or a list of ints; absent gives {}.
  std::vector<int64_t> get_int_or_list(const std::string& key) const;
  ConfigView child(const std::string& key) const;  // a nested object, e.g. rope_parameters
  const nlohmann::json& json() const { return *obj_; }
  [[noreturn]] void fail_field(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& at(const std::string& key) const;
  const nlohmann::json* obj_;
  std::string origin_;
  std::string prefix_;
};

}  // namespace strata
