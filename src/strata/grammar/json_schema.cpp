#include "strata/grammar/json_schema.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "strata/core/error.h"

namespace strata::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// A whitespace run as a flat automaton: json-ws-L-K has seen L line breaks and K spaces or tabs
// since the last. Every reference is a tail call, so inside a run the stack's top frames are
// the run's state and the rule that holds the run, and the token mask's context (three frames)
// still sees what follows it.
std::string whitespace_rules() {
  std::string out;
  for (int l = 0; l <= kMaxJsonLineBreaks; ++l) {
    for (int k = 0; k <= kMaxJsonSpaces; ++k) {
      out += cat("json-ws-", l, "-", k, " ::= \"\"");
      if (k < kMaxJsonSpaces) out += cat(" | [ \\t] json-ws-", l, "-", k + 1);
      if (l < kMaxJsonLineBreaks)
        out += cat(" | \"\\n\" json-ws-", l + 1, "-0 | \"\\r\\n\" json-ws-", l + 1, "-0");
      out += "\n";
    }
  }
  return out;
}

// The JSON value rules every schema grammar may use (RFC 8259). `w` is " json-ws " where
// whitespace may stand (after an opening bracket, around ':' and ',', before a closing bracket),
// " " in canonical form. A whitespace run never follows another one, so the grammar stays
// unambiguous.
std::string json_rules(const std::string& w) {
  return cat(R"gbnf(
json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object ::= "{")gbnf", w, R"gbnf(( json-member ( ",")gbnf", w, R"gbnf(json-member )* )? "}"
json-member ::= json-string)gbnf", w, R"gbnf(":")gbnf", w, R"gbnf(json-value)gbnf", w, R"gbnf(
json-array ::= "[")gbnf", w, R"gbnf(( json-value)gbnf", w, R"gbnf(( ",")gbnf", w, R"gbnf(json-value)gbnf", w, R"gbnf()* )? "]"
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-int ::= "-"? ("0" | [1-9] [0-9]*)
# JSON.stringify writes integers from 1e21 up with an exponent; they are integers all the same.
json-integer ::= json-int | "-"? [1-9] ("." [0-9]+)? "e+" ("2" [1-9] | [3-9] [0-9] | [12] [0-9] [0-9] | "30" [0-8])
json-number ::= json-int ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-ws ::= json-ws-0-0
)gbnf", whitespace_rules());
}

// String formats (ajv-formats' full mode, except leap seconds; docs/GRAMMAR.md).
constexpr const char* kFormatRules = R"gbnf(
fmt-d2 ::= [0-9] [0-9]
fmt-date ::= [0-9]{4} "-" ((("0" [13578]) | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | fmt-leap-year "-02-29"
fmt-leap-year ::= [0-9] [0-9] ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [048] | [2468] [048] | [13579] [26]) "00"
fmt-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]+)? fmt-zone
fmt-zone ::= [zZ] | [-+] ([01] [0-9] | "2" [0-3]) (":"? [0-5] [0-9])?
fmt-date-time ::= fmt-date [tT ] fmt-time
fmt-uuid ::= ("urn:uuid:")? fmt-hex{8} "-" fmt-hex{4} "-" fmt-hex{4} "-" fmt-hex{4} "-" fmt-hex{12}
fmt-hex ::= [0-9a-fA-F]
)gbnf";

