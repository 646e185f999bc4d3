#include "strata/io/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "strata/core/error.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// nlohmann's messages start with "[json.exception.parse_error.101] "; the id helps nobody.
std::string strip_exception_id(const char* what) {
  std::string s = what;
  if (s.rfind("[json.exception.", 0) == 0) {
    size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  return s;
}

// Follows the open containers while nlohmann parses (through its parser callback) so that a
// repeated key can be reported with the dotted path of the object that holds it.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& origin) : origin_(origin) {}

  bool on_event(Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames_.push_back(Frame{event == Event::array_start, child_path(), 0, {}, {}});
        break;
      case Event::key: {
        Frame& top = frames_.back();
        const auto& key = parsed.get_ref<const std::string&>();
        if (!top.keys.insert(key).second) {
          if (top.path.empty()) fail(origin_, ": duplicate key '", key, "' at the top level");
          fail(origin_, ": duplicate key '", key, "' in '", top.path, "'");
        }
        top.key = key;
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        count_element();
        break;
      case Event::value:
        count_element();
        break;
    }
    return true;  // keep every value
  }

 private:
  struct Frame {
    bool array;
    std::string path;  // dotted path of this container, "" for the root
    size_t count;      // elements seen so far (arrays)
    std::string key;   // the key being parsed (objects)
    std::unordered_set<std::string> keys;
  };

  std::string child_path() const {
    if (frames_.empty()) return "";
    const Frame& p = frames_.back();
    if (p.array) return cat(p.path, "[", p.count, "]");
    return p.path.empty() ? p.key : p.path + "." + p.key;
  }
  void count_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
  }

  const std::string& origin_;
  std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& origin,
                          DuplicateKeys duplicates) {
  // nlohmann's lexer takes a NUL byte for the end of input and ignores what follows, so
  // "{}\0{...}" would parse; JSON allows NUL nowhere unescaped.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(origin, ": invalid JSON: NUL byte at byte ", nul);
  try {
    if (duplicates == DuplicateKeys::kKeepLast) return Json::parse(text.begin(), text.end());
    DuplicateKeyCheck check(origin);
    return Json::parse(text.begin(), text.end(),
                       [&check](int, Json::parse_event_t event, Json& parsed) {
                         return check.on_event(event, parsed);
                       });
  } catch (const Json::parse_error& e) {
    fail(origin, ": invalid JSON: ", strip_exception_id(e.what()), " (byte ", e.byte, ")");
  } catch (const Json::exception& e) {
    // e.g. out_of_range 406 for a number like 1e999
    fail(origin, ": invalid JSON: ", strip_exception_id(e.what()));
  }
}

nlohmann::json read_json_file(const std::string& path, DuplicateKeys duplicates) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path, ": read error: ", std::strerror(errno));
  return parse_json(text.str(), path, duplicates);
}

std::string json_type_name(nlohmann::json::value_t type) {
  switch (type) {
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::binary: return "binary";
    case Json::value_t::null:
    case Json::value_t::discarded: return "null";
  }
  return "?";
}

int json_depth(std::string_view text) {
  int depth = 0, most = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return most;
}

ConfigView::ConfigView(const nlohmann::json* object, std::string origin, std::string prefix)
    : obj_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {
  if (obj_ != nullptr && obj_->is_object()) return;
  std::string got = obj_ ? json_type_name(*obj_) : "nothing";
  if (prefix_.empty()) fail(origin_, ": expected a JSON object at the top level, got ", got);
  std::string field = prefix_.substr(0, prefix_.size() - (prefix_.back() == '.' ? 1 : 0));
  fail(origin_, ": field '", field, "': expected object, got ", got);
}

ConfigView ConfigView::text_config(const nlohmann::json& root, const std::string& origin) {
  ConfigView top(&root, origin);
  if (top.has("text_config")) return top.child("text_config");
  return top;
}

void ConfigView::fail_field(const std::string& key, const std::string& what) const {
  fail(origin_, ": field '", prefix_, key, "': ", what);
}

const nlohmann::json* ConfigView::find(const std::string& key) const {
  auto it = obj_->find(key);
  if (it == obj_->end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& ConfigView::at(const std::string& key) const {
  const Json* v = find(key);
  if (v == nullptr) fail_field(key, obj_->contains(key) ? "is null" : "missing");
  return *v;
}

bool ConfigView::has(const std::string& key) const { return find(key) != nullptr; }

int64_t ConfigView::to_int(const nlohmann::json& v, const std::string& field) const {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_field(field, cat("integer ", u, " is out of range"));
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 is exact in a double; checking the range first keeps the cast defined.
    if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0)
      return int64_t(d);
    fail_field(field, cat("expected integer, got non-integer number ", v.dump()));
  }
  fail_field(field, "expected integer, got " + json_type_name(v));
}

double ConfigView::to_float(const nlohmann::json& v, const std::string& field) const {
  if (!v.is_number()) fail_field(field, "expected number, got " + json_type_name(v));
  return v.get<double>();
}

int64_t ConfigView::get_int(const std::string& key) const { return to_int(at(key), key); }

int64_t ConfigView::get_int(const std::string& key, int64_t fallback) const {
  const Json* v = find(key);
  return v ? to_int(*v, key) : fallback;
}

double ConfigView::get_float(const std::string& key) const { return to_float(at(key), key); }

double ConfigView::get_float(const std::string& key, double fallback) const {
  const Json* v = find(key);
  return v ? to_float(*v, key) : fallback;
}

bool ConfigView::get_bool(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_boolean()) fail_field(key, "expected boolean, got " + json_type_name(v));
  return v.get<bool>();
}

bool ConfigView::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

std::string ConfigView::get_string(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_string()) fail_field(key, "expected string, got " + json_type_name(v));
  return v.get<std::string>();
}

std::string ConfigView::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> ConfigView::get_int_list(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail_field(key, "expected list of integers, got " + json_type_name(v));
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) out.push_back(to_int(v[i], cat(key, "[", i, "]")));
  return out;
}

std::vector<double> ConfigView::get_float_list(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail_field(key, "expected list of numbers, got " + json_type_name(v));
  std::vector<double> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) out.push_back(to_float(v[i], cat(key, "[", i, "]")));
  return out;
}

std::vector<std::string> ConfigView::get_string_list(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail_field(key, "expected list of strings, got " + json_type_name(v));
  std::vector<std::string> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      fail_field(cat(key, "[", i, "]"), "expected string, got " + json_type_name(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::vector<int64_t> ConfigView::get_int_or_list(const std::string& key) const {
  const Json* v = find(key);
  if (v == nullptr) return {};
  if (v->is_array()) return get_int_list(key);
  if (!v->is_number())
    fail_field(key, "expected integer or list of integers, got " + json_type_name(*v));
  return {to_int(*v, key)};
}

ConfigView ConfigView::child(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_object()) fail_field(key, "expected object, got " + json_type_name(v));
  return ConfigView(&v, origin_, prefix_ + key + ".");
}

}  // namespace strata
