// GET /metrics in the Prometheus text format (names after vLLM's, prefixed "strata:"): requests
// running and waiting, tokens in and out, finished requests by reason, TTFT / TPOT / end-to-end
// latency histograms, KV page and state slot usage, and the prefix cache hit rate.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "strata/engine/output.h"
#include "strata/server/engine_loop.h"

namespace strata::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // "# HELP", "# TYPE" and the _bucket / _sum / _count lines of `name`, each with the label
  // model_name (as the gauges and counters).
  std::string render(const std::string& name, const std::string& help, const std::string& model_name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // A request's last output (the engine thread calls this through EngineLoop's hook).
  void on_finished(const RequestOutput& last, int64_t generated_tokens,
                   const std::vector<std::string>& finish_reasons);
  // A request refused before it reached the engine (bad input), by HTTP status.
  void on_rejected(int status);
  std::string render(const LoopSnapshot& s, const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_, tpot_, e2e_, prompt_len_, generation_len_;
  std::map<std::string, int64_t> finished_;  // by finish reason
  std::map<int, int64_t> rejected_;          // by HTTP status
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
};

}  // namespace strata::server
