// Forced tool calls in the Qwen3-Coder XML format (server/xml_tool_grammar.h): the grammar takes
// the calls the default model's own chat template writes, what it takes the tool parser reads
// as schema-valid arguments, and what the format cannot carry is a 400 naming the parameter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/grammar/matcher.h"
#include "strata/server/guided.h"
#include "strata/server/protocol.h"
#include "strata/server/tool_parser.h"
#include "strata/tokenizer/chat_template.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;
const RequestLimits kLimits;

const char kTools[] = R"(, "tools": [
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                    "note": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                    "exact": {"type": "boolean"}},
     "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "noop"}}])";

std::shared_ptr<const grammar::Grammar> xml_grammar(const std::string& extra) {
  const Json b = parse_body(R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}", kLimits);
  return parse_chat_request(b, kLimits, ToolCallFormat::kQwen3CoderXml).gen.grammar;
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.accept_token(text) && m.can_end();
}

// One call as the Qwen3.5 template writes it.
std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [p, v] : params) out += "<parameter=" + p + ">\n" + v + "\n</parameter>\n";
  return out + "</function>\n</tool_call>";
}

// The calls' arguments as the tool parser reads `text`, with what it leaves as content.
std::vector<Json> parsed_arguments(const std::string& tools_extra, const std::string& text, std::string* content) {
  const Json tools = Json::parse("{" + tools_extra.substr(1) + "}")["tools"];
  ToolCallParser parser(tool_param_types(tools));
  ToolCallParser::Delta d = parser.push(text);
  const ToolCallParser::Delta end = parser.finish();
  *content = d.content + end.content;
  d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
  std::vector<std::string> args;
  for (const ToolCallDelta& c : d.calls) {
    if (!c.name.empty()) args.emplace_back();
    args.back() += c.arguments;
  }
  std::vector<Json> out;
  for (const std::string& a : args) out.push_back(Json::parse(a));
  return out;
}

TEST(XmlToolGrammar, TakesTheCallsTheTemplateWrites) {
  auto required = xml_grammar(std::string(kTools) + R"(, "tool_choice": "required")");
  auto named = xml_grammar(std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  ASSERT_NE(required, nullptr);
  const std::string w = call("get_weather", {{"city", "Oslo"}, {"days", "3"}});
  const std::string full = call("get_weather", {{"city", "Rome"}, {"unit", "celsius"}, {"days", "12"},
                                                {"note", "a < b,\nand <i>two lines"}, {"tags", "[\"a\", \"b\"]"},
                                                {"exact", "true"}});
  const std::string noop = "<tool_call>\n<function=noop>\n</function>\n</tool_call>";
  for (const auto& g : {required, named}) {
    EXPECT_TRUE(accepts(g, w));
    EXPECT_TRUE(accepts(g, full));
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}})));                         // days is required
    EXPECT_FALSE(accepts(g, call("get_weather", {{"days", "3"}, {"city", "Oslo"}})));           // the schema's order
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"days", "1.5"}})));         // not an integer
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"days", "three"}})));       // an integer
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", ""}, {"days", "3"}})));               // minLength
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Llanfairpwll"}, {"days", "3"}})));   // maxLength
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "a<b"}, {"days", "3"}})));            // bounded: no "<"
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "NULL"}, {"days", "3"}})));           // read as null
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"unit", "kelvin"}, {"days", "3"}})));
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"days", "3"}, {"note", "</parameter>"}})));
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"days", "3"}, {"note", "x <parameter=y>"}})));
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"days", "3"}, {"tags", "[1]"}})));
    EXPECT_FALSE(accepts(g, call("get_weather", {{"city", "Oslo"}, {"days", "3"}, {"other", "1"}})));
    EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>"));
  }
  EXPECT_TRUE(accepts(required, noop));
  EXPECT_FALSE(accepts(named, noop));
  EXPECT_TRUE(accepts(required, w + "\n" + noop));  // parallel calls by default, as the template separates them
  EXPECT_FALSE(accepts(named, w + "\n" + w));
  auto one = xml_grammar(std::string(kTools) + R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  EXPECT_FALSE(accepts(one, w + "\n" + noop));
  // Unbounded strings: any text but "null" (in any case), "<" allowed before other characters.
  for (const std::string& note : {"", "nul", "nulls", "Nulo", "<b>", "x</b", "a\n\nb"}) {
    const std::string c = call("get_weather", {{"city", "Oslo"}, {"days", "3"}, {"note", note}});
    const bool ok = note != "x</b";  // "</" cannot stand in a value
    EXPECT_EQ(accepts(required, c), ok) << note;
  }
  for (const std::string& note : {"null", "Null", "nULL"}) {
    EXPECT_FALSE(accepts(required, call("get_weather", {{"city", "Oslo"}, {"days", "3"}, {"note", note}}))) << note;
  }
}

