#include "strata/server/serve_log.h"

#include <cstdio>
#include <ctime>

#include "strata/core/error.h"

namespace strata::server {

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  fail("--log-level must be debug, info, warning or error, got '", name, "'");
}

void ServeLog::write(LogLevel l, const std::string& message) const {
  if (!enabled(l)) return;
  static const char* const kNames[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
  char when[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  std::fprintf(stderr, "%s %s strata serve: %s\n", kNames[int(l)], when, message.c_str());
}

void ServeLog::request_finished(const RequestOutput& last, int64_t generated_tokens,
                                const std::vector<std::string>& finish_reasons) const {
  if (log_requests_ && enabled(LogLevel::kInfo)) {
    write(LogLevel::kInfo, request_line(last, generated_tokens, finish_reasons));
  }
}

std::string request_line(const RequestOutput& last, int64_t generated_tokens,
                         const std::vector<std::string>& finish_reasons) {
  const RequestMetrics& m = last.metrics;
  std::string reasons;
  for (const std::string& r : finish_reasons) reasons += (reasons.empty() ? "" : ",") + r;
  char time[32];
  std::snprintf(time, sizeof time, "%.3f", m.finished_time > 0 ? m.finished_time - m.arrival_time : 0.0);
  return cat("request ", last.request_id, ": prompt ", m.num_prompt_tokens, " tokens (", m.num_cached_tokens,
             " cached), output ", generated_tokens, " tokens, ", time, " s, finish ",
             reasons.empty() ? "none" : reasons);
}

std::string stats_line(const EngineStats& before, const EngineStats& now, double seconds, bool* active) {
  const double s = seconds > 0 ? seconds : 1;
  const int64_t prompt = now.computed_prompt_tokens - before.computed_prompt_tokens;
  const int64_t generated = now.sampled_tokens - before.sampled_tokens;
  *active = prompt > 0 || generated > 0 || now.running > 0 || now.waiting > 0;
  const CacheUsage& c = now.cache;
  char line[256];
  std::snprintf(line, sizeof line,
                "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                "Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
                double(prompt) / s, double(generated) / s, int(now.running), int(now.waiting),
                c.num_blocks ? 100.0 * c.used_blocks / c.num_blocks : 0.0,
                now.prefix_queries ? 100.0 * double(now.prefix_hits) / double(now.prefix_queries) : 0.0);
  return line;
}

}  // namespace strata::server
