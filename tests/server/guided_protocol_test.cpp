// Structured-output request fields (server/guided.h): each form gives the grammar it names
// (checked by what the grammar accepts), errors are 400s naming the field and, for unsupported
// schema or regex features, the feature.
#include <gtest/gtest.h>

#include <string>

#include "strata/grammar/matcher.h"
#include "strata/server/guided.h"
#include "strata/server/protocol.h"
#include "strata/server/tool_parser.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;
const RequestLimits kLimits;

std::shared_ptr<const grammar::Grammar> chat_grammar(const std::string& extra) {
  const Json b = parse_body(R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}", kLimits);
  return parse_chat_request(b, kLimits).gen.grammar;
}
std::shared_ptr<const grammar::Grammar> cmp_grammar(const std::string& extra) {
  const Json b = parse_body(R"({"prompt": "hi")" + extra + "}", kLimits);
  return parse_completion_request(b, kLimits).gen.grammar;
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.accept_token(text) && m.can_end();
}

ApiError error_of(const std::string& extra) {
  try {
    cmp_grammar(extra);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << extra;
  return ApiError(0, "");
}

TEST(GuidedProtocol, NoneAndText) {
  EXPECT_EQ(cmp_grammar(""), nullptr);
  EXPECT_EQ(chat_grammar(R"(, "response_format": {"type": "text"})"), nullptr);
  EXPECT_EQ(cmp_grammar(R"(, "structured_outputs": {"json_object": false})"), nullptr);
}

TEST(GuidedProtocol, EachFormGivesItsGrammar) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false})";
  for (const std::string& extra :
       {std::string(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": )") + schema + "}}",
        std::string(R"(, "guided_json": )") + schema,
        std::string(R"(, "guided_json": )") + Json(schema).dump(),  // as JSON text
        std::string(R"(, "structured_outputs": {"json": )") + schema + "}"}) {
    for (auto g : {chat_grammar(extra), cmp_grammar(extra)}) {
      ASSERT_NE(g, nullptr) << extra;
      EXPECT_TRUE(accepts(g, R"({"a":12})")) << extra;
      EXPECT_FALSE(accepts(g, R"({"a":"x"})")) << extra;
      EXPECT_FALSE(accepts(g, R"({"b":1})")) << extra;
    }
  }
  auto obj = chat_grammar(R"(, "response_format": {"type": "json_object"})");
  EXPECT_TRUE(accepts(obj, R"({"k":[1,{"z":null}]})"));
  EXPECT_FALSE(accepts(obj, "[1]"));
  EXPECT_TRUE(accepts(cmp_grammar(R"(, "structured_outputs": {"json_object": true})"), "{}"));
  for (auto g : {cmp_grammar(R"(, "guided_regex": "[a-c]{2}\\d")"),
                 cmp_grammar(R"(, "structured_outputs": {"regex": "[a-c]{2}\\d"})")}) {
    EXPECT_TRUE(accepts(g, "ab7"));
    EXPECT_FALSE(accepts(g, "ad7"));
  }
  for (auto g : {cmp_grammar(R"(, "guided_choice": ["yes", "no way"])"),
                 cmp_grammar(R"(, "structured_outputs": {"choice": ["yes", "no way"]})")}) {
    EXPECT_TRUE(accepts(g, "yes"));
    EXPECT_TRUE(accepts(g, "no way"));
    EXPECT_FALSE(accepts(g, "no"));
  }
  for (auto g : {cmp_grammar(R"(, "guided_grammar": "root ::= \"x\" [0-9]+")"),
                 cmp_grammar(R"(, "structured_outputs": {"grammar": "root ::= \"x\" [0-9]+"})")}) {
    EXPECT_TRUE(accepts(g, "x42"));
    EXPECT_FALSE(accepts(g, "x"));
  }
}

