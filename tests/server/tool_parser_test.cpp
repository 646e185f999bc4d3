// The tool-call parser: Qwen3-Coder XML and Hermes JSON calls, schema-typed XML values as vLLM
// converts them, vLLM's streaming delta shape, and the same result however the text is cut.
#include "strata/server/tool_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

struct Call {
  std::string id, name, arguments;
};

struct Result {
  std::string content;
  std::vector<Call> calls;
};

// Feeds the chunks, checking the delta shape: a call's first delta has its id and name and empty
// arguments, the later ones only arguments, and calls come in index order.
Result run(const std::vector<std::string>& chunks, const ToolParamTypes& types = {}) {
  ToolCallParser p(types);
  Result r;
  auto add = [&](const ToolCallParser::Delta& d) {
    r.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.index == int(r.calls.size())) {
        EXPECT_EQ(c.id.rfind("call_", 0), 0u) << c.id;
        EXPECT_FALSE(c.name.empty());
        EXPECT_EQ(c.arguments, "");
        r.calls.push_back({c.id, c.name, ""});
      } else {
        EXPECT_EQ(c.index, int(r.calls.size()) - 1);
        EXPECT_EQ(c.id, "");
        EXPECT_EQ(c.name, "");
        if (!r.calls.empty()) r.calls.back().arguments += c.arguments;
      }
    }
  };
  for (const std::string& chunk : chunks) add(p.push(chunk));
  add(p.finish());
  EXPECT_EQ(p.num_calls(), int(r.calls.size()));
  return r;
}

Result run_whole(const std::string& text, const ToolParamTypes& types = {}) {
  return run({text}, types);
}

void expect_same(const Result& a, const Result& b, const std::string& how) {
  EXPECT_EQ(a.content, b.content) << how;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << how;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << how;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << how;
  }
}

// Every 1-char feed, every cut in two, and random chunkings give what one push gives.
void expect_cut_invariant(const std::string& text, const ToolParamTypes& types = {}) {
  const Result whole = run_whole(text, types);
  std::vector<std::string> chars;
  for (char c : text) chars.push_back(std::string(1, c));
  expect_same(whole, run(chars, types), "1-char chunks");
  for (size_t i = 0; i <= text.size(); ++i) {
    expect_same(whole, run({text.substr(0, i), text.substr(i)}, types),
                "cut at " + std::to_string(i));
  }
  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 9)(rng);
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    expect_same(whole, run(chunks, types), "random chunks, trial " + std::to_string(trial));
  }
}

const ToolParamTypes& weather_types() {
  static const ToolParamTypes types = tool_param_types(Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "ratio": {"type": "number"}, "tags": {"type": "array"}, "opts": {"type": "object"}}}}}
  ])"));
  return types;
}

const char kXmlCall[] =
    "<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n"
    "<parameter=metric>\nTrue\n</parameter>\n"
    "<parameter=ratio>\n0.5\n</parameter>\n"
    "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
    "<parameter=opts>\n{\"x\":1}\n</parameter>\n"
    "</function>\n</tool_call>";
const char kXmlArgs[] =
    R"({"city": "Paris", "days": 3, "metric": true, "ratio": 0.5, "tags": ["a", "b"], )"
    R"("opts": {"x": 1}})";

TEST(ToolParser, XmlCallWithTypedParameters) {
  const Result r = run_whole(std::string("Let me check.\n\n") + kXmlCall, weather_types());
  EXPECT_EQ(r.content, "Let me check.\n\n");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, kXmlArgs);
  EXPECT_EQ(r.calls[0].id.size(), 29u);
}

TEST(ToolParser, XmlValuesWithoutSchemaStayStrings) {
  const Result r = run_whole(kXmlCall);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments,
            R"({"city": "Paris", "days": "3", "metric": "True", "ratio": "0.5", )"
            R"("tags": "[\"a\", \"b\"]", "opts": "{\"x\":1}"})");
}

