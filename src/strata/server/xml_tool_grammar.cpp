#include "strata/server/xml_tool_grammar.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/server/api_error.h"
#include "strata/server/tool_parser.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

// A GBNF literal of the bytes.
std::string literal(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      out += cat("\\x", "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What ends an XML value for the parser, and so may not stand inside one.
bool holds_a_tag(const std::string& s) {
  for (const char* tag : {"</parameter>", "<parameter=", "</function>", "</tool_call>"}) {
    if (s.find(tag) != std::string::npos) return true;
  }
  return false;
}

class XmlCallRules {
 public:
  explicit XmlCallRules(grammar::JsonWhitespace ws) : ws_(ws) {}

  std::string build(const Json& tools, const std::string& only) {
    std::vector<std::string> calls;
    for (size_t i = 0; i < tools.size(); ++i) {
      const Json& fn = tools[i]["function"];
      const std::string name = fn["name"].get<std::string>();
      if (!only.empty() && name != only) continue;
      calls.push_back(function(i, name, fn));
    }
    std::string out = "tool-call ::= \"<tool_call>\\n\" (";
    for (size_t i = 0; i < calls.size(); ++i) out += (i ? " | " : " ") + calls[i];
    out += " ) \"</tool_call>\"\n" + rules_;
    return out + grammar::json_value_rules(json_, ws_);
  }

 private:
  [[noreturn]] static void refuse(const std::string& param, const std::string& what) {
    throw bad_request("'" + param + "': " + what + " (the model's Qwen3-Coder XML tool calls)", param);
  }

  static void check_name(const std::string& param, const std::string& name) {
    if (name.empty() || name.size() > 256 || name.find_first_of("<>\n") != std::string::npos) {
      refuse(param, "the name '" + name + "' cannot stand in a tag (empty, over 256 bytes, or with <, > or a newline)");
    }
  }

  std::string function(size_t i, const std::string& name, const Json& fn) {
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    check_name("tools[" + std::to_string(i) + "].function.name", name);
    std::string body = literal("<function=" + name + ">\n");
    auto p = fn.find("parameters");
    if (p != fn.end() && !p->is_null()) {
      if (!p->is_object()) refuse(param, "must be a JSON schema (an object)");
      for (const auto& [key, _] : p->items()) {
        static const std::vector<std::string> kKnown = {
            "type", "properties", "required", "additionalProperties", "$defs", "definitions", "title",
            "description", "$schema", "$id", "$comment", "default", "examples"};
        if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
          refuse(param, "unsupported keyword '" + key + "'");
        }
      }
      if (p->contains("type") && (*p)["type"] != "object") refuse(param, "'type' must be \"object\"");
      std::vector<std::string> required;
      if (auto r = p->find("required"); r != p->end()) {
        if (!r->is_array()) refuse(param, "'required' must be an array");
        for (const Json& x : *r) {
          if (!x.is_string()) refuse(param, "'required' entries must be strings");
          required.push_back(x.get<std::string>());
        }
      }
      const Json props = p->value("properties", Json::object());
      if (!props.is_object()) refuse(param, "'properties' must be an object");
      for (const std::string& r : required) {
        if (!props.contains(r)) refuse(param, "required property '" + r + "' is not in 'properties'");
      }
      const std::string schema_text = p->dump();
      for (const auto& [pname, sub] : props.items()) {
        const std::string at = param + ".properties." + pname;
        check_name(at, pname);
        const std::string value = value_rule(at, schema_text, "/properties/" + pointer_escape(pname), sub);
        const std::string one = literal("<parameter=" + pname + ">\n") + " " + value + " " +
                                literal("\n</parameter>\n");
        const bool must = std::find(required.begin(), required.end(), pname) != required.end();
        body += must ? " " + one : " (" + one + ")?";
      }
    }
    return new_rule("fn", body + " " + literal("</function>\n"));
  }

  static std::string pointer_escape(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }

  // The rule of one parameter's value text.
  std::string value_rule(const std::string& param, const std::string& schema_text, const std::string& pointer,
                         const Json& sub) {
    const std::string type = xml_parameter_type(sub);
    if (type == "boolean" && sub.is_object() && sub.value("type", Json()) == "boolean") {
      bool plain = true;  // no keyword but the type and annotations
      for (const auto& [key, _] : sub.items()) {
        plain = plain && (key == "type" || key == "title" || key == "description" || key == "default" ||
                          key == "examples" || key == "$comment");
      }
      // As the Qwen3.5 template writes a boolean (Python's str: True, False) and as JSON does;
      // the parser reads either.
      if (plain) return new_rule("bool", "\"true\" | \"false\" | \"True\" | \"False\"");
    }
    if (type != "string") {
      const std::string name = cat("xml-json-", ++count_);  // json_value_rules writes it
      json_.push_back({name, schema_text, pointer});
      try {
        grammar::json_value_rules({json_.back()}, ws_);  // its errors here, named by the parameter
      } catch (const Error& e) {
        throw bad_request("'" + param + "': " + e.what(), param);
      }
      return name;
    }
    if (!sub.is_object()) refuse(param, "must be a JSON schema (an object)");
    int64_t lo = 0, hi = -1;
    std::vector<std::string> values;
    for (const auto& [key, v] : sub.items()) {
      if (key == "title" || key == "description" || key == "default" || key == "examples" || key == "$comment") continue;
      if (key == "type") {
        if (v != "string") refuse(param, "a type list with \"string\" is not supported");
      } else if (key == "minLength" || key == "maxLength") {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 10000) {
          refuse(param, "'" + key + "' must be an integer from 0 to 10000");
        }
        (key == "minLength" ? lo : hi) = v.get<int64_t>();
      } else if (key == "enum" || key == "const") {
        const Json list = key == "enum" ? v : Json::array({v});
        if (!list.is_array() || list.empty()) refuse(param, "'enum' must be a non-empty array");
        for (const Json& x : list) {
          if (!x.is_string()) refuse(param, "'" + key + "' values other than strings need a 'type'");
          const std::string s = x.get<std::string>();
          if (lower(s) == "null" || holds_a_tag(s)) {
            refuse(param, "the value '" + s + "' cannot be written as XML parameter text");
          }
          values.push_back(s);
        }
      } else {
        refuse(param, "unsupported keyword '" + key + "' for a string parameter");
      }
    }
    if (!values.empty()) {
      if (sub.contains("minLength") || sub.contains("maxLength")) refuse(param, "'enum' with 'minLength'/'maxLength' is not supported");
      std::string alts;
      for (size_t i = 0; i < values.size(); ++i) alts += (i ? " | " : "") + literal(values[i]);
      return new_rule("enum", alts);
    }
    if (hi >= 0 && hi < lo) refuse(param, "'maxLength' is below 'minLength'");
    return text_rule(lo, hi);
  }

  // Text of lo..hi units (hi < 0: no bound), never "null" in any case. Unbounded text may hold
  // "<" before anything but "/", "p" or "<"; bounded text counts characters, none of them "<".
  std::string text_rule(int64_t lo, int64_t hi) {
    const bool bounded = lo > 0 || hi >= 0;
    const std::string unit = bounded ? "[^<]" : unbounded_unit("");
    auto unit_not = [&](const char* c) { return bounded ? cat("[^<", c, "]") : unbounded_unit(c); };
    auto reps = [&](int64_t a, int64_t b) {  // units{a,b}, b < 0 unbounded; "" when empty
      if (b >= 0 && b < a) return std::string();
      return "(" + unit + ")" + (b < 0 ? cat("{", a, ",}") : cat("{", a, ",", b, "}"));
    };
    std::vector<std::string> alts;
    if (lo <= 3) alts.push_back(reps(lo, hi < 0 ? 3 : std::min<int64_t>(hi, 3)));
    if (lo <= 4 && (hi < 0 || hi >= 4)) {
      alts.push_back(unit_not("nN") + " " + reps(3, 3) + " | [nN] " + unit_not("uU") + " " + reps(2, 2) +
                     " | [nN] [uU] " + unit_not("lL") + " " + reps(1, 1) + " | [nN] [uU] [lL] " + unit_not("lL"));
    }
    if (hi < 0 || hi >= 5) alts.push_back(reps(std::max<int64_t>(lo, 5), hi));
    std::string body;
    for (const std::string& a : alts) {
      if (!a.empty()) body += (body.empty() ? "" : " | ") + ("(" + a + ")");
    }
    return new_rule("text", body);
  }

  // One unit of unbounded text: a character other than "<" (and those in `not_c`), or "<" and a
  // character that cannot continue a tag the parser looks for.
  std::string unbounded_unit(const char* not_c) {
    return cat("([^<", not_c, "] | \"<\" [^/p<])");
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    const std::string name = cat("xml-", hint, "-", ++count_);
    rules_ += name + " ::= " + body + "\n";
    return name;
  }

  grammar::JsonWhitespace ws_;
  std::string rules_;
  std::vector<grammar::JsonValueRule> json_;
  int count_ = 0;
};

}  // namespace

std::string xml_tool_call_rules(const Json& tools, const std::string& only, grammar::JsonWhitespace ws) {
  return XmlCallRules(ws).build(tools, only);
}

}  // namespace strata::server
