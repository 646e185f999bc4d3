// /v1/responses without a model: the body parsed into its chat request (input items, the flat
// tools, instructions, max_output_tokens), the 400s naming their field, and the output items
// with their streaming events.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/server/responses_output.h"
#include "strata/server/responses_protocol.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;

const RequestLimits kLimits;

ResponsesRequest parse(const std::string& text) { return parse_responses_request(parse_body(text, kLimits), kLimits); }

std::string param_of(const std::string& text) {
  try {
    parse(text);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << text;
    return e.param();
  }
  ADD_FAILURE() << "no error for " << text;
  return "";
}

TEST(ResponsesProtocol, StringInputIsOneUserMessage) {
  const ResponsesRequest r = parse(R"({"input": "hi", "max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9})");
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0]["role"], "user");
  EXPECT_EQ(r.chat.messages[0]["content"], "hi");
  EXPECT_EQ(r.chat.gen.max_tokens, 7);
  EXPECT_EQ(r.chat.gen.sampling.temperature, 0.5);
  EXPECT_EQ(r.chat.gen.sampling.top_p, 0.9);
  EXPECT_FALSE(r.chat.gen.stream);
  EXPECT_FALSE(r.instructions);
}

TEST(ResponsesProtocol, InstructionsLeadAndItemsBecomeChatMessages) {
  const ResponsesRequest r = parse(R"({"instructions": "be brief", "stream": true, "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "message", "role": "developer", "content": "dev"},
      {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{\"x\": 1}"},
      {"type": "function_call_output", "call_id": "call_9", "output": "42"},
      {"type": "reasoning", "id": "rs_1", "summary": []}]})");
  const Json& m = r.chat.messages;
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0], Json({{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(m[1]["content"], "ab");
  EXPECT_EQ(m[2]["role"], "system");  // developer, as chat completions maps it
  EXPECT_EQ(m[3]["role"], "assistant");
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "call_9");
  EXPECT_EQ(m[3]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m[4]["role"], "tool");
  EXPECT_EQ(m[4]["tool_call_id"], "call_9");
  EXPECT_EQ(m[4]["content"], "42");
  EXPECT_TRUE(r.chat.gen.stream);
  EXPECT_EQ(*r.instructions, "be brief");
}

TEST(ResponsesProtocol, FlatToolsBecomeChatTools) {
  const ResponsesRequest r = parse(R"({"input": "x", "tools": [{"type": "function", "name": "get_weather",
      "description": "d", "parameters": {"type": "object"}}], "tool_choice": {"type": "function", "name": "get_weather"}})");
  ASSERT_TRUE(r.chat.has_tools());
  EXPECT_EQ(r.chat.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.chat.tools[0]["function"]["parameters"], Json({{"type", "object"}}));
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.chat.tool_choice_name, "get_weather");
  EXPECT_EQ(r.tools[0]["name"], "get_weather");  // echoed back as given
  EXPECT_EQ(parse(R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": "none"})").chat.tool_choice,
            ToolChoice::kNone);
}

TEST(ResponsesProtocol, ErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "input"},
      {R"({"input": 3})", "input"},
      {R"({"input": []})", "input"},
      {R"({"input": ["x"]})", "input[0]"},
      {R"({"input": [{"role": "user"}]})", "input[0].content"},
      {R"({"input": [{"content": "x"}]})", "input[0].role"},
      {R"({"input": [{"role": "tool", "content": "x"}]})", "input[0].role"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})", "input[0].content[0].type"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})", "input[0].content[0].text"},
      {R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})", "input[0].call_id"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input[0].output"},
      {R"({"input": [{"type": "item_reference", "id": "x"}]})", "input[0].type"},
      {R"({"input": "x", "instructions": 1})", "instructions"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "max_output_tokens": "5"})", "max_output_tokens"},
      {R"({"input": "x", "previous_response_id": "resp_1"})", "previous_response_id"},
      {R"({"input": "x", "conversation": "c"})", "conversation"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "text": {"format": {"type": "json_object"}}})", "text.format"},
      {R"({"input": "x", "tools": {}})", "tools"},
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type"},
      {R"({"input": "x", "tools": [{"type": "function"}]})", "tools[0].name"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 3}]})", "tools[0].parameters"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "description": 3}]})", "tools[0].description"},
      {R"({"input": "x", "tool_choice": {"type": "web_search"}})", "tool_choice.type"},
      {R"({"input": "x", "tool_choice": "sometimes"})", "tool_choice"},
      {R"({"input": "x", "temperature": "hot"})", "temperature"},
      {R"({"input": "x", "metadata": 1})", "metadata"},
      {R"({"input": "x", "model": 1})", "model"},
  };
  for (const auto& [text, param] : cases) EXPECT_EQ(param_of(text), param) << text;
}

