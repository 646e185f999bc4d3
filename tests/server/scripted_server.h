// A server over a scripted model, in process on a loopback port, for the server tests: the
// model's greedy continuation of a prompt of `prompt_len` tokens is a given token list, so
// outputs are controllable; a step delay makes requests last.
#pragma once

#include <httplib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "strata/server/server.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {

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
  // Each forward sleeps this long (a request then lasts its tokens times the delay).
  void set_step_delay(std::chrono::milliseconds d) { delay_ = d; }
  void set_script(std::vector<int32_t> script, int32_t prompt_len) {
    script_ = std::move(script);
    prompt_len_ = prompt_len;
  }
  const ModelInfo& info() const override { return info_; }
  Device device() const override { return Device::kCpu; }
  void forward(const ForwardBatch& batch, Caches&, Tensor& logits) override {
    std::this_thread::sleep_for(delay_);
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
  std::chrono::milliseconds delay_{0};
};

class ScriptedServer : public ::testing::Test {
 protected:
  // A test fixture may change these before the server starts.
  virtual void configure(server::ServerOptions&) {}
  // The folder of the tokenizer and chat template (the bundled model's).
  virtual std::string text_dir() { return std::string(STRATA_SOURCE_DIR) + "/models/default"; }

  void SetUp() override {
    dir_ = text_dir();
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
    configure(so);
    server_ = std::make_unique<server::ApiServer>(model_, ec, so);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (!thread_.joinable()) return;
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

}  // namespace strata::testing