TEST(ToolParser, XmlStringValuesAreJsonEscaped) {
  const Result r = run_whole(
      "<tool_call>\n<function=say>\n<parameter=text>\n\n  \"hi\"\\ \tZürich\n\n</parameter>\n"
      "</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  // One newline is stripped at each end, as vLLM does.
  EXPECT_EQ(Json::parse(r.calls[0].arguments)["text"], "\n  \"hi\"\\ \tZürich\n");
}

TEST(ToolParser, XmlValueEndsAtNextParameterOrFunctionEnd) {
  const Result r = run_whole(
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": "1", "b": "2"})");
}

TEST(ToolParser, XmlCallWithoutParameters) {
  const Result r = run_whole("<tool_call>\n<function=now>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(ToolParser, XmlTextBetweenParametersAndBadParameterNamesAreSkipped) {
  const Result r = run_whole(
      "<tool_call>\n<function=f>\nnoise\n<parameter=a b\nc>\nx\n</parameter>\n"
      "<parameter=ok>\ny\n</parameter>\nmore noise\n</function>\nignored\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"ok": "y"})");
}

TEST(ToolParser, HermesCall) {
  const Result r = run_whole(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", "
      "\"days\":[1,2]}}\n</tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Zürich", "days": [1, 2]})");
}

TEST(ToolParser, HermesArgumentsAsStringOrParametersOrAbsent) {
  Result r = run_whole(R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)"
                       R"(<tool_call>{"name": "g", "parameters": {"b": null}}</tool_call>)"
                       R"(<tool_call>{"name": "h"}</tool_call>)");
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(r.calls[1].arguments, R"({"b": null})");
  EXPECT_EQ(r.calls[2].arguments, "{}");
}

TEST(ToolParser, SeveralCallsWithTextAround) {
  const std::string text =
      std::string("Checking both.\n") + kXmlCall +
      "\n\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"
      "\n  Done <b>.";
  const Result r = run_whole(text, weather_types());
  EXPECT_EQ(r.content, "Checking both.\nDone <b>.");  // whitespace after a call is dropped
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, kXmlArgs);
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, R"({"tz": "CET"})");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
}

TEST(ToolParser, StreamingShape) {
  ToolCallParser p(weather_types());
  ToolCallParser::Delta d = p.push("Hi <tool");
  EXPECT_EQ(d.content, "Hi ");  // a possible "<tool_call>" is held back
  EXPECT_TRUE(d.calls.empty());
  d = p.push("_call>\n<function=get_weather>\n<parameter=city>\nPar");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_EQ(d.calls[0].index, 0);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, "");
  EXPECT_EQ(d.calls[1].arguments, "{");
  EXPECT_EQ(d.calls[1].id, "");
  EXPECT_TRUE(p.push("is\n").empty());  // a value is sent once complete
  d = p.push("</parameter>\n<parameter=days>\n2\n</parameter>\n");
  ASSERT_EQ(d.calls.size(), 1u);  // fragments of one push are merged
  EXPECT_EQ(d.calls[0].arguments, R"("city": "Paris", "days": 2)");
  d = p.push("</function>\n</tool_call>\n");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "}");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.num_calls(), 1);
}

TEST(ToolParser, HeldBackPrefixIsReleased) {
  ToolCallParser p;
  EXPECT_EQ(p.push("a <tool_c").content, "a ");
  EXPECT_EQ(p.push("ar").content, "<tool_car");
  EXPECT_EQ(p.push(" <").content, " ");
  EXPECT_EQ(p.finish().content, "<");
  EXPECT_EQ(p.num_calls(), 0);
}

TEST(ToolParser, UnterminatedXmlCallCompletesAtFinish) {
  const std::string head = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n";
  for (const std::string tail : {"", "</param", "</parameter>\n<parameter=da",
                                 "</parameter>\n<parameter=days>\n4", "</parameter>\n</fun"}) {
    const Result r = run_whole(head + tail, weather_types());
    EXPECT_EQ(r.content, "") << tail;
    ASSERT_EQ(r.calls.size(), 1u) << tail;
    const std::string days = tail.find("days>") != std::string::npos ? ", \"days\": 4" : "";
    EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Paris\"" + days + "}") << tail;
  }
  const Result cut = run_whole("<tool_call>\n<function=f>\n<parameter=text>\nhalf a sent");
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, R"({"text": "half a sent"})");  // kept as far as it got
}

TEST(ToolParser, UnterminatedHermesCall) {
  Result r = run_whole(R"(<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_)");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1})");
  r = run_whole(R"(<tool_call>{"name": "f", "arguments": {"a": 1)");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, R"(<tool_call>{"name": "f", "arguments": {"a": 1)");
}