TEST(ResponsesProtocol, IgnoredFieldsAreAccepted) {
  const ResponsesRequest r = parse(R"({"input": "x", "store": true, "reasoning": {"effort": "low"},
      "include": [], "parallel_tool_calls": true, "truncation": "disabled", "text": {"format": {"type": "text"}},
      "metadata": {"k": "v"}, "user": "u"})");
  EXPECT_EQ(r.metadata, Json({{"k", "v"}}));
  EXPECT_EQ(parse(R"({"input": "x", "chat_template_kwargs": {"enable_thinking": true}})").chat.template_kwargs,
            Json({{"enable_thinking", true}}));
  EXPECT_EQ(r.user, "u");
}

std::vector<std::string> types(const std::vector<Json>& events) {
  std::vector<std::string> t;
  for (const Json& e : events) t.push_back(e["type"]);
  return t;
}

TEST(ResponseItems, ReasoningThenTextThenACall) {
  ResponseItems items("abc");
  std::vector<Json> ev;
  auto add = [&](std::vector<Json> more) { ev.insert(ev.end(), more.begin(), more.end()); };
  add(items.push({"thin", "", {}}));
  add(items.push({"king", "", {}}));
  add(items.push({"", "Hel", {}}));
  add(items.push({"", "lo", {}}));
  add(items.push({"", "", {{0, "call_1", "f", "{\"a\""}}}));
  add(items.push({"", "", {{0, "", "", ": 1}"}}}));
  add(items.finish("completed"));
  EXPECT_EQ(types(ev), (std::vector<std::string>{
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done"}));
  const Json& out = items.output();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["id"], "rs_abc_0");
  EXPECT_EQ(out[0]["content"][0], Json({{"type", "reasoning_text"}, {"text", "thinking"}}));
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_EQ(out[1]["content"][0]["text"], "Hello");
  EXPECT_EQ(out[1]["content"][0]["type"], "output_text");
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["call_id"], "call_1");
  EXPECT_EQ(out[2]["name"], "f");
  EXPECT_EQ(out[2]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(out[2]["status"], "completed");
  // Indices point at the item each event builds.
  for (const Json& e : ev) {
    if (e.contains("output_index")) {
      const size_t i = e["output_index"];
      if (e.contains("item_id")) EXPECT_EQ(e["item_id"], out[i]["id"]) << e.dump();
    }
  }
  EXPECT_EQ(ev[11]["text"], "Hello");
  EXPECT_EQ(ev[17]["arguments"], "{\"a\": 1}");
}

TEST(ResponseItems, NoOutputGivesAnEmptyIncompleteMessage) {
  ResponseItems items("z");
  const std::vector<Json> ev = items.finish("incomplete");
  ASSERT_EQ(items.output().size(), 1u);
  EXPECT_EQ(items.output()[0]["type"], "message");
  EXPECT_EQ(items.output()[0]["status"], "incomplete");
  EXPECT_EQ(items.output()[0]["content"][0]["text"], "");
  EXPECT_EQ(ev.size(), 5u);
}

TEST(ResponseItems, TwoCallsAreTwoItems) {
  ResponseItems items("t");
  (void)items.push({"", "", {{0, "call_a", "f", "{}"}, {1, "call_b", "g", "{}"}}});
  (void)items.finish("completed");
  ASSERT_EQ(items.output().size(), 2u);
  EXPECT_EQ(items.output()[0]["name"], "f");
  EXPECT_EQ(items.output()[1]["name"], "g");
  EXPECT_EQ(items.output()[1]["id"], "fc_t_1");
}

}  // namespace
}  // namespace strata::server
