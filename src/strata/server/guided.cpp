#include "strata/server/guided.h"

#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/grammar/json_schema.h"
#include "strata/server/api_error.h"
#include "strata/server/protocol.h"
#include "strata/server/xml_tool_grammar.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

namespace {

const Json* member(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& v) {
  throw bad_request("'" + param + "' must be " + expected + ", got " + type_name(v), param);
}

// Runs a grammar front end; its Error (naming the feature) becomes a 400 for `param`.
template <class F>
std::shared_ptr<const grammar::Grammar> compile(const std::string& param, F&& f) {
  try {
    return std::make_shared<const grammar::Grammar>(f());
  } catch (const Error& e) {
    throw bad_request("'" + param + "': " + e.what(), param);
  }
}

// A JSON schema given as an object (or, as vLLM allows for guided_json, as JSON text).
std::shared_ptr<const grammar::Grammar> schema_grammar(const std::string& param, const Json& schema,
                                                       grammar::JsonWhitespace ws) {
  std::string text;
  if (schema.is_string()) text = schema.get<std::string>();
  else if (schema.is_object() || schema.is_boolean()) text = schema.dump();
  else wrong_type(param, "a JSON schema (an object)", schema);
  return compile(param, [&] { return grammar::from_json_schema(text, ws); });
}

std::string string_value(const std::string& param, const Json& v) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get<std::string>();
}

std::shared_ptr<const grammar::Grammar> choices(const std::string& param, const Json& v) {
  if (!v.is_array() || v.empty()) wrong_type(param, "a non-empty array of strings", v);
  std::vector<std::string> list;
  for (const Json& c : v) {
    if (!c.is_string() || c.get<std::string>().empty()) {
      throw bad_request("'" + param + "' must hold non-empty strings", param);
    }
    list.push_back(c.get<std::string>());
  }
  return compile(param, [&] { return choice_grammar(list); });
}

std::shared_ptr<const grammar::Grammar> response_format(const Json& rf, grammar::JsonWhitespace ws) {
  if (!rf.is_object()) wrong_type("response_format", "an object", rf);
  const Json* type = member(rf, "type");
  if (!type || !type->is_string()) {
    throw bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                      "response_format.type");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return compile("response_format", [&] { return grammar::json_object_grammar(ws); });
  if (t != "json_schema") {
    throw bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got '" +
                          t + "'", "response_format.type");
  }
  const Json* js = member(rf, "json_schema");
  if (!js || !js->is_object()) {
    throw bad_request("'response_format.json_schema' must be an object with 'name' and 'schema'",
                      "response_format.json_schema");
  }
  const Json* name = member(*js, "name");
  if (!name || !name->is_string()) {
    throw bad_request("'response_format.json_schema.name' must be a string", "response_format.json_schema.name");
  }
  if (const Json* strict = member(*js, "strict"); strict && !strict->is_boolean()) {
    wrong_type("response_format.json_schema.strict", "a boolean", *strict);
  }
  // Without a schema, any JSON object (as vLLM does).
  const Json* schema = member(*js, "schema");
  if (!schema) return compile("response_format", [&] { return grammar::json_object_grammar(ws); });
  return schema_grammar("response_format.json_schema.schema", *schema, ws);
}

std::shared_ptr<const grammar::Grammar> structured_outputs(const Json& so, grammar::JsonWhitespace ws) {
  if (!so.is_object()) wrong_type("structured_outputs", "an object", so);
  std::shared_ptr<const grammar::Grammar> g;
  int count = 0;
  for (auto it = so.begin(); it != so.end(); ++it) {
    // Named references, not structured bindings: lambdas below capture them (clang 14 refuses
    // to capture a binding).
    const std::string& key = it.key();
    const Json& value = it.value();
    if (value.is_null()) continue;
    const std::string param = "structured_outputs." + key;
    if (key == "json") g = schema_grammar(param, value, ws);
    else if (key == "regex") g = compile(param, [&] { return grammar::from_regex(string_value(param, value)); });
    else if (key == "choice") g = choices(param, value);
    else if (key == "grammar") g = compile(param, [&] { return grammar::from_gbnf(string_value(param, value)); });
    else if (key == "json_object") {
      if (!value.is_boolean()) wrong_type(param, "a boolean", value);
      if (!value.get<bool>()) continue;
      g = compile(param, [&] { return grammar::json_object_grammar(ws); });
    } else if (key == "disable_any_whitespace") {
      continue;  // read by json_whitespace()
    } else if (key == "disable_fallback" || key == "disable_additional_properties" ||
               key == "whitespace_pattern") {
      continue;  // backend options of vLLM's that do not apply here
    } else {
      throw bad_request("'" + param + "' is not supported (json, regex, choice, grammar and json_object are)",
                        param);
    }
    ++count;
  }
  if (count > 1) {
    throw bad_request("'structured_outputs' may set only one of json, regex, choice, grammar and json_object",
                      "structured_outputs");
  }
  return g;
}

}  // namespace