TEST(ToolParser, MalformedBlocksComeBackAsContent) {
  for (const std::string text : {
           "<tool_call>hello</tool_call> bye",
           "<tool_call>\n{not json}\n</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>",
           "<tool_call>\n<function=a b\n</function></tool_call>",
           "<tool_call>\n<function=>x</function></tool_call>",
           "<tool_call>\n<funct",
           "<tool_call>\n<function=get_wea",
           "<tool_call>  \n",
           "<tool_call>",
       }) {
    const Result r = run_whole(text);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    expect_cut_invariant(text);
  }
}

TEST(ToolParser, BlockAfterMalformedStartIsParsed) {
  const Result r = run_whole("<tool_call>\n<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(r.content, "<tool_call>\n");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "f");
}

TEST(ToolParser, InvalidUtf8DoesNotThrow) {
  const std::string bad = "\xff\xfe\xc3";
  const Result r = run_whole("<tool_call>\n<function=f>\n<parameter=a>\n" + bad +
                             "\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_TRUE(Json::accept(r.calls[0].arguments));
}

TEST(ToolParser, EveryCutGivesTheSameResult) {
  expect_cut_invariant(std::string("Let me check.\n\n") + kXmlCall, weather_types());
  expect_cut_invariant(std::string(kXmlCall) +
                           "\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": \"</\"}}\n"
                           "</tool_call>\nafter <tool <tool_call",
                       weather_types());
  expect_cut_invariant(
      "a<tool_call>\n<function=f>\n<parameter=p>\n1\n<parameter=q>\n<x></x>\n</function>"
      "</tool_call>b<tool_call>\n<function=g>\n<parameter=v>\ncut </para");
  expect_cut_invariant("<tool_call>\n<function=f>\nx</function>y</tool_call>\n \n z");
  expect_cut_invariant("<<tool_call><tool_call>{\"name\": \"f\"} </tool_call></tool_call>");
}

TEST(ToolParser, RandomTextsAreCutInvariant) {
  const std::vector<std::string> pieces = {
      "<tool_call>\n<function=f>\n",
      "<parameter=i>\n",
      "<parameter=o>\n",
      "<parameter=x>\n",
      "<parameter=s>\n",
      "\n</parameter>\n",
      "</function>\n</tool_call>",
      "\n</tool_call>\n",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"o\": [1]}}\n",
      "<tool_call>",
      "</tool_call>",
      "<function=",
      "</function>",
      "<parameter=",
      "</parameter>",
      "<tool_",
      "</param",
      "f>",
      "s>",
      "\n",
      " ",
      "<",
      ">",
      "{",
      "}",
      "\"",
      "12",
      "true",
      "[1, 'a']",
      "null",
      "text",
      "é"};
  const ToolParamTypes types = {
      {"f", {{"s", "string"}, {"i", "integer"}, {"o", "object"}, {"x", "any"}}}};
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int i = 0; i < n; ++i) {
      text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    const Result whole = run_whole(text, types);
    std::vector<std::string> chars;
    for (char c : text) chars.push_back(std::string(1, c));
    expect_same(whole, run(chars, types), "1-char chunks of " + text);
    for (int k = 0; k < 5; ++k) {
      std::vector<std::string> chunks;
      for (size_t i = 0; i < text.size();) {
        const size_t len = std::uniform_int_distribution<size_t>(1, 12)(rng);
        chunks.push_back(text.substr(i, len));
        i += len;
      }
      expect_same(whole, run(chunks, types), "random chunks of " + text);
    }
    for (const Call& c : whole.calls) EXPECT_TRUE(Json::accept(c.arguments)) << c.arguments;
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(ToolParserConvert, Integers) {
  EXPECT_EQ(convert_parameter("42", "integer"), 42);
  EXPECT_EQ(convert_parameter(" -7\n", "int"), -7);
  EXPECT_EQ(convert_parameter("+1_000", "integer"), 1000);
  EXPECT_EQ(convert_parameter("18446744073709551615", "uint64"), 18446744073709551615ull);
  EXPECT_EQ(convert_parameter("3.0", "integer"), "3.0");
  EXPECT_EQ(convert_parameter("1__0", "integer"), "1__0");
  EXPECT_EQ(convert_parameter("abc", "Integer"), "abc");
  EXPECT_EQ(convert_parameter("99999999999999999999999", "integer"), "99999999999999999999999");
}

TEST(ToolParserConvert, Numbers) {
  EXPECT_EQ(convert_parameter("2.5", "number"), 2.5);
  const Json three = convert_parameter("3.0", "number");
  EXPECT_TRUE(three.is_number_integer());  // integral floats become ints, as in vLLM
  EXPECT_EQ(three, 3);
  EXPECT_EQ(convert_parameter("1e3", "float"), 1000);
  EXPECT_EQ(convert_parameter(" -.5 ", "number"), -0.5);
  EXPECT_EQ(convert_parameter("inf", "number"), "inf");
  EXPECT_EQ(convert_parameter("nan", "number"), "nan");
  EXPECT_EQ(convert_parameter("1e999", "number"), "1e999");
  EXPECT_EQ(convert_parameter("1.2.3", "number"), "1.2.3");
  EXPECT_EQ(convert_parameter("0x10", "number"), "0x10");
}

TEST(ToolParserConvert, BooleansNullAndStrings) {
  EXPECT_EQ(convert_parameter("True", "boolean"), true);
  EXPECT_EQ(convert_parameter("false", "bool"), false);
  EXPECT_EQ(convert_parameter("yes", "boolean"), false);  // vLLM degenerates to false
  EXPECT_TRUE(convert_parameter("null", "integer").is_null());
  EXPECT_TRUE(convert_parameter("NULL", "string").is_null());
  EXPECT_EQ(convert_parameter("5", "string"), "5");
  EXPECT_EQ(convert_parameter(" x ", "enum"), " x ");
}

TEST(ToolParserConvert, ObjectsArraysAndPythonLiterals) {
  EXPECT_EQ(convert_parameter(R"({"a": [1, 2]})", "object"), Json::parse(R"({"a": [1, 2]})"));
  EXPECT_EQ(convert_parameter("{'a': True, 'b': None, 1: (2, 3,)}", "object"),
            Json::parse(R"({"a": true, "b": null, "1": [2, 3]})"));
  EXPECT_EQ(convert_parameter("[1, -2.5, 'x' \"y\", u'\\u00e9\\n', []]", "array"),
            Json::parse(R"([1, -2.5, "xy", "é\n", []])"));
  EXPECT_EQ(convert_parameter("not json", "array"), "not json");
  EXPECT_EQ(convert_parameter("{1, 2}", "object"), "{1, 2}");  // a set is not JSON
  EXPECT_EQ(convert_parameter("[1, 2", "list"), "[1, 2");
  EXPECT_EQ(convert_parameter("5", "dict"), 5);  // json.loads takes any JSON value
  EXPECT_EQ(convert_parameter("5", "any"), 5);   // other types go through literal_eval
  EXPECT_EQ(convert_parameter("1, 2", "any"), Json::parse("[1, 2]"));
  EXPECT_EQ(convert_parameter("hello", "any"), "hello");
  EXPECT_EQ(convert_parameter("007", "any"), "007");
  EXPECT_EQ(convert_parameter("", "object"), "");
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(convert_parameter(deep, "array"), deep);  // too deep: stays a string
}

TEST(ToolParserTypes, ReadsSchemas) {
  const ToolParamTypes t = tool_param_types(Json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": ["null", "number"]}, "c": {},
                     "d": true}}}},
    {"type": "function", "function": {"name": "g"}},
    {"type": "function", "function": {"name": "h", "parameters": {"x": {"type": "boolean"}}}},
    {"type": "function", "function": {"parameters": {}}},
    "junk", {"function": 3}, {"function": {"name": 7}}
  ])"));
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at("f").at("a"), "integer");
  EXPECT_EQ(t.at("f").at("b"), "number");
  EXPECT_EQ(t.at("f").at("c"), "string");
  EXPECT_EQ(t.at("f").at("d"), "string");
  EXPECT_TRUE(t.at("g").empty());
  EXPECT_EQ(t.at("h").at("x"), "boolean");  // parameters without "properties", as vLLM reads
  EXPECT_TRUE(tool_param_types(Json::object()).empty());
}

TEST(ToolParserIds, CallIds) {
  const std::string a = make_tool_call_id(), b = make_tool_call_id();
  ASSERT_EQ(a.size(), 29u);
  EXPECT_EQ(a.substr(0, 5), "call_");
  for (char c : a.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace strata::server
