// strata serve: the OpenAI-compatible HTTP server (cpp-httplib) over one engine.
//
// Routes: POST /v1/completions, POST /v1/chat/completions (SSE streaming with "data: [DONE]"),
// GET /v1/models, GET /health, GET /metrics (Prometheus), POST /tokenize, POST /detokenize.
// With an API key every /v1 route needs "Authorization: Bearer KEY" (else 401). Errors are
// OpenAI-shaped JSON bodies: 400 bad input, 401, 404 (route or model), 411 (no
// Content-Length), 413 (body over the limit), 503 (engine stopped); bad input is never a 500.
// A client that disconnects aborts its request (streamed or not), which frees its pages.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "strata/engine/engine.h"
#include "strata/server/protocol.h"
#include "strata/server/serve_log.h"

namespace strata::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (see ApiServer::port)
  std::string api_key;             // empty: no authentication
  std::string served_model_name;   // empty: the model folder's name
  size_t max_body_bytes = 16 << 20;
  int http_threads = 256;          // requests served at once (a stream holds one)
  double read_timeout_s = 30;      // a request's head and body must arrive within this
  double write_timeout_s = 30;     // a write to the client that makes no progress fails
  double keep_alive_timeout_s = 5; // an idle connection is closed after this
  LogLevel log_level = LogLevel::kInfo;
  bool log_requests = true;        // a line per finished request (info)
  double stats_interval_s = 10;    // the periodic stats line (info while anything runs)
  RequestLimits limits;
};

class ApiServer {
 public:
  // Loads the model (engine_config.model), its tokenizer and chat template; throws Error.
  ApiServer(const EngineConfig& engine_config, ServerOptions options);
  // Serves an already loaded model; engine_config.model still names the folder of its
  // tokenizer, chat template and generation_config.json (tests drive scripted models so).
  ApiServer(std::shared_ptr<Model> model, const EngineConfig& engine_config, ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the socket; throws Error when the address is taken. Returns the port.
  int bind();
  int port() const;
  // Serves until stop() or shutdown() (from another thread).
  void serve();
  // Stops at once: aborts the requests in flight and closes every connection.
  void stop();
  // Stops accepting, lets the requests in flight finish for up to timeout_s, aborts what is
  // left, and closes every connection; true when everything finished in time.
  bool shutdown(double timeout_s);
  const std::string& model_name() const;

 private:
  void start(std::unique_ptr<Engine> engine);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::server
