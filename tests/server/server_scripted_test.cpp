// The server end to end (in process, over loopback HTTP) with a scripted model: its greedy
// output is a fixed text, so reasoning and tool-call parsing are checked through every layer
// (template, engine, detokenizer, parsers, JSON and SSE) with the bundled model's tokenizer.
#include "scripted_server.h"

namespace strata::testing {
namespace {

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"},
  "days": {"type": "integer"}}}}}])");

const char kToolScript[] =
    "The user wants the weather.\n</think>\n\nLet me look that up.\n<tool_call>\n"
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
    "</parameter>\n</function>\n</tool_call>";

// The chat.completion.chunk deltas of an SSE body folded into one message.
Json fold_stream(const std::string& sse, std::string* finish) {
  Json m = {{"content", ""}, {"reasoning_content", ""}, {"tool_calls", Json::array()}};
  size_t at = 0;
  bool done = false;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    const std::string data = sse.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    const Json c = Json::parse(data);
    if (c["choices"].empty()) continue;
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("content")) m["content"] = m["content"].get<std::string>() + d["content"].get<std::string>();
    if (d.contains("reasoning_content")) {
      m["reasoning_content"] = m["reasoning_content"].get<std::string>() + d["reasoning_content"].get<std::string>();
    }
    for (const Json& t : d.value("tool_calls", Json::array())) {
      const size_t i = t["index"].get<size_t>();
      if (i >= m["tool_calls"].size()) m["tool_calls"].push_back({{"id", t["id"]}, {"name", ""}, {"arguments", ""}});
      Json& call = m["tool_calls"][i];
      if (t["function"].contains("name")) call["name"] = t["function"]["name"];
      call["arguments"] = call["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
    }
    if (!c["choices"][0]["finish_reason"].is_null()) *finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done) << "no data: [DONE]";
  return m;
}

TEST_F(ScriptedServer, ReasoningAndToolCallsWholeAndStreamed) {
  Json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris for 3 days?"}}}},
              {"tools", kTools},
              {"chat_template_kwargs", {{"enable_thinking", true}}},
              {"temperature", 0},
              {"max_tokens", 200}};
  script_chat(req, kToolScript);
  const Json r = post("/v1/chat/completions", req);
  const Json& choice = r["choices"][0];
  const Json& msg = choice["message"];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["reasoning_content"], "The user wants the weather.\n");
  EXPECT_EQ(msg["content"], "\n\nLet me look that up.\n");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  const Json& call = msg["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": 3})"));

  req["stream"] = true;
  std::string finish;
  const Json s = fold_stream(post("/v1/chat/completions", req).get<std::string>(), &finish);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(s["reasoning_content"], msg["reasoning_content"]);
  EXPECT_EQ(s["content"], msg["content"]);
  ASSERT_EQ(s["tool_calls"].size(), 1u);
  EXPECT_EQ(s["tool_calls"][0]["name"], "get_weather");
  EXPECT_EQ(s["tool_calls"][0]["arguments"], call["function"]["arguments"]);
}

TEST_F(ScriptedServer, HermesCallsWithoutThinkingAndToolChoiceNone) {
  Json req = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
              {"tools", kTools},
              {"temperature", 0},
              {"max_tokens", 200}};
  const std::string hermes =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 2}}\n</tool_call>";
  script_chat(req, hermes);
  Json r = post("/v1/chat/completions", req);
  const Json& msg = r["choices"][0]["message"];
  EXPECT_TRUE(msg["reasoning_content"].is_null());  // thinking off: the template closed it
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  EXPECT_EQ(Json::parse(msg["tool_calls"][1]["function"]["arguments"].get<std::string>())["city"], "Rome");
  EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);
  // tool_choice "none": the same text is plain content.
  req["tool_choice"] = "none";
  r = post("/v1/chat/completions", req);
  EXPECT_EQ(r["choices"][0]["message"]["content"], hermes);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST_F(ScriptedServer, StopStringsCutTheScriptedText) {
  Json req = {{"prompt", "Say it:"}, {"temperature", 0}, {"max_tokens", 64}, {"stop", {"brown"}}};
  const std::vector<int32_t> prompt = tok_->encode("Say it:", false);
  model_->set_script(tok_->encode(" The quick brown fox", false), int32_t(prompt.size()));
  const Json r = post("/v1/completions", req);
  EXPECT_EQ(r["choices"][0]["text"], " The quick ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["stop_reason"], "brown");
}

}  // namespace
}  // namespace strata::testing
