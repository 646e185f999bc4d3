// serve's log lines (a line per request, vLLM's periodic stats line, --log-level) and the
// model_name label on every /metrics series.
#include <gtest/gtest.h>

#include "strata/core/error.h"
#include "strata/server/metrics.h"
#include "strata/server/serve_log.h"

namespace strata::server {
namespace {

TEST(ServeLog, RequestLineNamesIdTokensTimeAndFinish) {
  RequestOutput last;
  last.request_id = "cmpl-1-0";
  last.metrics.num_prompt_tokens = 12;
  last.metrics.num_cached_tokens = 4;
  last.metrics.arrival_time = 10.0;
  last.metrics.finished_time = 11.25;
  EXPECT_EQ(request_line(last, 34, {"length", "stop"}),
            "request cmpl-1-0: prompt 12 tokens (4 cached), output 34 tokens, 1.250 s, finish length,stop");
}

TEST(ServeLog, StatsLineIsVllmsOverTheInterval) {
  EngineStats before, now;
  before.computed_prompt_tokens = 100;
  before.sampled_tokens = 10;
  now.computed_prompt_tokens = 300;
  now.sampled_tokens = 60;
  now.running = 3;
  now.waiting = 1;
  now.cache.num_blocks = 200;
  now.cache.used_blocks = 50;
  now.prefix_queries = 400;
  now.prefix_hits = 100;
  bool active = false;
  EXPECT_EQ(stats_line(before, now, 10.0, &active),
            "Avg prompt throughput: 20.0 tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 3 reqs, "
            "Waiting: 1 reqs, KV cache usage: 25.0%, Prefix cache hit rate: 25.0%");
  EXPECT_TRUE(active);
  stats_line(now, EngineStats{}, 10.0, &active);
  EXPECT_FALSE(active) << "an idle interval is only worth a debug line";
}

TEST(ServeLog, LogLevelsParseOrNameTheFlag) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarning);
  try {
    parse_log_level("loud");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--log-level"), std::string::npos);
  }
  const ServeLog log(LogLevel::kWarning);
  EXPECT_FALSE(log.enabled(LogLevel::kInfo));
  EXPECT_TRUE(log.enabled(LogLevel::kError));
}

TEST(Metrics, HistogramsCarryTheModelNameLabel) {
  Metrics m;
  RequestOutput last;
  last.metrics.arrival_time = 1;
  last.metrics.first_token_time = 1.5;
  last.metrics.finished_time = 2;
  m.on_finished(last, 3, {"stop"});
  const std::string text = m.render(LoopSnapshot{}, "tiny");
  for (const char* series : {"strata:time_to_first_token_seconds", "strata:time_per_output_token_seconds",
                             "strata:e2e_request_latency_seconds", "strata:request_prompt_tokens",
                             "strata:request_generation_tokens"}) {
    const std::string name = series;
    EXPECT_NE(text.find(name + "_count{model_name=\"tiny\"} 1\n"), std::string::npos) << name;
    EXPECT_NE(text.find(name + "_sum{model_name=\"tiny\"} "), std::string::npos) << name;
    EXPECT_NE(text.find(name + "_bucket{model_name=\"tiny\",le=\"+Inf\"} 1\n"), std::string::npos) << name;
  }
  // Every series line has the label.
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (!line.empty() && line[0] != '#') {
      EXPECT_NE(line.find("model_name=\"tiny\""), std::string::npos) << line;
    }
    at = end + 1;
  }
}

}  // namespace
}  // namespace strata::server