TEST(GuidedProtocol, ErrorsNameFieldAndFeature) {
  struct C {
    std::string extra, param, text;
  };
  for (const C& c : std::vector<C>{
           {R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}})",
            "response_format.json_schema.schema", "unsupported keyword 'pattern'"},
           {R"(, "guided_json": {"type": "integer", "minimum": 3})", "guided_json", "'minimum'"},
           {R"(, "guided_regex": "(a)\\1")", "guided_regex", "backreferences"},
           {R"(, "guided_grammar": "root ::= \"x")", "guided_grammar", "unterminated string literal"},
           {R"(, "guided_choice": [])", "guided_choice", "non-empty array"},
           {R"(, "guided_choice": ["a", 3])", "guided_choice", "non-empty strings"},
           {R"(, "response_format": {"type": "yaml"})", "response_format.type", "'yaml'"},
           {R"(, "response_format": "json")", "response_format", "an object"},
           {R"(, "response_format": {"type": "json_schema"})", "response_format.json_schema", "'name'"},
           {R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}})",
            "response_format.json_schema.name", "a string"},
           {R"(, "response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex", "only one"},
           {R"(, "structured_outputs": {"regex": "a", "choice": ["a"]})", "structured_outputs", "only one"},
           {R"(, "structured_outputs": {"structural_tag": "x"})", "structured_outputs.structural_tag", "not supported"},
       }) {
    const ApiError e = error_of(c.extra);
    EXPECT_EQ(e.status(), 400) << c.extra;
    EXPECT_EQ(e.param(), c.param) << c.extra << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.text), std::string::npos) << c.extra << ": " << e.what();
  }
}

const char kTwoTools[] = R"(, "tools": [
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "noop"}}])";

TEST(GuidedProtocol, ToolChoiceForcesHermesCalls) {
  const std::string weather = "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>";
  const std::string noop = "<tool_call>\n{\"name\":\"noop\",\"arguments\":{\"x\":[1]}}\n</tool_call>";
  auto named = chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  ASSERT_NE(named, nullptr);
  EXPECT_TRUE(accepts(named, weather));
  EXPECT_FALSE(accepts(named, noop));
  EXPECT_FALSE(accepts(named, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":1}}\n</tool_call>"));
  auto required = chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": "required")");
  EXPECT_TRUE(accepts(required, weather));
  EXPECT_TRUE(accepts(required, noop));
  EXPECT_FALSE(accepts(required, "Oslo"));
  EXPECT_EQ(chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": "auto")"), nullptr);
  // A tool schema the grammar refuses, and a second constraint, are 400s naming the field.
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "minProperties": 1}}}], "tool_choice": "required")",
            "tools[0].function.parameters"},
           {std::string(kTwoTools) + R"(, "tool_choice": "required", "guided_regex": "a")", "tool_choice"}}) {
    try {
      chat_grammar(extra);
      ADD_FAILURE() << "no error for " << extra;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << e.what();
    }
  }
}

// As the Qwen3 / Hermes templates write calls, and as ToolCallParser reads them.
std::string hermes(const std::string& json) { return "<tool_call>\n" + json + "\n</tool_call>"; }