grammar::JsonWhitespace json_whitespace(const Json& b) {
  const Json* so = member(b, "structured_outputs");
  const Json* off = so && so->is_object() ? member(*so, "disable_any_whitespace") : nullptr;
  if (!off) return grammar::JsonWhitespace::kFlexible;
  if (!off->is_boolean()) wrong_type("structured_outputs.disable_any_whitespace", "a boolean", *off);
  return off->get<bool>() ? grammar::JsonWhitespace::kNone : grammar::JsonWhitespace::kFlexible;
}

std::shared_ptr<const grammar::Grammar> tool_call_grammar(const Json& tools, const std::string& name,
                                                          bool parallel, grammar::JsonWhitespace ws,
                                                          ToolCallFormat format) {
  const char* root = parallel ? "root ::= tool-call (\"\\n\" tool-call)*\n" : "root ::= tool-call\n";
  if (format == ToolCallFormat::kQwen3CoderXml) {
    const std::string rules = xml_tool_call_rules(tools, name, ws);  // 400s of its own
    return compile("tool_choice", [&] { return grammar::from_gbnf(root + rules); });
  }
  Json calls = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i]["function"];
    const std::string fname = fn["name"].get<std::string>();
    if (!name.empty() && fname != name) continue;
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    Json params = Json{{"type", "object"}};
    if (const Json* p = member(fn, "parameters")) {
      if (!p->is_object()) wrong_type(param, "a JSON schema (an object)", *p);
      params = *p;
    }
    schema_grammar(param, params, ws);  // its own errors, named by the tool
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", fname}}}, {"arguments", params}}},
                     {"required", {"name", "arguments"}},
                     {"additionalProperties", false}});
  }
  const Json schema = calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}};
  return compile("tool_choice", [&] {
    std::string gbnf = grammar::json_schema_to_gbnf(schema.dump(), ws);
    gbnf.replace(0, 4, "tool-call-json");  // its first rule is `root ::= `
    return grammar::from_gbnf(root + std::string("tool-call ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n") +
                              gbnf);
  });
}

grammar::Grammar choice_grammar(const std::vector<std::string>& list) {
  grammar::GrammarBuilder b;
  const int32_t root = b.rule("root");
  for (const std::string& c : list) b.add_alternative(root, grammar::GrammarBuilder::literal(c));
  return b.build(root);
}

std::shared_ptr<const grammar::Grammar> parse_guided(const Json& b) {
  const grammar::JsonWhitespace ws = json_whitespace(b);
  std::shared_ptr<const grammar::Grammar> g;
  std::string first;
  auto take = [&](const char* param, std::shared_ptr<const grammar::Grammar> x) {
    if (!x) return;
    if (g) {
      throw bad_request("'" + std::string(param) + "' and '" + first +
                            "' both constrain the output; give only one", param);
    }
    g = std::move(x);
    first = param;
  };
  if (const Json* v = member(b, "response_format")) take("response_format", response_format(*v, ws));
  if (const Json* v = member(b, "guided_json")) take("guided_json", schema_grammar("guided_json", *v, ws));
  if (const Json* v = member(b, "guided_regex")) {
    take("guided_regex", compile("guided_regex", [&] { return grammar::from_regex(string_value("guided_regex", *v)); }));
  }
  if (const Json* v = member(b, "guided_choice")) take("guided_choice", choices("guided_choice", *v));
  if (const Json* v = member(b, "guided_grammar")) {
    take("guided_grammar",
         compile("guided_grammar", [&] { return grammar::from_gbnf(string_value("guided_grammar", *v)); }));
  }
  if (const Json* v = member(b, "structured_outputs")) take("structured_outputs", structured_outputs(*v, ws));
  return g;
}

}  // namespace strata::server
