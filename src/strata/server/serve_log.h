// What `strata serve` logs on stderr, as vLLM does: a line per finished request (id, prompt and
// output tokens, time, finish reasons) and a periodic stats line (prompt and generation
// throughput, running and waiting requests, KV usage, prefix cache hit rate), filtered by level:
//   INFO 2025-12-01 19:56:01 strata serve: ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/engine/engine.h"

namespace strata::server {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// "debug" | "info" | "warning" | "error"; throws Error naming --log-level otherwise.
LogLevel parse_log_level(const std::string& name);

class ServeLog {
 public:
  explicit ServeLog(LogLevel level = LogLevel::kInfo, bool log_requests = true)
      : level_(level), log_requests_(log_requests) {}

  bool enabled(LogLevel l) const { return l >= level_; }
  void write(LogLevel l, const std::string& message) const;
  // The line of a finished request, at info level unless requests are not logged.
  void request_finished(const RequestOutput& last, int64_t generated_tokens,
                        const std::vector<std::string>& finish_reasons) const;

 private:
  LogLevel level_;
  bool log_requests_;
};

// The per-request line: "request ID: prompt 12 tokens, output 34 tokens, 1.234 s, finish length".
std::string request_line(const RequestOutput& last, int64_t generated_tokens,
                         const std::vector<std::string>& finish_reasons);

// The stats line over an interval of `seconds` between two engine snapshots:
// "Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 3.4 tokens/s, Running: 1
// reqs, Waiting: 0 reqs, KV cache usage: 1.2%, Prefix cache hit rate: 50.0%" (the hit rate since
// start, as the /metrics gauge). `active`: whether anything ran or waits (else it is worth only
// a debug line).
std::string stats_line(const EngineStats& before, const EngineStats& now, double seconds, bool* active);

}  // namespace strata::server