TEST(XmlToolGrammar, WhatItTakesTheParserReadsAsTheSchemaSays) {
  auto g = xml_grammar(std::string(kTools) + R"(, "tool_choice": "required")");
  const std::string text =
      call("get_weather", {{"city", "Rome"}, {"unit", "celsius"}, {"days", "12"}, {"note", "a < b,\ntwo lines"},
                           {"tags", "[\n  \"a\",\n  \"b\"\n]"}, {"exact", "false"}}) +
      "\n" + "<tool_call>\n<function=noop>\n</function>\n</tool_call>" + "\n" +
      call("get_weather", {{"city", "nu"}, {"days", "1"}});
  ASSERT_TRUE(accepts(g, text));
  std::string content;
  const std::vector<Json> args = parsed_arguments(kTools, text, &content);
  EXPECT_EQ(content, "");
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0], Json::parse(R"({"city": "Rome", "unit": "celsius", "days": 12, "note": "a < b,\ntwo lines",
                                     "tags": ["a", "b"], "exact": false})"));
  EXPECT_EQ(args[1], Json::object());
  EXPECT_EQ(args[2], Json::parse(R"({"city": "nu", "days": 1})"));
}

TEST(XmlToolGrammar, TheDefaultModelsTemplateWritesWhatTheGrammarTakes) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/default";
  const ChatTemplateConfig cfg = load_chat_template_config(dir);
  const std::string& source = cfg.select(true);
  ASSERT_NE(source.find("<function="), std::string::npos) << "the default model's template writes XML calls";
  const ChatTemplate tmpl = ChatTemplate::compile(source);
  const Json tools = Json::parse("{" + std::string(kTools).substr(1) + "}")["tools"];
  Json inputs = {{"messages", Json::array({{{"role", "user"}, {"content", "weather?"}},
                                           {{"role", "assistant"}, {"content", ""},
                                            {"tool_calls", Json::array({
                                                {{"type", "function"}, {"function", {{"name", "get_weather"},
                                                  {"arguments", {{"city", "Oslo"}, {"unit", "celsius"}, {"days", 3},
                                                                 {"tags", {"a"}}, {"exact", true}}}}}},
                                                {{"type", "function"}, {"function", {{"name", "noop"}, {"arguments", Json::object()}}}}})}}})},
                 {"tools", tools}, {"add_generation_prompt", false}};
  const std::string text = tmpl.render(inputs);
  const size_t begin = text.find("<tool_call>\n<function=", text.rfind("<|im_start|>assistant"));
  const size_t end = text.rfind("</tool_call>");
  ASSERT_NE(begin, std::string::npos) << text;
  const std::string calls = text.substr(begin, end + std::string("</tool_call>").size() - begin);
  EXPECT_NE(calls.find("<parameter=exact>\nTrue\n"), std::string::npos) << calls;  // Python's bool
  auto g = xml_grammar(std::string(kTools) + R"(, "tool_choice": "required")");
  EXPECT_TRUE(accepts(g, calls)) << calls;
  std::string content;
  const std::vector<Json> args = parsed_arguments(kTools, calls, &content);
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0], inputs["messages"][1]["tool_calls"][0]["function"]["arguments"]);
}

TEST(XmlToolGrammar, WhatTheFormatCannotCarryIsA400NamingTheParameter) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "object", "properties": {"s": {"type": "string", "pattern": "a+"}}})", "tools[0].function.parameters.properties.s"},
      {R"({"type": "object", "properties": {"s": {"type": "string", "format": "date"}}})", "tools[0].function.parameters.properties.s"},
      {R"({"type": "object", "properties": {"s": {"enum": ["a", 1]}}})", "tools[0].function.parameters.properties.s"},
      {R"({"type": "object", "properties": {"s": {"enum": ["null"]}}})", "tools[0].function.parameters.properties.s"},
      {R"({"type": "object", "properties": {"s": {"type": ["string", "null"]}}})", "tools[0].function.parameters.properties.s"},
      {R"({"type": "object", "properties": {"s": {"anyOf": [{"type": "integer"}]}}})", "tools[0].function.parameters.properties.s"},
      {R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}})", "tools[0].function.parameters.properties.n"},
      {R"({"type": "object", "properties": {"a<b": {"type": "integer"}}})", "tools[0].function.parameters.properties.a<b"},
      {R"({"type": "object", "minProperties": 1})", "tools[0].function.parameters"},
      {R"({"type": "object", "required": ["x"]})", "tools[0].function.parameters"},
  };
  for (const auto& [params, param] : cases) {
    const std::string extra = R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": )" + params +
                              R"(}}], "tool_choice": "required")";
    try {
      xml_grammar(extra);
      ADD_FAILURE() << "no error for " << params;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << params;
      EXPECT_EQ(e.param(), param) << params << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace strata::server
