// The server end to end (in process, over loopback HTTP) with a scripted model: its greedy
// output is a fixed text, so reasoning and tool-call parsing are checked through every layer
// (template, engine, detokenizer, parsers, JSON and SSE) with the bundled model's tokenizer.
#include <httplib.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "strata/server/server.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

using Json = nlohmann::ordered_json;

// Logits that make `script` the greedy continuation of any prompt of `prompt_len` tokens (the
// token after position p is script[p + 1 - prompt_len]), then EOS.
class ScriptedModel : public Model {
 public:
  ScriptedModel(int64_t vocab, int32_t eos) {
    info_.model_type = "scripted";
    info_.vocab_size = vocab;
    info_.num_layers = 1;
    info_.max_position_embeddings = 4096;
    info_.eos_token_ids = {eos};
    LayerCacheSpec layer;
    layer.paged.push_back({"k", {1}, DType::kF32, 1});
    info_.cache.layers.push_back(layer);
  }
  void set_script(std::vector<int32_t> script, int32_t prompt_len) {
    script_ = std::move(script);
    prompt_len_ = prompt_len;
  }
  const ModelInfo& info() const override { return info_; }
  Device device() const override { return Device::kCpu; }
  void forward(const ForwardBatch& batch, Caches&, Tensor& logits) override {
    const int64_t n = int64_t(batch.logit_rows.size()), v = info_.vocab_size;
    logits = Tensor::empty({n, v}, DType::kF32);
    float* l = logits.data<float>();
    std::fill(l, l + n * v, 0.f);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t next = int64_t(batch.positions[size_t(batch.logit_rows[size_t(r)])]) + 1 - prompt_len_;
      const int32_t target = next >= 0 && next < int64_t(script_.size()) ? script_[size_t(next)]
                                                                         : int32_t(info_.eos_token_ids[0]);
      l[r * v + target] = 20.f;
    }
  }

 private:
  ModelInfo info_;
  std::vector<int32_t> script_;
  int32_t prompt_len_ = 0;
};

class ScriptedServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(STRATA_SOURCE_DIR) + "/models/default";
    tok_.emplace(Tokenizer::load(dir_));
    const int32_t eos = *tok_->token_to_id("<|endoftext|>");
    model_ = std::make_shared<ScriptedModel>(tok_->vocab_size(), eos);
    EngineConfig ec;
    ec.model = dir_;
    ec.kv_cache_memory = size_t(4) << 20;
    ec.max_num_seqs = 8;
    ec.log_capacity = false;
    server::ServerOptions so;
    so.port = 0;
    so.served_model_name = "scripted";
    server_ = std::make_unique<server::ApiServer>(model_, ec, so);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }

  Json post(const std::string& path, const Json& body, int expect = 200) {
    auto r = client_->Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return Json();
    EXPECT_EQ(r->status, expect) << r->body;
    return r->headers.count("Content-Type") && r->get_header_value("Content-Type") == "text/event-stream"
               ? Json(r->body)
               : Json::parse(r->body);
  }

  // Scripts `text` as the continuation of the chat prompt of `request`.
  void script_chat(const Json& request, const std::string& text) {
    Json t = {{"messages", request["messages"]}};
    if (request.contains("tools")) t["tools"] = request["tools"];
    if (request.contains("chat_template_kwargs")) t["chat_template_kwargs"] = request["chat_template_kwargs"];
    const Json tokens = post("/tokenize", t);
    const std::vector<int32_t> ids = tok_->encode(text, false);
    ASSERT_EQ(tok_->decode(ids), text) << "the script must survive a tokenizer round trip";
    model_->set_script(ids, int32_t(tokens["count"].get<int>()));
  }

  std::string dir_;
  std::optional<Tokenizer> tok_;
  std::shared_ptr<ScriptedModel> model_;
  std::unique_ptr<server::ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  int port_ = 0;
};

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
