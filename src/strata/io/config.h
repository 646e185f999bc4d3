// Typed access to config.json, with errors that name the file and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// What parse_json does with a key repeated within one object. nlohmann (like Python's json)
// silently keeps the last value, which hides editing mistakes and lets two readers of one file
// disagree; strata rejects repeats unless told otherwise.
enum class DuplicateKeys { kReject, kKeepLast };

// Parses JSON text. Every error is a strata::Error starting with `origin`: a syntax error gives
// the line, column and byte offset; a repeated key gives the key and the dotted path of the
// object holding it ("ORIGIN: duplicate key 'x' in 'text_config'"). Never throws nlohmann errors.
nlohmann::json parse_json(std::string_view text, const std::string& origin,
                          DuplicateKeys duplicates = DuplicateKeys::kReject);

// Reads and parses a JSON file with parse_json; a missing or unreadable file names the path.
nlohmann::json read_json_file(const std::string& path,
                              DuplicateKeys duplicates = DuplicateKeys::kReject);

// The JSON type of `v` for error messages: "object", "array", "string", "boolean", "integer",
// "number" (a float) or "null".
std::string json_type_name(nlohmann::json::value_t type);
inline std::string json_type_name(const nlohmann::json& v) { return json_type_name(v.type()); }
inline std::string json_type_name(const nlohmann::ordered_json& v) { return json_type_name(v.type()); }

// The deepest bracket nesting of JSON text, outside strings: a bound to check before parsing
// text into values that later code walks recursively.
int json_depth(std::string_view text);

// A view of one JSON object of a config (the top level, or the text_config of a multimodal
// wrapper). Field errors read "PATH: field 'text_config.hidden_size': expected integer, got string".
// The viewed JSON must outlive the view. Only strata::Error is thrown.
//
// A key whose value is null counts as absent (HF writes "rope_scaling": null for "none"): has()
// is false and the getters with a fallback return the fallback.
class ConfigView {
 public:
  // Throws Error unless `object` is a JSON object. `prefix` is the dotted path of `object` inside
  // the file, ending in '.', or "" for the top level.
  ConfigView(const nlohmann::json* object, std::string origin, std::string prefix = "");

  // The language-model part of a config.json: `text_config` when present (the multimodal
  // wrappers, e.g. Qwen3_5ForConditionalGeneration, nest the LM config there), else the top level.
  static ConfigView text_config(const nlohmann::json& root, const std::string& origin);

  bool has(const std::string& key) const;
  // Integers may be written as integral floats (2048.0); booleans are not integers.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;  // any number
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<double> get_float_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;
  // eos_token_id may be an int or a list of ints; absent gives {}.
  std::vector<int64_t> get_int_or_list(const std::string& key) const;
  ConfigView child(const std::string& key) const;  // a nested object, e.g. rope_parameters

  const nlohmann::json& json() const { return *obj_; }
  const std::string& origin() const { return origin_; }
  const std::string& prefix() const { return prefix_; }
  // Throws "ORIGIN: field 'PREFIX.KEY': WHAT".
  [[noreturn]] void fail_field(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& at(const std::string& key) const;  // present and not null, else throws
  const nlohmann::json* find(const std::string& key) const;  // nullptr when absent or null
  int64_t to_int(const nlohmann::json& v, const std::string& field) const;
  double to_float(const nlohmann::json& v, const std::string& field) const;

  const nlohmann::json* obj_;
  std::string origin_;
  std::string prefix_;
};

}  // namespace strata
