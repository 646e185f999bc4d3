// strata serve: the OpenAI-compatible HTTP server.
//   strata serve [MODEL | --model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
//                [--served-model-name NAME] [engine flags]
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <atomic>
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

// The first SIGINT / SIGTERM starts the drain; a second one exits at once.
void on_signal(int s) {
  if (g_signal) {
    static const char kMsg[] = "strata serve: second signal, exiting now\n";
    (void)!::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(128 + s);
  }
  g_signal = s;
}

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
  double shutdown_timeout = 5;
  app.add_option("--http-threads", so.http_threads,
                 "requests served at once (default 256; idle connections hold none, and /health "
                 "and /metrics have their own)");
  app.add_option("--read-timeout", so.read_timeout_s,
                 "seconds for a request's head and body to arrive (default 30)");
  app.add_option("--write-timeout", so.write_timeout_s,
                 "seconds a write to a client may make no progress (default 30)");
  app.add_option("--keep-alive-timeout", so.keep_alive_timeout_s,
                 "seconds an idle connection stays open (default 5)");
  app.add_option("--shutdown-timeout", shutdown_timeout,
                 "on SIGINT/SIGTERM, seconds the requests in flight get to finish before they "
                 "are aborted (default 5; a second signal exits at once)");
  app.add_option("--max-n", so.limits.max_n, "largest n per request (default 128)");
  std::string log_level = "info";
  bool disable_log_requests = false;
  app.add_option("--log-level", log_level, "debug | info | warning | error (default info)");
  app.add_flag("--disable-log-requests", disable_log_requests,
               "no line per finished request (they are logged at info by default)");
  app.add_option("--stats-interval", so.stats_interval_s,
                 "seconds between the stats lines (throughput, requests, KV usage, prefix hits; "
                 "default 10; 0: none)");
  CLI11_PARSE(app, argc, argv);
  so.log_level = server::parse_log_level(log_level);
  so.log_requests = !disable_log_requests;
  STRATA_CHECK(max_body > 0, "--max-body-bytes must be positive");
  STRATA_CHECK(so.http_threads > 0, "--http-threads must be positive");
  STRATA_CHECK(so.read_timeout_s > 0, "--read-timeout must be positive");
  STRATA_CHECK(so.write_timeout_s > 0, "--write-timeout must be positive");
  STRATA_CHECK(so.keep_alive_timeout_s > 0, "--keep-alive-timeout must be positive");
  STRATA_CHECK(shutdown_timeout >= 0, "--shutdown-timeout must be >= 0");
  STRATA_CHECK(so.stats_interval_s >= 0, "--stats-interval must be >= 0");
  so.max_body_bytes = size_t(max_body);
  server::ApiServer srv(engine_config(eo), so);
  const int port = srv.bind();
  std::fprintf(stderr, "strata serve: model '%s' on http://%s:%d (routes /v1/completions, "
               "/v1/chat/completions, /v1/models, /health, /metrics, /tokenize, /detokenize)\n",
               srv.model_name().c_str(), so.host.c_str(), port);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (!g_signal && !served) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!g_signal) return;  // serve() ended on its own
    std::fprintf(stderr, "strata serve: stopping (signal %d): draining for up to %g s\n", int(g_signal),
                 shutdown_timeout);
    srv.shutdown(shutdown_timeout);
  });
  srv.serve();
  served = true;
  watcher.join();
  std::fprintf(stderr, "strata serve: stopped\n");
  return 0;
}

const bool kRegistered = register_command({"serve", "OpenAI-compatible HTTP server", run});

}  // namespace
}  // namespace strata::cli
