// The server under abuse (issue 20): malformed framing, a second server on the port, sampling
// errors naming their field, abandoned requests, idle and slow clients, the drain on shutdown.
// Raw sockets say exactly what a client sends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "scripted_server.h"
#include "strata/core/error.h"

namespace strata::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A raw client connection to the loopback port.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  ~RawClient() { close(); }
  void send(const std::string& s) { EXPECT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Reads until the server closes or `timeout_s` passes; *closed tells which.
  std::string read_all(double timeout_s, bool* closed = nullptr) {
    std::string out;
    const auto end = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, int(left)) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed) *closed = true;
        return out;
      }
      out.append(buf, size_t(n));
    }
    if (closed) *closed = false;
    return out;
  }
  // The status of the first response in `reply` ("HTTP/1.1 400 ..."), 0 when there is none.
  static int status(const std::string& reply) {
    return reply.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(reply.c_str() + 9) : 0;
  }
  static Json body(const std::string& reply) {
    const size_t at = reply.find("\r\n\r\n");
    return at == std::string::npos ? Json() : Json::parse(reply.substr(at + 4), nullptr, false);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

using ServerFraming = ScriptedServer;

TEST_F(ServerFraming, BadContentLengthIsAnsweredAtOnce) {
  const struct {
    const char* header;
    int status;
  } cases[] = {{"Content-Length: -5\r\n", 400},
               {"Content-Length: 1e20\r\n", 400},
               {"Content-Length: 100000000000000000000\r\n", 413},
               {"Content-Length: 17000000\r\n", 413},  // over the 16 MiB default
               {"Content-Length: 5\r\nContent-Length: 6\r\n", 400},
               {"", 411},
               {"Transfer-Encoding: chunked\r\n", 411}};
  for (const auto& c : cases) {
    RawClient client(port_);
    const auto start = Clock::now();
    client.send(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n") +
                c.header + "\r\n");
    bool closed = false;
    const std::string reply = client.read_all(10, &closed);
    EXPECT_EQ(RawClient::status(reply), c.status) << c.header << reply;
    EXPECT_LT(seconds_since(start), 3.0) << c.header;
    EXPECT_TRUE(closed) << "the connection must end after a framing error: " << c.header;
    EXPECT_EQ(RawClient::body(reply)["error"]["param"], "Content-Length") << reply;
  }
  // A good request still works after them.
  EXPECT_EQ(post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}})["object"], "text_completion");
}