TEST(GuidedProtocol, RequiredToolChoiceTakesOneOrMoreCalls) {
  const std::string w = hermes(R"({"name": "get_weather", "arguments": {"city": "Oslo"}})");
  const std::string n = hermes(R"({"name":"noop","arguments":{"x":[1, 2]}})");
  const std::string bad = hermes(R"({"name": "get_weather", "arguments": {"city": 1}})");
  auto parallel = chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": "required")");
  auto explicit_parallel = chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": "required", "parallel_tool_calls": true)");
  for (const auto& g : {parallel, explicit_parallel}) {
    EXPECT_TRUE(accepts(g, w));
    EXPECT_TRUE(accepts(g, w + "\n" + n));
    EXPECT_TRUE(accepts(g, n + "\n" + w + "\n" + w));
    EXPECT_FALSE(accepts(g, ""));                        // no call
    EXPECT_FALSE(accepts(g, w + "\n" + bad));            // a malformed second call
    EXPECT_FALSE(accepts(g, w + "\n<tool_call>\n{}"));   // cut off
    EXPECT_FALSE(accepts(g, w + n));                      // no separator
    EXPECT_FALSE(accepts(g, w + "\n\n" + n));             // the templates' separator only
    EXPECT_FALSE(accepts(g, w + "\n"));
    grammar::GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_token(w));
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.is_terminated());  // another call may follow
  }
  // What the grammar takes, the tool parser reads as as many calls, with no content left over.
  const std::string pretty = hermes("{\n  \"name\": \"noop\",\n  \"arguments\": {\n    \"x\": [ 1 ]\n  }\n}");
  ASSERT_TRUE(accepts(parallel, w + "\n" + pretty + "\n" + n));
  for (const std::string& text : {w + "\n" + pretty + "\n" + n, n + "\n" + w}) {
    ToolCallParser parser;
    ToolCallParser::Delta d = parser.push(text);
    const ToolCallParser::Delta end = parser.finish();
    d.content += end.content;
    d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
    EXPECT_EQ(d.content, "") << text;
    EXPECT_EQ(parser.num_calls(), text == n + "\n" + w ? 2 : 3) << text;
    std::vector<std::string> names, args;
    for (const ToolCallDelta& c : d.calls) {
      if (!c.name.empty()) names.push_back(c.name), args.emplace_back();
      if (!args.empty()) args.back() += c.arguments;
    }
    if (names.size() == 3) {
      EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "noop", "noop"}));
      EXPECT_EQ(args, (std::vector<std::string>{R"({"city": "Oslo"})", R"({"x": [1]})", R"({"x": [1, 2]})"}));
    }
  }
  auto one = chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  EXPECT_TRUE(accepts(one, w));
  EXPECT_FALSE(accepts(one, w + "\n" + n));
  grammar::GrammarMatcher m(one);
  ASSERT_TRUE(m.accept_token(n));
  EXPECT_TRUE(m.is_terminated());
  // A named function: exactly one call, whatever parallel_tool_calls says.
  for (const char* parallel_field : {"", R"(, "parallel_tool_calls": true)"}) {
    auto named = chat_grammar(std::string(kTwoTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})" +
                              parallel_field);
    EXPECT_TRUE(accepts(named, w));
    EXPECT_FALSE(accepts(named, w + "\n" + w));
  }
  // vLLM's switch: canonical JSON only.
  auto compact = chat_grammar(std::string(kTwoTools) +
                              R"(, "tool_choice": "required", "structured_outputs": {"disable_any_whitespace": true})");
  EXPECT_FALSE(accepts(compact, w));
  EXPECT_TRUE(accepts(compact, hermes(R"({"name":"get_weather","arguments":{"city":"Oslo"}})")));
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {std::string(kTwoTools) + R"(, "tool_choice": "required", "parallel_tool_calls": "yes")", "parallel_tool_calls"},
           {std::string(kTwoTools) + R"(, "parallel_tool_calls": 1)", "parallel_tool_calls"},
           {R"(, "structured_outputs": {"disable_any_whitespace": "true"})", "structured_outputs.disable_any_whitespace"}}) {
    try {
      chat_grammar(extra);
      ADD_FAILURE() << "no error for " << extra;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << e.what();
    }
  }
}

TEST(GuidedProtocol, JsonWhitespaceIsFlexibleUnlessDisabled) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"array"}},"additionalProperties":false})";
  const std::string pretty = "{\n  \"a\": [1, 2]\n}";
  for (const std::string& extra :
       {std::string(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": )") + schema + "}}",
        std::string(R"(, "response_format": {"type": "json_object"})"), std::string(R"(, "guided_json": )") + schema,
        std::string(R"(, "structured_outputs": {"json": )") + schema + "}",
        std::string(R"(, "structured_outputs": {"json_object": true})")}) {
    EXPECT_TRUE(accepts(chat_grammar(extra), pretty)) << extra;
    EXPECT_TRUE(accepts(chat_grammar(extra), R"({"a":[1,2]})")) << extra;
  }
  for (const std::string& extra :
       {std::string(R"(, "structured_outputs": {"json": )") + schema + R"(, "disable_any_whitespace": true})",
        std::string(R"(, "structured_outputs": {"disable_any_whitespace": true}, "guided_json": )") + schema,
        std::string(R"(, "structured_outputs": {"disable_any_whitespace": true}, "response_format": {"type": "json_object"})")}) {
    auto g = chat_grammar(extra);
    EXPECT_FALSE(accepts(g, pretty)) << extra;
    EXPECT_TRUE(accepts(g, R"({"a":[1,2]})")) << extra;
  }
  EXPECT_TRUE(accepts(chat_grammar(std::string(R"(, "structured_outputs": {"disable_any_whitespace": false, "json": )") + schema + "}"),
                      pretty));
}

}  // namespace
}  // namespace strata::server