std::string quote(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += cat("\\x", "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

const std::set<std::string> kAnnotations = {"title",   "description", "$schema",    "$id",
                                            "default", "examples",    "$comment",   "deprecated",
                                            "readOnly", "writeOnly"};
const std::set<std::string> kSupported = {
    "type",     "properties", "required", "additionalProperties", "enum",     "const",
    "items",    "prefixItems", "minItems", "maxItems",            "anyOf",    "allOf",
    "$ref",     "$defs",       "definitions", "format",           "minLength", "maxLength"};

class SchemaCompiler {
 public:
  // `prefix` starts the names of the rules it makes, so that several compilers' rules can share
  // one grammar.
  SchemaCompiler(const ojson& root, JsonWhitespace ws, std::string prefix = "s-")
      : root_(root), w_(ws == JsonWhitespace::kFlexible ? " json-ws " : " "), prefix_(std::move(prefix)) {}

  std::string compile() {
    std::string root_expr = expr(root_, "");
    std::string out = "root ::= " + root_expr + "\n";
    for (const auto& r : rules_) out += r.first + " ::= " + r.second + "\n";
    return out + json_rules(w_) + kFormatRules;
  }

  // `name ::= ` the subschema at `pointer` of the root, and the rules it makes; no base rules.
  std::string compile_rule(const std::string& name, const std::string& pointer) {
    const ojson::json_pointer at(pointer);
    if (!root_.contains(at)) fail_at(pointer, "no such subschema");
    std::string out = name + " ::= " + expr(root_.at(at), pointer) + "\n";
    for (const auto& r : rules_) out += r.first + " ::= " + r.second + "\n";
    return out;
  }

 private:
  template <class... A>
  [[noreturn]] void fail_at(const std::string& path, A&&... a) {
    fail("json schema: ", path.empty() ? "/" : path, ": ", std::forward<A>(a)...);
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty() || base == "-") base = "s";
    std::string name = prefix_ + base;
    for (int i = 1; rules_.count(name); ++i) name = cat(prefix_, base, "-", i);
    rules_[name] = body;
    return name;
  }

  int64_t count(const ojson& s, const char* key, const std::string& path) {
    const ojson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail_at(path, "'", key, "' must be a non-negative integer");
    int64_t n = v.get<int64_t>();
    if (n > 10000) fail_at(path, "'", key, "' above 10000 is not supported");
    return n;
  }

  // A GBNF expression for the values the schema accepts.
  std::string expr(const ojson& s, const std::string& path) {
    if (++depth_ > 64) fail_at(path, "schema nested too deeply");
    std::string e = expr_inner(s, path);
    --depth_;
    return e;
  }

  std::string expr_inner(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return "json-value";
      fail_at(path, "the schema 'false' (no value) is not supported here");
    }
    if (!s.is_object()) fail_at(path, "a schema must be an object or a boolean");
    for (const auto& [key, _] : s.items()) {
      if (kAnnotations.count(key) || kSupported.count(key)) continue;
      fail_at(path, "unsupported keyword '", key, "'");
    }
    if (s.contains("$ref")) {
      if (s.size() > 1) {
        for (const auto& [key, _] : s.items())
          if (!kAnnotations.count(key) && key != "$ref" && key != "$defs" && key != "definitions")
            fail_at(path, "'$ref' beside other keywords ('", key, "') is not supported");
      }
      return ref(s["$ref"], path);
    }
    if (s.contains("allOf")) {
      const ojson& all = s["allOf"];
      if (!all.is_array() || all.size() != 1)
        fail_at(path, "'allOf' is supported with exactly one schema");
      for (const auto& [key, _] : s.items())
        if (!kAnnotations.count(key) && key != "allOf" && key != "$defs" && key != "definitions")
          fail_at(path, "'allOf' beside other keywords ('", key, "') is not supported");
      return expr(all[0], path + "/allOf/0");
    }
    if (s.contains("anyOf")) {
      const ojson& any = s["anyOf"];
      if (!any.is_array() || any.empty()) fail_at(path, "'anyOf' must be a non-empty array");
      for (const auto& [key, _] : s.items())
        if (!kAnnotations.count(key) && key != "anyOf" && key != "$defs" && key != "definitions")
          fail_at(path, "'anyOf' beside other keywords ('", key, "') is not supported");
      std::string alts;
      for (size_t i = 0; i < any.size(); ++i)
        alts += (i ? " | " : "") + expr(any[i], cat(path, "/anyOf/", i));
      return new_rule(path + "-any", alts);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const ojson& x : t) {
          if (!x.is_string()) fail_at(path, "'type' entries must be strings");
          types.push_back(x.get<std::string>());
        }
      else fail_at(path, "'type' must be a string or a non-empty array of strings");
    }
    if (s.contains("const") || s.contains("enum")) return literals(s, types, path);
    if (types.empty()) {
      bool typed_keyword = false;
      for (const char* k : {"properties", "required", "additionalProperties", "items",
                            "prefixItems", "minItems", "maxItems", "format", "minLength",
                            "maxLength"})
        typed_keyword |= s.contains(k);
      if (!typed_keyword) return "json-value";
      types = {"null", "boolean", "object", "array", "number", "string"};
    }
    std::string alts;
    for (const std::string& t : types) {
      std::string e;
      if (t == "null") e = "json-null";
      else if (t == "boolean") e = "json-boolean";
      else if (t == "integer") e = "json-integer";
      else if (t == "number") e = "json-number";
      else if (t == "string") e = string_expr(s, path);
      else if (t == "object") e = object_expr(s, path);
      else if (t == "array") e = array_expr(s, path);
      else fail_at(path, "unknown type '", t, "'");
      alts += (alts.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? alts : new_rule(path + "-types", alts);
  }

  static bool has_type(const ojson& v, const std::vector<std::string>& types) {
    if (types.empty()) return true;
    for (const std::string& t : types) {
      if ((t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) ||
          (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
          (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
          (t == "integer" && (v.is_number_integer() ||
                              (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>()))))))
        return true;
    }
    return false;
  }

  std::string literals(const ojson& s, const std::vector<std::string>& types,
                       const std::string& path) {
    for (const auto& [key, _] : s.items())
      if (!kAnnotations.count(key) && key != "enum" && key != "const" && key != "type")
        fail_at(path, "'", key, "' beside 'enum' or 'const' is not supported");
    std::vector<ojson> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        fail_at(path, "'enum' must be a non-empty array");
      for (const ojson& v : s["enum"])
        if (!s.contains("const") || v == s["const"]) values.push_back(v);
      if (s.contains("const")) values.erase(values.begin());
    }
    std::string alts;
    for (const ojson& v : values) {
      if (!has_type(v, types)) continue;
      if (v.is_number_float()) fail_at(path, "non-integer numbers in 'enum'/'const' are not supported");
      alts += (alts.empty() ? "" : " | ") + literal(v);
    }
    if (alts.empty()) fail_at(path, "no value of 'enum'/'const' is allowed by the schema");
    return new_rule(path + "-enum", alts);
  }

  // One JSON value, with whitespace where the form allows it (keys in the value's order).
  std::string literal(const ojson& v) {
    if (w_ == " " || !v.is_structured()) return quote(v.dump());
    const bool obj = v.is_object();
    std::string out = quote(obj ? "{" : "[") + w_;
    size_t i = 0;
    for (const auto& [key, item] : v.items()) {
      if (i++) out += "\",\"" + w_;
      if (obj) out += quote(ojson(key).dump()) + w_ + "\":\"" + w_;
      out += "(" + literal(item) + ")" + w_;
    }
    return out + quote(obj ? "}" : "]");
  }

  std::string string_expr(const ojson& s, const std::string& path) {
    if (s.contains("format")) {
      if (!s["format"].is_string()) fail_at(path, "'format' must be a string");
      std::string f = s["format"].get<std::string>();
      if (s.contains("minLength") || s.contains("maxLength"))
        fail_at(path, "'minLength'/'maxLength' with 'format' is not supported");
      if (f == "date" || f == "time" || f == "date-time" || f == "uuid")
        return "\"\\\"\" fmt-" + f + " \"\\\"\"";
      fail_at(path, "unsupported string format '", f, "'");
    }
    int64_t lo = s.contains("minLength") ? count(s, "minLength", path) : 0;
    int64_t hi = s.contains("maxLength") ? count(s, "maxLength", path) : -1;
    if (hi >= 0 && hi < lo) fail_at(path, "'maxLength' is below 'minLength'");
    if (lo == 0 && hi < 0) return "json-string";
    std::string rep = hi < 0 ? cat("{", lo, ",}") : cat("{", lo, ",", hi, "}");
    return new_rule(path + "-string", "\"\\\"\" json-char" + rep + " \"\\\"\"");
  }

  std::string object_expr(const ojson& s, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value expr
    std::vector<bool> required;
    std::set<std::string> names;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail_at(path, "'properties' must be an object");
      for (const auto& [name, sub] : s["properties"].items()) {
        props.push_back({quote(ojson(name).dump()) + w_ + "\":\"" + w_,
                         expr(sub, path + "/properties/" + name)});
        names.insert(name);
      }
    }
    required.assign(props.size(), false);
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail_at(path, "'required' must be an array");
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) fail_at(path, "'required' entries must be strings");
        std::string name = r.get<std::string>();
        if (!names.count(name))
          fail_at(path, "required property '", name, "' is not in 'properties' (not supported)");
        size_t i = 0;
        for (const auto& [n, _] : s["properties"].items()) {
          if (n == name) required[i] = true;
          ++i;
        }
      }
    }
    std::string extra;  // the value expression of additional properties, "" when none
    if (!s.contains("additionalProperties")) {
      extra = "json-value";
    } else {
      const ojson& a = s["additionalProperties"];
      if (a.is_boolean()) extra = a.get<bool>() ? "json-value" : "";
      else extra = expr(a, path + "/additionalProperties");
    }
    // A member is `key: value` and the whitespace after it; a comma and whitespace go before
    // every member but the first.
    std::string kv_extra = extra.empty() ? "" : other_key(names, path) + w_ + "\":\"" + w_ + extra + w_;
    // rest(i, first): properties i.. (first: no comma before the next one), then extras.
    size_t n = props.size();
    std::vector<std::string> rest_first(n + 1), rest_more(n + 1);
    std::string tail_first = kv_extra.empty() ? "\"\"" : "(" + kv_extra + " (\",\"" + w_ + kv_extra + ")*)?";
    std::string tail_more = kv_extra.empty() ? "\"\"" : "(\",\"" + w_ + kv_extra + ")*";
    rest_first[n] = new_rule(path + "-rest", tail_first);
    rest_more[n] = new_rule(path + "-rest", tail_more);
    for (size_t i = n; i-- > 0;) {
      const auto& [key, value] = props[i];
      std::string take_first = key + " " + value + w_ + rest_more[i + 1];
      std::string take_more = "\",\"" + w_ + take_first;
      rest_first[i] = new_rule(path + "-rest", required[i] ? take_first : take_first + " | " + rest_first[i + 1]);
      rest_more[i] = new_rule(path + "-rest", required[i] ? take_more : take_more + " | " + rest_more[i + 1]);
    }
    return new_rule(path + "-object", "\"{\"" + w_ + rest_first[0] + " \"}\"");
  }

  // The JSON characters of a key's canonical text (without quotes): an escape or a UTF-8
  // character each.
  static std::vector<std::string> json_chars(const std::string& name) {
    std::string body = ojson(name).dump();
    body = body.substr(1, body.size() - 2);
    std::vector<std::string> out;
    for (size_t i = 0; i < body.size();) {
      unsigned char c = static_cast<unsigned char>(body[i]);
      size_t n = c == '\\' ? (body[i + 1] == 'u' ? 6 : 2)
                 : c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      out.push_back(body.substr(i, n));
      i += n;
    }
    return out;
  }

  // A key (quoted JSON string) that is none of `names`: a rule per node of their trie.
  std::string other_key(const std::set<std::string>& names, const std::string& path) {
    if (names.empty()) return "json-string";
    std::vector<std::vector<std::string>> keys;
    for (const std::string& n : names) keys.push_back(json_chars(n));
    return "\"\\\"\" " + key_node(keys, 0, path);
  }

  // The rest of a key whose first `depth` characters are those of every key in `keys`.
  std::string key_node(const std::vector<std::vector<std::string>>& keys, size_t depth,
                       const std::string& path) {
    std::map<std::string, std::vector<std::vector<std::string>>> children;
    bool terminal = false;
    for (const auto& k : keys) {
      if (k.size() == depth) terminal = true;
      else children[k[depth]].push_back(k);
    }
    std::string alts;
    auto alt = [&](const std::string& a) { alts += (alts.empty() ? "" : " | ") + a; };
    if (!terminal) alt("\"\\\"\"");
    std::string plain_excluded, escape_letters = "\"\\\\/bfnrt";
    for (const auto& [c, sub] : children) {
      alt(quote(c) + " " + key_node(sub, depth + 1, path));
      if (c[0] == '\\') {
        if (c.size() == 2) escape_letters.erase(escape_letters.find(c[1] == '\\' ? "\\\\" : std::string(1, c[1])), c[1] == '\\' ? 2 : 1);
      } else {
        uint32_t cp = 0;
        unsigned char b0 = static_cast<unsigned char>(c[0]);
        cp = c.size() == 1 ? b0 : b0 & (0x7F >> c.size());
        for (size_t i = 1; i < c.size(); ++i) cp = (cp << 6) | (static_cast<unsigned char>(c[i]) & 0x3F);
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\U%08X", cp);
        plain_excluded += buf;
      }
    }
    std::string escapes = "\"\\\\\" (" + (escape_letters.empty() ? "" : "[" + escape_letters + "] | ") +
                          "\"u\" [0-9a-fA-F]{4})";
    alt("([^\"\\\\\\x00-\\x1F" + plain_excluded + "] | " + escapes + ") json-char* \"\\\"\"");
    return new_rule(path + "-key", alts);
  }

  std::string array_expr(const ojson& s, const std::string& path) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail_at(path, "'prefixItems' must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(expr(s["prefixItems"][i], cat(path, "/prefixItems/", i)));
    }
    std::string item = "json-value";
    if (s.contains("items")) {
      const ojson& it = s["items"];
      if (it.is_array()) fail_at(path, "'items' as an array (draft 4-7 tuples) is not supported: use 'prefixItems'");
      if (it.is_boolean()) item = it.get<bool>() ? "json-value" : "";
      else item = expr(it, path + "/items");
    }
    int64_t lo = s.contains("minItems") ? count(s, "minItems", path) : 0;
    int64_t hi = s.contains("maxItems") ? count(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo) fail_at(path, "'maxItems' is below 'minItems'");
    int64_t k = int64_t(prefix.size());
    // After the prefix: extra items, count in [max(0, lo - k), hi - k].
    std::string rest;
    int64_t rlo = std::max<int64_t>(0, lo - k), rhi = hi < 0 ? -1 : std::max<int64_t>(0, hi - k);
    if (item.empty() || rhi == 0) {
      if (rlo > 0) fail_at(path, "'minItems' cannot be met with the allowed items");
      rest = "\"\"";
    } else if (k > 0) {
      rest = "(\",\"" + w_ + item + w_ + ")" + (rhi < 0 ? cat("{", rlo, ",}") : cat("{", rlo, ",", rhi, "}"));
    } else {
      std::string more = "(\",\"" + w_ + item + w_ + ")" +
                         (rhi < 0 ? cat("{", std::max<int64_t>(0, rlo - 1), ",}")
                                  : cat("{", std::max<int64_t>(0, rlo - 1), ",", rhi - 1, "}"));
      rest = rlo > 0 ? item + w_ + more : "(" + item + w_ + more + ")?";
    }
    std::string next = new_rule(path + "-items", rest);
    // Prefix items i.. as rules p(i): "," value_i p(i+1), optional when i >= lo.
    for (int64_t i = k; i-- > 0;) {
      if (hi >= 0 && i >= hi) continue;
      std::string take = (i > 0 ? "\",\"" + w_ : "") + prefix[size_t(i)] + w_ + next;
      next = new_rule(path + "-prefix", i >= lo ? take + " | \"\"" : take);
    }
    if (hi >= 0 && hi < k) {
      // Only the first hi prefix items may appear; rebuild without the rest.
      next = "\"\"";
      for (int64_t i = hi; i-- > 0;) {
        std::string take = (i > 0 ? "\",\"" + w_ : "") + prefix[size_t(i)] + w_ + next;
        next = new_rule(path + "-prefix", i >= lo ? take + " | \"\"" : take);
      }
    }
    return new_rule(path + "-array", "\"[\"" + w_ + next + " \"]\"");
  }

  std::string ref(const ojson& r, const std::string& path) {
    if (!r.is_string()) fail_at(path, "'$ref' must be a string");
    std::string target = r.get<std::string>();
    if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return it->second;
    std::string name;
    for (const char* base : {"#/$defs/", "#/definitions/"}) {
      std::string b = base;
      if (target.rfind(b, 0) == 0 && target.find('/', b.size()) == std::string::npos) {
        std::string def = target.substr(b.size());
        const ojson& defs = root_.value(b.substr(2, b.size() - 3), ojson());
        if (!defs.is_object() || !defs.contains(def))
          fail_at(path, "'$ref' target '", target, "' does not exist");
        // Reserve the rule first so that recursive references find it.
        name = new_rule("ref-" + def, "\"\"");
        ref_rules_[target] = name;
        std::string body = expr(defs[def], target.substr(1));
        rules_[name] = body;
        return name;
      }
    }
    fail_at(path, "'$ref' to '", target, "' is not supported (only #/$defs/NAME and #/definitions/NAME)");
  }

  const ojson& root_;
  const std::string w_;  // " json-ws " where whitespace may stand, " " in canonical form
  const std::string prefix_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  int depth_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json, JsonWhitespace ws) {
  ojson schema = ojson::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) fail("json schema: not valid JSON");
  return SchemaCompiler(schema, ws).compile();
}

std::string json_value_rules(const std::vector<JsonValueRule>& rules, JsonWhitespace ws) {
  std::string out;
  for (const JsonValueRule& r : rules) {
    ojson schema = ojson::parse(r.schema_json, nullptr, false);
    if (schema.is_discarded()) fail("json schema: not valid JSON");
    out += SchemaCompiler(schema, ws, r.name + "-").compile_rule(r.name, r.pointer);
  }
  return out + json_rules(ws == JsonWhitespace::kFlexible ? " json-ws " : " ") + kFormatRules;
}

Grammar from_json_schema(std::string_view schema_json, JsonWhitespace ws) {
  return from_gbnf(json_schema_to_gbnf(schema_json, ws));
}

Grammar json_object_grammar(JsonWhitespace ws) { return from_json_schema(R"({"type": "object"})", ws); }

}  // namespace strata::grammar