TEST_F(ServerFraming, SamplingRangeErrorsNameTheField) {
  const std::pair<Json, const char*> cases[] = {
      {{{"temperature", -1}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_k", -5}}, "top_k"},
      {{{"min_p", 2}}, "min_p"},
      {{{"logit_bias", {{"99999999", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"5", 1000}}}}, "logit_bias"},
  };
  for (const auto& [fields, param] : cases) {
    for (const char* route : {"/v1/completions", "/v1/chat/completions"}) {
      Json body = {{"prompt", "Hi"}, {"max_tokens", 2}};
      if (std::string(route) == "/v1/chat/completions") {
        body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
      }
      body.update(fields);
      const Json r = post(route, body, 400);
      EXPECT_EQ(r["error"]["param"], param) << route << " " << fields.dump() << " -> " << r.dump();
    }
  }
}

TEST_F(ServerFraming, ASecondServerOnThePortFails) {
  EngineConfig ec;
  ec.model = dir_;
  ec.kv_cache_memory = size_t(4) << 20;
  ec.log_capacity = false;
  server::ServerOptions so;
  so.port = port_;
  server::ApiServer second(model_, ec, so);
  try {
    second.bind();
    FAIL() << "a second server bound port " << port_;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("address already in use"), std::string::npos) << e.what();
  }
}

// A server whose requests last: each engine step sleeps 20 ms.
class SlowServer : public ScriptedServer {
 protected:
  void SetUp() override {
    ScriptedServer::SetUp();
    model_->set_step_delay(std::chrono::milliseconds(20));
  }
  void configure(server::ServerOptions& so) override {
    so.http_threads = 2;
    so.read_timeout_s = 1;
    so.keep_alive_timeout_s = 1;
  }
  // A non-streaming completion of `tokens` tokens (about tokens * 20 ms), on a raw socket.
  static std::string long_request(int tokens) {
    const std::string body =
        Json({{"prompt", "Hi"}, {"max_tokens", tokens}, {"ignore_eos", true}, {"temperature", 0}}).dump();
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  double metric(const std::string& key) {
    auto r = client_->Get("/metrics");
    if (!r) return -1;
    const size_t at = r->body.find("\n" + key + " ");
    return at == std::string::npos ? -1 : std::atof(r->body.c_str() + at + key.size() + 2);
  }
};

TEST_F(SlowServer, AnAbandonedRequestIsAborted) {
  {
    RawClient client(port_);
    client.send(long_request(2000));  // 40 s if it ran to its end
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }  // the client goes away
  const auto start = Clock::now();
  const std::string aborted = "strata:request_success_total{model_name=\"scripted\",finished_reason=\"abort\"}";
  while (metric(aborted) < 1 && seconds_since(start) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(metric(aborted), 1) << "the request was not aborted";
  EXPECT_EQ(metric("strata:num_requests_running{model_name=\"scripted\"}"), 0);
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(SlowServer, ProbesAnswerWhileEveryRequestThreadIsBusy) {
  // Five idle connections, then both request threads held by long requests.
  std::vector<std::unique_ptr<RawClient>> idle, busy;
  for (int i = 0; i < 5; ++i) idle.push_back(std::make_unique<RawClient>(port_));
  for (int i = 0; i < 2; ++i) {
    busy.push_back(std::make_unique<RawClient>(port_));
    busy.back()->send(long_request(150));  // 3 s
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const char* probe : {"/health", "/metrics"}) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(1, 0);
    const auto start = Clock::now();
    auto r = c.Get(probe);
    ASSERT_TRUE(r) << probe << " did not answer while the request threads were busy";
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(seconds_since(start), 1.0) << probe;
  }
  for (auto& b : busy) EXPECT_EQ(RawClient::status(b->read_all(10)), 200);
}

TEST_F(SlowServer, IdleAndSlowClientsAreCutOff) {
  RawClient idle(port_);
  bool closed = false;
  auto start = Clock::now();
  idle.read_all(5, &closed);
  EXPECT_TRUE(closed) << "an idle connection stayed open past the keep-alive timeout";
  EXPECT_LT(seconds_since(start), 3.0);

  // A byte every 200 ms: the head is not done within the 1 s read timeout.
  RawClient slow(port_);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
  start = Clock::now();
  closed = false;
  for (char ch : head) {
    if (::send(slow.fd(), &ch, 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{slow.fd(), POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) break;  // the server answered or closed
  }
  slow.read_all(3, &closed);
  EXPECT_TRUE(closed) << "a slow client held its connection";
  EXPECT_LT(seconds_since(start), 4.0);
}

TEST_F(SlowServer, ShutdownDrainsThenAborts) {
  // A short request finishes within the drain.
  auto quick = std::async(std::launch::async, [this] {
    RawClient c(port_);
    c.send(long_request(10));
    return c.read_all(10);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A long one does not, and is aborted at the deadline.
  auto slow = std::async(std::launch::async, [this] {
    RawClient c(port_);
    c.send(long_request(2000));
    return c.read_all(20);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  EXPECT_FALSE(server_->shutdown(1.0));
  EXPECT_LT(seconds_since(start), 4.0);
  thread_.join();
  const std::string q = quick.get(), s = slow.get();
  EXPECT_EQ(RawClient::status(q), 200) << q;
  EXPECT_EQ(RawClient::body(q)["choices"][0]["finish_reason"], "length") << q;
  EXPECT_EQ(RawClient::status(s), 200) << s;
  EXPECT_EQ(RawClient::body(s)["choices"][0]["finish_reason"], "abort") << s;
  // No new connection is accepted.
  EXPECT_FALSE(RawClient(port_).connected());
}

}  // namespace
}  // namespace strata::testing

namespace strata::testing {
namespace {

// The bundled model's tokenizer with a chat template that does not compile.
class BrokenTemplateServer : public ScriptedServer {
 protected:
  std::string text_dir() override {
    const std::string src = std::string(STRATA_SOURCE_DIR) + "/models/default";
    const std::string dir = ::testing::TempDir() + "/strata_broken_template";
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(src + "/tokenizer.json", dir + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
    std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "{% if messages %}unclosed"})";
    return dir;
  }
};

TEST_F(BrokenTemplateServer, ServesCompletionsAndNamesTheTemplateOnChat) {
  model_->set_script(tok_->encode(" fine", false), int32_t(tok_->encode("Hi", true).size()));
  const Json c = post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(c["object"], "text_completion");
  const Json r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, 400);
  const std::string message = r["error"]["message"];
  EXPECT_NE(message.find("tokenizer_config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("chat template"), std::string::npos) << message;
  EXPECT_EQ(r["error"]["code"], "chat_template_error");
}

}  // namespace
}  // namespace strata::testing
