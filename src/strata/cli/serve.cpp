// strata serve: the OpenAI-compatible HTTP server.
//   strata serve [MODEL | --model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
//                [--served-model-name NAME] [engine flags]
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <thread>

#include "strata/cli/command.h"
#include "strata/cli/engine_options.h"
#include "strata/core/error.h"
#include "strata/server/server.h"

namespace strata::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;

int run(int argc, char** argv) {
  CLI::App app{"OpenAI-compatible HTTP server", "strata serve"};
  EngineOptions eo;
  server::ServerOptions so;
  int64_t max_body = int64_t(so.max_body_bytes);
  add_engine_options(app, eo);
  add_model_argument(app, eo);
  app.add_option("--host", so.host, "address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", so.port, "port (default 8000; 0: any free port, printed at start)");
  app.add_option("--api-key", so.api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  app.add_option("--served-model-name", so.served_model_name, "model name in the API (default: the folder's name)");
  app.add_option("--max-body-bytes", max_body, "largest request body accepted (default 16 MiB; larger: 413)");
  app.add_option("--http-threads", so.http_threads, "connections served at once (default 256)");
  app.add_option("--max-n", so.limits.max_n, "largest n per request (default 128)");
  CLI11_PARSE(app, argc, argv);
  STRATA_CHECK(max_body > 0, "--max-body-bytes must be positive");
  so.max_body_bytes = size_t(max_body);
  server::ApiServer srv(engine_config(eo), so);
  const int port = srv.bind();
  std::fprintf(stderr, "strata serve: model '%s' on http://%s:%d (routes /v1/completions, "
               "/v1/chat/completions, /v1/models, /health, /metrics, /tokenize, /detokenize)\n",
               srv.model_name().c_str(), so.host.c_str(), port);
  std::signal(SIGINT, [](int s) { g_signal = s; });
  std::signal(SIGTERM, [](int s) { g_signal = s; });
  std::thread watcher([&srv] {
    while (!g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::fprintf(stderr, "strata serve: stopping (signal %d)\n", int(g_signal));
    srv.stop();
  });
  srv.serve();
  g_signal = g_signal ? g_signal : SIGTERM;  // serve() returned on its own: end the watcher
  watcher.join();
  return 0;
}

const bool kRegistered = register_command({"serve", "OpenAI-compatible HTTP server", run});

}  // namespace
}  // namespace strata::cli
